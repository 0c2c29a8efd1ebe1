//! CTP, the Commands Transfer Protocol (L. Naumov, CTP v1.2, 2005): reliable
//! commands (messages) with per-packet confirmations, large messages split
//! into packets and reassembled, broadcast, adaptive per-peer timeouts.
//!
//! Runs over UDP (wire-compatible with CTP: the 25-byte little-endian header
//! as the UDP payload) or over EDP (the same header inside EDP datagrams).
//! Wire layout and the rules this implementation follows: PROTOCOL.md.
//!
//! Layers:
//! - [`wire`]: the header codec (checked view + `Repr`);
//! - `id`: what the endpoint and its storages share ([`MsgId`],
//!   [`PeerAddr`]);
//! - `peer`: received-id lists ([`RecvIdList`]) and send timing per session;
//! - `sender` / `receiver`: the sent-commands and large-commands storages;
//! - `puller` and [`buf`]: receiver-driven transfers of offered messages
//!   (beyond the spec: PROTOCOL.md "Pulled messages"): the pulls storage,
//!   and the application buffers parts are sent from and placed into;
//! - [`Endpoint`]: the sans-IO core (`handle_datagram(now, from, bytes)`,
//!   `handle_timeout(now)`, `poll_transmit` / `poll_transmit_gather`,
//!   `poll_delivery`, `poll_timeout`), split by concept under `endpoint/`;
//! - [`socket`]: [`CtpSocket`] on a [`Transport`]: [`EdpTransport`] (a slot
//!   of the process's I/O runtime, `runtime`) or [`UdpTransport`] (a
//!   kernel UDP socket), both driven by `runtime::driver`;
//! - [`deliver`]: the bounded deliverer thread pool.
//!
//! ```no_run
//! use std::time::Duration;
//! use ctp::{CtpConfig, CtpSocket, Delivery, Options};
//! # fn main() -> std::io::Result<()> {
//! let a = CtpSocket::bind_udp("127.0.0.1:1515", CtpConfig::default())?;
//! let b: std::net::SocketAddr = "127.0.0.1:1516".parse().unwrap();
//! a.send(7, b, b"start the computation", Options::NONE).unwrap();
//! match a.recv_delivery(Some(Duration::from_secs(1)))? {
//!     Delivery::Data(d) => println!("command {} from {:?}: {} bytes", d.command, d.from, d.size),
//!     Delivery::Error(e) => eprintln!("{e}"),
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod buf;
pub mod deliver;
pub(crate) mod endpoint;
pub(crate) mod id;
pub(crate) mod peer;
pub(crate) mod pool;
pub(crate) mod puller;
pub(crate) mod receiver;
pub(crate) mod sender;
pub mod socket;
pub mod wire;

pub use buf::{Grow, RecvBuf, SendBuf, Tail};
pub use endpoint::{
    Config, Delivery, Endpoint, ErrorInfo, ErrorType, GatherTransmit, MsgId, Offer, PayloadRef,
    PeerAddr, Pulled, ReceivedData, SendError, Stats, StorageSizes, Transmit, MAX_INLINE_LEN,
    MAX_PARTS_PER_REQUEST, MAX_PEER_DATA_SIZES,
};
pub use peer::{IdStatus, RecvIdList};
pub use pool::MIN_POOLED;
pub use puller::{PullId, MAX_RANGES};
pub use sender::Dest;
pub use socket::{
    Carrier, CtpConfig, CtpIoStats, CtpSocket, EdpTransport, EthAddr, Handler, Transport,
    UdpTransport, UpperLayer,
};
pub use wire::Options;
