//! What the tagged endpoint (`tagged.rs`) reports: completions of its
//! operations, in a bounded queue, and the caller-owned receive buffers
//! the messages are copied into. Shapes follow `fi_cq(3)`'s
//! `fi_cq_tagged_entry` and `fi_cq_err_entry`.

/// A peer of a tagged endpoint: a dense small integer given by
/// [`TaggedEndpoint::insert_peer`](crate::tagged::TaggedEndpoint::insert_peer)
/// (a libfabric provider uses it as the `fi_addr_t` of both `FI_AV_MAP`
/// and `FI_AV_TABLE`). Ids are never reused within an endpoint.
pub type PeerId = usize;

/// A caller-owned receive buffer: a posted receive's message is copied
/// straight into it (inside the engine turn that completed the message;
/// a rendezvous's parts as they arrive), and it is handed back with the
/// completion. A C ABI wraps its raw pointer in its own audited `unsafe`
/// module. CTP's own trait: a pulled message's parts are placed into it
/// by the CTP endpoint.
pub use ctp::RecvBuf;

/// The caller's own send buffer, kept until its send completes: a message
/// sent by rendezvous is pulled from it without a copy (CTP's trait).
pub use ctp::SendBuf;

/// Which operation completed (`FI_SEND` / `FI_RECV` in `fi_cq(3)`'s flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// A send.
    Send,
    /// A receive, or a peek / claim / discard.
    Recv,
}

/// Why an operation completed in error (`fi_cq_readerr(3)`'s `err`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// The message was longer than the buffer (`FI_ETRUNC`; MPI's
    /// `MPI_ERR_TRUNCATE`): the completion's `len` bytes were copied.
    #[error("message of {olen} bytes truncated to the buffer")]
    Truncated {
        /// The message's whole length, bytes (`olen`).
        olen: u64,
    },
    /// Cancelled (`fi_cancel(3)`; `FI_ECANCELED`).
    #[error("operation canceled")]
    Canceled,
    /// A peek found no matching message (`FI_ENOMSG`).
    #[error("no matching message")]
    NoMessage,
    /// The peer failed or was removed: the operation cannot complete
    /// (`FI_EHOSTUNREACH`).
    #[error("peer {peer} unreachable: {reason}")]
    PeerUnreachable {
        /// The peer.
        peer: PeerId,
        /// What happened to it.
        reason: String,
    },
}

/// A completion (`fi_cq_tagged_entry`, with the error of
/// `fi_cq_err_entry` when the operation failed).
pub struct TaggedCompletion {
    /// The operation's context, as given when it was posted.
    pub context: u64,
    /// Send or receive.
    pub kind: OpKind,
    /// Bytes transferred: sent, or copied into the buffer (for a peek, the
    /// message's length).
    pub len: u64,
    /// The message's tag (receives and peeks).
    pub tag: u64,
    /// The message's remote CQ data, if sent with it (receives and peeks).
    pub data: Option<u64>,
    /// The sender (receives and peeks).
    pub source: Option<PeerId>,
    /// `None` on success.
    pub error: Option<OpError>,
    /// The receive's buffer, handed back (receives only).
    pub buf: Option<Box<dyn RecvBuf>>,
}

impl std::fmt::Debug for TaggedCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaggedCompletion")
            .field("context", &self.context)
            .field("kind", &self.kind)
            .field("len", &self.len)
            .field("tag", &format_args!("{:#x}", self.tag))
            .field("data", &self.data)
            .field("source", &self.source)
            .field("error", &self.error)
            .field("buf", &self.buf.as_ref().map(|_| "RecvBuf"))
            .finish()
    }
}
