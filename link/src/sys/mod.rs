//! Every system call of this crate that the `nix` crate does not wrap
//! safely, and every `unsafe` block of it (mio's `sys/unix` and
//! quinn-udp's role): the one audited module.
//!
//! - [`mmsg`] (public): sendmmsg(2) / recvmmsg(2) batches and gathered
//!   sendmsg(2) on any socket (packet, UDP), with reusable header arrays;
//! - `sockopt`: typed setsockopt/getsockopt, `SO_ATTACH_FILTER` from
//!   [`netcore::bpf::Insn`]s, buffer sizes;
//! - `packet`: AF_PACKET socket, bind, group membership, `PACKET_STATISTICS`;
//! - `ring`: the TPACKET_V2 receive ring (mmap, slot status atomics);
//! - `ifreq`: the `SIOCGIF*` ioctls of [`crate::iface`];
//! - `checksum`: the AVX2 word sum behind [`crate::ones_complement_sum`];
//!
//! For eventfd, timerfd, ppoll, uname and getrusage use `nix` directly:
//! `nix::sys::eventfd::EventFd`, `nix::sys::timerfd::TimerFd`,
//! `nix::poll::ppoll`, `nix::sys::utsname::uname`,
//! `nix::sys::resource::getrusage` are safe.

pub(crate) mod checksum;
pub(crate) mod ifreq;
pub mod mmsg;
pub(crate) mod packet;
pub(crate) mod ring;
pub(crate) mod sockopt;

use std::io;

/// `e` with `what` (the call or option) prefixed to its message, kind kept.
pub(crate) fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
