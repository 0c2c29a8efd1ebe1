//! CTP commands (`-m ctp-udp`, `-m ctp-edp`): one command per message, each
//! confirmed by the receiver. The server echoes each command back with the
//! same command number; the client sends data as command [`DATA_COMMAND`].

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use ::ctp::{
    CtpConfig, CtpSocket, Delivery, EdpTransport, ErrorType, Options, Transport, UdpTransport,
};

use super::{Endpoint, SessionConfig};
use crate::modes::Mode;

/// Command number of the client's messages (0..=32767, CTP spec).
pub const DATA_COMMAND: u16 = 7;

/// One end of a CTP session over transport `T`.
pub struct Ctp<T: Transport> {
    sock: CtpSocket<T>,
    /// The other end; the server learns it from the first command.
    peer: Option<T::Addr>,
    /// Command number to send with: the client's, or the last one received.
    command: u16,
    timeout: Duration,
    /// Data deliveries taken while a send looked for errors, in order.
    pending: VecDeque<Delivery<T::Addr>>,
    /// Sends made (errors are looked for every [`ERROR_CHECK`] sends).
    sends: u64,
}

/// A sender looks for error deliveries once per this many sends (a look
/// takes the runtime's lock; a ping-pong finds its errors in `recv_msg`),
/// and after every send that waited for room in the storage (failures
/// may have made that room: `CtpSocket::sends_waited`).
const ERROR_CHECK: u64 = 64;

/// The CTP socket configuration of a session (wait policy, runtime);
/// also the comm modes' (`transport/comm.rs`).
pub(crate) fn config(cfg: &SessionConfig) -> CtpConfig {
    let mut c = CtpConfig {
        wait: cfg.wait(),
        runtime: cfg.runtime(),
        ..CtpConfig::default()
    };
    if let Some(u) = cfg.user_timeout {
        c.protocol.user_timeout = u;
    }
    // A send waiting for room in a full storage is progress waited for.
    c.send_timeout = Some(cfg.timeout);
    c
}

/// A CTP socket over EDP at `port` (0: ephemeral) in the session's runtime.
pub(crate) fn bind_edp(cfg: &SessionConfig, port: u16) -> io::Result<CtpSocket<EdpTransport>> {
    CtpSocket::bind_on(&cfg.open_runtime()?, port, config(cfg))
}

/// A client's CTP socket over UDP on an ephemeral port of `-R`'s address
/// family, and the server's address (`-R`, `-P`).
pub(crate) fn bind_udp_client(
    cfg: &SessionConfig,
) -> io::Result<(CtpSocket<UdpTransport>, SocketAddr)> {
    let ip = cfg.remote_ip()?;
    let bind: SocketAddr = if ip.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        "[::]:0".parse().expect("valid address")
    };
    Ok((
        CtpSocket::bind_udp(bind, config(cfg))?,
        SocketAddr::new(ip, cfg.port),
    ))
}

/// A server's CTP socket over UDP at `-P`.
pub(crate) fn bind_udp_server(cfg: &SessionConfig) -> io::Result<CtpSocket<UdpTransport>> {
    CtpSocket::bind_udp(SocketAddr::from(([0, 0, 0, 0], cfg.port)), config(cfg))
}

/// Client: binds an ephemeral port and addresses `-R` (IP or MAC).
pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    match cfg.mode {
        Mode::CtpEdp => {
            let sock = bind_edp(cfg, 0)?;
            let peer = (cfg.remote_mac()?, cfg.port);
            Ok(Box::new(Ctp::new(sock, Some(peer.into()), cfg)))
        }
        _ => {
            let (sock, peer) = bind_udp_client(cfg)?;
            Ok(Box::new(Ctp::new(sock, Some(peer), cfg)))
        }
    }
}

/// Server: binds `-P`; the first command's source becomes the peer.
pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    match cfg.mode {
        Mode::CtpEdp => Ok(Box::new(Ctp::new(bind_edp(cfg, cfg.port)?, None, cfg))),
        _ => Ok(Box::new(Ctp::new(bind_udp_server(cfg)?, None, cfg))),
    }
}

impl<T: Transport> Ctp<T> {
    fn new(sock: CtpSocket<T>, peer: Option<T::Addr>, cfg: &SessionConfig) -> Self {
        Ctp {
            sock,
            peer,
            command: DATA_COMMAND,
            timeout: cfg.timeout,
            pending: VecDeque::new(),
            sends: 0,
        }
    }

    /// Takes the deliveries waiting now: an error ends the session (a
    /// message not confirmed by the user timeout: the peer is dead), an
    /// `Unresponsive` one is logged (suspected, not dead), data is kept for
    /// `recv_msg`.
    fn check_errors(&mut self) -> io::Result<()> {
        while let Some(d) = self.sock.try_recv_delivery() {
            match d {
                Delivery::Error(e) if e.kind == ErrorType::Unresponsive => {
                    tracing::info!("CTP: {e}");
                }
                Delivery::Error(e) => {
                    return Err(io::Error::other(format!("CTP error delivery: {e}")))
                }
                d => self.pending.push_back(d),
            }
        }
        Ok(())
    }
}

impl<T: Transport> Endpoint for Ctp<T> {
    fn send_msg(&mut self, buf: &[u8]) -> io::Result<()> {
        let peer = self.peer.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "CTP server has no client yet")
        })?;
        self.sends += 1;
        if self.sends.is_multiple_of(ERROR_CHECK) {
            self.check_errors()?;
        }
        // A failed message leaves the storage (DelAfterError), so a send
        // waiting for room returns, and its failure is reported at once.
        // The socket's count of sends that waited, not the clock: two clock
        // reads per send were 40-50 ns of every measured half round trip.
        let waited = self.sock.sends_waited();
        self.sock
            .send(self.command, peer, buf, Options::DEL_AFTER_ERROR)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("CTP send: {e}")))?;
        if self.sock.sends_waited() != waited {
            self.check_errors()?;
        }
        Ok(())
    }

    fn recv_msg(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let d = loop {
            if let Some(d) = self.pending.pop_front() {
                break d;
            }
            match self.sock.recv_delivery(Some(self.timeout))? {
                // Suspected, not dead: the messages are resent until the
                // user timeout (`-v` shows the protocol's own event).
                Delivery::Error(e) if e.kind == ErrorType::Unresponsive => {
                    tracing::info!("CTP: {e}");
                }
                d => break d,
            }
        };
        match d {
            Delivery::Data(d) => {
                if d.data.len() != buf.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "CTP command {} carried {} bytes, expected {}",
                            d.command,
                            d.data.len(),
                            buf.len()
                        ),
                    ));
                }
                buf.copy_from_slice(&d.data);
                if self.peer.is_none() {
                    self.peer = Some(d.from);
                }
                self.command = d.command;
                Ok(())
            }
            Delivery::Error(e) => Err(io::Error::other(format!("CTP error delivery: {e}"))),
        }
    }

    fn unordered(&self) -> bool {
        true
    }

    fn stats_line(&mut self) -> Option<String> {
        Some(format!(
            "ctp {:?} {:?}",
            self.sock.stats(),
            self.sock.status()
        ))
    }
}
