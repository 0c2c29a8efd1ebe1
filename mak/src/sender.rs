//! The sans-IO sender of one stream (paper §3.2, fig. 6; notes "Sender
//! state machine"), with the paper's baselines as strategies.
//!
//! States: **SENDING** while the window has room and data is queued;
//! **WAITING** while packets are unacknowledged (window full, or the last
//! packet sent) with the fixed timer Tw running; **RESENDING** (transient)
//! while retransmissions are queued. Rules:
//!
//! - new packets are multicast in sequence; the packet that fills the window
//!   (`base + W - 1`) or empties the send queue carries ACK_REQ (the latter
//!   also LAST) and (re)starts Tw (§3.1);
//! - an ACK from member r moves `acked[r]` (cumulative); the window frees up
//!   to the lowest `acked` over the members (§3.1: the buffer is freed only
//!   when every member acknowledged);
//! - Tw expiry: the latest ACK_REQ packet is multicast again and Tw restarts
//!   (§3.1 "重发最后一个数据包", §3.2 (3)); beyond the paper, a member that
//!   let K expiries pass (and at least `min_silence`) is declared silent,
//!   reported by id, and no longer waited for;
//! - a NAK: each listed packet still in the window is multicast again once
//!   per NAK (§3.1), except one retransmitted less than δ ago (beyond the
//!   paper; notes).
//!
//! Baselines (§2): ACK = the same with a window of 1 and no NAKs;
//! iterative = window 1, each packet unicast to one member after the other,
//! each acknowledged before the next member is served; NAK = no ACK requests
//! honoured, retransmission per NAK without de-duplication, and, departing
//! from the paper only to terminate, packets freed `nak_linger` after their
//! last transmission and the last packet before a pause (queue empty or
//! window full) repeated `nak_tail_repeats` times.

use std::collections::VecDeque;
use std::time::Instant;

use netcore::time::later;
use netcore::timer::{TimerKind, TimerTable};
use tracing::{debug, trace, warn, Span};

use crate::config::{Config, ConfigError};
use crate::member::{Addr, Dest, GroupId, Member, MemberId, Transmit};
pub use crate::stats::SenderStats;
use crate::wire::{Flags, Header, Repr, Seq, SeqList, Strategy};

/// Bytes charged against `send_buffer_bytes` per message beyond its data
/// (bounds the number of queued empty messages).
const MSG_OVERHEAD: usize = 64;

/// Something the sender reports to its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SenderEvent<A> {
    /// The message left the window. `confirmed`: every member still in the
    /// group acknowledged it (never for the NAK baseline, which has no
    /// acknowledgements, nor when no member is left).
    MessageDone {
        /// The id `send` returned.
        msg: u32,
        /// Acknowledged by every member still in the group.
        confirmed: bool,
    },
    /// `member` let K Tw expiries (and `min_silence`) pass without
    /// acknowledging; it is no longer waited for. `acked`: the last packet
    /// it acknowledged.
    MemberSilent {
        /// The member (id and address).
        member: Member<A>,
        /// The last packet it acknowledged.
        acked: Seq,
    },
}

/// Why `send` refused a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The message is larger than `max_message_bytes`.
    #[error("message of {size} bytes exceeds max_message_bytes ({max} bytes)")]
    TooLarge {
        /// Its size, bytes.
        size: usize,
        /// `max_message_bytes`.
        max: usize,
    },
    /// The send buffer holds `queued` bytes; `size` more would exceed
    /// `limit`. Retry after [`SenderEvent::MessageDone`].
    #[error(
        "send buffer full: {queued} bytes queued or unacknowledged, {size} more exceed the limit of {limit}; retry after a MessageDone event"
    )]
    Full {
        /// Bytes held, including a per-message overhead of 64.
        queued: usize,
        /// The refused message's size, bytes.
        size: usize,
        /// `send_buffer_bytes`.
        limit: usize,
    },
    /// Every member was removed or declared silent.
    #[error("the group has no active member (all removed or declared silent)")]
    NoMembers,
}

/// Why a membership change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// The sender holds queued or unacknowledged packets.
    #[error("members can join only while the sender is idle (nothing queued or unacknowledged)")]
    Busy,
    /// The id is taken by an active member.
    #[error("member id {0} is already an active member")]
    Duplicate(u16),
    /// The id is the sender's own.
    #[error("member id {0} is the source itself")]
    SelfMember(u16),
}

/// The sender's state (paper fig. 6, plus IDLE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderState {
    /// Nothing queued, nothing unacknowledged.
    Idle,
    /// Data queued and room in the window.
    Sending,
    /// Sent packets unacknowledged and nothing more may be sent now.
    Waiting,
    /// Retransmissions queued (transient).
    Resending,
}

/// Status of a member, for diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus<A> {
    /// The member.
    pub member: Member<A>,
    /// False once removed or declared silent.
    pub active: bool,
    /// Last packet it acknowledged.
    pub acked: Seq,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// Tw: waiting for acknowledgements.
    Ack,
    /// NAK baseline: repeat the last packet.
    Tail,
    /// NAK baseline: free the oldest packet.
    Linger,
}

impl TimerKind for Timer {
    const ALL: &'static [Self] = &[Timer::Ack, Timer::Tail, Timer::Linger];
    fn index(self) -> usize {
        self as usize
    }
}

/// Why a packet is (re)transmitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// Iterative: the first transmission to the next member.
    Fresh,
    Nak,
    Timeout,
    Tail,
}

#[derive(Debug, Clone, Copy)]
struct Tx {
    seq: Seq,
    /// Member index; `None` = the group.
    to: Option<usize>,
    cause: Cause,
}

#[derive(Debug)]
struct OutMsg {
    id: u32,
    data: Vec<u8>,
    first: Seq,
    packets: u32,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    flags: Flags,
    /// Last transmission (first or not): the NAK baseline's linger.
    last_tx: Instant,
    /// Last retransmission: the δ de-duplication.
    last_retx: Option<Instant>,
    queued: bool,
}

#[derive(Debug, Clone)]
struct MemberState<A> {
    member: Member<A>,
    active: bool,
    /// One past the last packet it acknowledged.
    ack_next: Seq,
    /// Tw expiries since it last made progress.
    expiries: u32,
    /// Since when it owes an acknowledgement (reset on progress).
    owed_since: Option<Instant>,
}

/// The sender of one stream: `(group, me)`, to the configured members.
#[derive(Debug)]
pub struct Sender<A: Addr> {
    cfg: Config,
    window: u32,
    payload: usize,
    group: GroupId,
    me: MemberId,
    members: Vec<MemberState<A>>,
    msgs: VecDeque<OutMsg>,
    queued_bytes: usize,
    next_msg: u32,
    /// Oldest packet not freed.
    base: Seq,
    /// Next packet to transmit for the first time.
    next: Seq,
    /// One past the last packet of the queued messages.
    end: Seq,
    /// Packets `base..next`.
    slots: VecDeque<Slot>,
    /// The latest ACK_REQ packet not yet acknowledged by every member.
    ack_req: Option<Seq>,
    /// Iterative: the member being served packet `base`.
    target: Option<usize>,
    /// NAK baseline: the last packet and its repeats so far.
    tail: Option<(Seq, u32)>,
    timers: TimerTable<Timer, 3>,
    retx: VecDeque<Tx>,
    events: VecDeque<SenderEvent<A>>,
    stats: SenderStats,
    /// `mak_sender` (see `span.rs`).
    span: Span,
}

impl<A: Addr> Sender<A> {
    /// A sender for group `group` whose own member id is `me`, to `members`
    /// (every receiver; not `me`), numbering packets from `start`.
    /// Receivers must be created with the same `start`.
    ///
    /// Errors: an invalid `cfg` ([`Config::validate`]), a duplicate member
    /// id, or `me` among the members.
    pub fn new(
        cfg: Config,
        group: GroupId,
        me: MemberId,
        members: Vec<Member<A>>,
        start: Seq,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        for (i, m) in members.iter().enumerate() {
            if m.id == me {
                return Err(ConfigError::SelfMember(me.0));
            }
            if members[..i].iter().any(|o| o.id == m.id) {
                return Err(ConfigError::DuplicateMember(m.id.0));
            }
        }
        let members = members
            .into_iter()
            .map(|member| MemberState {
                member,
                active: true,
                ack_next: start,
                expiries: 0,
                owed_since: None,
            })
            .collect();
        let span = tracing::debug_span!("mak_sender", group = group.0, me = me.0);
        Ok(Self {
            window: cfg.effective_window(),
            payload: cfg.max_payload(),
            cfg,
            group,
            me,
            members,
            msgs: VecDeque::new(),
            queued_bytes: 0,
            next_msg: 0,
            base: start,
            next: start,
            end: start,
            slots: VecDeque::new(),
            ack_req: None,
            target: None,
            tail: None,
            timers: TimerTable::default(),
            retx: VecDeque::new(),
            events: VecDeque::new(),
            stats: SenderStats::default(),
            span,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Queues a message (copied; any size up to `max_message_bytes`, split
    /// into packets of at most `mtu - 24` bytes). Returns its id, which
    /// [`SenderEvent::MessageDone`] and the receivers' deliveries carry.
    ///
    /// Errors: [`SendError::TooLarge`], [`SendError::Full`] (retry after a
    /// `MessageDone`), [`SendError::NoMembers`].
    pub fn send(&mut self, data: impl Into<Vec<u8>>) -> Result<u32, SendError> {
        let data = data.into();
        netcore::in_span!(self, state "MAK state", self.queue(data))
    }

    fn queue(&mut self, data: Vec<u8>) -> Result<u32, SendError> {
        if data.len() > self.cfg.max_message_bytes {
            return Err(SendError::TooLarge {
                size: data.len(),
                max: self.cfg.max_message_bytes,
            });
        }
        let cost = data.len() + MSG_OVERHEAD;
        if self.queued_bytes + cost > self.cfg.send_buffer_bytes {
            return Err(SendError::Full {
                queued: self.queued_bytes,
                size: data.len(),
                limit: self.cfg.send_buffer_bytes,
            });
        }
        if !self.members.iter().any(|m| m.active) {
            return Err(SendError::NoMembers);
        }
        let packets = data.len().div_ceil(self.payload).max(1) as u32;
        let id = self.next_msg;
        self.next_msg = self.next_msg.wrapping_add(1);
        trace!(msg = id, bytes = data.len(), packets, first = %self.end, "MAK message queued");
        self.msgs.push_back(OutMsg {
            id,
            data,
            first: self.end,
            packets,
        });
        self.end = self.end.add(packets);
        self.queued_bytes += cost;
        Ok(id)
    }

    /// Handles a received frame from `from` (the emitter's unicast address).
    /// Malformed, foreign or forged frames are counted and dropped before
    /// they change any state.
    pub fn handle_frame(&mut self, now: Instant, from: A, frame: &[u8]) {
        netcore::in_span!(self, state "MAK state", self.on_frame(now, from, frame))
    }

    fn on_frame(&mut self, now: Instant, from: A, frame: &[u8]) {
        match Repr::parse(frame) {
            Ok(r) => self.on_repr(now, from, &r),
            Err(e) => {
                self.stats.malformed += 1;
                debug!(error = %e, "MAK sender: malformed frame dropped");
            }
        }
    }

    /// Handles a frame already parsed (by a carrier that demultiplexes on
    /// the header).
    pub fn handle_repr(&mut self, now: Instant, from: A, repr: &Repr) {
        netcore::in_span!(self, state "MAK state", self.on_repr(now, from, repr))
    }

    fn on_repr(&mut self, now: Instant, from: A, repr: &Repr) {
        let h = repr.header();
        if h.group != self.group || h.source != self.me || h.strategy != self.cfg.strategy {
            self.stats.foreign += 1;
            return;
        }
        if matches!(repr, Repr::Data { .. }) {
            // Our own DATA looped back by the carrier, or a forgery.
            self.stats.unexpected += 1;
            return;
        }
        let Some(mi) = self.members.iter().position(|m| m.member.id == h.member) else {
            self.stats.forged += 1;
            debug!(
                member = h.member.0,
                "MAK sender: frame from an unknown member dropped"
            );
            return;
        };
        if self.members[mi].member.addr != from {
            self.stats.forged += 1;
            debug!(
                member = h.member.0,
                ?from,
                "MAK sender: member id from a foreign address"
            );
            return;
        }
        match *repr {
            Repr::Ack { seq, .. } if self.cfg.strategy != Strategy::Nak => {
                self.on_ack(now, mi, seq)
            }
            Repr::Nak { missing, .. }
                if matches!(self.cfg.strategy, Strategy::Mak | Strategy::Nak) =>
            {
                self.on_nak(now, mi, missing)
            }
            _ => self.stats.unexpected += 1,
        }
    }

    fn on_ack(&mut self, now: Instant, mi: usize, seq: Seq) {
        let ack_next = seq.add(1);
        if ack_next > self.next {
            self.stats.forged += 1;
            debug!(%seq, next = %self.next, "MAK sender: ACK of packets never sent dropped");
            return;
        }
        self.stats.acks_received += 1;
        let m = &mut self.members[mi];
        if !m.active || ack_next <= m.ack_next {
            self.stats.acks_stale += 1;
            return;
        }
        m.ack_next = ack_next;
        m.expiries = 0;
        m.owed_since = match self.ack_req {
            Some(r) if ack_next <= r => Some(now),
            _ => None,
        };
        trace!(member = m.member.id.0, acked = %seq, "MAK ACK");
        if self.cfg.strategy == Strategy::Iterative
            && self.target == Some(mi)
            && ack_next > self.base
        {
            self.next_target(now, mi);
        }
        self.advance(now);
    }

    fn on_nak(&mut self, now: Instant, mi: usize, missing: SeqList) {
        // Validate the whole list before acting on any entry.
        if missing.iter().any(|s| s >= self.next) {
            self.stats.forged += 1;
            debug!(
                member = self.members[mi].member.id.0,
                "MAK sender: NAK of packets never sent dropped"
            );
            return;
        }
        self.stats.naks_received += 1;
        self.stats.nak_entries += missing.len() as u64;
        let dedup = if self.cfg.strategy == Strategy::Nak {
            None
        } else {
            Some(self.cfg.resend_dedup)
        };
        debug!(
            member = self.members[mi].member.id.0,
            ?missing,
            "MAK NAK received"
        );
        for seq in missing.iter() {
            if seq < self.base {
                self.stats.nak_entries_stale += 1;
                continue;
            }
            let i = seq.diff(self.base) as usize;
            let slot = &mut self.slots[i];
            let recent = match (dedup, slot.last_retx) {
                (Some(d), Some(r)) => now.saturating_duration_since(r) < d,
                _ => false,
            };
            if slot.queued || recent {
                self.stats.nak_entries_dedup += 1;
                continue;
            }
            slot.queued = true;
            self.retx.push_back(Tx {
                seq,
                to: None,
                cause: Cause::Nak,
            });
        }
    }

    /// Iterative: member `done` has the packet; serve the next one that
    /// does not.
    fn next_target(&mut self, _now: Instant, done: usize) {
        let base = self.base;
        let n = self.members.len();
        let next = (1..=n)
            .map(|k| (done + k) % n)
            .find(|&i| self.members[i].active && self.members[i].ack_next <= base);
        self.target = next;
        self.timers.stop(Timer::Ack);
        if let Some(t) = next {
            self.slots[0].queued = true;
            self.retx.push_back(Tx {
                seq: base,
                to: Some(t),
                cause: Cause::Fresh,
            });
        }
    }

    /// Frees what every active member acknowledged, completes messages,
    /// settles the outstanding ACK request.
    fn advance(&mut self, now: Instant) {
        if self.cfg.strategy != Strategy::Nak {
            let low = self
                .members
                .iter()
                .filter(|m| m.active)
                .map(|m| m.ack_next)
                .reduce(|a, b| if b < a { b } else { a })
                .unwrap_or(self.next);
            self.free_to(low);
            if let Some(r) = self.ack_req {
                if !self.members.iter().any(|m| m.active && m.ack_next <= r) {
                    trace!(req = %r, "MAK ACK request satisfied");
                    self.ack_req = None;
                    self.timers.stop(Timer::Ack);
                }
            }
        } else {
            self.rearm_linger();
        }
        let _ = now;
    }

    /// Frees packets before `to` and completes the messages they end.
    fn free_to(&mut self, to: Seq) {
        if to <= self.base {
            return;
        }
        let n = to.diff(self.base) as usize;
        self.slots.drain(..n.min(self.slots.len()));
        self.base = to;
        trace!(base = %self.base, "MAK window freed");
        let confirmed = self.cfg.strategy != Strategy::Nak && self.members.iter().any(|m| m.active);
        while let Some(m) = self.msgs.front() {
            if self.base.diff(m.first) < m.packets as i32 {
                break;
            }
            let m = self.msgs.pop_front().expect("front exists");
            self.queued_bytes -= m.data.len() + MSG_OVERHEAD;
            self.stats.messages_done += 1;
            self.events.push_back(SenderEvent::MessageDone {
                msg: m.id,
                confirmed,
            });
        }
    }

    fn rearm_linger(&mut self) {
        match (self.cfg.nak_linger, self.slots.front()) {
            (Some(l), Some(s)) => self.timers.set(Timer::Linger, later(s.last_tx, l)),
            _ => self.timers.stop(Timer::Linger),
        }
    }

    /// Handles expired timers; call at (or after) [`poll_timeout`](Self::poll_timeout).
    pub fn handle_timeout(&mut self, now: Instant) {
        netcore::in_span!(self, state "MAK state", self.on_timers(now))
    }

    fn on_timers(&mut self, now: Instant) {
        while let Some(t) = self.timers.pop_expired(now) {
            match t {
                Timer::Ack => self.on_ack_timeout(now),
                Timer::Tail => self.on_tail_timeout(now),
                Timer::Linger => self.on_linger(now),
            }
        }
    }

    fn on_ack_timeout(&mut self, now: Instant) {
        let Some(r) = self.ack_req else {
            return;
        };
        self.stats.ack_timeouts += 1;
        let (k, min_silence) = (self.cfg.max_expiries, self.cfg.min_silence);
        let iterative = self.cfg.strategy == Strategy::Iterative;
        let mut silenced = false;
        for (i, m) in self.members.iter_mut().enumerate() {
            let waited_on = if iterative {
                self.target == Some(i)
            } else {
                m.active && m.ack_next <= r
            };
            if !waited_on {
                continue;
            }
            m.expiries += 1;
            let since = *m.owed_since.get_or_insert(now);
            if m.expiries >= k && now.saturating_duration_since(since) >= min_silence {
                m.active = false;
                silenced = true;
                self.stats.members_silent += 1;
                let acked = m.ack_next.sub(1);
                warn!(member = m.member.id.0, addr = ?m.member.addr, %acked, expiries = m.expiries,
                      "MAK member silent: no acknowledgement, no longer waited for");
                self.events.push_back(SenderEvent::MemberSilent {
                    member: m.member,
                    acked,
                });
            }
        }
        debug!(req = %r, expiries = self.stats.ack_timeouts, "MAK Tw expired");
        if iterative {
            if let Some(t) = self.target {
                if self.members[t].active {
                    self.queue_timeout_resend(r, Some(t), now);
                } else {
                    self.next_target(now, t);
                    if self.target.is_none() {
                        self.ack_req = None;
                    }
                }
            }
            self.advance(now);
            return;
        }
        if silenced {
            self.advance(now);
        }
        if self.ack_req.is_some() {
            self.queue_timeout_resend(r, None, now);
        }
    }

    fn queue_timeout_resend(&mut self, r: Seq, to: Option<usize>, now: Instant) {
        if r >= self.base {
            let slot = &mut self.slots[r.diff(self.base) as usize];
            if !slot.queued {
                slot.queued = true;
                self.retx.push_back(Tx {
                    seq: r,
                    to,
                    cause: Cause::Timeout,
                });
            }
        }
        self.timers
            .set(Timer::Ack, later(now, self.cfg.ack_timeout));
    }

    fn on_tail_timeout(&mut self, now: Instant) {
        let Some((s, k)) = self.tail else {
            return;
        };
        if s < self.base || s.add(1) != self.next || k >= self.cfg.nak_tail_repeats {
            self.tail = None;
            return;
        }
        self.tail = Some((s, k + 1));
        let slot = &mut self.slots[s.diff(self.base) as usize];
        if !slot.queued {
            slot.queued = true;
            self.retx.push_back(Tx {
                seq: s,
                to: None,
                cause: Cause::Tail,
            });
        }
        self.timers
            .set(Timer::Tail, later(now, self.cfg.ack_timeout));
    }

    fn on_linger(&mut self, now: Instant) {
        let Some(l) = self.cfg.nak_linger else {
            return;
        };
        let n = self
            .slots
            .iter()
            .take_while(|s| later(s.last_tx, l) <= now)
            .count();
        if n > 0 {
            self.free_to(self.base.add(n as u32));
        }
        self.rearm_linger();
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) must be
    /// called (None while no timer runs).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Writes the next frame to send into `buf` (at least `mtu` bytes) and
    /// returns its destination and length. Call until `None` after every
    /// event; retransmissions go first, then new packets while the window
    /// has room.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<A>> {
        netcore::in_span!(self, state "MAK state", self.transmit(now, buf))
    }

    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<A>> {
        while let Some(tx) = self.retx.pop_front() {
            if tx.seq < self.base {
                continue;
            }
            let i = tx.seq.diff(self.base) as usize;
            let slot = &mut self.slots[i];
            slot.queued = false;
            slot.last_tx = now;
            let mut flags = slot.flags;
            match tx.cause {
                Cause::Fresh => {
                    self.stats.data_sent += 1;
                    self.timers
                        .set(Timer::Ack, later(now, self.cfg.ack_timeout));
                    if let Some(t) = tx.to {
                        self.members[t].owed_since = Some(now);
                    }
                }
                Cause::Nak => self.stats.retx_nak += 1,
                Cause::Timeout => self.stats.retx_timeout += 1,
                Cause::Tail => self.stats.retx_tail += 1,
            }
            if tx.cause != Cause::Fresh {
                flags = flags.union(Flags::RETX);
                slot.last_retx = Some(now);
            }
            if i == 0 && self.cfg.strategy == Strategy::Nak {
                self.rearm_linger();
            }
            trace!(seq = %tx.seq, cause = ?tx.cause, "MAK retransmission");
            let dest = match tx.to {
                Some(t) => Dest::Member(self.members[t].member.addr),
                None => Dest::Group,
            };
            let len = self.emit_data(tx.seq, flags, buf);
            return Some(Transmit { dest, len });
        }
        if self.next == self.end || self.next.diff(self.base) as u32 >= self.window {
            return None;
        }
        self.send_new(now, buf)
    }

    fn send_new(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<A>> {
        let seq = self.next;
        let (mi, idx) = self.locate(seq);
        let m = &self.msgs[mi];
        let mut flags = Flags::empty();
        if idx == 0 {
            flags = flags.union(Flags::START);
        }
        if idx + 1 == m.packets {
            flags = flags.union(Flags::END);
        }
        let last = seq.add(1) == self.end;
        let fills = seq.diff(self.base) as u32 + 1 == self.window;
        let strategy = self.cfg.strategy;
        if last {
            flags = flags.union(Flags::ACK_REQ).union(Flags::LAST);
        } else if fills && strategy != Strategy::Nak {
            flags = flags.union(Flags::ACK_REQ);
        }
        self.slots.push_back(Slot {
            flags,
            last_tx: now,
            last_retx: None,
            queued: false,
        });
        self.next = seq.add(1);
        self.stats.data_sent += 1;
        // Emit before the bookkeeping below, which may free the packet (no
        // member left) and its message with it.
        let len = self.emit_data(seq, flags, buf);
        self.stats.bytes_sent += (len - crate::wire::DATA_HEADER_LEN) as u64;
        let mut dest = Dest::Group;
        match strategy {
            Strategy::Nak => {
                // The packet before a pause (nothing queued, or the window
                // full until a linger expires) is repeated: a receiver
                // learns of a loss only from a later packet.
                if last || fills {
                    self.tail = Some((seq, 0));
                    self.timers
                        .set(Timer::Tail, later(now, self.cfg.ack_timeout));
                }
                if self.slots.len() == 1 {
                    self.rearm_linger();
                }
            }
            Strategy::Iterative => {
                let t = self
                    .members
                    .iter()
                    .position(|m| m.active && m.ack_next <= seq);
                self.target = t;
                match t {
                    Some(t) => {
                        dest = Dest::Member(self.members[t].member.addr);
                        self.members[t].owed_since = Some(now);
                        self.ack_req = Some(seq);
                        self.stats.ack_requests += 1;
                        self.timers
                            .set(Timer::Ack, later(now, self.cfg.ack_timeout));
                    }
                    // No member left: the packet completes as sent.
                    None => self.advance(now),
                }
            }
            Strategy::Mak | Strategy::Ack => {
                if flags.contains(Flags::ACK_REQ) {
                    self.ack_req = Some(seq);
                    self.stats.ack_requests += 1;
                    for m in self.members.iter_mut().filter(|m| m.active) {
                        m.owed_since.get_or_insert(now);
                    }
                    self.timers
                        .set(Timer::Ack, later(now, self.cfg.ack_timeout));
                    trace!(%seq, ?flags, "MAK ACK request");
                    self.advance(now);
                }
            }
        }
        Some(Transmit { dest, len })
    }

    /// The message holding packet `seq` (index into `msgs`) and the packet's
    /// index in it.
    fn locate(&self, seq: Seq) -> (usize, u32) {
        let mi = self
            .msgs
            .partition_point(|m| seq.diff(m.first) >= m.packets as i32);
        let m = &self.msgs[mi];
        (mi, seq.diff(m.first) as u32)
    }

    fn emit_data(&self, seq: Seq, flags: Flags, buf: &mut [u8]) -> usize {
        let (mi, idx) = self.locate(seq);
        let m = &self.msgs[mi];
        let from = idx as usize * self.payload;
        let to = (from + self.payload).min(m.data.len());
        Repr::Data {
            header: Header {
                strategy: self.cfg.strategy,
                group: self.group,
                source: self.me,
                member: self.me,
            },
            flags,
            seq,
            msg: m.id,
            msg_len: m.data.len() as u32,
            payload: &m.data[from.min(to)..to],
        }
        .emit(buf)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<SenderEvent<A>> {
        self.events.pop_front()
    }

    /// The state of fig. 6.
    pub fn state(&self) -> SenderState {
        if !self.retx.is_empty() {
            SenderState::Resending
        } else if self.next != self.end && (self.next.diff(self.base) as u32) < self.window {
            SenderState::Sending
        } else if self.base != self.next {
            SenderState::Waiting
        } else {
            SenderState::Idle
        }
    }

    /// Whether `send` of a message of `len` bytes would be accepted now by
    /// the send buffer (it may still fail with `TooLarge` or `NoMembers`).
    pub fn has_room(&self, len: usize) -> bool {
        self.queued_bytes + len + MSG_OVERHEAD <= self.cfg.send_buffer_bytes
    }

    /// Bytes held in the send buffer: queued and unacknowledged messages,
    /// plus 64 per message.
    pub fn buffered_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Whether `poll_transmit` would return a frame now (retransmissions
    /// queued, or new packets with room in the window).
    pub fn wants_transmit(&self) -> bool {
        !self.retx.is_empty()
            || (self.next != self.end && (self.next.diff(self.base) as u32) < self.window)
    }

    /// True when nothing is queued or unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.base == self.end
    }

    /// The window: oldest packet not freed, next packet to send.
    pub fn window(&self) -> (Seq, Seq) {
        (self.base, self.next)
    }

    /// Counters.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// The members and what they acknowledged.
    pub fn members(&self) -> impl Iterator<Item = MemberStatus<A>> + '_ {
        self.members.iter().map(|m| MemberStatus {
            member: m.member,
            active: m.active,
            acked: m.ack_next.sub(1),
        })
    }

    /// Stops waiting for member `id` (it left the group); returns it, or
    /// `None` if it is not an active member. Packets only it lacked are
    /// freed and their messages complete.
    pub fn remove_member(&mut self, now: Instant, id: MemberId) -> Option<Member<A>> {
        netcore::in_span!(self, state "MAK state", self.remove(now, id))
    }

    fn remove(&mut self, now: Instant, id: MemberId) -> Option<Member<A>> {
        let i = self
            .members
            .iter()
            .position(|m| m.member.id == id && m.active)?;
        self.members[i].active = false;
        debug!(member = id.0, "MAK member removed");
        if self.target == Some(i) {
            self.next_target(now, i);
        }
        self.advance(now);
        Some(self.members[i].member)
    }

    /// Adds (or re-activates) a member. Only while the sender is idle, so
    /// that the new member owes nothing already sent; returns the sequence
    /// number its [`Receiver`](crate::Receiver) must start at.
    ///
    /// Errors: [`MembershipError::Busy`] unless [`is_idle`](Self::is_idle),
    /// [`MembershipError::Duplicate`], [`MembershipError::SelfMember`].
    pub fn add_member(&mut self, member: Member<A>) -> Result<Seq, MembershipError> {
        netcore::in_span!(self, self.add(member))
    }

    fn add(&mut self, member: Member<A>) -> Result<Seq, MembershipError> {
        if member.id == self.me {
            return Err(MembershipError::SelfMember(member.id.0));
        }
        if !self.is_idle() {
            return Err(MembershipError::Busy);
        }
        let state = MemberState {
            member,
            active: true,
            ack_next: self.next,
            expiries: 0,
            owed_since: None,
        };
        match self.members.iter().position(|m| m.member.id == member.id) {
            Some(i) if self.members[i].active => {
                return Err(MembershipError::Duplicate(member.id.0))
            }
            Some(i) => self.members[i] = state,
            None => self.members.push(state),
        }
        debug!(member = member.id.0, start = %self.next, "MAK member added");
        Ok(self.next)
    }
}

#[cfg(test)]
#[path = "sender_tests.rs"]
mod tests;
