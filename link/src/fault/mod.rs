//! Seeded fault injection: loss, burst loss, duplication, reordering,
//! corruption, delay, jitter, rate limit and a bounded queue.
//!
//! The decisions are made by a sans-IO core, [`FaultInjector`], which takes the
//! send instant as an argument and reads no clock. It is used by two links:
//!
//! - [`crate::sim::SimLink`] (in-memory links on a virtual clock) runs one
//!   injector per sending direction;
//! - [`FaultLink`] wraps any [`Link`](super::Link) (this kernel has no
//!   netem), forwards every method, holds delayed frames in a queue and
//!   releases them on later calls.
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
//!
//! Files: `config` ([`FaultConfig`], [`BurstLoss`], validation), `spec` (the
//! `--fault` spec grammar and `Display`), `injector` ([`FaultInjector`],
//! [`FaultStats`]), `link` ([`FaultLink`]). Every fault decision is a
//! `tracing` event at trace level (target `link::fault`).

mod config;
mod injector;
mod link;
mod spec;

pub use self::config::{BurstLoss, FaultConfig, FaultConfigError, DEFAULT_REORDER_DELAY};
pub use self::injector::{Fate, FaultInjector, FaultStats};
pub use self::link::{FaultLink, FaultLinkStats, DEFAULT_FAULT_LINK_BACKLOG};

#[cfg(test)]
mod tests;
