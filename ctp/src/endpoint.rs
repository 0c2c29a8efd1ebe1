//! The sans-IO CTP core: an [`Endpoint`] takes datagrams (`handle_datagram(now,
//! from, bytes)`) and timeouts (`handle_timeout(now)`), and yields datagrams to
//! send ([`Endpoint::poll_transmit`]), deliveries ([`Endpoint::poll_delivery`])
//! and its next deadline ([`Endpoint::poll_timeout`]). It does no I/O and reads
//! no clock: every instant is an argument, so tests run on a virtual clock.
//!
//! Rules (CTP spec v1.2, "Internal World"; details in PROTOCOL.md):
//! - every data packet is confirmed by a header-only confirmation; duplicates
//!   are confirmed again and never delivered twice (per-peer received-id list);
//! - a sent packet is kept until confirmed, resent with an exponentially
//!   growing period (1, 2, 4, ... timeouts); after 8 resends (511 timeouts
//!   after the first send) without a confirmation the sender gets a "not
//!   confirmed" error delivery;
//! - the per-peer timeout is 100 ms until the first exchange, then the measured
//!   time x 3 (here: max(3 x SRTT, SRTT + 4 x RTTVAR), RFC 6298, Karn's rule);
//! - large messages are split into parts of at most `data_size` bytes and
//!   delivered only when complete.
//!
//! Beyond the spec (wire-compatible): a per-destination send window (packets
//! and bytes in flight) so a large message does not overrun the receiver's
//! socket buffer; bounded reassembly memory, received-id lists and delivery
//! queue, each refusal reported or left to the sender's resends; on a live
//! link (the peer confirms other packets) a packet's resend period stops
//! growing at [`Config::max_resend_period`], while the error deadline stays
//! the spec's; a packet is resent early when one sent after it is confirmed
//! ([`Config::early_resend`], RFC 8985).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant, SystemTime};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::fxhash::{FxHashMap as HashMap, FxHashSet};
use crate::peer::{IdStatus, RecvIdList, SendTiming};
use crate::receiver::Reassembly;
use crate::sender::{Dest, PktPhase, PktState, SentMsg};
use crate::wire::{Options, Repr, HEADER_LEN, MAX_COMMAND, MAX_MESSAGE_SIZE, MAX_PACKET_LEN};

/// `now + d`, saturating far in the future instead of overflowing.
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(1 << 40)))
        .unwrap_or(now)
}

/// An address type usable as a CTP peer (a `SocketAddr` over UDP, an
/// `(MAC, port)` pair over EDP, a plain integer in simulations).
pub trait PeerAddr: Copy + Eq + Hash + fmt::Debug + Send + 'static {}
impl<T: Copy + Eq + Hash + fmt::Debug + Send + 'static> PeerAddr for T {}

/// Tunables of an [`Endpoint`]. Defaults follow the CTP spec where it gives a
/// value (`Times` of `CCTPNet`); the others are this implementation's limits.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest data part per packet, bytes (spec default 65400 over UDP; over
    /// EDP the link MTU minus the EDP and CTP headers). At most 65510.
    pub data_size: usize,
    /// Resend timeout before the first exchange with a peer (spec `uDefTimeout`,
    /// 100 ms). Zero disables resending and "not confirmed" errors (spec).
    pub default_timeout: Duration,
    /// After an exchange the timeout is the measured time times this (spec
    /// `uMultiplier`, 3): `T = max(multiplier x SRTT, SRTT + 4 x RTTVAR)`
    /// (RFC 6298 2.3 for the second term; both equal 3 x the first sample).
    pub timeout_multiplier: u32,
    /// Adapt the timeout to measured times (spec v1.2 "adaptive timeouts").
    pub adaptive_timeout: bool,
    /// Floor of the adapted timeout (not in the spec: keeps scheduler jitter on
    /// a fast LAN from causing spurious resends; the same role as RFC 6298's
    /// 1 s minimum RTO, scaled to a cluster). Default 1 ms.
    pub min_timeout: Duration,
    /// Ceiling of the adapted timeout, also of its Karn backoff. Default 10 s.
    pub max_timeout: Duration,
    /// Resends before a "not confirmed" error (spec: 8). For a dead peer the
    /// resends are at `(2^k - 1) x T`, k = 1..8, and the error one doubled
    /// period after the last, at `(2^(max_resends + 1) - 1) x T` = 511 x T
    /// after the first send. The error deadline is kept on a live link too,
    /// where more resends may fit before it (`max_resend_period`).
    pub max_resends: u32,
    /// A packet is not declared "not confirmed" earlier than this after its
    /// first transmission, however short the measured timeout (not in the
    /// spec: with LAN timeouts of about 1 ms the 8 resends would otherwise
    /// span only half a second, shorter than a loaded host's stalls).
    /// Resending goes on meanwhile. Default 1 s.
    pub min_error_delay: Duration,
    /// Cap of the resend period multiplier (spec `IncResend`: 16384).
    pub max_resend_multiplier: u32,
    /// Live-link cap of a packet's resend period (not in the spec;
    /// wire-compatible). While the destination has confirmed some packet
    /// after this one was first sent, and within the last `live_window`, the
    /// period stops growing at `max(max_resend_period, T)` (`T`: the
    /// destination's current timeout): the link works, so a packet lost
    /// several times in a row is unlucky (independent loss), and doubling
    /// its period further would only stall its message — at 5 % loss a
    /// packet and its confirmation fail together with p = 0.0975, five times
    /// in a row once per ~100 000 packets, which costs 31 T uncapped and
    /// 63 T at six. A destination that confirms nothing (dead or
    /// unreachable) keeps the spec's doubling schedule exactly. The error
    /// deadline is the same either way. Zero disables the cap. Default
    /// 20 ms: 20x the 1 ms timeout floor, so the cap only acts after the
    /// 5th consecutive loss of a packet at that floor, and a stored packet on
    /// a live link is still retried 50 times a second.
    pub max_resend_period: Duration,
    /// How recent a destination's last confirmation must be for the
    /// live-link cap (`max_resend_period`). Bounds what a peer that stalls
    /// (a descheduled process on a loaded host) or dies with packets in
    /// flight costs: capped resends for at most this long after its last
    /// confirmation, then the spec's doubling resumes from the capped
    /// period. Default 100 ms: five capped periods, so a packet among others
    /// that keep being confirmed (a stream) is retried every 20 ms, while a
    /// stalled peer draws 2-3 resends per packet more than the spec's
    /// doubling (with 1 s, ~50 per packet; one blocking netgauge run without
    /// loss on the loaded test machine showed 8 900 resends, consistent
    /// with a one-second stall).
    pub live_window: Duration,
    /// Early resend (not in the spec; wire-compatible; RFC 8985 RACK by send
    /// order): CTP confirms every packet, so when a packet sent after this
    /// one (to the same destination, sent once) is confirmed while this one
    /// is not, this one or its confirmation was lost, or they were
    /// reordered. It is then resent `reorder_window` later instead of at
    /// its timer (no doubling of its period; it still counts as a resend).
    /// Default on.
    pub early_resend: bool,
    /// How long after the evidence an early resend waits for a reordered
    /// confirmation: `max(SRTT / 4, min_reorder_window)` (RFC 8985 6.2: a
    /// quarter of the round trip). Default floor 20 us.
    pub min_reorder_window: Duration,
    /// Tail probe (not in the spec; wire-compatible; RFC 8985 section 7):
    /// the last packet sent to a destination for the first time (nothing new
    /// sent after it), sent once, is resent once if unconfirmed
    /// `max(2 x SRTT, min_probe_timeout)` after it was sent, when that is
    /// earlier than its timer. Early resend cannot see a lost last
    /// packet of a burst (nothing sent after it is confirmed), so without
    /// the probe it waits `T`, at least the 1 ms floor; the probe's
    /// confirmation then also lets early resend find other lost packets.
    pub tail_probe: bool,
    /// Floor of the tail probe timeout. Default 50 us.
    pub min_probe_timeout: Duration,
    /// Most packets in flight (sent, unconfirmed) per destination.
    pub window_packets: usize,
    /// Most bytes in flight per destination (at least one packet is always allowed).
    pub window_bytes: usize,
    /// Most message bytes kept in the sent-commands storage; `send` refuses
    /// more with [`SendError::Full`] (a single larger message is accepted
    /// when the storage is empty). Default 256 MiB.
    pub max_stored_bytes: u64,
    /// Largest message accepted by `send`, bytes (at most 2^48 - 1, spec table 1).
    pub max_message_size: u64,
    /// Memory for large messages being reassembled, bytes, over all peers. A
    /// message that does not fit is refused (its parts stay unconfirmed) and an
    /// error delivery is queued.
    pub max_reassembly_bytes: u64,
    /// A large message with no new part for this long is dropped with an error
    /// delivery.
    pub reassembly_idle_timeout: Duration,
    /// Most receiving sessions (peers we keep a received-id list for); data
    /// from further peers is refused unconfirmed. Default 65536.
    pub max_sessions: usize,
    /// Most ids remembered beyond the in-sequence one per peer (received-id list).
    pub max_out_of_order_ids: usize,
    /// Most deliveries queued before new data packets are refused (unconfirmed,
    /// so the sender resends them later).
    pub max_queued_deliveries: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_size: crate::wire::DEFAULT_UDP_DATA_SIZE,
            default_timeout: Duration::from_millis(100),
            timeout_multiplier: 3,
            adaptive_timeout: true,
            min_timeout: Duration::from_millis(1),
            max_timeout: Duration::from_secs(10),
            max_resends: 8,
            min_error_delay: Duration::from_secs(1),
            max_resend_multiplier: 16384,
            max_resend_period: Duration::from_millis(20),
            live_window: Duration::from_millis(100),
            early_resend: true,
            min_reorder_window: Duration::from_micros(20),
            tail_probe: true,
            min_probe_timeout: Duration::from_micros(50),
            window_packets: 1024,
            window_bytes: 1 << 20,
            max_stored_bytes: 256 << 20,
            max_message_size: MAX_MESSAGE_SIZE,
            max_reassembly_bytes: 1 << 30,
            reassembly_idle_timeout: Duration::from_secs(120),
            max_sessions: 1 << 16,
            max_out_of_order_ids: 1 << 20,
            max_queued_deliveries: 1 << 16,
        }
    }
}

impl Config {
    /// Defaults for CTP carried in EDP datagrams on a link of `mtu` bytes:
    /// data size = mtu - 6 (EDP header) - 25 (CTP header).
    pub fn for_edp_mtu(mtu: usize) -> Self {
        Self {
            data_size: mtu
                .saturating_sub(edp::wire::EDP_HEADER_LEN + HEADER_LEN)
                .max(1),
            ..Self::default()
        }
    }
    /// Largest datagram this configuration produces, bytes (header + data part).
    pub fn max_packet_len(&self) -> usize {
        HEADER_LEN + self.data_size
    }
}

/// A datagram to send: `len` bytes were written to the buffer given to
/// [`Endpoint::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit<P> {
    pub dest: P,
    pub len: usize,
}

/// Identifies a message given to [`Endpoint::send`].
pub type MsgId = u64;

/// Received data (spec `CCTPReceivedData`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedData<P> {
    pub command: u16,
    /// Message size in bytes (= `data.len()`).
    pub size: u64,
    pub from: P,
    /// True if the message was broadcast.
    pub broadcast: bool,
    pub data: Vec<u8>,
}

/// What went wrong (the `type` of spec `CCTPErrorInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorKind {
    /// "Command is not confirmed too long" (spec): a packet was resent
    /// `max_resends` times (or, with NoResend, waited as long) unconfirmed.
    NotConfirmed = 1,
    /// A large message from `peer` does not fit the reassembly memory limit;
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
}

/// An error delivery (spec `CCTPErrorInfo`: type, code, address, timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorInfo<P> {
    pub kind: ErrorKind,
    /// Kind-specific code: transmissions made for NotConfirmed, the message
    /// size for reassembly errors, the errno for Transport.
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
            ErrorKind::NotConfirmed => "command is not confirmed too long",
            ErrorKind::ReassemblyLimit => "large message refused: reassembly memory limit",
            ErrorKind::ReassemblyAbandoned => "large message incomplete: no part for too long",
            ErrorKind::OutOfMemory => "out of memory for a message",
            ErrorKind::Transport => "transport error",
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
    Data(ReceivedData<P>),
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
    #[error("command {0} out of range 0..=32767 (CTP spec table 1)")]
    CommandOutOfRange(u16),
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: u64, max: u64 },
    #[error("broadcast requested but this transport has no broadcast address")]
    NoBroadcast,
    #[error("out of memory for a message of {0} bytes")]
    OutOfMemory(u64),
    /// The sent-commands storage holds `stored` bytes awaiting confirmation;
    /// `size` more would exceed `limit`. Retry after confirmations arrive.
    #[error(
        "sent-commands storage full: {stored} bytes await confirmation, {size} more exceed the limit of {limit}"
    )]
    Full { stored: u64, size: u64, limit: u64 },
}

/// Storage sizes (the `Get...Count` of spec `CCTPNet`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Status {
    /// Commands in the sent-commands storage (awaiting confirmation).
    pub awaiting_confirmation: usize,
    /// Sessions: peers with send or receive state (the broadcast session counts as one).
    pub sessions: usize,
    /// Large messages being reassembled.
    pub large_in_progress: usize,
    /// Deliveries waiting to be consumed.
    pub deliveries_queued: usize,
    /// Deliverer threads busy running handlers (filled by the driver).
    pub busy_deliverers: usize,
    /// Deliverer threads alive (filled by the driver).
    pub deliverers: usize,
}

/// Event counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub data_packets_sent: u64,
    pub data_packets_resent: u64,
    pub confirmations_sent: u64,
    pub confirmations_received: u64,
    pub data_packets_received: u64,
    pub duplicates_received: u64,
    /// Datagrams that failed to parse or contradicted state (dropped).
    pub malformed: u64,
    /// Confirmations for nothing in the storage (late or duplicate).
    pub stale_confirmations: u64,
    /// Data packets refused for a full list, queue or memory limit (unconfirmed).
    pub refused: u64,
    pub messages_confirmed: u64,
    pub messages_delivered: u64,
    pub not_confirmed_errors: u64,
    /// Resends made before the timer because packets sent later were
    /// confirmed (also counted in `data_packets_resent`).
    pub early_resends: u64,
    /// Tail probes sent (also counted in `data_packets_resent`).
    pub tail_probes: u64,
}

#[derive(Debug)]
struct SendSession {
    next_id: u32,
    started: bool,
    timing: SendTiming,
    queue: VecDeque<MsgId>,
    in_flight_pkts: usize,
    in_flight_bytes: usize,
    /// Sequence number of the next transmission to this destination.
    tx_seq: u64,
    /// Transmissions in send order (seq, message, packet), for early resend
    /// and the first-sample re-base; entries of packets confirmed or sent
    /// again since are skipped.
    sent_order: VecDeque<(u64, MsgId, u32)>,
    /// One past the highest transmission sequence number confirmed (of
    /// packets sent once, so unambiguous): everything sent before it and
    /// still unconfirmed is presumed lost (RFC 8985 RACK, by send order).
    rack_seq: u64,
    /// Sequence number of the newest first transmission (the tail of what
    /// was sent: the tail probe's candidate).
    newest_first_seq: u64,
}

impl SendSession {
    /// Records a transmission of packet `idx` of `key`; returns its sequence number.
    fn note_transmission(&mut self, key: MsgId, idx: u32) -> u64 {
        let seq = self.tx_seq;
        self.tx_seq += 1;
        self.sent_order.push_back((seq, key, idx));
        seq
    }
}

#[derive(Debug, Clone, Copy)]
enum Tx<P> {
    Confirm { to: P, repr: Repr },
    Data { key: MsgId, idx: u32 },
}

/// The CTP protocol state of one local endpoint (all peers).
#[derive(Debug)]
pub struct Endpoint<P: PeerAddr> {
    cfg: Config,
    broadcast_addr: Option<P>,
    wall_base: (Instant, SystemTime),
    rng: ChaCha8Rng,
    sessions: HashMap<Dest<P>, SendSession>,
    recv: HashMap<(P, bool), RecvIdList>,
    sent: HashMap<MsgId, SentMsg<P>>,
    sent_index: HashMap<(Dest<P>, u32), MsgId>,
    unique_index: HashMap<(Dest<P>, u16), MsgId>,
    next_key: MsgId,
    stored_bytes: u64,
    timers: BinaryHeap<Reverse<(Instant, MsgId, u32)>>,
    large: HashMap<(P, bool, u32), Reassembly>,
    large_bytes: u64,
    refused: FxHashSet<(P, bool, u32)>,
    next_reassembly_check: Option<Instant>,
    deliveries: VecDeque<Delivery<P>>,
    tx: VecDeque<Tx<P>>,
    /// Confirmations wait behind data: a reply goes out before the
    /// confirmation of the request it answers (latency), a few packets later.
    tx_conf: VecDeque<Tx<P>>,
    group: Vec<P>,
    /// Addresses our own broadcasts came back from (UDP loopback of a
    /// broadcast to our own port).
    self_addrs: Vec<P>,
    stats: Stats,
}

impl<P: PeerAddr> Endpoint<P> {
    /// A new endpoint. `now`/`wall_now` pair the monotonic and wall clocks for
    /// error timestamps; `seed` seeds the random starting ids (spec: "initial
    /// value of ID ... pseudorandom"); `broadcast_addr` is the transport's
    /// broadcast destination, if it has one.
    ///
    /// Panics if `cfg.data_size` is 0 or exceeds 65510 (the 16-bit size field).
    pub fn new(
        cfg: Config,
        now: Instant,
        wall_now: SystemTime,
        seed: u64,
        broadcast_addr: Option<P>,
    ) -> Self {
        assert!(
            cfg.data_size > 0 && cfg.data_size + HEADER_LEN <= MAX_PACKET_LEN,
            "CTP data size {} out of range 1..={}",
            cfg.data_size,
            MAX_PACKET_LEN - HEADER_LEN
        );
        Self {
            cfg,
            broadcast_addr,
            wall_base: (now, wall_now),
            rng: ChaCha8Rng::seed_from_u64(seed),
            sessions: HashMap::default(),
            recv: HashMap::default(),
            sent: HashMap::default(),
            sent_index: HashMap::default(),
            unique_index: HashMap::default(),
            next_key: 1,
            stored_bytes: 0,
            timers: BinaryHeap::new(),
            large: HashMap::default(),
            large_bytes: 0,
            refused: FxHashSet::default(),
            next_reassembly_check: None,
            deliveries: VecDeque::new(),
            tx: VecDeque::new(),
            tx_conf: VecDeque::new(),
            group: Vec::new(),
            self_addrs: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The broadcast destination of the transport.
    pub fn broadcast_addr(&self) -> Option<P> {
        self.broadcast_addr
    }

    /// Sets the receivers a broadcast must be confirmed by (at most 64). With
    /// an empty group (the default) a broadcast packet counts as confirmed at
    /// its first confirmation, since the sender cannot know the receivers.
    ///
    /// Errors: `Err(n)` if the group has more than 64 members.
    pub fn set_broadcast_group(&mut self, group: Vec<P>) -> Result<(), usize> {
        if group.len() > 64 {
            return Err(group.len());
        }
        self.group = group;
        Ok(())
    }

    /// Fixes the resend timeout for `peer` (no adaptation); zero disables resending.
    pub fn set_peer_timeout(&mut self, peer: P, timeout: Duration) {
        let s = self.session(Dest::Peer(peer));
        s.timing.timeout = timeout;
        s.timing.fixed = true;
    }

    /// The current resend timeout for `peer` (the default before any exchange).
    pub fn peer_timeout(&self, peer: P) -> Duration {
        self.sessions
            .get(&Dest::Peer(peer))
            .map_or(self.cfg.default_timeout, |s| s.timing.timeout)
    }

    /// The measured (smoothed) send-to-confirmation time for `peer`, if any.
    pub fn peer_srtt(&self, peer: P) -> Option<Duration> {
        self.sessions
            .get(&Dest::Peer(peer))
            .and_then(|s| s.timing.srtt)
    }

    /// Sets the id of the next packet to `dest` (the start is random
    /// otherwise). For tests of id wraparound; the session's StartSession
    /// flag is unchanged.
    pub fn set_next_id(&mut self, dest: Dest<P>, id: u32) {
        self.session(dest).next_id = id;
    }

    fn session(&mut self, dest: Dest<P>) -> &mut SendSession {
        let rng = &mut self.rng;
        let timeout = self.cfg.default_timeout;
        self.sessions.entry(dest).or_insert_with(|| SendSession {
            next_id: rng.next_u32(),
            started: false,
            timing: SendTiming::new(timeout),
            queue: VecDeque::new(),
            in_flight_pkts: 0,
            in_flight_bytes: 0,
            tx_seq: 0,
            sent_order: VecDeque::new(),
            rack_seq: 0,
            newest_first_seq: 0,
        })
    }

    /// Sends `data` as command `command` to `peer` (copying it). Options as in
    /// the spec; Broadcast (or `peer` equal to the broadcast address) sends to
    /// every receiver. Returns the message id used in later error deliveries.
    ///
    /// Errors: [`SendError`] (command above 32767, message larger than
    /// `max_message_size`, no broadcast address, allocation failure).
    pub fn send(
        &mut self,
        now: Instant,
        command: u16,
        peer: P,
        data: &[u8],
        options: Options,
    ) -> Result<MsgId, SendError> {
        let mut v = Vec::new();
        v.try_reserve_exact(data.len())
            .map_err(|_| SendError::OutOfMemory(data.len() as u64))?;
        v.extend_from_slice(data);
        self.send_vec(now, command, peer, v, options)
    }

    /// As [`send`](Self::send), taking ownership of the data (no copy).
    pub fn send_vec(
        &mut self,
        now: Instant,
        command: u16,
        peer: P,
        data: Vec<u8>,
        options: Options,
    ) -> Result<MsgId, SendError> {
        if command > MAX_COMMAND {
            return Err(SendError::CommandOutOfRange(command));
        }
        let bcast = options.contains(Options::BROADCAST) || Some(peer) == self.broadcast_addr;
        if bcast && self.broadcast_addr.is_none() {
            return Err(SendError::NoBroadcast);
        }
        let size = data.len() as u64;
        let max = self.cfg.max_message_size.min(MAX_MESSAGE_SIZE);
        if size > max {
            return Err(SendError::TooLarge { size, max });
        }
        if !self.has_room(size) {
            return Err(SendError::Full {
                stored: self.stored_bytes,
                size,
                limit: self.cfg.max_stored_bytes,
            });
        }
        let part = self.cfg.data_size;
        let count = (data.len().div_ceil(part)).max(1);
        if count > u32::MAX as usize {
            return Err(SendError::TooLarge {
                size,
                max: u32::MAX as u64 * part as u64,
            });
        }
        let count = count as u32;
        let dest = if bcast {
            Dest::Broadcast
        } else {
            Dest::Peer(peer)
        };
        let options = options.without(Options::START_SESSION | Options::BROADCAST);
        let mut many = Vec::new();
        if count > 1 {
            many.try_reserve_exact(count as usize)
                .map_err(|_| SendError::OutOfMemory(size))?;
            many.resize(count as usize, PktState::new(now));
        }
        if options.contains(Options::UNIQUE_COMMAND) {
            if let Some(old) = self.unique_index.remove(&(dest, command)) {
                self.remove_msg(old);
            }
        }
        let key = self.next_key;
        self.next_key += 1;
        let sess = self.session(dest);
        let first_id = sess.next_id;
        sess.next_id = first_id.wrapping_add(count);
        let start_session = !sess.started;
        sess.started = true;
        sess.queue.push_back(key);
        let msg = SentMsg {
            dest,
            command,
            options,
            first_id,
            amount: count,
            part_size: part,
            data,
            start_session,
            single: PktState::new(now),
            many,
            next_unsent: 0,
            unconfirmed: count,
            errored: false,
        };
        self.stored_bytes += size;
        self.sent.insert(key, msg);
        self.sent_index.insert((dest, first_id), key);
        if options.contains(Options::UNIQUE_COMMAND) {
            self.unique_index.insert((dest, command), key);
        }
        self.release(now, dest);
        Ok(key)
    }

    /// Sends a ping: an empty command with DelAfterError|NoResend|UniqueCommand
    /// (spec, "Options"). The peer confirms it; no confirmation within the
    /// resend schedule gives a NotConfirmed error delivery.
    pub fn ping(&mut self, now: Instant, command: u16, peer: P) -> Result<MsgId, SendError> {
        self.send_vec(now, command, peer, Vec::new(), Options::PING)
    }

    /// Drops a message from the sent-commands storage (no further resends, no
    /// error). Returns false if it was not there (already confirmed or dropped).
    pub fn cancel(&mut self, msg: MsgId) -> bool {
        let Some(dest) = self.sent.get(&msg).map(|m| m.dest) else {
            return false;
        };
        self.remove_msg(msg);
        let _ = dest;
        true
    }

    /// True if a message of `size` bytes fits the sent-commands storage now
    /// (see [`Config::max_stored_bytes`]).
    pub fn has_room(&self, size: u64) -> bool {
        self.stored_bytes == 0 || self.stored_bytes + size <= self.cfg.max_stored_bytes
    }

    /// Bytes of message data in the sent-commands storage.
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// True while message `msg` awaits confirmation.
    pub fn is_pending(&self, msg: MsgId) -> bool {
        self.sent.contains_key(&msg)
    }

    fn remove_msg(&mut self, key: MsgId) {
        let Some(m) = self.sent.remove(&key) else {
            return;
        };
        self.stored_bytes -= m.data.len() as u64;
        self.sent_index.remove(&(m.dest, m.first_id));
        if self.unique_index.get(&(m.dest, m.command)) == Some(&key) {
            self.unique_index.remove(&(m.dest, m.command));
        }
        if let Some(s) = self.sessions.get_mut(&m.dest) {
            for i in 0..m.count() {
                if m.pkt(i).phase == PktPhase::InFlight {
                    s.in_flight_pkts -= 1;
                    s.in_flight_bytes -= m.wire_len(i);
                }
            }
        }
    }

    /// Releases packets of queued messages into the transmit queue while the
    /// destination's window allows (round-robin, one packet per message turn).
    fn release(&mut self, now: Instant, dest: Dest<P>) {
        let Some(sess) = self.sessions.get_mut(&dest) else {
            return;
        };
        let mut newest = None;
        loop {
            if sess.in_flight_pkts >= self.cfg.window_packets
                || (sess.in_flight_pkts > 0 && sess.in_flight_bytes >= self.cfg.window_bytes)
            {
                break;
            }
            let Some(key) = sess.queue.pop_front() else {
                break;
            };
            let Some(m) = self.sent.get_mut(&key) else {
                continue;
            };
            if m.next_unsent >= m.count() {
                continue;
            }
            let i = m.next_unsent;
            m.next_unsent += 1;
            let timeout = sess.timing.timeout;
            let wire = m.wire_len(i);
            let no_resend = m.options.contains(Options::NO_RESEND);
            let p = m.pkt_mut(i);
            p.phase = PktPhase::InFlight;
            p.transmissions = 1;
            p.first_sent = now;
            p.mult = 1;
            p.base = timeout;
            if !timeout.is_zero() {
                // spec: 8 resends at (2^k - 1) T, the error at 511 T
                let span = (1u32 << (self.cfg.max_resends.min(30) + 1)) - 1;
                let error_after = timeout.saturating_mul(span).max(self.cfg.min_error_delay);
                p.resend_at = (!no_resend).then(|| later(now, timeout));
                p.error_at = Some(later(now, error_after));
                p.update_due();
                self.timers.push(Reverse((p.due, key, i)));
            }
            p.seq = sess.note_transmission(key, i);
            p.first_seq = p.seq;
            sess.newest_first_seq = p.seq;
            newest = Some((key, i));
            sess.in_flight_pkts += 1;
            sess.in_flight_bytes += wire;
            self.tx.push_back(Tx::Data { key, idx: i });
            self.stats.data_packets_sent += 1;
            if m.next_unsent < m.count() {
                sess.queue.push_back(key);
            }
        }
        if let (Some((key, i)), Some(srtt), true) = (newest, sess.timing.srtt, self.cfg.tail_probe)
        {
            // the tail of what was just sent: arm its probe (RFC 8985 7.2)
            let pto = (srtt * 2).max(self.cfg.min_probe_timeout);
            let at = later(now, pto);
            let p = self.sent.get_mut(&key).expect("released").pkt_mut(i);
            if p.resend_at.is_some_and(|r| at < r) {
                p.probe_at = Some(at);
                p.update_due();
                self.timers.push(Reverse((p.due, key, i)));
            }
        }
        self.compact_send_order(dest);
    }

    /// Handles one received datagram from `from`. Malformed input is counted
    /// in [`Stats::malformed`] and dropped.
    pub fn handle_datagram(&mut self, now: Instant, from: P, datagram: &[u8]) {
        let (r, body) = match Repr::parse(datagram) {
            Ok(x) => x,
            Err(e) => {
                log::debug!("ctp: malformed datagram from {from:?}: {e}");
                self.stats.malformed += 1;
                return;
            }
        };
        if r.confirm {
            self.on_confirm(now, from, &r);
        } else {
            self.on_data(now, from, &r, body);
        }
    }

    fn on_confirm(&mut self, now: Instant, from: P, r: &Repr) {
        self.stats.confirmations_received += 1;
        let bcast = r.options.contains(Options::BROADCAST);
        let dest = if bcast {
            Dest::Broadcast
        } else {
            Dest::Peer(from)
        };
        let first_id = r.id.wrapping_sub(r.number);
        let Some(&key) = self.sent_index.get(&(dest, first_id)) else {
            self.stats.stale_confirmations += 1;
            return;
        };
        let Some(m) = self.sent.get_mut(&key) else {
            self.stats.stale_confirmations += 1;
            return;
        };
        if r.command != m.command || r.amount != m.amount || r.number >= m.count() {
            self.stats.malformed += 1;
            return;
        }
        let wire = m.wire_len(r.number);
        let group = &self.group;
        let p = m.pkt_mut(r.number);
        if p.phase != PktPhase::InFlight {
            self.stats.stale_confirmations += 1;
            return;
        }
        if bcast && self.self_addrs.contains(&from) {
            // our own confirmation of our own broadcast (UDP loops it back)
            self.stats.stale_confirmations += 1;
            return;
        }
        if let Some(s) = self.sessions.get_mut(&dest) {
            // the destination works (live-link resend cap)
            s.timing.last_confirm = Some(now);
        }
        if bcast && !group.is_empty() {
            let Some(pos) = group.iter().position(|g| *g == from) else {
                self.stats.stale_confirmations += 1;
                return;
            };
            p.acks |= 1 << pos;
            if (p.acks.count_ones() as usize) < group.len() {
                return;
            }
        }
        p.phase = PktPhase::Confirmed;
        let sample = (p.transmissions == 1).then(|| now.saturating_duration_since(p.first_sent));
        let first_seq = p.first_seq;
        m.unconfirmed -= 1;
        let done = m.unconfirmed == 0;
        let mut first_sample = false;
        if let Some(s) = self.sessions.get_mut(&dest) {
            s.in_flight_pkts -= 1;
            s.in_flight_bytes -= wire;
            if let (Some(sample), true) = (sample, self.cfg.adaptive_timeout) {
                first_sample = s.timing.srtt.is_none();
                s.timing.sample(
                    now,
                    sample,
                    self.cfg.timeout_multiplier,
                    self.cfg.min_timeout,
                    self.cfg.max_timeout,
                );
            }
        }
        if done {
            self.stats.messages_confirmed += 1;
            self.remove_msg(key);
        }
        if first_sample {
            self.rebase_in_flight(now, dest);
        }
        self.detect_losses(now, dest, first_seq);
        self.release(now, dest);
    }

    /// The first measurement replaced `default_timeout` (spec: the default
    /// "initially", the measured time x 3 "after the first interchange"):
    /// packets to `dest` still in flight on their first transmission with a
    /// longer base take the measured `T` as theirs — resend at `first_sent +
    /// T` (not before `now`), error deadline `first_sent + max(511 T,
    /// min_error_delay)` — as RFC 6298 5.3 restarts the timer with the
    /// current RTO. Without this a burst sent to a fresh peer before its
    /// first confirmation waited 100 ms for any loss at its tail.
    fn rebase_in_flight(&mut self, now: Instant, dest: Dest<P>) {
        let Some(s) = self.sessions.get_mut(&dest) else {
            return;
        };
        let t = s.timing.timeout;
        if t.is_zero() || s.timing.fixed {
            return;
        }
        let span = (1u32 << (self.cfg.max_resends.min(30) + 1)) - 1;
        let error_after = t.saturating_mul(span).max(self.cfg.min_error_delay);
        for &(q, key, idx) in &s.sent_order {
            let Some(m) = self.sent.get_mut(&key) else {
                continue;
            };
            let p = m.pkt_mut(idx);
            if p.phase != PktPhase::InFlight || p.seq != q || p.transmissions != 1 || p.base <= t {
                continue;
            }
            p.base = t;
            let first_sent = p.first_sent;
            p.resend_at = p.resend_at.map(|r| r.min(later(first_sent, t).max(now)));
            p.error_at = p.error_at.map(|e| e.min(later(first_sent, error_after)));
            let before = p.due;
            if p.update_due() && p.due != before {
                self.timers.push(Reverse((p.due, key, idx)));
            }
        }
    }

    /// Early resend (see [`Config::early_resend`]): a packet first sent with
    /// transmission sequence number `seq` was confirmed (whichever copy the
    /// confirmation answers, it was sent no earlier than that); packets to
    /// `dest` whose latest transmission came before it and still unconfirmed
    /// are resent after the reorder window, unless their timer comes sooner.
    fn detect_losses(&mut self, now: Instant, dest: Dest<P>, seq: u64) {
        if !self.cfg.early_resend {
            return;
        }
        let Some(s) = self.sessions.get_mut(&dest) else {
            return;
        };
        if seq < s.rack_seq {
            return;
        }
        s.rack_seq = seq + 1;
        let reo = s
            .timing
            .srtt
            .map_or(Duration::ZERO, |r| r / 4)
            .max(self.cfg.min_reorder_window);
        let at = later(now, reo);
        while let Some(&(q, key, idx)) = s.sent_order.front() {
            if q >= s.rack_seq {
                break;
            }
            s.sent_order.pop_front();
            let Some(m) = self.sent.get_mut(&key) else {
                continue;
            };
            let p = m.pkt_mut(idx);
            if p.phase != PktPhase::InFlight || p.seq != q || p.early {
                continue;
            }
            // NoResend, resending disabled, or the timer comes sooner anyway
            if p.resend_at.is_none_or(|r| r <= at) {
                continue;
            }
            p.resend_at = Some(at);
            p.early = true;
            p.update_due();
            self.timers.push(Reverse((p.due, key, idx)));
        }
    }

    /// Drops entries of `dest`'s send-order queue whose packets were
    /// confirmed or sent again since, once it holds many more entries than
    /// packets in flight (resends to a peer that confirms nothing would
    /// otherwise grow it without bound). Amortized O(1) per transmission.
    fn compact_send_order(&mut self, dest: Dest<P>) {
        let Some(s) = self.sessions.get_mut(&dest) else {
            return;
        };
        if s.sent_order.len() <= 2 * s.in_flight_pkts + 64 {
            return;
        }
        let sent = &self.sent;
        s.sent_order.retain(|&(q, key, idx)| {
            sent.get(&key)
                .is_some_and(|m| m.pkt(idx).phase == PktPhase::InFlight && m.pkt(idx).seq == q)
        });
    }

    /// Enters `r.id` in the received-id list of (`from`, `bcast`), which
    /// exists; true when it is new. A duplicate is confirmed again and
    /// counted, a full list refuses the packet (counted).
    fn record_id(&mut self, from: P, bcast: bool, r: &Repr) -> bool {
        let list = self
            .recv
            .get_mut(&(from, bcast))
            .expect("list created on arrival");
        match list.insert(r.id) {
            IdStatus::New => true,
            IdStatus::Duplicate => {
                self.stats.duplicates_received += 1;
                self.confirm(from, r);
                false
            }
            IdStatus::Full => {
                self.stats.refused += 1;
                false
            }
        }
    }

    fn confirm(&mut self, to: P, r: &Repr) {
        self.tx_conf.push_back(Tx::Confirm {
            to,
            repr: r.confirmation(),
        });
        self.stats.confirmations_sent += 1;
    }

    fn error(
        &mut self,
        now: Instant,
        kind: ErrorKind,
        code: i64,
        peer: Option<P>,
        command: Option<u16>,
        msg: Option<MsgId>,
    ) {
        let timestamp = self.wall_base.1 + now.saturating_duration_since(self.wall_base.0);
        self.deliveries.push_back(Delivery::Error(ErrorInfo {
            kind,
            code,
            peer,
            command,
            msg,
            at: now,
            timestamp,
        }));
    }

    fn on_data(&mut self, now: Instant, from: P, r: &Repr, body: &[u8]) {
        self.stats.data_packets_received += 1;
        let bcast = r.options.contains(Options::BROADCAST);
        if bcast && !self.self_addrs.contains(&from) && self.is_own_broadcast(r, body) {
            // A node bound to the broadcast port hears its own broadcasts:
            // remember the address they come from, so that our confirmation
            // of them is not taken for a receiver's.
            if self.self_addrs.len() < 16 {
                self.self_addrs.push(from);
            }
        }
        let cap = self.cfg.max_out_of_order_ids;
        if self.recv.len() >= self.cfg.max_sessions && !self.recv.contains_key(&(from, bcast)) {
            self.stats.refused += 1;
            return;
        }
        let list = self
            .recv
            .entry((from, bcast))
            .or_insert_with(|| RecvIdList::new(cap));
        if r.options.contains(Options::START_SESSION) {
            list.start_session(r.id);
        }
        if list.contains(r.id) {
            self.stats.duplicates_received += 1;
            self.confirm(from, r);
            return;
        }
        if r.amount <= 1 {
            if self.deliveries.len() >= self.cfg.max_queued_deliveries {
                self.stats.refused += 1;
                return;
            }
            let mut data = Vec::new();
            if data.try_reserve_exact(body.len()).is_err() {
                self.stats.refused += 1;
                return;
            }
            if !self.record_id(from, bcast, r) {
                return;
            }
            data.extend_from_slice(body);
            self.confirm(from, r);
            self.stats.messages_delivered += 1;
            self.deliveries.push_back(Delivery::Data(ReceivedData {
                command: r.command,
                size: r.message_size,
                from,
                broadcast: bcast,
                data,
            }));
            return;
        }
        // A part of a large message.
        let lkey = (from, bcast, r.id.wrapping_sub(r.number));
        let mut created = false;
        if !self.large.contains_key(&lkey) {
            if self.large_bytes + r.message_size > self.cfg.max_reassembly_bytes {
                self.stats.refused += 1;
                if self.refused.len() > 4096 {
                    self.refused.clear();
                }
                if self.refused.insert(lkey) {
                    self.error(
                        now,
                        ErrorKind::ReassemblyLimit,
                        r.message_size as i64,
                        Some(from),
                        Some(r.command),
                        None,
                    );
                }
                return;
            }
            match Reassembly::new(r, now) {
                Some(ra) => {
                    self.large_bytes += r.message_size;
                    self.large.insert(lkey, ra);
                    self.refused.remove(&lkey);
                    created = true;
                    if self.next_reassembly_check.is_none() {
                        self.next_reassembly_check = Some(now + self.cfg.reassembly_idle_timeout);
                    }
                }
                None => {
                    self.stats.refused += 1;
                    if self.refused.insert(lkey) {
                        self.error(
                            now,
                            ErrorKind::OutOfMemory,
                            r.message_size as i64,
                            Some(from),
                            Some(r.command),
                            None,
                        );
                    }
                    return;
                }
            }
        }
        let ra = self.large.get_mut(&lkey).expect("inserted above");
        if ra.check(r, body.len()).is_err() {
            self.stats.malformed += 1;
            if created {
                self.large.remove(&lkey);
                self.large_bytes -= r.message_size;
            }
            return;
        }
        if ra.remaining == 1 && self.deliveries.len() >= self.cfg.max_queued_deliveries {
            self.stats.refused += 1;
            return;
        }
        if !self.record_id(from, bcast, r) {
            return;
        }
        let ra = self.large.get_mut(&lkey).expect("inserted above");
        let done = ra.store(r, body, now);
        self.confirm(from, r);
        if done {
            let ra = self.large.remove(&lkey).expect("present");
            self.large_bytes -= ra.size;
            self.stats.messages_delivered += 1;
            self.deliveries.push_back(Delivery::Data(ReceivedData {
                command: ra.command,
                size: ra.size,
                from,
                broadcast: bcast,
                data: ra.buf,
            }));
        }
    }

    /// True if `r`/`body` is exactly a packet of one of our own broadcasts in flight.
    fn is_own_broadcast(&self, r: &Repr, body: &[u8]) -> bool {
        let first_id = r.id.wrapping_sub(r.number);
        let Some(m) = self
            .sent_index
            .get(&(Dest::Broadcast, first_id))
            .and_then(|k| self.sent.get(k))
        else {
            return false;
        };
        if r.number >= m.count() || m.pkt(r.number).phase != PktPhase::InFlight {
            return false;
        }
        let mine = m.repr(r.number);
        let (s, e) = m.part(r.number);
        mine.command == r.command
            && mine.amount == r.amount
            && mine.message_size == r.message_size
            && m.data[s..e] == *body
    }

    /// Runs the timers due at `now`: resends, "not confirmed" errors, dropping
    /// abandoned reassemblies.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((due, key, i))) = self.timers.peek() {
            if due > now {
                break;
            }
            self.timers.pop();
            let Some(m) = self.sent.get_mut(&key) else {
                continue;
            };
            let dest = m.dest;
            let p = m.pkt_mut(i);
            if p.phase != PktPhase::InFlight || p.due != due {
                continue;
            }
            if p.error_at.is_some_and(|t| t <= now) {
                // spec: "Command is not confirmed too long", once per message
                p.error_at = None;
                let transmissions = p.transmissions;
                let first_error = !m.errored;
                m.errored = true;
                let command = m.command;
                let del = m.options.contains(Options::DEL_AFTER_ERROR);
                if first_error {
                    self.stats.not_confirmed_errors += 1;
                    let peer = match dest {
                        Dest::Peer(p) => Some(p),
                        Dest::Broadcast => self.broadcast_addr,
                    };
                    self.error(
                        now,
                        ErrorKind::NotConfirmed,
                        transmissions as i64,
                        peer,
                        Some(command),
                        Some(key),
                    );
                }
                if del {
                    self.remove_msg(key);
                    self.release(now, dest);
                    continue;
                }
            }
            let m = self.sent.get_mut(&key).expect("present");
            let p = m.pkt_mut(i);
            if p.probe_at.is_some_and(|t| t <= now) {
                p.probe_at = None;
                // nothing new was sent after it (resends of others may have been)
                let still_tail = self
                    .sessions
                    .get(&dest)
                    .is_some_and(|s| s.newest_first_seq == p.first_seq);
                if still_tail && p.transmissions == 1 && p.resend_at.is_some_and(|t| t > now) {
                    // tail probe (RFC 8985 7.3): resend once, timer unchanged
                    if let Some(s) = self.sessions.get_mut(&dest) {
                        p.seq = s.note_transmission(key, i);
                    }
                    p.transmissions += 1;
                    self.tx.push_back(Tx::Data { key, idx: i });
                    self.stats.data_packets_resent += 1;
                    self.stats.tail_probes += 1;
                }
            }
            if p.resend_at.is_some_and(|t| t <= now) {
                let (first_sent, base, early) = (p.first_sent, p.base, p.early);
                let (mut live, mut current, mut seq) = (false, base, p.seq);
                if let Some(s) = self.sessions.get_mut(&dest) {
                    if self.cfg.adaptive_timeout && !early {
                        s.timing.expired(first_sent, base, self.cfg.max_timeout);
                    }
                    live = s.timing.last_confirm.is_some_and(|c| {
                        c >= first_sent && now.saturating_duration_since(c) <= self.cfg.live_window
                    });
                    current = s.timing.timeout;
                    seq = s.note_transmission(key, i);
                }
                let m = self.sent.get_mut(&key).expect("present");
                let p = m.pkt_mut(i);
                p.transmissions += 1;
                p.seq = seq;
                p.early = false;
                self.tx.push_back(Tx::Data { key, idx: i });
                self.stats.data_packets_resent += 1;
                let doubled = p
                    .mult
                    .saturating_mul(2)
                    .min(self.cfg.max_resend_multiplier.max(1));
                let cap = self.cfg.max_resend_period.max(current);
                let period = if early {
                    // an early resend is not a timeout: the period stays
                    self.stats.early_resends += 1;
                    base.saturating_mul(p.mult)
                } else if live
                    && !self.cfg.max_resend_period.is_zero()
                    && base.saturating_mul(doubled) > cap
                {
                    // live link: the period stops growing (see Config::max_resend_period)
                    cap
                } else {
                    p.mult = doubled;
                    base.saturating_mul(p.mult)
                };
                p.resend_at = Some(later(now, period));
            }
            let p = self.sent.get_mut(&key).expect("present").pkt_mut(i);
            if p.update_due() {
                self.timers.push(Reverse((p.due, key, i)));
            }
            self.compact_send_order(dest);
        }
        if let Some(t) = self.next_reassembly_check {
            if t <= now {
                let idle = self.cfg.reassembly_idle_timeout;
                let expired: Vec<_> = self
                    .large
                    .iter()
                    .filter(|(_, ra)| ra.last_activity + idle <= now)
                    .map(|(k, _)| *k)
                    .collect();
                for k in expired {
                    if let Some(ra) = self.large.remove(&k) {
                        self.large_bytes -= ra.size;
                        self.error(
                            now,
                            ErrorKind::ReassemblyAbandoned,
                            ra.size as i64,
                            Some(k.0),
                            Some(ra.command),
                            None,
                        );
                    }
                }
                self.next_reassembly_check =
                    self.large.values().map(|ra| ra.last_activity + idle).min();
            }
        }
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) must be called
    /// (None when no timer runs). Discards timers made stale by confirmations.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((due, key, i))) = self.timers.peek() {
            let live = self
                .sent
                .get(&key)
                .is_some_and(|m| m.pkt(i).phase == PktPhase::InFlight && m.pkt(i).due == due);
            if live {
                break;
            }
            self.timers.pop();
        }
        let t = self.timers.peek().map(|Reverse((d, _, _))| *d);
        match (t, self.next_reassembly_check) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Writes the next datagram to send into `buf` (which must hold at least
    /// [`Config::max_packet_len`] bytes) and returns its destination and length.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit<P>> {
        while let Some(tx) = self.tx.pop_front().or_else(|| self.tx_conf.pop_front()) {
            match tx {
                Tx::Confirm { to, repr } => {
                    repr.emit(buf);
                    return Some(Transmit {
                        dest: to,
                        len: HEADER_LEN,
                    });
                }
                Tx::Data { key, idx } => {
                    let Some(m) = self.sent.get(&key) else {
                        continue;
                    };
                    if m.pkt(idx).phase != PktPhase::InFlight {
                        continue;
                    }
                    let dest = match m.dest {
                        Dest::Peer(p) => p,
                        Dest::Broadcast => match self.broadcast_addr {
                            Some(b) => b,
                            None => continue,
                        },
                    };
                    let repr = m.repr(idx);
                    let (s, e) = m.part(idx);
                    let len = repr.packet_len();
                    repr.emit(buf);
                    buf[HEADER_LEN..len].copy_from_slice(&m.data[s..e]);
                    return Some(Transmit { dest, len });
                }
            }
        }
        None
    }

    /// True if [`poll_transmit`](Self::poll_transmit) may return a datagram.
    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty() || !self.tx_conf.is_empty()
    }

    /// The next delivery, if any.
    pub fn poll_delivery(&mut self) -> Option<Delivery<P>> {
        self.deliveries.pop_front()
    }

    /// Large messages being reassembled (cheap; see [`Status`]).
    pub fn reassembling(&self) -> usize {
        self.large.len()
    }

    /// Storage sizes.
    pub fn status(&self) -> Status {
        let mut peers: HashSet<Dest<P>> = self.sessions.keys().copied().collect();
        for (p, b) in self.recv.keys() {
            peers.insert(if *b { Dest::Broadcast } else { Dest::Peer(*p) });
        }
        Status {
            awaiting_confirmation: self.sent.len(),
            sessions: peers.len(),
            large_in_progress: self.large.len(),
            deliveries_queued: self.deliveries.len(),
            busy_deliverers: 0,
            deliverers: 0,
        }
    }

    /// Event counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The received-id list of `peer` as the spec writes it (for tests and debugging).
    pub fn received_ids(&self, peer: P, broadcast: bool) -> Vec<u32> {
        self.recv
            .get(&(peer, broadcast))
            .map(|l| l.as_vec())
            .unwrap_or_default()
    }

    /// Queues an error delivery (used by drivers for transport errors).
    pub fn push_error(&mut self, now: Instant, kind: ErrorKind, code: i64, peer: Option<P>) {
        self.error(now, kind, code, peer, None, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resends to a peer that confirms nothing do not grow the send-order
    /// queue of early resend without bound.
    #[test]
    fn send_order_queue_stays_bounded_for_a_dead_peer() {
        let t0 = Instant::now();
        let cfg = Config {
            data_size: 10,
            default_timeout: Duration::from_millis(1),
            max_resend_multiplier: 4,
            ..Config::default()
        };
        let mut e: Endpoint<u8> = Endpoint::new(cfg, t0, SystemTime::UNIX_EPOCH, 1, None);
        e.send(t0, 1, 2, &[0u8; 100], Options::NONE).unwrap();
        let mut buf = vec![0u8; e.config().max_packet_len()];
        let mut now = t0;
        let mut transmissions = 0;
        while now - t0 < Duration::from_secs(60) {
            now = e.poll_timeout().unwrap();
            e.handle_timeout(now);
            while e.poll_transmit(&mut buf).is_some() {
                transmissions += 1;
            }
        }
        let s = &e.sessions[&Dest::Peer(2)];
        assert!(transmissions > 10_000, "{transmissions}");
        assert!(
            s.sent_order.len() <= 2 * s.in_flight_pkts + 65,
            "{} entries for {} packets in flight",
            s.sent_order.len(),
            s.in_flight_pkts
        );
    }
}
