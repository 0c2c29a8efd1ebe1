//! Small helpers over optional instants, shared by every protocol core and
//! the runtime (each used to carry its own copy).

use std::time::{Duration, Instant};

/// The earlier of two optional deadlines (`None` = no deadline).
#[inline]
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `now + d`, saturating about 35 000 years ahead instead of overflowing
/// (an "infinite" timeout must not panic).
#[inline]
pub fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(1 << 40)))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_picks_the_earlier_and_ignores_none() {
        let t = Instant::now();
        let u = t + Duration::from_micros(5);
        assert_eq!(earliest(Some(t), Some(u)), Some(t));
        assert_eq!(earliest(Some(u), Some(t)), Some(t));
        assert_eq!(earliest(None, Some(u)), Some(u));
        assert_eq!(earliest(Some(u), None), Some(u));
        assert_eq!(earliest(None, None), None);
    }

    #[test]
    fn later_saturates() {
        let t = Instant::now();
        assert_eq!(
            later(t, Duration::from_micros(3)),
            t + Duration::from_micros(3)
        );
        assert!(later(t, Duration::MAX) > t + Duration::from_secs(1 << 30));
    }
}
