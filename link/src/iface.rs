//! Network interface lookup: index, MAC address and MTU of a named interface.
//!
//! Implemented with `if_nametoindex(3)` and the classic `SIOCGIFHWADDR` /
//! `SIOCGIFMTU` ioctls (netdevice(7), in `sys::ifreq`), not with the
//! `netdev` crate: they need no privilege, no netlink round-trip, and they
//! answer for the network namespace of the calling thread, which is what
//! the namespace tests need.

use std::io;

use crate::eth::MacAddr;
use crate::sys::ifreq::IfreqSocket;

/// Longest interface name in bytes (IFNAMSIZ - 1, netdevice(7)).
pub const MAX_IFNAME_LEN: usize = libc::IFNAMSIZ - 1;

/// What the kernel reports about one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceInfo {
    /// Interface name, e.g. `eth0`.
    pub name: String,
    /// Interface index (`if_nametoindex(3)`), > 0.
    pub index: u32,
    /// Hardware (MAC) address.
    pub mac: MacAddr,
    /// MTU: the largest Ethernet payload in bytes.
    pub mtu: usize,
}

/// Looks up `name` in the network namespace of the calling thread.
///
/// Errors: `NotFound` naming the interface when it does not exist;
/// `InvalidInput` when the name is empty, longer than 15 bytes or contains
/// a NUL; `Unsupported` when the interface is not Ethernet-like (its hardware
/// address is not 6 bytes, e.g. a tun device); other errors from the ioctls.
pub fn lookup(name: &str) -> io::Result<IfaceInfo> {
    if name.is_empty() || name.len() > MAX_IFNAME_LEN || name.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "invalid interface name {name:?}: must be 1 to {MAX_IFNAME_LEN} bytes without NUL"
            ),
        ));
    }
    let sock = IfreqSocket::new()?;
    let not_found = |e: io::Error| -> io::Error {
        if e.raw_os_error() == Some(libc::ENODEV) {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no network interface named {name:?} in this network namespace (see `ip link`)"
                ),
            )
        } else {
            io::Error::new(e.kind(), format!("interface {name:?}: {e}"))
        }
    };
    let index = sock.index(name).map_err(not_found)?;
    let (family, mac) = sock.hwaddr(name).map_err(not_found)?;
    // ARPHRD_ETHER (1) and ARPHRD_LOOPBACK (772) have 6-byte addresses.
    if family != libc::ARPHRD_ETHER && family != libc::ARPHRD_LOOPBACK {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("interface {name:?} is not an Ethernet interface (ARPHRD type {family})"),
        ));
    }
    let mtu = sock.mtu(name).map_err(not_found)?;
    Ok(IfaceInfo {
        name: name.to_string(),
        index,
        mac: MacAddr(mac),
        mtu: mtu.max(0) as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_exists() {
        let lo = lookup("lo").expect("lo exists in every network namespace");
        assert!(lo.index > 0);
        assert!(lo.mtu > 0);
        assert_eq!(lo.mac, MacAddr::ZERO);
    }

    #[test]
    fn unknown_interface_is_named() {
        let e = lookup("nosuchif0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nosuchif0"), "{e}");
    }

    #[test]
    fn bad_names_rejected() {
        assert_eq!(lookup("").unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            lookup("a-very-long-interface-name").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}

/// The MAC address the kernel's neighbour table (ARP, RFC 826) holds for
/// IPv4 address `ip` on interface `iface`: complete entries only
/// (`ATF_COM`), as `/proc/net/arp` lists them for the calling thread's
/// network namespace. `None` when there is none (no traffic to `ip` yet:
/// one ping, or `ip neigh add`, makes one).
///
/// This lets a node given as an IPv4 address or host name name its EDP
/// peer on a cluster that already runs IP on the same interfaces.
pub fn neighbor_mac(ip: std::net::Ipv4Addr, iface: &str) -> Option<MacAddr> {
    let table = std::fs::read_to_string("/proc/net/arp").ok()?;
    parse_arp_table(&table, ip, iface)
}

/// [`neighbor_mac`] over the text of `/proc/net/arp` ("IP address, HW
/// type, Flags, HW address, Mask, Device", a header line first).
fn parse_arp_table(table: &str, ip: std::net::Ipv4Addr, iface: &str) -> Option<MacAddr> {
    const ATF_COM: u32 = 0x2;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [addr, _, flags, mac, _, dev] = f[..] else {
            return None;
        };
        let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).ok()?;
        (addr.parse() == Ok(ip) && dev == iface && flags & ATF_COM != 0)
            .then(|| mac.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod neighbor_tests {
    use super::*;

    #[test]
    fn complete_entries_of_the_interface_only() {
        let t = "IP address       HW type     Flags       HW address            Mask     Device\n\
                 198.18.0.2       0x1         0x2         02:66:74:00:00:02     *        ft0\n\
                 198.18.0.3       0x1         0x0         00:00:00:00:00:00     *        ft0\n\
                 198.18.0.4       0x1         0x2         02:66:74:00:00:04     *        eth1\n";
        let ip = |s: &str| s.parse().unwrap();
        assert_eq!(
            parse_arp_table(t, ip("198.18.0.2"), "ft0"),
            Some("02:66:74:00:00:02".parse().unwrap())
        );
        assert_eq!(parse_arp_table(t, ip("198.18.0.3"), "ft0"), None);
        assert_eq!(parse_arp_table(t, ip("198.18.0.4"), "ft0"), None);
        assert_eq!(parse_arp_table(t, ip("198.18.0.9"), "ft0"), None);
    }
}
