//! Errors, quinn style: why a call failed ([`Error`]) apart from why a
//! connection died ([`ConnectionError`]).

use crate::auth::AuthMethod;

/// Why a connection died. Once set it stays (see
/// [`super::Connection::error`]) and every later call that needs a live
/// connection returns it as [`Error::ConnectionLost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// The peer reset the connection (RST with the exact sequence number,
    /// RFC 5961 sec. 3.2).
    #[error("connection reset by peer")]
    Reset,
    /// The peer answered the SYN with RST: no socket listens on that port.
    #[error("connection refused: no ESP listener on the peer's port")]
    Refused,
    /// Under the thesis's rule (no user timeout), a segment or probe was
    /// retransmitted `max_retransmissions` times without acknowledgement
    /// (or, with the thesis's `ESP_TIMEOUT_CONN`, the doubled RTO passed
    /// its maximum); or a SYN was retransmitted `max_syn_retransmissions`
    /// times: the peer is unreachable or dead.
    #[error(
        "connection timed out: no acknowledgement after the maximum number of retransmissions"
    )]
    TimedOut,
    /// The connection made no progress for the user timeout (RFC 5482's
    /// idea, `TransportConfig::user_timeout`): the peer stayed
    /// unresponsive, unreachable or dead, that long.
    #[error("connection timed out: no progress for the user timeout of {0:?} (the peer stayed unreachable or dead that long; raise TransportConfig::user_timeout to ride out longer outages)")]
    UserTimeout(std::time::Duration),
    /// This end aborted the connection (RST sent).
    #[error("connection aborted locally")]
    Aborted,
    /// Refused by negotiation (`crate::auth`): the peer requires this
    /// authentication method and this end did not offer it.
    #[error("connection refused: the peer requires authentication method {0}, which this end does not offer; set CLUSTERNET_KEY_FILE (or CLUSTERNET_KEY) to the cluster key")]
    AuthRequired(AuthMethod),
    /// Refused by negotiation: the peer accepts only methods this end does
    /// not allow (this end requires authentication, the peer has no key);
    /// the method is the peer's first choice.
    #[error("connection refused: the peer accepts authentication method {0} only, and this end requires authentication; give the peer the cluster key (CLUSTERNET_KEY_FILE), or allow method none here")]
    AuthUnavailable(AuthMethod),
    /// Refused by negotiation although both ends accept a common method
    /// with a tag: the peer could not verify this end's frames (the
    /// cluster keys differ).
    #[error("connection refused: the peer could not verify this end's frame tags; the cluster keys differ (check CLUSTERNET_KEY_FILE on both hosts)")]
    AuthFailed,
}

/// Why a call on a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Nothing to read yet, or no buffer space to write into: try again
    /// after the connection made progress (quinn's `Blocked`).
    #[error("operation would block")]
    Blocked,
    /// Write after `close()` (the sending side was shut down).
    #[error("write after shutdown of the sending side")]
    WriteShutdown,
    /// The connection is not (yet or any more) connected.
    #[error("not connected")]
    NotConnected,
    /// The connection died; the cause.
    #[error("{0}")]
    ConnectionLost(#[from] ConnectionError),
}

impl From<ConnectionError> for std::io::Error {
    fn from(e: ConnectionError) -> Self {
        use std::io::ErrorKind as K;
        let kind = match e {
            ConnectionError::Reset => K::ConnectionReset,
            ConnectionError::Refused => K::ConnectionRefused,
            ConnectionError::TimedOut | ConnectionError::UserTimeout(_) => K::TimedOut,
            ConnectionError::Aborted => K::ConnectionAborted,
            ConnectionError::AuthRequired(_)
            | ConnectionError::AuthUnavailable(_)
            | ConnectionError::AuthFailed => K::ConnectionRefused,
        };
        std::io::Error::new(kind, e)
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        use std::io::ErrorKind as K;
        let kind = match e {
            Error::Blocked => K::WouldBlock,
            Error::WriteShutdown => K::BrokenPipe,
            Error::NotConnected => K::NotConnected,
            Error::ConnectionLost(c) => return c.into(),
        };
        std::io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind as K;

    #[test]
    fn io_error_kinds_are_kept() {
        let kind = |e: Error| std::io::Error::from(e).kind();
        assert_eq!(kind(Error::Blocked), K::WouldBlock);
        assert_eq!(kind(Error::WriteShutdown), K::BrokenPipe);
        assert_eq!(kind(Error::NotConnected), K::NotConnected);
        for (c, k) in [
            (ConnectionError::Reset, K::ConnectionReset),
            (ConnectionError::Refused, K::ConnectionRefused),
            (ConnectionError::TimedOut, K::TimedOut),
            (ConnectionError::Aborted, K::ConnectionAborted),
        ] {
            assert_eq!(kind(Error::ConnectionLost(c)), k);
            assert_eq!(std::io::Error::from(c).kind(), k);
            assert_eq!(Error::from(c).to_string(), c.to_string());
        }
    }
}
