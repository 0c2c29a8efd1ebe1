//! Round-trip time estimation and retransmission timeouts (RFC 6298), one
//! implementation for every protocol of the workspace.
//!
//! - [`RttEstimator`]: the RFC 6298 sec. 2 smoother. First sample R:
//!   SRTT = R, RTTVAR = R/2; later samples: RTTVAR = 3/4 RTTVAR + 1/4 |SRTT -
//!   R|, then SRTT = 7/8 SRTT + 1/8 R (the thesis's `srtt = 7/8 srtt + 1/8
//!   rtt`, ch. 5.2.8). Times are `Duration`s; protocols here measure in
//!   microseconds.
//! - **Karn's rule** (RFC 6298 sec. 3, Karn & Partridge 1987): callers feed
//!   samples only from segments (packets) *sent exactly once*: an
//!   acknowledgement of a retransmitted segment cannot tell which copy it
//!   answers. The estimator cannot check this; every caller must.
//! - [`RtoPolicy`]: how a timeout is derived from the estimate: RFC 6298
//!   (ESP), the CTP v1.2 spec's `3 x measured time` combined with RFC 6298,
//!   or the thesis's `2 x SRTT`.
//! - [`Rto`]: a connection's retransmission timer value (ESP): policy over
//!   the estimator, clamped to `[min, max]`, with RFC 6298 sec. 5.5
//!   exponential backoff (optional, as the thesis's `ESP_DOUBLE_RTO`) and the
//!   thesis's `ESP_TIMEOUT_CONN` test ("the doubled timeout passed the
//!   maximum").
//! - [`PeerTimeout`]: CTP's resend timeout `T` of one destination: backoff
//!   only when the estimate may be stale (no valid sample since the expired
//!   packet was sent), kept until the next valid sample.
//!
//! Cluster-scale bounds (1 ms instead of RFC 6298's 1 s minimum) are the
//! callers' configuration.

use std::time::{Duration, Instant};

/// Clock granularity G of RFC 6298 sec. 2: 1 us (protocols here measure
/// with microsecond-resolution `Instant`s).
pub const GRANULARITY: Duration = Duration::from_micros(1);
const GRANULARITY_NS: u64 = 1_000;

/// The RFC 6298 sec. 2 smoothed round-trip time and its variation.
///
/// Feed it with [`RttEstimator::update`] only for segments sent exactly once
/// (Karn's rule, see the module documentation). Kept in integer nanoseconds
/// (the update runs on every acknowledgement; `Duration` arithmetic costs
/// several times more).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RttEstimator {
    /// SRTT in ns; meaningful when `sampled`.
    srtt_ns: u64,
    /// RTTVAR in ns.
    rttvar_ns: u64,
    sampled: bool,
    latest_ns: u64,
    latest_at: Option<Instant>,
}

/// `d` in nanoseconds, saturating (584 years).
#[inline]
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RttEstimator {
    /// An estimator without a sample.
    pub const fn new() -> Self {
        Self {
            srtt_ns: 0,
            rttvar_ns: 0,
            sampled: false,
            latest_ns: 0,
            latest_at: None,
        }
    }

    /// Feeds one round-trip sample `rtt` taken at `now` (acknowledgement
    /// time minus send time of a segment sent once). RFC 6298 2.2 for the
    /// first sample, 2.3 for the later ones (RTTVAR is updated with the old
    /// SRTT, then SRTT).
    #[inline]
    pub fn update(&mut self, now: Instant, rtt: Duration) {
        let r = nanos(rtt);
        self.latest_ns = r;
        self.latest_at = Some(now);
        if self.sampled {
            let delta = self.srtt_ns.abs_diff(r);
            self.rttvar_ns = (self.rttvar_ns.saturating_mul(3).saturating_add(delta)) / 4;
            self.srtt_ns = (self.srtt_ns.saturating_mul(7).saturating_add(r)) / 8;
        } else {
            self.sampled = true;
            self.srtt_ns = r;
            self.rttvar_ns = r / 2;
        }
    }

    /// Smoothed RTT (SRTT), `None` before the first sample.
    #[inline]
    pub fn srtt(&self) -> Option<Duration> {
        self.sampled.then(|| Duration::from_nanos(self.srtt_ns))
    }

    /// RTT variation (RTTVAR), zero before the first sample.
    #[inline]
    pub fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar_ns)
    }

    /// The latest sample.
    #[inline]
    pub fn latest(&self) -> Option<Duration> {
        self.sampled.then(|| Duration::from_nanos(self.latest_ns))
    }

    /// When the latest sample was taken.
    #[inline]
    pub fn latest_at(&self) -> Option<Instant> {
        self.latest_at
    }

    /// Whether a sample was taken at or after `t` (the estimate reflects
    /// the path since then).
    #[inline]
    pub fn sampled_since(&self, t: Instant) -> bool {
        self.latest_at.is_some_and(|at| at >= t)
    }
}

/// How a timeout is derived from an [`RttEstimator`] (before clamping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtoPolicy {
    /// RFC 6298 sec. 2.3: `SRTT + max(G, 4 RTTVAR)` (ESP's default).
    Rfc6298,
    /// CTP: `max(multiplier x SRTT, SRTT + 4 RTTVAR)`. The CTP v1.2 spec
    /// ("Storages") says "the measured time x 3" (`multiplier` 3); after the
    /// first sample both terms equal `3 x sample` (RTTVAR starts at half
    /// the sample), the spec's rule exactly; later the RFC 6298 variance
    /// term keeps a jittery peer from drawing spurious resends (a
    /// documented departure from the spec, `ctp/PROTOCOL.md`).
    CtpSpec {
        /// The spec's factor on the measured time (3).
        multiplier: u32,
    },
    /// The thesis (ch. 5.2.8): "twice the smoothed round trip time"
    /// (`multiplier` 2), without a variance term.
    SrttMultiple {
        /// Factor on SRTT (2 in the thesis).
        multiplier: u32,
    },
}

impl RtoPolicy {
    /// The thesis's `RTO = 2 x SRTT`.
    pub const THESIS: RtoPolicy = RtoPolicy::SrttMultiple { multiplier: 2 };
    /// The CTP spec's `3 x measured time` (with the RFC 6298 variance term).
    pub const CTP: RtoPolicy = RtoPolicy::CtpSpec { multiplier: 3 };

    /// The timeout this policy gives for `est`, unclamped; `None` before the
    /// first sample (callers use their initial timeout then).
    pub fn timeout(self, est: &RttEstimator) -> Option<Duration> {
        self.timeout_ns(est).map(Duration::from_nanos)
    }

    #[inline]
    fn timeout_ns(self, est: &RttEstimator) -> Option<u64> {
        if !est.sampled {
            return None;
        }
        let srtt = est.srtt_ns;
        let var4 = est.rttvar_ns.saturating_mul(4);
        Some(match self {
            RtoPolicy::Rfc6298 => srtt.saturating_add(var4.max(GRANULARITY_NS)),
            RtoPolicy::CtpSpec { multiplier } => srtt
                .saturating_mul(u64::from(multiplier))
                .max(srtt.saturating_add(var4)),
            RtoPolicy::SrttMultiple { multiplier } => srtt.saturating_mul(u64::from(multiplier)),
        })
    }
}

/// Configuration of an [`Rto`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtoConfig {
    /// Timeout before the first sample (RFC 6298 2.1 says 1 s for the
    /// Internet; clamped to `[min, max]` like every other value).
    pub initial: Duration,
    /// Lower bound (RFC 6298 2.4: 1 s on the Internet; cluster links use
    /// about 1 ms).
    pub min: Duration,
    /// Upper bound; backoff stops there (RFC 6298 2.5).
    pub max: Duration,
    /// Timeout formula.
    pub policy: RtoPolicy,
    /// Double the timeout on each expiry (RFC 6298 5.5; the thesis's
    /// `ESP_DOUBLE_RTO`). Off: every retransmission waits the base timeout.
    pub doubling: bool,
    /// The thesis's `ESP_TIMEOUT_CONN`: with doubling, the connection counts
    /// as dead once the doubled timeout would exceed `max`
    /// ([`Rto::past_max`]; callers check it after [`Rto::back_off`]).
    pub dead_past_max: bool,
}

impl RtoConfig {
    /// RFC 6298 with doubling, bounded by `[min, max]`, starting at
    /// `initial`.
    pub const fn rfc6298(initial: Duration, min: Duration, max: Duration) -> Self {
        Self {
            initial,
            min,
            max,
            policy: RtoPolicy::Rfc6298,
            doubling: true,
            dead_past_max: false,
        }
    }

    /// The thesis's retransmission timer (ch. 5.2.8): `2 x SRTT` clamped to
    /// `[ESP_MIN_RTO, ESP_MAX_RTO]`, doubling per retransmission round when
    /// `double_rto` (`ESP_DOUBLE_RTO`), and death once the doubled timeout
    /// passes the maximum when `timeout_conn` (`ESP_TIMEOUT_CONN`).
    pub const fn thesis(
        initial: Duration,
        min: Duration,
        max: Duration,
        double_rto: bool,
        timeout_conn: bool,
    ) -> Self {
        Self {
            initial,
            min,
            max,
            policy: RtoPolicy::THESIS,
            doubling: double_rto,
            dead_past_max: double_rto && timeout_conn,
        }
    }
}

/// The retransmission timeout of one connection: an [`RttEstimator`], an
/// [`RtoPolicy`], clamping to `[min, max]` and exponential backoff.
///
/// The base timeout is the policy's value (or `initial` before a sample)
/// clamped to `[min, max]`; the current timeout is the base doubled once
/// per [`Rto::back_off`] (if doubling is on), at most `max`. A new sample
/// or [`Rto::reset_backoff`] (new data acknowledged, RFC 6298 5.7 note)
/// clears the backoff. Both values are cached: they are read on every
/// segment sent and every timer set.
#[derive(Debug, Clone)]
pub struct Rto {
    est: RttEstimator,
    cfg: RtoConfig,
    /// `cfg.initial`, `cfg.min`, `cfg.max` in ns (recompute runs on every
    /// sample).
    initial_ns: u64,
    min_ns: u64,
    max_ns: u64,
    backoff: u32,
    base: Duration,
    rto: Duration,
}

impl Rto {
    /// A timer without a sample: the RTO is `cfg.initial` clamped to
    /// `[cfg.min, cfg.max]` (a `max` below `min` is raised to `min`).
    pub fn new(mut cfg: RtoConfig) -> Self {
        cfg.max = cfg.max.max(cfg.min);
        let mut r = Self {
            est: RttEstimator::new(),
            cfg,
            initial_ns: nanos(cfg.initial),
            min_ns: nanos(cfg.min),
            max_ns: nanos(cfg.max),
            backoff: 0,
            base: Duration::ZERO,
            rto: Duration::ZERO,
        };
        r.recompute();
        r
    }

    #[inline]
    fn recompute(&mut self) {
        let (min, max) = (self.min_ns, self.max_ns);
        let raw = self
            .cfg
            .policy
            .timeout_ns(&self.est)
            .unwrap_or(self.initial_ns);
        let base = raw.clamp(min, max);
        let steps = if self.cfg.doubling { self.backoff } else { 0 };
        let rto = if steps >= 64 {
            max
        } else {
            base.checked_mul(1u64 << steps).map_or(max, |t| t.min(max))
        };
        self.base = Duration::from_nanos(base);
        self.rto = Duration::from_nanos(rto);
    }

    /// Feeds one round-trip sample taken at `now` from a segment sent
    /// exactly once (Karn's rule: the caller checks), and clears the
    /// backoff (RFC 6298 5.7 ff.).
    #[inline]
    pub fn on_sample(&mut self, now: Instant, rtt: Duration) {
        self.est.update(now, rtt);
        self.backoff = 0;
        self.recompute();
    }

    /// The base timeout without backoff, clamped.
    #[inline]
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The current timeout: the base doubled once per backoff step (with
    /// doubling on), at most the maximum.
    #[inline]
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// Records an expiry: doubles the timer (RFC 6298 5.5) when doubling
    /// is on.
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
        self.recompute();
    }

    /// Clears the backoff (new data acknowledged).
    #[inline]
    pub fn reset_backoff(&mut self) {
        if self.backoff != 0 {
            self.backoff = 0;
            self.recompute();
        }
    }

    /// Consecutive expiries since the last sample or reset.
    #[inline]
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// The thesis's `ESP_TIMEOUT_CONN` test: with doubling and
    /// `dead_past_max` configured, true once the base timeout doubled per
    /// expiry exceeds the maximum (the clamp would have to cut it). Always
    /// false otherwise.
    pub fn past_max(&self) -> bool {
        if !(self.cfg.doubling && self.cfg.dead_past_max) {
            return false;
        }
        self.backoff >= 64
            || nanos(self.base)
                .checked_mul(1u64 << self.backoff)
                .is_none_or(|t| t > self.max_ns)
    }

    /// Smoothed RTT, `None` before the first sample.
    #[inline]
    pub fn srtt(&self) -> Option<Duration> {
        self.est.srtt()
    }

    /// RTT variation.
    #[inline]
    pub fn rttvar(&self) -> Duration {
        self.est.rttvar()
    }

    /// The latest sample.
    #[inline]
    pub fn last_sample(&self) -> Option<Duration> {
        self.est.latest()
    }

    /// The estimator.
    #[inline]
    pub fn estimator(&self) -> &RttEstimator {
        &self.est
    }

    /// The configuration.
    #[inline]
    pub fn config(&self) -> &RtoConfig {
        &self.cfg
    }
}

/// CTP's adaptive resend timeout `T` of one destination (CTP v1.2 spec,
/// "Storages": 100 ms until the first exchange, then the measured time x
/// 3; `ctp/PROTOCOL.md` "Resending and timeouts").
///
/// - [`PeerTimeout::sample`]: feeds the estimator (Karn's rule: packets
///   sent once only) and sets `T` to the policy's value (normally
///   [`RtoPolicy::CTP`]) clamped to `[min, max]`, unless `T` is fixed or
///   zero (resending disabled).
/// - [`PeerTimeout::expired`]: Karn backoff *only without a fresh sample*:
///   if no valid sample arrived since the expired packet was first sent,
///   the estimate may be stale (every packet is resent, so Karn's rule
///   starves the estimator) and `T` becomes `max(T, min(2 x base, max))`,
///   kept until the next valid sample (RFC 6298 5.5 with Karn's
///   algorithm). With a fresh sample the expiry is a loss and `T` stays:
///   the packet's own doubling period already backs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerTimeout {
    /// The estimator fed by confirmations of packets sent once.
    pub est: RttEstimator,
    /// Current timeout `T` for new packets (zero = resending disabled).
    pub timeout: Duration,
    /// Set explicitly: `T` does not adapt.
    pub fixed: bool,
}

impl PeerTimeout {
    /// `T` starting at `timeout`, adaptive.
    pub const fn new(timeout: Duration) -> Self {
        Self {
            est: RttEstimator::new(),
            timeout,
            fixed: false,
        }
    }

    /// Fixes `T` at `timeout` (no adaptation, no backoff).
    pub fn fix(&mut self, timeout: Duration) {
        self.timeout = timeout;
        self.fixed = true;
    }

    /// A measurement `sample` taken at `now` from a packet sent once.
    pub fn sample(
        &mut self,
        now: Instant,
        sample: Duration,
        policy: RtoPolicy,
        min: Duration,
        max: Duration,
    ) {
        self.est.update(now, sample);
        if !self.fixed && !self.timeout.is_zero() {
            if let Some(t) = policy.timeout(&self.est) {
                self.timeout = t.clamp(min, max.max(min));
            }
        }
    }

    /// The resend timer of a packet first sent at `first_sent`, waiting
    /// `base`, expired: backs `T` off to `max(T, min(2 x base, max))` when
    /// no valid sample was taken since `first_sent`.
    pub fn expired(&mut self, first_sent: Instant, base: Duration, max: Duration) {
        if self.fixed || self.timeout.is_zero() || self.est.sampled_since(first_sent) {
            return;
        }
        self.timeout = self.timeout.max(base.saturating_mul(2).min(max));
    }

    /// Smoothed RTT, `None` before the first sample.
    #[inline]
    pub fn srtt(&self) -> Option<Duration> {
        self.est.srtt()
    }

    /// When the last valid sample was taken.
    #[inline]
    pub fn last_sample(&self) -> Option<Instant> {
        self.est.latest_at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn esp(initial: Duration, min: Duration, max: Duration) -> Rto {
        Rto::new(RtoConfig::rfc6298(initial, min, max))
    }

    #[test]
    fn initial_rto_then_first_sample() {
        let t = Instant::now();
        let mut r = esp(Duration::from_millis(10), us(1000), Duration::from_secs(1));
        assert_eq!(r.rto(), Duration::from_millis(10));
        assert_eq!(r.srtt(), None);
        r.on_sample(t, us(400));
        assert_eq!(r.srtt(), Some(us(400)));
        assert_eq!(r.rttvar(), us(200));
        // 400 + 4 * 200 = 1200 us
        assert_eq!(r.rto(), us(1200));
        assert_eq!(r.last_sample(), Some(us(400)));
        assert_eq!(r.estimator().latest_at(), Some(t));
    }

    #[test]
    fn smoothing_follows_rfc6298() {
        let t = Instant::now();
        let mut r = esp(us(1000), us(1), Duration::from_secs(1));
        r.on_sample(t, us(800));
        r.on_sample(t, us(400));
        // rttvar = 3/4 * 400 + 1/4 * 400 = 400; srtt = 7/8 * 800 + 1/8 * 400 = 750
        assert_eq!(r.rttvar(), us(400));
        assert_eq!(r.srtt(), Some(us(750)));
        assert_eq!(r.rto(), us(750 + 1600));
        // A third sample equal to SRTT shrinks the variation by a quarter.
        r.on_sample(t, us(750));
        assert_eq!(r.rttvar(), us(300));
        assert_eq!(r.srtt(), Some(us(750)));
    }

    #[test]
    fn granularity_floors_the_variance_term() {
        let t = Instant::now();
        let mut r = esp(us(1000), us(1), Duration::from_secs(1));
        for _ in 0..200 {
            r.on_sample(t, us(100));
        }
        // RTTVAR decays to 0; RTO = SRTT + G.
        assert_eq!(r.rttvar(), Duration::ZERO);
        assert_eq!(r.rto(), us(101));
    }

    #[test]
    fn clamped_to_bounds() {
        let t = Instant::now();
        let mut r = esp(us(10_000), us(1000), us(500_000));
        r.on_sample(t, us(10));
        assert_eq!(r.rto(), us(1000));
        r.on_sample(t, Duration::from_secs(5));
        assert_eq!(r.rto(), us(500_000));
        // max below min is raised to min.
        let r = esp(us(10), us(1000), us(10));
        assert_eq!(r.rto(), us(1000));
    }

    #[test]
    fn backoff_doubles_up_to_max_and_sample_clears_it() {
        let t = Instant::now();
        let mut r = esp(us(1000), us(1000), us(20_000));
        let mut seen = vec![];
        for _ in 0..7 {
            seen.push(r.rto().as_micros());
            r.back_off();
        }
        assert_eq!(seen, vec![1000, 2000, 4000, 8000, 16000, 20000, 20000]);
        assert_eq!(r.base(), us(1000));
        r.on_sample(t, us(50));
        assert_eq!(r.backoff(), 0);
        assert_eq!(r.rto(), us(1000));
        for _ in 0..100 {
            r.back_off();
        }
        assert_eq!(r.rto(), us(20_000));
        r.reset_backoff();
        assert_eq!(r.rto(), us(1000));
        assert!(!r.past_max(), "dead_past_max is off");
    }

    #[test]
    fn thesis_policy_is_twice_srtt_and_optionally_constant() {
        let t = Instant::now();
        let mut r = Rto::new(RtoConfig::thesis(
            us(5000),
            us(100),
            us(100_000),
            false,
            false,
        ));
        assert_eq!(r.rto(), us(5000));
        r.on_sample(t, us(800));
        r.on_sample(t, us(400));
        // 2 x (7/8 800 + 1/8 400) = 1500, no variance term.
        assert_eq!(r.rto(), us(1500));
        // Without ESP_DOUBLE_RTO the timeout stays.
        r.back_off();
        r.back_off();
        assert_eq!(r.rto(), us(1500));
        assert!(!r.past_max());
    }

    #[test]
    fn thesis_timeout_conn_kills_once_doubling_passes_the_maximum() {
        let t = Instant::now();
        let mut r = Rto::new(RtoConfig::thesis(us(1000), us(100), us(10_000), true, true));
        r.on_sample(t, us(1000)); // base 2000
        let mut steps = 0;
        while !r.past_max() {
            r.back_off();
            steps += 1;
            assert!(steps < 10);
        }
        // 2000, 4000, 8000 fit; 16000 > 10000 after the third doubling.
        assert_eq!(steps, 3);
        assert_eq!(r.rto(), us(10_000));
        r.reset_backoff();
        assert!(!r.past_max());
    }

    #[test]
    fn ctp_policy_is_three_times_the_first_sample() {
        let t = Instant::now();
        let mut e = RttEstimator::new();
        assert_eq!(RtoPolicy::CTP.timeout(&e), None);
        e.update(t, us(200));
        assert_eq!(RtoPolicy::CTP.timeout(&e), Some(us(600)));
        assert_eq!(RtoPolicy::Rfc6298.timeout(&e), Some(us(600)));
        assert_eq!(RtoPolicy::THESIS.timeout(&e), Some(us(400)));
        // A stable path: the 3 x SRTT term dominates once RTTVAR decays.
        for _ in 0..50 {
            e.update(t, us(200));
        }
        assert_eq!(RtoPolicy::CTP.timeout(&e), Some(us(600)));
        // A jittery path: the variance term dominates.
        let mut j = RttEstimator::new();
        j.update(t, us(100));
        j.update(t, us(1000));
        // rttvar = (3*50 + 900)/4 = 262.5 us; srtt = (700 + 1000)/8 = 212.5 us
        let srtt = j.srtt().unwrap();
        assert_eq!(
            RtoPolicy::CTP.timeout(&j),
            Some((srtt * 3).max(srtt + j.rttvar() * 4))
        );
        assert!(RtoPolicy::CTP.timeout(&j).unwrap() > srtt * 3);
    }

    #[test]
    fn peer_timeout_samples_clamp_and_respect_fixed_and_disabled() {
        let t = Instant::now();
        let (min, max) = (us(1000), Duration::from_secs(10));
        let mut p = PeerTimeout::new(Duration::from_millis(100));
        p.sample(t, us(2000), RtoPolicy::CTP, min, max);
        assert_eq!(p.timeout, us(6000));
        assert_eq!(p.srtt(), Some(us(2000)));
        assert_eq!(p.last_sample(), Some(t));
        p.sample(t, us(10), RtoPolicy::CTP, min, max);
        assert!(p.timeout >= min);
        // Fixed: the estimate still updates, T does not.
        let mut f = PeerTimeout::new(us(5000));
        f.fix(us(7000));
        f.sample(t, us(2000), RtoPolicy::CTP, min, max);
        assert_eq!((f.timeout, f.srtt()), (us(7000), Some(us(2000))));
        f.expired(t, us(7000), max);
        assert_eq!(f.timeout, us(7000));
        // Zero: resending disabled, stays zero.
        let mut z = PeerTimeout::new(Duration::ZERO);
        z.sample(t, us(2000), RtoPolicy::CTP, min, max);
        z.expired(t, us(1000), max);
        assert_eq!(z.timeout, Duration::ZERO);
    }

    #[test]
    fn peer_timeout_backs_off_only_without_a_fresh_sample() {
        let t0 = Instant::now();
        let at = |n| t0 + us(n);
        let (min, max) = (us(1000), us(50_000));
        let mut p = PeerTimeout::new(Duration::from_millis(100));
        p.sample(at(100), us(2000), RtoPolicy::CTP, min, max);
        assert_eq!(p.timeout, us(6000));
        // A packet sent at 50 (before the sample) expires: the estimate is
        // fresh relative to it, so no backoff.
        p.expired(at(50), us(6000), max);
        assert_eq!(p.timeout, us(6000));
        // A packet first sent at 200, after the last sample: stale, back off
        // to twice its own timeout.
        p.expired(at(200), us(6000), max);
        assert_eq!(p.timeout, us(12_000));
        // Never below the current T, never above max.
        p.expired(at(200), us(1000), max);
        assert_eq!(p.timeout, us(12_000));
        p.expired(at(200), us(40_000), max);
        assert_eq!(p.timeout, max);
        // The next valid sample replaces the backed-off value.
        p.sample(at(300), us(2000), RtoPolicy::CTP, min, max);
        assert!(p.timeout < us(12_000), "{:?}", p.timeout);
    }
}
