//! Clocks: the [`Clock`] trait that fault injection and simulations read
//! time through, the real [`SystemClock`], and the virtual [`SimClock`]
//! shared by every sim link (and ESP/CTP simulations) of one run.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A source of the current instant.
///
/// Implemented by [`SystemClock`] (`Instant::now`), [`SimClock`] (virtual
/// time) and by any `Fn() -> Instant + Send + Sync` closure.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real monotonic clock (`Instant::now`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

impl<F: Fn() -> Instant + Send + Sync> Clock for F {
    fn now(&self) -> Instant {
        self()
    }
}

/// How long a thread's [`now`] runs on the time-stamp counter before it
/// is anchored to `Instant::now` again.
pub const REANCHOR: Duration = Duration::from_millis(1);

/// One thread's anchor: an `Instant::now` reading and the counter beside it.
struct Anchor {
    clock: quanta::Clock,
    base: std::cell::Cell<Instant>,
    base_raw: std::cell::Cell<u64>,
    /// The counter of the last reading handed out (monotonic across
    /// re-anchoring, see [`now`]).
    last_raw: std::cell::Cell<u64>,
}

impl Anchor {
    fn new() -> Self {
        let clock = quanta::Clock::new();
        let base_raw = clock.raw();
        Self {
            base: std::cell::Cell::new(Instant::now()),
            base_raw: std::cell::Cell::new(base_raw),
            last_raw: std::cell::Cell::new(base_raw),
            clock,
        }
    }

    #[inline]
    fn now(&self) -> Instant {
        let raw = self.clock.raw();
        let base_raw = self.base_raw.get();
        if raw >= base_raw {
            let ns = self.clock.delta_as_nanos(base_raw, raw);
            if ns < REANCHOR.as_nanos() as u64 {
                self.last_raw.set(raw);
                return self.base.get() + Duration::from_nanos(ns);
            }
        }
        self.reanchor()
    }

    #[cold]
    fn reanchor(&self) -> Instant {
        // Never before a reading already handed out on this thread: the
        // counter's rate may differ from CLOCK_MONOTONIC's by its
        // calibration error.
        let (base_raw, last_raw) = (self.base_raw.get(), self.last_raw.get());
        let handed = self.base.get()
            + Duration::from_nanos(self.clock.delta_as_nanos(base_raw, last_raw.max(base_raw)));
        let base = Instant::now().max(handed);
        let raw = self.clock.raw();
        self.base.set(base);
        self.base_raw.set(raw);
        self.last_raw.set(raw);
        base
    }
}

thread_local! {
    static ANCHOR: Anchor = Anchor::new();
}

/// The current instant of `Instant::now`'s clock (CLOCK_MONOTONIC), read
/// through the CPU's time-stamp counter: `quanta`'s calibrated `rdtsc`
/// (where the counter is invariant; else quanta reads the OS clock),
/// added to an `Instant::now` reading this thread took at most
/// [`REANCHOR`] (1 ms) before.
///
/// For the runtime's hot path: a send stamps its segment and arms its
/// retransmission timer with it. Measured on the 2-vCPU VM of
/// `docs/measurements/session14.txt`: 9.5-13 ns against 23-32 ns for
/// `Instant::now` (the vDSO's `clock_gettime`, which fences `rdtsc` and
/// converts). Differs from `Instant::now` by the counter's rate error over
/// at most 1 ms (below 1 us for any calibration within 1000 ppm); never
/// goes backwards on one thread. Readings of different threads are
/// compared only by timers, for which 1 us does not matter. The first call
/// in a process calibrates the counter against the OS clock (quanta: 0.6 ms
/// measured on that VM); a runtime makes it when it opens.
#[inline]
pub fn now() -> Instant {
    ANCHOR.with(Anchor::now)
}

/// A virtual clock shared by all sim links of one simulation.
///
/// Starts at a base `Instant` captured once by [`SimClock::new`]; time is the
/// base plus an offset in nanoseconds that only moves forward. Cheap to clone
/// (clones share the time), `Send + Sync`.
#[derive(Clone)]
pub struct SimClock {
    inner: Arc<ClockInner>,
}

struct ClockInner {
    base: Instant,
    offset_ns: AtomicU64,
}

impl Default for SimClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SimClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimClock(+{:?})", self.elapsed())
    }
}

impl SimClock {
    /// A clock at its base instant (elapsed zero).
    pub fn new() -> Self {
        Self {
            inner: Arc::new(ClockInner {
                base: Instant::now(),
                offset_ns: AtomicU64::new(0),
            }),
        }
    }

    /// The base instant (time zero of the simulation).
    pub fn base(&self) -> Instant {
        self.inner.base
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.inner.base + self.elapsed()
    }

    /// Virtual time elapsed since the base instant.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.inner.offset_ns.load(Ordering::SeqCst))
    }

    /// Moves time forward by `d` (saturating at about 584 years).
    pub fn advance(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .inner
            .offset_ns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                Some(o.saturating_add(ns))
            });
    }

    /// Moves time forward to `t`; never goes backwards (an earlier `t` is a no-op).
    pub fn advance_to(&self, t: Instant) {
        let ns = t.saturating_duration_since(self.inner.base).as_nanos();
        let ns = u64::try_from(ns).unwrap_or(u64::MAX);
        self.inner.offset_ns.fetch_max(ns, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        SimClock::now(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone>() {}

    #[test]
    fn fast_clock_follows_the_system_clock_and_never_goes_back() {
        let mut prev = now();
        let start = Instant::now();
        let mut moved = 0;
        // 5 ms: the thread re-anchors several times.
        while start.elapsed() < Duration::from_millis(5) {
            let before = Instant::now();
            let t = now();
            let after = Instant::now();
            assert!(t >= prev, "went back: {prev:?} then {t:?}");
            // Within 50 us of the system clock's readings around it
            // (preemption between the reads only widens the interval).
            assert!(
                t + Duration::from_micros(50) >= before,
                "{t:?} behind {before:?}"
            );
            assert!(
                t <= after + Duration::from_micros(50),
                "{t:?} ahead of {after:?}"
            );
            if t.duration_since(prev) > Duration::ZERO {
                moved += 1;
            }
            prev = t;
        }
        assert!(moved > 0, "the clock never moved");
    }

    #[test]
    fn clock_moves_forward_only() {
        assert_send_sync::<SimClock>();
        let c = SimClock::new();
        let t0 = c.now();
        assert_eq!(t0, c.base());
        c.advance(Duration::from_micros(5));
        assert_eq!(c.now(), t0 + Duration::from_micros(5));
        c.advance_to(t0 + Duration::from_micros(2));
        assert_eq!(c.elapsed(), Duration::from_micros(5), "never backwards");
        c.advance_to(t0 + Duration::from_millis(1));
        let c2 = c.clone();
        assert_eq!(c2.elapsed(), Duration::from_millis(1), "clones share time");
        // Through the trait, and closures are clocks too.
        let dynamic: &dyn Clock = &c;
        assert_eq!(dynamic.now(), t0 + Duration::from_millis(1));
        let f = move || t0;
        assert_eq!(Clock::now(&f), t0);
        assert!(SystemClock.now() >= t0);
    }
}
