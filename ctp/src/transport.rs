//! Transports that carry CTP packets: a UDP socket (wire-compatible with CTP,
//! peer = `SocketAddr`) and an EDP socket (the same packet as the EDP payload,
//! peer = `(MAC, port)`). Both are nonblocking and `mio` sources.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

use edp::link::fault::{FaultConfig, FaultLink};
use edp::{EdpConfig, EdpSocket, MacAddr};
use socket2::{Domain, Protocol, Socket, Type};

use crate::endpoint::PeerAddr;

/// A datagram transport under CTP. Always nonblocking.
pub trait Transport: Send + 'static {
    /// Peer address type.
    type Addr: PeerAddr;

    /// Sends one datagram to `to`. Errors: `WouldBlock` when the socket's
    /// queue is full (the caller keeps the datagram and retries); others from
    /// the OS.
    fn send_to(&mut self, buf: &[u8], to: Self::Addr) -> io::Result<()>;

    /// Receives one datagram into `buf`. Errors: `WouldBlock` when none is ready.
    fn recv_from(&mut self, buf: &mut [u8]) -> io::Result<(usize, Self::Addr)>;

    /// Largest datagram the transport carries, bytes.
    fn max_datagram(&self) -> usize;

    /// The broadcast destination, if configured.
    fn broadcast_addr(&self) -> Option<Self::Addr>;

    /// The socket to register with the event loop; `None` for in-memory links.
    fn source(&mut self) -> Option<&mut dyn mio::event::Source>;

    /// When the transport itself holds a delayed datagram to release (fault
    /// injection), so the driver wakes for it.
    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// Human-readable local address.
    fn local_name(&self) -> String;
}

/// Default UDP socket buffers in bytes (capped by `net.core.rmem_max` / `wmem_max`).
pub const UDP_SOCKET_BUFFER: usize = 4 << 20;

/// CTP over a UDP socket (CTP v1.2's own transport).
#[derive(Debug)]
pub struct UdpTransport {
    sock: mio::net::UdpSocket,
    broadcast: Option<SocketAddr>,
}

impl UdpTransport {
    /// Binds a nonblocking UDP socket to `addr` with 4 MiB buffers (as far as
    /// the kernel allows). With `broadcast` set, SO_BROADCAST is enabled and
    /// broadcast commands go to that address (e.g. `10.0.0.255:1515`).
    ///
    /// Errors: address resolution and socket errors (EADDRINUSE etc.).
    pub fn bind(addr: impl ToSocketAddrs, broadcast: Option<SocketAddr>) -> io::Result<Self> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        // Best effort: the kernel caps these at rmem_max / wmem_max.
        let _ = s.set_recv_buffer_size(UDP_SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(UDP_SOCKET_BUFFER);
        if broadcast.is_some() {
            s.set_broadcast(true)?;
        }
        s.set_nonblocking(true)?;
        s.bind(&addr.into())?;
        let std: std::net::UdpSocket = s.into();
        Ok(Self {
            sock: mio::net::UdpSocket::from_std(std),
            broadcast,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }
}

impl Transport for UdpTransport {
    type Addr = SocketAddr;

    fn send_to(&mut self, buf: &[u8], to: SocketAddr) -> io::Result<()> {
        self.sock.send_to(buf, to).map(|_| ())
    }
    fn recv_from(&mut self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.sock.recv_from(buf)
    }
    fn max_datagram(&self) -> usize {
        65507
    }
    fn broadcast_addr(&self) -> Option<SocketAddr> {
        self.broadcast
    }
    fn source(&mut self) -> Option<&mut dyn mio::event::Source> {
        Some(&mut self.sock)
    }
    fn local_name(&self) -> String {
        self.sock
            .local_addr()
            .map_or_else(|e| format!("udp (?: {e})"), |a| format!("udp {a}"))
    }
}

/// An EDP peer: MAC address and EDP port.
pub type EdpAddr = (MacAddr, u16);

/// CTP over an EDP socket: the CTP packet is the EDP payload.
#[derive(Debug)]
pub struct EdpTransport {
    sock: EdpSocket,
    broadcast_port: u16,
    has_fd: bool,
    mtu: usize,
}

impl EdpTransport {
    /// Wraps a bound EDP socket (set nonblocking here). Broadcasts go to
    /// ff:ff:ff:ff:ff:ff at `broadcast_port` (CTP nodes share one port).
    pub fn new(mut sock: EdpSocket, broadcast_port: u16) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        let has_fd = sock.link().raw_fd().is_some();
        let mtu = sock.mtu();
        Ok(Self {
            sock,
            broadcast_port,
            has_fd,
            mtu,
        })
    }

    /// Binds `port` on `iface` (see `EdpSocket::bind_with`); broadcasts go to
    /// the same port on every node.
    ///
    /// Errors: those of `EdpSocket::bind_with` (EPERM names CAP_NET_RAW).
    pub fn bind(iface: &str, port: u16, cfg: &EdpConfig) -> io::Result<Self> {
        let sock = EdpSocket::bind_with((iface, port), cfg)?;
        let port = sock.local_addr()?.2;
        Self::new(sock, port)
    }

    /// Like [`EdpTransport::bind`], with the link wrapped in a
    /// [`FaultLink`] injecting `faults` on the send side (netgauge `--loss`).
    ///
    /// Errors: `InvalidInput` for an invalid fault config; those of
    /// `EdpSocket::bind_wrapped`.
    pub fn bind_with_faults(
        iface: &str,
        port: u16,
        cfg: &EdpConfig,
        faults: FaultConfig,
    ) -> io::Result<Self> {
        faults
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let sock = EdpSocket::bind_wrapped((iface, port), cfg, move |l| {
            Box::new(FaultLink::new(l, faults))
        })?;
        let port = sock.local_addr()?.2;
        Self::new(sock, port)
    }

    /// Gives back the EDP socket.
    pub fn into_socket(self) -> EdpSocket {
        self.sock
    }

    /// The EDP socket.
    pub fn socket(&self) -> &EdpSocket {
        &self.sock
    }

    /// Local `(interface, MAC, port)`.
    pub fn local_addr(&self) -> io::Result<(String, MacAddr, u16)> {
        self.sock.local_addr()
    }
}

impl Transport for EdpTransport {
    type Addr = EdpAddr;

    fn send_to(&mut self, buf: &[u8], to: EdpAddr) -> io::Result<()> {
        self.sock.send_to(buf, to).map(|_| ())
    }
    fn recv_from(&mut self, buf: &mut [u8]) -> io::Result<(usize, EdpAddr)> {
        let (n, mac, port) = self.sock.recv_from(buf)?;
        Ok((n, (mac, port)))
    }
    fn max_datagram(&self) -> usize {
        self.mtu
    }
    fn broadcast_addr(&self) -> Option<EdpAddr> {
        Some((MacAddr::BROADCAST, self.broadcast_port))
    }
    fn source(&mut self) -> Option<&mut dyn mio::event::Source> {
        if self.has_fd {
            Some(&mut self.sock)
        } else {
            None
        }
    }
    fn poll_at(&self) -> Option<Instant> {
        self.sock.link().poll_at()
    }
    fn local_name(&self) -> String {
        match self.sock.local_addr() {
            Ok((i, m, p)) => format!("edp {i} {m} port {p}"),
            Err(e) => format!("edp (?: {e})"),
        }
    }
}
