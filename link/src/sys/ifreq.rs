//! The `SIOCGIF*` ioctls (netdevice(7)): on a throwaway `AF_UNIX`
//! datagram socket ([`IfreqSocket`], answering for the network namespace of
//! the calling thread; the index comes from `if_nametoindex(3)` through
//! nix), or on a given socket ([`query_on`], answering for that socket's
//! network namespace, whichever thread asks).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

/// A socket to ask the kernel about interfaces.
pub(crate) struct IfreqSocket(OwnedFd);

impl IfreqSocket {
    /// Opens the socket. Errors: those of socket(2).
    pub(crate) fn new() -> io::Result<Self> {
        socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map(Self)
        .map_err(io::Error::from)
    }

    /// An `ifreq` naming `name` (checked by the caller: 1..IFNAMSIZ bytes, no NUL).
    fn request(name: &str) -> libc::ifreq {
        // SAFETY: ifreq is plain old data (a name array and a union of
        // integers and sockaddrs); all-zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
            *d = *s as libc::c_char;
        }
        req
    }

    /// Interface index of `name`. Errors: `ENODEV` when there is none.
    pub(crate) fn index(&self, name: &str) -> io::Result<u32> {
        nix::net::if_::if_nametoindex(name).map_err(io::Error::from)
    }

    /// Hardware address family (`ARPHRD_*`) and first 6 address bytes.
    pub(crate) fn hwaddr(&self, name: &str) -> io::Result<(u16, [u8; 6])> {
        hwaddr(self.0.as_fd(), name)
    }

    /// MTU of `name` in bytes.
    pub(crate) fn mtu(&self, name: &str) -> io::Result<i32> {
        mtu(self.0.as_fd(), name)
    }
}

/// One `SIOCGIF*` request on socket `fd`.
fn ioctl(fd: BorrowedFd<'_>, request: libc::c_ulong, req: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: `req` is a live, writable ifreq, which is what the SIOCGIF*
    // requests used here read and write; for SIOCETHTOOL its `ifru_data`
    // points to a live, writable `EthtoolValue` (set by `carrier`), which
    // ETHTOOL_GLINK reads and writes.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, req as *mut libc::ifreq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn hwaddr(fd: BorrowedFd<'_>, name: &str) -> io::Result<(u16, [u8; 6])> {
    let mut req = IfreqSocket::request(name);
    ioctl(fd, libc::SIOCGIFHWADDR, &mut req)?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel filled the
    // ifru_hwaddr member of the union.
    let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok((hw.sa_family, mac))
}

fn mtu(fd: BorrowedFd<'_>, name: &str) -> io::Result<i32> {
    let mut req = IfreqSocket::request(name);
    ioctl(fd, libc::SIOCGIFMTU, &mut req)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel filled the ifru_mtu
    // member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_mtu })
}

/// `ETHTOOL_GLINK` (include/uapi/linux/ethtool.h): "get link status".
const ETHTOOL_GLINK: u32 = 0x0000_000a;

/// `struct ethtool_value` (include/uapi/linux/ethtool.h).
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// The carrier of `name` as the driver reports it now (`ETHTOOL_GLINK`,
/// `netif_carrier_ok` for most drivers, veth included); `None` when the
/// driver does not answer (`EOPNOTSUPP`: no `get_link`) or the request
/// fails otherwise. Unlike `IFF_RUNNING`, which reports the operational
/// state the kernel's link watcher sets after a carrier change, and which
/// it may set up to a second later (the watcher defers events it does not
/// deem urgent; for one end of a veth pair re-created across two network
/// namespaces it does), this is current.
fn carrier(fd: BorrowedFd<'_>, name: &str) -> Option<bool> {
    let mut val = EthtoolValue {
        cmd: ETHTOOL_GLINK,
        data: 0,
    };
    let mut req = IfreqSocket::request(name);
    req.ifr_ifru.ifru_data = (&mut val as *mut EthtoolValue).cast();
    ioctl(fd, libc::SIOCETHTOOL, &mut req).ok()?;
    Some(val.data != 0)
}

/// What [`query_on`] reports about an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IfaceState {
    /// Interface index.
    pub index: u32,
    /// `IFF_UP`: administratively up.
    pub up: bool,
    /// Carrier: the driver's link status (`ETHTOOL_GLINK`), or
    /// `IFF_RUNNING` (the operational state, which may lag a carrier
    /// change by up to a second) for a driver that does not report it.
    pub running: bool,
    /// MTU in bytes.
    pub mtu: usize,
    /// Hardware address.
    pub mac: [u8; 6],
}

/// Index, flags, MTU and MAC of interface `name` (checked by the caller:
/// 1..IFNAMSIZ bytes, no NUL) in the network namespace of socket `fd`
/// (any socket: the kernel hands `SIOCGIF*` requests it does not know to
/// the namespace's devices).
///
/// Errors: `ENODEV` when there is no such interface; other ioctl errors.
pub(crate) fn query_on(fd: BorrowedFd<'_>, name: &str) -> io::Result<IfaceState> {
    let mut req = IfreqSocket::request(name);
    ioctl(fd, libc::SIOCGIFINDEX, &mut req)?;
    // SAFETY: SIOCGIFINDEX succeeded, so the kernel filled the
    // ifru_ifindex member of the union.
    let index = unsafe { req.ifr_ifru.ifru_ifindex };
    let mut req = IfreqSocket::request(name);
    ioctl(fd, libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel filled the ifru_flags
    // member of the union.
    let flags = i32::from(unsafe { req.ifr_ifru.ifru_flags });
    let (_, mac) = hwaddr(fd, name)?;
    let running = carrier(fd, name).unwrap_or(flags & libc::IFF_RUNNING != 0);
    Ok(IfaceState {
        index: index.max(0) as u32,
        up: flags & libc::IFF_UP != 0,
        running,
        mtu: mtu(fd, name)?.max(0) as usize,
        mac,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_up_with_a_carrier() {
        let s = IfreqSocket::new().unwrap();
        let st = query_on(s.0.as_fd(), "lo").unwrap();
        assert!(st.up && st.running, "{st:?}");
        // The driver's own answer (loopback's get_link: always on).
        assert_eq!(carrier(s.0.as_fd(), "lo"), Some(true));
        assert_eq!(carrier(s.0.as_fd(), "no-such-if0"), None);
        assert!(query_on(s.0.as_fd(), "no-such-if0").is_err());
    }
}
