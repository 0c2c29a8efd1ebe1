//! EDP sockets on simulated ports, for nodes that run a protocol over the
//! runtime (CTP over EDP, the communicator) on the virtual clock.

use std::time::Instant;

use edp::{EdpConfig, EdpSocket};
use runtime::{Progress, RuntimeConfig};

use super::Port;

/// A nonblocking EDP socket bound to EDP port `edp_port` on `port`, whose
/// runtime progresses only when its owner calls it (`Progress::Callers`),
/// so that only the simulation drives the link.
///
/// Panics: if the runtime cannot be made on the port.
pub fn edp_socket(port: Port, edp_port: u16) -> EdpSocket {
    let cfg = EdpConfig {
        runtime: RuntimeConfig {
            progress: Progress::Callers,
            ..RuntimeConfig::default()
        },
        ..EdpConfig::default()
    };
    let mut s = EdpSocket::from_link_with(Box::new(port), edp_port, &cfg)
        .unwrap_or_else(|e| panic!("EDP socket on a sim port: {e}"));
    s.set_nonblocking(true)
        .unwrap_or_else(|e| panic!("nonblocking EDP socket: {e}"));
    s
}

/// The instant the next frame for `socket`'s link is due (due or not): the
/// part of a node's [`Node::poll_at`](super::Node::poll_at) its socket
/// contributes.
pub fn edp_socket_poll_at(socket: &EdpSocket) -> Option<Instant> {
    socket.runtime().with_engine_untimed(|e| e.link().poll_at())
}
