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
