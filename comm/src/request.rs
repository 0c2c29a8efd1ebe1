//! Requests of nonblocking operations (MPI 4.0 section 3.7): handles,
//! statuses, completions.

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

/// A request's state inside the communicator.
#[derive(Debug)]
pub(crate) enum ReqState {
    Send {
        dest: usize,
        tag: Tag,
        len: usize,
        /// Fragments not yet handed to CTP.
        left: usize,
        failed: Option<CommError>,
    },
    Recv {
        /// Collective context (else point-to-point).
        coll: bool,
        source: SourceSel,
        done: Option<Result<(Status, Vec<u8>), CommError>>,
    },
}

impl ReqState {
    pub(crate) fn is_complete(&self) -> bool {
        match self {
            ReqState::Send { left, failed, .. } => *left == 0 || failed.is_some(),
            ReqState::Recv { done, .. } => done.is_some(),
        }
    }

    /// The completion of a complete request.
    pub(crate) fn finish(self) -> Result<Completion, CommError> {
        match self {
            ReqState::Send {
                failed: Some(e), ..
            } => Err(e),
            ReqState::Send { dest, tag, len, .. } => Ok(Completion::Sent { dest, tag, len }),
            ReqState::Recv { done, .. } => {
                let (s, d) = done.expect("finish() only on complete requests")?;
                Ok(Completion::Received(s, d))
            }
        }
    }
}
