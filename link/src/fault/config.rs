//! [`FaultConfig`]: which faults apply to each frame, its builder and
//! its validation.

use std::time::Duration;

/// Hold-back used when `reorder > 0` but `reorder_delay` is zero: 100 us, about
/// eight 1500-byte frames at 1 Gbit/s, so a held frame is overtaken by a burst.
pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_micros(100);

/// Gilbert-Elliott two-state burst loss (netem `loss gemodel p r 1-h`).
///
/// Before each frame the chain moves Good -> Bad with `p_good_to_bad` and
/// Bad -> Good with `p_bad_to_good`; in the Bad state the frame is lost with
/// `loss_in_bad`. Mean burst length is `1 / p_bad_to_good` frames; the
/// stationary share of time in Bad is `p / (p + r)`. All in [0, 1].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BurstLoss {
    /// Probability per frame of moving from the Good to the Bad state.
    pub p_good_to_bad: f64,
    /// Probability per frame of moving from the Bad back to the Good state.
    pub p_bad_to_good: f64,
    /// Loss probability of a frame sent in the Bad state.
    pub loss_in_bad: f64,
}

/// Faults applied to each frame; all probabilities in [0, 1].
///
/// The default is transparent (no fault). Sources: smoltcp
/// `phy/fault_injector.rs`, Linux netem. See the module docs for the order in
/// which faults apply.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Independent loss probability per frame (also applies in the Good
    /// state of [`BurstLoss`]).
    pub loss: f64,
    /// Gilbert-Elliott two-state burst loss.
    pub burst: Option<BurstLoss>,
    /// Probability a frame is delivered twice (the copy right after the original).
    pub duplicate: f64,
    /// Probability a frame is held back by `reorder_delay` and delivered after
    /// frames sent later.
    pub reorder: f64,
    /// Extra hold-back of a reordered frame; zero means [`DEFAULT_REORDER_DELAY`].
    pub reorder_delay: Duration,
    /// Probability one bit of one random byte of the Ethernet payload (bytes
    /// 14.., or any byte of a frame of 14 bytes or less) is flipped; the length
    /// is unchanged. The Ethernet header is spared so the frame still reaches
    /// its receiver, as a corruption the FCS missed would.
    pub corrupt: f64,
    /// Fixed one-way latency.
    pub delay: Duration,
    /// Uniform extra delay in [0, jitter]; frames stay in FIFO order (a frame
    /// is never released before the frame sent just before it) unless
    /// `reorder` fires.
    pub jitter: Duration,
    /// Serialisation rate limit in bits/s: each frame occupies the link for
    /// `8 * len` bits and frames queue behind each other. `Some(0)` is invalid.
    pub rate_bps: Option<u64>,
    /// Tail-drop when this many frames are already in flight (accepted and not
    /// yet delivered). Meaningful with `rate_bps`, `delay` or `jitter`.
    pub queue_limit: Option<usize>,
    /// Seed of the ChaCha8 generator: the same seed and the same sequence of
    /// `on_send` calls give the same fates.
    pub seed: u64,
}

/// Why a [`FaultConfig`] or a fault spec was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultConfigError {
    /// A probability is NaN or outside [0, 1].
    #[error("fault probability {name} = {value} is outside [0, 1]")]
    Probability {
        /// The field, e.g. `loss`.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// `rate_bps` is zero.
    #[error("rate limit of 0 bit/s would never deliver a frame")]
    ZeroRate,
    /// `queue_limit` is zero.
    #[error("queue limit of 0 frames would drop every frame")]
    ZeroQueue,
    /// A spec item could not be parsed.
    #[error("invalid fault spec item {item:?}: {reason}")]
    Spec {
        /// The item as written, e.g. `loss=2x`.
        item: String,
        /// Why it was refused.
        reason: String,
    },
}

impl FaultConfig {
    /// A transparent config (no fault) with the given seed.
    pub fn seeded(seed: u64) -> Self {
        Self {
            seed,
            ..Self::default()
        }
    }
    /// Sets the independent loss probability per frame.
    pub fn with_loss(mut self, p: f64) -> Self {
        self.loss = p;
        self
    }
    /// Sets Gilbert-Elliott burst loss.
    pub fn with_burst(mut self, p_good_to_bad: f64, p_bad_to_good: f64, loss_in_bad: f64) -> Self {
        self.burst = Some(BurstLoss {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_bad,
        });
        self
    }
    /// Sets the duplication probability per frame.
    pub fn with_duplicate(mut self, p: f64) -> Self {
        self.duplicate = p;
        self
    }
    /// Sets the reorder probability and the hold-back of a reordered frame.
    pub fn with_reorder(mut self, p: f64, hold_back: Duration) -> Self {
        self.reorder = p;
        self.reorder_delay = hold_back;
        self
    }
    /// Sets the corruption probability per frame.
    pub fn with_corrupt(mut self, p: f64) -> Self {
        self.corrupt = p;
        self
    }
    /// Sets the fixed one-way delay and the uniform jitter.
    pub fn with_delay(mut self, delay: Duration, jitter: Duration) -> Self {
        self.delay = delay;
        self.jitter = jitter;
        self
    }
    /// Sets the serialisation rate in bits/s.
    pub fn with_rate(mut self, bps: u64) -> Self {
        self.rate_bps = Some(bps);
        self
    }
    /// Sets the in-flight limit in frames (tail-drop).
    pub fn with_queue_limit(mut self, frames: usize) -> Self {
        self.queue_limit = Some(frames);
        self
    }
    /// Sets the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// True when no fault is configured (every frame is delivered once, intact,
    /// at its send instant). `queue_limit` alone has no effect and `seed` is
    /// irrelevant.
    pub fn is_transparent(&self) -> bool {
        self.loss == 0.0
            && !matches!(&self.burst, Some(b) if b.p_good_to_bad > 0.0 && b.loss_in_bad > 0.0)
            && self.duplicate == 0.0
            && self.reorder == 0.0
            && self.corrupt == 0.0
            && self.delay.is_zero()
            && self.jitter.is_zero()
            && self.rate_bps.is_none()
    }

    /// Checks every probability is in [0, 1] and the rate and queue limit are
    /// not zero.
    ///
    /// Errors: [`FaultConfigError::Probability`], [`FaultConfigError::ZeroRate`],
    /// [`FaultConfigError::ZeroQueue`].
    pub fn validate(&self) -> Result<(), FaultConfigError> {
        let mut probs: Vec<(&'static str, f64)> = vec![
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ];
        if let Some(b) = &self.burst {
            probs.push(("burst.p_good_to_bad", b.p_good_to_bad));
            probs.push(("burst.p_bad_to_good", b.p_bad_to_good));
            probs.push(("burst.loss_in_bad", b.loss_in_bad));
        }
        for (name, value) in probs {
            if !(0.0..=1.0).contains(&value) {
                return Err(FaultConfigError::Probability { name, value });
            }
        }
        if self.rate_bps == Some(0) {
            return Err(FaultConfigError::ZeroRate);
        }
        if self.queue_limit == Some(0) {
            return Err(FaultConfigError::ZeroQueue);
        }
        Ok(())
    }
}
