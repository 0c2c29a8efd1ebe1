//! A small event loop for the ESP and CTP drivers: [`EventLoop`] wraps a
//! `mio::Poll` plus a timerfd registered in the same poll, so a wait can end
//! at a deadline with microsecond resolution (mio alone rounds its timeout up
//! to whole milliseconds; DESIGN.md, principle 5).
//!
//! Typical use:
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use std::time::{Duration, Instant};
//! use edp::event::EventLoop;
//! let mut ev = EventLoop::new()?;
//! # let mut sock = edp::EdpSocket::bind(("eth0", 0))?;
//! ev.register(&mut sock, mio::Token(0))?;
//! loop {
//!     // the earliest protocol deadline (e.g. an RTO), in microseconds from now
//!     let deadline = Instant::now() + Duration::from_micros(250);
//!     ev.wait(Some(deadline))?;
//!     for e in ev.events() { /* read the socket of e.token() until WouldBlock */ }
//!     if ev.timed_out() { /* handle_timeout(now) */ break; }
//! }
//! # Ok(()) }
//! ```
//!
//! In busy mode ([`EventLoop::set_busy`]) `wait` spins with zero-timeout
//! polls instead of sleeping: one core is kept busy, wakeup latency drops
//! from tens of microseconds to about one poll call.
//!
//! mio is edge-triggered: after an event, read the source until
//! `WouldBlock` before waiting again.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use mio::event::{Event, Source};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::link::Link;

/// Token of the internal timerfd; do not register sources with it.
pub const TIMER_TOKEN: Token = Token(usize::MAX - 1);

/// Default number of events fetched per wait.
pub const DEFAULT_EVENTS: usize = 256;

/// `mio::Poll` + a timerfd for microsecond deadlines + an optional busy mode.
pub struct EventLoop {
    poll: Poll,
    events: Events,
    timer: OwnedFd,
    busy: bool,
    timed_out: bool,
}

impl std::fmt::Debug for EventLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLoop")
            .field("busy", &self.busy)
            .field("timed_out", &self.timed_out)
            .finish()
    }
}

impl EventLoop {
    /// Creates the poll and its timerfd (`CLOCK_MONOTONIC`, the clock of
    /// `std::time::Instant` on Linux). Errors: from epoll_create / timerfd_create.
    pub fn new() -> io::Result<Self> {
        Self::with_capacity(DEFAULT_EVENTS)
    }

    /// Like [`EventLoop::new`], fetching up to `events` events per wait.
    pub fn with_capacity(events: usize) -> io::Result<Self> {
        let poll = Poll::new()?;
        // SAFETY: plain timerfd_create call; result checked.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor we own.
        let timer = unsafe { OwnedFd::from_raw_fd(raw) };
        poll.registry().register(
            &mut SourceFd(&timer.as_raw_fd()),
            TIMER_TOKEN,
            Interest::READABLE,
        )?;
        Ok(Self {
            poll,
            events: Events::with_capacity(events.max(1)),
            timer,
            busy: false,
            timed_out: false,
        })
    }

    /// Busy mode: `wait` spins with zero timeouts instead of sleeping.
    pub fn set_busy(&mut self, busy: bool) {
        self.busy = busy;
    }

    /// Whether busy mode is on.
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// The mio registry, for (re/de)registration with other interests.
    pub fn registry(&self) -> &mio::Registry {
        self.poll.registry()
    }

    /// Registers `source` for readable events under `token`.
    /// Errors: `InvalidInput` for [`TIMER_TOKEN`]; registration errors.
    pub fn register(&self, source: &mut impl Source, token: Token) -> io::Result<()> {
        check_token(token)?;
        self.poll
            .registry()
            .register(source, token, Interest::READABLE)
    }

    /// Registers a raw descriptor for readable events under `token`.
    /// Errors: as [`EventLoop::register`].
    pub fn register_fd(&self, fd: RawFd, token: Token) -> io::Result<()> {
        check_token(token)?;
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), token, Interest::READABLE)
    }

    /// Removes `source` from the poll.
    pub fn deregister(&self, source: &mut impl Source) -> io::Result<()> {
        self.poll.registry().deregister(source)
    }

    /// Waits until a registered source has an event or `deadline` passes
    /// (`None` = no deadline). Then [`EventLoop::events`] lists the events
    /// and [`EventLoop::timed_out`] tells whether the deadline has passed.
    /// May return early with no event (a signal, a stale timer edge):
    /// callers loop. The deadline is kept to within the timerfd's and the
    /// scheduler's resolution (microseconds), not rounded to milliseconds.
    ///
    /// Errors: from epoll_wait (other than EINTR) and timerfd_settime.
    pub fn wait(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.timed_out = false;
        if self.busy {
            loop {
                self.poll_once(Some(Duration::ZERO))?;
                if self.has_events() {
                    break;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                std::hint::spin_loop();
            }
        } else {
            match deadline {
                None => self.poll_once(None)?,
                Some(d) => {
                    let now = Instant::now();
                    if d <= now {
                        self.poll_once(Some(Duration::ZERO))?;
                    } else {
                        self.arm(d - now)?;
                        let r = self.poll_once(None);
                        self.disarm()?;
                        r?;
                    }
                }
            }
        }
        self.timed_out = deadline.is_some_and(|d| Instant::now() >= d);
        Ok(())
    }

    /// Events of the last [`EventLoop::wait`] (the internal timer excluded).
    pub fn events(&self) -> impl Iterator<Item = &Event> + '_ {
        self.events.iter().filter(|e| e.token() != TIMER_TOKEN)
    }

    /// True when the last wait's deadline had passed when it returned.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    fn has_events(&self) -> bool {
        self.events().next().is_some()
    }

    fn poll_once(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                self.events.clear();
            }
            Err(e) => return Err(e),
        }
        if self.events.iter().any(|e| e.token() == TIMER_TOKEN) {
            let mut ticks = [0u8; 8];
            // SAFETY: reading 8 bytes into a valid buffer; EAGAIN is fine.
            unsafe {
                libc::read(self.timer.as_raw_fd(), ticks.as_mut_ptr() as *mut _, 8);
            }
        }
        Ok(())
    }

    fn arm(&self, after: Duration) -> io::Result<()> {
        // A zero it_value would disarm the timer: use at least 1 ns.
        let after = after.max(Duration::from_nanos(1));
        self.settime(libc::timespec {
            tv_sec: after.as_secs() as libc::time_t,
            tv_nsec: after.subsec_nanos() as libc::c_long,
        })
    }

    fn disarm(&self) -> io::Result<()> {
        self.settime(libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        })
    }

    fn settime(&self, value: libc::timespec) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: spec is a valid itimerspec; old value not requested.
        let r = unsafe {
            libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut())
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

fn check_token(token: Token) -> io::Result<()> {
    if token == TIMER_TOKEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "token usize::MAX - 1 is reserved for the event loop's timer",
        ));
    }
    Ok(())
}

/// Waits until `fd` has one of `events` (`libc::POLLIN`, `POLLOUT`) or
/// `timeout` passes (`None` = forever), with `ppoll(2)`'s nanosecond timeout
/// rather than poll(2)'s milliseconds. Returns true when the descriptor is
/// ready, false on timeout or EINTR.
///
/// Errors: from ppoll(2).
pub fn poll_fd(fd: RawFd, events: libc::c_short, timeout: Option<Duration>) -> io::Result<bool> {
    poll_fds(&[fd], events, timeout)
}

/// Waits until any of `fds` has one of `events` (`libc::POLLIN`, `POLLOUT`)
/// or `timeout` passes (`None` = forever), with `ppoll(2)`'s nanosecond
/// timeout. Returns true when at least one descriptor is ready, false on
/// timeout or EINTR. Up to 4 descriptors need no allocation.
///
/// Errors: from ppoll(2).
pub fn poll_fds(
    fds: &[RawFd],
    events: libc::c_short,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    let pfd = |fd| libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let mut small = [pfd(-1); 4];
    let mut large = Vec::new();
    let pfds: &mut [libc::pollfd] = if fds.len() <= small.len() {
        for (p, &fd) in small.iter_mut().zip(fds) {
            *p = pfd(fd);
        }
        &mut small[..fds.len()]
    } else {
        large.extend(fds.iter().map(|&fd| pfd(fd)));
        &mut large
    };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfds and ts are valid for the call; no signal mask change.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}

/// One frame from `link` for a loop that reads until `WouldBlock` (as mio's
/// edge-triggered events require): `Some(length in bytes)`, or `None` when
/// no frame is waiting. EINTR is retried.
///
/// Errors: those of [`Link::recv`] other than `WouldBlock` and
/// `Interrupted`.
pub fn recv_ready<L: Link + ?Sized>(link: &mut L, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        match link.recv(buf) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn deadline_wakes_the_loop() {
        let mut ev = EventLoop::new().unwrap();
        let d = Instant::now() + Duration::from_micros(300);
        loop {
            ev.wait(Some(d)).unwrap();
            if ev.timed_out() {
                break;
            }
        }
        // The wait never ends before its deadline.
        assert!(Instant::now() >= d);
        assert_eq!(ev.events().count(), 0);
    }

    #[test]
    fn readable_source_is_reported() {
        for busy in [false, true] {
            let mut ev = EventLoop::new().unwrap();
            ev.set_busy(busy);
            let (mut a, b) = UnixStream::pair().unwrap();
            b.set_nonblocking(true).unwrap();
            ev.register_fd(b.as_raw_fd(), Token(7)).unwrap();
            a.write_all(b"x").unwrap();
            // A far deadline: the event must end the wait, not the timer.
            let d = Instant::now() + Duration::from_secs(600);
            loop {
                ev.wait(Some(d)).unwrap();
                if ev.events().next().is_some() {
                    break;
                }
            }
            assert!(!ev.timed_out());
            let toks: Vec<_> = ev.events().map(|e| e.token()).collect();
            assert_eq!(toks, vec![Token(7)]);
        }
    }

    #[test]
    fn busy_wait_respects_deadline() {
        let mut ev = EventLoop::new().unwrap();
        ev.set_busy(true);
        let d = Instant::now() + Duration::from_micros(100);
        ev.wait(Some(d)).unwrap();
        assert!(ev.timed_out());
    }

    #[test]
    fn timer_token_is_reserved() {
        let ev = EventLoop::new().unwrap();
        let (_a, b) = UnixStream::pair().unwrap();
        assert_eq!(
            ev.register_fd(b.as_raw_fd(), TIMER_TOKEN)
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn poll_fd_times_out_and_sees_data() {
        let (mut a, b) = UnixStream::pair().unwrap();
        assert!(!poll_fd(
            b.as_raw_fd(),
            libc::POLLIN,
            Some(Duration::from_micros(200))
        )
        .unwrap());
        a.write_all(b"x").unwrap();
        assert!(poll_fd(b.as_raw_fd(), libc::POLLIN, None).unwrap());
    }

    #[test]
    fn poll_fds_sees_any_ready_descriptor() {
        let pairs: Vec<_> = (0..6).map(|_| UnixStream::pair().unwrap()).collect();
        for n in [2usize, 6] {
            let fds: Vec<RawFd> = pairs[..n].iter().map(|(_, b)| b.as_raw_fd()).collect();
            assert!(!poll_fds(&fds, libc::POLLIN, Some(Duration::from_micros(200))).unwrap());
        }
        // Data on the last descriptor only: found with the on-stack array
        // (2 descriptors) and with the allocated one (5).
        (&pairs[1].0).write_all(b"x").unwrap();
        assert!(poll_fds(
            &[pairs[0].1.as_raw_fd(), pairs[1].1.as_raw_fd()],
            libc::POLLIN,
            None
        )
        .unwrap());
        (&pairs[5].0).write_all(b"x").unwrap();
        let fds: Vec<RawFd> = pairs
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 1)
            .map(|(_, (_, b))| b.as_raw_fd())
            .collect();
        assert_eq!(fds.len(), 5);
        assert!(poll_fds(&fds, libc::POLLIN, None).unwrap());
    }

    #[test]
    fn recv_ready_reads_until_would_block() {
        use crate::link::fault::FaultConfig;
        use crate::link::sim::{SimClock, SimLink};
        let clock = SimClock::new();
        let (mut a, mut b) =
            SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        let mut buf = [0u8; 1514];
        assert_eq!(recv_ready(&mut b, &mut buf).unwrap(), None);
        let mut frame = [0u8; 60];
        frame[..6].copy_from_slice(&b.mac().0);
        frame[6..12].copy_from_slice(&a.mac().0);
        frame[12..14].copy_from_slice(&crate::wire::ETHERTYPE_EDP.to_be_bytes());
        a.send(&frame).unwrap();
        a.send(&frame[..59]).unwrap();
        clock.advance(Duration::from_secs(1));
        assert_eq!(recv_ready(&mut b, &mut buf).unwrap(), Some(60));
        assert_eq!(recv_ready(&mut b, &mut buf).unwrap(), Some(59));
        assert_eq!(recv_ready(&mut b, &mut buf).unwrap(), None);
    }
}
