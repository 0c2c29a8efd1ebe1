//! The one driver of every protocol: how threads wait for their sockets,
//! who polls the link, who keeps the deadlines, and how readiness reaches
//! parked threads and `mio` users.
//!
//! Progress is caller-driven, as in an MPI progress engine: whoever waits
//! progresses everyone. At most one waiting thread polls the link at a time
//! (the *leader*): it spins (busy-poll, or the first part of an adaptive
//! wait) on the RX ring's status word while holding the engine lock, or
//! sleeps in ppoll(2) on the link and the driver's wake eventfd. Every other
//! waiting thread is a *follower*: it parks (after spinning on its own flag
//! in busy modes) and is unparked when its slot's readiness changes. When
//! the leader is done it hands the role to a follower.
//!
//! Protocol deadlines (retransmissions, delayed ACKs, keepalives, lingering
//! closes) belong to the service thread (`runtime::service`), so a sleeping
//! leader's ppoll carries only its caller's own timeout: measured on KVM,
//! arming and cancelling a short hrtimer per wait reprograms the virtual
//! LAPIC timer each time (64-byte ESP ping-pong p50 16 us against 8.7 us
//! with long timeouts, see esp's former alarm module). A busy leader checks
//! deadlines itself between spins.
//!
//! The driver is generic over [`Engine`]: the Ethernet engine of a runtime,
//! and CTP's UDP engine, share it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::{Thread, ThreadId};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rustc_hash::FxHashMap;

use crate::config::{Progress, WaitPolicy};
use crate::slot::SlotId;
use crate::socket::{DirectRead, Ready};

/// What the driver needs from an engine (the link and the sockets).
pub trait Engine: Send + 'static {
    /// One nonblocking turn: receive a batch, fire due timers, transmit.
    /// `direct` offers a waiting reader's buffer to its slot. Returns how
    /// many frames were received.
    ///
    /// Errors: fatal link errors.
    fn poll(
        &mut self,
        now: Instant,
        direct: Option<(SlotId, &mut DirectRead<'_>)>,
    ) -> io::Result<usize>;

    /// Fires due timers and sends what they produced, without receiving.
    fn on_deadline(&mut self, now: Instant) -> io::Result<()>;

    /// The earliest instant the engine must run again (may be early).
    fn next_deadline(&mut self) -> Option<Instant>;

    /// Before the caller waiting on `slot` sleeps: flush what would wake it
    /// soon (a delayed ACK).
    fn before_sleep(&mut self, slot: Option<SlotId>, now: Instant) -> io::Result<()>;

    /// Whether a frame is waiting, if the link can tell without a syscall.
    fn rx_ready(&self) -> Option<bool>;

    /// Reports every slot whose readiness changed since the last call.
    fn drain_changed(&mut self, f: &mut dyn FnMut(SlotId, Ready));

    /// Current readiness of `slot`.
    fn readiness(&self, slot: SlotId) -> Ready;

    /// Whether sockets linger (closing after their handle was dropped): the
    /// runtime stays alive until they finish.
    fn has_lingering(&self) -> bool;

    /// The link's descriptor reported an error condition (`POLLERR`) at
    /// `now`: let the link read the error and check its interface (see
    /// `link::health`). The default does nothing.
    fn on_link_error(&mut self, now: Instant) {
        let _ = now;
    }
}

/// Longest stretch a waiting thread spins without yielding its CPU (see
/// `Driver::spin`): a peer stacked on the same CPU gets to run within this.
const YIELD_EVERY: Duration = Duration::from_micros(5);

/// The one pacing of every spin in this file: yields the CPU once
/// `YIELD_EVERY` has passed since the pacer started or last yielded. A
/// spinner that shares its CPU with its peer (two processes of a ping-pong
/// on a busy 2-CPU machine) would otherwise hold it for a whole time slice
/// while the peer cannot answer: measured p50 was the spin budget plus 8 us
/// (ring spin) and plus 11 us (UdpLink). The kernel's own busy poll stops
/// on need_resched(); user space yields (one cheap syscall when nobody
/// waits). A spin that finishes within `YIELD_EVERY` (the usual 2 us
/// ping-pong) never yields.
/// Public for spinners outside the runtime that wait on a link of their
/// own (netgauge's raw-frame floor).
#[derive(Debug, Clone, Copy)]
pub struct YieldPacer(Instant);

impl Default for YieldPacer {
    fn default() -> Self {
        Self::new()
    }
}

impl YieldPacer {
    /// A pacer started now.
    pub fn new() -> Self {
        YieldPacer(Instant::now())
    }

    /// A pacer started at `now` (a clock reading the caller already has).
    pub fn starting(now: Instant) -> Self {
        YieldPacer(now)
    }

    /// Yields when due; returns the time after the call: `now` itself, or
    /// a fresh reading when it yielded (the yield may have lasted).
    pub fn tick(&mut self, now: Instant) -> Instant {
        if now - self.0 >= YIELD_EVERY {
            std::thread::yield_now();
            self.0 = Instant::now();
            return self.0;
        }
        now
    }
}

/// Looks at the RX ring per spin round of [`Driver::spin`]: the spin reads
/// the clock once per round, and the turn that receives the frame it found
/// takes that reading as its `now` (no clock read between the frame's
/// arrival and its handling; a read, [`link::time::now`], costs 10 ns on
/// the project's VM, `Instant::now` 23 ns). The
/// reading is then at most one round old: 1.7 us measured (a look is a
/// load of the ring slot's status, one of the lock's waiter count and a
/// PAUSE, 27 ns on the project's AMD EPYC VM). So the RTT samples of a
/// busy-polled turn may be short by up to that much, and a timer may fire
/// that much late: far below ESP's 1 ms minimum RTO (`esp::EspConfig`, a
/// departure from RFC 6298 rule 2.4's 1 s) and CTP's reorder-window and
/// probe-timeout floors. Measured alternatives
/// (busy-poll p50, same run): 16 looks per round raised EDP's p50 by
/// 0.03-0.10 us against 64, and 256 (a 6.9 us round, longer than
/// [`YIELD_EVERY`]) by 0.05-0.07 us.
const SPIN_ROUND: u32 = 64;

/// When a wait gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// Nonblocking: one turn, then `WouldBlock`.
    Now,
    /// Until this instant, then `TimedOut`.
    At(Instant),
    /// This long after the wait first has to wait, then `TimedOut`: the
    /// clock is read only then (a call served at once, such as a write
    /// into free send buffer, reads no clock for its timeout).
    Within(Duration),
    /// Without limit.
    Never,
}

/// The calling thread's id, cached per thread (`thread::current()` clones
/// an `Arc` on every call; this runs on every wait and notify).
fn current_thread() -> ThreadId {
    thread_local! {
        static ME: ThreadId = std::thread::current().id();
    }
    ME.with(|id| *id)
}

impl Deadline {
    /// A deadline `timeout` from `now` (`None` = never).
    pub fn after(now: Instant, timeout: Option<Duration>) -> Self {
        match timeout {
            Some(t) => Deadline::At(netcore::time::later(now, t)),
            None => Deadline::Never,
        }
    }

    /// A deadline `timeout` from the moment the wait first has to wait
    /// ([`Deadline::Within`]; `None` = never). Reads no clock.
    pub fn from_timeout(timeout: Option<Duration>) -> Self {
        match timeout {
            Some(t) => Deadline::Within(t),
            None => Deadline::Never,
        }
    }

    /// This deadline with [`Deadline::Within`] fixed to an instant, `now`
    /// being the start of the wait.
    pub fn fixed(self, now: Instant) -> Self {
        match self {
            Deadline::Within(t) => Deadline::At(netcore::time::later(now, t)),
            d => d,
        }
    }

    /// The instant of a fixed deadline (`None` for `Never`, `Now`, and an
    /// unfixed `Within`).
    fn instant(self) -> Option<Instant> {
        match self {
            Deadline::At(t) => Some(t),
            _ => None,
        }
    }
}

/// Who polls the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leader {
    None,
    Caller {
        thread: ThreadId,
        slot: Option<SlotId>,
        sleeping: bool,
    },
    Service,
}

struct Follower {
    slot: SlotId,
    thread: Thread,
    woken: Arc<AtomicBool>,
}

/// A `mio` registration of a socket handle: an eventfd signalled when the
/// socket's readiness gains one of the `interest` flags.
pub(crate) struct Registration {
    efd: Arc<EventFd>,
    interest: Ready,
}

/// The lock-protected part of the driver.
pub struct Inner<E: Engine> {
    /// The engine.
    pub engine: E,
    leader: Leader,
    followers: Vec<Follower>,
    registrations: FxHashMap<SlotId, Registration>,
    /// When the last caller stopped leading (for idle progress).
    last_caller: Instant,
    /// When the service thread wakes next (`None`: not known to sleep, so
    /// any new deadline pokes it).
    svc_target: Option<Instant>,
    shutdown: bool,
    /// Held while sockets linger: the runtime outlives its last handle
    /// until they finish closing.
    keep_alive: Option<Arc<Driver<E>>>,
}

/// The driver. See the module documentation.
pub struct Driver<E: Engine> {
    inner: Mutex<Inner<E>>,
    /// Threads blocked on the lock: a spinning leader steps aside.
    wanting: AtomicUsize,
    /// Interrupts a sleeping leader.
    leader_wake: EventFd,
    /// A duplicate of the link's descriptor, polled without the lock.
    link_fd: Option<OwnedFd>,
    /// Interrupts the service thread.
    pub(crate) svc_wake: Arc<EventFd>,
    pub(crate) progress: Progress,
    me: Weak<Driver<E>>,
    svc_started: AtomicBool,
    svc_name: String,
    svc_spawn: SpawnService<E>,
    /// The service thread, joined when the driver goes (see `Drop`).
    svc_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Starts a driver's service thread (named by the `String`).
pub(crate) type SpawnService<E> =
    fn(&Arc<Driver<E>>, String) -> io::Result<std::thread::JoinHandle<()>>;

impl<E: Engine> std::fmt::Debug for Driver<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("service", &self.svc_name)
            .field("progress", &self.progress)
            .finish()
    }
}

/// The engine lock, held.
pub type Guard<'a, E> = MutexGuard<'a, Inner<E>>;

fn eventfd() -> io::Result<EventFd> {
    EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
        .map_err(|e| io::Error::other(format!("eventfd: {e}")))
}

/// Drains an eventfd (ignoring EAGAIN).
pub(crate) fn drain(efd: &EventFd) {
    let _ = efd.read();
}

/// Signals an eventfd.
pub(crate) fn signal(efd: &EventFd) {
    let _ = efd.write(1);
}

/// Bit of [`sleep_on`]'s result for an error condition (`POLLERR`) on
/// `fds[i]`: `ERROR_BIT << i`.
pub(crate) const ERROR_BIT: u32 = 1 << 8;

/// Sleeps in ppoll(2) until one of `fds` (one or two) is readable or
/// `until` passes; returns which were ready (bit `i` for `fds[i]`), and
/// which of them reported an error condition (bit `ERROR_BIT << i`: a
/// packet socket whose interface went down; `POLLERR` stays set until the
/// error is read, see `Engine::on_link_error`).
pub(crate) fn sleep_on(fds: &[BorrowedFd<'_>], until: Option<Instant>) -> io::Result<u32> {
    let mut pfds: [PollFd<'_>; 2] = [
        PollFd::new(fds[0], PollFlags::POLLIN),
        PollFd::new(fds[fds.len() - 1], PollFlags::POLLIN),
    ];
    let n = fds.len().min(2);
    let timeout = until.map(|u| {
        let d = u.saturating_duration_since(Instant::now());
        nix::sys::time::TimeSpec::from_duration(d)
    });
    match nix::poll::ppoll(&mut pfds[..n], timeout, None) {
        Ok(_) => Ok(pfds[..n]
            .iter()
            .enumerate()
            .fold(0, |m, (i, p)| match p.revents() {
                Some(r) if r.contains(PollFlags::POLLERR) => m | (1 << i) | (ERROR_BIT << i),
                Some(r) if !r.is_empty() => m | (1 << i),
                _ => m,
            })),
        Err(nix::errno::Errno::EINTR) => Ok(0),
        Err(e) => Err(io::Error::other(format!("ppoll: {e}"))),
    }
}

impl<E: Engine> Driver<E> {
    /// A driver over `engine`; `link_fd` is the descriptor a sleeping
    /// leader (or the idle service thread) polls. `name` names the service
    /// thread (for `top -H` and traces), which `service` starts on first
    /// need (the runtime's `service::spawn`; given here so that the driver
    /// does not name the thread that drives it).
    ///
    /// Errors: eventfd(2) failures.
    pub(crate) fn new(
        engine: E,
        link_fd: Option<OwnedFd>,
        progress: Progress,
        name: String,
        service: SpawnService<E>,
    ) -> io::Result<Arc<Self>> {
        let leader_wake = eventfd()?;
        let svc_wake = Arc::new(eventfd()?);
        Ok(Arc::new_cyclic(|me| Driver {
            inner: Mutex::new(Inner {
                engine,
                leader: Leader::None,
                followers: Vec::new(),
                registrations: FxHashMap::default(),
                last_caller: Instant::now(),
                svc_target: None,
                shutdown: false,
                keep_alive: None,
            }),
            wanting: AtomicUsize::new(0),
            leader_wake,
            link_fd,
            svc_wake,
            progress,
            me: me.clone(),
            svc_started: AtomicBool::new(false),
            svc_name: name,
            svc_spawn: service,
            svc_thread: Mutex::new(None),
        }))
    }

    /// Takes the engine lock (ignoring poisoning: a panicked caller leaves
    /// protocol state consistent between calls).
    pub fn lock(&self) -> Guard<'_, E> {
        self.wanting.fetch_add(1, Ordering::Relaxed);
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.wanting.fetch_sub(1, Ordering::Relaxed);
        g
    }

    /// Takes the engine lock only if it is free (the service thread must
    /// not make a spinning leader step aside).
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, E>> {
        match self.inner.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Runs `f` on the engine with the current time, then reports what
    /// changed (wakes parked threads and mio users, pokes the service
    /// thread for earlier deadlines).
    pub fn with<T>(&self, f: impl FnOnce(&mut E, Instant) -> T) -> T {
        self.with_untimed(|e| f(e, link::time::now()))
    }

    /// [`Driver::with`] without reading the clock (a read,
    /// [`link::time::now`], costs ~10 ns; a datagram send or a stats read
    /// needs none).
    pub fn with_untimed<T>(&self, f: impl FnOnce(&mut E) -> T) -> T {
        let mut g = self.lock();
        let v = f(&mut g.engine);
        self.notify(&mut g);
        v
    }

    /// After a call served from buffered state (a write into free send
    /// buffer, a read of buffered data): frames already waiting in the ring
    /// are received now, one batch, when no other caller keeps the link.
    /// A writer that never has to wait would otherwise leave its ACKs in
    /// the ring until it overflows (measured: 256 streams written flat out
    /// from one thread lost 27 % of their ACKs in the sender's ring, and
    /// the retransmissions made the streams unfair). Costs one load of the
    /// ring slot's status when nothing waits; links that cannot tell
    /// without a syscall are left to the next wait.
    #[inline]
    fn drain_pending(&self, g: &mut Guard<'_, E>, me: ThreadId) {
        if g.engine.rx_ready() != Some(true) {
            return;
        }
        match g.leader {
            Leader::Caller { thread, .. } if thread != me => return,
            _ => {}
        }
        if g.engine.poll(link::time::now(), None).is_ok() {
            self.notify(g);
        }
    }

    /// Reports readiness changes and deadlines after the engine changed.
    /// Call with the lock held after every engine operation.
    pub fn notify(&self, g: &mut Guard<'_, E>) {
        let inner = &mut **g;
        let leader = inner.leader;
        let followers = &inner.followers;
        let regs = &inner.registrations;
        let wake = &self.leader_wake;
        inner.engine.drain_changed(&mut |id, r| {
            for f in followers.iter().filter(|f| f.slot == id) {
                if !f.woken.swap(true, Ordering::AcqRel) {
                    f.thread.unpark();
                }
            }
            if let Leader::Caller {
                thread,
                slot: Some(s),
                sleeping: true,
            } = leader
            {
                if s == id && thread != current_thread() {
                    signal(wake);
                }
            }
            if let Some(reg) = regs.get(&id) {
                if r.intersects(reg.interest)
                    || r.intersects(Ready::ERROR.union(Ready::UNRESPONSIVE))
                {
                    signal(&reg.efd);
                }
            }
        });
        // Who keeps a deadline that just appeared (a retransmission timer
        // armed by a send, a delayed ACK):
        // - an awake leader, or a caller that is about to wait again (the
        //   usual case: the thread that sent will wait for the answer),
        //   keeps it itself; a leader that goes to sleep hands its
        //   deadlines over first (`cover_deadlines`);
        // - otherwise the service thread, whose periodic look (at most
        //   `Progress::WhenIdle::after` after the last caller left) finds
        //   it.
        // Poking the service thread for every timer armed and cancelled
        // within one exchange would cost a thread wakeup per message: on a
        // 2-CPU machine measured as 19 us instead of 3 us for a CTP
        // ping-pong. It is poked only when it polls the link for absent
        // callers, or when nobody else will ever look (`Progress::Callers`).
        let cover = match inner.leader {
            Leader::Service => true,
            Leader::Caller { sleeping, .. } => sleeping,
            Leader::None => self.progress == Progress::Callers,
        };
        if cover || inner.engine.has_lingering() != inner.keep_alive.is_some() {
            self.cover_deadlines(g);
        }
    }

    /// Makes sure the service thread wakes for the engine's earliest
    /// deadline (pokes it when that is earlier than its current target).
    pub(crate) fn cover_deadlines(&self, g: &mut Guard<'_, E>) {
        let inner = &mut **g;
        let d = inner.engine.next_deadline();
        let lingering = inner.engine.has_lingering();
        if lingering && inner.keep_alive.is_none() {
            inner.keep_alive = self.me.upgrade();
        } else if !lingering && inner.keep_alive.is_some() {
            // The caller holds another reference (it reached `self`), so
            // this is never the last one.
            inner.keep_alive = None;
        }
        if d.is_some() || lingering {
            self.ensure_service();
            if let Some(d) = d {
                if inner.svc_target.is_none_or(|t| d < t) {
                    inner.svc_target = Some(d);
                    signal(&self.svc_wake);
                }
            }
        }
    }

    /// Starts the service thread on first need.
    pub fn ensure_service(&self) {
        if self.svc_started.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(me) = self.me.upgrade() {
            match (self.svc_spawn)(&me, self.svc_name.clone()) {
                Ok(h) => {
                    *self.svc_thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
                }
                Err(e) => {
                    tracing::error!(error = %e, "runtime: cannot start the service thread; deadlines only run inside calls");
                    self.svc_started.store(false, Ordering::Release);
                }
            }
        }
    }

    /// Waits until `check` returns a value, driving the engine meanwhile
    /// (see the module documentation). `slot` is the caller's socket (its
    /// readiness changes wake the caller); `direct` is a reader's buffer
    /// offered to that socket; `policy` says how to wait.
    ///
    /// Errors: `WouldBlock` with [`Deadline::Now`] when not done;
    /// `TimedOut` naming `what` when the deadline passes; link errors;
    /// errors `check` returns.
    pub fn wait<T>(
        &self,
        slot: SlotId,
        policy: WaitPolicy,
        deadline: Deadline,
        direct: Option<&mut [u8]>,
        what: &dyn std::fmt::Display,
        mut check: impl FnMut(&mut E, Option<&mut DirectRead<'_>>) -> io::Result<Option<T>>,
    ) -> io::Result<T> {
        let mut direct = direct.map(DirectRead::new);
        let me = current_thread();
        let mut spin_from: Option<Instant> = None;
        let mut deadline = deadline;
        // The clock reading of the spin that found a frame (see SPIN_ROUND).
        let mut spun: Option<Instant> = None;
        let mut g = self.lock();
        // Fast path: what is already buffered needs no receive (a stream
        // reader draining its buffer, a datagram queue with data).
        match check(&mut g.engine, direct.as_mut()) {
            Ok(Some(v)) => {
                self.drain_pending(&mut g, me);
                return Ok(v);
            }
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        if deadline == Deadline::Now {
            // A nonblocking call: one turn, without taking the leader role
            // (it will not wait, so it does not keep the link: the service
            // thread or a waiting caller does).
            let now = link::time::now();
            let r = match g.leader {
                Leader::Caller { thread, .. } if thread != me => Ok(0),
                _ => g.engine.poll(now, direct.as_mut().map(|d| (slot, d))),
            };
            self.notify(&mut g);
            if !direct
                .as_ref()
                .is_some_and(|d| d.filled > 0 || d.from.is_some())
            {
                r?;
            }
            return match check(&mut g.engine, direct.as_mut())? {
                Some(v) => Ok(v),
                None => Err(io::ErrorKind::WouldBlock.into()),
            };
        }
        loop {
            let now = spun.take().unwrap_or_else(link::time::now);
            deadline = deadline.fixed(now);
            let leading = match g.leader {
                Leader::None => true,
                Leader::Caller { thread, .. } => thread == me,
                Leader::Service => {
                    // A caller takes the link back from the service thread.
                    signal(&self.svc_wake);
                    true
                }
            };
            if leading {
                g.leader = Leader::Caller {
                    thread: me,
                    slot: Some(slot),
                    sleeping: false,
                };
                let r = g.engine.poll(now, direct.as_mut().map(|d| (slot, d)));
                self.notify(&mut g);
                if let Err(e) = r {
                    // Bytes already placed in the reader's buffer are
                    // returned first; the link error recurs on the next call.
                    if !direct
                        .as_ref()
                        .is_some_and(|d| d.filled > 0 || d.from.is_some())
                    {
                        self.resign(&mut g, now);
                        return Err(e);
                    }
                }
            }
            match check(&mut g.engine, direct.as_mut()) {
                Ok(Some(v)) => {
                    if leading {
                        self.resign(&mut g, now);
                    }
                    return Ok(v);
                }
                Ok(None) => {}
                Err(e) => {
                    if leading {
                        self.resign(&mut g, now);
                    }
                    return Err(e);
                }
            }
            match deadline {
                Deadline::Now => {
                    if leading {
                        self.resign(&mut g, now);
                    }
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Deadline::At(t) if now >= t => {
                    if leading {
                        self.resign(&mut g, now);
                    }
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{what}: not done within the timeout"),
                    ));
                }
                _ => {}
            }
            let spin_until = match policy.spin_budget() {
                None => deadline.instant(),
                Some(b) => {
                    let from = *spin_from.get_or_insert(now);
                    Some(
                        netcore::time::earliest(deadline.instant(), Some(from + b)).unwrap_or(from),
                    )
                }
            };
            let spinning = spin_until.is_none_or(|u| now < u);
            if leading {
                if spinning {
                    (g, spun) = self.spin(g, spin_until, now);
                    continue;
                }
                if let Err(e) = g.engine.before_sleep(Some(slot), now) {
                    self.resign(&mut g, now);
                    return Err(e);
                }
                self.notify(&mut g);
                if g.engine.rx_ready() == Some(true) {
                    // A frame arrived meanwhile: take it before sleeping.
                    continue;
                }
                g.leader = Leader::Caller {
                    thread: me,
                    slot: Some(slot),
                    sleeping: true,
                };
                self.cover_deadlines(&mut g);
                drop(g);
                let r = match &self.link_fd {
                    Some(link) => sleep_on(
                        &[link.as_fd(), self.leader_wake.as_fd()],
                        deadline.instant(),
                    ),
                    None => {
                        // In-memory link: no descriptor to sleep on.
                        std::thread::sleep(Duration::from_micros(50));
                        Ok(2)
                    }
                };
                if matches!(r, Ok(m) if m & 2 != 0) {
                    // Woken on purpose: reset the signal (one read(2) only
                    // then, not after every sleep).
                    drain(&self.leader_wake);
                }
                g = self.lock();
                if matches!(r, Ok(m) if m & ERROR_BIT != 0) {
                    // The link reported an error (its interface went down
                    // or away): read it, or ppoll returns at once forever.
                    g.engine.on_link_error(link::time::now());
                    self.notify(&mut g);
                }
                if let Leader::Caller { thread, .. } = g.leader {
                    if thread == me {
                        g.leader = Leader::Caller {
                            thread: me,
                            slot: Some(slot),
                            sleeping: false,
                        };
                    }
                }
                // Woken by activity: spin again before the next sleep.
                spin_from = None;
                r?;
            } else {
                let woken = Arc::new(AtomicBool::new(false));
                g.followers.push(Follower {
                    slot,
                    thread: std::thread::current(),
                    woken: woken.clone(),
                });
                drop(g);
                if spinning {
                    let until = spin_until;
                    let mut i = 0u32;
                    let mut pacer = YieldPacer::new();
                    while !woken.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                        i = i.wrapping_add(1);
                        if i.is_multiple_of(256) {
                            let now = Instant::now();
                            if until.is_some_and(|u| now >= u) {
                                break;
                            }
                            pacer.tick(now);
                        }
                    }
                }
                if !woken.load(Ordering::Acquire) {
                    // Bounded: a leader that leaves hands over by unparking,
                    // but a follower also re-checks leadership periodically.
                    let cap = Instant::now() + Duration::from_millis(100);
                    let until = deadline.instant().map_or(cap, |d| d.min(cap));
                    std::thread::park_timeout(until.saturating_duration_since(Instant::now()));
                }
                g = self.lock();
                g.followers.retain(|f| !Arc::ptr_eq(&f.woken, &woken));
            }
        }
    }

    /// Gives up the leader role and hands it to a follower.
    fn resign(&self, g: &mut Guard<'_, E>, now: Instant) {
        if matches!(g.leader, Leader::Caller { .. }) {
            g.leader = Leader::None;
            g.last_caller = now;
            if self.progress == Progress::Callers {
                // No idle check will come: hand the deadlines over now.
                self.cover_deadlines(g);
            }
        }
        if let Some(f) = g.followers.first() {
            if !f.woken.swap(true, Ordering::AcqRel) {
                f.thread.unpark();
            }
        }
    }

    /// The leader's spin, holding the lock: returns when a frame waits, a
    /// deadline (the caller's, the spin budget's, or the engine's) passes,
    /// or another thread wants the lock. `now` is the caller's clock
    /// reading. With the guard it returns its own last clock reading when
    /// the lock was held throughout (at most one [`SPIN_ROUND`] old, and
    /// no other thread has used the engine since), for the next turn's
    /// `now`.
    fn spin<'a>(
        &'a self,
        mut g: Guard<'a, E>,
        until: Option<Instant>,
        now: Instant,
    ) -> (Guard<'a, E>, Option<Instant>) {
        if g.engine.rx_ready().is_none() {
            // No cheap readiness probe: the next turn polls (a syscall).
            // This spin returns every turn, so its pacer lives in the
            // thread across turns.
            thread_local! {
                static PACER: std::cell::Cell<YieldPacer> = std::cell::Cell::new(YieldPacer::new());
            }
            std::hint::spin_loop();
            PACER.with(|p| {
                let mut q = p.get();
                q.tick(Instant::now());
                p.set(q);
            });
            return (g, None);
        }
        let engine_deadline = g.engine.next_deadline();
        let limit = netcore::time::earliest(until, engine_deadline);
        let mut i = 0u32;
        let mut pacer = YieldPacer::starting(now);
        let mut last = now;
        loop {
            for _ in 0..SPIN_ROUND {
                if g.engine.rx_ready() == Some(true) {
                    return (g, Some(last));
                }
                if self.wanting.load(Ordering::Relaxed) > 0 {
                    drop(g);
                    // Let the other thread in (std's mutex is not fair).
                    let mut n = 0;
                    while self.wanting.load(Ordering::Relaxed) > 0 && n < 10_000 {
                        std::hint::spin_loop();
                        n += 1;
                    }
                    std::thread::yield_now();
                    return (self.lock(), None);
                }
                std::hint::spin_loop();
            }
            i = i.wrapping_add(1);
            last = link::time::now();
            if limit.is_some_and(|l| last >= l) {
                return (g, Some(last));
            }
            last = pacer.tick(last);
            if i.is_multiple_of(64) && !g.followers.is_empty() {
                // Followers may need their frames: turn the loop (every 64
                // rounds, ~110 us).
                return (g, Some(last));
            }
        }
    }

    /// Registers `slot`'s handle with mio: its readiness, from protocol
    /// state, is reported through an eventfd.
    ///
    /// Errors: eventfd and registry errors.
    pub fn register(
        &self,
        slot: SlotId,
        registry: &mio::Registry,
        token: mio::Token,
        interest: mio::Interest,
    ) -> io::Result<()> {
        let efd = Arc::new(eventfd()?);
        let raw: RawFd = std::os::fd::AsRawFd::as_raw_fd(&*efd);
        registry.register(
            &mut mio::unix::SourceFd(&raw),
            token,
            mio::Interest::READABLE,
        )?;
        let want = interest_to_ready(interest);
        let mut g = self.lock();
        if let Some(old) = g.registrations.insert(
            slot,
            Registration {
                efd: efd.clone(),
                interest: want,
            },
        ) {
            let raw_old: RawFd = std::os::fd::AsRawFd::as_raw_fd(&*old.efd);
            let _ = registry.deregister(&mut mio::unix::SourceFd(&raw_old));
        }
        // Already ready: report it at once (edge for the first poll).
        if g.engine.readiness(slot).intersects(want) {
            signal(&efd);
        }
        drop(g);
        // Someone must drive the link while the mio user sleeps in its own
        // poll: the service thread (idle progress).
        self.ensure_service();
        signal(&self.svc_wake);
        Ok(())
    }

    /// Changes a registration's token or interest.
    ///
    /// Errors: `NotFound` when not registered; registry errors.
    pub fn reregister(
        &self,
        slot: SlotId,
        registry: &mio::Registry,
        token: mio::Token,
        interest: mio::Interest,
    ) -> io::Result<()> {
        let mut g = self.lock();
        let want = interest_to_ready(interest);
        let ready = g.engine.readiness(slot);
        let reg = g
            .registrations
            .get_mut(&slot)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "socket not registered"))?;
        reg.interest = want;
        let raw: RawFd = std::os::fd::AsRawFd::as_raw_fd(&*reg.efd);
        registry.reregister(
            &mut mio::unix::SourceFd(&raw),
            token,
            mio::Interest::READABLE,
        )?;
        if ready.intersects(want) {
            signal(&reg.efd);
        }
        Ok(())
    }

    /// Removes a registration.
    ///
    /// Errors: `NotFound` when not registered; registry errors.
    pub fn deregister(&self, slot: SlotId, registry: &mio::Registry) -> io::Result<()> {
        let reg = self
            .lock()
            .registrations
            .remove(&slot)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "socket not registered"))?;
        let raw: RawFd = std::os::fd::AsRawFd::as_raw_fd(&*reg.efd);
        registry.deregister(&mut mio::unix::SourceFd(&raw))
    }

    /// After a nonblocking call on `slot` returned `WouldBlock`: drains its
    /// registration's eventfd and re-signals it if the socket became ready
    /// meanwhile (so an edge is never lost).
    pub fn rearm(&self, g: &Guard<'_, E>, slot: SlotId) {
        if let Some(reg) = g.registrations.get(&slot) {
            drain(&reg.efd);
            if g.engine.readiness(slot).intersects(reg.interest) {
                signal(&reg.efd);
            }
        }
    }

    /// [`Driver::rearm`] taking the lock itself.
    pub fn rearm_slot(&self, slot: SlotId) {
        let g = self.lock();
        self.rearm(&g, slot);
    }

    /// Forgets `slot`'s registration (its handle is gone).
    pub(crate) fn forget(&self, g: &mut Guard<'_, E>, slot: SlotId) {
        g.registrations.remove(&slot);
    }

    // --- for the service thread ---

    /// (a caller leads, it is awake (spinning or working), the service
    /// thread leads, when the last caller left).
    pub(crate) fn svc_state(g: &Guard<'_, E>) -> (bool, bool, bool, Instant) {
        (
            matches!(g.leader, Leader::Caller { .. }),
            matches!(
                g.leader,
                Leader::Caller {
                    sleeping: false,
                    ..
                }
            ),
            matches!(g.leader, Leader::Service),
            g.last_caller,
        )
    }

    pub(crate) fn svc_take_link(g: &mut Guard<'_, E>) -> bool {
        if g.leader == Leader::None {
            g.leader = Leader::Service;
            true
        } else {
            g.leader == Leader::Service
        }
    }

    pub(crate) fn svc_release_link(g: &mut Guard<'_, E>) {
        if g.leader == Leader::Service {
            g.leader = Leader::None;
        }
    }

    pub(crate) fn svc_set_target(g: &mut Guard<'_, E>, t: Option<Instant>) {
        g.svc_target = t;
    }

    pub(crate) fn is_shutdown(g: &Guard<'_, E>) -> bool {
        g.shutdown
    }

    pub(crate) fn link_fd(&self) -> Option<&OwnedFd> {
        self.link_fd.as_ref()
    }
}

/// Stops the service thread and, unless the last handle went on that
/// thread itself, joins it before the engine (and its link) is dropped:
/// when the last handle is gone, the link's socket is closed and its
/// address free (a closed endpoint's port can be bound again at once),
/// and no thread of the runtime still runs code of a shared library
/// that may be unloaded next (libfabric dlcloses its providers). A
/// thread cannot join itself: that one is left to
/// `crate::exiting::join_exiting`.
impl<E: Engine> Drop for Driver<E> {
    fn drop(&mut self) {
        if let Ok(mut g) = self.inner.lock() {
            g.shutdown = true;
        }
        signal(&self.svc_wake);
        let h = self
            .svc_thread
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = h {
            if h.thread().id() == std::thread::current().id() {
                crate::exiting::push(h);
            } else if h.join().is_err() {
                tracing::warn!("runtime: the service thread panicked");
            }
        }
    }
}

fn interest_to_ready(i: mio::Interest) -> Ready {
    let mut r = Ready::NONE;
    r.set(Ready::READABLE, i.is_readable());
    r.set(Ready::WRITABLE, i.is_writable());
    r
}

/// Implements `mio::event::Source` for a handle on a runtime slot, once for
/// every socket kind (EDP, ESP stream and listener, CTP): readiness comes
/// from the slot's protocol state through the driver's eventfd for it
/// ([`Driver::register`]). `|s| (driver, slot)` maps the handle to its
/// driver and slot.
///
/// ```ignore
/// runtime::slot_source!(impl for EspStream, |s| (s.rt.driver(), s.slot));
/// runtime::slot_source!(impl<T: Transport> for CtpSocket<T>, |s| (s.shared.tr.driver(), s.shared.tr.slot()));
/// ```
#[macro_export]
macro_rules! slot_source {
    (impl $(<$g:ident : $b:path>)? for $ty:ty, |$s:ident| ($driver:expr, $slot:expr)) => {
        impl$(<$g: $b>)? $crate::mio::event::Source for $ty {
            fn register(
                &mut self,
                registry: &$crate::mio::Registry,
                token: $crate::mio::Token,
                interests: $crate::mio::Interest,
            ) -> ::std::io::Result<()> {
                let $s = &*self;
                $driver.register($slot, registry, token, interests)
            }
            fn reregister(
                &mut self,
                registry: &$crate::mio::Registry,
                token: $crate::mio::Token,
                interests: $crate::mio::Interest,
            ) -> ::std::io::Result<()> {
                let $s = &*self;
                $driver.reregister($slot, registry, token, interests)
            }
            fn deregister(&mut self, registry: &$crate::mio::Registry) -> ::std::io::Result<()> {
                let $s = &*self;
                $driver.deregister($slot, registry)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_fixed_when_the_wait_starts_waiting() {
        let t = Duration::from_millis(3);
        assert_eq!(Deadline::from_timeout(Some(t)), Deadline::Within(t));
        assert_eq!(Deadline::from_timeout(None), Deadline::Never);
        let now = Instant::now();
        let fixed = Deadline::Within(t).fixed(now);
        assert_eq!(fixed, Deadline::At(now + t));
        assert_eq!(fixed.instant(), Some(now + t));
        // Fixing again (every turn of a wait does) keeps the first instant.
        assert_eq!(fixed.fixed(now + t), fixed);
        assert_eq!(Deadline::Never.fixed(now), Deadline::Never);
        assert_eq!(Deadline::Now.fixed(now), Deadline::Now);
        assert_eq!(Deadline::Within(t).instant(), None);
    }

    #[test]
    fn the_pacer_returns_a_fresh_reading_only_after_yielding() {
        let start = Instant::now();
        let mut p = YieldPacer::starting(start);
        assert_eq!(p.tick(start), start, "not due: the given reading");
        // A reading an hour ahead is due: the pacer yields and returns the
        // clock's own (earlier) reading, not the one it was given.
        let ahead = start + Duration::from_secs(3600);
        let after = p.tick(ahead);
        assert!(after < ahead && after >= start);
        // The pacer restarted at that reading: not due again at once.
        assert_eq!(p.tick(after), after);
    }
}
