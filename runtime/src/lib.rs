//! The I/O runtime: one per process and interface, shared by every EDP
//! socket, ESP stream and listener and CTP-over-EDP endpoint.
//!
//! A [`Runtime`] owns **one** AF_PACKET socket (a TPACKET_V2 receive ring or
//! recvmmsg batches, sendmmsg with gather) whose kernel filter passes only
//! frames for ports this process owns, and a user-space demultiplexing
//! table from ports and connection tuples to sockets (`demux`). The first
//! design gave every socket its own packet socket, so the kernel handed
//! each frame to every socket of the ethertype and ran every filter (about
//! 47 ns per socket per frame: 1 000 idle EDP sockets took a 64-byte
//! ping-pong from 1.87 to 53.9 us). Kernel UDP and TCP demultiplex by hash;
//! so does this table.
//!
//! Users of the runtime (applications, and protocol handles such as
//! `EdpSocket` or `EspStream` opening theirs) need the items at this
//! crate's top: [`Runtime`], its configuration ([`RuntimeConfig`],
//! [`LinkConfig`], [`WaitPolicy`], [`Progress`]), [`Deadline`], counters,
//! port leases ([`ports`]) and frame authentication ([`auth`]).
//!
//! What a protocol implements to live in the runtime, and what it is
//! given, is in one module: [`protocol`] (the [`protocol::Socket`] trait,
//! [`protocol::Cx`], [`protocol::RxFrame`], [`protocol::TxQueue`], the
//! [`protocol::Carrier`] of a protocol handle, the UDP engine's
//! [`protocol::DatagramCore`]). Inside, one concept per file: the engine
//! (link, slots, timers, transmit batch), the driver (waiting: busy,
//! blocking, adaptive; leader/followers; readiness for parked threads and
//! `mio`), the service thread (deadlines, idle progress), the demux table,
//! the kernel filter, the responder (echo and RST for the host), the UDP
//! engine.
//!
//! Runtimes are shared per (network namespace, interface, [`LinkConfig`]):
//! [`Runtime::shared`] returns the process's runtime for that key, opening
//! it on first use; it closes when its last socket (and lingering
//! connection) is gone. [`Runtime::with_link`] builds one over any link
//! (simulated, fault-injecting, UDP-carried), for tests and unprivileged use.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod addr;
pub mod auth;
mod carrier;
mod config;
pub mod control;
mod demux;
mod driver;
mod engine;
mod exiting;
mod filter;
pub mod port;
pub mod ports;
pub mod protocol;
mod responder;
mod runtime;
mod service;
mod slot;
mod slots;
mod socket;
mod stats;
mod tx;
mod udp;

pub use addr::{EthAddr, ParseEthAddrError};
pub use config::{
    LinkConfig, Progress, RuntimeConfig, WaitPolicy, DEFAULT_IDLE_PROGRESS, DEFAULT_LINK_BUFFER,
    DEFAULT_RX_RING, DEFAULT_SPIN, ETHERTYPE_EDP, ETHERTYPE_ESP,
};
pub use driver::{Deadline, YieldPacer};
pub use exiting::join_exiting;
/// Re-exported so users name `mio::Token` etc. with the version the runtime uses.
pub use mio;
pub use ports::{PortLease, CONTROL_PORT};
pub use responder::RESETS_PER_SEC;
pub use runtime::Runtime;
pub use stats::{EngineStats, ResponderStats};
