//! ESP, the Ethernet Streaming Protocol: reliable, ordered, flow-controlled
//! byte streams over raw Ethernet (ethertype 0x88B6).
//!
//! Source: M. Reinhardt, "Optimizing Point-to-Point Ethernet Cluster
//! Communication", TU Chemnitz 2006, ch. 5, extended with flow control,
//! congestion control, SACK and RFC 5961 checks. Wire layout: `esp/PROTOCOL.md`.
//!
//! Modules:
//! - [`wire`]: the ESP header codec (checked view + `Repr`);
//! - [`rtt`]: RTO estimation per RFC 6298;
//! - [`conn`]: the sans-IO connection state machine;
//! - [`listener`]: the sans-IO listen side (backlog, half-open limit);
//! - [`driver`]: one connection driven over one link (shared by sockets and
//!   simulations);
//! - [`config`]: [`EspConfig`] and its defaults.

pub mod config;
pub mod conn;
pub mod driver;
pub mod listener;
pub mod rtt;
pub mod wire;

pub use config::EspConfig;
pub use conn::{Connection, Error, IsnGenerator, State, Stats};
pub use listener::{Listener, SynOutcome};
