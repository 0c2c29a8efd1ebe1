//! The `SIOCGIFHWADDR` / `SIOCGIFMTU` ioctls (netdevice(7)) on a
//! throwaway `AF_UNIX` datagram socket; the index comes from
//! `if_nametoindex(3)` through nix. They answer for the network namespace
//! of the calling thread.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

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

    fn ioctl(&self, request: libc::c_ulong, req: &mut libc::ifreq) -> io::Result<()> {
        // SAFETY: `req` is a live, writable ifreq, which is what the
        // SIOCGIF* requests used here read and write.
        let r = unsafe { libc::ioctl(self.0.as_raw_fd(), request as _, req as *mut libc::ifreq) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Interface index of `name`. Errors: `ENODEV` when there is none.
    pub(crate) fn index(&self, name: &str) -> io::Result<u32> {
        nix::net::if_::if_nametoindex(name).map_err(io::Error::from)
    }

    /// Hardware address family (`ARPHRD_*`) and first 6 address bytes.
    pub(crate) fn hwaddr(&self, name: &str) -> io::Result<(u16, [u8; 6])> {
        let mut req = Self::request(name);
        self.ioctl(libc::SIOCGIFHWADDR, &mut req)?;
        // SAFETY: SIOCGIFHWADDR succeeded, so the kernel filled the
        // ifru_hwaddr member of the union.
        let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
        let mut mac = [0u8; 6];
        for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
            *m = *b as u8;
        }
        Ok((hw.sa_family, mac))
    }

    /// MTU of `name` in bytes.
    pub(crate) fn mtu(&self, name: &str) -> io::Result<i32> {
        let mut req = Self::request(name);
        self.ioctl(libc::SIOCGIFMTU, &mut req)?;
        // SAFETY: SIOCGIFMTU succeeded, so the kernel filled the ifru_mtu
        // member of the union.
        Ok(unsafe { req.ifr_ifru.ifru_mtu })
    }
}
