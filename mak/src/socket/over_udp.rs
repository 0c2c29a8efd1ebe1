//! MAK over UDP: the MAK frame is the payload of a UDP datagram sent to an
//! IPv4 multicast group (DATA, MAK's NAKs) or to one member's `(IP, port)`
//! (ACKs, iterative DATA, NAK-baseline NAKs), as the paper implemented it
//! (§4: "采用不可靠的 UDP 协议"). One kernel UDP socket per member, bound to
//! the group's port, member of the group on this member's interface
//! (`IP_ADD_MEMBERSHIP`), `IP_MULTICAST_IF` that interface,
//! `IP_MULTICAST_LOOP` off (our own DATA is not handed back),
//! `IP_MULTICAST_ALL` off (only the groups this socket joined), a TTL.
//! Datagrams move in recvmmsg/sendmmsg batches; the socket and the member
//! form an engine driven by the workspace's one driver
//! (`edp::runtime::driver`), as CTP's UDP engine.

use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use edp::runtime::{DirectRead, Driver, Engine, Progress, Ready, SlotId};
use edp::sys::mmsg::{Mmsg, MsgFlags, RecvMeta};
use socket2::{Domain, Protocol, Socket, Type};

use super::core::GroupCore;
use super::{Carrier, GroupSpec, MakConfig, MakSocket};
use crate::member::Dest;

/// Default UDP socket buffers in bytes (capped by `net.core.rmem_max` /
/// `wmem_max`).
pub const UDP_SOCKET_BUFFER: usize = 4 << 20;

/// IPv4 (20) and UDP (8) header bytes inside the interface MTU.
const IP_UDP_HEADERS: usize = 28;

/// Datagrams per recvmmsg(2) / sendmmsg(2).
const BATCH: usize = 64;

/// Where a group's frames go over UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpGroup {
    /// The IPv4 multicast group and the port every member binds.
    pub addr: SocketAddrV4,
}

impl UdpGroup {
    /// Group address `ip` (224.0.0.0/4), port `port`.
    pub fn new(ip: Ipv4Addr, port: u16) -> Self {
        Self {
            addr: SocketAddrV4::new(ip, port),
        }
    }
}

/// The UDP engine: a socket and a member.
pub struct UdpEngine {
    sock: UdpSocket,
    pub(crate) core: GroupCore<SocketAddr>,
    group: SocketAddr,
    mmsg: Mmsg,
    rx: Vec<u8>,
    rx_meta: Vec<RecvMeta>,
    /// Room per datagram in `rx` and `tx`.
    slot: usize,
    /// Largest MAK frame.
    frame: usize,
    tx: Vec<u8>,
    tx_len: Vec<usize>,
    tx_dst: Vec<SocketAddr>,
    /// Frames `tx_sent..tx_len.len()` wait for room in the socket.
    tx_sent: usize,
    ready: Ready,
    changed: bool,
}

impl std::fmt::Debug for UdpEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpEngine")
            .field("local", &self.sock.local_addr().ok())
            .field("group", &self.group)
            .field("core", &self.core)
            .finish()
    }
}

impl UdpEngine {
    /// Sends the frames waiting, then what the member has, in batches,
    /// until the member has nothing or the socket is full.
    fn transmit(&mut self, now: Instant) {
        loop {
            if self.tx_sent == self.tx_len.len() {
                self.tx_len.clear();
                self.tx_dst.clear();
                self.tx_sent = 0;
                while self.tx_len.len() < BATCH {
                    let i = self.tx_len.len();
                    let buf = &mut self.tx[i * self.slot..][..self.frame];
                    let Some(t) = self.core.poll_transmit(now, buf) else {
                        break;
                    };
                    self.tx_len.push(t.len);
                    self.tx_dst.push(match t.dest {
                        Dest::Group => self.group,
                        Dest::Member(a) => a,
                    });
                }
                if self.tx_len.is_empty() {
                    return;
                }
            }
            let (from, to) = (self.tx_sent, self.tx_len.len());
            let pieces: Vec<[IoSlice<'_>; 1]> = (from..to)
                .map(|i| [IoSlice::new(&self.tx[i * self.slot..][..self.tx_len[i]])])
                .collect();
            let msgs: Vec<&[IoSlice<'_>]> = pieces.iter().map(|p| &p[..]).collect();
            let r = self.mmsg.send(
                self.sock.as_fd(),
                &msgs,
                &self.tx_dst[from..to],
                MsgFlags::MSG_DONTWAIT,
            );
            match r {
                Ok(n) => {
                    self.tx_sent += n;
                    if self.tx_sent < to {
                        // The socket's queue is full: the rest waits.
                        self.core.stats.send_blocked += 1;
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.core.stats.send_blocked += 1;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // An ICMP error of an earlier unicast (a member gone:
                    // ECONNREFUSED) or a refused datagram: skip the first
                    // frame, the protocol recovers it.
                    self.core.stats.send_errors += 1;
                    tracing::debug!(error = %e, dst = %self.tx_dst[from], "MAK/UDP: send failed");
                    self.tx_sent += 1;
                }
            }
        }
    }

    fn update_ready(&mut self) {
        let r = self.core.readiness();
        if r != self.ready {
            self.ready = r;
            self.changed = true;
        }
    }

    fn receive(&mut self, now: Instant) -> usize {
        let r = self.mmsg.recv_slots(
            self.sock.as_fd(),
            &mut self.rx,
            self.slot,
            &mut self.rx_meta,
            MsgFlags::MSG_DONTWAIT,
        );
        let n = match r {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            Err(e) => {
                // ICMP errors (port unreachable) surface here; they are not
                // fatal for a connectionless socket.
                self.core.stats.recv_errors += 1;
                tracing::debug!(error = %e, "MAK/UDP: receive error");
                0
            }
        };
        for i in 0..n {
            let m = self.rx_meta[i];
            match m.src {
                Some(from) if !m.truncated => {
                    let bytes = &self.rx[i * self.slot..][..m.len];
                    self.core.on_frame(now, from, bytes);
                }
                _ => self.core.stats.malformed += 1,
            }
        }
        n
    }
}

impl Engine for UdpEngine {
    fn poll(
        &mut self,
        now: Instant,
        _direct: Option<(SlotId, &mut DirectRead<'_>)>,
    ) -> io::Result<usize> {
        let got = self.receive(now);
        self.core.handle_timeout(now);
        self.transmit(now);
        self.update_ready();
        Ok(got)
    }

    fn on_deadline(&mut self, now: Instant) -> io::Result<()> {
        self.core.handle_timeout(now);
        self.transmit(now);
        self.update_ready();
        Ok(())
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    fn before_sleep(&mut self, _slot: Option<SlotId>, _now: Instant) -> io::Result<()> {
        Ok(())
    }

    fn rx_ready(&self) -> Option<bool> {
        None
    }

    fn drain_changed(&mut self, f: &mut dyn FnMut(SlotId, Ready)) {
        if std::mem::take(&mut self.changed) {
            f(SlotId::FIRST, self.ready);
        }
    }

    fn readiness(&self, _slot: SlotId) -> Ready {
        self.core.readiness()
    }

    fn has_lingering(&self) -> bool {
        false
    }
}

/// MAK over a kernel UDP socket.
#[derive(Debug)]
pub struct UdpCarrier {
    driver: Arc<Driver<UdpEngine>>,
    local: SocketAddr,
    group: UdpGroup,
}

impl UdpCarrier {
    /// The socket's bound address (the group's port on every interface).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The group address.
    pub fn group(&self) -> UdpGroup {
        self.group
    }
}

impl Carrier for UdpCarrier {
    type Addr = SocketAddr;
    type Engine = UdpEngine;

    fn driver(&self) -> &Arc<Driver<UdpEngine>> {
        &self.driver
    }
    fn slot(&self) -> SlotId {
        SlotId::FIRST
    }
    fn core(e: &mut UdpEngine, _slot: SlotId) -> Option<&mut GroupCore<SocketAddr>> {
        Some(&mut e.core)
    }
    fn touched(e: &mut UdpEngine, _slot: SlotId, now: Instant) -> io::Result<()> {
        e.transmit(now);
        e.update_ready();
        Ok(())
    }
    fn local_name(&self) -> String {
        format!("mak/udp {} group {}", self.local, self.group.addr)
    }
    fn release(&self) {
        // The socket closes with the engine (leaving the group): flush
        // before dropping a sender.
    }
}

/// The interface holding IPv4 address `ip` in this network namespace, and
/// its MTU.
fn interface_of(ip: Ipv4Addr) -> io::Result<(String, usize)> {
    let addrs =
        nix::ifaddrs::getifaddrs().map_err(|e| io::Error::other(format!("getifaddrs: {e}")))?;
    for a in addrs {
        let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) else {
            continue;
        };
        if sin.ip() == ip {
            let info = edp::iface::lookup(&a.interface_name)?;
            return Ok((a.interface_name, info.mtu));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no interface of this network namespace has the address {ip} (see `ip addr`)"),
    ))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl MakSocket<UdpCarrier> {
    /// Joins IPv4 multicast group `group` as the member `spec` describes:
    /// binds the group's port, joins on the interface that holds this
    /// member's address (its entry in `spec`).
    ///
    /// Errors: `InvalidInput` for a group address outside 224.0.0.0/4, a
    /// member that is not an IPv4 address at the group's port, an invalid
    /// spec, protocol configuration or link fault; `NotFound` when no
    /// interface holds this member's address; socket errors (`AddrInUse`
    /// for a port taken in this namespace).
    pub fn bind_udp(
        group: UdpGroup,
        spec: GroupSpec<SocketAddr>,
        cfg: MakConfig,
    ) -> io::Result<Self> {
        if !group.addr.ip().is_multicast() {
            return Err(invalid(format!(
                "MAK group address {} is not an IPv4 multicast address (224.0.0.0/4; e.g. 239.77.65.75)",
                group.addr.ip()
            )));
        }
        spec.validate()?;
        for p in &spec.members {
            if !p.addr.is_ipv4() || p.addr.port() != group.addr.port() {
                return Err(invalid(format!(
                    "MAK member {} ({}) is at {}: members must be IPv4 addresses at the group's port {}",
                    p.id.0,
                    p.name,
                    p.addr,
                    group.addr.port()
                )));
            }
        }
        let me = spec.me_peer().expect("validated");
        let IpAddr::V4(local_ip) = me.addr.ip() else {
            unreachable!("checked IPv4")
        };
        let (iface, mtu) = interface_of(local_ip)?;
        let protocol = cfg.protocol_for(
            mtu.saturating_sub(IP_UDP_HEADERS).min(65507),
            &format!("UDP on {iface}"),
        )?;
        let core = GroupCore::new(&spec, &protocol, cfg.seed(), cfg.link_fault.as_ref())?;

        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        // Best effort: the kernel caps these at rmem_max / wmem_max.
        let _ = s.set_recv_buffer_size(UDP_SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(UDP_SOCKET_BUFFER);
        s.set_nonblocking(true)?;
        s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, group.addr.port()).into())
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("MAK/UDP bind of port {}: {e}", group.addr.port()),
                )
            })?;
        s.join_multicast_v4(group.addr.ip(), &local_ip)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "IP_ADD_MEMBERSHIP {} on {iface} ({local_ip}): {e}",
                        group.addr.ip()
                    ),
                )
            })?;
        s.set_multicast_if_v4(&local_ip)?;
        s.set_multicast_loop_v4(false)?;
        s.set_multicast_all_v4(false)?;
        s.set_multicast_ttl_v4(cfg.udp_ttl)?;
        let sock: UdpSocket = s.into();
        let local = SocketAddr::new(IpAddr::V4(local_ip), group.addr.port());
        let fd: OwnedFd = sock.try_clone()?.into();
        let frame = protocol.mtu;
        let slot = frame.next_multiple_of(64);
        let engine = UdpEngine {
            sock,
            core,
            group: SocketAddr::V4(group.addr),
            mmsg: Mmsg::new(BATCH, BATCH),
            rx: vec![0; slot * BATCH],
            rx_meta: vec![RecvMeta::default(); BATCH],
            slot,
            frame,
            tx: vec![0; slot * BATCH],
            tx_len: Vec::with_capacity(BATCH),
            tx_dst: Vec::with_capacity(BATCH),
            tx_sent: 0,
            ready: Ready::NONE,
            changed: false,
        };
        let progress = cfg.runtime.progress;
        let driver = Driver::new(engine, Some(fd), progress, format!("cn-mak-{local}"))?;
        if matches!(progress, Progress::WhenIdle { .. }) {
            driver.ensure_service();
        }
        tracing::debug!(group = spec.group.0, me = spec.me.0, addr = %group.addr, %iface, "MAK member joined over UDP");
        let carrier = UdpCarrier {
            driver,
            local,
            group,
        };
        Ok(MakSocket::wrap(carrier, &cfg))
    }
}
