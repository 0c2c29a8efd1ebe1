//! The interface between the runtime and the protocol sockets living in it.
//!
//! Every protocol socket of a runtime (an EDP datagram socket, an ESP
//! connection or listener, a CTP-over-EDP endpoint, a multicast member) is a
//! [`Socket`] stored in a *slot*. The runtime demultiplexes each received
//! frame to one slot and calls [`Socket::on_frame`]; it calls
//! [`Socket::on_timeout`] once [`Socket::poll_timeout`] has passed and
//! [`Socket::poll_transmit`] whenever the socket was touched. The socket's
//! user-visible handle (e.g. `EspStream`) reaches its state through the
//! runtime's lock (`EthEngine::socket_mut`, a downcast of the slot's
//! `dyn Socket`, which is `Any`).
//!
//! Sockets do no I/O and read no clock: `now` comes in [`Cx`]. The runtime
//! parses each frame's Ethernet header and port header once, checks them
//! (length within the link's largest frame, destination ours or a group,
//! source unicast and not ours, frame authentication) and hands them down
//! in an [`RxFrame`]: a socket parses only its own protocol's header.

use std::any::Any;
use std::time::Instant;

use link::eth::{EthernetRepr, MacAddr};

use crate::addr::EthAddr;

use crate::slot::{GatherRef, SlotId};
use crate::tx::TxQueue;

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
    pub from: Option<EthAddr>,
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
    pub key: crate::demux::DemuxKey,
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
    /// calling slot (which stays its parent: see [`Socket::on_child`]).
    pub fn spawn(&mut self, spawn: Spawn) {
        self.spawned.push((self.slot, spawn));
    }
}

/// A received frame, parsed once by the runtime and handed to its slot
/// (smoltcp's `iface` hands each socket the header it parsed). Borrowed
/// from the ring or batch buffer for the duration of the call.
#[derive(Debug, Clone, Copy)]
pub struct RxFrame<'a> {
    /// The Ethernet II header: `dst` is this interface or a group, `src` a
    /// unicast address other than ours, `ethertype` the slot's.
    pub eth: EthernetRepr,
    /// The sender's port (the port header's first field).
    pub src_port: u16,
    /// The receiver's port.
    pub dst_port: u16,
    /// The Ethernet payload: the protocol's header (which starts with the
    /// port header) and its payload, Ethernet padding included, an
    /// authentication trailer removed. At most the link MTU, bytes.
    pub packet: &'a [u8],
}

impl RxFrame<'_> {
    /// The sender: its MAC and port.
    pub fn from(&self) -> EthAddr {
        EthAddr::new(self.eth.src, self.src_port)
    }
}

/// What happened to a child slot (a connection a listener spawned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEvent {
    /// Inserted under its id; a listener keeps it for `accept`.
    Adopted,
    /// Its readiness changed (a half-open connection became established,
    /// or failed).
    Ready(Ready),
    /// Removed from the runtime.
    Gone,
}

/// What a socket tells the runtime once, when it is inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traits {
    /// Whether the socket ever sends from `poll_transmit` (datagram
    /// sockets send from their handle's call and are never put on the
    /// transmit list).
    pub transmits: bool,
    /// Whether the socket ever has a deadline ([`Socket::poll_timeout`]);
    /// a socket without timers (a datagram socket) saves the runtime a look
    /// at its deadline after every frame.
    pub timed: bool,
}

impl Default for Traits {
    fn default() -> Self {
        Traits {
            transmits: true,
            timed: true,
        }
    }
}

/// A protocol socket living in a runtime slot. See the module documentation.
///
/// Five methods make a protocol (quinn-proto's `handle_event`,
/// `handle_timeout`, `poll_transmit`, `poll_timeout` and readiness):
/// [`on_frame`](Socket::on_frame), [`on_timeout`](Socket::on_timeout),
/// [`poll_transmit`](Socket::poll_transmit),
/// [`poll_timeout`](Socket::poll_timeout) and
/// [`readiness`](Socket::readiness). The others have defaults and serve
/// what only some protocols do: gathered payload, a reader's buffer on
/// offer, lingering close, children, authentication by negotiation, and
/// hints that let the runtime skip work.
pub trait Socket: Any + Send {
    /// A frame demultiplexed to this slot. The socket validates its own
    /// header completely before changing any state; malformed frames are
    /// counted and dropped.
    fn on_frame(&mut self, cx: &mut Cx<'_>, frame: RxFrame<'_>);

    /// Called when `cx.now` has reached [`Socket::poll_timeout`].
    fn on_timeout(&mut self, cx: &mut Cx<'_>);

    /// Queues the frames the socket has to send into `tx` until it is full
    /// or the socket has nothing left; the runtime calls it again after
    /// sending a full batch.
    fn poll_transmit(&mut self, cx: &mut Cx<'_>, tx: &mut TxQueue);

    /// The earliest instant at which [`Socket::on_timeout`] must run.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Current readiness, from protocol state.
    fn readiness(&self) -> Ready;

    /// Like [`Socket::on_frame`], with the waiting reader's buffer on
    /// offer (see [`DirectRead`]). The default ignores the offer.
    fn on_frame_direct(
        &mut self,
        cx: &mut Cx<'_>,
        frame: RxFrame<'_>,
        direct: &mut DirectRead<'_>,
    ) {
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

    /// What the runtime may assume of this socket for its whole life. Read
    /// once, at insertion. Default: it transmits and has timers.
    fn traits(&self) -> Traits {
        Traits::default()
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

    /// Something happened to child `id`, a slot this socket spawned
    /// ([`Cx::spawn`]).
    fn on_child(&mut self, id: SlotId, event: ChildEvent) {
        let _ = (id, event);
    }
}
