//! Protocol timers for sleeping threads without a timeout on their own wait.
//!
//! Measured on a KVM guest (haltpoll cpuidle, 2 vCPUs): a blocking read that
//! sleeps in ppoll(2) with a ~1 ms timeout (the RTO) wakes for its data
//! markedly later than one with a long timeout (64-byte ESP ping-pong half
//! round trip p50 16 us vs 8.7 us), because arming and cancelling the
//! earliest hrtimer of a CPU reprograms the virtual LAPIC timer on every
//! wait. So a blocking ESP call sleeps on its link and an [`Alarm`] (an
//! eventfd) with no timeout, and one process-wide alarm thread keeps the
//! protocol deadlines: it sleeps until the earliest deadline of all alarms
//! and signals the eventfd of each alarm that expired.
//!
//! Deadlines only move later in steady state (each send pushes the RTO
//! forward), so the alarm thread wakes about once per RTO period, off the
//! data path; it is poked only when a deadline earlier than its current
//! target is set.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

const NONE: u64 = u64::MAX;

struct Inner {
    /// Deadline in ns since the alarm thread's base, or NONE.
    deadline_ns: AtomicU64,
    efd: OwnedFd,
}

/// A deadline that makes its file descriptor readable when it passes.
#[derive(Clone)]
pub struct Alarm {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Alarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alarm").field("fd", &self.fd()).finish()
    }
}

struct Service {
    base: Instant,
    alarms: Mutex<Vec<Weak<Inner>>>,
    /// Deadline the thread currently sleeps until (ns since base).
    target_ns: AtomicU64,
    control: OwnedFd,
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain eventfd(2) call; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to an eventfd.
    unsafe {
        libc::write(fd, &one as *const u64 as *const libc::c_void, 8);
    }
}

fn drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a valid u64 (EAGAIN when not signalled).
    unsafe {
        libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8);
    }
}

fn service() -> io::Result<&'static Service> {
    static S: OnceLock<Result<&'static Service, String>> = OnceLock::new();
    let r = S.get_or_init(|| {
        let control = eventfd().map_err(|e| format!("eventfd: {e}"))?;
        let s: &'static Service = Box::leak(Box::new(Service {
            base: Instant::now(),
            alarms: Mutex::new(Vec::new()),
            target_ns: AtomicU64::new(NONE),
            control,
        }));
        std::thread::Builder::new()
            .name("esp-alarm".into())
            .spawn(move || run(s))
            .map_err(|e| format!("spawning the alarm thread: {e}"))?;
        Ok(s)
    });
    r.as_ref()
        .copied()
        .map_err(|e| io::Error::other(format!("ESP alarm service: {e}")))
}

fn run(s: &'static Service) {
    loop {
        // While scanning, every `set` pokes the thread (its deadline is
        // below NONE), so a deadline stored after its alarm was scanned is
        // not lost: the wait below then returns at once and rescans. SeqCst
        // on both sides (this store, then the loads of the deadlines; the
        // setter's store of its deadline, then its load of the target):
        // either the scan sees the new deadline or the setter sees NONE.
        s.target_ns.store(NONE, Ordering::SeqCst);
        let now = s.base.elapsed().as_nanos() as u64;
        let mut min = NONE;
        {
            let mut list = s.alarms.lock().unwrap_or_else(|p| p.into_inner());
            list.retain(|w| w.strong_count() > 0);
            for a in list.iter().filter_map(Weak::upgrade) {
                let d = a.deadline_ns.load(Ordering::SeqCst);
                if d == NONE {
                    continue;
                }
                if d <= now {
                    if a.deadline_ns
                        .compare_exchange(d, NONE, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        signal(a.efd.as_raw_fd());
                    }
                } else {
                    min = min.min(d);
                }
            }
        }
        s.target_ns.store(min, Ordering::SeqCst);
        let timeout = (min != NONE).then(|| Duration::from_nanos(min.saturating_sub(now)));
        let _ = crate::driver::wait_readable(
            &[s.control.as_raw_fd()],
            timeout.map(|t| Instant::now() + t),
        );
        drain(s.control.as_raw_fd());
    }
}

impl Alarm {
    /// A new alarm, unarmed. Errors: eventfd(2) or starting the thread.
    pub fn new() -> io::Result<Alarm> {
        let s = service()?;
        let inner = Arc::new(Inner {
            deadline_ns: AtomicU64::new(NONE),
            efd: eventfd()?,
        });
        s.alarms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&inner));
        Ok(Alarm { inner })
    }

    /// The descriptor that becomes readable when the deadline passes.
    pub fn fd(&self) -> RawFd {
        self.inner.efd.as_raw_fd()
    }

    /// Arms the alarm for `deadline` (`None` disarms); clears a pending
    /// signal. A deadline already passed signals at once.
    pub fn set(&self, deadline: Option<Instant>) {
        drain(self.fd());
        let Ok(s) = service() else { return };
        let Some(d) = deadline else {
            self.inner.deadline_ns.store(NONE, Ordering::Release);
            return;
        };
        let ns = d.saturating_duration_since(s.base).as_nanos() as u64;
        if d <= Instant::now() {
            self.inner.deadline_ns.store(NONE, Ordering::Release);
            signal(self.fd());
            return;
        }
        self.inner.deadline_ns.store(ns, Ordering::SeqCst);
        if ns < s.target_ns.load(Ordering::SeqCst) {
            signal(s.control.as_raw_fd());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarm_fires_after_its_deadline_only() {
        let a = Alarm::new().unwrap();
        let b = Alarm::new().unwrap();
        let t0 = Instant::now();
        a.set(Some(t0 + Duration::from_millis(20)));
        b.set(Some(t0 + Duration::from_secs(3600)));
        let fired =
            crate::driver::wait_readable(&[a.fd(), b.fd()], Some(t0 + Duration::from_secs(30)))
                .unwrap();
        assert!(fired);
        assert!(Instant::now() >= t0 + Duration::from_millis(20));
        // b did not fire; disarmed alarms stay quiet.
        b.set(None);
        a.set(None);
        assert!(!crate::driver::wait_readable(
            &[a.fd(), b.fd()],
            Some(Instant::now() + Duration::from_millis(30))
        )
        .unwrap());
    }

    #[test]
    fn no_deadline_is_lost_while_the_thread_rescans() {
        // Threads re-arm short alarms as fast as they fire, so the alarm
        // thread is often mid-scan when a deadline is stored. Each alarm
        // must fire; a lost one would leave its waiter asleep (the 10 s
        // bound only turns a hang into a failure).
        let threads: Vec<_> = (0..4)
            .map(|k| {
                std::thread::spawn(move || {
                    let a = Alarm::new().unwrap();
                    for i in 0..3000u64 {
                        let d = Instant::now() + Duration::from_micros(20 + (i * 7 + k) % 50);
                        a.set(Some(d));
                        let fired = crate::driver::wait_readable(
                            &[a.fd()],
                            Some(Instant::now() + Duration::from_secs(10)),
                        )
                        .unwrap();
                        assert!(fired, "thread {k}: alarm {i} never fired");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
