//! ESP, the Ethernet Streaming Protocol: reliable, ordered, flow-controlled
//! byte streams over raw Ethernet (ethertype 0x88B6).
//!
//! Source: M. Reinhardt, "Optimizing Point-to-Point Ethernet Cluster
//! Communication", TU Chemnitz 2006, ch. 5, extended with flow control,
//! congestion control, SACK and RFC 5961 checks. Wire layout: `esp/PROTOCOL.md`.
//!
//! Modules:
//! - [`wire`]: the ESP header codec (checked view + `Repr`);
//! - [`conn`]: the sans-IO connection state machine (RTO estimation,
//!   congestion control and reassembly from [`netcore`]);
//! - [`listener`]: the sans-IO listen side (backlog, half-open limit);
//! - [`config`]: [`TransportConfig`] (the protocol) and [`EspConfig`] (the
//!   sockets), with their defaults;
//! - [`socket`]: [`EspListener`] and [`EspStream`], std::net-like sockets
//!   living in the process's I/O runtime (`runtime`: one packet socket
//!   per process and interface, user-space demultiplexing, one driver).
//!
//! Blocking use (as netgauge does):
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use std::io::{Read, Write};
//! use esp::{EspConfig, EspListener, EspStream};
//! // host B
//! let listener = EspListener::bind(("eth0", 7000))?;
//! // host A
//! let peer: edp::MacAddr = "02:00:00:00:00:02".parse().unwrap();
//! let mut s = EspStream::connect_with("eth0", peer, 7000, EspConfig::default())?;
//! s.write_all(b"hello")?;
//! // host B
//! let (mut t, _peer) = listener.accept()?;
//! let mut buf = [0u8; 5];
//! t.read_exact(&mut buf)?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod config;
pub mod conn;
pub mod listener;
pub mod socket;
pub mod wire;

pub use auth::{AuthMethod, AuthPolicy, MethodList};
pub use config::{Checksum, CongestionControl, EspConfig, TransportConfig};
pub use conn::{Connection, ConnectionError, Error, IsnGenerator, Liveness, State, Stats};
/// Fault injection settings, re-exported for [`EspConfig::with_fault`].
pub use link::fault::FaultConfig;
pub use listener::{Listener, SynOutcome};
pub use socket::{serve_resets, EspListener, EspStream};
