//! Waiting for one descriptor: ppoll(2) through nix, with a nanosecond
//! timeout.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;

/// Waits until `fd` is readable or `timeout` passes (`None`: no limit).
/// Returns true when readable, false on timeout or EINTR.
///
/// Errors: those of ppoll(2).
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match ppoll(&mut fds, timeout.map(TimeSpec::from_duration), None) {
        Ok(n) => Ok(n > 0),
        Err(Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// [`wait_readable`] on a raw descriptor (a [`crate::Link::raw_fd`]); a
/// descriptor that is not open reports `POLLNVAL` and counts as readable
/// (the next receive then reports the error).
///
/// Errors: those of ppoll(2).
pub(crate) fn wait_readable_raw(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfd` and `ts` are live for the call; ppoll only reads the
    // descriptor number (an invalid one yields POLLNVAL, not an access);
    // no signal mask is changed.
    let r = unsafe { libc::ppoll(&mut pfd, 1, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}
