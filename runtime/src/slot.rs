//! A slot's identity and the payload references of its queued frames: the
//! small types the demultiplexing table, the transmit queue and the
//! protocol sockets all name.

/// The identity of a slot: its index and a generation that changes when the
/// index is reused, so a stale handle never reaches another socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl SlotId {
    /// A slot id for tests and single-slot engines.
    pub const FIRST: SlotId = SlotId {
        index: 0,
        generation: 0,
    };
}

/// A payload reference a socket attaches to a frame it queued: the runtime
/// later asks the socket for the bytes ([`Socket::gather`](crate::protocol::Socket::gather)) and hands them
/// to sendmmsg(2) as separate iovecs, so payload goes from the socket's
/// buffer straight into the kernel (one copy, as kernel TCP). `tag`
/// identifies the buffer inside the socket (e.g. a listener's connection),
/// `offset` and `len` the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GatherRef {
    /// Socket-defined buffer identity.
    pub tag: u64,
    /// Offset of the first byte in that buffer (e.g. a stream offset).
    pub offset: u64,
    /// Bytes, at most one frame's payload.
    pub len: usize,
}
