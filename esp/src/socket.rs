//! ESP sockets that look like `std::net`: [`EspListener`] (`bind`,
//! `accept`) and [`EspStream`] (`connect`, `Read`, `Write`, `shutdown`,
//! timeouts, nonblocking mode, `mio::event::Source`). Addresses are
//! `(interface, MAC, port)`.
//!
//! Demultiplexing is the kernel's (DESIGN.md principle 3): every socket has
//! its own AF_PACKET link with a classic BPF filter, so each gets only its
//! own frames, with no shared daemon and no lock between sockets:
//! - a stream's filter passes its local port from the peer's MAC and port
//!   only;
//! - a listener's filter passes only SYN segments (SYN set, ACK clear) for its
//!   port, so established traffic never wakes it; when a SYN is accepted the
//!   listener opens the new connection's own link (filtered on the peer)
//!   before its SYN-ACK leaves;
//! - ports are owned through `edp::ports` leases (abstract Unix sockets,
//!   exclusive across processes, released when the process dies); `connect`
//!   takes an ephemeral port;
//! - a SYN to a port nobody owns draws RST from the per-host responder
//!   ([`crate::responder`]).
//!
//! Progress (DESIGN.md principle 6): the calling thread drives the protocol:
//! every call receives pending frames, fires expired timers and sends what is
//! due; blocking calls sleep in ppoll(2) on the link and on the stream's
//! [`crate::alarm::Alarm`], which the process-wide alarm thread signals at the
//! next protocol deadline (RTO, delayed ACK, probe) with microsecond
//! resolution (a short ppoll timeout per wait measured slower on a KVM
//! guest), or spin with `busy_poll`. While the application computes, nobody
//! drives the stream unless [`EspStream::spawn_progress`] started a progress
//! thread (the stream then lives behind a mutex; without it the hot path
//! takes no lock).

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use edp::link::fault::FaultLink;
use edp::link::packet::{FilterSpec, PacketConfig, PacketLink};
use edp::ports::{self, PortLease};
use edp::wire::ETH_HEADER_LEN;
use edp::Link;

use crate::alarm::Alarm;
use crate::config::EspConfig;
use crate::conn::{reset_frame, Connection, ConnectionError, Error, IsnGenerator, State, Stats};
use crate::driver::{earliest, wait_readable, ConnDriver, Io};
use crate::listener::{Listener, SynOutcome};
use crate::responder::{shared_responder, Responder};
use crate::wire::{EspFrame, MacAddr, ESP_HEADER_LEN};

/// A link as the sockets hold it: a `PacketLink`, possibly wrapped in a
/// `FaultLink`, or any other [`Link`].
pub type BoxLink = Box<dyn Link>;

/// The process's ISN key (RFC 6528: random per boot; here per process).
fn isn_generator() -> &'static IsnGenerator {
    static G: OnceLock<IsnGenerator> = OnceLock::new();
    G.get_or_init(IsnGenerator::random)
}

/// The ISN clock term: microseconds since the Unix epoch.
fn clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn open_link(
    iface: &str,
    cfg: &EspConfig,
    port: u16,
    peer: Option<(MacAddr, u16)>,
) -> io::Result<BoxLink> {
    let pc = PacketConfig {
        ethertype: cfg.ethertype,
        rcvbuf: cfg.socket_buffer,
        sndbuf: cfg.socket_buffer,
        filter: Some(FilterSpec {
            ethertype: cfg.ethertype,
            port,
            extra_ports: Vec::new(),
            peer,
        }),
        rx_ring: cfg.rx_ring,
        qdisc_bypass: cfg.qdisc_bypass,
        ..PacketConfig::default()
    };
    let mut link = match PacketLink::open(iface, &pc) {
        Ok(l) => l,
        Err(e)
            if pc.rx_ring.is_some()
                && !matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                ) =>
        {
            // Ring memory is a kernel resource that can run out with many
            // sockets: fall back to plain recv rather than fail.
            log::warn!("ESP on {iface}: no receive ring ({e}); using recv(2)");
            PacketLink::open(
                iface,
                &PacketConfig {
                    rx_ring: None,
                    ..pc
                },
            )?
        }
        Err(e) => return Err(e),
    };
    if cfg.busy_poll {
        if let Err(e) = link.set_busy_poll(true) {
            log::debug!("ESP on {iface}: {e}; spinning in user space only");
        }
    }
    Ok(wrap_fault(Box::new(link), cfg))
}

fn wrap_fault(link: BoxLink, cfg: &EspConfig) -> BoxLink {
    match &cfg.fault {
        Some(f) if !f.is_transparent() => Box::new(FaultLink::new(link, f.clone())),
        _ => link,
    }
}

fn check_mtu(link: &dyn Link) -> io::Result<()> {
    if link.mtu() <= ESP_HEADER_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "link MTU of {} bytes cannot carry the {ESP_HEADER_LEN}-byte ESP header",
                link.mtu()
            ),
        ));
    }
    Ok(())
}

/// Removes an accepted connection's peer from its listener's set when the
/// stream is dropped (so a later SYN from the same peer and port is new).
#[derive(Debug)]
struct Registration {
    set: Arc<Mutex<HashSet<(MacAddr, u16)>>>,
    key: (MacAddr, u16),
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.set).remove(&self.key);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The state of one stream: the driver and the resources it keeps alive.
struct Core {
    drv: ConnDriver<BoxLink>,
    _lease: Option<PortLease>,
    _registration: Option<Registration>,
    _responder: Option<Arc<Responder>>,
}

impl Core {
    /// Receives, fires timers, transmits; true when any frame moved.
    fn pump(&mut self) -> io::Result<bool> {
        self.drv.poll(Instant::now())
    }
}

/// The I/O error for a failed connection call; a connection that died at
/// the retransmission limit says in what state (what was in flight, the
/// timers), since that is what a user needs to find out why.
fn conn_error(e: Error, conn: &Connection) -> io::Error {
    match e {
        Error::ConnectionLost(ConnectionError::TimedOut) => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{e} ({conn:?}, {:?})", conn.stats()),
        ),
        e => e.into(),
    }
}

/// A connection call's result as a step of [`EspStream::blocking`]:
/// `WouldBlock` waits, other errors end the call ([`conn_error`]).
fn step<T>(r: Result<T, Error>, conn: &Connection) -> io::Result<Step<T>> {
    match r {
        Ok(v) => Ok(Step::Done(v)),
        Err(Error::Blocked) => Ok(Step::Wait),
        Err(e) => Err(conn_error(e, conn)),
    }
}

/// Longest busy-poll spin on the link's readiness flag before the caller's
/// loop runs again (re-checking its own state), microseconds.
const MAX_SPIN_US: u64 = 50;

/// Busy-poll wait: spins on the link's readiness flag (one load of the RX
/// ring's next slot, no system call and no clock read per turn) until a frame
/// waits, `until` passes or [`MAX_SPIN_US`] after `now` elapse; the clock
/// is read once every 64 turns. Links that cannot tell readiness cheaply return at once.
fn spin_for_input(link: &dyn Link, now: Instant, until: Option<Instant>) {
    if link.rx_ready().is_none() {
        std::hint::spin_loop();
        return;
    }
    let limit = earliest(until, Some(now + Duration::from_micros(MAX_SPIN_US)));
    loop {
        for _ in 0..64 {
            if link.rx_ready() == Some(true) {
                return;
            }
            std::hint::spin_loop();
        }
        if limit.is_some_and(|l| Instant::now() >= l) {
            return;
        }
    }
}

struct Shared {
    core: Mutex<Core>,
    stop: AtomicBool,
}

enum Inner {
    Direct(Box<Core>),
    Shared(Arc<Shared>),
    Moved,
}

/// Options of a stream handle (not protocol state).
#[derive(Debug, Clone, Copy)]
struct Opts {
    nonblocking: bool,
    busy_poll: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    read_shut: bool,
    linger: Duration,
    spin: Duration,
}

/// A reliable, ordered, flow-controlled ESP byte stream.
pub struct EspStream {
    inner: Inner,
    progress: Option<JoinHandle<()>>,
    opts: Opts,
    fd: Option<RawFd>,
    iface: String,
    local: (MacAddr, u16),
    peer: (MacAddr, u16),
    alarm: Option<Alarm>,
}

impl std::fmt::Debug for EspStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EspStream")
            .field("iface", &self.iface)
            .field("local", &self.local)
            .field("peer", &self.peer)
            .field("opts", &self.opts)
            .finish()
    }
}

enum Step<T> {
    Done(T),
    Wait,
}

impl EspStream {
    /// Connects to `(iface, peer MAC, peer port)` with default options and
    /// waits for the handshake (see [`EspStream::connect_with`]).
    pub fn connect(addr: (&str, MacAddr, u16)) -> io::Result<EspStream> {
        Self::connect_with(addr.0, addr.1, addr.2, EspConfig::default())
    }

    /// Like [`EspStream::connect`], giving up after `timeout`.
    pub fn connect_timeout(addr: (&str, MacAddr, u16), timeout: Duration) -> io::Result<EspStream> {
        Self::connect_timeout_with(addr.0, addr.1, addr.2, EspConfig::default(), timeout)
    }

    /// Connects from an ephemeral port of `iface` to `peer_mac`/`port` with
    /// `cfg` and waits until the connection is established. Without a
    /// timeout the wait ends when the SYN was retransmitted
    /// `max_syn_retransmissions` times (about 5.3 s with the defaults).
    ///
    /// Errors: `ConnectionRefused` when the peer answers RST (no listener);
    /// `TimedOut` when the SYN is never answered; `AddrInUse` when no
    /// ephemeral port is free; `NotFound` for an unknown interface;
    /// `PermissionDenied` naming CAP_NET_RAW and the `setcap` command;
    /// `InvalidInput` for a group MAC or port 0.
    pub fn connect_with(
        iface: &str,
        peer_mac: MacAddr,
        port: u16,
        cfg: EspConfig,
    ) -> io::Result<EspStream> {
        Self::connect_inner(iface, peer_mac, port, cfg, None)
    }

    /// [`EspStream::connect_with`] with a bound on the handshake time.
    pub fn connect_timeout_with(
        iface: &str,
        peer_mac: MacAddr,
        port: u16,
        cfg: EspConfig,
        timeout: Duration,
    ) -> io::Result<EspStream> {
        Self::connect_inner(iface, peer_mac, port, cfg, Some(timeout))
    }

    fn connect_inner(
        iface: &str,
        peer_mac: MacAddr,
        port: u16,
        cfg: EspConfig,
        timeout: Option<Duration>,
    ) -> io::Result<EspStream> {
        if peer_mac.is_group() || port == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ESP connect to {peer_mac} port {port}: need a unicast MAC and a port > 0"),
            ));
        }
        let responder = shared_responder(iface, cfg.ethertype)?;
        let lease = ports::allocate(iface, cfg.ethertype, 0)?;
        let link = open_link(iface, &cfg, lease.port(), Some((peer_mac, port)))?;
        let progress = cfg.progress_thread;
        let mut s = Self::connect_link_inner(link, lease.port(), (peer_mac, port), cfg, timeout)?;
        s.iface = iface.to_string();
        if let Inner::Direct(core) = &mut s.inner {
            core._lease = Some(lease);
            core._responder = Some(responder);
        }
        if progress {
            s.spawn_progress()?;
        }
        Ok(s)
    }

    /// Connects over any link (a `SimLink`, a `UdpLink`, a `FaultLink`, ...)
    /// from `local_port` to `peer`, waiting at most `timeout` (`None` = until
    /// the SYN retransmissions are exhausted). No port lease is taken and no
    /// kernel filter applies: the link must carry only this connection's
    /// frames (others are counted and dropped).
    ///
    /// Errors: as [`EspStream::connect_with`].
    pub fn connect_link(
        link: BoxLink,
        local_port: u16,
        peer: (MacAddr, u16),
        cfg: EspConfig,
        timeout: Option<Duration>,
    ) -> io::Result<EspStream> {
        Self::connect_link_inner(link, local_port, peer, cfg, timeout)
    }

    fn connect_link_inner(
        link: BoxLink,
        local_port: u16,
        peer: (MacAddr, u16),
        cfg: EspConfig,
        timeout: Option<Duration>,
    ) -> io::Result<EspStream> {
        check_mtu(&*link)?;
        let now = Instant::now();
        let local = (link.mac(), local_port);
        let iss = isn_generator().isn(local, peer, clock_us());
        let conn = Connection::connect(&cfg.transport(), link.mtu(), local, peer, iss, now);
        let mut s = Self::from_parts(conn, link, Io::new, &cfg);
        let deadline = timeout.map(|t| now + t);
        s.blocking(deadline, "connect", |c| {
            let conn = &c.drv.conn;
            if conn.is_established() {
                return Ok(Step::Done(()));
            }
            match conn.error() {
                Some(ConnectionError::TimedOut) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "ESP connect to {} port {}: no answer to {} SYN retransmissions",
                        peer.0, peer.1, cfg.max_syn_retransmissions
                    ),
                )),
                Some(ConnectionError::Refused) => Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!(
                        "ESP connect to {} port {}: refused (RST: no listener on that port)",
                        peer.0, peer.1
                    ),
                )),
                Some(e) => Err(e.into()),
                None => Ok(Step::Wait),
            }
        })?;
        Ok(s)
    }

    /// Waits on `link` for one SYN to `local_port` and accepts it on that
    /// same link (for links without kernel demultiplexing: a `SimLink`, a
    /// `UdpLink`). Waits at most `timeout` (`None` = forever).
    ///
    /// Errors: `TimedOut`; link errors.
    pub fn accept_link(
        mut link: BoxLink,
        local_port: u16,
        cfg: EspConfig,
        timeout: Option<Duration>,
    ) -> io::Result<EspStream> {
        check_mtu(&*link)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut rx = vec![0u8; link.mtu() + ETH_HEADER_LEN + 64];
        let mut listener: Listener<()> = Listener::new(
            cfg.transport(),
            link.mtu(),
            (link.mac(), local_port),
            isn_generator().clone(),
        );
        let conn = loop {
            match link.recv(&mut rx) {
                Ok(n) => {
                    let Ok(f) = EspFrame::parse(&rx[..n], cfg.ethertype, link.mtu() + 14) else {
                        continue;
                    };
                    if let SynOutcome::Accept(c) = listener.on_segment(
                        Instant::now(),
                        clock_us(),
                        f.eth.src,
                        &f.header,
                        |_| false,
                    ) {
                        break c;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("ESP accept on port {local_port}: no SYN within the timeout"),
                        ));
                    }
                    let fds: Vec<RawFd> = link.raw_fd().into_iter().collect();
                    wait_readable(&fds, earliest(deadline, link.poll_at()))?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        let mut s = Self::from_parts(*conn, link, Io::new, &cfg);
        s.blocking(deadline, "accept", |c| {
            if c.drv.conn.is_established() {
                Ok(Step::Done(()))
            } else if let Some(e) = c.drv.conn.error() {
                Err(e.into())
            } else {
                Ok(Step::Wait)
            }
        })?;
        Ok(s)
    }

    fn from_parts(
        conn: Connection,
        link: BoxLink,
        io: impl FnOnce(&dyn Link, u16) -> Io,
        cfg: &EspConfig,
    ) -> EspStream {
        let io = io(&*link, cfg.ethertype);
        Self::from_driver(ConnDriver::from_parts(conn, link, io), cfg)
    }

    fn from_driver(drv: ConnDriver<BoxLink>, cfg: &EspConfig) -> EspStream {
        let local = drv.conn.local();
        let peer = drv.conn.remote();
        let fd = drv.link.raw_fd();
        EspStream {
            inner: Inner::Direct(Box::new(Core {
                drv,
                _lease: None,
                _registration: None,
                _responder: None,
            })),
            progress: None,
            opts: Opts {
                nonblocking: false,
                busy_poll: cfg.busy_poll,
                read_timeout: None,
                write_timeout: None,
                read_shut: false,
                linger: cfg.linger,
                spin: cfg.spin_before_sleep,
            },
            fd,
            iface: String::new(),
            local,
            peer,
            alarm: None,
        }
    }

    /// Runs `f` on the core (locking it when a progress thread runs).
    fn with<T>(&mut self, f: impl FnOnce(&mut Core) -> T) -> T {
        match &mut self.inner {
            Inner::Direct(c) => f(c),
            Inner::Shared(s) => f(&mut lock(&s.core)),
            Inner::Moved => unreachable!("stream core moved"),
        }
    }

    /// Drives the connection, tries `attempt`, and waits (ppoll on the link
    /// until the next protocol deadline, or spinning) until it is done or
    /// `deadline` passes.
    fn blocking<T>(
        &mut self,
        deadline: Option<Instant>,
        what: &str,
        mut attempt: impl FnMut(&mut Core) -> io::Result<Step<T>>,
    ) -> io::Result<T> {
        let mut spin_until: Option<Instant> = None;
        // A blocking caller that finds nothing to do goes straight to
        // ppoll (which returns at once if frames are queued) instead of
        // first trying a receive that, without a ring, costs a syscall.
        let mut receive = self.opts.nonblocking || self.opts.busy_poll;
        let busy = self.opts.busy_poll || self.opts.nonblocking;
        loop {
            // One clock read per turn (a vDSO call costs 25-40 ns on a KVM
            // guest, a sizeable part of a 3 us half round trip).
            let now = Instant::now();
            let (step, poll_at, moved) = self.with(|c| -> io::Result<_> {
                // Fast path: try before receiving. A due timer fires only
                // after the input already queued is read: an ACK waiting
                // in the ring since this thread was descheduled must cancel
                // the RTO, not be preceded by a spurious retransmission.
                if c.drv.conn.poll_timeout().is_some_and(|t| t <= now) {
                    c.drv.receive(now)?;
                    c.drv.timers(now);
                }
                if let Step::Done(v) = attempt(c)? {
                    c.drv.transmit(now)?;
                    return Ok((Step::Done(v), None, false));
                }
                if !receive {
                    c.drv.transmit(now)?;
                    return Ok((Step::Wait, c.drv.poll_at(), false));
                }
                let moved = c.drv.receive(now)? > 0;
                c.drv.timers(now);
                let step = attempt(c)?;
                match step {
                    // Done with fresh input: what is due (typically an ACK)
                    // goes out with the caller's next call, so a reply
                    // written right away carries it; a pure ACK would wake
                    // the peer's blocked reader for nothing (a kernel TCP
                    // reader is not woken by ACKs). The peer's RTO bounds
                    // the delay if the caller does not come back.
                    Step::Done(_) => {}
                    Step::Wait => {
                        if !busy {
                            // About to sleep: a pending delayed ACK goes out
                            // now rather than waking us later.
                            c.drv.conn.flush_delayed_ack();
                        }
                        c.drv.transmit(now)?;
                    }
                }
                Ok((step, c.drv.poll_at(), moved))
            })?;
            if let Step::Done(v) = step {
                return Ok(v);
            }
            if self.opts.nonblocking {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if deadline.is_some_and(|d| now >= d) {
                let conn = self.with(|c| format!("{:?}", c.drv.conn));
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("ESP {what}: not done within the timeout ({conn})"),
                ));
            }
            if self.opts.busy_poll {
                if let Inner::Direct(c) = &self.inner {
                    spin_for_input(&c.drv.link, now, earliest(poll_at, deadline));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            // Adaptive polling: while frames keep coming, poll a little
            // longer before sleeping (a wakeup costs more than a short spin).
            if moved && !self.opts.spin.is_zero() {
                spin_until = Some(now + self.opts.spin);
            }
            if spin_until.is_some_and(|t| now < t) && poll_at.is_none_or(|t| now < t) {
                std::hint::spin_loop();
                continue;
            }
            if matches!(self.inner, Inner::Shared(_)) {
                // With a progress thread the timers are its job.
                let until = earliest(deadline, Some(now + Duration::from_millis(1)));
                wait_readable(self.fd.as_slice(), until)?;
            } else if let (Some(fd), Some(alarm)) = (self.fd, self.alarm()) {
                // Protocol deadlines through the alarm thread: this sleep
                // carries only the caller's own timeout (see `alarm`).
                alarm.set(poll_at);
                wait_readable(&[fd, alarm.fd()], deadline)?;
            } else {
                wait_readable(self.fd.as_slice(), earliest(poll_at, deadline))?;
            }
            receive = true;
        }
    }

    /// The stream's alarm, created on first use (`None` if the alarm
    /// service is unavailable: waits then carry the deadline themselves).
    fn alarm(&mut self) -> Option<&Alarm> {
        if self.alarm.is_none() {
            match Alarm::new() {
                Ok(a) => self.alarm = Some(a),
                Err(e) => {
                    log::debug!("ESP: {e}; timers ride on ppoll timeouts");
                    return None;
                }
            }
        }
        self.alarm.as_ref()
    }

    /// Local (interface, MAC, port).
    pub fn local_addr(&self) -> io::Result<(String, MacAddr, u16)> {
        Ok((self.iface.clone(), self.local.0, self.local.1))
    }

    /// Peer (MAC, port).
    pub fn peer_addr(&self) -> io::Result<(MacAddr, u16)> {
        Ok(self.peer)
    }

    /// Counters (sent, retransmitted, send errors, received, out of
    /// sequence, dropped, duplicates, ... as the thesis's `esp_stats`).
    pub fn stats(&mut self) -> Stats {
        self.with(|c| c.drv.conn.stats())
    }

    /// Connection state.
    pub fn state(&mut self) -> State {
        self.with(|c| c.drv.conn.state())
    }

    /// The error that ended the connection, if any (not cleared).
    pub fn take_error(&mut self) -> io::Result<Option<io::Error>> {
        Ok(self.with(|c| c.drv.conn.error()).map(Into::into))
    }

    /// Nonblocking mode: `read`, `write` return `WouldBlock` instead of
    /// waiting. Drive timers with [`EspStream::drive`] at
    /// [`EspStream::poll_at`] when using mio.
    pub fn set_nonblocking(&mut self, nonblocking: bool) -> io::Result<()> {
        self.opts.nonblocking = nonblocking;
        Ok(())
    }

    /// Spin instead of sleeping in blocking calls (lowest latency, one core
    /// busy). Also sets `SO_BUSY_POLL` where the link supports it.
    pub fn set_busy_poll(&mut self, on: bool) {
        self.opts.busy_poll = on;
    }

    /// Read timeout (`None` = wait forever). Errors: `InvalidInput` for zero.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.opts.read_timeout = edp::socket::checked_timeout(t, "read")?;
        Ok(())
    }

    /// Write timeout (`None` = wait forever). Errors: `InvalidInput` for zero.
    pub fn set_write_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.opts.write_timeout = edp::socket::checked_timeout(t, "write")?;
        Ok(())
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.opts.read_timeout
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> Option<Duration> {
        self.opts.write_timeout
    }

    /// Shuts down reading (later reads return 0), writing (FIN after the
    /// buffered data; later writes fail with `BrokenPipe`) or both.
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.opts.read_shut = true;
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            self.with(|c| -> io::Result<()> {
                c.drv.conn.close();
                c.drv.transmit(Instant::now())?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Graceful close that waits: sends FIN after the buffered data (as
    /// `shutdown(Write)`), then drives the connection until it is CLOSED —
    /// the peer's FIN received and ours acknowledged, the last ACK sent — or
    /// `timeout` passes. Unlike dropping the stream, it returns only when the
    /// peer has everything, so the process may exit right after (RFC 793
    /// close; there is no TIME_WAIT: if our last ACK is lost, the peer's
    /// own close times out). Data that still arrives stays readable.
    ///
    /// Errors: `TimedOut` naming the connection's state; the connection's
    /// error (reset, retransmission limit).
    pub fn close(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.shutdown(Shutdown::Write)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        self.blocking(deadline, "close", |c| {
            if c.drv.conn.is_finished() {
                return Ok(Step::Done(()));
            }
            match c.drv.conn.error() {
                Some(e) => Err(conn_error(e.into(), &c.drv.conn)),
                None => Ok(Step::Wait),
            }
        })
    }

    /// Aborts: sends RST and drops buffered data (SO_LINGER 0).
    pub fn abort(&mut self) -> io::Result<()> {
        self.with(|c| -> io::Result<()> {
            c.drv.conn.abort();
            c.drv.transmit(Instant::now())?;
            Ok(())
        })
    }

    /// The next protocol deadline (retransmission, delayed ACK, probe):
    /// nonblocking users call [`EspStream::drive`] then.
    pub fn poll_at(&mut self) -> Option<Instant> {
        self.with(|c| c.drv.poll_at())
    }

    /// Receives pending frames, fires expired timers, sends what is due.
    pub fn drive(&mut self) -> io::Result<()> {
        self.with(|c| c.pump().map(|_| ()))
    }

    /// Blocks until every byte written so far is acknowledged by the peer,
    /// or `timeout` passes. Errors: `TimedOut`; the connection's error.
    pub fn wait_acked(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.blocking(deadline, "wait for acknowledgements", |c| {
            if let Some(e) = c.drv.conn.error() {
                return Err(conn_error(e.into(), &c.drv.conn));
            }
            Ok(if c.drv.conn.send_pending() == 0 {
                Step::Done(())
            } else {
                Step::Wait
            })
        })
    }

    /// Starts a progress thread that keeps retransmissions, ACKs and window
    /// updates going while the application computes (MPI-style asynchronous
    /// progress). From then on the stream is behind a mutex shared with the
    /// thread. The thread stops when the stream is dropped.
    pub fn spawn_progress(&mut self) -> io::Result<()> {
        if matches!(self.inner, Inner::Shared(_)) {
            return Ok(());
        }
        let Inner::Direct(core) = std::mem::replace(&mut self.inner, Inner::Moved) else {
            unreachable!()
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(*core),
            stop: AtomicBool::new(false),
        });
        let s2 = shared.clone();
        let fd = self.fd;
        let name = format!("esp-progress-{}", self.local.1);
        match std::thread::Builder::new()
            .name(name)
            .spawn(move || progress_loop(s2, fd))
        {
            Ok(h) => {
                self.progress = Some(h);
                self.inner = Inner::Shared(shared);
                Ok(())
            }
            Err(e) => {
                let core = Arc::try_unwrap(shared)
                    .ok()
                    .expect("thread never started")
                    .core
                    .into_inner()
                    .unwrap_or_else(|p| p.into_inner());
                self.inner = Inner::Direct(Box::new(core));
                Err(e)
            }
        }
    }
}

fn progress_loop(shared: Arc<Shared>, fd: Option<RawFd>) {
    let fds: Vec<RawFd> = fd.into_iter().collect();
    while !shared.stop.load(Ordering::Relaxed) {
        let next = {
            let mut c = lock(&shared.core);
            if let Err(e) = c.pump() {
                log::warn!("ESP progress thread: {e}");
            }
            c.drv.poll_at()
        };
        let cap = Instant::now() + Duration::from_millis(10);
        if let Err(e) = wait_readable(&fds, Some(next.map_or(cap, |t| t.min(cap)))) {
            log::warn!("ESP progress thread: {e}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Read for EspStream {
    /// Reads received bytes; 0 at the end of the stream (the peer's FIN) or
    /// after `shutdown(Read)`.
    ///
    /// Errors: `WouldBlock` (nonblocking, nothing ready); `TimedOut` (read
    /// timeout); `ConnectionReset`, `TimedOut` (retransmission limit: the
    /// connection is dead), `ConnectionAborted` after `abort`.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.opts.read_shut || buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.opts.read_timeout.map(|t| Instant::now() + t);
        self.blocking(deadline, "read", |c| {
            let r = c.drv.conn.recv(buf);
            step(r, &c.drv.conn)
        })
    }
}

impl Write for EspStream {
    /// Copies as much of `buf` as the send buffer takes (waiting for space
    /// when blocking) and sends what the peer's window and the congestion
    /// window allow; a write larger than a segment is split into segments.
    ///
    /// Errors: `WouldBlock` (nonblocking, buffer full); `TimedOut` (write
    /// timeout, or the connection died at the retransmission limit);
    /// `BrokenPipe` after `shutdown(Write)`; `ConnectionReset`.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.opts.write_timeout.map(|t| Instant::now() + t);
        self.blocking(deadline, "write", |c| {
            let r = c.drv.conn.send(buf);
            step(r, &c.drv.conn)
        })
    }

    /// Sends what is due now (segments are sent as soon as written; this
    /// does not wait for acknowledgements: see [`EspStream::wait_acked`]).
    fn flush(&mut self) -> io::Result<()> {
        self.with(|c| c.drv.transmit(Instant::now()).map(|_| ()))
    }
}

impl Drop for EspStream {
    /// Graceful close without blocking: the FIN follows the buffered data,
    /// and if the connection is not finished yet it is handed to the
    /// process's closer thread, which keeps driving it (retransmissions,
    /// the peer's FIN) until it is CLOSED or `linger` passes, like the
    /// kernel's orphaned TCP sockets. The port lease is held until then.
    /// With `linger` zero the connection is dropped at once. The closer
    /// thread ends with the process: a program about to exit calls
    /// [`EspStream::wait_acked`] first if its last bytes matter (the kernel
    /// keeps a TCP socket's retransmissions going after exit; a user-space
    /// stack cannot).
    fn drop(&mut self) {
        if let Inner::Shared(s) = &self.inner {
            s.stop.store(true, Ordering::Relaxed);
        }
        if let Some(h) = self.progress.take() {
            let _ = h.join();
        }
        let core = match std::mem::replace(&mut self.inner, Inner::Moved) {
            Inner::Direct(c) => *c,
            Inner::Shared(s) => match Arc::try_unwrap(s) {
                Ok(s) => s.core.into_inner().unwrap_or_else(|p| p.into_inner()),
                Err(_) => return,
            },
            Inner::Moved => return,
        };
        let linger = self.opts.linger;
        if linger.is_zero() {
            return;
        }
        adopt(core, Instant::now() + linger);
    }
}

/// A dropped stream still closing.
struct Orphan {
    core: Core,
    until: Instant,
}

struct Closer {
    orphans: Mutex<Vec<Orphan>>,
    wake: crate::alarm::Alarm,
}

fn closer() -> Option<&'static Closer> {
    static C: OnceLock<Option<&'static Closer>> = OnceLock::new();
    *C.get_or_init(|| {
        let wake = Alarm::new().ok()?;
        let c: &'static Closer = Box::leak(Box::new(Closer {
            orphans: Mutex::new(Vec::new()),
            wake,
        }));
        std::thread::Builder::new()
            .name("esp-closer".into())
            .spawn(move || run_closer(c))
            .ok()?;
        Some(c)
    })
}

fn finished(c: &Core) -> bool {
    let conn = &c.drv.conn;
    conn.state() == State::Closed && conn.is_finished()
}

/// Closes `core` in the background (see `Drop for EspStream`).
fn adopt(mut core: Core, until: Instant) {
    core.drv.conn.close();
    let _ = core.pump();
    if finished(&core) || core.drv.conn.error().is_some() {
        return;
    }
    match closer() {
        Some(c) => {
            lock(&c.orphans).push(Orphan { core, until });
            // Wake the closer at once (an alarm already due signals).
            c.wake.set(Some(Instant::now()));
        }
        None => log::debug!("ESP: no closer thread; connection dropped unclosed"),
    }
}

fn run_closer(c: &'static Closer) {
    loop {
        // Clear the wake signal before looking at the list: an orphan added
        // after this point signals again.
        c.wake.set(None);
        let now = Instant::now();
        let (fds, next) = {
            let mut list = lock(&c.orphans);
            list.retain_mut(|o| {
                if o.core.pump().is_err() {
                    return false;
                }
                !(finished(&o.core) || o.core.drv.conn.error().is_some() || now >= o.until)
            });
            let mut fds: Vec<RawFd> = vec![c.wake.fd()];
            fds.extend(list.iter().filter_map(|o| o.core.drv.link.raw_fd()));
            let next = list
                .iter()
                .filter_map(|o| earliest(o.core.drv.poll_at(), Some(o.until)))
                .min();
            (fds, next)
        };
        // In-memory links have no descriptor: poll them every millisecond.
        let cap = now + Duration::from_millis(if next.is_some() { 1 } else { 1000 });
        let _ = wait_readable(&fds, Some(next.map_or(cap, |t| t.min(cap))));
    }
}

impl mio::event::Source for EspStream {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        source_fd(self.fd)?.register(registry, token, interests)
    }
    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        source_fd(self.fd)?.reregister(registry, token, interests)
    }
    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        source_fd(self.fd)?.deregister(registry)
    }
}

fn source_fd(fd: Option<RawFd>) -> io::Result<FdSource> {
    fd.map(FdSource).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "this ESP socket's link has no file descriptor to poll",
        )
    })
}

struct FdSource(RawFd);

impl FdSource {
    fn register(&self, r: &mio::Registry, t: mio::Token, i: mio::Interest) -> io::Result<()> {
        mio::unix::SourceFd(&self.0).register(r, t, i)
    }
    fn reregister(&self, r: &mio::Registry, t: mio::Token, i: mio::Interest) -> io::Result<()> {
        mio::unix::SourceFd(&self.0).reregister(r, t, i)
    }
    fn deregister(&self, r: &mio::Registry) -> io::Result<()> {
        mio::unix::SourceFd(&self.0).deregister(r)
    }
}

use mio::event::Source as _;

/// A half-open or not yet accepted connection owned by a listener.
struct Child {
    link: BoxLink,
    io: Io,
}

struct ListenerCore {
    link: PacketLink,
    listener: Listener<Child>,
    iface: String,
    cfg: EspConfig,
    known: Arc<Mutex<HashSet<(MacAddr, u16)>>>,
    rx: Vec<u8>,
    tx: Vec<u8>,
}

/// A listening ESP socket.
pub struct EspListener {
    core: Mutex<ListenerCore>,
    fd: RawFd,
    local: (String, MacAddr, u16),
    nonblocking: AtomicBool,
    _lease: PortLease,
    _responder: Arc<Responder>,
}

impl std::fmt::Debug for EspListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EspListener")
            .field("local", &self.local)
            .finish()
    }
}

impl EspListener {
    /// Binds `(iface, port)` with default options (port 0 = an ephemeral
    /// port). See [`EspListener::bind_with`].
    pub fn bind(addr: (&str, u16)) -> io::Result<EspListener> {
        Self::bind_with(addr.0, addr.1, EspConfig::default())
    }

    /// Takes the port's lease and opens a packet socket that passes only SYN
    /// segments for the port. At most `cfg.backlog` established connections
    /// wait for `accept` and at most `cfg.max_half_open` are half-open;
    /// further SYNs are dropped (the client retries).
    ///
    /// Errors: `AddrInUse` when another socket owns the port; `NotFound`
    /// for an unknown interface; `PermissionDenied` naming CAP_NET_RAW.
    pub fn bind_with(iface: &str, port: u16, cfg: EspConfig) -> io::Result<EspListener> {
        let responder = shared_responder(iface, cfg.ethertype)?;
        let lease = ports::allocate(iface, cfg.ethertype, port)?;
        let port = lease.port();
        let link = PacketLink::open(
            iface,
            &PacketConfig {
                ethertype: cfg.ethertype,
                rcvbuf: 1 << 20,
                sndbuf: 256 << 10,
                filter: Some(FilterSpec::port(cfg.ethertype, port)),
                ..PacketConfig::default()
            },
        )?;
        let fd = link.raw_fd().expect("packet link has a descriptor");
        crate::bpf::attach(fd, &mut crate::bpf::syn_filter(cfg.ethertype, Some(port)))?;
        let mac = link.mac();
        let frame = link.mtu() + ETH_HEADER_LEN;
        let listener = Listener::new(
            cfg.transport(),
            link.mtu(),
            (mac, port),
            isn_generator().clone(),
        );
        Ok(EspListener {
            core: Mutex::new(ListenerCore {
                link,
                listener,
                iface: iface.to_string(),
                cfg,
                known: Arc::new(Mutex::new(HashSet::new())),
                rx: vec![0; frame + 64],
                tx: vec![0; 128],
            }),
            fd,
            local: (iface.to_string(), mac, port),
            nonblocking: AtomicBool::new(false),
            _lease: lease,
            _responder: responder,
        })
    }

    /// Local (interface, MAC, port).
    pub fn local_addr(&self) -> io::Result<(String, MacAddr, u16)> {
        Ok(self.local.clone())
    }

    /// Nonblocking mode: `accept` returns `WouldBlock` when no connection is
    /// ready.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking.store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// The next deadline of the half-open connections (SYN-ACK
    /// retransmission): with mio, the listener's descriptor only signals new
    /// SYNs, so call `accept` again at this instant too.
    pub fn poll_at(&self) -> Option<Instant> {
        let core = lock(&self.core);
        core.listener
            .entries()
            .iter()
            .filter_map(|e| earliest(e.conn.poll_timeout(), e.handle.link.poll_at()))
            .min()
    }

    /// Counters of the listen side (SYNs accepted and dropped, resets).
    pub fn stats(&self) -> crate::listener::ListenerStats {
        lock(&self.core).listener.stats()
    }

    /// Waits for an established connection and returns it with the peer's
    /// (MAC, port). Half-open connections are driven while waiting.
    ///
    /// Errors: `WouldBlock` in nonblocking mode; link errors.
    pub fn accept(&self) -> io::Result<(EspStream, (MacAddr, u16))> {
        self.accept_timeout(None)
    }

    /// [`EspListener::accept`] waiting at most `timeout`. Errors: `TimedOut`.
    pub fn accept_timeout(
        &self,
        timeout: Option<Duration>,
    ) -> io::Result<(EspStream, (MacAddr, u16))> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let (fds, next) = {
                let mut core = lock(&self.core);
                if let Some(s) = core.pump()? {
                    return Ok(s);
                }
                let mut fds = vec![self.fd];
                fds.extend(
                    core.listener
                        .entries()
                        .iter()
                        .filter_map(|e| e.handle.link.raw_fd()),
                );
                let next = core
                    .listener
                    .entries()
                    .iter()
                    .filter_map(|e| earliest(e.conn.poll_timeout(), e.handle.link.poll_at()))
                    .min();
                (fds, next)
            };
            if self.nonblocking.load(Ordering::Relaxed) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "ESP accept on port {}: nothing within the timeout",
                        self.local.2
                    ),
                ));
            }
            wait_readable(&fds, earliest(next, deadline))?;
        }
    }
}

impl ListenerCore {
    /// Handles SYNs, drives owned connections, returns one ready to accept.
    fn pump(&mut self) -> io::Result<Option<(EspStream, (MacAddr, u16))>> {
        let max = self.link.mtu() + ETH_HEADER_LEN;
        loop {
            let n = match self.link.recv(&mut self.rx) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let Ok(f) = EspFrame::parse(&self.rx[..n], self.cfg.ethertype, max) else {
                continue;
            };
            let now = Instant::now();
            let known = self.known.clone();
            let outcome = self
                .listener
                .on_segment(now, clock_us(), f.eth.src, &f.header, |r| {
                    lock(&known).contains(&r)
                });
            match outcome {
                SynOutcome::Accept(conn) => {
                    let remote = conn.remote();
                    match open_link(&self.iface, &self.cfg, conn.local().1, Some(remote)) {
                        Ok(link) => {
                            let io = Io::new(&*link, self.cfg.ethertype);
                            self.listener.insert(*conn, Child { link, io });
                        }
                        Err(e) => {
                            log::warn!("ESP listener: no link for {remote:?}: {e}");
                        }
                    }
                }
                SynOutcome::Reset(_) => {
                    let (src, repr) = (f.eth.src, f.header);
                    if let Some(len) = reset_frame(
                        &mut self.tx,
                        self.link.mac(),
                        src,
                        self.cfg.ethertype,
                        &repr,
                    ) {
                        let _ = self.link.send(&self.tx[..len]);
                    }
                }
                SynOutcome::Drop(_) => {}
            }
        }
        let now = Instant::now();
        for e in self.listener.entries_mut() {
            let child = &mut e.handle;
            if let Err(err) = child.io.poll(&mut e.conn, &mut *child.link, now) {
                log::warn!(
                    "ESP listener: half-open connection {:?}: {err}",
                    e.conn.remote()
                );
            }
        }
        self.listener.reap();
        let Some(entry) = self.listener.accept() else {
            return Ok(None);
        };
        let remote = entry.conn.remote();
        lock(&self.known).insert(remote);
        let registration = Registration {
            set: self.known.clone(),
            key: remote,
        };
        let Child { link, io } = entry.handle;
        let drv = ConnDriver::from_parts(entry.conn, link, io);
        let mut s = EspStream::from_driver(drv, &self.cfg);
        s.iface = self.iface.clone();
        if let Inner::Direct(core) = &mut s.inner {
            core._registration = Some(registration);
        }
        if self.cfg.progress_thread {
            s.spawn_progress()?;
        }
        Ok(Some((s, remote)))
    }
}

impl mio::event::Source for EspListener {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        mio::unix::SourceFd(&self.fd).register(registry, token, interests)
    }
    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        mio::unix::SourceFd(&self.fd).reregister(registry, token, interests)
    }
    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        mio::unix::SourceFd(&self.fd).deregister(registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send<T: Send>() {}
    fn sync<T: Sync>() {}

    #[test]
    fn sockets_can_move_between_threads() {
        send::<EspStream>();
        send::<EspListener>();
        sync::<EspListener>();
    }
}
