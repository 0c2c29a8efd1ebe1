//! ESP sockets that look like `std::net`: [`EspListener`] (`bind`,
//! `accept`) and [`EspStream`] (`connect`, `Read`, `Write`, `shutdown`,
//! timeouts, nonblocking mode, `mio::event::Source`). Addresses are
//! `(interface, MAC, port)`.
//!
//! Every stream and listener is a slot of its process's runtime for the
//! interface (`runtime`): one AF_PACKET socket per process carries
//! every connection, the runtime's table finds each segment's connection
//! by (local port, peer MAC, peer port), falling back to the port's
//! listener (SYNs, and segments of connections not yet accepted). Ports are
//! owned through `runtime::ports` leases (exclusive across processes, released
//! when the process dies); `connect` takes an ephemeral port; an accepted
//! connection shares its listener's lease. Segments that no socket claims
//! draw RST from the runtime's host responder role (`socket::rst`).
//!
//! Progress: the calling thread drives the runtime while it waits (a read,
//! a write into a full buffer, `accept`, `close`), following the stream's
//! wait policy (busy-poll, blocking, adaptive); the runtime's service
//! thread keeps retransmissions, delayed ACKs and closes going while no
//! caller waits, and takes over the link when callers stay away (MPI-style
//! asynchronous progress, see `runtime::service`).

use std::io;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use runtime::Runtime;

use crate::config::EspConfig;
use crate::conn::{Connection, ConnectionError, Error, IsnGenerator};
use crate::wire::ESP_HEADER_LEN;

mod conn;
mod listener;
mod rst;
mod stream;

pub use conn::SlotStats;
pub use listener::EspListener;
pub use stream::EspStream;

/// The process's ISN key (RFC 6528: random per boot; here per process).
pub(crate) fn isn_generator() -> &'static IsnGenerator {
    static G: OnceLock<IsnGenerator> = OnceLock::new();
    G.get_or_init(IsnGenerator::random)
}

/// The ISN clock term: microseconds since the Unix epoch.
pub(crate) fn clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Checks that the runtime's link can carry ESP segments and installs the
/// RST responder on it (once per runtime).
///
/// Errors: `InvalidInput` for an MTU too small for the ESP header.
/// Checks `cfg` against `rt` and returns the protocol configuration with
/// the authentication policy resolved for the runtime's key
/// (`crate::auth::AuthPolicy::check`).
///
/// Errors: `InvalidInput` for an MTU too small, another ethertype, or an
/// authentication policy the runtime cannot serve (a method with a tag
/// and no cluster key).
pub(crate) fn prepare(rt: &Runtime, cfg: &EspConfig) -> io::Result<crate::TransportConfig> {
    if rt.mtu() <= ESP_HEADER_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "link MTU of {} bytes cannot carry the {ESP_HEADER_LEN}-byte ESP header",
                rt.mtu()
            ),
        ));
    }
    if rt.esp_ethertype() != cfg.transport.ethertype {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "runtime carries ESP as ethertype {:#06x}, the stream asks for {:#06x}",
                rt.esp_ethertype(),
                cfg.transport.ethertype
            ),
        ));
    }
    let methods = cfg
        .transport
        .auth
        .check(rt.authenticated())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if !rt.has_esp_responder() {
        serve_resets(rt);
    }
    let mut t = cfg.transport.clone();
    t.auth = crate::auth::AuthPolicy::Methods(methods);
    t.checksum = t.checksum.resolve(rt.frame_integrity());
    Ok(t)
}

/// Installs ESP's RST answer in `rt`'s host responder role: segments to
/// ports no process holds draw RST once `rt` holds the host's ESP control
/// lease (see `runtime::responder`). ESP sockets install it
/// themselves; a host daemon (`clusternetd`) calls it with no socket.
pub fn serve_resets(rt: &Runtime) {
    rt.enable_esp_responder(Box::new(rst::RstResponder {
        ethertype: rt.esp_ethertype(),
    }));
}

/// The I/O error for a connection that died; one that died at the
/// retransmission limit says in what state (what was in flight, the
/// timers), since that is what a user needs to find out why.
pub(crate) fn lost(e: ConnectionError, conn: &Connection) -> io::Error {
    match e {
        ConnectionError::TimedOut | ConnectionError::UserTimeout(_) => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{e} ({conn:?}, {:?})", conn.stats()),
        ),
        e => e.into(),
    }
}

/// The I/O error for a failed connection call ([`lost`] for a dead
/// connection).
pub(crate) fn conn_error(e: Error, conn: &Connection) -> io::Error {
    match e {
        Error::ConnectionLost(c) => lost(c, conn),
        e => e.into(),
    }
}
