//! Seeded fault injection: loss, burst loss, duplication, reordering,
//! corruption, delay, jitter, rate limit and a bounded queue.
//!
//! The decisions are made by a sans-IO core, [`FaultInjector`], which takes the
//! send instant as an argument and reads no clock. It is used by two links:
//!
//! - [`crate::link::sim::SimLink`] (in-memory links on a virtual clock) runs one
//!   injector per sending direction;
//! - [`FaultLink`] wraps any real [`Link`] (this kernel has no netem), holds
//!   delayed frames in a queue and releases them on later calls.
//!
//! Sources of the model: smoltcp `phy/fault_injector.rs` (faults as a wrapper
//! around a device), Linux netem (`tc-netem(8)`: loss, duplicate, corrupt,
//! reorder, delay/jitter, rate, limit) and the Gilbert-Elliott two-state
//! channel for burst loss (E. N. Gilbert 1960, E. O. Elliott 1963).
//!
//! Per frame, the injector applies, in this order (the netem order):
//! 1. loss: independent loss with probability `loss`, and burst loss from the
//!    Gilbert-Elliott chain if configured; a lost frame takes no link time;
//! 2. queue limit: tail-drop when `queue_limit` frames are already in flight;
//! 3. duplication: a second copy, delivered right after the original;
//! 4. corruption: one bit flipped in one byte of the Ethernet payload;
//! 5. rate: the frame is serialised after the frames before it, taking
//!    `8 * len / rate_bps` seconds (frame bytes without preamble, FCS and gap);
//! 6. delay plus uniform jitter, clamped so frames stay in FIFO order;
//! 7. reordering: with probability `reorder` the frame is held back by
//!    `reorder_delay` more, outside the FIFO clamp, so later frames overtake it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::Link;
use crate::wire::{MacAddr, ETH_HEADER_LEN};

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
    Probability { name: &'static str, value: f64 },
    /// `rate_bps` is zero.
    #[error("rate limit of 0 bit/s would never deliver a frame")]
    ZeroRate,
    /// `queue_limit` is zero.
    #[error("queue limit of 0 frames would drop every frame")]
    ZeroQueue,
    /// A spec item could not be parsed.
    #[error("invalid fault spec item {item:?}: {reason}")]
    Spec { item: String, reason: String },
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

    /// Parses a comma-separated spec such as
    /// `loss=0.01,dup=0.001,reorder=0.02,reorder_delay=200us,corrupt=0.001,delay=50us,jitter=10us,rate=1G,queue=1000,burst=0.01/0.3/1,seed=7`.
    ///
    /// Probabilities are fractions in [0, 1] (`loss`, `dup`/`duplicate`,
    /// `reorder`, `corrupt`); `burst=P/R/H` gives Good->Bad, Bad->Good and the
    /// loss in Bad. Durations take a unit `ns`, `us`, `ms` or `s` (no unit:
    /// microseconds). `rate` is in bits/s with an optional `k`, `M` or `G`
    /// (powers of 1000) suffix. `queue`/`limit` is in frames. The empty string
    /// and `none` are the transparent config. [`FaultConfig`]'s `Display`
    /// writes this format.
    ///
    /// Errors: [`FaultConfigError::Spec`] for an unknown key or bad value, and
    /// the errors of [`FaultConfig::validate`].
    pub fn parse_spec(spec: &str) -> Result<Self, FaultConfigError> {
        let mut cfg = FaultConfig::default();
        if spec.trim() == "none" {
            return Ok(cfg);
        }
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = |reason: &str| FaultConfigError::Spec {
                item: item.to_string(),
                reason: reason.to_string(),
            };
            let (key, val) = item
                .split_once('=')
                .ok_or_else(|| bad("expected key=value"))?;
            let (key, val) = (key.trim(), val.trim());
            let prob = || -> Result<f64, FaultConfigError> {
                val.parse::<f64>()
                    .map_err(|_| bad("expected a probability (a fraction in [0, 1])"))
            };
            match key {
                "loss" => cfg.loss = prob()?,
                "dup" | "duplicate" => cfg.duplicate = prob()?,
                "reorder" => cfg.reorder = prob()?,
                "corrupt" => cfg.corrupt = prob()?,
                "reorder_delay" => cfg.reorder_delay = parse_duration(val).map_err(|r| bad(&r))?,
                "delay" => cfg.delay = parse_duration(val).map_err(|r| bad(&r))?,
                "jitter" => cfg.jitter = parse_duration(val).map_err(|r| bad(&r))?,
                "rate" => cfg.rate_bps = Some(parse_rate(val).map_err(|r| bad(&r))?),
                "queue" | "limit" => {
                    cfg.queue_limit = Some(
                        val.parse::<usize>()
                            .map_err(|_| bad("expected a frame count"))?,
                    )
                }
                "seed" => cfg.seed = val.parse::<u64>().map_err(|_| bad("expected a u64"))?,
                "burst" => {
                    let parts: Vec<&str> = val.split('/').collect();
                    if parts.len() != 3 {
                        return Err(bad("expected P/R/H (good->bad, bad->good, loss in bad)"));
                    }
                    let mut v = [0.0; 3];
                    for (slot, p) in v.iter_mut().zip(parts) {
                        *slot = p
                            .trim()
                            .parse::<f64>()
                            .map_err(|_| bad("expected three probabilities P/R/H"))?;
                    }
                    cfg.burst = Some(BurstLoss {
                        p_good_to_bad: v[0],
                        p_bad_to_good: v[1],
                        loss_in_bad: v[2],
                    });
                }
                _ => return Err(bad("unknown key (loss, dup, reorder, reorder_delay, corrupt, delay, jitter, rate, queue, burst, seed)")),
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Formats `d` exactly with the largest of the units s, ms, us, ns that divides it.
fn fmt_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0us".to_string();
    }
    for (unit, name) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        let whole = ns / unit;
        if whole * unit == ns {
            return format!("{whole}{name}");
        }
    }
    format!("{ns}ns")
}

impl fmt::Display for FaultConfig {
    /// The spec accepted by [`FaultConfig::parse_spec`], listing only the
    /// faults set (and the seed), e.g. `loss=0.01,delay=50us,seed=7`;
    /// `none` for a transparent config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = Vec::new();
        if self.loss != 0.0 {
            items.push(format!("loss={}", self.loss));
        }
        if let Some(b) = &self.burst {
            items.push(format!(
                "burst={}/{}/{}",
                b.p_good_to_bad, b.p_bad_to_good, b.loss_in_bad
            ));
        }
        if self.duplicate != 0.0 {
            items.push(format!("dup={}", self.duplicate));
        }
        if self.reorder != 0.0 {
            items.push(format!("reorder={}", self.reorder));
        }
        if !self.reorder_delay.is_zero() {
            items.push(format!(
                "reorder_delay={}",
                fmt_duration(self.reorder_delay)
            ));
        }
        if self.corrupt != 0.0 {
            items.push(format!("corrupt={}", self.corrupt));
        }
        if !self.delay.is_zero() {
            items.push(format!("delay={}", fmt_duration(self.delay)));
        }
        if !self.jitter.is_zero() {
            items.push(format!("jitter={}", fmt_duration(self.jitter)));
        }
        if let Some(r) = self.rate_bps {
            items.push(format!("rate={r}"));
        }
        if let Some(q) = self.queue_limit {
            items.push(format!("queue={q}"));
        }
        if items.is_empty() && self.seed == 0 {
            return f.write_str("none");
        }
        items.push(format!("seed={}", self.seed));
        f.write_str(&items.join(","))
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit_ns: u64 = match unit.trim() {
        "ns" => 1,
        "" | "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        u => return Err(format!("unknown duration unit {u:?} (ns, us, ms, s)")),
    };
    // Integers are exact; fractions go through f64 (rounded to the nanosecond).
    if let Ok(n) = num.parse::<u64>() {
        return n
            .checked_mul(unit_ns)
            .map(Duration::from_nanos)
            .ok_or_else(|| format!("duration {s:?} is too large"));
    }
    let n: f64 = num
        .parse()
        .map_err(|_| format!("expected a duration like 50us, got {s:?}"))?;
    let ns = (n * unit_ns as f64).round();
    if !(0.0..1.8e19).contains(&ns) {
        return Err(format!("duration {s:?} is out of range"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

fn parse_rate(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1e3),
        Some('m' | 'M') => (&s[..s.len() - 1], 1e6),
        Some('g' | 'G') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("expected a rate in bit/s like 1G, got {s:?}"))?;
    let v = n * mult;
    if !(v >= 1.0 && v < u64::MAX as f64) {
        return Err(format!("rate {s:?} is out of range"));
    }
    Ok(v as u64)
}

/// Counters of a [`FaultInjector`], in frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames offered to `on_send`.
    pub frames: u64,
    /// Frames lost (independent or burst loss).
    pub lost: u64,
    /// Frames delivered twice.
    pub duplicated: u64,
    /// Frames held back by the reorder fault.
    pub reordered: u64,
    /// Frames with a bit flipped.
    pub corrupted: u64,
    /// Frames tail-dropped because `queue_limit` frames were in flight.
    pub queue_dropped: u64,
}

/// The sans-IO core of fault injection: decides the fate of each frame.
///
/// Deterministic for a seed (ChaCha8). It reads no clock: the send instant is
/// an argument, and delivery instants are computed from it.
pub struct FaultInjector {
    cfg: FaultConfig,
    rng: ChaCha8Rng,
    stats: FaultStats,
    transparent: bool,
    /// Gilbert-Elliott state: true = Bad.
    bad: bool,
    /// Instant the rate-limited link finishes serialising the last frame.
    link_free_at: Option<Instant>,
    /// Remainder (in bit-nanoseconds) of the serialisation-time division, so
    /// the long-run rate is exact.
    rate_rem: u128,
    /// Latest release instant given to an in-order frame (FIFO clamp).
    last_release: Option<Instant>,
    /// Release instants of frames in flight (only tracked with `queue_limit`).
    in_flight: BinaryHeap<Reverse<Instant>>,
}

impl fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultInjector")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl FaultInjector {
    /// Creates an injector for `cfg`.
    ///
    /// Panics if `cfg` is invalid (see [`FaultConfig::validate`]); use
    /// [`FaultInjector::try_new`] to get the error instead.
    pub fn new(cfg: FaultConfig) -> Self {
        match Self::try_new(cfg) {
            Ok(f) => f,
            Err(e) => panic!("invalid FaultConfig: {e}"),
        }
    }

    /// Creates an injector for `cfg`. Errors: those of [`FaultConfig::validate`].
    pub fn try_new(cfg: FaultConfig) -> Result<Self, FaultConfigError> {
        cfg.validate()?;
        Ok(Self {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            transparent: cfg.is_transparent(),
            cfg,
            stats: FaultStats::default(),
            bad: false,
            link_free_at: None,
            rate_rem: 0,
            last_release: None,
            in_flight: BinaryHeap::new(),
        })
    }

    /// Replaces the configuration mid-run (a link that heals or degrades).
    /// The generator is reseeded from `cfg.seed`; counters, the Gilbert-Elliott
    /// state, the rate-limited link's busy time and the FIFO order of frames
    /// already scheduled are kept, so no frame overtakes an earlier one because
    /// of the change. Errors: those of [`FaultConfig::validate`] (the old
    /// config stays).
    pub fn reconfigure(&mut self, cfg: FaultConfig) -> Result<(), FaultConfigError> {
        cfg.validate()?;
        self.rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        self.transparent = cfg.is_transparent();
        if cfg.queue_limit.is_none() {
            self.in_flight.clear();
        }
        if cfg.rate_bps != self.cfg.rate_bps {
            self.rate_rem = 0;
        }
        self.cfg = cfg;
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> &FaultStats {
        &self.stats
    }

    /// True when no fault is configured: `on_send` delivers every frame once,
    /// unchanged, at its send instant.
    pub fn is_transparent(&self) -> bool {
        self.transparent
    }

    /// True with probability `p`; draws nothing when `p` is 0 or 1, so a
    /// fault left at 0 does not shift the random sequence of the others.
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.rng.random::<f64>() < p
        }
    }

    /// Decides the fate of `frame` sent at `now`: calls `deliver(at, bytes)`
    /// zero (lost or tail-dropped), one, or two (duplicated) times, in the
    /// order the copies leave the link. `at >= now` is the instant the frame
    /// reaches the far end.
    pub fn on_send(
        &mut self,
        now: Instant,
        frame: &[u8],
        deliver: &mut dyn FnMut(Instant, Vec<u8>),
    ) {
        self.stats.frames += 1;
        let fifo_clear = !matches!(self.last_release, Some(t) if t > now);
        if self.transparent && fifo_clear {
            deliver(now, frame.to_vec());
            return;
        }

        // 1. Loss (independent, then the Gilbert-Elliott chain).
        let mut lost = self.chance(self.cfg.loss);
        if let Some(b) = self.cfg.burst.clone() {
            let flip = if self.bad {
                b.p_bad_to_good
            } else {
                b.p_good_to_bad
            };
            if self.chance(flip) {
                self.bad = !self.bad;
            }
            if self.bad && self.chance(b.loss_in_bad) {
                lost = true;
            }
        }
        if lost {
            self.stats.lost += 1;
            return;
        }

        // 2. Queue limit: tail-drop when `limit` frames are in flight.
        if let Some(limit) = self.cfg.queue_limit {
            while self.in_flight.peek().is_some_and(|Reverse(t)| *t <= now) {
                self.in_flight.pop();
            }
            if self.in_flight.len() >= limit {
                self.stats.queue_dropped += 1;
                return;
            }
        }

        // 3. Duplication, 4. corruption.
        let dup = self.chance(self.cfg.duplicate);
        let mut bytes = frame.to_vec();
        if self.chance(self.cfg.corrupt) && !bytes.is_empty() {
            let lo = if bytes.len() > ETH_HEADER_LEN {
                ETH_HEADER_LEN
            } else {
                0
            };
            let i = self.rng.random_range(lo..bytes.len());
            let bit = self.rng.random_range(0..8u32);
            bytes[i] ^= 1 << bit;
            self.stats.corrupted += 1;
        }

        // 5. Serialisation at the rate limit.
        let mut at = now;
        if let Some(rate) = self.cfg.rate_bps {
            let start = self.link_free_at.map_or(now, |t| t.max(now));
            let total = (frame.len() as u128) * 8 * 1_000_000_000 + self.rate_rem;
            let ns = total / rate as u128;
            self.rate_rem = total % rate as u128;
            let end = start + Duration::from_nanos(ns.min(u64::MAX as u128) as u64);
            self.link_free_at = Some(end);
            at = end;
        }

        // 6. Delay, jitter, FIFO clamp.
        at += self.cfg.delay;
        if !self.cfg.jitter.is_zero() {
            let j = self
                .rng
                .random_range(0..=self.cfg.jitter.as_nanos().min(u64::MAX as u128) as u64);
            at += Duration::from_nanos(j);
        }

        // 7. Reordering: held back outside the FIFO clamp.
        if self.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            let hold = if self.cfg.reorder_delay.is_zero() {
                DEFAULT_REORDER_DELAY
            } else {
                self.cfg.reorder_delay
            };
            at += hold;
        } else {
            if let Some(last) = self.last_release {
                at = at.max(last);
            }
            self.last_release = Some(at);
        }

        let copies = if dup { 2 } else { 1 };
        if self.cfg.queue_limit.is_some() {
            for _ in 0..copies {
                self.in_flight.push(Reverse(at));
            }
        }
        if dup {
            self.stats.duplicated += 1;
            deliver(at, bytes.clone());
        }
        deliver(at, bytes);
    }
}

/// A frame waiting in a queue until its release instant; ordered by
/// (instant, sequence) so equal instants keep send order.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pending {
    pub(crate) at: Instant,
    pub(crate) seq: u64,
    pub(crate) bytes: Vec<u8>,
}

/// Counters of a [`FaultLink`] beyond the fault decisions, in frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultLinkStats {
    /// Frames handed to the inner link.
    pub released: u64,
    /// Frames the inner link refused with an error other than `WouldBlock`
    /// (the frame is dropped and the error returned by the `send` that released it,
    /// or logged when the release happened in `recv`).
    pub inner_errors: u64,
    /// `send` calls refused with `WouldBlock` because the hold queue was full.
    pub backlog_full: u64,
    /// Frames rejected with `InvalidInput` for being larger than `mtu + 14` bytes.
    pub oversize: u64,
}

/// Default bound of the hold queue of a [`FaultLink`], in frames.
pub const DEFAULT_FAULT_LINK_BACKLOG: usize = 1 << 16;

/// Fault injection wrapped around any link (this kernel has no netem).
///
/// Faults apply to frames this end sends. Frames whose delivery instant is in
/// the future are kept in a queue ordered by release instant and handed to the
/// inner link by later `send`/`recv` calls or [`FaultLink::release_due`] once
/// the clock passes [`Link::poll_at`]. The clock is `Instant::now()` unless
/// given by [`FaultLink::with_clock`]. Frames received are passed through
/// unchanged.
pub struct FaultLink<L: Link> {
    inner: L,
    injector: FaultInjector,
    queue: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    backlog: usize,
    clock: Box<dyn Fn() -> Instant + Send>,
    stats: FaultLinkStats,
}

impl<L: Link> fmt::Debug for FaultLink<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultLink")
            .field("injector", &self.injector)
            .field("queued", &self.queue.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<L: Link> FaultLink<L> {
    /// Wraps `inner` with the faults of `cfg`, on the real clock.
    ///
    /// Panics if `cfg` is invalid (see [`FaultConfig::validate`]); use
    /// [`FaultLink::try_new`] for the error.
    pub fn new(inner: L, cfg: FaultConfig) -> Self {
        Self::with_clock(inner, cfg, Instant::now)
    }

    /// Like [`FaultLink::new`]. Errors: those of [`FaultConfig::validate`].
    pub fn try_new(inner: L, cfg: FaultConfig) -> Result<Self, FaultConfigError> {
        cfg.validate()?;
        Ok(Self::new(inner, cfg))
    }

    /// Wraps `inner` with the faults of `cfg`, reading time from `clock`
    /// (for a virtual clock, e.g. `move || sim_clock.now()`). Panics if `cfg`
    /// is invalid.
    pub fn with_clock(
        inner: L,
        cfg: FaultConfig,
        clock: impl Fn() -> Instant + Send + 'static,
    ) -> Self {
        Self {
            inner,
            injector: FaultInjector::new(cfg),
            queue: BinaryHeap::new(),
            seq: 0,
            backlog: DEFAULT_FAULT_LINK_BACKLOG,
            clock: Box::new(clock),
            stats: FaultLinkStats::default(),
        }
    }

    /// Sets the bound of the hold queue in frames (default
    /// [`DEFAULT_FAULT_LINK_BACKLOG`]); `send` returns `WouldBlock` when it is full.
    pub fn set_backlog(&mut self, frames: usize) {
        self.backlog = frames.max(1);
    }

    /// Fault counters of the sending direction.
    pub fn stats(&self) -> FaultStats {
        self.injector.stats().clone()
    }

    /// Counters of the wrapper itself.
    pub fn link_stats(&self) -> FaultLinkStats {
        self.stats.clone()
    }

    /// Frames held, waiting for their release instant.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The wrapped link.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped link, mutably (frames sent through it bypass the faults).
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// Replaces the fault configuration (see [`FaultInjector::reconfigure`]);
    /// frames already held keep their release instants.
    pub fn set_faults(&mut self, cfg: FaultConfig) -> Result<(), FaultConfigError> {
        self.injector.reconfigure(cfg)
    }

    /// Unwraps the inner link; frames still held are dropped.
    pub fn into_inner(self) -> L {
        self.inner
    }

    /// Hands every held frame whose release instant has passed to the inner
    /// link, in release order; returns how many were sent. Stops at the first
    /// `WouldBlock` (the frame stays queued). A frame the inner link refuses
    /// with another error is dropped, counted in `inner_errors`, and the error
    /// is returned.
    pub fn release_due(&mut self) -> io::Result<usize> {
        let now = (self.clock)();
        self.release(now)
    }

    fn release(&mut self, now: Instant) -> io::Result<usize> {
        let mut n = 0;
        while let Some(Reverse(p)) = self.queue.peek() {
            if p.at > now {
                break;
            }
            match self.inner.send(&p.bytes) {
                Ok(()) => {
                    self.queue.pop();
                    self.stats.released += 1;
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.queue.pop();
                    self.stats.inner_errors += 1;
                    return Err(e);
                }
            }
        }
        Ok(n)
    }
}

impl<L: Link> Link for FaultLink<L> {
    /// Sends `frame` through the faults. Errors: `InvalidInput` for a frame
    /// larger than `mtu() + 14` bytes; `WouldBlock` when the hold queue is full
    /// (or, with no fault configured, when the inner link is); an error of the
    /// inner link when releasing a due frame failed.
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let max = self.inner.mtu() + ETH_HEADER_LEN;
        if frame.len() > max {
            self.stats.oversize += 1;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "frame of {} bytes exceeds mtu + 14 = {max} bytes",
                    frame.len()
                ),
            ));
        }
        let now = (self.clock)();
        self.release(now)?;
        if self.injector.is_transparent() && self.queue.is_empty() {
            self.injector.stats.frames += 1;
            return self.inner.send(frame);
        }
        if self.queue.len() >= self.backlog {
            self.stats.backlog_full += 1;
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("fault hold queue full ({} frames)", self.backlog),
            ));
        }
        let (queue, seq) = (&mut self.queue, &mut self.seq);
        self.injector.on_send(now, frame, &mut |at, bytes| {
            *seq += 1;
            queue.push(Reverse(Pending {
                at,
                seq: *seq,
                bytes,
            }));
        });
        self.release(now).map(|_| ())
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let now = (self.clock)();
        if let Err(e) = self.release(now) {
            log::warn!("fault link: inner link refused a delayed frame: {e}");
        }
        self.inner.recv(buf)
    }

    fn mac(&self) -> MacAddr {
        self.inner.mac()
    }

    fn mtu(&self) -> usize {
        self.inner.mtu()
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.inner.raw_fd()
    }

    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.as_fd()
    }

    fn set_filter(&mut self, prog: &[netcore::bpf::Insn]) -> io::Result<()> {
        self.inner.set_filter(prog)
    }

    fn kernel_stats(&self) -> Option<crate::link::KernelStats> {
        self.inner.kernel_stats()
    }

    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        self.inner.join_group(group)
    }

    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        self.inner.leave_group(group)
    }

    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let now = (self.clock)();
        if let Err(e) = self.release(now) {
            log::warn!("fault link: inner link refused a delayed frame: {e}");
        }
        self.inner.recv_with(max, f)
    }

    fn rx_ready(&self) -> Option<bool> {
        self.inner.rx_ready()
    }

    fn on_timeout(&mut self, now: Instant) -> io::Result<()> {
        self.release(now).map(|_| ())
    }

    /// The earliest release instant of a held frame, or the inner link's.
    fn poll_at(&self) -> Option<Instant> {
        let mine = self.queue.peek().map(|Reverse(p)| p.at);
        match (mine, self.inner.poll_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::sim::{SimClock, SimLink};
    use crate::wire::ETHERTYPE_EDP;

    const US: Duration = Duration::from_micros(1);

    /// A 64-byte frame 02..02 <- 02..01 carrying sequence number `seq`.
    fn frame(seq: u32, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(18)];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&ETHERTYPE_EDP.to_be_bytes());
        f[14..18].copy_from_slice(&seq.to_be_bytes());
        f
    }

    fn seq_of(f: &[u8]) -> u32 {
        u32::from_be_bytes([f[14], f[15], f[16], f[17]])
    }

    /// Sends `n` frames, one every `gap`, and returns every delivery as
    /// (sent index, delivery offset from base, bytes) in call order.
    fn run(
        cfg: FaultConfig,
        n: u32,
        len: usize,
        gap: Duration,
    ) -> (Vec<(u32, Duration, Vec<u8>)>, FaultStats) {
        let base = Instant::now();
        let mut inj = FaultInjector::new(cfg);
        let mut out = Vec::new();
        for i in 0..n {
            let now = base + gap * i;
            inj.on_send(now, &frame(i, len), &mut |at, b| {
                assert!(at >= now, "delivery before send");
                out.push((i, at - base, b));
            });
        }
        (out, inj.stats().clone())
    }

    /// Asserts `x` lies within `tol` of `expect` (absolute).
    fn near(what: &str, x: f64, expect: f64, tol: f64) {
        assert!(
            (x - expect).abs() <= tol,
            "{what}: {x} not within {tol} of {expect}"
        );
    }

    #[test]
    fn transparent_delivers_once_unchanged_now() {
        let cfg = FaultConfig::seeded(3);
        assert!(cfg.is_transparent());
        let (out, st) = run(cfg, 100, 64, US);
        assert_eq!(out.len(), 100);
        for (i, at, b) in &out {
            assert_eq!(*at, US * *i);
            assert_eq!(b, &frame(*i, 64));
        }
        assert_eq!(
            st,
            FaultStats {
                frames: 100,
                ..Default::default()
            }
        );
        assert!(!FaultConfig::default().with_loss(0.1).is_transparent());
        assert!(!FaultConfig::default().with_rate(1_000).is_transparent());
    }

    #[test]
    fn independent_loss_rate() {
        let n = 20_000;
        let (out, st) = run(FaultConfig::seeded(1).with_loss(0.1), n, 64, US);
        assert_eq!(st.frames, n as u64);
        assert_eq!(out.len() as u64, st.frames - st.lost);
        // 3 sigma of a binomial(20000, 0.1) share is 0.0064.
        near("loss rate", st.lost as f64 / n as f64, 0.1, 0.0064);
        // Each frame delivered at most once, in order, intact.
        for w in out.windows(2) {
            assert!(w[0].0 < w[1].0);
        }
    }

    /// Mean length of runs of consecutive lost frames.
    fn mean_loss_run(out: &[(u32, Duration, Vec<u8>)], n: u32) -> f64 {
        let mut delivered = vec![false; n as usize];
        for (i, _, _) in out {
            delivered[*i as usize] = true;
        }
        let (mut runs, mut lost, mut in_run) = (0u64, 0u64, false);
        for d in delivered {
            if !d {
                lost += 1;
                if !in_run {
                    runs += 1;
                }
            }
            in_run = !d;
        }
        lost as f64 / runs.max(1) as f64
    }

    #[test]
    fn burst_loss_produces_runs() {
        let n = 50_000;
        // Stationary Bad share p/(p+r) = 0.01/0.21 = 0.0476; mean burst 1/r = 5 frames.
        let (out, st) = run(FaultConfig::seeded(2).with_burst(0.01, 0.2, 1.0), n, 64, US);
        near("burst loss rate", st.lost as f64 / n as f64, 0.0476, 0.012);
        let burst_run = mean_loss_run(&out, n);
        near("mean burst length", burst_run, 5.0, 1.0);
        // Independent loss of the same average rate has runs of about 1/(1-p) = 1.05.
        let (out_i, _) = run(FaultConfig::seeded(2).with_loss(0.0476), n, 64, US);
        let indep_run = mean_loss_run(&out_i, n);
        assert!(indep_run < 1.2, "independent runs {indep_run}");
        assert!(burst_run > 3.0 * indep_run);
    }

    #[test]
    fn duplication() {
        let n = 10_000;
        let (out, st) = run(FaultConfig::seeded(4).with_duplicate(0.05), n, 64, US);
        near("dup rate", st.duplicated as f64 / n as f64, 0.05, 0.0066);
        assert_eq!(out.len() as u64, n as u64 + st.duplicated);
        let mut copies = vec![0u32; n as usize];
        for (i, _, b) in &out {
            copies[*i as usize] += 1;
            assert_eq!(b, &frame(*i, 64));
        }
        assert!(copies.iter().all(|&c| c == 1 || c == 2));
        assert_eq!(
            copies.iter().filter(|&&c| c == 2).count() as u64,
            st.duplicated
        );
    }

    #[test]
    fn reordering_delivers_sequence_numbers_out_of_order() {
        let n = 5_000;
        let cfg = FaultConfig::seeded(5)
            .with_reorder(0.1, Duration::from_micros(50))
            .with_delay(Duration::from_micros(20), Duration::ZERO);
        let (mut out, st) = run(cfg, n, 64, Duration::from_micros(10));
        near("reorder rate", st.reordered as f64 / n as f64, 0.1, 0.013);
        assert_eq!(out.len(), n as usize, "reordering loses nothing");
        // Arrival order at the receiver: by delivery instant, then call order.
        out.sort_by_key(|(_, at, _)| *at);
        let seqs: Vec<u32> = out.iter().map(|(_, _, b)| seq_of(b)).collect();
        let inversions = seqs.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(
            inversions as u64 >= st.reordered * 9 / 10,
            "{inversions} inversions"
        );
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn reorder_without_delay_uses_default_hold_back() {
        let (out, st) = run(
            FaultConfig::seeded(6).with_reorder(1.0, Duration::ZERO),
            3,
            64,
            US,
        );
        assert_eq!(st.reordered, 3);
        for (i, at, _) in out {
            assert_eq!(at, US * i + DEFAULT_REORDER_DELAY);
        }
    }

    #[test]
    fn corruption_flips_one_bit_keeps_length_and_header() {
        let n = 5_000;
        let (out, st) = run(FaultConfig::seeded(7).with_corrupt(0.1), n, 100, US);
        near("corrupt rate", st.corrupted as f64 / n as f64, 0.1, 0.013);
        let mut differing = 0;
        for (i, _, b) in &out {
            let orig = frame(*i, 100);
            assert_eq!(b.len(), orig.len());
            assert_eq!(b[..14], orig[..14], "Ethernet header spared");
            let bits: u32 = b.iter().zip(&orig).map(|(x, y)| (x ^ y).count_ones()).sum();
            assert!(bits <= 1);
            differing += bits as u64;
        }
        assert_eq!(differing, st.corrupted);
    }

    #[test]
    fn fixed_delay() {
        let d = Duration::from_micros(250);
        let (out, _) = run(
            FaultConfig::seeded(8).with_delay(d, Duration::ZERO),
            50,
            64,
            US,
        );
        for (i, at, _) in out {
            assert_eq!(at, US * i + d);
        }
    }

    #[test]
    fn jitter_stays_in_range_and_fifo() {
        let d = Duration::from_micros(100);
        let j = Duration::from_micros(40);
        let (out, st) = run(
            FaultConfig::seeded(9).with_delay(d, j),
            5_000,
            64,
            Duration::from_micros(5),
        );
        assert_eq!(st.reordered, 0);
        let mut distinct = std::collections::HashSet::new();
        for w in out.windows(2) {
            assert!(w[1].1 >= w[0].1, "jitter reordered frames");
        }
        for (i, at, _) in &out {
            let sent = Duration::from_micros(5) * *i;
            assert!(*at >= sent + d);
            // FIFO clamp can push a frame behind its predecessor, never
            // beyond the largest delay.
            assert!(*at <= sent + d + j, "frame {i} at {at:?}");
            distinct.insert(*at - sent);
        }
        assert!(distinct.len() > 100, "jitter varies the delay");
    }

    #[test]
    fn rate_limit_spaces_deliveries() {
        // 1000-byte frames at 1 Gbit/s take 8 us each; all sent at once.
        let (out, _) = run(
            FaultConfig::seeded(10).with_rate(1_000_000_000),
            100,
            1000,
            Duration::ZERO,
        );
        for (k, (_, at, _)) in out.iter().enumerate() {
            assert_eq!(*at, Duration::from_micros(8) * (k as u32 + 1));
        }
        // An inexact rate: 64-byte frames at 3 Mbit/s, 512 bits = 170666.67 ns;
        // the remainder is carried, so frame k ends at floor(k * 512e9 / 3e6) ns.
        let (out, _) = run(
            FaultConfig::seeded(10).with_rate(3_000_000),
            1000,
            64,
            Duration::ZERO,
        );
        for (k, (_, at, _)) in out.iter().enumerate() {
            let k = k as u128 + 1;
            assert_eq!(at.as_nanos(), k * 512_000_000_000 / 3_000_000);
        }
        // An idle link sends at once: the frame takes only its own time.
        let (out, _) = run(
            FaultConfig::seeded(10).with_rate(1_000_000_000),
            3,
            1000,
            Duration::from_millis(1),
        );
        for (i, at, _) in out {
            assert_eq!(at, Duration::from_millis(1) * i + Duration::from_micros(8));
        }
    }

    #[test]
    fn queue_limit_tail_drops() {
        // 1000-byte frames at 1 Mbit/s take 8 ms each: 100 at once overflow a 10-frame queue.
        let cfg = FaultConfig::seeded(11)
            .with_rate(1_000_000)
            .with_queue_limit(10);
        let (out, st) = run(cfg, 100, 1000, Duration::ZERO);
        assert_eq!(out.len(), 10);
        assert_eq!(st.queue_dropped, 90);
        assert_eq!(
            out.iter().map(|o| o.0).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        // Spaced at the rate, the queue never fills.
        let cfg = FaultConfig::seeded(11)
            .with_rate(1_000_000)
            .with_queue_limit(2);
        let (out, st) = run(cfg, 100, 1000, Duration::from_millis(8));
        assert_eq!((out.len(), st.queue_dropped), (100, 0));
    }

    fn everything(seed: u64) -> FaultConfig {
        FaultConfig::seeded(seed)
            .with_loss(0.05)
            .with_burst(0.01, 0.3, 0.8)
            .with_duplicate(0.05)
            .with_reorder(0.05, Duration::from_micros(30))
            .with_corrupt(0.05)
            .with_delay(Duration::from_micros(10), Duration::from_micros(5))
            .with_rate(10_000_000_000)
            .with_queue_limit(64)
    }

    #[test]
    fn determinism_same_seed_same_trace() {
        let (a, sa) = run(everything(42), 3_000, 200, US);
        let (b, sb) = run(everything(42), 3_000, 200, US);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        let (c, _) = run(everything(43), 3_000, 200, US);
        assert_ne!(a, c);
    }

    #[test]
    fn validate_and_parse_spec() {
        assert!(FaultConfig::default().validate().is_ok());
        assert!(matches!(
            FaultConfig::default().with_loss(1.5).validate(),
            Err(FaultConfigError::Probability { name: "loss", .. })
        ));
        assert!(FaultConfig::default()
            .with_loss(f64::NAN)
            .validate()
            .is_err());
        assert!(FaultConfig::default()
            .with_burst(0.1, -0.1, 1.0)
            .validate()
            .is_err());
        assert_eq!(
            FaultConfig::default().with_rate(0).validate(),
            Err(FaultConfigError::ZeroRate)
        );
        assert_eq!(
            FaultConfig::default().with_queue_limit(0).validate(),
            Err(FaultConfigError::ZeroQueue)
        );
        assert!(FaultInjector::try_new(FaultConfig::default().with_duplicate(2.0)).is_err());

        let c = FaultConfig::parse_spec(
            "loss=0.01, dup=0.002,reorder=0.03,reorder_delay=200us,corrupt=0.001,delay=1.5ms,jitter=10,rate=2.5G,queue=100,burst=0.01/0.3/1,seed=7",
        )
        .unwrap();
        assert_eq!(
            c,
            FaultConfig {
                loss: 0.01,
                burst: Some(BurstLoss {
                    p_good_to_bad: 0.01,
                    p_bad_to_good: 0.3,
                    loss_in_bad: 1.0
                }),
                duplicate: 0.002,
                reorder: 0.03,
                reorder_delay: Duration::from_micros(200),
                corrupt: 0.001,
                delay: Duration::from_micros(1500),
                jitter: Duration::from_micros(10),
                rate_bps: Some(2_500_000_000),
                queue_limit: Some(100),
                seed: 7,
            }
        );
        assert_eq!(FaultConfig::parse_spec("").unwrap(), FaultConfig::default());
        assert_eq!(
            FaultConfig::parse_spec("none").unwrap(),
            FaultConfig::default()
        );
        assert_eq!(FaultConfig::default().to_string(), "none");
        // Display writes the spec back.
        assert_eq!(FaultConfig::parse_spec(&c.to_string()).unwrap(), c);
        let odd = everything(9).with_delay(Duration::from_nanos(1_234_567), Duration::from_secs(2));
        assert_eq!(FaultConfig::parse_spec(&odd.to_string()).unwrap(), odd);
        assert_eq!(
            FaultConfig::seeded(3)
                .with_loss(0.25)
                .with_delay(Duration::from_millis(2), Duration::ZERO)
                .to_string(),
            "loss=0.25,delay=2ms,seed=3"
        );
        for bad in [
            "loss",
            "loss=x",
            "loss=2",
            "bogus=1",
            "delay=5h",
            "rate=0",
            "burst=0.1/0.2",
            "queue=-1",
        ] {
            let e = FaultConfig::parse_spec(bad).unwrap_err();
            assert!(!e.to_string().is_empty(), "{bad}");
        }
    }

    /// A link that records what it sends and can refuse with WouldBlock.
    struct RecLink {
        sent: Vec<Vec<u8>>,
        refuse: usize,
    }

    impl Link for RecLink {
        fn send(&mut self, frame: &[u8]) -> io::Result<()> {
            if self.refuse > 0 {
                self.refuse -= 1;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.sent.push(frame.to_vec());
            Ok(())
        }
        fn recv(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }
        fn mac(&self) -> MacAddr {
            MacAddr([2, 0, 0, 0, 0, 1])
        }
        fn mtu(&self) -> usize {
            1500
        }
    }

    #[test]
    fn fault_link_releases_delayed_frames_via_poll_at() {
        let clock = SimClock::new();
        let (a, mut b) =
            SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        let d = Duration::from_micros(100);
        let c2 = clock.clone();
        let mut fl = FaultLink::with_clock(
            a,
            FaultConfig::seeded(1).with_delay(d, Duration::ZERO),
            move || c2.now(),
        );
        let t0 = clock.now();
        fl.send(&frame(1, 64)).unwrap();
        fl.send(&frame(2, 64)).unwrap();
        assert_eq!(fl.queued(), 2);
        assert_eq!(fl.poll_at(), Some(t0 + d));
        let mut buf = [0u8; 1514];
        assert_eq!(
            b.recv(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        clock.advance(d - Duration::from_nanos(1));
        assert_eq!(fl.release_due().unwrap(), 0);
        assert_eq!(b.next_delivery(), None);
        clock.advance_to(fl.poll_at().unwrap());
        // A recv on the wrapper releases due frames too.
        assert_eq!(
            fl.recv(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(fl.queued(), 0);
        assert_eq!(fl.poll_at(), None);
        for want in [1, 2] {
            let n = b.recv(&mut buf).unwrap();
            assert_eq!(seq_of(&buf[..n]), want);
        }
        assert_eq!(fl.stats().frames, 2);
        assert_eq!(fl.link_stats().released, 2);
        assert_eq!(fl.mac(), sim_mac_1());
    }

    fn sim_mac_1() -> MacAddr {
        crate::link::sim::sim_mac(0)
    }

    #[test]
    fn fault_link_keeps_frames_the_inner_link_refuses() {
        let clock = SimClock::new();
        let c2 = clock.clone();
        let inner = RecLink {
            sent: vec![],
            refuse: 1,
        };
        let mut fl = FaultLink::with_clock(
            inner,
            FaultConfig::seeded(1).with_duplicate(1.0),
            move || c2.now(),
        );
        // Both copies are due now; the first send is refused and both stay queued.
        fl.send(&frame(1, 64)).unwrap();
        assert_eq!(fl.queued(), 2);
        assert!(fl.poll_at().unwrap() <= clock.now());
        assert_eq!(fl.release_due().unwrap(), 2);
        assert_eq!(fl.inner().sent, vec![frame(1, 64), frame(1, 64)]);
        // Oversize is rejected before any fault.
        let e = fl.send(&vec![0u8; 1515]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(fl.link_stats().oversize, 1);
        assert_eq!(fl.stats().frames, 1);
        // Backlog bound.
        let mut fl = FaultLink::with_clock(
            RecLink {
                sent: vec![],
                refuse: 0,
            },
            FaultConfig::seeded(1).with_delay(Duration::from_secs(1), Duration::ZERO),
            Instant::now,
        );
        fl.set_backlog(3);
        for i in 0..3 {
            fl.send(&frame(i, 64)).unwrap();
        }
        assert_eq!(
            fl.send(&frame(3, 64)).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(fl.link_stats().backlog_full, 1);
        // Transparent: straight through, inner errors propagate.
        let mut fl = FaultLink::new(
            RecLink {
                sent: vec![],
                refuse: 1,
            },
            FaultConfig::default(),
        );
        assert_eq!(
            fl.send(&frame(0, 64)).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        fl.send(&frame(0, 64)).unwrap();
        assert_eq!(fl.inner_mut().sent.len(), 1);
        assert_eq!(fl.queued(), 0);
    }
}
