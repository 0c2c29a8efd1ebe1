//! [`CommError`]: what a communicator call can fail with.

use std::time::Duration;

use crate::matching::{PostError, Tag, MAX_TAG};

/// Errors of the communicator's calls.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// A rank outside `0..size`.
    #[error("rank {rank} out of range: the communicator has {size} ranks")]
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The communicator's size.
        size: usize,
    },
    /// A tag above [`MAX_TAG`].
    #[error("tag {0} above the largest tag {MAX_TAG}")]
    InvalidTag(Tag),
    /// The message exceeds `CommConfig::max_message_bytes`.
    #[error(
        "message of {len} bytes exceeds the limit of {max} bytes (CommConfig::max_message_bytes)"
    )]
    TooLarge {
        /// Message length, bytes.
        len: u64,
        /// The limit, bytes.
        max: u64,
    },
    /// The peer failed or is implicitly disconnected: CTP got no
    /// confirmation from it in time ("not confirmed", CTP spec). Writes to it
    /// and receives naming it fail while it lasts; messages accepted before
    /// are kept and still delivered, and the state ends by itself when the
    /// peer answers again (ULFC implicit disconnect, `flow.rs`). A fragment
    /// CTP refused outright fails the peer for good.
    #[error("rank {rank} failed: {reason}")]
    PeerFailed {
        /// The failed rank.
        rank: usize,
        /// What CTP reported.
        reason: String,
    },
    /// The peer is explicitly disconnected (ULFC `disconnect`): writes to
    /// it fail until `reconnect`; messages accepted before are kept.
    #[error("rank {rank} is disconnected (Communicator::disconnect): call reconnect({rank}) before writing to it; messages accepted before are kept and sent after reconnect")]
    Disconnected {
        /// The disconnected rank.
        rank: usize,
    },
    /// A sequence reset while messages to the peer are queued or
    /// unconfirmed.
    #[error("sequence reset toward rank {rank} refused: {pending} messages queued and {in_flight} fragments unconfirmed; wait for the sends to complete (Communicator::flush) first")]
    ResetBusy {
        /// The peer.
        rank: usize,
        /// Messages queued for it.
        pending: usize,
        /// Fragments handed to CTP and unconfirmed.
        in_flight: usize,
    },
    /// `CommConfig::max_pending_fragments` fragments already wait for the window.
    #[error("{pending} fragments already wait for the send window (CommConfig::max_pending_fragments): wait for earlier sends first")]
    SendQueueFull {
        /// Fragments waiting.
        pending: usize,
    },
    /// `CommConfig::max_requests` requests are unfinished.
    #[error("{0} requests unfinished (CommConfig::max_requests): wait for some first")]
    TooManyRequests(usize),
    /// The posted-receive queue is full.
    #[error(transparent)]
    Post(#[from] PostError),
    /// A wait cannot finish: the unexpected-message queue is full of
    /// messages no posted receive takes, and a message behind them is held.
    #[error("unexpected-message queue full ({queued} messages, {queued_bytes} bytes) and no posted receive takes them: receive them or raise CommConfig::limits")]
    UnexpectedQueueFull {
        /// Messages queued.
        queued: usize,
        /// Bytes queued.
        queued_bytes: u64,
    },
    /// The received message is longer than the buffer (MPI's `MPI_ERR_TRUNCATE`,
    /// MPI 4.0 section 3.2.4); the message is consumed.
    #[error(
        "message of {len} bytes from rank {from} tag {tag} does not fit the {buf}-byte buffer"
    )]
    Truncated {
        /// Message length, bytes.
        len: usize,
        /// Buffer length, bytes.
        buf: usize,
        /// Source rank.
        from: usize,
        /// Tag.
        tag: Tag,
    },
    /// The request is not known (already completed by `wait`, or from another communicator).
    #[error("unknown request {0}: already completed or from another communicator")]
    UnknownRequest(u64),
    /// The ranks disagree in a collective call (e.g. lengths).
    #[error("collective: {0}")]
    Collective(String),
    /// `wait_any` got no requests.
    #[error("wait_any got no requests")]
    NoRequests,
    /// A blocking call waited `CommConfig::wait_timeout`.
    #[error("{what} did not complete within {after:?} (CommConfig::wait_timeout)")]
    TimedOut {
        /// What was waited for.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The transport failed.
    #[error("transport: {0}")]
    Io(#[from] std::io::Error),
    /// A peer id that is not (or no longer) in the endpoint's peer table.
    #[error("peer {0} is not in the peer table (never inserted, or removed)")]
    UnknownPeer(usize),
    /// A tagged endpoint's completion queue has no room for the operation's
    /// completion (libfabric's `FI_EAGAIN` under `FI_RM_ENABLED`).
    #[error("completion queue full ({0} completions queued or due): read completions first")]
    CompletionQueueFull(usize),
    /// A bootstrap (host list) error.
    #[error("bootstrap: {0}")]
    Bootstrap(String),
}
