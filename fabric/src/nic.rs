//! The interfaces a domain can sit on: one libfabric domain per network
//! interface (fi_domain(7): "a domain usually maps to a NIC"), named after
//! it, found in the calling thread's network namespace without privilege
//! (getifaddrs(3), `link::iface::lookup`'s ioctls); and the link MTU an
//! endpoint on one gets.

use std::net::Ipv4Addr;

use edp::MacAddr;
use nix::net::if_::InterfaceFlags;

use crate::config::{Config, LinkKind};
use crate::error::{FiError, FiResult};

/// One interface: what a domain on it needs to describe itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    /// Interface name (the domain's name).
    pub name: String,
    /// Its MAC address.
    pub mac: MacAddr,
    /// Its MTU, bytes of Ethernet payload.
    pub mtu: usize,
    /// Its first IPv4 address (the UDP link binds it).
    pub ipv4: Option<Ipv4Addr>,
    /// The prefix length of that address's subnet, bits (its netmask):
    /// the UDP link admits first contact from the subnet by default.
    pub ipv4_prefix: u8,
    /// The loopback interface.
    pub loopback: bool,
}

/// Bytes of the IPv4 and UDP headers a UDP link's datagram adds.
const IP_UDP_HEADERS: usize = 28;

/// Largest frame payload the UDP link uses, bytes: jumbo-frame sized, so a
/// datagram on loopback (MTU 65536) stays one IP packet of moderate size.
pub const UDP_LINK_MAX_MTU: usize = 9000;

/// The link MTU (Ethernet payload bytes) an endpoint on `nic` gets.
pub fn link_mtu(nic: &Nic, link: LinkKind) -> usize {
    match link {
        LinkKind::Packet => nic.mtu,
        LinkKind::Udp => nic.mtu.saturating_sub(IP_UDP_HEADERS).min(UDP_LINK_MAX_MTU),
    }
}

/// The interfaces of this namespace that are up, in getifaddrs order.
///
/// Errors: `FI_EIO` when getifaddrs(3) fails.
fn all_up() -> FiResult<Vec<Nic>> {
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| FiError::new(crate::fi::FI_EIO, format!("getifaddrs: {e}")))?;
    let mut out: Vec<Nic> = Vec::new();
    for a in addrs {
        if !a.flags.contains(InterfaceFlags::IFF_UP) {
            continue;
        }
        let v4 = a
            .address
            .as_ref()
            .and_then(|s| s.as_sockaddr_in())
            .map(|s| s.ip());
        let prefix = a
            .netmask
            .as_ref()
            .and_then(|s| s.as_sockaddr_in())
            .map_or(32, |m| u32::from(m.ip()).count_ones() as u8);
        if let Some(n) = out.iter_mut().find(|n| n.name == a.interface_name) {
            if n.ipv4.is_none() && v4.is_some() {
                n.ipv4 = v4;
                n.ipv4_prefix = prefix;
            }
            continue;
        }
        let Ok(info) = link::iface::lookup(&a.interface_name) else {
            continue;
        };
        out.push(Nic {
            name: info.name,
            mac: info.mac,
            mtu: info.mtu,
            ipv4: v4,
            ipv4_prefix: if v4.is_some() { prefix } else { 32 },
            loopback: a.flags.contains(InterfaceFlags::IFF_LOOPBACK),
        });
    }
    Ok(out)
}

/// The interfaces `config` allows, in preference order: `FI_CLUSTERNET_IFACE`
/// alone when set; else, over the packet link, every Ethernet interface
/// that is up except loopback (frames a host sends to itself do not come
/// back through AF_PACKET); over the UDP link, those with an IPv4 address,
/// loopback last.
///
/// Errors: `FI_ENODATA` naming the interface when `FI_CLUSTERNET_IFACE` is
/// not up here, or when no interface qualifies.
pub fn candidates(config: &Config) -> FiResult<Vec<Nic>> {
    let up = all_up()?;
    select(up, config)
}

/// [`candidates`] over a given interface list (tests).
pub fn select(up: Vec<Nic>, config: &Config) -> FiResult<Vec<Nic>> {
    if let Some(want) = &config.iface {
        let n = up.into_iter().find(|n| &n.name == want).ok_or_else(|| {
            FiError::nodata(format!(
                "FI_CLUSTERNET_IFACE={want}: no Ethernet interface of that name is up in this \
                 network namespace (see `ip link`)"
            ))
        })?;
        if config.link == LinkKind::Udp && n.ipv4.is_none() {
            return Err(FiError::nodata(format!(
                "FI_CLUSTERNET_IFACE={want} has no IPv4 address for the UDP link to bind"
            )));
        }
        return Ok(vec![n]);
    }
    let mut v: Vec<Nic> = match config.link {
        LinkKind::Packet => up.into_iter().filter(|n| !n.loopback).collect(),
        LinkKind::Udp => up.into_iter().filter(|n| n.ipv4.is_some()).collect(),
    };
    v.sort_by_key(|n| n.loopback);
    if v.is_empty() {
        return Err(FiError::nodata(match config.link {
            LinkKind::Packet => {
                "no Ethernet interface other than loopback is up (set FI_CLUSTERNET_IFACE, or \
                 FI_CLUSTERNET_LINK=udp to run over UDP)"
            }
            LinkKind::Udp => "no interface with an IPv4 address is up for the UDP link",
        }));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(name: &str, ipv4: Option<[u8; 4]>, loopback: bool) -> Nic {
        Nic {
            name: name.into(),
            mac: MacAddr([2, 0, 0, 0, 0, name.len() as u8]),
            mtu: 1500,
            ipv4: ipv4.map(Ipv4Addr::from),
            ipv4_prefix: 24,
            loopback,
        }
    }

    fn list() -> Vec<Nic> {
        vec![
            nic("lo", Some([127, 0, 0, 1]), true),
            nic("eth0", Some([10, 0, 0, 1]), false),
            nic("eth1", None, false),
        ]
    }

    #[test]
    fn packet_link_skips_loopback() {
        let v = select(list(), &Config::default()).unwrap();
        let names: Vec<_> = v.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["eth0", "eth1"]);
    }

    #[test]
    fn udp_link_needs_ipv4_and_puts_loopback_last() {
        let c = Config {
            link: LinkKind::Udp,
            ..Config::default()
        };
        let v = select(list(), &c).unwrap();
        let names: Vec<_> = v.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["eth0", "lo"]);
    }

    #[test]
    fn iface_variable_selects_or_refuses() {
        let c = Config {
            iface: Some("eth1".into()),
            ..Config::default()
        };
        assert_eq!(select(list(), &c).unwrap()[0].name, "eth1");
        let c = Config {
            iface: Some("eth9".into()),
            ..Config::default()
        };
        let e = select(list(), &c).unwrap_err();
        assert_eq!(e.code, crate::fi::FI_ENODATA);
        assert!(e.msg.contains("eth9"));
        let c = Config {
            iface: Some("eth1".into()),
            link: LinkKind::Udp,
            ..Config::default()
        };
        assert!(select(list(), &c).unwrap_err().msg.contains("IPv4"));
    }

    #[test]
    fn this_namespace_has_loopback() {
        let c = Config {
            link: LinkKind::Udp,
            ..Config::default()
        };
        let v = candidates(&c).unwrap();
        assert!(v.iter().any(|n| n.loopback && n.ipv4.is_some()));
    }
}
