//! CTP, the Commands Transfer Protocol (L. Naumov, CTP v1.2, 2005): reliable
//! commands (messages) with per-packet confirmations, large messages split
//! into packets and reassembled, broadcast, adaptive per-peer timeouts.
//!
//! Runs over UDP (wire-compatible with CTP: the 25-byte little-endian header
//! as the UDP payload) or over EDP (the same header inside EDP datagrams).
//! Wire layout and the rules this implementation follows: PROTOCOL.md.

pub mod deliver;
pub mod endpoint;
pub mod peer;
pub mod receiver;
pub mod sender;
pub mod socket;
pub mod transport;
pub mod wire;

pub use endpoint::{
    Config, Delivery, Endpoint, ErrorInfo, ErrorKind, MsgId, PeerAddr, ReceivedData, SendError,
    Stats, Status, Transmit,
};
pub use sender::Dest;
pub use socket::{CtpConfig, CtpSocket, DriverStats, Handler};
pub use transport::{EdpAddr, EdpTransport, Transport, UdpTransport};
pub use wire::Options;
