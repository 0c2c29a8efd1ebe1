//! Requests of nonblocking operations (MPI 4.0 section 3.7): handles,
//! statuses, completions.

use crate::completion::RecvBuf;
use crate::matching::{SourceSel, Tag};
use crate::CommError;

/// The status of a received message (MPI's `MPI_Status`, section 3.2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    /// Sending rank.
    pub source: usize,
    /// Tag.
    pub tag: Tag,
    /// Length, bytes.
    pub len: usize,
}

/// A pending nonblocking operation (MPI's `MPI_Request`). Complete it with
/// [`Communicator::wait`](crate::Communicator::wait) or
/// [`wait_any`](crate::Communicator::wait_any) (or cancel a receive); its
/// state is kept in the communicator until then.
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a request must be completed with wait or wait_any"]
pub struct Request {
    pub(crate) id: u64,
}

impl Request {
    /// The request's number in its communicator.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// What a completed request yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// A send: all its bytes were handed to CTP (the buffer is free, MPI's
    /// local completion of a standard-mode send, section 3.4).
    Sent {
        /// Destination rank.
        dest: usize,
        /// Tag.
        tag: Tag,
        /// Length, bytes.
        len: usize,
    },
    /// A receive: the status and the message.
    Received(Status, Vec<u8>),
}

impl Completion {
    /// The received status and message; `None` for a send.
    pub fn into_received(self) -> Option<(Status, Vec<u8>)> {
        match self {
            Completion::Received(s, d) => Some((s, d)),
            Completion::Sent { .. } => None,
        }
    }
}

/// How a tagged endpoint's operation reports (`crate::tagged`): its
/// context, and whether it makes a completion (an inject does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TaggedOp {
    pub context: u64,
    pub completion: bool,
}

/// A tagged receive's buffer.
pub(crate) struct Sink(pub Box<dyn RecvBuf>);

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecvBuf")
    }
}

/// A request's state inside the communicator.
#[derive(Debug)]
pub(crate) enum ReqState {
    Send {
        dest: usize,
        tag: u64,
        len: usize,
        /// Fragments not yet handed to CTP.
        left: usize,
        failed: Option<CommError>,
        /// A tagged endpoint's send: completes into its queue.
        op: Option<TaggedOp>,
    },
    Recv {
        /// Collective context (else point-to-point).
        coll: bool,
        source: SourceSel,
        done: Option<Result<(Status, Vec<u8>), CommError>>,
    },
    /// A tagged endpoint's receive: the message is copied into `buf` and
    /// the request completes into the endpoint's queue at once.
    TaggedRecv {
        context: u64,
        source: Option<usize>,
        buf: Sink,
    },
}

impl ReqState {
    pub(crate) fn is_complete(&self) -> bool {
        match self {
            ReqState::Send { left, failed, .. } => *left == 0 || failed.is_some(),
            ReqState::Recv { done, .. } => done.is_some(),
            ReqState::TaggedRecv { .. } => false,
        }
    }

    /// The completion of a complete request.
    pub(crate) fn finish(self) -> Result<Completion, CommError> {
        match self {
            ReqState::Send {
                failed: Some(e), ..
            } => Err(e),
            // MPI's tags are the low 32 bits.
            ReqState::Send { dest, tag, len, .. } => Ok(Completion::Sent {
                dest,
                tag: tag as Tag,
                len,
            }),
            ReqState::Recv { done, .. } => {
                let (s, d) = done.expect("finish() only on complete requests")?;
                Ok(Completion::Received(s, d))
            }
            ReqState::TaggedRecv { .. } => {
                unreachable!("tagged receives complete into their queue")
            }
        }
    }
}
