//! What an [`Endpoint`](super::Endpoint) hands out: deliveries (received data
//! or errors, spec `CCTPReceivedData` / `CCTPErrorInfo`), datagrams to send
//! ([`Transmit`], [`GatherTransmit`]), send errors; and the bounded
//! deliveries storage itself ([`DeliveryQueue`]).

use std::collections::VecDeque;
use std::fmt;
use std::time::{Instant, SystemTime};

use crate::id::MsgId;

/// A datagram to send: `len` bytes were written to the buffer given to
/// [`Endpoint::poll_transmit`](super::Endpoint::poll_transmit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit<P> {
    /// Destination.
    pub dest: P,
    /// Datagram length in bytes (header + data part).
    pub len: usize,
}

/// A datagram to send in two pieces, from
/// [`Endpoint::poll_transmit_gather`](super::Endpoint::poll_transmit_gather):
/// the CTP header (`header_len` = 25 bytes, written into the caller's
/// buffer) followed by the bytes [`Endpoint::payload`](super::Endpoint::payload)
/// resolves `payload` to, inside the stored message (no copy). A
/// confirmation has an empty payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherTransmit<P> {
    /// Destination.
    pub dest: P,
    /// Bytes of header written, always [`CTP_HEADER_LEN`](crate::wire::CTP_HEADER_LEN).
    pub header_len: usize,
    /// The data part, to resolve with `Endpoint::payload`.
    pub payload: PayloadRef,
    /// The packet is a confirmation (header only).
    pub confirm: bool,
}

impl<P> GatherTransmit<P> {
    /// Datagram length in bytes (header + data part).
    pub fn len(&self) -> usize {
        self.header_len + self.payload.len()
    }

    /// Always false: a datagram has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Where the data part of a [`GatherTransmit`] lies: a byte range of a
/// message in the sent-commands storage. Resolve it with
/// [`Endpoint::payload`](super::Endpoint::payload) before the endpoint is
/// changed by anything other than `poll_transmit_gather` (a confirmation may
/// remove the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PayloadRef {
    pub(crate) msg: MsgId,
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// The range is of an offered message's body (a pulled part), not of
    /// its stored data part.
    pub(crate) body: bool,
}

impl PayloadRef {
    /// No data (a confirmation, an empty command).
    pub const EMPTY: PayloadRef = PayloadRef {
        msg: 0,
        start: 0,
        end: 0,
        body: false,
    };

    /// Length of the data part, bytes.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// True for no data.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// Received data (spec `CCTPReceivedData`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedData<P> {
    /// Command number, 0..=32767.
    pub command: u16,
    /// Message size in bytes (= `data.len()`).
    pub size: u64,
    /// The sender.
    pub from: P,
    /// True if the message was broadcast.
    pub broadcast: bool,
    /// The message.
    pub data: Vec<u8>,
    /// The message is the announcement of a body the receiver pulls
    /// ([`Endpoint::pull`](super::Endpoint::pull)); `data` is what the
    /// sender put in front of it.
    pub offer: Option<Offer>,
}

/// An offered body, as its announcement tells it (PROTOCOL.md "Pulled
/// messages"): pull it with [`Endpoint::pull`](super::Endpoint::pull).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Offer {
    /// The announcement's packet id: the body's handle at its sender.
    pub handle: u32,
    /// The body's size, bytes.
    pub size: u64,
    /// The largest part the sender sends, bytes.
    pub part: u32,
    /// The announcement's command.
    pub command: u16,
}

/// A pull that ended ([`Endpoint::poll_pulled`](super::Endpoint::poll_pulled)):
/// its buffer back, with the bytes placed, or why it failed.
pub struct Pulled<P> {
    /// The pull, as [`Endpoint::pull`](super::Endpoint::pull) returned it.
    pub id: crate::id::PullId,
    /// The sender.
    pub from: P,
    /// Bytes placed at the front of `sink`: the body's size, or the
    /// buffer's length if shorter.
    pub len: u64,
    /// The buffer given to the pull.
    pub sink: Box<dyn crate::RecvBuf>,
    /// `None` when every byte wanted arrived; `NotConfirmed` when the
    /// sender was silent for the user timeout.
    pub error: Option<ErrorType>,
}

impl<P: fmt::Debug> fmt::Debug for Pulled<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pulled")
            .field("id", &self.id)
            .field("from", &self.from)
            .field("len", &self.len)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// What went wrong (the `type` of spec `CCTPErrorInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorType {
    /// "Command is not confirmed too long" (spec): a packet was resent
    /// `max_resends` times (or, with NoResend, waited as long) unconfirmed.
    NotConfirmed = 1,
    /// A large message from `peer` does not fit the reassembly memory limits
    /// (`Config::max_reassembly_bytes`, `max_reassembly_bytes_per_peer`);
    /// its parts are left unconfirmed.
    ReassemblyLimit = 2,
    /// A large message from `peer` got no new part for `reassembly_idle_timeout`
    /// and was dropped.
    ReassemblyAbandoned = 3,
    /// Memory for a message could not be allocated.
    OutOfMemory = 4,
    /// The transport failed to send or receive (set by the driver; `code` is
    /// the OS error number).
    Transport = 5,
    /// Error deliveries beyond `Config::max_queued_errors` were dropped;
    /// `code` is how many (not in the spec: its deliveries storage is
    /// unbounded).
    Suppressed = 6,
    /// `peer` confirmed nothing for a while (`code`: milliseconds since its
    /// last confirmation) and a packet to it reached the spec's "not
    /// confirmed" deadline: it is suspected, not dead; its messages are
    /// resent until `Config::user_timeout` passes without a confirmation,
    /// and only then fail with [`ErrorType::NotConfirmed`]. One delivery
    /// per suspicion (not in the spec).
    Unresponsive = 7,
}

/// An error delivery (spec `CCTPErrorInfo`: type, code, address, timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorInfo<P> {
    /// What went wrong.
    pub kind: ErrorType,
    /// Type-specific code: transmissions made for NotConfirmed, the message
    /// size for reassembly errors, the errno for Transport, the number of
    /// errors dropped for Suppressed.
    pub code: i64,
    /// The peer concerned (the broadcast address for a broadcast command).
    pub peer: Option<P>,
    /// The command concerned, if any.
    pub command: Option<u16>,
    /// The message concerned (as returned by `send`), for sender-side errors.
    pub msg: Option<MsgId>,
    /// When the error happened (monotonic).
    pub at: Instant,
    /// When the error happened (wall clock), taken at the error, not at delivery (spec).
    pub timestamp: SystemTime,
}

impl<P: fmt::Debug> fmt::Display for ErrorInfo<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ErrorType::NotConfirmed => "command is not confirmed too long",
            ErrorType::ReassemblyLimit => "large message refused: reassembly memory limit",
            ErrorType::ReassemblyAbandoned => "large message incomplete: no part for too long",
            ErrorType::OutOfMemory => "out of memory for a message",
            ErrorType::Transport => "transport error",
            ErrorType::Suppressed => "error deliveries dropped: too many queued",
            ErrorType::Unresponsive => {
                "peer unresponsive: suspected, not dead (resending until the user timeout)"
            }
        };
        write!(f, "{what} (code {}", self.code)?;
        if let Some(c) = self.command {
            write!(f, ", command {c}")?;
        }
        if let Some(p) = &self.peer {
            write!(f, ", peer {p:?}")?;
        }
        write!(f, ")")
    }
}

/// A delivery (spec "Deliveries storage"): received data or an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery<P> {
    /// A complete message.
    Data(ReceivedData<P>),
    /// An error.
    Error(ErrorInfo<P>),
}

impl<P> Delivery<P> {
    /// The command the delivery is about, if any (for routing to subscribers).
    pub fn command(&self) -> Option<u16> {
        match self {
            Delivery::Data(d) => Some(d.command),
            Delivery::Error(e) => e.command,
        }
    }
}

/// Why `send` refused a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The command number has bit 15 set.
    #[error("command {0} out of range 0..=32767 (CTP spec table 1)")]
    CommandOutOfRange(u16),
    /// The message exceeds `Config::max_message_size` (or the packet count
    /// exceeds 2^32 - 1).
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Message size, bytes.
        size: u64,
        /// The limit, bytes.
        max: u64,
    },
    /// Broadcast asked for on a transport without a broadcast address.
    #[error("broadcast requested but this transport has no broadcast address")]
    NoBroadcast,
    /// The message (or its packet table) could not be allocated.
    #[error("out of memory for a message of {0} bytes")]
    OutOfMemory(u64),
    /// The sent-commands storage holds `stored` bytes awaiting confirmation;
    /// `size` more would exceed `limit`. Retry after confirmations arrive.
    #[error(
        "sent-commands storage full: {stored} bytes await confirmation, {size} more exceed the limit of {limit}"
    )]
    Full {
        /// Bytes stored, awaiting confirmation.
        stored: u64,
        /// Size of the refused message, bytes.
        size: u64,
        /// `Config::max_stored_bytes`.
        limit: u64,
    },
}

/// The deliveries storage (spec "Storages"), bounded: data deliveries by
/// count and bytes (the caller checks [`DeliveryQueue::has_data_room`] and
/// leaves a packet unconfirmed when there is none), error deliveries by
/// count with the excess coalesced into one [`ErrorType::Suppressed`].
#[derive(Debug)]
pub(crate) struct DeliveryQueue<P> {
    queue: VecDeque<Delivery<P>>,
    data: usize,
    data_bytes: u64,
    errors: usize,
    max_errors: usize,
    /// Errors dropped since the last `Suppressed` delivery was queued, and
    /// when the last of them happened.
    suppressed: u64,
    suppressed_at: Option<(Instant, SystemTime)>,
}

impl<P> DeliveryQueue<P> {
    /// An empty queue holding at most `max_errors` error deliveries (at
    /// least 1).
    pub fn new(max_errors: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            data: 0,
            data_bytes: 0,
            errors: 0,
            max_errors: max_errors.max(1),
            suppressed: 0,
            suppressed_at: None,
        }
    }

    /// True if a data delivery of `size` bytes fits: fewer than `max_count`
    /// queued and `max_bytes` not exceeded (one delivery of any size fits
    /// when no data is queued).
    pub fn has_data_room(&self, size: u64, max_count: usize, max_bytes: u64) -> bool {
        self.data < max_count
            && (self.data == 0 || self.data_bytes.saturating_add(size) <= max_bytes)
    }

    /// Queues received data (after [`has_data_room`](Self::has_data_room)).
    pub fn push_data(&mut self, d: ReceivedData<P>) {
        self.data += 1;
        self.data_bytes += d.data.len() as u64;
        self.queue.push_back(Delivery::Data(d));
    }

    /// Queues an error; false if it was dropped (the error queue is full and
    /// the error is not a NotConfirmed, which always queues: one per message
    /// the application sent).
    pub fn push_error(&mut self, e: ErrorInfo<P>) -> bool {
        self.flush_suppressed();
        if e.kind != ErrorType::NotConfirmed && self.errors >= self.max_errors {
            self.suppressed += 1;
            self.suppressed_at = Some((e.at, e.timestamp));
            return false;
        }
        self.errors += 1;
        self.queue.push_back(Delivery::Error(e));
        true
    }

    /// Queues the `Suppressed` summary once an error fits again.
    fn flush_suppressed(&mut self) {
        if self.suppressed == 0 || self.errors >= self.max_errors {
            return;
        }
        let (at, timestamp) = self.suppressed_at.take().expect("set with suppressed");
        self.errors += 1;
        self.queue.push_back(Delivery::Error(ErrorInfo {
            kind: ErrorType::Suppressed,
            code: i64::try_from(self.suppressed).unwrap_or(i64::MAX),
            peer: None,
            command: None,
            msg: None,
            at,
            timestamp,
        }));
        self.suppressed = 0;
    }

    /// The oldest delivery.
    pub fn pop(&mut self) -> Option<Delivery<P>> {
        let d = self.queue.pop_front()?;
        match &d {
            Delivery::Data(x) => {
                self.data -= 1;
                self.data_bytes -= x.data.len() as u64;
            }
            Delivery::Error(_) => self.errors -= 1,
        }
        self.flush_suppressed();
        Some(d)
    }

    /// Deliveries queued (data and errors).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no delivery is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Message bytes in queued data deliveries.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Error deliveries queued.
    pub fn errors(&self) -> usize {
        self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(kind: ErrorType, at: Instant) -> ErrorInfo<u8> {
        ErrorInfo {
            kind,
            code: 0,
            peer: None,
            command: None,
            msg: None,
            at,
            timestamp: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn errors_beyond_the_cap_coalesce_into_one_suppressed() {
        let t = Instant::now();
        let mut q: DeliveryQueue<u8> = DeliveryQueue::new(2);
        for _ in 0..10 {
            q.push_error(err(ErrorType::ReassemblyLimit, t));
        }
        assert_eq!((q.len(), q.errors()), (2, 2));
        // a NotConfirmed always queues
        assert!(q.push_error(err(ErrorType::NotConfirmed, t)));
        assert_eq!(q.len(), 3);
        let kinds: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|d| match d {
                Delivery::Error(e) => (e.kind, e.code),
                Delivery::Data(_) => unreachable!(),
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                (ErrorType::ReassemblyLimit, 0),
                (ErrorType::ReassemblyLimit, 0),
                (ErrorType::NotConfirmed, 0),
                (ErrorType::Suppressed, 8),
            ]
        );
        assert_eq!(q.errors(), 0);
    }

    #[test]
    fn data_room_by_count_and_bytes() {
        let mut q: DeliveryQueue<u8> = DeliveryQueue::new(4);
        assert!(
            q.has_data_room(1000, 2, 100),
            "one large delivery fits an empty queue"
        );
        let d = |n| ReceivedData {
            command: 1,
            size: n as u64,
            from: 1,
            broadcast: false,
            data: vec![0; n],
            offer: None,
        };
        q.push_data(d(60));
        assert!(q.has_data_room(40, 2, 100));
        assert!(!q.has_data_room(41, 2, 100));
        q.push_data(d(10));
        assert!(!q.has_data_room(0, 2, 100), "count limit");
        q.pop();
        assert_eq!(q.data_bytes(), 10);
    }
}
