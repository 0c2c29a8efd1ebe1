//! Kernel UDP: the baseline for EDP (`-m udp`), and with `SO_BUSY_POLL`
//! and blocking receives (`-m udp-bp`): the kernel's own busy polling, the
//! fair comparison when our side spins.

use std::io::{self, IoSlice};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use ::link::sys::mmsg::{Mmsg, MsgFlags};

use super::{
    map_timeout, recv_train, send_train, set_kernel_busy_poll, spin, Endpoint, SessionConfig,
};

/// Largest UDP payload sent per datagram, bytes: one that fits a standard
/// 1500-byte MTU (1500 - 20 IP - 8 UDP) is not enough for jumbo links, so
/// the train uses the link's size where it is known; 65507 is UDP's limit.
const UDP_MAX_PAYLOAD: usize = 65507;

/// Datagrams per sendmmsg(2) call, as EDP's `SEND_BATCH`.
const SEND_BATCH: usize = ::edp::socket::SEND_BATCH;

/// sendmmsg(2) on the connected socket through edp's batch arrays:
/// sends a prefix of `dgrams` (at most [`SEND_BATCH`]) and returns how many
/// went out. Errors: those of sendmmsg (`WouldBlock` on a full nonblocking
/// socket).
fn sendmmsg(sock: &UdpSocket, mmsg: &mut Mmsg, dgrams: &[&[u8]]) -> io::Result<usize> {
    let dgrams = &dgrams[..dgrams.len().min(SEND_BATCH)];
    let slices: [IoSlice<'_>; SEND_BATCH] =
        std::array::from_fn(|i| IoSlice::new(dgrams.get(i).copied().unwrap_or_default()));
    let msgs: [&[IoSlice<'_>]; SEND_BATCH] =
        std::array::from_fn(|i| std::slice::from_ref(&slices[i]));
    mmsg.send(sock.as_fd(), &msgs[..dgrams.len()], &[], MsgFlags::empty())
}

pub struct Udp {
    sock: UdpSocket,
    mmsg: Mmsg,
    busy_poll: bool,
    timeout: Duration,
    /// SO_RCVTIMEO as last set (blocking receives).
    sock_timeout: Duration,
    max: usize,
}

fn open(bind: SocketAddr, cfg: &SessionConfig) -> io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(bind),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    // No SO_REUSEADDR: with it a second server would bind the same UDP
    // port and share its datagrams instead of being refused.
    // Large buffers, as EDP's PacketLink uses, so both are measured alike.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    if cfg.mode.is_kernel_busy_poll() {
        set_kernel_busy_poll(socket2::SockRef::from(&s), "udp")?;
    }
    s.bind(&bind.into())?;
    let sock: UdpSocket = s.into();
    if user_spin(cfg) {
        sock.set_nonblocking(true)?;
    } else {
        sock.set_read_timeout(Some(cfg.timeout))?;
    }
    Ok(sock)
}

/// Whether receives spin in user space on a nonblocking socket: `-m udp`
/// with `--wait busy`; udp-bp blocks (the kernel spins).
fn user_spin(cfg: &SessionConfig) -> bool {
    cfg.busy_poll() && !cfg.mode.is_kernel_busy_poll()
}

impl Udp {
    fn new(sock: UdpSocket, cfg: &SessionConfig) -> Self {
        Udp {
            sock,
            mmsg: Mmsg::new(SEND_BATCH, SEND_BATCH),
            busy_poll: user_spin(cfg),
            timeout: cfg.timeout,
            sock_timeout: cfg.timeout,
            max: UDP_MAX_PAYLOAD,
        }
    }
}

/// Client: an ephemeral port connected to `-R IP:-P port`.
pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let peer = SocketAddr::new(cfg.remote_ip()?, cfg.port);
    let bind: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let sock = open(bind, cfg)?;
    sock.connect(peer)?;
    Ok(Box::new(Udp::new(sock, cfg)))
}

/// Server: binds `-P port`; the first datagram's source becomes the peer.
/// That first datagram is the client's hello, answered by the control layer.
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    let sock = open(SocketAddr::from(([0, 0, 0, 0], cfg.port)), cfg)?;
    let mut u = Udp::new(sock, cfg);
    let mut probe = [0u8; 1];
    // Peek (without consuming) so the control layer reads the hello itself.
    let from = loop {
        let r = if u.busy_poll {
            spin(u.timeout.max(Duration::from_secs(60)), || {
                u.sock.peek_from(&mut probe)
            })
        } else {
            u.sock.set_read_timeout(None)?;
            let r = u.sock.peek_from(&mut probe);
            u.sock.set_read_timeout(Some(u.timeout))?;
            r
        };
        match r {
            Ok((_, from)) => break from,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    u.sock.connect(from)?;
    u.max = UDP_MAX_PAYLOAD;
    Ok(Box::new(u))
}

impl Udp {
    /// Sets SO_RCVTIMEO to `t` unless it is set to that already (the
    /// resending ping-pong receives with its retransmission timeout, which
    /// changes rarely: one setsockopt per change, not per receive).
    fn set_sock_timeout(&mut self, t: Duration) -> io::Result<()> {
        let t = t.max(Duration::from_micros(1));
        if self.sock_timeout != t {
            self.sock.set_read_timeout(Some(t))?;
            self.sock_timeout = t;
        }
        Ok(())
    }

    fn recv_one(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.busy_poll {
            spin(self.timeout, || self.sock.recv(buf))
        } else {
            self.set_sock_timeout(self.timeout)?;
            self.sock
                .recv(buf)
                .map_err(|e| map_timeout(e, self.timeout))
        }
    }
}

impl Endpoint for Udp {
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()> {
        let busy = self.busy_poll;
        let sock = &self.sock;
        let timeout = self.timeout;
        send_train(buf, self.max, |d| {
            if busy {
                spin(timeout, || sock.send(d)).map(|_| ())
            } else {
                sock.send(d).map(|_| ())
            }
        })
    }

    fn send_datagrams(&mut self, dgrams: &[&[u8]]) -> io::Result<()> {
        let mut off = 0;
        while off < dgrams.len() {
            let batch = &dgrams[off..dgrams.len().min(off + SEND_BATCH)];
            off += if self.busy_poll {
                spin(self.timeout, || sendmmsg(&self.sock, &mut self.mmsg, batch))?
            } else {
                sendmmsg(&self.sock, &mut self.mmsg, batch)?
            };
        }
        Ok(())
    }

    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()> {
        recv_train(buf, |b| self.recv_one(b))
    }

    fn max_datagram(&self) -> Option<usize> {
        Some(self.max)
    }

    fn recv_datagram(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        if self.busy_poll {
            return spin(timeout, || self.sock.recv(buf));
        }
        self.set_sock_timeout(timeout)?;
        self.sock.recv(buf).map_err(|e| map_timeout(e, timeout))
    }
}
