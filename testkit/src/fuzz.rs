//! The fuzz targets' mapping from input bytes to a fault configuration
//! ([`FaultConfig`]): one layout for every target, scaled
//! per target by a [`FaultSpace`].
//!
//! Byte layout (missing bytes count as 0, which means "no such fault"):
//!
//! | byte | fault |
//! |---|---|
//! | 0 | loss probability |
//! | 1 | duplication probability |
//! | 2 | reordering probability |
//! | 3 | corruption probability (only if [`FaultSpace::corrupt`]) |
//! | 4 | delay: low 6 bits × `delay_step`, jitter: high 2 bits × `jitter_step` |
//! | 5 | rate limit: × `rate_step_bps` (0: unlimited; only if the step is not 0) |
//! | 6 | reordering hold-back: `reorder_hold_back` + byte × `reorder_step` |
//! | 7, 8 | Gilbert-Elliott burst loss (only if [`FaultSpace::burst`] and bit 0 of byte 7) |
//! | 9 | queue limit, frames (0: none; only if [`FaultSpace::queue_limit`]) |
//!
//! A probability byte below 128 means 0, so single faults are exercised
//! alone too; 128..=255 scale linearly up to `max_probability`.

use std::time::Duration;

use crate::sim::FaultConfig;

/// Bytes [`fault_config`] reads at most.
pub const FAULT_BYTES: usize = 10;

/// What a target lets the input choose, and the scale of each fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultSpace {
    /// Largest loss/duplication/reordering/corruption probability.
    pub max_probability: f64,
    /// Whether corruption may be chosen (not where the protocol has no
    /// checksum of its own and relies on the Ethernet FCS).
    pub corrupt: bool,
    /// One step of delay (byte 4, low 6 bits).
    pub delay_step: Duration,
    /// One step of jitter (byte 4, high 2 bits).
    pub jitter_step: Duration,
    /// One step of rate limit, bits/s; 0: the input cannot limit the rate.
    pub rate_step_bps: u64,
    /// Smallest reordering hold-back.
    pub reorder_hold_back: Duration,
    /// One step of additional hold-back (byte 6).
    pub reorder_step: Duration,
    /// Whether burst loss may be chosen.
    pub burst: bool,
    /// Whether a queue limit may be chosen.
    pub queue_limit: bool,
}

impl FaultSpace {
    /// Every fault at full scale (probabilities up to 1): for the fault
    /// injector itself.
    pub const ALL: FaultSpace = FaultSpace {
        max_probability: 1.0,
        corrupt: true,
        delay_step: Duration::from_micros(4),
        jitter_step: Duration::from_micros(8),
        rate_step_bps: 1_000_000,
        reorder_hold_back: Duration::ZERO,
        reorder_step: Duration::from_nanos(100),
        burst: true,
        queue_limit: true,
    };
}

/// A probability from one input byte: 0 below 128, then linear up to `max`.
pub fn probability(b: u8, max: f64) -> f64 {
    if b < 128 {
        0.0
    } else {
        f64::from(b - 128) / 127.0 * max
    }
}

/// The fault configuration the first [`FAULT_BYTES`] of `bytes` choose (see
/// the module docs for the layout), with random decisions seeded by `seed`.
pub fn fault_config(bytes: &[u8], seed: u64, space: &FaultSpace) -> FaultConfig {
    let mut h = [0u8; FAULT_BYTES];
    let n = bytes.len().min(FAULT_BYTES);
    h[..n].copy_from_slice(&bytes[..n]);
    let p = |b: u8| probability(b, space.max_probability);
    let hold_back = space.reorder_hold_back + space.reorder_step * u32::from(h[6]);
    let mut f = FaultConfig::seeded(seed)
        .with_loss(p(h[0]))
        .with_duplicate(p(h[1]))
        .with_reorder(p(h[2]), hold_back)
        .with_delay(
            space.delay_step * u32::from(h[4] % 64),
            space.jitter_step * u32::from(h[4] >> 6),
        );
    if space.corrupt {
        f = f.with_corrupt(p(h[3]));
    }
    if space.rate_step_bps != 0 && h[5] != 0 {
        f = f.with_rate(u64::from(h[5]) * space.rate_step_bps);
    }
    if space.burst && h[7] & 1 == 1 {
        f = f.with_burst(
            probability(h[7] | 0x80, 1.0),
            probability(h[8] | 0x80, 1.0),
            probability(h[8], 1.0),
        );
    }
    if space.queue_limit && h[9] != 0 {
        f = f.with_queue_limit(usize::from(h[9]));
    }
    f
}

#[cfg(test)]
mod tests;
