//! The interface between the runtime and the protocol sockets living in it.
//!
//! Every protocol socket of a runtime (an EDP datagram socket, an ESP
//! connection or listener, a CTP-over-EDP endpoint, a multicast member) is a
//! [`Socket`] stored in a *slot*. The runtime demultiplexes each received
//! frame to one slot and calls [`Socket::on_frame`]; it calls
//! [`Socket::on_timeout`] once [`Socket::poll_timeout`] has passed and
//! [`Socket::poll_transmit`] whenever the socket was touched. The socket's
//! user-visible handle (e.g. `EspStream`) reaches its state through the
//! runtime's lock and [`Socket::as_any_mut`].
//!
//! Sockets do no I/O and read no clock: `now` comes in [`Cx`].

use std::any::Any;
use std::time::Instant;

use link::eth::MacAddr;

use super::tx::TxQueue;

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

bitflags::bitflags! {
    /// Readiness of a socket, derived from protocol state (not from the
    /// kernel): data buffered but unread is readable.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Ready: u8 {
        /// A read (or accept) would return something: data, EOF, an error.
        const READABLE = 1;
        /// A write would accept at least one byte or fail with an error.
        const WRITABLE = 2;
        /// The socket has failed or is closed for good.
        const ERROR = 4;
        /// The peer does not answer (a connection's retransmissions or
        /// probes went unanswered): suspected, not dead; the protocol keeps
        /// trying until its user timeout. `mio` registrations are signalled
        /// when it appears, whatever their interest.
        const UNRESPONSIVE = 8;
    }
}

impl Ready {
    /// Nothing (`Ready::empty()`).
    pub const NONE: Ready = Ready::empty();
}

/// A payload reference a socket attaches to a frame it queued: the runtime
/// later asks the socket for the bytes ([`Socket::gather`]) and hands them
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

/// A waiting reader's buffer, offered to its socket while the reader drives
/// the runtime: a socket with nothing buffered may place received payload
/// straight into it (kernel TCP's "copy to user": one copy from the ring
/// slot or batch buffer, none through an intermediate queue).
#[derive(Debug)]
pub struct DirectRead<'a> {
    /// The reader's buffer.
    pub buf: &'a mut [u8],
    /// Bytes placed so far.
    pub filled: usize,
    /// For datagram sockets: the sender of the datagram placed, and whether
    /// it was larger than `buf` (truncated). A datagram socket places at
    /// most one datagram.
    pub from: Option<(MacAddr, u16)>,
    /// Length of the placed datagram before truncation.
    pub datagram_len: usize,
}

impl<'a> DirectRead<'a> {
    /// An empty offer of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self {
            buf,
            filled: 0,
            from: None,
            datagram_len: 0,
        }
    }
}

/// A socket created by another socket while handling a frame (a listener
/// spawning a connection): the runtime inserts it after the call returns.
pub struct Spawn {
    /// The connection's demultiplexing key.
    pub key: super::demux::DemuxKey,
    /// The new socket.
    pub socket: Box<dyn Socket>,
}

/// What a socket sees of the runtime while handling an event.
pub struct Cx<'a> {
    /// The current time (read once per runtime turn).
    pub now: Instant,
    /// The interface's MAC address.
    pub mac: MacAddr,
    /// Link MTU: the largest Ethernet payload, bytes.
    pub mtu: usize,
    /// The slot being called.
    pub slot: SlotId,
    /// Frame authentication's verdict on the frame being delivered
    /// ([`crate::auth::TagStatus::Off`] outside `on_frame` and when the
    /// runtime has no key).
    pub tag: crate::auth::TagStatus,
    pub(crate) spawned: &'a mut Vec<(SlotId, Spawn)>,
}

impl Cx<'_> {
    /// Asks the runtime to add `spawn` as a new slot, on behalf of the
    /// calling slot (which stays its parent: see [`Socket::adopt`]).
    pub fn spawn(&mut self, spawn: Spawn) {
        self.spawned.push((self.slot, spawn));
    }
}

/// A protocol socket living in a runtime slot. See the module documentation.
pub trait Socket: Send + 'static {
    /// A frame demultiplexed to this slot (whole Ethernet frame, borrowed
    /// from the ring or batch buffer for the duration of the call). The
    /// socket validates it completely before changing any state; malformed
    /// frames are counted and dropped.
    fn on_frame(&mut self, cx: &mut Cx<'_>, frame: &[u8]);

    /// Like [`Socket::on_frame`], with the waiting reader's buffer on
    /// offer (see [`DirectRead`]). The default ignores the offer.
    fn on_frame_direct(&mut self, cx: &mut Cx<'_>, frame: &[u8], direct: &mut DirectRead<'_>) {
        let _ = direct;
        self.on_frame(cx, frame);
    }

    /// Whether the socket takes frames that failed frame authentication
    /// (`cx.tag` = [`crate::auth::TagStatus::Unverified`]) when the runtime
    /// has a cluster key. Default false: such frames are dropped (counted
    /// in `EngineStats::auth`) before the socket sees them. ESP listeners
    /// (to answer a SYN from a host without the key with a refusal) and
    /// ESP connections negotiated to method `none` say true, and check the
    /// status before any state changes. Asked for every such frame.
    fn accepts_unverified(&self) -> bool {
        false
    }

    /// Called when `cx.now` has reached [`Socket::poll_timeout`].
    fn on_timeout(&mut self, cx: &mut Cx<'_>);

    /// Queues the frames the socket has to send into `tx` until it is full
    /// or the socket has nothing left; the runtime calls it again after
    /// sending a full batch.
    fn poll_transmit(&mut self, cx: &mut Cx<'_>, tx: &mut TxQueue);

    /// The payload bytes a frame referenced with `r`, as at most two pieces
    /// (a ring buffer's two halves). Only called for references this socket
    /// queued in the same `poll_transmit` round.
    fn gather(&self, r: GatherRef) -> (&[u8], &[u8]) {
        let _ = r;
        (&[], &[])
    }

    /// A frame this socket queued was not sent (the link refused it: a full
    /// queue); reliable sockets recover by retransmission and count it.
    fn on_send_failed(&mut self) {}

    /// The earliest instant at which [`Socket::on_timeout`] must run.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Current readiness, from protocol state.
    fn readiness(&self) -> Ready;

    /// Whether the socket ever sends from `poll_transmit` (datagram sockets
    /// send from their handle's call and are never put on the transmit
    /// list). Read once, at insertion.
    fn transmits(&self) -> bool {
        true
    }

    /// Whether the socket ever has a deadline ([`Socket::poll_timeout`]);
    /// a socket without timers (a datagram socket) saves the runtime a
    /// look at its deadline after every frame. Read once, at insertion.
    fn timed(&self) -> bool {
        true
    }

    /// Whether the socket has more to transmit than it queued (the runtime
    /// keeps it on its transmit list).
    fn wants_transmit(&self) -> bool {
        false
    }

    /// Whether [`Socket::poll_transmit`] may queue a frame now; asked after
    /// every event of the socket (a frame, a timer, its handle's call).
    /// False lets the runtime skip the socket's transmit turn: a stream
    /// whose ACK is delayed sends nothing after an in-order data segment,
    /// and its reader returns without the turn. Must be true whenever
    /// `poll_transmit` would queue something (true does not promise a
    /// frame). Default true.
    fn transmit_due(&self) -> bool {
        true
    }

    /// Called before a caller sleeps in the kernel: send now what would
    /// otherwise wake the sleeper soon (a delayed ACK).
    fn before_sleep(&mut self, now: Instant) {
        let _ = now;
    }

    /// Whether something a waiting thread may want happened since the last
    /// call (clears it): the slot is then reported as changed even when
    /// its readiness is the same, so every thread waiting on it looks
    /// again. For sockets whose callers wait for different things on one
    /// slot (a layer above CTP completing requests of several threads).
    /// Default false.
    fn take_wake(&mut self) -> bool {
        false
    }

    /// The handle was dropped. Returns true when the slot may be removed at
    /// once; false to linger (the runtime keeps driving it until
    /// [`Socket::is_finished`]).
    fn on_handle_dropped(&mut self, now: Instant) -> bool {
        let _ = now;
        true
    }

    /// Whether a lingering socket has nothing left to do.
    fn is_finished(&self) -> bool {
        true
    }

    /// A child slot this socket spawned was inserted under `id`; a listener
    /// keeps it for `accept`.
    fn adopt(&mut self, id: SlotId) {
        let _ = id;
    }

    /// The readiness of child `id` changed to `ready` (a half-open
    /// connection became established, or failed).
    fn on_child_ready(&mut self, id: SlotId, ready: Ready) {
        let _ = (id, ready);
    }

    /// Child `id` was removed from the runtime.
    fn on_child_gone(&mut self, id: SlotId) {
        let _ = id;
    }

    /// The socket as `Any`, for its handle to reach its concrete type.
    fn as_any(&self) -> &dyn Any;

    /// The socket as `Any`, mutably.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}
