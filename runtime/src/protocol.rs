//! The implementer's API: what a protocol implements to live in the
//! runtime, and what the runtime gives it. Everything a protocol crate
//! (EDP, ESP, CTP and MAK over EDP, CTP and MAK over UDP) needs beyond the
//! user-facing items at the crate's top is here.
//!
//! **A protocol socket in a slot.** Implement [`Socket`] (five methods
//! make a protocol: [`Socket::on_frame`], [`Socket::on_timeout`],
//! [`Socket::poll_transmit`], [`Socket::poll_timeout`],
//! [`Socket::readiness`]; the rest have defaults) on a sans-IO core, and
//! insert it with [`Runtime::insert`](crate::Runtime::insert) under a
//! [`DemuxKey`] (ethertype and port, or a connection's four-tuple). The
//! runtime parses each received frame once and hands the socket an
//! [`RxFrame`] (Ethernet header, ports, the Ethernet payload) with a
//! [`Cx`] (the time, the interface's MAC and MTU, the frame's
//! authentication verdict); the socket answers by queueing frames into
//! the [`TxQueue`] (headers written into the queue's buffer, payload as a
//! [`GatherRef`] into the socket's own buffer, which [`Socket::gather`]
//! returns). A listener creates connections with [`Cx::spawn`].
//!
//! **A protocol handle.** The user's handle (`EspStream`, `CtpSocket`)
//! reaches its core through a [`Carrier`]: the engine's [`Driver`] (lock,
//! wait, readiness, `mio` registration through [`slot_source!`]) and the
//! slot. [`EthEngine`] is the Ethernet runtime's engine;
//! [`EthEngine::socket_mut`] downcasts a slot to the protocol's type.
//!
//! **A protocol alone on a UDP socket.** Implement [`DatagramCore`] and
//! run it in a [`UdpEngine`]: the same driver, the same waits and
//! deadlines, one kernel UDP socket instead of a slot.
//!
//! **Answering for the host.** An [`UnclaimedHandler`] answers frames of
//! its protocol that no slot claimed (ESP installs its RST answer with
//! [`Runtime::enable_esp_responder`](crate::Runtime::enable_esp_responder);
//! echo on the control port is the runtime's own, [`crate::control`]).
//!
//! Rules: a socket does no I/O and reads no clock; it validates a frame
//! completely before any state changes, counts and drops what is
//! malformed; every queue it keeps is bounded.

pub use crate::addr::EthAddr;
pub use crate::carrier::Carrier;
pub use crate::demux::DemuxKey;
pub use crate::driver::{Driver, Engine, Guard, Inner};
pub use crate::engine::EthEngine;
pub use crate::responder::UnclaimedHandler;
pub use crate::slot::{GatherRef, SlotId};
pub use crate::slot_source;
pub use crate::socket::{ChildEvent, Cx, DirectRead, Ready, RxFrame, Socket, Spawn, Traits};
pub use crate::tx::{TxQueue, MAX_BATCH};
pub use crate::udp::{
    bind_socket, DatagramCore, UdpEngine, UdpEvent, MAX_UDP_PAYLOAD, UDP_SOCKET_BUFFER,
};
