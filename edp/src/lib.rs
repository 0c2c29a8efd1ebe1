//! EDP, the Ethernet Datagram Protocol: datagrams with 16-bit ports carried
//! directly in Ethernet frames (ethertype 0x88B5), sent and received in user
//! space through the process's I/O runtime (`runtime`: one AF_PACKET socket
//! per process and interface).
//!
//! Source: M. Reinhardt, "Optimizing Point-to-Point Ethernet Cluster
//! Communication", TU Chemnitz 2006, ch. 4. Wire layout: PROTOCOL.md.
//!
//! - [`EdpSocket`]: std::net-like datagram sockets (`bind`, `send_to`,
//!   `recv_from`, timeouts, nonblocking, `mio::event::Source`);
//! - [`echo`]: [`echo::ping`] and [`echo::find_interface`] on control
//!   port 0 (the runtime answers echo requests for the host);
//! - [`wire`]: the EDP frame codec.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod echo;
pub mod socket;
pub mod wire;

pub use link::MacAddr;
pub use socket::{EdpConfig, EdpSocket, EdpStats};
pub use wire::{ETHERTYPE_EDP, ETHERTYPE_ESP};
