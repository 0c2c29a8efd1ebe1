//! [`CtpSocket`]: the driver. It owns a [`Transport`] and an
//! `edp::event::EventLoop` (mio + timerfd, microsecond deadlines), feeds the
//! sans-IO [`Endpoint`] and routes its deliveries: to the subscriber of the
//! command, else to the default handler, else to a queue read by
//! [`CtpSocket::recv_delivery`]. Handlers run on the bounded deliverer pool.
//!
//! Progress: the calling thread drives the protocol while it waits
//! (`recv_delivery`, `wait_confirmed`, `flush`, `poll`); for an application
//! that only sends or only uses handlers, [`CtpSocket::spawn_server_thread`]
//! keeps confirmations and resends going (the spec's "server thread").
//! Sockets are cheap to clone (shared state) and usable from many threads.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use edp::event::EventLoop;
use edp::link::fault::FaultConfig;
use edp::EdpConfig;
use mio::{Interest, Token};

use crate::deliver::DelivererPool;
use crate::endpoint::{
    Config, Delivery, Endpoint, ErrorType, MsgId, SendError, Stats, StorageSizes,
};
use crate::transport::{EdpTransport, Transport, UdpTransport};
use crate::wire::{Options, CTP_HEADER_LEN};

const SOCK_TOKEN: Token = Token(0);
const WAKE_TOKEN: Token = Token(1);

/// Options of a [`CtpSocket`].
#[derive(Debug, Clone)]
pub struct CtpConfig {
    /// Protocol tunables. `data_size` is lowered to what the transport carries
    /// (UDP: 65482; EDP: link MTU - 31).
    pub core: Config,
    /// Most deliverer threads (spec `maxthreads`, 50).
    pub max_deliverers: usize,
    /// Spin instead of sleeping while waiting (lower latency, one core busy).
    pub busy_poll: bool,
    /// Seed of the random starting ids; `None` = from the OS.
    pub seed: Option<u64>,
    /// UDP only: where broadcast commands go (e.g. `10.0.0.255:1515`); `None`
    /// disables broadcast.
    pub udp_broadcast: Option<SocketAddr>,
    /// EDP only: socket options.
    pub edp: EdpConfig,
    /// EDP only: destination port of broadcasts (default: our own port).
    pub edp_broadcast_port: Option<u16>,
    /// Outside busy-poll mode, spin this long at the start of each wait
    /// before sleeping in epoll (a reply that comes sooner costs no wakeup;
    /// like the kernel's `net.core.busy_poll`). Default 0: sleep at once.
    pub spin_before_sleep: Duration,
    /// Outside busy-poll mode, while a large message is being reassembled,
    /// spin up to this long after the last datagram before sleeping: its
    /// next part is usually microseconds away, a wakeup costs tens of them.
    /// Default 0 (sleep at once): on the shared 2-vCPU test machine 50 us
    /// gave no clear gain (medians within the run-to-run noise).
    pub spin_while_reassembling: Duration,
    /// How long `send` waits (driving the protocol) for room in a full
    /// sent-commands storage before failing with [`SendError::Full`];
    /// `None` waits without limit. Default 60 s.
    pub send_timeout: Option<Duration>,
}

impl Default for CtpConfig {
    fn default() -> Self {
        Self {
            core: Config::default(),
            max_deliverers: 50,
            busy_poll: false,
            seed: None,
            udp_broadcast: None,
            edp: EdpConfig {
                echo_responder: false,
                ..EdpConfig::default()
            },
            edp_broadcast_port: None,
            send_timeout: Some(Duration::from_secs(60)),
            spin_before_sleep: Duration::ZERO,
            spin_while_reassembling: Duration::ZERO,
        }
    }
}

/// A delivery handler: gets the socket (to reply) and the delivery.
pub type Handler<T> =
    Arc<dyn Fn(&CtpSocket<T>, Delivery<<T as Transport>::Addr>) + Send + Sync + 'static>;

/// Driver counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Datagrams the transport refused with an error other than WouldBlock.
    pub send_errors: u64,
    /// Receive errors other than WouldBlock.
    pub recv_errors: u64,
    /// Times a send hit a full socket queue (the datagram was kept and retried).
    pub send_blocked: u64,
}

struct Core<T: Transport> {
    ep: Endpoint<T::Addr>,
    tr: T,
    tx: Vec<u8>,
    rx: Vec<u8>,
    blocked: Option<(T::Addr, usize)>,
    /// When the last datagram was received.
    last_rx: Instant,
    /// Datagrams (mostly confirmations) left unsent so that a delivery
    /// reaches the application first; sent at the next progress or send.
    deferred: bool,
    last_send_failed: bool,
    stats: DriverStats,
}

struct Routes<T: Transport> {
    by_command: HashMap<u16, Handler<T>>,
    default: Option<Handler<T>>,
}

struct Shared<T: Transport> {
    core: Mutex<Core<T>>,
    ev: Mutex<EventLoop>,
    waker: mio::Waker,
    polling: AtomicBool,
    queue: Mutex<VecDeque<Delivery<T::Addr>>>,
    queue_cv: Condvar,
    routes: RwLock<Routes<T>>,
    pool: Arc<DelivererPool>,
    has_source: bool,
    name: String,
    send_timeout: Option<Duration>,
    spin: Duration,
    spin_reassembly: Duration,
}

impl<T: Transport> Drop for Shared<T> {
    fn drop(&mut self) {
        // Confirmations deferred behind a delivery still go out.
        let c = self.core.get_mut().unwrap_or_else(|e| e.into_inner());
        if c.deferred || c.ep.has_transmit() {
            CtpSocket::<T>::flush_tx(c);
        }
        self.pool.shutdown();
    }
}

/// A CTP endpoint bound to a transport. See the module documentation.
pub struct CtpSocket<T: Transport> {
    shared: Arc<Shared<T>>,
}

impl<T: Transport> Clone for CtpSocket<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T: Transport> std::fmt::Debug for CtpSocket<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CtpSocket")
            .field("local", &self.shared.name)
            .finish()
    }
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl CtpSocket<UdpTransport> {
    /// CTP over UDP bound to `addr` (CTP v1.2 wire format; use port 0 for any).
    ///
    /// Errors: socket errors (EADDRINUSE, ...), event-loop creation errors.
    pub fn bind_udp(addr: impl ToSocketAddrs, cfg: CtpConfig) -> io::Result<Self> {
        let tr = UdpTransport::bind(addr, cfg.udp_broadcast)?;
        Self::new(tr, cfg)
    }

    /// The bound UDP address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        lock(&self.shared.core).tr.local_addr()
    }
}

impl CtpSocket<EdpTransport> {
    /// CTP over EDP on interface `iface`, EDP port `port` (0 = any free
    /// port). Packets carry at most link MTU - 31 data bytes.
    ///
    /// Errors: those of `EdpSocket::bind_with` (EPERM names CAP_NET_RAW and
    /// the setcap command; EADDRINUSE for an owned port; unknown interface).
    pub fn bind_edp(iface: &str, port: u16, cfg: CtpConfig) -> io::Result<Self> {
        let mut tr = EdpTransport::bind(iface, port, &cfg.edp)?;
        if let Some(p) = cfg.edp_broadcast_port {
            tr = EdpTransport::new(tr.into_socket(), p)?;
        }
        Self::new(tr, cfg)
    }

    /// Like [`CtpSocket::bind_edp`] with seeded fault injection on the send
    /// side of the link (netgauge `--loss`): see `edp::link::fault`.
    pub fn bind_edp_with_faults(
        iface: &str,
        port: u16,
        cfg: CtpConfig,
        faults: FaultConfig,
    ) -> io::Result<Self> {
        let mut tr = EdpTransport::bind_with_faults(iface, port, &cfg.edp, faults)?;
        if let Some(p) = cfg.edp_broadcast_port {
            tr = EdpTransport::new(tr.into_socket(), p)?;
        }
        Self::new(tr, cfg)
    }

    /// Local `(interface, MAC, port)`.
    pub fn local_addr(&self) -> io::Result<(String, edp::MacAddr, u16)> {
        lock(&self.shared.core).tr.local_addr()
    }
}

impl<T: Transport> CtpSocket<T> {
    /// A socket over `transport`.
    ///
    /// Errors: event-loop creation or registration errors.
    pub fn new(mut transport: T, cfg: CtpConfig) -> io::Result<Self> {
        let mut core_cfg = cfg.core.clone();
        let max_data = transport.max_datagram().saturating_sub(CTP_HEADER_LEN);
        if max_data == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "transport carries {} bytes per datagram: no room for data after the {CTP_HEADER_LEN}-byte CTP header",
                    transport.max_datagram()
                ),
            ));
        }
        core_cfg.data_size = core_cfg
            .data_size
            .clamp(1, max_data.min(65535 - CTP_HEADER_LEN));
        let seed = cfg.seed.unwrap_or_else(rand::random);
        let now = Instant::now();
        let ep = Endpoint::new(
            core_cfg,
            now,
            SystemTime::now(),
            seed,
            transport.broadcast_addr(),
        );
        let mut ev = EventLoop::new()?;
        ev.set_busy(cfg.busy_poll);
        let has_source = match transport.source() {
            Some(src) => {
                ev.registry()
                    .register(src, SOCK_TOKEN, Interest::READABLE | Interest::WRITABLE)?;
                true
            }
            None => false,
        };
        let waker = mio::Waker::new(ev.registry(), WAKE_TOKEN)?;
        let bufsize = ep.config().max_packet_len().max(transport.max_datagram()) + 64;
        let name = transport.local_name();
        let core = Core {
            ep,
            tr: transport,
            tx: vec![0; bufsize],
            rx: vec![0; bufsize],
            blocked: None,
            last_rx: now,
            deferred: false,
            last_send_failed: false,
            stats: DriverStats::default(),
        };
        Ok(Self {
            shared: Arc::new(Shared {
                core: Mutex::new(core),
                ev: Mutex::new(ev),
                waker,
                polling: AtomicBool::new(false),
                queue: Mutex::new(VecDeque::new()),
                queue_cv: Condvar::new(),
                routes: RwLock::new(Routes {
                    by_command: HashMap::new(),
                    default: None,
                }),
                pool: DelivererPool::new(cfg.max_deliverers),
                has_source,
                name,
                send_timeout: cfg.send_timeout,
                spin: cfg.spin_before_sleep,
                spin_reassembly: cfg.spin_while_reassembling,
            }),
        })
    }

    /// Human-readable local address.
    pub fn local_name(&self) -> &str {
        &self.shared.name
    }

    /// Runs `f` on the protocol core (e.g. `set_broadcast_group`,
    /// `set_peer_timeout`, `received_ids`).
    pub fn with_endpoint<R>(&self, f: impl FnOnce(&mut Endpoint<T::Addr>) -> R) -> R {
        let mut c = lock(&self.shared.core);
        let r = f(&mut c.ep);
        self.after_change(&mut c);
        r
    }

    /// The receivers a broadcast must be confirmed by (at most 64); see
    /// [`Endpoint::set_broadcast_group`]. Errors: `Err(n)` for more than 64.
    pub fn set_broadcast_group(&self, group: Vec<T::Addr>) -> Result<(), usize> {
        self.with_endpoint(|e| e.set_broadcast_group(group))
    }

    /// Fixes the resend timeout for `peer` (no adaptation; zero disables
    /// resending), as the spec's `SetTimeout`.
    pub fn set_peer_timeout(&self, peer: T::Addr, timeout: Duration) {
        self.with_endpoint(|e| e.set_peer_timeout(peer, timeout))
    }

    /// Drops message `msg` from the sent-commands storage (no further
    /// resends, no error). Returns false if it was no longer stored.
    pub fn cancel(&self, msg: MsgId) -> bool {
        self.with_endpoint(|e| e.cancel(msg))
    }

    /// Spin while waiting (busy polling) instead of sleeping in epoll.
    pub fn set_busy_poll(&self, on: bool) {
        lock(&self.shared.ev).set_busy(on);
    }

    /// Sends `data` as command `command` (0..=32767) to `peer` with `options`
    /// (CTP spec "Options"). Returns once the message is stored: its packets
    /// are kept until confirmed; a failure arrives later as an error delivery.
    /// When the sent-commands storage is full it first drives the protocol
    /// until confirmations make room (at most `send_timeout`).
    ///
    /// Errors: [`SendError`] (`Full` after `send_timeout`).
    pub fn send(
        &self,
        command: u16,
        peer: T::Addr,
        data: &[u8],
        options: Options,
    ) -> Result<MsgId, SendError> {
        let mut c = self.storage_room(data.len() as u64)?;
        let id = c.ep.send(Instant::now(), command, peer, data, options)?;
        self.after_change(&mut c);
        Ok(id)
    }

    /// As [`CtpSocket::send`], without copying `data`.
    pub fn send_vec(
        &self,
        command: u16,
        peer: T::Addr,
        data: Vec<u8>,
        options: Options,
    ) -> Result<MsgId, SendError> {
        let mut c = self.storage_room(data.len() as u64)?;
        let id =
            c.ep.send_vec(Instant::now(), command, peer, data, options)?;
        self.after_change(&mut c);
        Ok(id)
    }

    /// Broadcasts `data` (UDP broadcast address / broadcast MAC); each
    /// receiver confirms. Errors: [`SendError::NoBroadcast`] without a
    /// broadcast address, and those of [`CtpSocket::send`].
    pub fn broadcast(
        &self,
        command: u16,
        data: &[u8],
        options: Options,
    ) -> Result<MsgId, SendError> {
        let mut c = self.storage_room(data.len() as u64)?;
        let b = c.ep.broadcast_addr().ok_or(SendError::NoBroadcast)?;
        let id = c.ep.send(
            Instant::now(),
            command,
            b,
            data,
            options | Options::BROADCAST,
        )?;
        self.after_change(&mut c);
        Ok(id)
    }

    /// Sends a ping (DelAfterError|NoResend|UniqueCommand, empty body).
    pub fn ping(&self, command: u16, peer: T::Addr) -> Result<MsgId, SendError> {
        let mut c = lock(&self.shared.core);
        let id = c.ep.ping(Instant::now(), command, peer)?;
        self.after_change(&mut c);
        Ok(id)
    }

    /// Locks the core once the storage has room for `size` bytes, driving
    /// the protocol while it waits.
    fn storage_room(&self, size: u64) -> Result<MutexGuard<'_, Core<T>>, SendError> {
        {
            let c = lock(&self.shared.core);
            if c.ep.has_room(size) {
                return Ok(c);
            }
        }
        let deadline = self.shared.send_timeout.map(|t| Instant::now() + t);
        let _ = self.drive(deadline, || lock(&self.shared.core).ep.has_room(size));
        let c = lock(&self.shared.core);
        if c.ep.has_room(size) {
            Ok(c)
        } else {
            Err(SendError::Full {
                stored: c.ep.stored_bytes(),
                size,
                limit: c.ep.config().max_stored_bytes,
            })
        }
    }

    /// After the core changed outside the poller: send what is ready, route
    /// deliveries, wake a sleeping poller so it re-reads the deadline.
    fn after_change(&self, c: &mut Core<T>) {
        Self::flush_tx(c);
        self.route(c);
        if self.shared.polling.load(Ordering::Acquire) {
            let _ = self.shared.waker.wake();
        }
    }

    /// Registers `handler` for deliveries of `command` (data and errors about it).
    pub fn subscribe(
        &self,
        command: u16,
        handler: impl Fn(&CtpSocket<T>, Delivery<T::Addr>) + Send + Sync + 'static,
    ) {
        self.shared
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .by_command
            .insert(command, Arc::new(handler));
    }

    /// Removes the subscriber of `command`.
    pub fn unsubscribe(&self, command: u16) {
        self.shared
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .by_command
            .remove(&command);
    }

    /// Sets the default receiver: it gets deliveries no subscriber takes
    /// (spec "default receiver"). Without one they queue for
    /// [`CtpSocket::recv_delivery`].
    pub fn set_default_handler(
        &self,
        handler: impl Fn(&CtpSocket<T>, Delivery<T::Addr>) + Send + Sync + 'static,
    ) {
        self.shared
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .default = Some(Arc::new(handler));
    }

    /// Removes the default receiver: unclaimed deliveries queue again.
    pub fn clear_default_handler(&self) {
        self.shared
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .default = None;
    }

    /// Routes deliveries; returns true if any went to the application queue.
    fn route(&self, c: &mut Core<T>) -> bool {
        let mut queued = false;
        while let Some(d) = c.ep.poll_delivery() {
            let h = {
                let r = self.shared.routes.read().unwrap_or_else(|e| e.into_inner());
                d.command()
                    .and_then(|cmd| r.by_command.get(&cmd).cloned())
                    .or_else(|| r.default.clone())
            };
            match h {
                Some(h) => {
                    let weak: Weak<Shared<T>> = Arc::downgrade(&self.shared);
                    self.shared.pool.submit(Box::new(move || {
                        if let Some(shared) = weak.upgrade() {
                            h(&CtpSocket { shared }, d);
                        }
                    }));
                }
                None => {
                    lock(&self.shared.queue).push_back(d);
                    queued = true;
                }
            }
        }
        if queued {
            self.shared.queue_cv.notify_all();
        }
        queued
    }

    fn flush_tx(c: &mut Core<T>) {
        let c = &mut *c;
        c.deferred = false;
        if let Some((dest, len)) = c.blocked {
            match c.tr.send_to(&c.tx[..len], dest) {
                Ok(()) => c.blocked = None,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    c.blocked = None;
                    Self::send_failed(c, e, dest);
                }
            }
        }
        while let Some(t) = c.ep.poll_transmit(&mut c.tx) {
            match c.tr.send_to(&c.tx[..t.len], t.dest) {
                Ok(()) => c.last_send_failed = false,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.stats.send_blocked += 1;
                    c.blocked = Some((t.dest, t.len));
                    return;
                }
                Err(e) => Self::send_failed(c, e, t.dest),
            }
        }
    }

    fn send_failed(c: &mut Core<T>, e: io::Error, dest: T::Addr) {
        c.stats.send_errors += 1;
        // One error delivery per run of failures, not one per datagram; the
        // packet itself stays stored and is resent on its schedule.
        if !c.last_send_failed {
            log::warn!("ctp: send to {dest:?} failed: {e}");
            c.ep.push_error(
                Instant::now(),
                ErrorType::Transport,
                e.raw_os_error().unwrap_or(0) as i64,
                Some(dest),
            );
        }
        c.last_send_failed = true;
    }

    /// Receives what is ready, runs due timers, routes deliveries, sends.
    /// When a delivery was queued for the application the sends are
    /// deferred to the next call, so the application sees it one syscall
    /// earlier (and a reply it sends goes out before the confirmation).
    fn progress(&self, c: &mut Core<T>) {
        if c.deferred {
            Self::flush_tx(c);
        }
        let now = Instant::now();
        let c2 = &mut *c;
        let mut errors = 0;
        let mut batch = 0u32;
        loop {
            match c2.tr.recv_from(&mut c2.rx) {
                Ok((n, from)) => {
                    c2.ep.handle_datagram(now, from, &c2.rx[..n]);
                    c2.last_rx = now;
                    batch += 1;
                    // Confirm as we go during a long burst, so the sender
                    // does not time out while we drain the socket.
                    if batch & 31 == 0 {
                        Self::flush_tx(c2);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    c2.stats.recv_errors += 1;
                    errors += 1;
                    log::debug!("ctp: receive error on {}: {e}", self.shared.name);
                    if errors > 64 {
                        break;
                    }
                }
            }
        }
        if c2.ep.poll_timeout().is_some_and(|t| t <= now) {
            c2.ep.handle_timeout(now);
        }
        if self.route(c) && c.blocked.is_none() {
            c.deferred = true;
        } else {
            Self::flush_tx(c);
        }
    }

    /// Drives the protocol until `done` returns true (checked after each
    /// progress step) or `deadline` passes; returns whether `done` held.
    fn drive(&self, deadline: Option<Instant>, mut done: impl FnMut() -> bool) -> io::Result<bool> {
        let spin_until = Instant::now() + self.shared.spin;
        {
            let mut c = lock(&self.shared.core);
            if c.deferred {
                Self::flush_tx(&mut c);
            }
        }
        loop {
            if done() {
                return Ok(true);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(false);
            }
            match self.shared.ev.try_lock() {
                Ok(mut ev) => {
                    self.shared.polling.store(true, Ordering::Release);
                    let (next, mid_message) = {
                        let mut c = lock(&self.shared.core);
                        self.progress(&mut c);
                        let next = match (c.ep.poll_timeout(), c.tr.poll_at()) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        let mid = c.ep.reassembling() > 0
                            && c.last_rx.elapsed() < self.shared.spin_reassembly;
                        (next, mid)
                    };
                    if done() {
                        self.shared.polling.store(false, Ordering::Release);
                        return Ok(true);
                    }
                    {
                        // Not returning to the application: send what
                        // progress deferred before sleeping.
                        let mut c = lock(&self.shared.core);
                        if c.deferred {
                            Self::flush_tx(&mut c);
                        }
                    }
                    let wake = match (next, deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let r = if ev.busy() || mid_message || Instant::now() < spin_until {
                        std::hint::spin_loop();
                        Ok(())
                    } else if self.shared.has_source {
                        ev.wait(wake)
                    } else {
                        let cap = Instant::now() + Duration::from_micros(50);
                        let until = wake.map_or(cap, |w| w.min(cap));
                        std::thread::sleep(until.saturating_duration_since(Instant::now()));
                        Ok(())
                    };
                    self.shared.polling.store(false, Ordering::Release);
                    drop(ev);
                    self.shared.queue_cv.notify_all();
                    r?;
                }
                Err(_) => {
                    // Another thread is polling: wait for a delivery or a turn.
                    let q = lock(&self.shared.queue);
                    let mut wait = Duration::from_millis(1);
                    if let Some(d) = deadline {
                        wait = wait.min(d.saturating_duration_since(now));
                    }
                    let _ = self
                        .shared
                        .queue_cv
                        .wait_timeout(q, wait)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }

    /// Takes the next delivery from the queue (deliveries no subscriber or
    /// default handler took), driving the protocol while it waits.
    /// `None` waits without limit.
    ///
    /// Errors: `TimedOut` when nothing arrived within `timeout`; event-loop errors.
    pub fn recv_delivery(&self, timeout: Option<Duration>) -> io::Result<Delivery<T::Addr>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut got = None;
        self.drive(deadline, || {
            got = lock(&self.shared.queue).pop_front();
            got.is_some()
        })?;
        got.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no CTP delivery on {} within {:?}",
                    self.shared.name,
                    timeout.unwrap_or_default()
                ),
            )
        })
    }

    /// The next queued delivery, if any, after one nonblocking progress step.
    pub fn try_recv_delivery(&self) -> Option<Delivery<T::Addr>> {
        if let Some(d) = lock(&self.shared.queue).pop_front() {
            return Some(d);
        }
        {
            let mut c = lock(&self.shared.core);
            self.progress(&mut c);
        }
        lock(&self.shared.queue).pop_front()
    }

    /// Drives the protocol for `timeout` (receiving, confirming, resending,
    /// routing deliveries), e.g. from an application loop that does not read
    /// deliveries, or to linger after the last send.
    ///
    /// Errors: event-loop errors.
    pub fn poll(&self, timeout: Duration) -> io::Result<()> {
        self.drive(Some(Instant::now() + timeout), || false)?;
        Ok(())
    }

    /// Drives the protocol until message `msg` is confirmed (true) or no
    /// longer stored (error delivered, cancelled) or `timeout` passes.
    ///
    /// Returns true if `msg` left the storage within `timeout`. Errors: event-loop errors.
    pub fn wait_confirmed(&self, msg: MsgId, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.drive(deadline, || !lock(&self.shared.core).ep.is_pending(msg))
    }

    /// Drives the protocol until the sent-commands storage is empty or
    /// `timeout` passes; returns true if it emptied.
    pub fn flush(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.drive(deadline, || {
            lock(&self.shared.core)
                .ep
                .storage_sizes()
                .awaiting_confirmation
                == 0
        })
    }

    /// Starts a thread that drives the protocol until every other handle to
    /// this socket is dropped (the spec's server thread). Handlers and the
    /// delivery queue keep working without any application thread waiting.
    pub fn spawn_server_thread(&self) -> io::Result<std::thread::JoinHandle<()>> {
        let weak = Arc::downgrade(&self.shared);
        std::thread::Builder::new()
            .name("ctp-server".into())
            .spawn(move || {
                while let Some(shared) = weak.upgrade() {
                    let s = CtpSocket { shared };
                    if s.poll(Duration::from_millis(10)).is_err() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })
    }

    /// Storage sizes and deliverer counts (spec `Get...Count`).
    pub fn status(&self) -> StorageSizes {
        let mut s = lock(&self.shared.core).ep.storage_sizes();
        let (threads, busy, jobs) = self.shared.pool.counts();
        s.deliveries_queued += lock(&self.shared.queue).len() + jobs;
        s.busy_deliverers = busy;
        s.deliverers = threads;
        s
    }

    /// Protocol counters.
    pub fn stats(&self) -> Stats {
        lock(&self.shared.core).ep.stats()
    }

    /// Driver counters.
    pub fn driver_stats(&self) -> DriverStats {
        lock(&self.shared.core).stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<X: Send + Sync>() {}

    #[test]
    fn sockets_are_send_and_sync() {
        send_sync::<CtpSocket<UdpTransport>>();
        send_sync::<CtpSocket<EdpTransport>>();
    }

    #[test]
    fn transport_too_small_for_a_header_is_refused() {
        struct Tiny;
        impl Transport for Tiny {
            type Addr = u8;
            fn send_to(&mut self, _: &[u8], _: u8) -> io::Result<()> {
                Ok(())
            }
            fn recv_from(&mut self, _: &mut [u8]) -> io::Result<(usize, u8)> {
                Err(io::ErrorKind::WouldBlock.into())
            }
            fn max_datagram(&self) -> usize {
                20
            }
            fn broadcast_addr(&self) -> Option<u8> {
                None
            }
            fn source(&mut self) -> Option<&mut dyn mio::event::Source> {
                None
            }
            fn local_name(&self) -> String {
                "tiny".into()
            }
        }
        let e = CtpSocket::new(Tiny, CtpConfig::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("25-byte CTP header"), "{e}");
    }
}
