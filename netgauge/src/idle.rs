//! `--idle-edp N` and `--idle-esp M`: idle sockets beside the measured one.
//!
//! Each netgauge process (client and server) opens N EDP sockets and M ESP
//! listeners on ephemeral ports of its interface before the session and
//! keeps them for the whole session. They use the session's runtime
//! configuration ([`SessionConfig::runtime`]), so they live in the same
//! runtime, and behind the same packet socket and kernel filter, as the
//! measured EDP socket, ESP stream or CTP-over-EDP endpoint: the point is
//! to measure what a large demultiplexing table and filter cost the data
//! path (the first design's per-socket packet sockets took a 64-byte EDP
//! ping-pong from 1.87 to 53.9 us with 1 000 idle sockets, see
//! runtime). For eth, udp and tcp they are other sockets of the host:
//! a packet socket whose filter sees every frame of the interface.

use std::io;

use ::edp::EdpSocket;
use ::esp::socket::EspListener;
use nix::sys::resource::{getrlimit, setrlimit, Resource};

use crate::transport::{self, SessionConfig};

/// Idle sockets each netgauge process opens beside the measured one
/// (`--idle-edp`, `--idle-esp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdleConfig {
    /// Idle EDP sockets (at most [`MAX_IDLE_EDP`]).
    pub edp: usize,
    /// Idle ESP listeners (at most [`MAX_IDLE_ESP`]).
    pub esp: usize,
}

/// Most idle EDP sockets per process (the ephemeral range has 16 384 ports).
pub const MAX_IDLE_EDP: usize = 10_000;
/// Most idle ESP listeners per process.
pub const MAX_IDLE_ESP: usize = 10_000;

/// Descriptors each idle socket may hold (its port lease), and a margin for
/// the rest of the process.
const FDS_PER_SOCKET: u64 = 2;
const FD_MARGIN: u64 = 256;

/// The idle sockets of one process; closed when dropped.
#[derive(Default)]
pub struct IdleSockets {
    edp: Vec<EdpSocket>,
    esp: Vec<EspListener>,
}

impl IdleSockets {
    /// Opens `edp` EDP sockets and `esp` ESP listeners on ephemeral ports
    /// of `cfg`'s interface, in the session's runtime. Raises the soft
    /// limit of open files towards the hard limit when they need it.
    ///
    /// Errors: `InvalidInput` when sockets are asked for without `-I`;
    /// `AddrInUse` when the ephemeral ports run out; the errors of
    /// [`EdpSocket::bind_with`] and [`EspListener::bind_with`] (e.g.
    /// "Too many open files" when the hard limit is too low), each naming
    /// how many were open; `Other` if the sockets did not end up in one
    /// runtime.
    pub fn open(cfg: &SessionConfig, edp: usize, esp: usize) -> io::Result<IdleSockets> {
        let mut idle = IdleSockets::default();
        if edp == 0 && esp == 0 {
            return Ok(idle);
        }
        let iface = cfg.iface.as_deref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "--idle-edp/--idle-esp open sockets on an interface: give -I IFACE",
            )
        })?;
        raise_fd_limit((edp + esp) as u64 * FDS_PER_SOCKET + FD_MARGIN)?;
        for i in 0..edp {
            let s = transport::edp::open_socket(cfg, 0).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("idle EDP socket {} of {edp} on {iface}: {e}", i + 1),
                )
            })?;
            idle.edp.push(s);
        }
        for i in 0..esp {
            let l = EspListener::bind_with(iface, 0, transport::esp::config(cfg)).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("idle ESP listener {} of {esp} on {iface}: {e}", i + 1),
                )
            })?;
            idle.esp.push(l);
        }
        let mut rts = idle
            .edp
            .iter()
            .map(|s| s.runtime())
            .chain(idle.esp.iter().map(|l| l.runtime()));
        if let Some(first) = rts.next() {
            if rts.any(|r| !r.same(first)) {
                return Err(io::Error::other(
                    "the idle sockets did not share one runtime (their configurations differ)",
                ));
            }
        }
        tracing::info!("opened {edp} idle EDP sockets and {esp} idle ESP listeners on {iface}");
        Ok(idle)
    }

    /// How many idle EDP sockets are open.
    pub fn edp(&self) -> usize {
        self.edp.len()
    }

    /// How many idle ESP listeners are open.
    pub fn esp(&self) -> usize {
        self.esp.len()
    }
}

/// Raises the soft RLIMIT_NOFILE to at least `need` (at most the hard
/// limit). A hard limit below `need` is left to the binds to report.
///
/// Errors: those of setrlimit(2), named.
fn raise_fd_limit(need: u64) -> io::Result<()> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft >= need {
        return Ok(());
    }
    let want = need.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, want, hard).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("raising the open-file limit from {soft} to {want}: {e}"),
        )
    })
}
