//! [`UdpLink`]: our Ethernet frames carried whole inside UDP datagrams
//! between named peers, so EDP, ESP and CTP-over-EDP run without
//! CAP_NET_RAW and across routed networks (the frames' MAC addresses are
//! names looked up in a peer table, not hardware addresses).
//!
//! Each datagram's payload is one frame exactly as on Ethernet (destination
//! MAC, source MAC, ethertype, payload; no FCS). The peer table maps MAC ->
//! UDP socket address: given at construction, grown by the owner through
//! [`UdpLink::peers`] while the link runs inside a runtime, and by first
//! contact as [`UdpConfig::admission`] allows (`udp_peers`). A frame to a
//! unicast MAC goes to that peer's address; a frame to a group or
//! broadcast MAC goes to every peer in the table (a multicast group by
//! unicast replication). On receive, like a NIC's address filter, a
//! datagram is dropped and counted when it comes from an address not in
//! the table that admission refuses, is shorter than an Ethernet header or
//! longer than the largest frame the link receives, carries a source MAC
//! other than its sender's, or is addressed to another MAC (or to a group
//! this link did not join).
//!
//! Transmission and reception are batched with sendmmsg(2) / recvmmsg(2)
//! ([`crate::sys::mmsg`]); the socket is nonblocking and its descriptor is
//! pollable (mio, poll). There is no kernel filter: [`Link::set_filter`]
//! is accepted and every valid frame delivered (the runtime demultiplexes).

use std::io::{self, IoSlice};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;

use nix::sys::socket::MsgFlags;
use rustc_hash::FxHashMap;

use crate::eth::{MacAddr, ETH_HEADER_LEN};
use crate::sys::mmsg::{Mmsg, RecvMeta};
use crate::sys::sockopt;
use crate::udp_peers::{UdpAdmission, UdpPeers, MAX_PEERS};
use crate::Link;

/// Default MTU of a [`UdpLink`]: the Ethernet payload of our frames, bytes
/// (the UDP datagram is 14 bytes longer).
pub const DEFAULT_UDP_LINK_MTU: usize = 1500;
/// Largest UDP payload over IPv4, bytes (65535 - 20 - 8): the largest frame
/// a UDP link can carry.
pub const MAX_UDP_PAYLOAD: usize = 65507;
/// Frames per sendmmsg / recvmmsg call.
pub const UDP_BATCH: usize = 64;
/// Most distinct groups one link joins.
pub const MAX_UDP_GROUPS: usize = 1024;

/// Options of [`UdpLink::open`].
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// Local UDP address to bind (port 0: any free port).
    pub bind: SocketAddr,
    /// This end's MAC address: the source of its frames (unicast).
    pub mac: MacAddr,
    /// The peer table: each peer's MAC and UDP address.
    pub peers: Vec<(MacAddr, SocketAddr)>,
    /// Largest Ethernet payload in bytes ([`DEFAULT_UDP_LINK_MTU`]); frames
    /// are at most `mtu + 14` bytes, which must fit one UDP datagram
    /// ([`MAX_UDP_PAYLOAD`]). Datagrams larger than the path MTU are
    /// fragmented by IP.
    pub mtu: usize,
    /// Largest Ethernet payload accepted on receive, bytes (at least
    /// `mtu`; `None`: `mtu`): peers whose links have a larger MTU (another
    /// interface of the host, loopback) are heard in full.
    pub rx_mtu: Option<usize>,
    /// Requested `SO_RCVBUF` / `SO_SNDBUF` in bytes.
    pub socket_buffer: usize,
    /// Which senders not in the table are admitted on first contact (the
    /// default: none).
    pub admission: UdpAdmission,
}

impl UdpConfig {
    /// A config binding `bind` as `mac`, with no peer yet and the defaults.
    pub fn new(bind: SocketAddr, mac: MacAddr) -> Self {
        Self {
            bind,
            mac,
            peers: Vec::new(),
            mtu: DEFAULT_UDP_LINK_MTU,
            rx_mtu: None,
            socket_buffer: crate::packet::DEFAULT_SOCKET_BUFFER,
            admission: UdpAdmission::default(),
        }
    }
}

/// A deterministic, locally administered unicast MAC that names UDP
/// address `addr` on a [`UdpLink`], so that two ends agree on each other's
/// MAC from the addresses alone (netgauge `--link udp` uses it).
///
/// IPv4 `a.b.c.d:p` becomes `02:b:c:d:p_hi:p_lo`; IPv6 takes the last three
/// bytes of the address the same way. Two addresses get the same MAC only
/// when they agree in port and in those three bytes (for IPv4: differ only
/// in the first octet); a link's peer table refuses such a pair
/// ([`UdpLink::add_peer`]), so a collision is an error, never a misdelivery.
pub fn derived_mac(addr: SocketAddr) -> MacAddr {
    let tail = match addr.ip() {
        std::net::IpAddr::V4(v4) => {
            let o = v4.octets();
            [o[1], o[2], o[3]]
        }
        std::net::IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[13], o[14], o[15]]
        }
    };
    let p = addr.port().to_be_bytes();
    MacAddr([0x02, tail[0], tail[1], tail[2], p[0], p[1]])
}

/// Counters of a [`UdpLink`], in datagrams (frames).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpLinkStats {
    /// Frames sent (a group frame counts once per peer it went to).
    pub sent: u64,
    /// Frames delivered to the caller.
    pub received: u64,
    /// Datagrams from a UDP address not in the peer table that admission
    /// refused (or that found the table full), dropped.
    pub unknown_source: u64,
    /// Senders admitted on first contact (joined the table).
    pub admitted: u64,
    /// Datagrams shorter than an Ethernet header or longer than the
    /// largest frame (truncated), dropped.
    pub malformed: u64,
    /// Datagrams whose source MAC is not their sender's (for a sender not
    /// in the table: not the MAC `derived_mac` gives its address), dropped.
    pub forged: u64,
    /// Frames to another unicast MAC or to a group not joined, dropped.
    pub not_for_us: u64,
    /// Frames refused on send: unicast to a MAC not in the table.
    pub unroutable: u64,
}

/// Receive buffers, allocated on first use.
struct RxBatch {
    mmsg: Mmsg,
    store: Vec<u8>,
    meta: Vec<RecvMeta>,
}

/// A [`Link`] over a UDP socket; see the module docs.
pub struct UdpLink {
    sock: UdpSocket,
    mac: MacAddr,
    mtu: usize,
    /// Largest frame accepted on receive, bytes.
    rx_max: usize,
    admission: UdpAdmission,
    /// The owner's view of the table.
    shared: Arc<UdpPeers>,
    by_mac: FxHashMap<MacAddr, SocketAddr>,
    by_addr: FxHashMap<SocketAddr, MacAddr>,
    /// Every peer's address but our own: where group frames go.
    group_targets: Vec<SocketAddr>,
    groups: FxHashMap<MacAddr, u32>,
    tx: Mmsg,
    rx: Option<RxBatch>,
    /// The last receive found a datagram: datagrams may be coming in a
    /// burst, so this receive takes a batch after its first.
    rx_burst: bool,
    stats: UdpLinkStats,
}

impl std::fmt::Debug for UdpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpLink")
            .field("local", &self.sock.local_addr().ok())
            .field("mac", &self.mac)
            .field("mtu", &self.mtu)
            .field("peers", &self.by_mac.len())
            .field("stats", &self.stats)
            .finish()
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl UdpLink {
    /// Binds the UDP socket of `config` and loads its peer table.
    ///
    /// Errors: `InvalidInput` for a group `mac`, an MTU whose frames do not
    /// fit a UDP datagram, or a bad peer table (see [`UdpLink::add_peer`]);
    /// errors of bind(2) (e.g. `AddrInUse`).
    pub fn open(config: &UdpConfig) -> io::Result<Self> {
        if config.mac.is_group() {
            return Err(invalid(format!(
                "UDP link MAC {} is a group address; give a unicast one",
                config.mac
            )));
        }
        let rx_mtu = config.rx_mtu.unwrap_or(config.mtu).max(config.mtu);
        if rx_mtu + ETH_HEADER_LEN > MAX_UDP_PAYLOAD || config.mtu == 0 {
            return Err(invalid(format!(
                "UDP link MTU {} bytes: frames of mtu + 14 bytes must fit a UDP datagram \
                 ({MAX_UDP_PAYLOAD} bytes), so 1 to {} bytes",
                config.mtu,
                MAX_UDP_PAYLOAD - ETH_HEADER_LEN
            )));
        }
        let sock = UdpSocket::bind(config.bind).map_err(|e| {
            io::Error::new(e.kind(), format!("bind UDP link to {}: {e}", config.bind))
        })?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_fd();
        sockopt::set_buffer(
            fd,
            libc::SO_RCVBUFFORCE,
            libc::SO_RCVBUF,
            config.socket_buffer,
            "SO_RCVBUF",
        )?;
        sockopt::set_buffer(
            fd,
            libc::SO_SNDBUFFORCE,
            libc::SO_SNDBUF,
            config.socket_buffer,
            "SO_SNDBUF",
        )?;
        let mut link = Self {
            sock,
            mac: config.mac,
            mtu: config.mtu,
            rx_max: rx_mtu + ETH_HEADER_LEN,
            admission: config.admission.clone(),
            shared: Arc::new(UdpPeers::default()),
            by_mac: FxHashMap::default(),
            by_addr: FxHashMap::default(),
            group_targets: Vec::new(),
            groups: FxHashMap::default(),
            tx: Mmsg::new(UDP_BATCH, 4 * UDP_BATCH),
            rx: None,
            rx_burst: false,
            stats: UdpLinkStats::default(),
        };
        for &(mac, addr) in &config.peers {
            link.add_peer(mac, addr)?;
        }
        tracing::debug!(local = ?link.sock.local_addr().ok(), mac = %link.mac, peers = link.by_mac.len(), "UDP link open");
        Ok(link)
    }

    /// Adds `mac` at UDP address `addr` to the peer table.
    ///
    /// Errors: `InvalidInput` for a group MAC, a MAC or an address already
    /// in the table, or a table of [`MAX_PEERS`] peers.
    pub fn add_peer(&mut self, mac: MacAddr, addr: SocketAddr) -> io::Result<()> {
        if mac.is_group() {
            return Err(invalid(format!("peer MAC {mac} is a group address")));
        }
        if self.by_mac.len() >= MAX_PEERS {
            return Err(invalid(format!(
                "UDP link peer table is full ({MAX_PEERS} peers)"
            )));
        }
        if self.by_mac.contains_key(&mac) {
            return Err(invalid(format!("peer MAC {mac} is already in the table")));
        }
        if let Some(m) = self.by_addr.get(&addr) {
            return Err(invalid(format!("UDP address {addr} is already peer {m}")));
        }
        self.by_mac.insert(mac, addr);
        self.by_addr.insert(addr, mac);
        if mac != self.mac {
            self.group_targets.push(addr);
        }
        self.shared.joined(mac, addr);
        Ok(())
    }

    /// The owner's handle on the peer table, for peers learned while the
    /// link is inside a runtime (see [`UdpPeers`]).
    pub fn peers(&self) -> Arc<UdpPeers> {
        self.shared.clone()
    }

    /// Adds the peers queued through [`UdpLink::peers`] (one atomic load
    /// when none waits); a refused one is logged and dropped.
    fn take_pending(&mut self) {
        let Some(new) = self.shared.take_pending() else {
            return;
        };
        for (mac, addr) in new {
            if self.by_mac.get(&mac) == Some(&addr) {
                continue;
            }
            if let Err(e) = self.add_peer(mac, addr) {
                tracing::warn!(%mac, %addr, error = %e, "UDP link refused a peer");
            }
        }
    }

    /// The local UDP address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Counters so far.
    pub fn stats(&self) -> UdpLinkStats {
        self.stats
    }

    /// The UDP address of peer `mac`, if in the table.
    pub fn peer(&self, mac: MacAddr) -> Option<SocketAddr> {
        self.by_mac.get(&mac).copied()
    }

    fn check_len(&self, len: usize) -> io::Result<()> {
        if len < ETH_HEADER_LEN || len > self.max_frame() {
            return Err(invalid(format!(
                "frame of {len} bytes: a UDP link carries 14 to {} bytes (MTU {} + 14)",
                self.max_frame(),
                self.mtu
            )));
        }
        Ok(())
    }

    /// The destination MAC of a gathered frame (its first 6 bytes).
    fn dst_of(pieces: &[IoSlice<'_>]) -> MacAddr {
        let mut d = [0u8; 6];
        let mut i = 0;
        for p in pieces {
            for &b in p.iter() {
                if i == 6 {
                    return MacAddr(d);
                }
                d[i] = b;
                i += 1;
            }
        }
        MacAddr(d)
    }

    /// Whether a received frame from `meta.src` is delivered (a sender
    /// not in the table joins it when admitted); counts the reason when
    /// not.
    fn accept(&mut self, frame: &[u8], meta: &RecvMeta) -> bool {
        let Some(from) = meta.src else {
            self.stats.unknown_source += 1;
            return false;
        };
        if meta.truncated || frame.len() < ETH_HEADER_LEN {
            self.stats.malformed += 1;
            tracing::trace!(
                len = frame.len(),
                truncated = meta.truncated,
                "UDP link: malformed frame dropped"
            );
            return false;
        }
        let known = self.by_addr.get(&from).copied();
        if known.is_none() && self.admission.admits_none() {
            self.stats.unknown_source += 1;
            tracing::trace!(%from, "UDP link: datagram from an unknown address dropped");
            return false;
        }
        // A sender not in the table may only use the MAC its address gives.
        let src = known.unwrap_or_else(|| derived_mac(from));
        if frame[6..12] != src.0 {
            self.stats.forged += 1;
            tracing::trace!(%src, "UDP link: frame with another source MAC dropped");
            return false;
        }
        let dst = MacAddr([frame[0], frame[1], frame[2], frame[3], frame[4], frame[5]]);
        let ours = dst == self.mac || dst == MacAddr::BROADCAST || self.groups.contains_key(&dst);
        if !ours {
            self.stats.not_for_us += 1;
            return false;
        }
        if known.is_none() && !self.admit(src, from, frame) {
            return false;
        }
        self.stats.received += 1;
        true
    }

    /// First contact from `from` (MAC `mac`, checked): joins the table
    /// when admission allows and there is room; counted either way.
    fn admit(&mut self, mac: MacAddr, from: SocketAddr, frame: &[u8]) -> bool {
        if !self.admission.admits(from, frame) {
            self.stats.unknown_source += 1;
            tracing::trace!(%from, "UDP link: datagram from an unknown address dropped");
            return false;
        }
        match self.add_peer(mac, from) {
            Ok(()) => {
                self.stats.admitted += 1;
                tracing::debug!(%mac, %from, "UDP link: sender admitted on first contact");
                true
            }
            Err(e) => {
                self.stats.unknown_source += 1;
                tracing::debug!(%from, error = %e, "UDP link: sender admitted, table refused it");
                false
            }
        }
    }

    /// Sends one group frame to every peer; returns whether any copy went.
    fn send_group(&mut self, pieces: &[IoSlice<'_>]) -> io::Result<()> {
        let mut first_err = None;
        let mut any = false;
        let targets = std::mem::take(&mut self.group_targets);
        for chunk in targets.chunks(UDP_BATCH) {
            let msgs: [&[IoSlice<'_>]; UDP_BATCH] = [pieces; UDP_BATCH];
            match self.tx.send(
                self.sock.as_fd(),
                &msgs[..chunk.len()],
                chunk,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(n) => {
                    any |= n > 0;
                    self.stats.sent += n as u64;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.group_targets = targets;
        match first_err {
            Some(e) if !any && !self.group_targets.is_empty() => Err(e),
            _ => Ok(()),
        }
    }
}

impl AsFd for UdpLink {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl AsRawFd for UdpLink {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl Link for UdpLink {
    /// Every datagram carries the UDP checksum (Linux computes it on send
    /// and drops a datagram that fails it on receive, RFC 768).
    fn frame_integrity(&self) -> bool {
        true
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let slice = [IoSlice::new(frame)];
        self.send_batch_vectored(&[&slice]).map(|_| ())
    }

    fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        crate::link::send_batch_as_vectored::<UDP_BATCH, _>(self, frames)
    }

    /// Sends frames in order: runs of unicast frames with one sendmmsg(2)
    /// each, a group frame to every peer. Errors (for the first frame; a
    /// later one ends the batch before it): `InvalidInput` for a frame
    /// outside 14..=`max_frame()` bytes; `AddrNotAvailable` for a unicast
    /// MAC not in the peer table; errors of sendmmsg(2) (`WouldBlock`).
    fn send_batch_vectored(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        self.take_pending();
        let mut total = 0;
        while total < frames.len() {
            let pieces = frames[total];
            let checked = self.check_len(pieces.iter().map(|p| p.len()).sum());
            let dst = Self::dst_of(pieces);
            let step = match checked {
                Err(e) => Err(e),
                Ok(()) if dst.is_group() => self.send_group(pieces).map(|()| 1),
                Ok(()) => {
                    // A run of unicast frames to known peers.
                    let mut dsts = [SocketAddr::from(([0, 0, 0, 0], 0)); UDP_BATCH];
                    let mut n = 0;
                    let mut err = None;
                    while total + n < frames.len() && n < UDP_BATCH {
                        let p = frames[total + n];
                        let d = Self::dst_of(p);
                        if d.is_group() {
                            break;
                        }
                        if let Err(e) = self.check_len(p.iter().map(|x| x.len()).sum()) {
                            err = Some(e);
                            break;
                        }
                        match self.by_mac.get(&d) {
                            Some(a) => dsts[n] = *a,
                            None => {
                                self.stats.unroutable += 1;
                                err = Some(io::Error::new(
                                    io::ErrorKind::AddrNotAvailable,
                                    format!("UDP link: no peer with MAC {d} in the table"),
                                ));
                                break;
                            }
                        }
                        n += 1;
                    }
                    if n == 0 {
                        Err(err.expect("the run stopped on an error"))
                    } else {
                        let r = self.tx.send(
                            self.sock.as_fd(),
                            &frames[total..total + n],
                            &dsts[..n],
                            MsgFlags::MSG_DONTWAIT,
                        );
                        if let Ok(k) = r {
                            self.stats.sent += k as u64;
                            if k < n {
                                return Ok(total + k);
                            }
                        }
                        r
                    }
                }
            };
            match step {
                Ok(n) => total += n,
                Err(e) if total == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(total)
    }

    /// Receives one valid frame (invalid datagrams are dropped and counted
    /// on the way). Errors: `WouldBlock` when none is waiting.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut out = Err(io::Error::from(io::ErrorKind::WouldBlock));
        loop {
            match self.recv_with(1, &mut |f| {
                let n = f.len().min(buf.len());
                buf[..n].copy_from_slice(&f[..n]);
                out = Ok(n);
            }) {
                Ok(1) => return out,
                Ok(_) => continue, // dropped: look at the next datagram
                Err(e) => return Err(e),
            }
        }
    }

    fn recv_batch(&mut self, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
        let max = bufs.len().min(lens.len());
        let mut i = 0;
        self.recv_with(max, &mut |f| {
            let n = f.len().min(bufs[i].len());
            bufs[i][..n].copy_from_slice(&f[..n]);
            lens[i] = n;
            i += 1;
        })?;
        if i == 0 && max > 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(i)
    }

    /// Receives up to `min(max, 64)` datagrams into the link's buffers;
    /// valid frames are handed to `f`, invalid ones counted and dropped
    /// (so the call may return 0).
    ///
    /// After a receive that found nothing, the first datagram comes with
    /// one recvfrom(2) and ends the call: a lone datagram (a ping-pong's)
    /// costs the kernel's cheaper single receive and no second, empty
    /// attempt. After one that found some, datagrams may be coming in a
    /// burst: one recvmmsg(2) takes a batch. The same rule as the runtime's
    /// UDP engine (`runtime::udp`, docs/measurements/issue37-house.txt).
    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        self.take_pending();
        if max == 0 {
            return Ok(0);
        }
        // One byte more than the largest frame: a longer datagram shows as
        // truncated instead of passing as a maximal frame.
        let slot = self.rx_max + 1;
        let n = if self.rx_burst { max.min(UDP_BATCH) } else { 1 };
        let mut rx = self.rx.take().unwrap_or_else(|| RxBatch {
            mmsg: Mmsg::new(UDP_BATCH, UDP_BATCH),
            store: vec![0u8; UDP_BATCH * slot],
            meta: vec![RecvMeta::default(); UDP_BATCH],
        });
        let r = if n == 1 {
            self.sock
                .recv_from(&mut rx.store[..slot])
                .map(|(len, from)| {
                    rx.meta[0] = RecvMeta {
                        len,
                        src: Some(from),
                        truncated: false,
                    };
                    1
                })
        } else {
            rx.mmsg.recv_slots(
                self.sock.as_fd(),
                &mut rx.store[..n * slot],
                slot,
                &mut rx.meta[..n],
                MsgFlags::MSG_DONTWAIT,
            )
        };
        self.rx_burst = matches!(r, Ok(k) if k > 0);
        let mut seen = 0;
        if let Ok(r) = r {
            for i in 0..r {
                let mut m = rx.meta[i];
                m.truncated |= m.len == slot;
                let frame = &rx.store[i * slot..][..m.len];
                if self.accept(frame, &m) {
                    f(frame);
                    seen += 1;
                }
            }
        }
        self.rx = Some(rx);
        r.map(|_| seen)
    }

    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        if !group.is_group() {
            return Err(invalid(format!("{group} is not an Ethernet group address")));
        }
        if !self.groups.contains_key(&group) && self.groups.len() >= MAX_UDP_GROUPS {
            return Err(io::Error::other(format!(
                "UDP link is already in {MAX_UDP_GROUPS} groups (the limit)"
            )));
        }
        *self.groups.entry(group).or_insert(0) += 1;
        Ok(())
    }

    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        match self.groups.get_mut(&group) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.groups.remove(&group);
            }
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("UDP link is not a member of {group}"),
                ))
            }
        }
        Ok(())
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn max_rx_frame(&self) -> usize {
        self.rx_max
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.sock.as_raw_fd())
    }

    /// The socket: a runtime sleeps in ppoll(2) on it (without it, the
    /// runtime took the link for an in-memory one and slept in 50 us steps,
    /// so a blocking wait cost up to 100 us per round trip).
    fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.sock.as_fd())
    }
}

#[cfg(test)]
#[path = "udp_tests.rs"]
mod tests;
