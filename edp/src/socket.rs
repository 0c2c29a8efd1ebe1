//! [`EdpSocket`]: EDP datagram sockets with a `std::net::UdpSocket`-like API.
//!
//! Addresses are `(interface, MAC, port)`. A socket owns its port exclusively
//! across processes ([`crate::ports`]) and, when bound to a real interface,
//! has its own AF_PACKET socket whose kernel filter passes only frames for
//! that port (and, once connected, only from the peer): no shared daemon, no
//! locks, one `mio::event::Source` per socket (DESIGN.md, principle 3).
//!
//! Hot path: no allocation per datagram. The transmit and receive frame
//! buffers are allocated once (link MTU + 14 bytes each); frames that are
//! malformed (`wire::EdpFrame::parse` fails), not addressed to this socket,
//! or not from the connected peer are counted in [`EdpStats::dropped`] and
//! skipped.
//!
//! Sockets see frames arriving on their interface, not frames their own host
//! sends (`PACKET_IGNORE_OUTGOING`): two sockets talk across a link (e.g.
//! between network namespaces joined by a veth pair), not within one host.
//!
//! Waiting: a blocking receive polls the link's descriptor with `ppoll(2)`
//! (microsecond timeout) or, in busy-poll mode, spins on the nonblocking
//! receive; both honour the read timeout.

use std::borrow::Borrow;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::echo;
use crate::event::poll_fd;
use crate::link::packet::{FilterSpec, PacketConfig, PacketLink, DEFAULT_SOCKET_BUFFER};
use crate::link::Link;
use crate::ports::{self, PortLease};
use crate::wire::{
    emit_edp_frame, EdpFrame, EthernetRepr, MacAddr, CONTROL_PORT, EDP_HEADER_LEN, ETHERTYPE_EDP,
    ETH_HEADER_LEN,
};

/// Datagrams per `sendmmsg` in [`EdpSocket::send_batch`].
pub const SEND_BATCH: usize = crate::link::packet::MAX_BATCH;

/// Options of [`EdpSocket::bind_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdpConfig {
    /// Ethertype (default EDP 0x88B5).
    pub ethertype: u16,
    /// Spin on the nonblocking receive instead of sleeping in poll(2)
    /// (lower latency, one core busy). Also sets `SO_BUSY_POLL` when allowed.
    pub busy_poll: bool,
    /// Read frames from a TPACKET_V2 ring of this many bytes (`None` = plain recv).
    pub rx_ring: Option<usize>,
    /// Socket receive buffer in bytes.
    pub rcvbuf: usize,
    /// Socket send buffer in bytes.
    pub sndbuf: usize,
    /// Send with `PACKET_QDISC_BYPASS`: frames go straight to the driver,
    /// skipping the interface's queueing discipline (lower latency; no
    /// traffic shaping, and a full driver queue drops instead of queueing).
    pub qdisc_bypass: bool,
    /// Take part in answering echo requests on this interface (see
    /// [`crate::echo`]): one responder thread per process, interface and
    /// ethertype, shared by all sockets.
    pub echo_responder: bool,
}

impl Default for EdpConfig {
    fn default() -> Self {
        Self {
            ethertype: ETHERTYPE_EDP,
            busy_poll: false,
            rx_ring: None,
            rcvbuf: DEFAULT_SOCKET_BUFFER,
            sndbuf: DEFAULT_SOCKET_BUFFER,
            qdisc_bypass: false,
            echo_responder: true,
        }
    }
}

/// Per-socket counters (the thesis's netgauge module read the same ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdpStats {
    /// Datagrams handed to the link.
    pub sent: u64,
    /// Datagrams the link refused with an error (not counting `WouldBlock`
    /// on a nonblocking socket, which the caller retries).
    pub send_errors: u64,
    /// Datagrams delivered to the caller.
    pub received: u64,
    /// Frames received and discarded: malformed, for another port or
    /// address, from a non-peer while connected, or larger than the
    /// caller's buffer.
    pub dropped: u64,
    /// Frames the kernel dropped before this socket could read them (its
    /// receive buffer or RX ring was full), from `PACKET_STATISTICS`; always
    /// 0 over links without a packet socket.
    pub kernel_drops: u64,
}

/// How a socket built over an arbitrary link holds its port.
#[derive(Debug)]
pub enum Binding {
    /// An exclusive lease from [`ports::allocate`].
    Lease(PortLease),
    /// A bare port number without cross-process exclusivity (simulations).
    Port(u16),
}

impl From<PortLease> for Binding {
    fn from(l: PortLease) -> Self {
        Binding::Lease(l)
    }
}

impl From<u16> for Binding {
    fn from(p: u16) -> Self {
        Binding::Port(p)
    }
}

/// An EDP datagram socket. See the module documentation.
pub struct EdpSocket {
    link: Box<dyn Link>,
    iface: String,
    mac: MacAddr,
    ethertype: u16,
    port: u16,
    _lease: Option<PortLease>,
    /// Descriptor of our own PacketLink (possibly inside a wrapper, which
    /// owns it as long as `link` lives): its kernel filter is narrowed on connect.
    filter_fd: Option<RawFd>,
    peer: Option<(MacAddr, u16)>,
    nonblocking: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    busy_poll: bool,
    tx: Vec<u8>,
    rx: Vec<u8>,
    batch_tx: Vec<u8>,
    stats: EdpStats,
    kernel_drops: std::cell::Cell<u64>,
    _responder: Option<std::sync::Arc<echo::Responder>>,
}

impl std::fmt::Debug for EdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdpSocket")
            .field("iface", &self.iface)
            .field("mac", &self.mac)
            .field("port", &self.port)
            .field("ethertype", &format_args!("{:#06x}", self.ethertype))
            .field("peer", &self.peer)
            .field("nonblocking", &self.nonblocking)
            .field("busy_poll", &self.busy_poll)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Checks a socket timeout as `std::net` does: `Some(0)` is an
/// `InvalidInput` error naming `which` ("read" or "write"); `None` = wait
/// forever. Shared by the EDP and ESP sockets.
pub fn checked_timeout(t: Option<Duration>, which: &str) -> io::Result<Option<Duration>> {
    if t == Some(Duration::ZERO) {
        return Err(invalid(format!("{which} timeout must not be zero")));
    }
    Ok(t)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl EdpSocket {
    /// Binds `port` on interface `iface` with default options; port 0 takes
    /// the next free ephemeral port. See [`EdpSocket::bind_with`].
    pub fn bind(addr: (&str, u16)) -> io::Result<Self> {
        Self::bind_with(addr, EdpConfig::default())
    }

    /// Binds `port` on `iface` (0 = next free ephemeral port) with `config`:
    /// takes the port lease, opens an AF_PACKET socket whose kernel filter
    /// passes only this port, and (if `config.echo_responder`) joins the
    /// process's echo responder for the interface.
    ///
    /// Errors: `AddrInUse` when the port is owned by another socket;
    /// `NotFound` naming an unknown interface; `PermissionDenied` naming
    /// CAP_NET_RAW and the `setcap` command; socket option errors.
    pub fn bind_with(addr: (&str, u16), config: impl Borrow<EdpConfig>) -> io::Result<Self> {
        Self::bind_wrapped(addr, config, |link| link)
    }

    /// Like [`EdpSocket::bind_with`], with the AF_PACKET link passed through
    /// `wrap` before the socket uses it, e.g. to inject faults:
    /// `EdpSocket::bind_wrapped(("eth0", 0), cfg, |l| Box::new(FaultLink::new(l, faults)))`.
    /// The kernel filter still applies (and is narrowed on connect) as long
    /// as the wrapper's `raw_fd()` is the packet socket's, as
    /// `FaultLink`'s is: the wrapper only sees this socket's frames.
    ///
    /// Errors: as [`EdpSocket::bind_with`].
    pub fn bind_wrapped(
        addr: (&str, u16),
        config: impl Borrow<EdpConfig>,
        wrap: impl FnOnce(Box<dyn Link>) -> Box<dyn Link>,
    ) -> io::Result<Self> {
        let config = config.borrow();
        let (iface, port) = addr;
        let lease = ports::allocate(iface, config.ethertype, port)?;
        let mut link = PacketLink::open(
            iface,
            &PacketConfig {
                ethertype: config.ethertype,
                rcvbuf: config.rcvbuf,
                sndbuf: config.sndbuf,
                filter: Some(FilterSpec::port(config.ethertype, lease.port())),
                rx_ring: config.rx_ring,
                qdisc_bypass: config.qdisc_bypass,
                ..PacketConfig::default()
            },
        )?;
        if config.busy_poll {
            if let Err(e) = link.set_busy_poll(true) {
                // User-space spinning below works without it.
                log::debug!("EDP socket on {iface}: {e}; spinning in user space only");
            }
        }
        let fd = link.fd().as_raw_fd();
        let responder = if config.echo_responder {
            Some(echo::shared_responder(iface, config.ethertype)?)
        } else {
            None
        };
        let mut s = Self::from_link_with(wrap(Box::new(link)), lease, config)?;
        // Only a wrapper that still exposes our packet socket (and so owns
        // it) lets us narrow its filter and read its counters later.
        if s.link.raw_fd() == Some(fd) {
            s.filter_fd = Some(fd);
        }
        s._responder = responder;
        Ok(s)
    }

    /// Builds a socket over any link (a `SimLink`, a `FaultLink` wrapping a
    /// `PacketLink`, ...) with the default ethertype. See
    /// [`EdpSocket::from_link_with`].
    pub fn from_link(link: Box<dyn Link>, binding: impl Into<Binding>) -> io::Result<Self> {
        Self::from_link_with(link, binding, &EdpConfig::default())
    }

    /// Builds a socket over `link`. With a [`Binding::Lease`] the port is
    /// the lease's and `local_addr` names its interface; a bare
    /// [`Binding::Port`] gives no cross-process exclusivity. Only
    /// `ethertype` and `busy_poll` of `config` apply (the link is already open).
    ///
    /// Errors: `InvalidInput` for port 0 (control), or a link MTU too small
    /// to carry the EDP header.
    pub fn from_link_with(
        link: Box<dyn Link>,
        binding: impl Into<Binding>,
        config: &EdpConfig,
    ) -> io::Result<Self> {
        let (lease, port, iface) = match binding.into() {
            Binding::Lease(l) => {
                let p = l.port();
                let i = l.iface().to_string();
                (Some(l), p, i)
            }
            Binding::Port(p) => (None, p, String::new()),
        };
        if port == CONTROL_PORT {
            return Err(invalid(
                "EDP port 0 is reserved for control messages (echo); bind another port".into(),
            ));
        }
        let mtu = link.mtu();
        if mtu <= EDP_HEADER_LEN {
            return Err(invalid(format!(
                "link MTU of {mtu} bytes cannot carry the {EDP_HEADER_LEN}-byte EDP header"
            )));
        }
        let frame = mtu + ETH_HEADER_LEN;
        Ok(Self {
            mac: link.mac(),
            link,
            iface,
            ethertype: config.ethertype,
            port,
            _lease: lease,
            filter_fd: None,
            peer: None,
            nonblocking: false,
            read_timeout: None,
            write_timeout: None,
            busy_poll: config.busy_poll,
            tx: vec![0; frame],
            // Slack so that an oversized frame is seen whole and rejected
            // as Oversized rather than silently truncated.
            rx: vec![0; frame + 64],
            batch_tx: Vec::new(),
            stats: EdpStats::default(),
            kernel_drops: std::cell::Cell::new(0),
            _responder: None,
        })
    }

    /// Largest datagram in bytes: link MTU - 6 (the EDP header). Larger
    /// datagrams are refused with `InvalidInput`, never truncated.
    pub fn mtu(&self) -> usize {
        self.link.mtu() - EDP_HEADER_LEN
    }

    /// Counters since the socket was created. On a packet socket this reads
    /// the kernel's drop counter (one getsockopt(2) per call).
    pub fn stats(&self) -> EdpStats {
        if let Some(fd) = self.filter_fd {
            // SAFETY: the descriptor is owned by self.link, alive for this call.
            let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            // The kernel resets its counters on read: accumulate them here.
            if let Ok(k) = crate::link::packet::read_kernel_stats(bfd) {
                self.kernel_drops.set(self.kernel_drops.get() + k.drops);
            }
        }
        EdpStats {
            kernel_drops: self.kernel_drops.get(),
            ..self.stats
        }
    }

    /// `(interface, MAC, port)` of this socket (interface is empty for a
    /// socket built with a bare port over an in-memory link).
    pub fn local_addr(&self) -> io::Result<(String, MacAddr, u16)> {
        Ok((self.iface.clone(), self.mac, self.port))
    }

    /// `(MAC, port)` of the connected peer. Errors: `NotConnected`.
    pub fn peer_addr(&self) -> io::Result<(MacAddr, u16)> {
        self.peer.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "EDP socket is not connected")
        })
    }

    /// The ethertype this socket uses.
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// The underlying link (its MAC, MTU, descriptor, `poll_at`).
    pub fn link(&self) -> &dyn Link {
        &*self.link
    }

    /// Fixes the peer: `send` goes to it and `recv` only returns its
    /// datagrams (others are counted as dropped). On a socket bound with
    /// [`EdpSocket::bind_with`] the kernel filter is narrowed to the peer too.
    ///
    /// Errors: `InvalidInput` for port 0; filter errors.
    pub fn connect(&mut self, mac: MacAddr, port: u16) -> io::Result<()> {
        if port == CONTROL_PORT {
            return Err(invalid("cannot connect to EDP port 0 (control)".into()));
        }
        if let Some(fd) = self.filter_fd {
            // SAFETY: the descriptor is owned by self.link, alive for this call.
            let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            let spec = FilterSpec {
                ethertype: self.ethertype,
                port: self.port,
                extra_ports: Vec::new(),
                peer: if mac.is_group() {
                    None
                } else {
                    Some((mac, port))
                },
            };
            crate::link::packet::attach_filter(bfd, &spec)?;
        }
        self.peer = Some((mac, port));
        Ok(())
    }

    /// Nonblocking mode: `recv*` and `send*` return `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&mut self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking = nonblocking;
        Ok(())
    }

    /// Busy-poll mode for blocking receives (see [`EdpConfig::busy_poll`]).
    pub fn set_busy_poll(&mut self, on: bool) {
        self.busy_poll = on;
    }

    /// Longest a blocking receive waits; `None` = forever. After it, the
    /// receive fails with `TimedOut`. Errors: `InvalidInput` for a zero
    /// duration (as `std::net`).
    pub fn set_read_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.read_timeout = checked_timeout(t, "read")?;
        Ok(())
    }

    /// Current read timeout.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// Longest a blocking send waits for room in the transmit queue; `None` =
    /// forever. After it, the send fails with `TimedOut`.
    pub fn set_write_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.write_timeout = checked_timeout(t, "write")?;
        Ok(())
    }

    fn check_dst(&self, len: usize, port: u16) -> io::Result<()> {
        if len > self.mtu() {
            return Err(invalid(format!(
                "datagram of {len} bytes exceeds the EDP MTU of {} bytes (link MTU {} - {EDP_HEADER_LEN})",
                self.mtu(),
                self.link.mtu()
            )));
        }
        if port == CONTROL_PORT {
            return Err(invalid(
                "EDP port 0 is reserved for control messages (echo)".into(),
            ));
        }
        Ok(())
    }

    fn eth_to(&self, mac: MacAddr) -> EthernetRepr {
        EthernetRepr {
            dst: mac,
            src: self.mac,
            ethertype: self.ethertype,
        }
    }

    /// Sends one datagram to `(mac, port)`; returns `buf.len()`.
    ///
    /// Errors: `InvalidInput` when `buf` is longer than [`EdpSocket::mtu`]
    /// or the port is 0; `WouldBlock` on a nonblocking socket whose
    /// transmit queue is full (also for ENOBUFS: the frame was not sent);
    /// `TimedOut` after the write timeout; link errors.
    pub fn send_to(&mut self, buf: &[u8], dst: (MacAddr, u16)) -> io::Result<usize> {
        let (mac, port) = dst;
        self.check_dst(buf.len(), port)?;
        let eth = self.eth_to(mac);
        let n = emit_edp_frame(&mut self.tx, &eth, self.port, port, buf)
            .map_err(|e| invalid(e.to_string()))?;
        let deadline = self.write_deadline();
        loop {
            match self.link.send(&self.tx[..n]) {
                Ok(()) => {
                    self.stats.sent += 1;
                    return Ok(buf.len());
                }
                Err(e) => send_failed(&mut self.stats, self.nonblocking, &*self.link, e, deadline)?,
            }
        }
    }

    /// Sends to the connected peer. Errors: `NotConnected`, and those of
    /// [`EdpSocket::send_to`].
    pub fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        let peer = self.peer_addr()?;
        self.send_to(buf, peer)
    }

    /// Sends several datagrams to the connected peer with `sendmmsg` (up to
    /// [`SEND_BATCH`] per call); returns how many were sent, in order (a
    /// blocking socket waits until at least one is sent).
    ///
    /// Errors: `NotConnected`; `InvalidInput` when any datagram exceeds
    /// [`EdpSocket::mtu`] (nothing is sent); those of [`EdpSocket::send_to`].
    pub fn send_batch(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let (mac, port) = self.peer_addr()?;
        for d in datagrams {
            self.check_dst(d.len(), port)?;
        }
        let frame = self.link.mtu() + ETH_HEADER_LEN;
        if self.batch_tx.len() < frame * SEND_BATCH {
            // Allocated once, on first use.
            self.batch_tx = vec![0; frame * SEND_BATCH];
        }
        let eth = self.eth_to(mac);
        let count = datagrams.len().min(SEND_BATCH);
        let mut lens = [0usize; SEND_BATCH];
        for (i, d) in datagrams[..count].iter().enumerate() {
            let slot = &mut self.batch_tx[i * frame..(i + 1) * frame];
            lens[i] = emit_edp_frame(slot, &eth, self.port, port, d)
                .map_err(|e| invalid(e.to_string()))?;
        }
        let mut frames: [&[u8]; SEND_BATCH] = [&[]; SEND_BATCH];
        for i in 0..count {
            frames[i] = &self.batch_tx[i * frame..i * frame + lens[i]];
        }
        let deadline = self.write_deadline();
        loop {
            match self.link.send_batch(&frames[..count]) {
                Ok(0) if count > 0 => send_failed(
                    &mut self.stats,
                    self.nonblocking,
                    &*self.link,
                    io::ErrorKind::WouldBlock.into(),
                    deadline,
                )?,
                Ok(k) => {
                    self.stats.sent += k as u64;
                    return Ok(k);
                }
                Err(e) => send_failed(&mut self.stats, self.nonblocking, &*self.link, e, deadline)?,
            }
        }
    }

    fn write_deadline(&self) -> Option<Instant> {
        // A timeout too large to represent means no deadline.
        self.write_timeout
            .and_then(|t| Instant::now().checked_add(t))
    }
}

/// Decides what a failed link send means: `Ok(())` = retry.
fn send_failed(
    stats: &mut EdpStats,
    nonblocking: bool,
    link: &dyn Link,
    e: io::Error,
    deadline: Option<Instant>,
) -> io::Result<()> {
    if e.kind() == io::ErrorKind::Interrupted {
        return Ok(());
    }
    let again = e.kind() == io::ErrorKind::WouldBlock;
    let nobufs = e.raw_os_error() == Some(libc::ENOBUFS);
    if !again && !nobufs {
        stats.send_errors += 1;
        return Err(e);
    }
    if nonblocking {
        return Err(io::ErrorKind::WouldBlock.into());
    }
    let now = Instant::now();
    if deadline.is_some_and(|d| now >= d) {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "EDP send: transmit queue still full at the write timeout",
        ));
    }
    match (again, link.raw_fd(), link.poll_at()) {
        // Socket send buffer full: sleep until it has room.
        (true, Some(fd), None) => {
            let timeout = deadline.map(|d| d.saturating_duration_since(now));
            poll_fd(fd, libc::POLLOUT, timeout)?;
        }
        // ENOBUFS (the qdisc or device dropped the frame: POLLOUT does not
        // track that) or a wrapper's hold queue: the queue drains in
        // microseconds, so yield and retry.
        _ => std::thread::yield_now(),
    }
    Ok(())
}

impl EdpSocket {
    /// Receives one datagram into `buf`; returns `(length in bytes, source
    /// MAC, source port)`.
    ///
    /// Errors: `WouldBlock` on a nonblocking socket with nothing to read;
    /// `TimedOut` after the read timeout; `InvalidInput` when the datagram
    /// is longer than `buf` (it is consumed and counted as dropped, never
    /// truncated silently); link errors.
    pub fn recv_from(&mut self, buf: &mut [u8]) -> io::Result<(usize, MacAddr, u16)> {
        let deadline = if self.nonblocking {
            None
        } else {
            self.read_timeout
                .and_then(|t| Instant::now().checked_add(t))
        };
        loop {
            let r = if self.nonblocking || self.busy_poll {
                self.link.recv(&mut self.rx)
            } else {
                // Sleep in the link (one system call per frame on a PacketLink).
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                if left == Some(Duration::ZERO) {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    self.link.recv_wait(&mut self.rx, left)
                }
            };
            match r {
                Ok(n) => {
                    if let Some(r) = self.accept(n, buf)? {
                        return Ok(r);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.nonblocking {
                        return Err(e);
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "EDP receive on port {}: nothing within the read timeout of {:?}",
                                self.port,
                                self.read_timeout.unwrap_or_default()
                            ),
                        ));
                    }
                    if self.busy_poll {
                        std::hint::spin_loop();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Receives from the connected peer (others are counted as dropped);
    /// returns the length in bytes. Errors: `NotConnected`, and those of
    /// [`EdpSocket::recv_from`].
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.peer_addr()?;
        self.recv_from(buf).map(|(n, _, _)| n)
    }

    /// Checks the frame in `self.rx[..n]`; copies its payload into `out`.
    fn accept(&mut self, n: usize, out: &mut [u8]) -> io::Result<Option<(usize, MacAddr, u16)>> {
        let max = self.link.mtu() + ETH_HEADER_LEN;
        let f = match EdpFrame::parse(&self.rx[..n], self.ethertype, max) {
            Ok(f) => f,
            Err(e) => {
                log::trace!("EDP port {}: malformed frame dropped: {e}", self.port);
                self.stats.dropped += 1;
                return Ok(None);
            }
        };
        let for_us = f.edp.dst_port == self.port
            && (f.eth.dst == self.mac || f.eth.dst.is_group())
            && match self.peer {
                None => true,
                Some((m, p)) => m.is_group() || (f.eth.src == m && f.edp.src_port == p),
            };
        if !for_us {
            self.stats.dropped += 1;
            return Ok(None);
        }
        let len = f.payload.len();
        if len > out.len() {
            self.stats.dropped += 1;
            return Err(invalid(format!(
                "EDP datagram of {len} bytes does not fit the {}-byte buffer; it was dropped \
                 (give at least mtu() = {} bytes)",
                out.len(),
                self.link.mtu() - EDP_HEADER_LEN
            )));
        }
        out[..len].copy_from_slice(f.payload);
        self.stats.received += 1;
        Ok(Some((len, f.eth.src, f.edp.src_port)))
    }

    fn fd(&self) -> io::Result<RawFd> {
        self.link.raw_fd().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "this EDP socket's link has no file descriptor to poll",
            )
        })
    }
}

impl mio::event::Source for EdpSocket {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        mio::unix::SourceFd(&self.fd()?).register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        mio::unix::SourceFd(&self.fd()?).reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        mio::unix::SourceFd(&self.fd()?).deregister(registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::fault::FaultConfig;
    use crate::link::sim::{SimClock, SimLink};

    fn pair(mtu: usize) -> (EdpSocket, EdpSocket) {
        let clock = SimClock::new();
        let (la, lb) = SimLink::pair(&clock, mtu, FaultConfig::default(), FaultConfig::default());
        let mut a = EdpSocket::from_link(Box::new(la), 10u16).unwrap();
        let mut b = EdpSocket::from_link(Box::new(lb), 20u16).unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    fn mac(s: &EdpSocket) -> MacAddr {
        s.local_addr().unwrap().1
    }

    #[test]
    fn datagrams_over_a_sim_link() {
        let (mut a, mut b) = pair(1500);
        assert_eq!(a.mtu(), 1494);
        let bm = mac(&b);
        for len in [0usize, 1, 100, 1494] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(a.send_to(&data, (bm, 20)).unwrap(), len);
            let mut buf = [0u8; 1494];
            let (n, from, port) = b.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from, port), (&data[..], mac(&a), 10));
        }
        let e = a.send_to(&[0u8; 1495], (bm, 20)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("1494"), "{e}");
        let mut buf = [0u8; 16];
        assert_eq!(
            b.recv_from(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        let sa = a.stats();
        assert_eq!((sa.sent, sa.send_errors), (4, 0));
        let sb = b.stats();
        assert_eq!((sb.received, sb.dropped, sb.kernel_drops), (4, 0, 0));
    }

    #[test]
    fn frames_for_other_ports_and_peers_are_dropped_and_counted() {
        let (mut a, mut b) = pair(1500);
        let bm = mac(&b);
        // no kernel filter on a sim link: the socket itself must check
        a.send_to(b"other port", (bm, 21)).unwrap();
        a.send_to(b"other host", (MacAddr([2, 9, 9, 9, 9, 9]), 20))
            .unwrap_or(0);
        a.send_to(b"mine", (bm, 20)).unwrap();
        let mut buf = [0u8; 64];
        let (n, _, _) = b.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"mine");
        assert!(b.stats().dropped >= 1);
        // connected: a datagram from another source port is dropped
        let dropped = b.stats().dropped;
        b.connect(mac(&a), 11).unwrap();
        a.send_to(b"from port 10", (bm, 20)).unwrap();
        assert_eq!(
            b.recv(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(b.stats().dropped, dropped + 1);
        b.connect(mac(&a), 10).unwrap();
        a.send_to(b"from port 10", (bm, 20)).unwrap();
        assert_eq!(b.recv(&mut buf).unwrap(), 12);
    }

    #[test]
    fn malformed_frames_are_counted() {
        let clock = SimClock::new();
        let (mut raw, lb) =
            SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        let mut b = EdpSocket::from_link(Box::new(lb), 20u16).unwrap();
        b.set_nonblocking(true).unwrap();
        let bm = b.local_addr().unwrap().1;
        let mut f = [0u8; 64];
        let eth = EthernetRepr {
            dst: bm,
            src: raw.mac(),
            ethertype: ETHERTYPE_EDP,
        };
        let n = emit_edp_frame(&mut f, &eth, 1, 20, b"abc").unwrap();
        f[ETH_HEADER_LEN + 4..ETH_HEADER_LEN + 6].copy_from_slice(&999u16.to_be_bytes());
        raw.send(&f[..n]).unwrap(); // length field beyond the frame
        raw.send(&f[..16]).unwrap(); // truncated EDP header
        let other = EthernetRepr {
            ethertype: 0x88B6,
            ..eth
        };
        let n = emit_edp_frame(&mut f, &other, 1, 20, b"esp").unwrap();
        raw.send(&f[..n]).unwrap(); // another ethertype
        let mut buf = [0u8; 64];
        assert_eq!(
            b.recv_from(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(b.stats().dropped, 3);
        assert_eq!(b.stats().received, 0);
    }

    #[test]
    fn send_batch_and_errors() {
        let (mut a, mut b) = pair(1500);
        let bm = mac(&b);
        let one = [1u8; 10];
        assert_eq!(
            a.send_batch(&[&one]).unwrap_err().kind(),
            io::ErrorKind::NotConnected
        );
        a.connect(bm, 20).unwrap();
        let big = [0u8; 1495];
        assert_eq!(
            a.send_batch(&[&one, &big]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let many: Vec<&[u8]> = (0..100).map(|_| &one[..]).collect();
        let mut sent = 0;
        while sent < many.len() {
            sent += a.send_batch(&many[sent..]).unwrap();
        }
        let mut buf = [0u8; 32];
        for _ in 0..100 {
            assert_eq!(b.recv_from(&mut buf).unwrap().0, 10);
        }
        assert_eq!(a.stats().sent, 100);
        // port 0 is control
        assert_eq!(
            a.send_to(b"x", (bm, 0)).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            a.connect(bm, 0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let clock = SimClock::new();
        let (l, _) = SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        assert_eq!(
            EdpSocket::from_link(Box::new(l), 0u16).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // a sim link has no descriptor for mio
        let poll = mio::Poll::new().unwrap();
        let e = mio::event::Source::register(
            &mut a,
            poll.registry(),
            mio::Token(0),
            mio::Interest::READABLE,
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }

    #[test]
    fn blocking_receive_times_out_on_a_quiet_link() {
        let (_a, mut b) = pair(1500);
        b.set_nonblocking(false).unwrap();
        b.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        let mut buf = [0u8; 8];
        let start = Instant::now();
        let e = b.recv_from(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(5));
    }

    #[test]
    fn huge_timeouts_mean_no_deadline() {
        let (mut a, mut b) = pair(1500);
        b.set_nonblocking(false).unwrap();
        b.set_read_timeout(Some(Duration::MAX)).unwrap();
        a.set_write_timeout(Some(Duration::MAX)).unwrap();
        let bm = mac(&b);
        a.send_to(b"x", (bm, 20)).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(b.recv_from(&mut buf).unwrap().0, 1);
    }

    #[test]
    fn socket_is_send() {
        fn is_send<T: Send>() {}
        is_send::<EdpSocket>();
    }
}
