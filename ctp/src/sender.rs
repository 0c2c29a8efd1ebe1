//! The sent-commands storage (CTP spec v1.2, "Storages"): a sent message is
//! kept with the state of each of its packets until every packet is confirmed;
//! and the sending half of a session (next id, timeout, window, send order).

use std::cell::Cell;
use std::collections::VecDeque;
use std::hash::Hash;
use std::time::{Duration, Instant};

use netcore::timer::TimerQueue;
use rustc_hash::FxHashMap;
use slotmap::{KeyData, SlotMap};

use crate::id::MsgId;
use crate::peer::SendTiming;
use crate::wire::{Options, Repr, CTP_HEADER_LEN};

/// Where a message goes: one peer, or the broadcast address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dest<P> {
    /// A unicast peer.
    Peer(P),
    /// Every receiver on the link (UDP broadcast address / broadcast MAC).
    Broadcast,
}

/// State of one packet of a sent message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PktPhase {
    /// Waiting for the send window.
    Unsent,
    /// Sent at least once, not yet confirmed.
    InFlight,
    /// Confirmed by the peer (by every group member, for a broadcast).
    Confirmed,
    /// Given up: its "not confirmed" error was reported and it is never
    /// resent (NoResend), so it left the send window; a late confirmation
    /// still counts. Without this a lost NoResend packet of a message kept
    /// after its error (no DelAfterError) held its window share forever,
    /// and a full window of them stopped every later message to the
    /// destination, before it sent anything that could time out.
    Abandoned,
}

/// Per-packet bookkeeping (the `CommandInfo` of the original `SntCommandInfo`).
#[derive(Debug, Clone, Copy)]
pub struct PktState {
    pub phase: PktPhase,
    /// Resend period multiplier: 1, 2, 4, ... (spec: the period grows
    /// exponentially; `uResend` of the original, capped at 16384). The period
    /// after the next resend is `base x mult`, unless the live-link cap
    /// applies (see `Config::max_resend_period`).
    pub mult: u32,
    /// Transmissions so far (1 = sent once: its confirmation is an RTT sample).
    pub transmissions: u32,
    /// First transmission.
    pub first_sent: Instant,
    /// Next timer deadline of this packet: the earliest of `resend_at`,
    /// `error_at` and `probe_at` (the key of its entry in the timer heap).
    pub due: Instant,
    /// Next resend (None: NoResend, or resending disabled).
    pub resend_at: Option<Instant>,
    /// When the "not confirmed" error is due: `first_sent + 511 x base`
    /// (spec: 8 resends, 255 timeouts, plus the last one's doubled period),
    /// at least `min_error_delay` after `first_sent`. None once it passed,
    /// or when resending is disabled.
    pub error_at: Option<Instant>,
    /// The destination's timeout when the packet was first sent: the unit of
    /// its resend schedule (`base x mult`) and of its error deadline.
    pub base: Duration,
    /// Group members that confirmed this packet (broadcast only; bit i = member i).
    pub acks: u64,
    /// Transmission sequence number of its latest transmission (per
    /// destination, in send order): a confirmed packet with a higher one
    /// was sent after it (early resend).
    pub seq: u64,
    /// `resend_at` was brought forward because packets sent after this one
    /// were confirmed (early resend: no doubling of the period).
    pub early: bool,
    /// Its "not confirmed" error was postponed past the spec's deadline
    /// because its destination was silent (`Config::user_timeout`).
    pub postponed: bool,
    /// Transmission sequence number of its first transmission: a
    /// confirmation of this packet (of any copy) shows that everything sent
    /// before that is due too (early resend).
    pub first_seq: u64,
    /// Tail probe deadline (see `Config::tail_probe`), if armed.
    pub probe_at: Option<Instant>,
    /// On the first packet of each group of [`TIMER_GROUP`] packets: the
    /// time of the group's live entry in the timer queue (None: no entry).
    /// Unused on the other packets.
    pub group_due: Option<Instant>,
}

/// Packets of a message that share one timer-queue entry: packets
/// `[g x TIMER_GROUP, (g + 1) x TIMER_GROUP)` form group `g`, whose entry
/// is due at the earliest `due` of its packets when it was armed.
///
/// One entry per packet cost a heap push and pop per packet: in a profile
/// of a 64 KiB-message stream at MTU 1500 (45 packets per message), the
/// heap's pops were the largest item of the sender's own time, a fifth of
/// it. A group costs one push and pop per group armed; that stream went
/// from 5635/5751/5629 to 5977/5881/5827 Mbit/s
/// (docs/measurements/session15.txt).
///
/// The price is an early wake: a packet confirmed before its deadline
/// leaves its group's entry in place while the message has packets in
/// flight, and when that entry fires the group is scanned (at most
/// `TIMER_GROUP` packets) and re-armed at the earliest deadline left. The
/// CTP spec gives each packet its resend period and says nothing of how
/// the timers are kept; every packet's deadlines are kept exactly.
pub const TIMER_GROUP: u32 = 64;

impl PktState {
    pub fn new(now: Instant) -> Self {
        Self {
            phase: PktPhase::Unsent,
            mult: 1,
            transmissions: 0,
            first_sent: now,
            due: now,
            resend_at: None,
            error_at: None,
            base: Duration::ZERO,
            acks: 0,
            seq: 0,
            early: false,
            postponed: false,
            first_seq: 0,
            probe_at: None,
            group_due: None,
        }
    }

    /// The earliest pending deadline: resend, error or tail probe.
    pub fn next_deadline(&self) -> Option<Instant> {
        [self.resend_at, self.error_at, self.probe_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Sets `due` to the earlier pending deadline; false if none is pending.
    pub fn update_due(&mut self) -> bool {
        match self.next_deadline() {
            Some(t) => {
                self.due = t;
                true
            }
            None => false,
        }
    }
}

/// One message in the sent-commands storage.
#[derive(Debug)]
pub struct SentMsg<P> {
    pub dest: Dest<P>,
    pub command: u16,
    /// Options as the application gave them (StartSession is per packet).
    pub options: Options,
    /// The destination's sending session.
    pub session: SessionId,
    /// Id of packet 0; packet `n` has id `first_id + n` (wrapping).
    pub first_id: u32,
    /// Wire packet count: 1 for a normal command, >= 2 for a large one.
    pub amount: u32,
    /// Data part size in bytes (every part but the last is this long).
    pub part_size: usize,
    /// The whole message body.
    pub data: Vec<u8>,
    /// Packet 0 carries StartSession (first packet to this destination).
    pub start_session: bool,
    /// Packet state; a normal command uses `single` and leaves `many` empty
    /// (no allocation on the small-command path).
    pub single: PktState,
    pub many: Vec<PktState>,
    /// Next packet to send for the first time.
    pub next_unsent: u32,
    /// Packets not yet confirmed.
    pub unconfirmed: u32,
    /// Takes turns in its session's round robin (`SendSession::queue`):
    /// queued there with packets left to release.
    pub active: bool,
    /// A "not confirmed" error was already reported for this message.
    pub errored: bool,
    /// The body the receiver pulls, for an offered message (PROTOCOL.md
    /// "Pulled messages"): the message stays stored after its
    /// announcement is confirmed, until the receiver's "done".
    pub offer: Option<Box<Offered>>,
}

/// The body of an offered message and how its parts were served.
pub struct Offered {
    /// The body.
    pub buf: Box<dyn crate::SendBuf>,
    /// Part size the receiver asks in (its first request fixes it; 0
    /// before).
    pub part: u32,
    /// When each part was last sent, microseconds after `epoch` plus one
    /// (0: never); allocated at the first request.
    pub served: Vec<u64>,
    /// The time the stamps count from.
    pub epoch: Instant,
    /// Sequence number of the last request served.
    pub last_seq: Option<u32>,
}

impl Offered {
    /// The body's size, bytes.
    pub fn size(&self) -> u64 {
        self.buf.bytes().len() as u64
    }

    /// Byte range of part `i` at the receiver's part size.
    pub fn part_range(&self, i: u32) -> (usize, usize) {
        let len = self.buf.bytes().len();
        let start = (i as usize).saturating_mul(self.part as usize).min(len);
        (start, (start + self.part as usize).min(len))
    }
}

impl std::fmt::Debug for Offered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offered")
            .field("size", &self.size())
            .field("part", &self.part)
            .finish_non_exhaustive()
    }
}

impl<P> SentMsg<P> {
    /// Packet count (>= 1).
    pub fn count(&self) -> u32 {
        self.amount.max(1)
    }
    pub fn pkt(&self, i: u32) -> &PktState {
        if self.many.is_empty() {
            &self.single
        } else {
            &self.many[i as usize]
        }
    }
    pub fn pkt_mut(&mut self, i: u32) -> &mut PktState {
        if self.many.is_empty() {
            &mut self.single
        } else {
            &mut self.many[i as usize]
        }
    }
    /// Packet indices of timer group `g` ([`TIMER_GROUP`]).
    pub fn group(&self, g: u32) -> std::ops::Range<u32> {
        let start = g * TIMER_GROUP;
        start..(start + TIMER_GROUP).min(self.count())
    }

    /// Makes the timer queue surface packet `i` (of message `key`) by its
    /// `due`: pushes an entry for its group unless the group's live entry
    /// already comes no later.
    pub fn arm(&mut self, i: u32, key: MsgId, timers: &mut TimerQueue<(MsgId, u32)>) {
        let due = self.pkt(i).due;
        let g = i / TIMER_GROUP;
        let lead = self.pkt_mut(g * TIMER_GROUP);
        if lead.group_due.is_none_or(|t| due < t) {
            lead.group_due = Some(due);
            timers.push(due, (key, g));
        }
    }

    /// Re-arms group `g` after its entry fired: updates the `due` of its
    /// packets in flight and pushes one entry at the earliest (none if no
    /// packet has a deadline left).
    pub fn rearm_group(&mut self, g: u32, key: MsgId, timers: &mut TimerQueue<(MsgId, u32)>) {
        let group = self.group(g);
        let mut earliest: Option<Instant> = None;
        for i in group.clone() {
            let p = self.pkt_mut(i);
            if p.phase == PktPhase::InFlight && p.update_due() {
                earliest = Some(earliest.map_or(p.due, |t| t.min(p.due)));
            }
        }
        self.pkt_mut(group.start).group_due = earliest;
        if let Some(t) = earliest {
            timers.push(t, (key, g));
        }
    }

    /// Whether a timer-queue entry for group `g` at `due` is its live one.
    pub fn timer_live(&self, g: u32, due: Instant) -> bool {
        g < self.count().div_ceil(TIMER_GROUP) && self.pkt(g * TIMER_GROUP).group_due == Some(due)
    }

    /// Byte range of packet `i`'s data part.
    pub fn part(&self, i: u32) -> (usize, usize) {
        let start = i as usize * self.part_size;
        let end = (start + self.part_size).min(self.data.len());
        (start, end.max(start))
    }
    /// Wire header of packet `i`.
    pub fn repr(&self, i: u32) -> Repr {
        let (s, e) = self.part(i);
        let mut options = self.options;
        if self.start_session && i == 0 {
            options = options.union(Options::START_SESSION);
        }
        if matches!(self.dest, Dest::Broadcast) {
            options = options.union(Options::BROADCAST);
        }
        Repr {
            command: self.command,
            confirm: false,
            number: if self.amount <= 1 { 0 } else { i },
            amount: self.amount,
            id: self.first_id.wrapping_add(i),
            message_size: self.data.len() as u64,
            options,
            payload_len: (e - s) as u16,
        }
    }
    /// Bytes on the wire of packet `i` (header + part), for window accounting.
    pub fn wire_len(&self, i: u32) -> usize {
        let (s, e) = self.part(i);
        CTP_HEADER_LEN + (e - s)
    }
}

slotmap::new_key_type! {
    /// A message's slot in a [`SentStore`].
    struct SentKey;
}

/// The sent-commands storage (CTP spec v1.2, "Storages"): the messages
/// awaiting confirmation, in slots. A message's [`MsgId`] is its slot's
/// key (index and version) as a `u64`: looking it up is an index and a
/// version compare, no hashing, and a stale id (its message confirmed or
/// dropped) finds nothing, since a slot's version changes on every reuse
/// and a slot whose version would wrap is retired (`slotmap`). Ids are
/// opaque: not sequential, never 0.
#[derive(Debug)]
pub(crate) struct SentStore<P> {
    slots: SlotMap<SentKey, SentMsg<P>>,
}

impl<P> Default for SentStore<P> {
    fn default() -> Self {
        Self {
            slots: SlotMap::with_key(),
        }
    }
}

impl<P> SentStore<P> {
    fn key(id: MsgId) -> SentKey {
        KeyData::from_ffi(id).into()
    }

    /// Stores `m`; returns its id.
    pub fn insert(&mut self, m: SentMsg<P>) -> MsgId {
        self.slots.insert(m).0.as_ffi()
    }

    pub fn get(&self, id: &MsgId) -> Option<&SentMsg<P>> {
        self.slots.get(Self::key(*id))
    }

    pub fn get_mut(&mut self, id: &MsgId) -> Option<&mut SentMsg<P>> {
        self.slots.get_mut(Self::key(*id))
    }

    pub fn remove(&mut self, id: &MsgId) -> Option<SentMsg<P>> {
        self.slots.remove(Self::key(*id))
    }

    pub fn contains_key(&self, id: &MsgId) -> bool {
        self.slots.contains_key(Self::key(*id))
    }

    /// Messages stored.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The stored messages and their ids.
    pub fn iter(&self) -> impl Iterator<Item = (MsgId, &SentMsg<P>)> + '_ {
        self.slots.iter().map(|(k, m)| (k.0.as_ffi(), m))
    }
}

/// A sending session's place in [`SendSessions`] (sessions are never
/// removed, so it stays valid for the endpoint's life).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionId(u32);

/// The sending sessions, one per destination: found by destination when a
/// message is sent or a confirmation arrives (the last one found is
/// remembered, so traffic with one peer hashes nothing; other lookups go
/// through a hash map), then by the [`SessionId`] its messages carry.
#[derive(Debug)]
pub(crate) struct SendSessions<P: Copy> {
    index: FxHashMap<Dest<P>, SessionId>,
    list: Vec<SendSession>,
    /// The destination found last, and its session.
    last: Cell<Option<(Dest<P>, SessionId)>>,
}

impl<P: Copy> Default for SendSessions<P> {
    fn default() -> Self {
        Self {
            index: FxHashMap::default(),
            list: Vec::new(),
            last: Cell::new(None),
        }
    }
}

impl<P: Copy + Eq + Hash> SendSessions<P> {
    /// The session of `dest`, created by `make` if it has none.
    pub fn id_of(&mut self, dest: Dest<P>, make: impl FnOnce() -> SendSession) -> SessionId {
        if let Some(id) = self.find(&dest) {
            return id;
        }
        let id = SessionId(u32::try_from(self.list.len()).expect("fewer than 2^32 sessions"));
        self.list.push(make());
        self.index.insert(dest, id);
        self.last.set(Some((dest, id)));
        id
    }

    /// The session of `dest`, if it has one.
    pub fn find(&self, dest: &Dest<P>) -> Option<SessionId> {
        if let Some((d, id)) = self.last.get() {
            if d == *dest {
                return Some(id);
            }
        }
        let id = *self.index.get(dest)?;
        self.last.set(Some((*dest, id)));
        Some(id)
    }

    pub fn get(&self, dest: &Dest<P>) -> Option<&SendSession> {
        self.find(dest).map(|id| &self.list[id.0 as usize])
    }

    pub fn contains_key(&self, dest: &Dest<P>) -> bool {
        self.find(dest).is_some()
    }

    /// Sessions.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn at_mut(&mut self, id: SessionId) -> &mut SendSession {
        &mut self.list[id.0 as usize]
    }

    pub fn list_at(&self, id: SessionId) -> &SendSession {
        &self.list[id.0 as usize]
    }
}

/// The sending half of a session with one destination (spec, "Storages":
/// next packet id and interchange timeout), plus this implementation's
/// send window and the send order of early resend (RFC 8985).
#[derive(Debug)]
pub(crate) struct SendSession {
    /// Id of the next packet to this destination (random start, +1, wraps).
    pub next_id: u32,
    /// The StartSession packet went out (the first packet to the destination).
    pub started: bool,
    /// The destination's resend timeout `T` and its evidence.
    pub timing: SendTiming,
    /// Messages with packets waiting for the window, served round-robin:
    /// single-packet messages, and at most `Config::max_active_large`
    /// multi-packet ones (`active_large`).
    pub queue: VecDeque<MsgId>,
    /// Multi-packet messages waiting for a turn in `queue`, in send order
    /// (entries of messages dropped meanwhile are skipped).
    pub waiting: VecDeque<MsgId>,
    /// Multi-packet messages in `queue`.
    pub active_large: usize,
    /// The stored messages by the id of their packet 0, in send order (see
    /// [`SendSession::msg`]).
    msgs: MsgIndex,
    /// Packets sent and unconfirmed.
    pub in_flight_pkts: usize,
    /// Wire bytes (header + part) sent and unconfirmed.
    pub in_flight_bytes: usize,
    /// Message bytes stored and not yet released to the window
    /// (`Config::notsent_lowat`).
    pub unsent_bytes: u64,
    /// Sequence number of the next transmission to this destination.
    pub tx_seq: u64,
    /// Transmissions in send order (seq, message, packet), for early resend
    /// and the first-sample re-base; entries of packets confirmed or sent
    /// again since are skipped.
    pub sent_order: VecDeque<(u64, MsgId, u32)>,
    /// One past the highest transmission sequence number confirmed (of
    /// packets sent once, so unambiguous): everything sent before it and
    /// still unconfirmed is presumed lost (RFC 8985 RACK, by send order).
    pub rack_seq: u64,
    /// Sequence number of the newest first transmission (the tail of what
    /// was sent: the tail probe's candidate).
    pub newest_first_seq: u64,
    /// Resent packets confirmed once, newest last, at most
    /// [`RESENT_WATCH`]: the confirmations of their other copies prove the
    /// resend spurious ([`crate::peer::SendTiming::prove_stall`]).
    pub resent_confirmed: VecDeque<ResentConfirmed>,
}

/// How many confirmed resent packets a session watches for the
/// confirmations of their other copies.
pub const RESENT_WATCH: usize = 16;

/// A resent packet whose first confirmation came (see
/// `SendSession::resent_confirmed`).
#[derive(Debug, Clone, Copy)]
pub struct ResentConfirmed {
    /// Its packet id.
    pub id: u32,
    /// From its first transmission to its first confirmation.
    pub delay: Duration,
    /// Copies sent and not yet confirmed (transmissions - 1 at the first
    /// confirmation). When every copy is confirmed, none was lost, and
    /// the first confirmation answered the first transmission (the path
    /// keeps order).
    pub copies_left: u32,
}

impl SendSession {
    /// A session starting at id `next_id` with timeout `timeout`.
    pub fn new(next_id: u32, timeout: Duration) -> Self {
        Self {
            next_id,
            started: false,
            timing: SendTiming::new(timeout),
            queue: VecDeque::new(),
            waiting: VecDeque::new(),
            active_large: 0,
            msgs: MsgIndex::default(),
            in_flight_pkts: 0,
            in_flight_bytes: 0,
            unsent_bytes: 0,
            tx_seq: 0,
            sent_order: VecDeque::new(),
            rack_seq: 0,
            newest_first_seq: 0,
            resent_confirmed: VecDeque::new(),
        }
    }

    /// Records a new message `key` whose packet 0 has id `first_id`: the
    /// session's next id before the message took its ids.
    pub fn add_msg(&mut self, first_id: u32, key: MsgId) {
        self.msgs.push(first_id, key);
    }

    /// The stored message whose packet 0 has id `first_id` (a confirmation
    /// names its packet by id and number).
    pub fn msg(&self, first_id: u32) -> Option<MsgId> {
        self.msgs.get(first_id)
    }

    /// Forgets the message whose packet 0 has id `first_id` (it left the
    /// storage).
    pub fn remove_msg(&mut self, first_id: u32) {
        self.msgs.remove(first_id);
    }

    /// Queues the new message `key` of `count` packets for release: a
    /// single-packet one, or a multi-packet one while fewer than `max` are
    /// active, takes turns at once; other multi-packet ones wait in send
    /// order. Returns whether it is active.
    pub fn enqueue(&mut self, key: MsgId, count: u32, max: usize) -> bool {
        if count > 1 {
            if self.active_large >= max {
                self.waiting.push_back(key);
                return false;
            }
            self.active_large += 1;
        }
        self.queue.push_back(key);
        true
    }

    /// A multi-packet message left the round robin (released its last
    /// packet, or was dropped before): the next waiting ones take its place.
    pub fn retire_large<P>(&mut self, sent: &mut SentStore<P>, max: usize) {
        self.active_large -= 1;
        while self.active_large < max {
            let Some(k) = self.waiting.pop_front() else {
                break;
            };
            let Some(m) = sent.get_mut(&k) else {
                continue;
            };
            m.active = true;
            self.active_large += 1;
            self.queue.push_back(k);
        }
    }

    /// Records a transmission of packet `idx` of `key`; returns its sequence number.
    pub fn note_transmission(&mut self, key: MsgId, idx: u32) -> u64 {
        let seq = self.tx_seq;
        self.tx_seq += 1;
        self.sent_order.push_back((seq, key, idx));
        seq
    }
}

/// A session's stored messages by the id of their packet 0, in send order.
/// Ids are given out in order (`next_id` + 1 per packet, wrapping) and
/// fewer than 2^31 packets are ever outstanding, so the entries are sorted
/// by their distance from the oldest one's id: a lookup is a binary search
/// (usually a hit on the first probe: confirmations come in about send
/// order), with no hashing. A removed message leaves its entry as a
/// tombstone (id 0: a [`MsgId`] is never 0) until it reaches the front, or
/// until tombstones are over half of the entries (then they are swept), so
/// the index holds at most about twice the stored messages.
#[derive(Debug, Default)]
struct MsgIndex {
    entries: VecDeque<(u32, MsgId)>,
    tombstones: usize,
}

impl MsgIndex {
    /// Tombstones tolerated before a sweep, at least.
    const SWEEP_AT: usize = 64;

    fn push(&mut self, first_id: u32, key: MsgId) {
        debug_assert!(self.entries.back().is_none_or(|b| {
            let base = self.entries[0].0;
            first_id.wrapping_sub(base) > b.0.wrapping_sub(base)
        }));
        self.entries.push_back((first_id, key));
    }

    /// Position of `first_id`'s entry.
    fn position(&self, first_id: u32) -> Option<usize> {
        let base = self.entries.front()?.0;
        if base == first_id {
            return Some(0);
        }
        let d = first_id.wrapping_sub(base);
        let i = self.entries.partition_point(|e| e.0.wrapping_sub(base) < d);
        (self.entries.get(i)?.0 == first_id).then_some(i)
    }

    fn get(&self, first_id: u32) -> Option<MsgId> {
        let i = self.position(first_id)?;
        let key = self.entries[i].1;
        (key != 0).then_some(key)
    }

    fn remove(&mut self, first_id: u32) {
        let Some(i) = self.position(first_id) else {
            return;
        };
        if i == 0 {
            self.entries.pop_front();
        } else if self.entries[i].1 != 0 {
            self.entries[i].1 = 0;
            self.tombstones += 1;
        }
        while self.entries.front().is_some_and(|e| e.1 == 0) {
            self.entries.pop_front();
            self.tombstones -= 1;
        }
        if self.tombstones >= Self::SWEEP_AT && 2 * self.tombstones > self.entries.len() {
            self.entries.retain(|e| e.1 != 0);
            self.tombstones = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(first_id: u32, session: SessionId) -> SentMsg<u8> {
        let now = Instant::now();
        SentMsg {
            dest: Dest::Peer(1),
            session,
            command: 1,
            options: Options::NONE,
            first_id,
            amount: 1,
            part_size: 1000,
            data: vec![first_id as u8],
            start_session: false,
            single: PktState::new(now),
            many: Vec::new(),
            next_unsent: 0,
            unconfirmed: 1,
            active: true,
            errored: false,
            offer: None,
        }
    }

    /// A message's id finds it until it is removed, and never again: not
    /// after its slot is reused by the next message either. Ids are never 0
    /// (the empty payload reference's tag).
    #[test]
    fn a_stale_message_id_finds_nothing_after_its_slot_is_reused() {
        let mut sessions: SendSessions<u8> = SendSessions::default();
        let sid = sessions.id_of(Dest::Peer(1), || {
            SendSession::new(7, std::time::Duration::from_millis(100))
        });
        assert_eq!(sessions.id_of(Dest::Peer(1), || unreachable!()), sid);
        let mut store = SentStore::default();
        let a = store.insert(msg(10, sid));
        assert_ne!(a, 0);
        assert_eq!(store.get(&a).map(|m| m.first_id), Some(10));
        assert_eq!(store.remove(&a).map(|m| m.first_id), Some(10));
        let b = store.insert(msg(11, sid));
        assert_ne!(a, b, "a reused slot has a new id");
        assert!(!store.contains_key(&a) && store.get(&a).is_none());
        assert!(store.remove(&a).is_none());
        assert_eq!(store.get_mut(&b).map(|m| m.first_id), Some(11));
        assert_eq!(store.len(), 1);
        assert!(sessions.get(&Dest::Peer(2)).is_none());
        assert_eq!(sessions.len(), 1);
    }

    /// The message index finds each stored message by its first id across
    /// the id wrap, forgets removed ones, and stays within about twice the
    /// stored messages while an old message stays unconfirmed.
    #[test]
    fn the_message_index_finds_messages_across_the_id_wrap_and_stays_bounded() {
        let mut ix = MsgIndex::default();
        let start = u32::MAX - 5;
        // Messages of 3 packets each: ids start, start+3, ... (wrapping).
        let first = |n: u32| start.wrapping_add(3 * n);
        for n in 0..10 {
            ix.push(first(n), u64::from(n) + 1);
        }
        for n in 0..10 {
            assert_eq!(ix.get(first(n)), Some(u64::from(n) + 1), "message {n}");
            assert_eq!(ix.get(first(n).wrapping_add(1)), None, "not a first id");
        }
        assert_eq!(ix.get(first(10)), None);
        ix.remove(first(4));
        assert_eq!(ix.get(first(4)), None);
        assert_eq!(ix.get(first(5)), Some(6));
        ix.remove(first(0));
        assert_eq!(ix.entries.len(), 9, "the front tombstone goes at once");
        // Message 1 stays; 10000 more come and go behind it.
        for n in 10..10_010 {
            ix.push(first(n), u64::from(n) + 1);
            if n >= 12 {
                ix.remove(first(n - 2));
            }
            assert!(
                ix.entries.len() <= 2 * 12 + MsgIndex::SWEEP_AT,
                "{}",
                ix.entries.len()
            );
        }
        assert_eq!(ix.get(first(1)), Some(2));
        assert_eq!(ix.get(first(10_009)), Some(10_010));
        assert_eq!(ix.get(first(100)), None);
    }
}
