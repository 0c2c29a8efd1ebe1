//! [`EdpSocket`]: EDP datagram sockets with a `std::net::UdpSocket`-like API.
//!
//! Addresses are `(interface, MAC, port)`. A socket owns its port
//! exclusively across the processes of its network namespace
//! ([`runtime::ports`]) and is a slot of its process's runtime for the
//! interface ([`runtime`]): all sockets of a process share one
//! AF_PACKET socket, whose kernel filter passes only the ports the process
//! owns, and a user-space table finds each datagram's socket.
//!
//! Hot path: no allocation per datagram. A datagram is sent as two
//! iovecs (the 20-byte Ethernet + EDP header and the caller's buffer), as
//! UDP does; a datagram arriving while its reader waits is copied from the
//! RX ring slot straight into the reader's buffer. Datagrams arriving while
//! nobody waits are queued, up to [`EdpConfig::recv_buffer`] bytes (more are
//! dropped and counted, as a full UDP receive buffer drops). Malformed
//! frames, frames for other ports or, once connected, from other peers are
//! counted in [`EdpStats::dropped`].
//!
//! Sockets see frames arriving on their interface, not frames their own
//! host sends (`PACKET_IGNORE_OUTGOING`): two sockets talk across a link
//! (e.g. between network namespaces joined by a veth pair).
//!
//! Waiting follows the socket's [`WaitPolicy`] (busy-poll, blocking,
//! adaptive; see [`runtime::WaitPolicy`]), and the socket is a
//! `mio::event::Source` whose readiness comes from its queue.

use std::borrow::Borrow;
use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use crate::wire::{EdpRepr, EthernetRepr, MacAddr, CONTROL_PORT, EDP_HEADER_LEN, ETH_HEADER_LEN};
use link::Link;
use runtime::ports::PortLease;
use runtime::protocol::{DemuxKey, SlotId};
use runtime::EthAddr;
use runtime::{Deadline, Runtime, RuntimeConfig, WaitPolicy};

mod datagram;
#[cfg(test)]
mod tests;

use datagram::DatagramSocket;
pub use datagram::EdpStats;

/// Datagrams per `sendmmsg` in [`EdpSocket::send_batch`].
pub const SEND_BATCH: usize = runtime::protocol::MAX_BATCH;

/// Default receive queue of a socket, bytes of payload (as a UDP socket's
/// default receive buffer order of magnitude).
pub const DEFAULT_RECV_BUFFER: usize = 4 << 20;

/// Options of [`EdpSocket::bind_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct EdpConfig {
    /// The runtime (link and progress) the socket joins; sockets with equal
    /// runtime configurations on one interface share one packet socket.
    pub runtime: RuntimeConfig,
    /// How blocking calls wait.
    pub wait: WaitPolicy,
    /// Most payload bytes queued for reading.
    pub recv_buffer: usize,
}

impl Default for EdpConfig {
    fn default() -> Self {
        Self {
            runtime: RuntimeConfig::default(),
            wait: WaitPolicy::DEFAULT,
            recv_buffer: DEFAULT_RECV_BUFFER,
        }
    }
}

impl EdpConfig {
    /// This configuration with busy polling (spin instead of sleeping).
    pub fn busy_poll(mut self) -> Self {
        self.wait = WaitPolicy::BusyPoll;
        self
    }
}

/// How a socket built over an arbitrary link holds its port.
#[derive(Debug)]
pub enum Binding {
    /// An exclusive lease from [`runtime::ports::allocate`].
    Lease(PortLease),
    /// A bare port number without cross-process exclusivity (simulations).
    Port(u16),
}

impl From<PortLease> for Binding {
    fn from(l: PortLease) -> Self {
        Binding::Lease(l)
    }
}

impl From<u16> for Binding {
    fn from(p: u16) -> Self {
        Binding::Port(p)
    }
}

/// An EDP datagram socket. See the module documentation.
///
/// On an interface: `EdpSocket::bind("eth0", port)` (needs CAP_NET_RAW).
/// Unprivileged, over a [`UdpLink`](link::UdpLink) on loopback:
///
/// ```
/// use link::{UdpConfig, UdpLink};
/// use edp::{EdpSocket, MacAddr};
///
/// let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
/// let lo = "127.0.0.1:0".parse().unwrap();
/// let mut la = UdpLink::open(&UdpConfig::new(lo, ma))?;
/// let mut lb = UdpLink::open(&UdpConfig::new(lo, mb))?;
/// la.add_peer(mb, lb.local_addr()?)?;
/// lb.add_peer(ma, la.local_addr()?)?;
/// let mut a = EdpSocket::from_link(Box::new(la), 1000)?;
/// let mut b = EdpSocket::from_link(Box::new(lb), 2000)?;
/// b.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
/// a.send_to(b"hello", (mb, 2000))?;
/// let mut buf = [0u8; 64];
/// let (n, from, port) = b.recv_from(&mut buf)?;
/// assert_eq!((&buf[..n], from, port), (&b"hello"[..], ma, 1000));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct EdpSocket {
    rt: Runtime,
    slot: SlotId,
    port: u16,
    ethertype: u16,
    peer: Option<(MacAddr, u16)>,
    nonblocking: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    wait: WaitPolicy,
}

impl std::fmt::Debug for EdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdpSocket")
            .field("iface", &self.rt.iface())
            .field("mac", &self.rt.mac())
            .field("port", &self.port)
            .field("ethertype", &format_args!("{:#06x}", self.ethertype))
            .field("peer", &self.peer)
            .field("nonblocking", &self.nonblocking)
            .field("wait", &self.wait)
            .finish()
    }
}

/// Checks a socket timeout as `std::net` does: `Some(0)` is an
/// `InvalidInput` error naming `which` ("read" or "write"); `None` = wait
/// forever. Shared by the EDP, ESP and CTP sockets.
pub fn checked_timeout(t: Option<Duration>, which: &str) -> io::Result<Option<Duration>> {
    if t == Some(Duration::ZERO) {
        return Err(invalid(format!("{which} timeout must not be zero")));
    }
    Ok(t)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl EdpSocket {
    /// Binds `port` on interface `iface` with default options; port 0 takes
    /// the next free ephemeral port. See [`EdpSocket::bind_with`].
    pub fn bind(addr: (&str, u16)) -> io::Result<Self> {
        Self::bind_with(addr, EdpConfig::default())
    }

    /// Binds `port` on `iface` (0 = next free ephemeral port) with
    /// `config`: takes the port lease and adds the socket to the process's
    /// runtime for the interface (opening it on first use).
    ///
    /// Errors: `AddrInUse` when the port is owned by another socket;
    /// `InvalidInput` for port 0 of a fixed port request that is the
    /// control port; `NotFound` naming an unknown interface;
    /// `PermissionDenied` naming CAP_NET_RAW and the `setcap` command;
    /// socket option errors.
    pub fn bind_with(addr: (&str, u16), config: impl Borrow<EdpConfig>) -> io::Result<Self> {
        let config = config.borrow();
        let rt = Runtime::shared(addr.0, &config.runtime)?;
        Self::bind_on(&rt, addr.1, config)
    }

    /// Binds `port` (0 = ephemeral) on an existing runtime.
    ///
    /// Errors: as [`EdpSocket::bind_with`].
    pub fn bind_on(rt: &Runtime, port: u16, config: &EdpConfig) -> io::Result<Self> {
        let ethertype = rt.edp_ethertype();
        let (port, lease) = rt.take_port(ethertype, port)?;
        Self::insert(rt.clone(), port, lease, config)
    }

    /// Builds a socket over any link (a `SimLink`, a `UdpLink`, a
    /// `FaultLink` wrapping a `PacketLink`, ...), on a runtime of its own.
    /// See [`EdpSocket::from_link_with`].
    pub fn from_link(link: Box<dyn Link>, binding: impl Into<Binding>) -> io::Result<Self> {
        Self::from_link_with(link, binding, &EdpConfig::default())
    }

    /// Builds a socket over `link` on a runtime of its own. With a
    /// [`Binding::Lease`] the port is the lease's; a bare [`Binding::Port`]
    /// gives no cross-process exclusivity.
    ///
    /// Errors: `InvalidInput` for port 0 (control), or a link MTU too small
    /// to carry the EDP header; eventfd errors.
    pub fn from_link_with(
        link: Box<dyn Link>,
        binding: impl Into<Binding>,
        config: &EdpConfig,
    ) -> io::Result<Self> {
        let rt = Runtime::with_link(link, config.runtime.clone())?;
        let (port, lease) = match binding.into() {
            Binding::Lease(l) => (l.port(), Some(l)),
            Binding::Port(p) => (p, None),
        };
        Self::insert(rt, port, lease, config)
    }

    fn insert(
        rt: Runtime,
        port: u16,
        lease: Option<PortLease>,
        config: &EdpConfig,
    ) -> io::Result<Self> {
        if port == CONTROL_PORT {
            return Err(invalid(
                "EDP port 0 is reserved for control messages (echo); bind another port".into(),
            ));
        }
        let mtu = rt.mtu();
        if mtu <= EDP_HEADER_LEN {
            return Err(invalid(format!(
                "link MTU of {mtu} bytes cannot carry the {EDP_HEADER_LEN}-byte EDP header"
            )));
        }
        let ethertype = rt.edp_ethertype();
        let sock = DatagramSocket::new(port, config.recv_buffer);
        let slot = rt.insert(DemuxKey::Port { ethertype, port }, Box::new(sock), lease)?;
        Ok(Self {
            rt,
            slot,
            port,
            ethertype,
            peer: None,
            nonblocking: false,
            read_timeout: None,
            write_timeout: None,
            wait: config.wait,
        })
    }

    /// The runtime this socket lives in.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Largest datagram in bytes: link MTU - 6 (the EDP header). Larger
    /// datagrams are refused with `InvalidInput`, never truncated.
    pub fn mtu(&self) -> usize {
        self.rt.mtu() - EDP_HEADER_LEN
    }

    /// Counters since the socket was created; `kernel_drops` is the
    /// runtime's (one getsockopt(2) per call).
    pub fn stats(&self) -> EdpStats {
        let (mut s, k) = self.rt.with_engine_untimed(|e| {
            (
                e.socket::<DatagramSocket>(self.slot)
                    .map(|d| d.stats)
                    .unwrap_or_default(),
                e.link().kernel_stats(),
            )
        });
        s.kernel_drops = k.map_or(0, |k| k.drops);
        s
    }

    /// `(interface, MAC, port)` of this socket (interface is empty for a
    /// socket over an in-memory link).
    pub fn local_addr(&self) -> io::Result<(String, MacAddr, u16)> {
        Ok((
            self.rt.iface().unwrap_or_default().to_string(),
            self.rt.mac(),
            self.port,
        ))
    }

    /// `(MAC, port)` of the connected peer. Errors: `NotConnected`.
    pub fn peer_addr(&self) -> io::Result<(MacAddr, u16)> {
        self.peer.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "EDP socket is not connected")
        })
    }

    /// The ethertype this socket uses.
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// Fixes the peer: `send` goes to it and `recv` only returns its
    /// datagrams (others are counted as dropped). A group MAC accepts any
    /// sender.
    ///
    /// Errors: `InvalidInput` for port 0.
    pub fn connect(&mut self, mac: MacAddr, port: u16) -> io::Result<()> {
        if port == CONTROL_PORT {
            return Err(invalid("cannot connect to EDP port 0 (control)".into()));
        }
        self.peer = Some((mac, port));
        let slot = self.slot;
        self.rt.with_engine_untimed(|e| {
            if let Some(d) = e.socket_mut::<DatagramSocket>(slot) {
                d.peer = Some((mac, port));
            }
        });
        Ok(())
    }

    /// Nonblocking mode: `recv*` and `send*` return `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&mut self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking = nonblocking;
        Ok(())
    }

    /// How blocking calls wait (busy-poll, blocking, adaptive).
    pub fn set_wait_policy(&mut self, wait: WaitPolicy) {
        self.wait = wait;
    }

    /// Busy-poll mode on or off (off = the default adaptive policy).
    pub fn set_busy_poll(&mut self, on: bool) {
        self.wait = if on {
            WaitPolicy::BusyPoll
        } else {
            WaitPolicy::DEFAULT
        };
    }

    /// Longest a blocking receive waits; `None` = forever. After it, the
    /// receive fails with `TimedOut`. Errors: `InvalidInput` for a zero
    /// duration (as `std::net`).
    pub fn set_read_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.read_timeout = checked_timeout(t, "read")?;
        Ok(())
    }

    /// Current read timeout.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// Longest a blocking send waits for room in the transmit queue; `None` =
    /// forever. After it, the send fails with `TimedOut`.
    pub fn set_write_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.write_timeout = checked_timeout(t, "write")?;
        Ok(())
    }

    fn check_dst(&self, len: usize, port: u16) -> io::Result<()> {
        if len > self.mtu() {
            return Err(invalid(format!(
                "datagram of {len} bytes exceeds the EDP MTU of {} bytes (link MTU {} - {EDP_HEADER_LEN})",
                self.mtu(),
                self.rt.mtu()
            )));
        }
        if port == CONTROL_PORT {
            return Err(invalid(
                "EDP port 0 is reserved for control messages (echo)".into(),
            ));
        }
        Ok(())
    }

    fn header(&self, dst: (MacAddr, u16), len: usize) -> [u8; ETH_HEADER_LEN + EDP_HEADER_LEN] {
        let mut h = [0u8; ETH_HEADER_LEN + EDP_HEADER_LEN];
        EthernetRepr {
            dst: dst.0,
            src: self.rt.mac(),
            ethertype: self.ethertype,
        }
        .emit(&mut h[..ETH_HEADER_LEN]);
        EdpRepr {
            src_port: self.port,
            dst_port: dst.1,
            payload_len: len as u16,
        }
        .emit(&mut h[ETH_HEADER_LEN..]);
        h
    }

    /// Sends one datagram to `dst` (an [`EthAddr`] or a
    /// `(mac, port)` pair); returns `buf.len()`.
    ///
    /// Errors: `InvalidInput` when `buf` is longer than [`EdpSocket::mtu`]
    /// or the port is 0; `WouldBlock` on a nonblocking socket whose
    /// transmit queue is full (also for ENOBUFS: the frame was not sent);
    /// `TimedOut` after the write timeout; link errors.
    pub fn send_to(&mut self, buf: &[u8], dst: impl Into<EthAddr>) -> io::Result<usize> {
        let dst: EthAddr = dst.into();
        let dst = (dst.mac, dst.port);
        self.check_dst(buf.len(), dst.1)?;
        let h = self.header(dst, buf.len());
        let frame = [IoSlice::new(&h), IoSlice::new(buf)];
        self.send_frames(&[&frame])?;
        Ok(buf.len())
    }

    /// Sends to the connected peer. Errors: `NotConnected`, and those of
    /// [`EdpSocket::send_to`].
    pub fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        let peer = self.peer_addr()?;
        self.send_to(buf, peer)
    }

    /// Sends several datagrams to the connected peer with one sendmmsg(2)
    /// (up to [`SEND_BATCH`] per call, each as header + payload iovecs);
    /// returns how many were sent, in order (a blocking socket waits until
    /// at least one is sent).
    ///
    /// Errors: `NotConnected`; `InvalidInput` when any datagram exceeds
    /// [`EdpSocket::mtu`] (nothing is sent); those of [`EdpSocket::send_to`].
    pub fn send_batch(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let peer = self.peer_addr()?;
        for d in datagrams {
            self.check_dst(d.len(), peer.1)?;
        }
        let count = datagrams.len().min(SEND_BATCH);
        let heads: Vec<[u8; ETH_HEADER_LEN + EDP_HEADER_LEN]> = datagrams[..count]
            .iter()
            .map(|d| self.header(peer, d.len()))
            .collect();
        let pieces: Vec<[IoSlice<'_>; 2]> = heads
            .iter()
            .zip(datagrams)
            .map(|(h, d)| [IoSlice::new(h), IoSlice::new(d)])
            .collect();
        let frames: Vec<&[IoSlice<'_>]> = pieces.iter().map(|p| &p[..]).collect();
        self.send_frames(&frames)
    }

    /// Hands `frames` to the runtime's link, waiting for room per the
    /// socket's mode; returns how many went out.
    fn send_frames(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        // Read the clock only once the link pushes back.
        let mut deadline: Option<Option<Instant>> = None;
        let slot = self.slot;
        loop {
            let r = self.rt.with_engine_untimed(|e| {
                let r = e.send_now(frames);
                if let Some(d) = e.socket_mut::<DatagramSocket>(slot) {
                    match &r {
                        Ok(n) => d.stats.sent += *n as u64,
                        Err(err) if !is_full(err) => d.stats.send_errors += 1,
                        Err(_) => {}
                    }
                }
                r
            });
            match r {
                Ok(0) if !frames.is_empty() => {}
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if !is_full(&e) => return Err(e),
                Err(_) => {}
            }
            // The link's queue is full (or the qdisc dropped: ENOBUFS).
            if self.nonblocking {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let deadline = *deadline.get_or_insert_with(|| {
                self.write_timeout
                    .and_then(|t| Instant::now().checked_add(t))
            });
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "EDP send: transmit queue still full at the write timeout",
                ));
            }
            // The queue drains in microseconds.
            std::thread::yield_now();
        }
    }

    /// Receives one datagram into `buf`; returns `(length in bytes, source
    /// MAC, source port)`.
    ///
    /// Errors: `WouldBlock` on a nonblocking socket with nothing to read;
    /// `TimedOut` after the read timeout; `InvalidInput` when the datagram
    /// is longer than `buf` (it is consumed and counted as dropped, never
    /// truncated silently); link errors.
    pub fn recv_from(&mut self, buf: &mut [u8]) -> io::Result<(usize, MacAddr, u16)> {
        let deadline = if self.nonblocking {
            Deadline::Now
        } else {
            Deadline::from_timeout(self.read_timeout)
        };
        let slot = self.slot;
        let mtu = self.mtu();
        let cap = buf.len();
        let port = self.port;
        let r = self.rt.driver().wait(
            slot,
            self.wait,
            deadline,
            Some(buf),
            &format_args!("EDP receive on port {port}"),
            |e, direct| {
                let direct = direct.expect("reader buffer offered");
                if let Some(from) = direct.from {
                    let len = direct.datagram_len;
                    direct.from = None;
                    if let Some(d) = e.socket_mut::<DatagramSocket>(slot) {
                        if len > direct.buf.len() {
                            d.stats.dropped += 1;
                            return Err(too_long(len, cap, mtu));
                        }
                        d.stats.received += 1;
                    }
                    return Ok(Some((len, from.mac, from.port)));
                }
                let Some(d) = e.socket_mut::<DatagramSocket>(slot) else {
                    return Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "EDP socket closed",
                    ));
                };
                let r = d.pop_into(direct.buf);
                if !matches!(r, Ok(None)) && d.queued() == 0 {
                    // The queue just emptied: no longer readable.
                    e.refresh(slot);
                }
                match r {
                    Ok(Some((n, from))) => Ok(Some((n, from.0, from.1))),
                    Ok(None) => Ok(None),
                    Err(len) => Err(too_long(len, cap, mtu)),
                }
            },
        );
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.rt.driver().rearm_slot(slot);
                Err(e)
            }
            r => r,
        }
    }

    /// Sends an echo control message (`payload`, see [`crate::echo`]) to
    /// the control port of `mac`.
    pub(crate) fn send_control(&mut self, payload: &[u8], mac: MacAddr) -> io::Result<()> {
        let h = self.header((mac, CONTROL_PORT), payload.len());
        let frame = [IoSlice::new(&h), IoSlice::new(payload)];
        let nb = std::mem::replace(&mut self.nonblocking, true);
        let r = self.send_frames(&[&frame]).map(|_| ());
        self.nonblocking = nb;
        r
    }

    /// [`EdpSocket::recv_from`] with an explicit deadline (for the pinger).
    pub(crate) fn recv_until(
        &mut self,
        buf: &mut [u8],
        deadline: Deadline,
    ) -> io::Result<(usize, MacAddr, u16)> {
        let (nb, rt) = (self.nonblocking, self.read_timeout);
        self.nonblocking = false;
        let left = match deadline {
            Deadline::At(t) => Some(
                t.saturating_duration_since(Instant::now())
                    .max(Duration::from_micros(1)),
            ),
            Deadline::Within(t) => Some(t.max(Duration::from_micros(1))),
            _ => None,
        };
        self.read_timeout = left;
        let r = self.recv_from(buf);
        self.nonblocking = nb;
        self.read_timeout = rt;
        r
    }

    /// Receives from the connected peer (others are counted as dropped);
    /// returns the length in bytes. Errors: `NotConnected`, and those of
    /// [`EdpSocket::recv_from`].
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.peer_addr()?;
        self.recv_from(buf).map(|(n, _, _)| n)
    }
}

fn too_long(len: usize, cap: usize, mtu: usize) -> io::Error {
    invalid(format!(
        "EDP datagram of {len} bytes does not fit the {cap}-byte buffer; it was dropped \
         (give at least mtu() = {mtu} bytes)"
    ))
}

/// A full transmit queue: `WouldBlock`, or ENOBUFS (the qdisc or device
/// dropped the frame).
fn is_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

impl Drop for EdpSocket {
    fn drop(&mut self) {
        self.rt.release(self.slot);
    }
}

runtime::slot_source!(impl for EdpSocket, |s| (s.rt.driver(), s.slot));
