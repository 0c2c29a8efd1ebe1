//! [`FaultInjector`]: the sans-IO core that decides the fate of each frame.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{FaultConfig, FaultConfigError, DEFAULT_REORDER_DELAY};
use crate::eth::ETH_HEADER_LEN;

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
    /// Reused copy of a corrupted frame for [`FaultInjector::on_send`].
    scratch: Vec<u8>,
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
            scratch: Vec::new(),
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

    /// True when no fault is configured: every frame is delivered once,
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

    /// Counts `frames` frames sent at `now` without a decision when the
    /// injector is transparent and its FIFO is clear (the caller's fast
    /// path: each would be delivered once, unchanged, at `now`); returns
    /// false, counting nothing, when decisions are needed instead.
    pub fn pass_through(&mut self, now: Instant, frames: usize) -> bool {
        if self.transparent && !matches!(self.last_release, Some(t) if t > now) {
            self.stats.frames += frames as u64;
            true
        } else {
            false
        }
    }

    /// Decides the fate of a frame of `len` bytes sent at `now`, in the
    /// netem order of the module docs. Copies nothing: the caller applies
    /// [`Fate::corrupt`] to its own copy.
    pub fn decide(&mut self, now: Instant, len: usize) -> Fate {
        self.stats.frames += 1;
        let fifo_clear = !matches!(self.last_release, Some(t) if t > now);
        if self.transparent && fifo_clear {
            return Fate::deliver(now);
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
                tracing::trace!(target: "link::fault", bad = self.bad, "burst-loss state change");
            }
            if self.bad && self.chance(b.loss_in_bad) {
                lost = true;
            }
        }
        if lost {
            self.stats.lost += 1;
            tracing::trace!(target: "link::fault", len, burst = self.bad, "drop: loss");
            return Fate::dropped(now);
        }

        // 2. Queue limit: tail-drop when `limit` frames are in flight.
        if let Some(limit) = self.cfg.queue_limit {
            while self.in_flight.peek().is_some_and(|Reverse(t)| *t <= now) {
                self.in_flight.pop();
            }
            if self.in_flight.len() >= limit {
                self.stats.queue_dropped += 1;
                tracing::trace!(target: "link::fault", len, limit, "drop: queue limit");
                return Fate::dropped(now);
            }
        }

        // 3. Duplication, 4. corruption.
        let dup = self.chance(self.cfg.duplicate);
        let mut corrupt = None;
        if self.chance(self.cfg.corrupt) && len > 0 {
            let lo = if len > ETH_HEADER_LEN {
                ETH_HEADER_LEN
            } else {
                0
            };
            let i = self.rng.random_range(lo..len);
            let bit = self.rng.random_range(0..8u32);
            corrupt = Some((i, 1u8 << bit));
            self.stats.corrupted += 1;
            tracing::trace!(target: "link::fault", len, byte = i, bit, "corrupt");
        }

        // 5. Serialisation at the rate limit.
        let mut at = now;
        if let Some(rate) = self.cfg.rate_bps {
            let start = self.link_free_at.map_or(now, |t| t.max(now));
            let total = (len as u128) * 8 * 1_000_000_000 + self.rate_rem;
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
            tracing::trace!(target: "link::fault", len, hold_us = hold.as_micros() as u64, "reorder");
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
            tracing::trace!(target: "link::fault", len, "duplicate");
        }
        if at > now {
            tracing::trace!(target: "link::fault", len, delay_ns = (at - now).as_nanos() as u64, "delay");
        }
        Fate {
            copies,
            at,
            corrupt,
        }
    }

    /// Decides the fate of `frame` sent at `now` and calls `deliver(at,
    /// bytes)` zero (lost or tail-dropped), one, or two (duplicated) times,
    /// in the order the copies leave the link. `at >= now` is the instant
    /// the frame reaches the far end. `bytes` is `frame` itself, or a
    /// corrupted copy kept in a buffer the injector reuses.
    pub fn on_send(&mut self, now: Instant, frame: &[u8], deliver: &mut dyn FnMut(Instant, &[u8])) {
        let fate = self.decide(now, frame.len());
        if fate.copies == 0 {
            return;
        }
        let bytes = match fate.corrupt {
            None => frame,
            Some(_) => {
                self.scratch.clear();
                self.scratch.extend_from_slice(frame);
                fate.apply(&mut self.scratch);
                &self.scratch
            }
        };
        for _ in 0..fate.copies {
            deliver(fate.at, bytes);
        }
    }
}

/// What happens to one frame: how many copies arrive, when, and which bit
/// of them is flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fate {
    /// Copies delivered: 0 (lost or tail-dropped), 1, or 2 (duplicated).
    pub copies: u8,
    /// Instant every copy reaches the far end (`>= now`).
    pub at: Instant,
    /// Byte index and bit mask to flip in each copy, if corrupted.
    pub corrupt: Option<(usize, u8)>,
}

impl Fate {
    fn deliver(at: Instant) -> Self {
        Self {
            copies: 1,
            at,
            corrupt: None,
        }
    }

    fn dropped(at: Instant) -> Self {
        Self {
            copies: 0,
            at,
            corrupt: None,
        }
    }

    /// Applies the corruption (if any) to a copy of the frame.
    pub fn apply(&self, copy: &mut [u8]) {
        if let Some((i, mask)) = self.corrupt {
            if let Some(b) = copy.get_mut(i) {
                *b ^= mask;
            }
        }
    }
}
