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
//! - the socket layer (`EdpSocket`), echo/ping, port ownership, privileges.

pub mod iface;
pub mod link;
pub mod ports;
pub mod wire;

pub use link::packet::PacketLink;
pub use link::Link;
pub use ports::PortLease;
pub use wire::{MacAddr, WireError, ETHERTYPE_EDP, ETHERTYPE_ESP};
