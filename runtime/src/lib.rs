//! The I/O runtime: one per process and interface, shared by every EDP
//! socket, ESP stream and listener and CTP-over-EDP endpoint.
//!
//! A [`Runtime`] owns **one** AF_PACKET socket (a TPACKET_V2 receive ring or
//! recvmmsg batches, sendmmsg with gather) whose kernel filter passes only
//! frames for ports this process owns, and a user-space demultiplexing
//! table from ports and connection tuples to sockets ([`demux`]). The first
//! design gave every socket its own packet socket, so the kernel handed
//! each frame to every socket of the ethertype and ran every filter (about
//! 47 ns per socket per frame: 1 000 idle EDP sockets took a 64-byte
//! ping-pong from 1.87 to 53.9 us). Kernel UDP and TCP demultiplex by hash;
//! so does this table.
//!
//! - [`engine`]: the link, the slots, timers and the transmit batch;
//! - [`driver`]: waiting (busy, blocking, adaptive), the leader/followers
//!   scheme, readiness for parked threads and `mio`;
//! - `service`: the deadline and idle-progress thread;
//! - [`responder`]: echo replies and RSTs for the host;
//! - [`socket`]: the [`Socket`] trait protocol sockets implement;
//! - [`carrier`]: the [`Carrier`] trait, a protocol socket's place in an
//!   engine (a slot of the Ethernet engine or a UDP engine of its own);
//! - [`udp`]: a protocol core alone on one kernel UDP socket, driven by the
//!   same driver ([`UdpEngine`]).
//!
//! Runtimes are shared per (network namespace, interface, [`LinkConfig`]):
//! [`Runtime::shared`] returns the process's runtime for that key, opening
//! it on first use; it closes when its last socket (and lingering
//! connection) is gone. [`Runtime::with_link`] builds one over any link
//! (simulated, fault-injecting, UDP-carried), for tests and unprivileged use.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod carrier;
pub mod config;
pub mod control;
pub mod demux;
pub mod driver;
pub mod engine;
pub(crate) mod filter;
pub mod port;
pub mod ports;
pub mod responder;
mod runtime;
pub(crate) mod service;
pub mod socket;
pub mod stats;
pub mod tx;
pub mod udp;

pub use carrier::Carrier;
pub use config::{
    LinkConfig, Progress, RuntimeConfig, WaitPolicy, DEFAULT_IDLE_PROGRESS, DEFAULT_LINK_BUFFER,
    DEFAULT_RX_RING, DEFAULT_SPIN, ETHERTYPE_EDP, ETHERTYPE_ESP,
};
pub use demux::DemuxKey;
pub use driver::{Deadline, Driver, Engine, Guard, YieldPacer};
pub use engine::EthEngine;
/// Re-exported so users name `mio::Token` etc. with the version the runtime uses.
pub use mio;
pub use ports::{PortLease, CONTROL_PORT};
pub use responder::UnclaimedHandler;
pub use runtime::Runtime;
pub use socket::{Cx, DirectRead, GatherRef, Ready, SlotId, Socket, Spawn};
pub use stats::{EngineStats, ResponderStats};
pub use tx::{TxQueue, MAX_BATCH};
pub use udp::{DatagramCore, UdpEngine, UdpEvent};
