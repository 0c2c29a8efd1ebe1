//! Network interface lookup: index, MAC address and MTU of a named interface.
//!
//! Implemented with the classic `SIOCGIFINDEX` / `SIOCGIFHWADDR` /
//! `SIOCGIFMTU` ioctls (netdevice(7)) on a throwaway `AF_UNIX` datagram
//! socket, not with the `netdev` crate: three ioctls need no privilege, no
//! netlink round-trip, and they answer for the network namespace of the
//! calling thread, which is what the namespace tests need.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::wire::MacAddr;

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
    let mut req = ifreq_for(name)?;
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, owned descriptor.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
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

    ioctl(&sock, libc::SIOCGIFINDEX, &mut req).map_err(not_found)?;
    // SAFETY: the kernel filled the ifru_ifindex member of the union.
    let index = unsafe { req.ifr_ifru.ifru_ifindex } as u32;

    let mut req = ifreq_for(name)?;
    ioctl(&sock, libc::SIOCGIFHWADDR, &mut req).map_err(not_found)?;
    // SAFETY: the kernel filled the ifru_hwaddr member.
    let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
    let family = hw.sa_family;
    // ARPHRD_ETHER (1) and ARPHRD_LOOPBACK (772) have 6-byte addresses.
    if family != libc::ARPHRD_ETHER && family != libc::ARPHRD_LOOPBACK {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("interface {name:?} is not an Ethernet interface (ARPHRD type {family})"),
        ));
    }
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *m = *b as u8;
    }

    let mut req = ifreq_for(name)?;
    ioctl(&sock, libc::SIOCGIFMTU, &mut req).map_err(not_found)?;
    // SAFETY: the kernel filled the ifru_mtu member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };

    Ok(IfaceInfo {
        name: name.to_string(),
        index,
        mac: MacAddr(mac),
        mtu: mtu.max(0) as usize,
    })
}

fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() > MAX_IFNAME_LEN || name.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "invalid interface name {name:?}: must be 1 to {MAX_IFNAME_LEN} bytes without NUL"
            ),
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

fn ioctl(sock: &OwnedFd, req: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: `ifr` is a valid ifreq for the SIOCGIF* requests used here.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), req as _, ifr as *mut libc::ifreq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
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
