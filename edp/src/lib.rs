//! EDP, the Ethernet Datagram Protocol: datagrams with 16-bit ports carried
//! directly in Ethernet frames (ethertype 0x88B5), sent and received in user
//! space through AF_PACKET sockets.
//!
//! Source: M. Reinhardt, "Optimizing Point-to-Point Ethernet Cluster
//! Communication", TU Chemnitz 2006, ch. 4. Wire layout: PROTOCOL.md.
//!
//! Modules:
//! - [`wire`]: Ethernet II and EDP header codecs;
//! - [`link`]: the [`link::Link`] abstraction with AF_PACKET, in-memory and
//!   fault-injecting implementations;
//! - [`socket`]: [`EdpSocket`], std::net-like datagram sockets;
//! - [`echo`]: echo responder and [`echo::ping`] on control port 0;
//! - [`ports`]: exclusive port ownership across processes;
//! - [`privilege`]: dropping capabilities once sockets are open;
//! - [`runtime`]: the I/O runtime: one packet socket per process and
//!   interface, shared by every EDP/ESP/CTP socket, with demultiplexing,
//!   batching, waiting, deadlines and the host responder role;
//! - [`iface`]: interface index, MAC and MTU;
//! - [`time`]: the [`time::Clock`] trait and the virtual [`time::SimClock`];
//! - [`checksum`]: the RFC 1071 ones' complement sum (SIMD);
//! - [`sys`]: every system call nix does not wrap, and all of this crate's
//!   `unsafe` (batched datagram I/O in [`sys::mmsg`] is public).
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod auth;
pub mod checksum;
pub mod echo;
pub mod iface;
pub mod link;
pub mod ports;
pub mod privilege;
pub mod runtime;
pub mod socket;
#[allow(unsafe_code)]
pub mod sys;
pub mod time;
pub mod wire;

pub use link::packet::PacketLink;
pub use link::Link;
/// Re-exported so users name `mio::Token` etc. with the version EDP uses.
pub use mio;
/// Re-exported so users name `netcore::bpf` etc. with the version EDP uses.
pub use netcore;
pub use ports::PortLease;
pub use socket::{EdpConfig, EdpSocket, EdpStats};
pub use wire::{MacAddr, WireError, ETHERTYPE_EDP, ETHERTYPE_ESP};
