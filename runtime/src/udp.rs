//! A protocol core alone on one kernel UDP socket: the single-socket
//! engine that CTP (its own v1.2 transport) and MAK (UDP to an IPv4
//! multicast group) run on when they do not live in a slot of the Ethernet
//! runtime ([`EthEngine`](super::EthEngine)).
//!
//! The core is sans-IO ([`DatagramCore`]: handle a datagram, poll a
//! transmit, timers, readiness), as quinn-proto's endpoint under
//! quinn-udp; [`UdpEngine`] moves its datagrams in recvmmsg(2)/sendmmsg(2)
//! batches of [`BATCH`] and is driven by the same [`Driver`] as the Ethernet
//! runtime: the same wait policies, deadlines, idle progress and readiness.
//! What differs between protocols in the socket (unicast and SO_BROADCAST,
//! or multicast membership and its options) is the `configure` step of
//! [`bind_socket`].

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Progress;
use crate::driver::{Driver, Engine};
use crate::slot::SlotId;
use crate::socket::{DirectRead, Ready};
use link::sys::mmsg::{Mmsg, MsgFlags, RecvMeta};

/// Default UDP socket buffers in bytes (capped by `net.core.rmem_max` /
/// `wmem_max`).
pub const UDP_SOCKET_BUFFER: usize = 4 << 20;

pub use link::MAX_UDP_PAYLOAD;

/// Datagrams per recvmmsg(2) / sendmmsg(2).
pub const BATCH: usize = 64;

/// Something the socket did that the core may count or report.
#[derive(Debug)]
pub enum UdpEvent<'a> {
    /// The socket took at least one datagram.
    Sent,
    /// The socket's send queue was full: the datagrams not taken wait and
    /// go first on the next transmit.
    SendBlocked,
    /// The socket refused the datagram to `dest` (an ICMP error of an
    /// earlier datagram, e.g. ECONNREFUSED, or an unroutable address); the
    /// datagram is skipped, the protocol recovers it.
    SendFailed {
        /// Where the refused datagram was going.
        dest: SocketAddr,
        /// The socket's error.
        error: &'a io::Error,
    },
    /// A receive error other than WouldBlock/Interrupted (ICMP errors
    /// surface here; not fatal for a connectionless socket).
    RecvFailed(&'a io::Error),
    /// A datagram longer than the room per datagram (cut by the kernel) or
    /// without an IP source; dropped before the core saw it.
    Malformed,
}

/// A sans-IO protocol core the [`UdpEngine`] hosts: what the engine needs
/// of it, after quinn-proto's `handle_*`/`poll_*` split.
pub trait DatagramCore: Send + 'static {
    /// A datagram arrived from `from` at `now`.
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]);
    /// Runs the timers due at `now`.
    fn handle_timeout(&mut self, now: Instant);
    /// The next deadline, if any.
    fn poll_timeout(&mut self) -> Option<Instant>;
    /// Writes the next datagram to send into `buf` (room for the largest
    /// datagram the engine was built for); its destination and length.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(SocketAddr, usize)>;
    /// The core's readiness (readable, writable, error).
    fn readiness(&self) -> Ready;
    /// News for waiters even at unchanged readiness (see
    /// [`Socket::take_wake`](crate::protocol::Socket::take_wake)); none by default.
    fn take_news(&mut self) -> bool {
        false
    }
    /// Whether transmission is held back at `now` (nothing is sent, not
    /// even datagrams the socket refused before); never by default.
    fn holds(&self, _now: Instant) -> bool {
        false
    }
    /// Whether a datagram handled in this turn left a delivery for the
    /// application (routed at the turn's end): the engine then receives no
    /// more in this turn, unless datagrams come in a burst (see
    /// `UdpEngine::receive`); never by default.
    fn has_delivery(&self) -> bool {
        false
    }
    /// An engine turn begins (before its receive).
    fn turn_begins(&mut self) {}
    /// An engine turn received its datagrams and ran the timers.
    fn turn_received(&mut self, _now: Instant) {}
    /// A transmit pass ended (the core has nothing more, or the socket is
    /// full); not called when [`holds`](Self::holds).
    fn transmitted(&mut self) {}
    /// The socket reported `event`; counted or ignored by the core.
    fn on_event(&mut self, _now: Instant, _event: UdpEvent<'_>) {}
}

/// A nonblocking IPv4/IPv6 UDP socket bound to `addr` with
/// [`UDP_SOCKET_BUFFER`] buffers as far as the kernel allows;
/// `configure` then sets what the protocol needs (SO_BROADCAST, multicast
/// membership, ...).
///
/// Errors: socket errors; a failed bind keeps its kind (`AddrInUse` for a
/// taken port) with a message naming `what` and the address; whatever
/// `configure` returns.
pub fn bind_socket(
    addr: SocketAddr,
    what: &str,
    configure: impl FnOnce(&Socket) -> io::Result<()>,
) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: the kernel caps these at rmem_max / wmem_max.
    let _ = s.set_recv_buffer_size(UDP_SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(UDP_SOCKET_BUFFER);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())
        .map_err(|e| io::Error::new(e.kind(), format!("{what}: bind of UDP {addr}: {e}")))?;
    configure(&s)?;
    Ok(s.into())
}

/// The engine: one UDP socket and one core. See the module documentation.
pub struct UdpEngine<C: DatagramCore> {
    sock: UdpSocket,
    core: C,
    /// Receives only: its headers, set up once, serve turn after turn
    /// (see [`Mmsg::recv_slots`]); a send through it would reset them.
    rx_mmsg: Mmsg,
    tx_mmsg: Mmsg,
    /// Largest datagram, bytes.
    room: usize,
    /// Bytes per datagram slot in `rx` and `tx` (`room` rounded up to 64).
    stride: usize,
    rx: Vec<u8>,
    rx_meta: Vec<RecvMeta>,
    tx: Vec<u8>,
    tx_len: Vec<usize>,
    tx_dst: Vec<SocketAddr>,
    /// Datagrams `tx_sent..tx_len.len()` wait for room in the socket.
    tx_sent: usize,
    ready: Ready,
    changed: bool,
    /// The last turn's receive ended after its first datagram, which made
    /// a delivery (`receive`).
    cut: bool,
}

impl<C: DatagramCore + std::fmt::Debug> std::fmt::Debug for UdpEngine<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpEngine")
            .field("local", &self.sock.local_addr().ok())
            .field("core", &self.core)
            .finish()
    }
}

impl<C: DatagramCore> UdpEngine<C> {
    /// The engine over `sock` (nonblocking, bound) for `core`, with `room`
    /// bytes per datagram (the largest the core sends or accepts; longer
    /// ones received are counted [`UdpEvent::Malformed`]), driven by a new
    /// [`Driver`] that waits as `progress` says; its service thread (for
    /// [`Progress::WhenIdle`]) is called `thread`.
    ///
    /// Errors: socket errors (duplicating the descriptor for the driver's
    /// poll), the driver's (epoll, thread spawn).
    pub fn spawn(
        sock: UdpSocket,
        core: C,
        room: usize,
        progress: Progress,
        thread: String,
    ) -> io::Result<Arc<Driver<Self>>> {
        let room = room.max(1);
        let stride = room.next_multiple_of(64);
        let fd: OwnedFd = sock.try_clone()?.into();
        let engine = Self {
            sock,
            core,
            rx_mmsg: Mmsg::new(BATCH, BATCH),
            tx_mmsg: Mmsg::new(BATCH, BATCH),
            room,
            stride,
            rx: vec![0; stride * BATCH],
            rx_meta: vec![RecvMeta::default(); BATCH],
            tx: vec![0; stride * BATCH],
            tx_len: Vec::with_capacity(BATCH),
            tx_dst: Vec::with_capacity(BATCH),
            tx_sent: 0,
            ready: Ready::NONE,
            changed: false,
            cut: false,
        };
        let driver = Driver::new(engine, Some(fd), progress, thread, crate::service::spawn)?;
        if matches!(progress, Progress::WhenIdle { .. }) {
            driver.ensure_service();
        }
        Ok(driver)
    }

    /// The core.
    pub fn core(&self) -> &C {
        &self.core
    }

    /// The core, to change it (then call [`touched`](Self::touched)).
    pub fn core_mut(&mut self) -> &mut C {
        &mut self.core
    }

    /// The socket's bound address.
    ///
    /// Errors: getsockname(2)'s.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// After a handle changed the core: sends what it queued and updates
    /// readiness.
    pub fn touched(&mut self, now: Instant) {
        self.transmit(now);
        self.update_ready();
    }

    /// Sends the datagrams waiting, then what the core has, in batches,
    /// until the core has nothing or the socket is full.
    ///
    /// The first datagram the core gives goes out alone, at once: it is
    /// usually the one the peer waits for (a message, a reply), and what
    /// follows it usually is not (the confirmation of what the peer sent).
    /// Sent in one sendmmsg(2), the two reach the peer back to back and its
    /// receive takes both, handling the confirmation before its
    /// application gets the message (64 B busy-poll ping-pong, p50 half
    /// round trip 2.7 us against 2.3 us, in
    /// docs/measurements/issue37-udp-engine.txt). The rest of the pass
    /// follows in batches.
    fn transmit(&mut self, now: Instant) {
        if self.core.holds(now) {
            return;
        }
        let mut batch = 1;
        loop {
            if self.tx_sent == self.tx_len.len() {
                self.tx_len.clear();
                self.tx_dst.clear();
                self.tx_sent = 0;
                while self.tx_len.len() < batch {
                    let i = self.tx_len.len();
                    let buf = &mut self.tx[i * self.stride..][..self.room];
                    let Some((dest, len)) = self.core.poll_transmit(now, buf) else {
                        break;
                    };
                    self.tx_len.push(len);
                    self.tx_dst.push(dest);
                }
                batch = BATCH;
                if self.tx_len.is_empty() {
                    break;
                }
            }
            let (from, to) = (self.tx_sent, self.tx_len.len());
            // One datagram goes with sendmsg(2), more with sendmmsg(2).
            let r = self.tx_mmsg.send_slots(
                self.sock.as_fd(),
                &self.tx[from * self.stride..],
                self.stride,
                &self.tx_len[from..to],
                &self.tx_dst[from..to],
                MsgFlags::MSG_DONTWAIT,
            );
            match r {
                Ok(n) => {
                    self.tx_sent += n;
                    if n > 0 {
                        self.core.on_event(now, UdpEvent::Sent);
                    }
                    if self.tx_sent < to {
                        // The socket's queue is full: the rest waits.
                        self.core.on_event(now, UdpEvent::SendBlocked);
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.core.on_event(now, UdpEvent::SendBlocked);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let dest = self.tx_dst[from];
                    tracing::debug!(error = %e, %dest, "UDP send failed");
                    self.core
                        .on_event(now, UdpEvent::SendFailed { dest, error: &e });
                    self.tx_sent += 1;
                }
            }
        }
        self.core.transmitted();
    }

    fn update_ready(&mut self) {
        let r = self.core.readiness();
        if self.core.take_news() || r != self.ready {
            self.ready = r;
            self.changed = true;
        }
    }

    /// Receives what waits: the first datagram with one recvfrom(2), the
    /// rest, if the first came, in recvmmsg(2) batches. A lone datagram
    /// (the ping-pong's) costs the kernel's cheaper single receive: with
    /// recvmmsg(2) alone the 64 B busy-poll ping-pong's p50 was 4-6 %
    /// above the engines before the one UDP engine (recvfrom(2) and
    /// sendto(2) per datagram), with recvfrom first 3-6 %, within the
    /// rounds' spread (docs/measurements/issue37-house.txt); a burst still
    /// goes in batches.
    ///
    /// A first datagram that made a delivery for the application ends the
    /// receive: the application gets it without waiting for an empty
    /// recvmmsg(2) first (a 64 B busy-poll ping-pong, alternating, 7
    /// rounds: comm-udp p50 -5 %, ctp-udp -2 %). When the turn before
    /// ended so and a datagram waits again at once, datagrams come in a
    /// burst, and this turn takes them in a batch.
    fn receive(&mut self, now: Instant) -> usize {
        let burst = std::mem::take(&mut self.cut);
        let first = match self.sock.recv_from(&mut self.rx[..self.stride]) {
            Ok((len, from)) if len <= self.room => {
                self.core.handle_datagram(now, from, &self.rx[..len]);
                1
            }
            Ok(_) => {
                self.core.on_event(now, UdpEvent::Malformed);
                1
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                return 0;
            }
            Err(e) => {
                tracing::debug!(error = %e, "UDP receive error");
                self.core.on_event(now, UdpEvent::RecvFailed(&e));
                return 0;
            }
        };
        if !burst && self.core.has_delivery() {
            self.cut = true;
            return first;
        }
        let r = self.rx_mmsg.recv_slots(
            self.sock.as_fd(),
            &mut self.rx[..],
            self.stride,
            &mut self.rx_meta,
            MsgFlags::MSG_DONTWAIT,
        );
        let n = match r {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            Err(e) => {
                tracing::debug!(error = %e, "UDP receive error");
                self.core.on_event(now, UdpEvent::RecvFailed(&e));
                0
            }
        };
        for i in 0..n {
            let m = self.rx_meta[i];
            match m.src {
                Some(from) if !m.truncated => {
                    let bytes = &self.rx[i * self.stride..][..m.len];
                    self.core.handle_datagram(now, from, bytes);
                }
                _ => self.core.on_event(now, UdpEvent::Malformed),
            }
        }
        first + n
    }
}

impl<C: DatagramCore> Engine for UdpEngine<C> {
    fn poll(
        &mut self,
        now: Instant,
        _direct: Option<(SlotId, &mut DirectRead<'_>)>,
    ) -> io::Result<usize> {
        self.core.turn_begins();
        let got = self.receive(now);
        self.core.handle_timeout(now);
        self.core.turn_received(now);
        self.transmit(now);
        self.update_ready();
        Ok(got)
    }

    fn on_deadline(&mut self, now: Instant) -> io::Result<()> {
        self.core.handle_timeout(now);
        self.transmit(now);
        self.update_ready();
        Ok(())
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    fn before_sleep(&mut self, _slot: Option<SlotId>, _now: Instant) -> io::Result<()> {
        Ok(())
    }

    fn rx_ready(&self) -> Option<bool> {
        None
    }

    fn drain_changed(&mut self, f: &mut dyn FnMut(SlotId, Ready)) {
        if std::mem::take(&mut self.changed) {
            f(SlotId::FIRST, self.ready);
        }
    }

    fn readiness(&self, _slot: SlotId) -> Ready {
        self.core.readiness()
    }

    fn has_lingering(&self) -> bool {
        false
    }
}
