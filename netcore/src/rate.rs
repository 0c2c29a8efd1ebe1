//! A per-second allowance: at most `limit` events in each one-second
//! window, the window starting at the first event after the previous one
//! ended. The stack's answers to segments nobody owns (RSTs of the host
//! responder and of listeners) go through it, so a flood of forged
//! segments cannot make a host answer each one (RFC 5961 sec. 7 limits
//! challenge ACKs the same way).

use std::time::{Duration, Instant};

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerSecond {
    limit: u32,
    window: Option<Instant>,
    count: u32,
}

impl PerSecond {
    /// An allowance of `limit` events per second.
    pub const fn new(limit: u32) -> Self {
        Self {
            limit,
            window: None,
            count: 0,
        }
    }

    /// Whether an event may happen at `now`, without taking it (starts a
    /// new window when the last one ended).
    pub fn available(&mut self, now: Instant) -> bool {
        if self
            .window
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1))
        {
            self.window = Some(now);
            self.count = 0;
        }
        self.count < self.limit
    }

    /// Takes one event of the current window (after [`PerSecond::available`]).
    pub fn take(&mut self) {
        self.count = self.count.saturating_add(1);
    }

    /// [`PerSecond::available`], and takes the event if so.
    pub fn allow(&mut self, now: Instant) -> bool {
        let ok = self.available(now);
        if ok {
            self.take();
        }
        ok
    }

    /// When the current window ends (`None` before the first event).
    pub fn window_end(&self) -> Option<Instant> {
        self.window.map(|t| t + Duration::from_secs(1))
    }

    /// The limit, events per second.
    pub fn limit(&self) -> u32 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_limit_per_window_then_a_new_window() {
        let t0 = Instant::now();
        let mut r = PerSecond::new(3);
        assert!(r.allow(t0) && r.allow(t0) && r.allow(t0));
        assert!(!r.allow(t0 + Duration::from_millis(999)));
        assert!(r.available(t0 + Duration::from_secs(1)));
        assert!(r.allow(t0 + Duration::from_secs(1)));
        // available does not take
        let mut q = PerSecond::new(1);
        assert!(q.available(t0) && q.available(t0));
        q.take();
        assert!(!q.available(t0));
    }
}
