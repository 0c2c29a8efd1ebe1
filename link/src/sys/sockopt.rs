//! Typed setsockopt(2) / getsockopt(2), and the options built on them that
//! nix does not offer (`SO_ATTACH_FILTER`, `SOL_PACKET` options).

use std::io;
use std::mem::{align_of, size_of};
use std::os::fd::{AsRawFd, BorrowedFd};

use netcore::bpf::{Insn, MAX_INSNS};

use super::annotate;

// `Insn` is handed to the kernel as `struct sock_filter`: same size, same
// alignment, same field order (`#[repr(C)]` u16, u8, u8, u32).
const _: () = assert!(size_of::<Insn>() == size_of::<libc::sock_filter>());
const _: () = assert!(align_of::<Insn>() == align_of::<libc::sock_filter>());

/// Plain C structures that the kernel may fill with any bytes.
///
/// # Safety
/// Implementors must be valid for every bit pattern (no references, no
/// enums, no `bool`s).
pub(crate) unsafe trait Pod: Copy {}
// SAFETY: integers are valid for every bit pattern.
unsafe impl Pod for libc::c_int {}
// SAFETY: two u32 counters.
unsafe impl Pod for libc::tpacket_stats {}

/// setsockopt(2) with `val` as the option value (`size_of::<T>()` bytes).
///
/// Errors: those of setsockopt(2), unchanged (callers name the option).
pub(crate) fn set<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points to a live T of the size passed; the kernel only
    // reads it during the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (val as *const T).cast::<libc::c_void>(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// getsockopt(2) into `init` (the value kept where the kernel writes less).
///
/// Errors: those of getsockopt(2).
pub(crate) fn get<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    init: T,
) -> io::Result<T> {
    let mut v = init;
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live and writable for the call; the kernel
    // writes at most `len` bytes, and any bytes are a valid T (`Pod`).
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut T).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Sets an integer option.
pub(crate) fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    v: i32,
) -> io::Result<()> {
    set(fd, level, name, &(v as libc::c_int))
}

/// Sets a buffer size in bytes, trying the privileged `*FORCE` option
/// first (CAP_NET_ADMIN: beyond `net.core.rmem_max` / `wmem_max`), then the
/// plain one (capped by those sysctls).
///
/// Errors: those of the plain option, prefixed with `what`.
pub(crate) fn set_buffer(
    fd: BorrowedFd<'_>,
    force: libc::c_int,
    plain: libc::c_int,
    bytes: usize,
    what: &str,
) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize / 2) as i32;
    if set_int(fd, libc::SOL_SOCKET, force, v).is_ok() {
        return Ok(());
    }
    set_int(fd, libc::SOL_SOCKET, plain, v).map_err(|e| annotate(e, what))
}

/// Reads an integer option.
pub(crate) fn get_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<i32> {
    get::<libc::c_int>(fd, level, name, 0)
}

/// Attaches (or replaces) the classic-BPF filter of socket `fd`
/// (`SO_ATTACH_FILTER`, socket(7)). Frames queued before the call are not
/// filtered again.
///
/// Errors: `InvalidInput` for an empty program or one longer than
/// [`MAX_INSNS`]; errors of setsockopt(2) (`EINVAL` when the kernel's
/// verifier rejects the program), naming the option.
pub(crate) fn attach_filter(fd: BorrowedFd<'_>, prog: &[Insn]) -> io::Result<()> {
    if prog.is_empty() || prog.len() > MAX_INSNS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "SO_ATTACH_FILTER: a program of {} instructions (1 to {MAX_INSNS} allowed)",
                prog.len()
            ),
        ));
    }
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        // The kernel copies the program and never writes through this
        // pointer; `Insn` has sock_filter's layout (asserted above).
        filter: prog.as_ptr().cast_mut().cast::<libc::sock_filter>(),
    };
    set(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
        .map_err(|e| annotate(e, "SO_ATTACH_FILTER"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn filters_from_insns_reach_the_kernel() {
        // SO_ATTACH_FILTER works on any socket: the kernel's verifier
        // accepts the builder's programs (and refuses a bad one).
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut f = netcore::bpf::FrameFilter::new();
        f.ports(0x88b5, 0..600)
            .syn_any_port(0x88b6)
            .peer_port(0x88b6, 9, [2, 0, 0, 0, 0, 1], 7);
        let prog = f.compile().unwrap();
        attach_filter(s.as_fd(), &prog).unwrap();
        let bad = [Insn::new(0x15, 5, 5, 0), Insn::new(0x06, 0, 0, 0)];
        let e = attach_filter(s.as_fd(), &bad).unwrap_err();
        assert!(e.to_string().contains("SO_ATTACH_FILTER"), "{e}");
        assert_eq!(
            attach_filter(s.as_fd(), &[]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn int_options_round_trip() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        set_buffer(
            s.as_fd(),
            libc::SO_RCVBUFFORCE,
            libc::SO_RCVBUF,
            1 << 16,
            "SO_RCVBUF",
        )
        .unwrap();
        // The kernel doubles the value for its bookkeeping.
        assert_eq!(
            get_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap(),
            1 << 17
        );
    }
}
