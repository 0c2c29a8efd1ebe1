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
