//! The protocol-core kit: mechanisms every protocol of this workspace needs,
//! each implemented once, with no I/O, no clock reads and no libc.
//!
//! - [`rtt`]: the RFC 6298 smoothed RTT estimator with Karn's rule and
//!   backoff, and the RTO policies of ESP, CTP and the thesis as functions
//!   over it;
//! - [`timer`]: a fixed table of named timers (quinn's `TimerTable`) and a
//!   queue of many keyed deadlines with lazy invalidation;
//! - [`time`]: `earliest` / `later` over optional instants;
//! - [`congestion`]: the congestion [`congestion::Controller`] trait with
//!   NewReno (RFC 5681/6582) and no control;
//! - [`assembler`]: out-of-order reassembly with SACK blocks (RFC 2018);
//! - [`bpf`]: classic-BPF program builder with labels, the port-set filters
//!   the I/O runtime installs, and an interpreter for tests;
//! - [`frame`]: helpers shared by the checked-view frame codecs;
//! - [`seq`]: 32-bit sequence numbers with wraparound (RFC 1982);
//! - [`rate`]: a per-second allowance (the limits on answers to forged
//!   segments).
//!
//! Protocol cores (`esp::conn`, `ctp::Endpoint`, `mak`) take `now` as an
//! argument and use these; the I/O runtime (`runtime`) owns the clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod assembler;
pub mod bpf;
pub mod congestion;
pub mod frame;
pub mod rate;
pub mod rtt;
pub mod seq;
pub mod span;
pub mod time;
pub mod timer;
