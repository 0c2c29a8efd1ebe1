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
//! (`runtime::driver`), as CTP's UDP engine.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;

use runtime::protocol::{DatagramCore, UdpEvent};
use runtime::protocol::{Driver, Ready, SlotId};

use super::core::GroupCore;
use super::{GroupSpec, MakConfig, MakSocket};
use crate::member::Dest;

pub use runtime::protocol::UDP_SOCKET_BUFFER;

/// IPv4 (20) and UDP (8) header bytes inside the interface MTU.
const IP_UDP_HEADERS: usize = 28;

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

/// The UDP engine of a member.
pub type UdpEngine = runtime::protocol::UdpEngine<UdpMember>;

/// A member on a UDP socket: its core and the group's address.
#[derive(Debug)]
pub struct UdpMember {
    pub(crate) core: GroupCore<SocketAddr>,
    group: SocketAddr,
}

impl DatagramCore for UdpMember {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.core.on_frame(now, from, datagram);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now);
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        let t = self.core.poll_transmit(now, buf)?;
        let dest = match t.dest {
            Dest::Group => self.group,
            Dest::Member(a) => a,
        };
        Some((dest, t.len))
    }

    fn readiness(&self) -> Ready {
        self.core.readiness()
    }

    fn on_event(&mut self, _now: Instant, event: UdpEvent<'_>) {
        let stats = &mut self.core.stats;
        match event {
            UdpEvent::Sent => {}
            UdpEvent::SendBlocked => stats.send_blocked += 1,
            // An ICMP error of an earlier unicast (a member gone:
            // ECONNREFUSED) or a refused datagram: the protocol recovers it.
            UdpEvent::SendFailed { .. } => stats.send_errors += 1,
            UdpEvent::RecvFailed(_) => stats.recv_errors += 1,
            UdpEvent::Malformed => stats.malformed += 1,
        }
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

impl runtime::protocol::Carrier for UdpCarrier {
    type Addr = SocketAddr;
    type Core = GroupCore<SocketAddr>;
    type Engine = UdpEngine;

    fn driver(&self) -> &Arc<Driver<UdpEngine>> {
        &self.driver
    }
    fn slot(&self) -> SlotId {
        SlotId::FIRST
    }
    fn core(e: &mut UdpEngine, _slot: SlotId) -> Option<&mut GroupCore<SocketAddr>> {
        Some(&mut e.core_mut().core)
    }
    fn core_ref(e: &UdpEngine, _slot: SlotId) -> Option<&GroupCore<SocketAddr>> {
        Some(&e.core().core)
    }
    fn touched(e: &mut UdpEngine, _slot: SlotId, now: Instant) -> io::Result<()> {
        e.touched(now);
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
            let info = link::iface::lookup(&a.interface_name)?;
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
        let where_ = format!("UDP on {iface}");
        let protocol = cfg.protocol_for(mtu.saturating_sub(IP_UDP_HEADERS).min(65507), &where_)?;
        let core = GroupCore::new(
            &spec,
            &protocol,
            &where_,
            cfg.seed(),
            cfg.link_fault.as_ref(),
        )?;

        let bind = SocketAddr::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, group.addr.port()));
        let sock = runtime::protocol::bind_socket(bind, "MAK/UDP", |s| {
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
            s.set_multicast_ttl_v4(cfg.udp_ttl)
        })?;
        let local = SocketAddr::new(IpAddr::V4(local_ip), group.addr.port());
        let member = UdpMember {
            core,
            group: SocketAddr::V4(group.addr),
        };
        let driver = UdpEngine::spawn(
            sock,
            member,
            protocol.mtu,
            cfg.runtime.progress,
            format!("cn-mak-{local}"),
        )?;
        tracing::debug!(group = spec.group.0, me = spec.me.0, addr = %group.addr, %iface, "MAK member joined over UDP");
        let carrier = UdpCarrier {
            driver,
            local,
            group,
        };
        Ok(MakSocket::wrap(carrier, &cfg))
    }
}
