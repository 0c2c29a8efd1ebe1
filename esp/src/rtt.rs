//! Retransmission timeout per RFC 6298, at microsecond resolution.
//!
//! - first sample R: SRTT = R, RTTVAR = R/2;
//! - later samples: RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, SRTT = 7/8 SRTT + 1/8 R
//!   (the thesis's `srtt = 7/8 srtt + 1/8 rtt`, ch. 5.2.8);
//! - RTO = SRTT + max(G, 4 RTTVAR), clamped to `[min_rto, max_rto]`;
//! - samples only from segments sent once (Karn's rule: the caller does not
//!   call [`RttEstimator::on_sample`] for retransmitted segments);
//! - each expiry doubles the timer (RFC 6298 sec. 5.5), up to `max_rto`; a
//!   new sample or an acknowledgement of new data clears the backoff.
//!
//! Cluster-scale bounds replace TCP's 1 s minimum: see [`crate::EspConfig`].

use std::time::Duration;

/// Clock granularity G of RFC 6298 sec. 2: 1 us (time is given in
/// microsecond-resolution `Instant`s).
pub const GRANULARITY: Duration = Duration::from_micros(1);

/// SRTT / RTTVAR / RTO state of one connection.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    initial: Duration,
    min: Duration,
    max: Duration,
    backoff: u32,
    last_sample: Option<Duration>,
    /// `base_rto()` and `rto()`, recomputed when a sample or the backoff
    /// changes (they are read on every segment sent and every timer set).
    base: Duration,
    rto: Duration,
}

impl RttEstimator {
    /// A new estimator with no sample: the RTO is `initial` (RFC 6298 sec.
    /// 2.1 uses 1 s; ESP defaults to 10 ms), clamped to `[min, max]`.
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Self {
        let max = max.max(min);
        Self {
            srtt: None,
            rttvar: Duration::ZERO,
            initial,
            min,
            max,
            backoff: 0,
            last_sample: None,
            base: Duration::ZERO,
            rto: Duration::ZERO,
        }
        .recomputed()
    }

    fn recomputed(mut self) -> Self {
        self.recompute();
        self
    }

    fn recompute(&mut self) {
        let raw = match self.srtt {
            None => self.initial,
            Some(srtt) => srtt + (self.rttvar * 4).max(GRANULARITY),
        };
        self.base = raw.clamp(self.min, self.max);
        let factor = 1u32.checked_shl(self.backoff.min(31)).unwrap_or(u32::MAX);
        self.rto = self
            .base
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max);
    }

    /// Feeds one round-trip sample (send to acknowledgement of a segment
    /// sent exactly once), and clears the backoff.
    pub fn on_sample(&mut self, rtt: Duration) {
        self.last_sample = Some(rtt);
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let delta = srtt.checked_sub(rtt).unwrap_or_else(|| rtt - srtt);
                self.rttvar = (self.rttvar * 3 + delta) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        self.backoff = 0;
        self.recompute();
    }

    /// The base RTO without backoff: SRTT + max(G, 4 RTTVAR), clamped.
    pub fn base_rto(&self) -> Duration {
        self.base
    }

    /// The current RTO: the base RTO doubled once per backoff step, at most
    /// the maximum RTO.
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// Doubles the timer after an expiry (RFC 6298 sec. 5.5).
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
        self.recompute();
    }

    /// Clears the backoff (new data acknowledged, RFC 6298 sec. 5.7 note).
    pub fn reset_backoff(&mut self) {
        if self.backoff != 0 {
            self.backoff = 0;
            self.recompute();
        }
    }

    /// Number of consecutive doublings in force.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// Smoothed RTT, `None` before the first sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// RTT variation.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// The latest sample.
    pub fn last_sample(&self) -> Option<Duration> {
        self.last_sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn initial_rto_then_first_sample() {
        let mut r = RttEstimator::new(Duration::from_millis(10), us(1000), Duration::from_secs(1));
        assert_eq!(r.rto(), Duration::from_millis(10));
        r.on_sample(us(400));
        assert_eq!(r.srtt(), Some(us(400)));
        assert_eq!(r.rttvar(), us(200));
        // 400 + 4 * 200 = 1200 us
        assert_eq!(r.rto(), us(1200));
    }

    #[test]
    fn smoothing_follows_rfc6298() {
        let mut r = RttEstimator::new(us(1000), us(1), Duration::from_secs(1));
        r.on_sample(us(800));
        r.on_sample(us(400));
        // rttvar = 3/4 * 400 + 1/4 * 400 = 400; srtt = 7/8 * 800 + 1/8 * 400 = 750
        assert_eq!(r.rttvar(), us(400));
        assert_eq!(r.srtt(), Some(us(750)));
        assert_eq!(r.rto(), us(750 + 1600));
    }

    #[test]
    fn clamped_to_bounds() {
        let mut r = RttEstimator::new(us(10_000), us(1000), us(500_000));
        r.on_sample(us(10));
        assert_eq!(r.rto(), us(1000));
        r.on_sample(Duration::from_secs(5));
        assert_eq!(r.rto(), us(500_000));
    }

    #[test]
    fn backoff_doubles_up_to_max_and_sample_clears_it() {
        let mut r = RttEstimator::new(us(1000), us(1000), us(20_000));
        let mut seen = vec![];
        for _ in 0..7 {
            seen.push(r.rto().as_micros());
            r.back_off();
        }
        assert_eq!(seen, vec![1000, 2000, 4000, 8000, 16000, 20000, 20000]);
        r.on_sample(us(50));
        assert_eq!(r.backoff(), 0);
        assert_eq!(r.rto(), us(1000));
        for _ in 0..100 {
            r.back_off();
        }
        assert_eq!(r.rto(), us(20_000));
    }
}
