//! Errors on their way to libfabric: a `FI_E*` code (fi_errno(3)) for the
//! caller's logic, and a provider error number with a readable message for
//! its user (`fi_cq_strerror`, the provider's log).

use std::fmt;
use std::io;

use crate::fi;

/// Provider error numbers (`prov_errno` of an error completion): what
/// happened below libfabric, described by `prov_errno_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum ProvErrno {
    /// No provider detail beyond the FI_E* code.
    None = 0,
    /// A received message did not fit the posted buffer.
    Truncated = 1,
    /// The operation was canceled (fi_cancel, or the endpoint closed).
    Canceled = 2,
    /// The link (packet socket or UDP socket) returned an error.
    Link = 3,
    /// The peer did not answer within the failure bound.
    PeerUnreachable = 4,
    /// A probe found no matching message.
    NoMessage = 5,
    /// Any other error of the stack.
    Other = 6,
    /// The processes of a job disagree on the link or the cluster key
    /// (a peer's name told so at `fi_av_insert`).
    Mismatch = 7,
}

/// The description of provider error number `n` (fi_cq_strerror's answer
/// when the CQ has no message of its own for it).
pub fn prov_errno_str(n: i32) -> &'static str {
    match n {
        0 => "no provider error",
        1 => "clusternet: message longer than the posted receive buffer (truncated)",
        2 => "clusternet: operation canceled",
        3 => "clusternet: link error (packet or UDP socket)",
        4 => "clusternet: peer unreachable (no answer within the failure bound)",
        5 => "clusternet: no matching message",
        6 => "clusternet: stack error",
        7 => "clusternet: the processes disagree on FI_CLUSTERNET_LINK or the cluster key",
        _ => "clusternet: unknown provider error number",
    }
}

/// An error of a libfabric call: `code` is a positive `FI_E*` value (the
/// call returns `-code`), `msg` says what went wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiError {
    /// Positive `FI_E*` code (fi_errno(3)).
    pub code: u32,
    /// Provider error number.
    pub prov: ProvErrno,
    /// What went wrong, for the log and fi_cq_strerror.
    pub msg: String,
}

impl FiError {
    /// An error with code `code` (positive `FI_E*`) and message `msg`.
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        FiError {
            code,
            prov: ProvErrno::None,
            msg: msg.into(),
        }
    }

    /// `FI_EINVAL`: a bad argument.
    pub fn inval(msg: impl Into<String>) -> Self {
        Self::new(fi::FI_EINVAL, msg)
    }

    /// `FI_ENODATA`: getinfo has nothing that satisfies the hints.
    pub fn nodata(msg: impl Into<String>) -> Self {
        Self::new(fi::FI_ENODATA, msg)
    }

    /// `FI_ENOSYS`: not implemented by this provider.
    pub fn nosys(what: &str) -> Self {
        Self::new(
            fi::FI_ENOSYS,
            format!("clusternet does not implement {what}"),
        )
    }

    /// `FI_EAGAIN`: retry after progress.
    pub fn again(msg: impl Into<String>) -> Self {
        Self::new(fi::FI_EAGAIN, msg)
    }

    /// `FI_EBUSY`: the object still has users.
    pub fn busy(msg: impl Into<String>) -> Self {
        Self::new(fi::FI_EBUSY, msg)
    }

    /// The same error with provider error number `prov`.
    pub fn with_prov(mut self, prov: ProvErrno) -> Self {
        self.prov = prov;
        self
    }

    /// The value a libfabric call returns for this error (`-code`).
    pub fn ret(&self) -> i32 {
        -(self.code as i32)
    }

    /// An I/O error of the stack, mapped to the closest `FI_E*` code:
    /// `WouldBlock` -> FI_EAGAIN, `PermissionDenied` -> FI_EACCES (the
    /// message names CAP_NET_RAW and setcap), `NotFound` -> FI_ENODEV,
    /// `AddrInUse` -> FI_EADDRINUSE, `InvalidInput` -> FI_EINVAL,
    /// `TimedOut` -> FI_ETIMEDOUT, others FI_EIO; `context` says what was
    /// being done.
    pub fn io(context: &str, e: &io::Error) -> Self {
        use io::ErrorKind as K;
        let code = match e.kind() {
            K::WouldBlock => fi::FI_EAGAIN,
            K::PermissionDenied => fi::FI_EACCES,
            K::NotFound => fi::FI_ENODEV,
            K::AddrInUse => fi::FI_EADDRINUSE,
            K::AddrNotAvailable => fi::FI_EADDRNOTAVAIL,
            K::InvalidInput => fi::FI_EINVAL,
            K::TimedOut => fi::FI_ETIMEDOUT,
            K::OutOfMemory => fi::FI_ENOMEM,
            _ => fi::FI_EIO,
        };
        FiError {
            code,
            prov: ProvErrno::Link,
            msg: format!("{context}: {e}"),
        }
    }
}

impl From<comm::CommError> for FiError {
    /// The `FI_E*` code of a tagged-core error: a full queue (completions,
    /// sends waiting for the window, requests, posted receives, unexpected
    /// messages) is FI_EAGAIN (fi_endpoint(3), FI_RM_ENABLED: the caller
    /// progresses and retries); an unknown peer or claim FI_EINVAL; a
    /// message above max_msg_size FI_EMSGSIZE; a failed peer
    /// FI_EHOSTUNREACH; a disconnected one FI_ENOTCONN.
    fn from(e: comm::CommError) -> Self {
        use comm::CommError as C;
        let (code, prov) = match &e {
            C::CompletionQueueFull(_)
            | C::SendQueueFull { .. }
            | C::TooManyRequests(_)
            | C::Post(_)
            | C::UnexpectedQueueFull { .. } => (fi::FI_EAGAIN, ProvErrno::None),
            C::UnknownPeer(_) | C::UnknownRequest(_) | C::InvalidRank { .. } | C::InvalidTag(_) => {
                (fi::FI_EINVAL, ProvErrno::None)
            }
            C::TooLarge { .. } => (fi::FI_EMSGSIZE, ProvErrno::None),
            C::PeerFailed { .. } => (fi::FI_EHOSTUNREACH, ProvErrno::PeerUnreachable),
            C::Disconnected { .. } => (fi::FI_ENOTCONN, ProvErrno::PeerUnreachable),
            C::Truncated { .. } => (fi::FI_ETRUNC, ProvErrno::Truncated),
            C::TimedOut { .. } => (fi::FI_ETIMEDOUT, ProvErrno::Other),
            C::Io(io) => return FiError::io("clusternet transport", io),
            C::Bootstrap(_) => (fi::FI_EINVAL, ProvErrno::Other),
            _ => (fi::FI_EOTHER, ProvErrno::Other),
        };
        FiError {
            code,
            prov,
            msg: e.to_string(),
        }
    }
}

/// The `FI_E*` code and provider error number of a failed tagged
/// operation (`fi_cq_err_entry::err`, `prov_errno`).
pub fn op_error(e: &comm::tagged::OpError) -> (u32, ProvErrno) {
    use comm::tagged::OpError as O;
    match e {
        O::Truncated { .. } => (fi::FI_ETRUNC, ProvErrno::Truncated),
        O::Canceled => (fi::FI_ECANCELED, ProvErrno::Canceled),
        O::NoMessage => (fi::FI_ENOMSG, ProvErrno::NoMessage),
        O::PeerUnreachable { .. } => (fi::FI_EHOSTUNREACH, ProvErrno::PeerUnreachable),
    }
}

impl fmt::Display for FiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (FI_E code {})", self.msg, self.code)
    }
}

impl std::error::Error for FiError {}

/// Result of a provider operation.
pub type FiResult<T> = Result<T, FiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_fi_codes() {
        let e = FiError::io(
            "open",
            &io::Error::new(io::ErrorKind::PermissionDenied, "CAP_NET_RAW"),
        );
        assert_eq!(e.code, fi::FI_EACCES);
        assert_eq!(e.ret(), -(libc::EACCES));
        assert!(e.msg.contains("CAP_NET_RAW"));
        let e = FiError::io("send", &io::ErrorKind::WouldBlock.into());
        assert_eq!(e.ret(), -(libc::EAGAIN));
        assert_eq!(e.prov, ProvErrno::Link);
    }

    #[test]
    fn every_prov_errno_has_a_description() {
        for n in 0..=7 {
            assert!(
                prov_errno_str(n).contains("provider error")
                    || prov_errno_str(n).starts_with("clusternet:")
            );
        }
        assert!(prov_errno_str(99).contains("unknown"));
    }
}
