//! AF_PACKET sockets (packet(7)): open, bind to an interface and a
//! protocol, multicast membership, kernel counters.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

use super::sockopt;

/// A `SOCK_RAW` packet socket with protocol 0: it receives nothing until
/// [`bind`] gives it a protocol, so options and a filter can be set first.
///
/// Errors: those of socket(2) (`EPERM` without CAP_NET_RAW).
pub(crate) fn open() -> io::Result<OwnedFd> {
    socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io::Error::from)
}

fn sockaddr_ll(ifindex: u32, protocol: u16) -> libc::sockaddr_ll {
    libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: protocol.to_be(),
        sll_ifindex: ifindex as i32,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    }
}

/// Binds packet socket `fd` to interface `ifindex` and `protocol` (an
/// ethertype, or `ETH_P_ALL` = 0x0003 for every frame), host byte order.
///
/// Errors: those of bind(2).
pub(crate) fn bind(fd: BorrowedFd<'_>, ifindex: u32, protocol: u16) -> io::Result<()> {
    let sll = sockaddr_ll(ifindex, protocol);
    // SAFETY: `sll` is a live sockaddr_ll and its exact size is passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Adds (`join`) or drops the Ethernet multicast membership `mac` on
/// interface `ifindex` (`PACKET_ADD_MEMBERSHIP` / `PACKET_DROP_MEMBERSHIP`
/// with `PACKET_MR_MULTICAST`).
///
/// Errors: those of setsockopt(2).
pub(crate) fn membership(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    mac: [u8; 6],
    join: bool,
) -> io::Result<()> {
    let mut addr = [0u8; 8];
    addr[..6].copy_from_slice(&mac);
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as i32,
        mr_type: libc::PACKET_MR_MULTICAST as u16,
        mr_alen: 6,
        mr_address: addr,
    };
    let name = if join {
        libc::PACKET_ADD_MEMBERSHIP
    } else {
        libc::PACKET_DROP_MEMBERSHIP
    };
    sockopt::set(fd, libc::SOL_PACKET, name, &mreq)
}

/// Reads and resets the kernel's counters of packet socket `fd`
/// (`PACKET_STATISTICS`): (frames that passed the filter, frames dropped
/// for lack of room) since the last read.
///
/// Errors: those of getsockopt(2) (`ENOPROTOOPT` for another socket type).
pub(crate) fn statistics(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    let st = sockopt::get(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_STATISTICS,
        libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        },
    )?;
    Ok((st.tp_packets, st.tp_drops))
}
