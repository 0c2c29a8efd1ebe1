//! The `comm` crate's communicator (`-m comm-udp`, `-m comm-edp`): MPI-style
//! tag-matched messages over CTP over kernel UDP or over EDP.
//!
//! Each session is a communicator of 2 ranks: the client is rank 0, the
//! server rank 1. Messages go with [`Communicator::send`] (standard mode,
//! MPI 4.0 section 3.2.1) as tag [`DATA_TAG`] and are taken with
//! [`Communicator::recv_into`] by (source rank, tag), so each message pays
//! comm's header, matching, per-peer ordering and flow control on top of
//! CTP (compare `ctp-udp`/`ctp-edp`). comm delivers in send order and
//! reliably, so the stream pattern checks order as for TCP and ESP.
//!
//! Setup, the same addresses as ctp's modes (the client addresses `-R`
//! and `-P`; the server learns the client from its first message), made
//! into a host list before any communicator message: the client sends one
//! bare CTP command [`JOIN_COMMAND`] carrying the server's address as the
//! client addressed it; the server answers [`WELCOME_COMMAND`] carrying the
//! client's address as the server saw it. Both then build the communicator
//! over the same socket with hosts `[client, server]`. The handshake's
//! commands are taken raw before the communicator exists, so none of its
//! messages can be consumed by it (the client sends its first communicator
//! message only after WELCOME arrived; the server only answers). comm's
//! peers connect lazily (thesis ch. 6), so the host list is all it needs.
//!
//! Multi-host patterns (`--hosts N`: 1toN, Nto1, ebb, msgrate) run one
//! netgauge session per pair, hence one 2-rank communicator per pair, not
//! one N-rank communicator.
//!
//! The session ends with [`Communicator::finalize`] on both ends (flush,
//! barrier, flush, linger), so the client's BYE is confirmed before either
//! process exits.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ::comm::control::CONTROL_COMMAND;
use ::comm::wire::COMM_COMMAND;
use ::comm::{CommConfig, CommError, Communicator};
use ::ctp::{CtpSocket, Delivery, EthAddr, Options, Transport};

use super::ctp::{bind_edp, bind_udp_client, bind_udp_server};
use super::{Endpoint, SessionConfig};
use crate::modes::Mode;

/// The client's rank.
pub const CLIENT_RANK: usize = 0;
/// The server's rank.
pub const SERVER_RANK: usize = 1;
/// The tag of every netgauge message (data and control), 0..=`comm::MAX_TAG`.
pub const DATA_TAG: ::comm::Tag = 7;
/// CTP command number of the client's handshake (`"NJ"`, 0..=32767 per the
/// CTP spec; not comm's `0x4d50` or `0x4d43`).
pub const JOIN_COMMAND: u16 = 0x4e4a;
/// CTP command number of the server's handshake answer (`"NW"`).
pub const WELCOME_COMMAND: u16 = 0x4e57;

/// An address in the handshake's payload: text, parsed back on the other
/// end.
pub trait HandshakeAddr: Sized {
    /// The text sent.
    fn to_text(&self) -> String;
    /// Parses [`HandshakeAddr::to_text`]'s text; None if malformed.
    fn from_text(s: &str) -> Option<Self>;
}

impl HandshakeAddr for SocketAddr {
    fn to_text(&self) -> String {
        self.to_string()
    }
    fn from_text(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

/// `MAC/port`.
impl HandshakeAddr for EthAddr {
    fn to_text(&self) -> String {
        self.to_string()
    }
    fn from_text(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

/// One end of a communicator session over transport `T`.
pub struct Comm<T: Transport> {
    /// None once finalized.
    comm: Option<Communicator<T>>,
    /// The other end's rank.
    peer: usize,
}

/// The communicator's tunables: comm's defaults, with blocking calls bounded
/// by the session timeout (`--timeout`) instead of waiting forever, and a
/// rank failed after `--user-timeout` (as its CTP socket's messages; `off`:
/// failed once suspected, the rule before suspicion).
fn comm_config(cfg: &SessionConfig) -> CommConfig {
    let d = CommConfig::default();
    let failure_timeout = match cfg.user_timeout {
        None => d.failure_timeout,
        Some(Some(t)) => Some(t),
        Some(None) => d.suspect_timeout,
    };
    CommConfig {
        wait_timeout: Some(cfg.timeout),
        failure_timeout,
        ..d
    }
}

/// Client: binds an ephemeral port, joins the server at `-R`/`-P` (IP or
/// MAC) as rank 0.
///
/// Errors: those of binding; `TimedOut` when no WELCOME arrives within the
/// session timeout; the CTP error when the JOIN is not confirmed.
pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    match cfg.mode {
        Mode::CommEdp => {
            let sock = bind_edp(cfg, 0)?;
            let peer = (cfg.remote_mac()?, cfg.port);
            Ok(Box::new(Comm::client(sock, peer.into(), cfg)?))
        }
        _ => {
            let (sock, peer) = bind_udp_client(cfg)?;
            Ok(Box::new(Comm::client(sock, peer, cfg)?))
        }
    }
}

/// Server: binds `-P`, waits for one client's JOIN and joins as rank 1.
///
/// Errors: those of binding; `TimedOut` when no JOIN arrives within the
/// session timeout.
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    match cfg.mode {
        Mode::CommEdp => Ok(Box::new(Comm::server(bind_edp(cfg, cfg.port)?, cfg)?)),
        _ => Ok(Box::new(Comm::server(bind_udp_server(cfg)?, cfg)?)),
    }
}

/// Most sources a server in its handshake answers with a restart notice
/// (each once).
const MAX_NOTICED: usize = 64;

/// Takes bare CTP deliveries until `want` accepts one (returning its value),
/// or the session timeout passes. Other commands are skipped (logged); an
/// error delivery fails with `what` named. With `notice` (a server), the
/// communicator traffic of an earlier session (a client of the server
/// process this one replaced) is answered, once per source, with
/// `notice` ([`::comm::control::restart_notice`]): that client's
/// communicator then fails the old server's rank at once instead of
/// taking this process's CTP confirmations for its progress; the notice
/// itself may go unconfirmed (the old client gone) without failing the
/// handshake.
fn wait_handshake<T: Transport, R>(
    sock: &CtpSocket<T>,
    timeout: Duration,
    what: &str,
    notice: Option<&[u8]>,
    mut want: impl FnMut(&::ctp::ReceivedData<T::Addr>) -> Option<io::Result<R>>,
) -> io::Result<R> {
    let deadline = Instant::now() + timeout;
    let mut noticed: Vec<(T::Addr, Option<::ctp::MsgId>)> = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "comm handshake: no {what} within {:.1} s",
                    timeout.as_secs_f64()
                ),
            ));
        }
        let d = sock.recv_delivery(Some(left)).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => io::Error::new(
                io::ErrorKind::TimedOut,
                format!("comm handshake: no {what}: {e}"),
            ),
            _ => e,
        })?;
        match d {
            Delivery::Data(d) => match want(&d) {
                Some(r) => return r,
                None => {
                    tracing::debug!(
                        command = d.command,
                        from = ?d.from,
                        "netgauge comm: skipped a message before the {what}"
                    );
                    let stray = d.command == COMM_COMMAND || d.command == CONTROL_COMMAND;
                    if let Some(n) = notice.filter(|_| stray) {
                        if noticed.len() < MAX_NOTICED && !noticed.iter().any(|x| x.0 == d.from) {
                            tracing::info!(from = ?d.from,
                                "netgauge comm: traffic of an earlier server's session: restart notice");
                            let id = sock.send(CONTROL_COMMAND, d.from, n, Options::NONE).ok();
                            noticed.push((d.from, id));
                        }
                    }
                }
            },
            Delivery::Error(e) if e.msg.is_some() && noticed.iter().any(|x| x.1 == e.msg) => {
                tracing::debug!(error = %e, "netgauge comm: a restart notice went unconfirmed");
            }
            Delivery::Error(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("comm handshake, waiting for the {what}: CTP error delivery: {e} (is the server up?)"),
                ))
            }
        }
    }
}

/// The address text of a handshake payload.
fn parse_addr<A: HandshakeAddr>(data: &[u8], what: &str) -> io::Result<A> {
    std::str::from_utf8(data)
        .ok()
        .and_then(A::from_text)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "comm handshake: malformed address in the {what}: {:?}",
                    String::from_utf8_lossy(data)
                ),
            )
        })
}

fn send_raw<T: Transport>(
    sock: &CtpSocket<T>,
    command: u16,
    to: T::Addr,
    data: &[u8],
) -> io::Result<()> {
    sock.send(command, to, data, Options::NONE)
        .map(|_| ())
        .map_err(|e| io::Error::other(format!("comm handshake: CTP send: {e}")))
}

impl<T: Transport> Comm<T>
where
    T::Addr: HandshakeAddr,
{
    /// Rank 0: JOIN to `server`, WELCOME back, then the communicator.
    fn client(sock: CtpSocket<T>, server: T::Addr, cfg: &SessionConfig) -> io::Result<Self> {
        send_raw(&sock, JOIN_COMMAND, server, server.to_text().as_bytes())?;
        let (me, server_seen) = wait_handshake(&sock, cfg.timeout, "WELCOME", None, |d| {
            (d.command == WELCOME_COMMAND)
                .then(|| parse_addr::<T::Addr>(&d.data, "WELCOME").map(|me| (me, d.from)))
        })?;
        let hosts = vec![me, server_seen];
        tracing::info!(?hosts, "netgauge comm: client joined as rank 0");
        let comm =
            Communicator::new(sock, CLIENT_RANK, hosts, comm_config(cfg)).map_err(comm_error)?;
        Ok(Comm {
            comm: Some(comm),
            peer: SERVER_RANK,
        })
    }

    /// Rank 1: the first JOIN's source becomes rank 0; WELCOME back.
    fn server(sock: CtpSocket<T>, cfg: &SessionConfig) -> io::Result<Self> {
        let notice = ::comm::control::restart_notice(&comm_config(cfg));
        let (client, me) = wait_handshake(&sock, cfg.timeout, "JOIN", Some(&notice), |d| {
            (d.command == JOIN_COMMAND)
                .then(|| parse_addr::<T::Addr>(&d.data, "JOIN").map(|me| (d.from, me)))
        })?;
        send_raw(&sock, WELCOME_COMMAND, client, client.to_text().as_bytes())?;
        let hosts = vec![client, me];
        tracing::info!(?hosts, "netgauge comm: server joined as rank 1");
        let comm =
            Communicator::new(sock, SERVER_RANK, hosts, comm_config(cfg)).map_err(comm_error)?;
        Ok(Comm {
            comm: Some(comm),
            peer: CLIENT_RANK,
        })
    }
}

impl<T: Transport> Comm<T> {
    fn comm(&self) -> io::Result<&Communicator<T>> {
        self.comm.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                "the communicator was finalized",
            )
        })
    }
}

/// A [`CommError`] as the `io::Error` the patterns expect: `TimedOut` for
/// comm's timeout, the transport's own error for I/O, `ConnectionReset` for
/// a failed peer, `InvalidData` for a truncated message.
fn comm_error(e: CommError) -> io::Error {
    let kind = match &e {
        CommError::Io(io) => return io::Error::new(io.kind(), format!("comm: {e}")),
        CommError::TimedOut { .. } => io::ErrorKind::TimedOut,
        CommError::PeerFailed { .. } | CommError::Disconnected { .. } => {
            io::ErrorKind::ConnectionReset
        }
        CommError::Truncated { .. } => io::ErrorKind::InvalidData,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("comm: {e}"))
}

impl<T: Transport> Endpoint for Comm<T> {
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()> {
        self.comm()?
            .send(self.peer, DATA_TAG, buf)
            .map_err(comm_error)
    }

    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let status = self
            .comm()?
            .recv_into(self.peer, DATA_TAG, buf)
            .map_err(comm_error)?;
        if status.len != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "comm message from rank {} carried {} bytes, expected {}",
                    status.source,
                    status.len,
                    buf.len()
                ),
            ));
        }
        Ok(())
    }

    fn finish(&mut self, timeout: Duration, _initiator: bool) -> io::Result<()> {
        match self.comm.take() {
            Some(c) => c.finalize(timeout).map_err(comm_error),
            None => Ok(()),
        }
    }

    fn stats_line(&mut self) -> Option<String> {
        let c = self.comm.as_ref()?;
        Some(format!(
            "comm {:?} ctp {:?} {:?}",
            c.stats(),
            c.socket().stats(),
            c.socket().status()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_addresses_round_trip_and_reject_garbage() {
        let udp: SocketAddr = "198.18.0.2:41555".parse().unwrap();
        assert_eq!(SocketAddr::from_text(&udp.to_text()), Some(udp));
        let v6: SocketAddr = "[fe80::1]:19470".parse().unwrap();
        assert_eq!(SocketAddr::from_text(&v6.to_text()), Some(v6));
        let edp: EthAddr = runtime::EthAddr::new("02:4b:44:00:00:02".parse().unwrap(), 59550);
        assert_eq!(edp.to_text(), "02:4b:44:00:00:02/59550");
        assert_eq!(EthAddr::from_text(&edp.to_text()), Some(edp));
        for bad in ["", "02:4b:44:00:00:02", "02:4b:44:00:00:02/70000", "x/1"] {
            assert_eq!(EthAddr::from_text(bad), None, "{bad}");
        }
        assert!(parse_addr::<EthAddr>(b"\xff/1", "JOIN").is_err());
        assert_eq!(
            parse_addr::<SocketAddr>(b"127.0.0.1:5", "WELCOME").unwrap(),
            "127.0.0.1:5".parse::<SocketAddr>().unwrap()
        );
    }
}
