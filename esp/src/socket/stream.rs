//! [`EspStream`]: a reliable, ordered, flow-controlled byte stream, a handle
//! on its connection's runtime slot.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use link::Link;
use runtime::protocol::{DemuxKey, DirectRead, SlotId};
use runtime::{Deadline, Runtime, WaitPolicy};

use crate::config::EspConfig;
use crate::conn::{Connection, ConnectionError, Error, Liveness, State, Stats};
use crate::wire::MacAddr;

use super::conn::{ConnSocket, SlotStats};
use super::{clock_us, conn_error, isn_generator, lost, prepare};

/// Options of a stream handle (not protocol state).
#[derive(Debug, Clone, Copy)]
struct Opts {
    nonblocking: bool,
    wait: WaitPolicy,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    read_shut: bool,
}

/// A reliable, ordered, flow-controlled ESP byte stream.
///
/// On an interface: `EspStream::connect` / `EspListener::bind` (need
/// CAP_NET_RAW). Unprivileged, over a `UdpLink` on loopback:
///
/// ```
/// use std::io::{Read, Write};
/// use std::time::Duration;
/// use link::{UdpConfig, UdpLink};
/// use edp::MacAddr;
/// use esp::{EspConfig, EspStream};
///
/// let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
/// let lo = "127.0.0.1:0".parse().unwrap();
/// let mut la = UdpLink::open(&UdpConfig::new(lo, ma))?;
/// let mut lb = UdpLink::open(&UdpConfig::new(lo, mb))?;
/// la.add_peer(mb, lb.local_addr()?)?;
/// lb.add_peer(ma, la.local_addr()?)?;
/// let wait = Some(Duration::from_secs(10));
/// let server = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
///     let mut s = EspStream::accept_link(Box::new(lb), 80, EspConfig::default(), wait)?;
///     let mut got = Vec::new();
///     s.read_to_end(&mut got)?;
///     Ok(got)
/// });
/// let mut c = EspStream::connect_link(Box::new(la), 40000, (mb, 80), EspConfig::default(), wait)?;
/// c.write_all(b"a byte stream")?;
/// c.shutdown(std::net::Shutdown::Write)?;
/// assert_eq!(server.join().unwrap()?, b"a byte stream");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct EspStream {
    rt: Runtime,
    slot: SlotId,
    local: (MacAddr, u16),
    peer: (MacAddr, u16),
    opts: Opts,
}

impl std::fmt::Debug for EspStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EspStream")
            .field("iface", &self.rt.iface())
            .field("local", &self.local)
            .field("peer", &self.peer)
            .field("opts", &self.opts)
            .finish()
    }
}

/// A connection call's result as a wait step: `Blocked` waits, other
/// errors end the call ([`conn_error`]).
fn step<T>(r: Result<T, Error>, conn: &Connection) -> io::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::Blocked) => Ok(None),
        Err(e) => Err(conn_error(e, conn)),
    }
}

impl EspStream {
    /// Connects to `(iface, peer MAC, peer port)` with default options and
    /// waits for the handshake (see [`EspStream::connect_with`]).
    pub fn connect(addr: (&str, MacAddr, u16)) -> io::Result<EspStream> {
        Self::connect_with(addr.0, addr.1, addr.2, EspConfig::default())
    }

    /// Like [`EspStream::connect`], giving up after `timeout`.
    pub fn connect_timeout(addr: (&str, MacAddr, u16), timeout: Duration) -> io::Result<EspStream> {
        Self::connect_timeout_with(addr.0, addr.1, addr.2, EspConfig::default(), timeout)
    }

    /// Connects from an ephemeral port of `iface` to `peer_mac`/`port` with
    /// `cfg` and waits until the connection is established. Without a
    /// timeout the wait ends when the SYN was retransmitted
    /// `max_syn_retransmissions` times (about 5.3 s with the defaults).
    ///
    /// Errors: `ConnectionRefused` when the peer answers RST (no listener);
    /// `TimedOut` when the SYN is never answered; `AddrInUse` when no
    /// ephemeral port is free; `NotFound` for an unknown interface;
    /// `PermissionDenied` naming CAP_NET_RAW and the `setcap` command;
    /// `InvalidInput` for a group MAC or port 0.
    pub fn connect_with(
        iface: &str,
        peer_mac: MacAddr,
        port: u16,
        cfg: EspConfig,
    ) -> io::Result<EspStream> {
        let rt = Runtime::shared(iface, &cfg.runtime_config())?;
        Self::connect_on(&rt, (peer_mac, port), cfg, None)
    }

    /// [`EspStream::connect_with`] with a bound on the handshake time.
    pub fn connect_timeout_with(
        iface: &str,
        peer_mac: MacAddr,
        port: u16,
        cfg: EspConfig,
        timeout: Duration,
    ) -> io::Result<EspStream> {
        let rt = Runtime::shared(iface, &cfg.runtime_config())?;
        Self::connect_on(&rt, (peer_mac, port), cfg, Some(timeout))
    }

    /// Connects over any link (a `SimLink`, a `UdpLink`, a `FaultLink`, ...)
    /// on a runtime of its own, from `local_port` to `peer`, waiting at
    /// most `timeout` (`None` = until the SYN retransmissions are
    /// exhausted).
    ///
    /// Errors: as [`EspStream::connect_with`].
    pub fn connect_link(
        link: Box<dyn Link>,
        local_port: u16,
        peer: (MacAddr, u16),
        cfg: EspConfig,
        timeout: Option<Duration>,
    ) -> io::Result<EspStream> {
        let rt = Runtime::with_link(link, cfg.runtime_config())?;
        Self::connect_from(&rt, local_port, peer, cfg, timeout)
    }

    /// Connects on an existing runtime from an ephemeral port.
    ///
    /// Errors: as [`EspStream::connect_with`].
    pub fn connect_on(
        rt: &Runtime,
        peer: (MacAddr, u16),
        cfg: EspConfig,
        timeout: Option<Duration>,
    ) -> io::Result<EspStream> {
        Self::connect_from(rt, 0, peer, cfg, timeout)
    }

    fn connect_from(
        rt: &Runtime,
        local_port: u16,
        peer: (MacAddr, u16),
        cfg: EspConfig,
        timeout: Option<Duration>,
    ) -> io::Result<EspStream> {
        let (peer_mac, port) = peer;
        if peer_mac.is_group() || port == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ESP connect to {peer_mac} port {port}: need a unicast MAC and a port > 0"),
            ));
        }
        let transport = prepare(rt, &cfg)?;
        let ethertype = cfg.transport.ethertype;
        let (local_port, lease) = rt.take_port(ethertype, local_port)?;
        let now = Instant::now();
        let local = (rt.mac(), local_port);
        let iss = isn_generator().isn(local, peer, clock_us());
        let conn = Connection::connect(&transport, rt.mtu(), local, peer, iss, now);
        let key = DemuxKey::Conn {
            ethertype,
            port: local_port,
            peer: peer_mac,
            peer_port: port,
        };
        let sock = ConnSocket::new(conn, cfg.linger);
        let slot = rt.insert(key, Box::new(sock), lease)?;
        let s = Self::from_slot(rt.clone(), slot, local, peer, &cfg);
        let deadline = Deadline::after(now, timeout);
        let max_syn = cfg.transport.max_syn_retransmissions;
        s.wait(deadline, "connect", |c| {
            if c.is_established() {
                return Ok(Some(()));
            }
            match c.error() {
                Some(ConnectionError::TimedOut) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "ESP connect to {peer_mac} port {port}: no answer to {max_syn} SYN retransmissions"
                    ),
                )),
                Some(ConnectionError::Refused) => Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!(
                        "ESP connect to {peer_mac} port {port}: refused (RST: no listener on that port)"
                    ),
                )),
                Some(e) => Err(e.into()),
                None => Ok(None),
            }
        })?;
        Ok(s)
    }

    pub(crate) fn from_slot(
        rt: Runtime,
        slot: SlotId,
        local: (MacAddr, u16),
        peer: (MacAddr, u16),
        cfg: &EspConfig,
    ) -> EspStream {
        EspStream {
            rt,
            slot,
            local,
            peer,
            opts: Opts {
                nonblocking: false,
                wait: cfg.wait,
                read_timeout: None,
                write_timeout: None,
                read_shut: false,
            },
        }
    }

    /// Drives the runtime until `check` on the connection returns a value
    /// (or fails), per the stream's wait policy, or `deadline` passes.
    fn wait<T>(
        &self,
        deadline: Deadline,
        what: &str,
        mut check: impl FnMut(&mut Connection) -> io::Result<Option<T>>,
    ) -> io::Result<T> {
        self.wait_direct(deadline, what, None, |c, _| check(c))
    }

    /// [`EspStream::wait`] with a reader's buffer on offer to the runtime:
    /// in-order payload that arrives while nothing is buffered is placed
    /// straight into it ([`ConnSocket`]'s `on_frame_direct`), and `check`
    /// sees how much was placed. When bytes were placed, `check` must only
    /// hand them over (take `filled`), not change the connection: no
    /// transmit turn follows it then.
    fn wait_direct<T>(
        &self,
        deadline: Deadline,
        what: &str,
        direct: Option<&mut [u8]>,
        mut check: impl FnMut(&mut Connection, Option<&mut DirectRead<'_>>) -> io::Result<Option<T>>,
    ) -> io::Result<T> {
        let slot = self.slot;
        let deadline = if self.opts.nonblocking {
            Deadline::Now
        } else {
            deadline
        };
        let r = self
            .rt
            .driver()
            .wait(slot, self.opts.wait, deadline, direct, &what, |e, d| {
                let Some(s) = e.socket_mut::<ConnSocket>(slot) else {
                    return Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "ESP stream: connection gone",
                    ));
                };
                // Bytes the runtime placed in the reader's buffer were
                // handled in full by the turn that placed them (window and
                // ACK bookkeeping in the connection, then the runtime's
                // touch, and a transmit turn when the connection owed a
                // frame): handing them over changes nothing,
                // so the reader returns without another transmit turn (and
                // clock read) on its path.
                let placed = d.as_ref().is_some_and(|d| d.filled > 0);
                let r = check(&mut s.conn, d);
                if !placed && !matches!(r, Ok(None)) {
                    // The call changed the connection (data taken, window
                    // opened, bytes queued): send what is due.
                    e.touched(slot, link::time::now())?;
                }
                r
            });
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.rt.driver().rearm_slot(slot);
                Err(e)
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut && !matches!(deadline, Deadline::Now) => {
                // The connection's own death (its user timeout, or the
                // thesis's retransmission limit) is reported as what it is,
                // not as the call's timeout.
                if let Some(dead) = self.with_conn(|c| c.error().map(|ce| lost(ce, c))) {
                    return Err(dead);
                }
                // Say what the connection was doing.
                let state = self.with_conn(|c| format!("{c:?}"));
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("ESP {what}: not done within the timeout ({state})"),
                ))
            }
            r => r,
        }
    }

    /// Runs `f` on the connection (under the runtime's lock) and sends what
    /// it queued.
    fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> T) -> T {
        let slot = self.slot;
        self.rt.with_engine(|e, now| {
            let v = f(&mut e
                .socket_mut::<ConnSocket>(slot)
                .expect("a stream's slot lives as long as its handle")
                .conn);
            let _ = e.touched(slot, now);
            v
        })
    }

    /// The runtime the stream lives in.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Local (interface, MAC, port).
    pub fn local_addr(&self) -> io::Result<(String, MacAddr, u16)> {
        Ok((
            self.rt.iface().unwrap_or_default().to_string(),
            self.local.0,
            self.local.1,
        ))
    }

    /// Peer (MAC, port).
    pub fn peer_addr(&self) -> io::Result<(MacAddr, u16)> {
        Ok(self.peer)
    }

    /// Counters (sent, retransmitted, send errors, received, out of
    /// sequence, dropped, duplicates, ... as the thesis's `esp_stats`).
    pub fn stats(&mut self) -> Stats {
        self.with_conn(|c| c.stats())
    }

    /// Frames the runtime dropped for this stream before the connection saw
    /// them (malformed, group-addressed).
    pub fn slot_stats(&self) -> SlotStats {
        let slot = self.slot;
        self.rt.with_engine_untimed(|e| {
            e.socket::<ConnSocket>(slot)
                .map(|s| s.stats)
                .unwrap_or_default()
        })
    }

    /// The authentication method negotiated in the handshake
    /// (`crate::auth`; `None` before it completed).
    pub fn auth_method(&mut self) -> Option<crate::auth::AuthMethod> {
        self.with_conn(|c| c.auth_method())
    }

    /// Connection state.
    pub fn state(&mut self) -> State {
        self.with_conn(|c| c.state())
    }

    /// Whether the peer answers: [`Liveness::Unresponsive`] once
    /// `max_retransmissions` retransmissions or probes went unanswered
    /// (about a second with the defaults), with the instant the connection
    /// will be declared dead unless the peer answers first (the user
    /// timeout). A `mio` registration is signalled when the suspicion
    /// begins (readiness `UNRESPONSIVE`, whatever the interest); blocking
    /// calls keep waiting (the connection is not dead).
    pub fn liveness(&self) -> Liveness {
        let slot = self.slot;
        self.rt.with_engine_untimed(|e| {
            e.socket::<ConnSocket>(slot)
                .map_or(Liveness::Responsive, |s| s.conn.liveness())
        })
    }

    /// The error that ended the connection, if any (not cleared).
    pub fn take_error(&mut self) -> io::Result<Option<io::Error>> {
        Ok(self.with_conn(|c| c.error()).map(Into::into))
    }

    /// Nonblocking mode: `read`, `write` return `WouldBlock` instead of
    /// waiting (the runtime's service thread keeps timers going).
    pub fn set_nonblocking(&mut self, nonblocking: bool) -> io::Result<()> {
        self.opts.nonblocking = nonblocking;
        Ok(())
    }

    /// How blocking calls wait (busy-poll, blocking, adaptive).
    pub fn set_wait_policy(&mut self, wait: WaitPolicy) {
        self.opts.wait = wait;
    }

    /// Busy-poll mode on or off (off = the default adaptive policy).
    pub fn set_busy_poll(&mut self, on: bool) {
        self.opts.wait = if on {
            WaitPolicy::BusyPoll
        } else {
            WaitPolicy::DEFAULT
        };
    }

    /// Read timeout (`None` = wait forever). Errors: `InvalidInput` for zero.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.opts.read_timeout = edp::socket::checked_timeout(t, "read")?;
        Ok(())
    }

    /// Write timeout (`None` = wait forever). Errors: `InvalidInput` for zero.
    pub fn set_write_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.opts.write_timeout = edp::socket::checked_timeout(t, "write")?;
        Ok(())
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.opts.read_timeout
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> Option<Duration> {
        self.opts.write_timeout
    }

    /// Shuts down reading (later reads return 0), writing (FIN after the
    /// buffered data; later writes fail with `BrokenPipe`) or both.
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.opts.read_shut = true;
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            self.with_conn(|c| c.close());
        }
        Ok(())
    }

    /// Graceful close that waits: sends FIN after the buffered data (as
    /// `shutdown(Write)`), then drives the connection until it is CLOSED —
    /// the peer's FIN received and ours acknowledged, the last ACK sent — or
    /// `timeout` passes. Unlike dropping the stream, it returns only when the
    /// peer has everything, so the process may exit right after (RFC 793
    /// close; there is no TIME_WAIT: if our last ACK is lost, the peer's
    /// own close times out). Data that still arrives stays readable.
    ///
    /// Errors: `TimedOut` naming the connection's state; the connection's
    /// error (reset, retransmission limit).
    pub fn close(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.shutdown(Shutdown::Write)?;
        let nb = std::mem::replace(&mut self.opts.nonblocking, false);
        let r = self.wait(Deadline::from_timeout(timeout), "close", |c| {
            if c.is_finished() {
                return Ok(Some(()));
            }
            match c.error() {
                Some(e) => Err(lost(e, c)),
                None => Ok(None),
            }
        });
        self.opts.nonblocking = nb;
        r
    }

    /// Aborts: sends RST and drops buffered data (SO_LINGER 0).
    pub fn abort(&mut self) -> io::Result<()> {
        self.with_conn(|c| c.abort());
        Ok(())
    }

    /// One nonblocking turn of the runtime: receives pending frames, fires
    /// expired timers, sends what is due.
    pub fn drive(&mut self) -> io::Result<()> {
        self.rt.drive()
    }

    /// Blocks until every byte written so far is acknowledged by the peer,
    /// or `timeout` passes. Errors: `TimedOut`; the connection's error.
    pub fn wait_acked(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let nb = std::mem::replace(&mut self.opts.nonblocking, false);
        let r = self.wait(
            Deadline::from_timeout(timeout),
            "wait for acknowledgements",
            |c| {
                if let Some(e) = c.error() {
                    return Err(lost(e, c));
                }
                Ok((c.send_pending() == 0).then_some(()))
            },
        );
        self.opts.nonblocking = nb;
        r
    }
}

impl Read for EspStream {
    /// Reads received bytes; 0 at the end of the stream (the peer's FIN) or
    /// after `shutdown(Read)`.
    ///
    /// Errors: `WouldBlock` (nonblocking, nothing ready); `TimedOut` (read
    /// timeout); `ConnectionReset`, `TimedOut` (retransmission limit: the
    /// connection is dead), `ConnectionAborted` after `abort`.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.opts.read_shut || buf.is_empty() {
            return Ok(0);
        }
        let deadline = Deadline::from_timeout(self.opts.read_timeout);
        self.wait_direct(deadline, "read", Some(buf), |c, d| {
            let d = d.expect("reader buffer offered");
            if d.filled > 0 {
                // Placed by the runtime straight from the frame.
                return Ok(Some(std::mem::take(&mut d.filled)));
            }
            let r = c.recv(d.buf);
            step(r, c)
        })
    }
}

impl Write for EspStream {
    /// Copies as much of `buf` as the send buffer takes (waiting for space
    /// when blocking) and sends what the peer's window and the congestion
    /// window allow; a write larger than a segment is split into segments.
    ///
    /// Errors: `WouldBlock` (nonblocking, buffer full); `TimedOut` (write
    /// timeout, or the connection died at the retransmission limit);
    /// `BrokenPipe` after `shutdown(Write)`; `ConnectionReset`.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = Deadline::from_timeout(self.opts.write_timeout);
        self.wait(deadline, "write", |c| {
            let r = c.send(buf);
            step(r, c)
        })
    }

    /// Sends what is due now (segments are sent as soon as written; this
    /// does not wait for acknowledgements: see [`EspStream::wait_acked`]).
    fn flush(&mut self) -> io::Result<()> {
        self.with_conn(|_| ());
        Ok(())
    }
}

impl Drop for EspStream {
    /// Graceful close without blocking: the FIN follows the buffered data,
    /// and if the connection is not finished yet it keeps closing in the
    /// runtime (retransmissions, the peer's FIN) until it is CLOSED or
    /// `linger` passes, like the kernel's orphaned TCP sockets; the port
    /// lease is held until then. With `linger` zero the connection is
    /// dropped at once. Lingering ends with the process: a program about to
    /// exit calls [`EspStream::close`] or [`EspStream::wait_acked`] first if
    /// its last bytes matter (the kernel keeps a TCP socket's
    /// retransmissions going after exit; a user-space stack cannot).
    fn drop(&mut self) {
        self.rt.release(self.slot);
    }
}

runtime::slot_source!(impl for EspStream, |s| (s.rt.driver(), s.slot));

#[cfg(test)]
mod tests {
    use super::*;

    fn send<T: Send>() {}

    #[test]
    fn streams_can_move_between_threads() {
        send::<EspStream>();
    }
}
