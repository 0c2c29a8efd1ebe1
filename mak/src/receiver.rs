//! The sans-IO receiver of one source's stream (paper §3.2, fig. 7; notes
//! "Receiver state machine").
//!
//! State: `next`, the first packet not yet consumed; a window of W slots
//! from `next` holding packets received out of order; the error table E,
//! the slots still missing below the highest packet received, each with a
//! "suppressed until" instant. States: **RECEIVING** (E empty), **WAITING**
//! (E not empty, the random timer Tr running); NAK, FIX and ACK are the
//! transient actions below. Rules:
//!
//! - DATA at `next` is consumed, and with it the packets stored after it;
//!   DATA beyond `next` opens a gap: its missing packets join E and Tr is
//!   armed at a **random** instant in `[0, Dmax]` (§3.2 receiver (2));
//! - a retransmission (or late packet) fills its slot and leaves E (FIX);
//! - once every packet up to one that carried ACK_REQ is consumed, an ACK of
//!   everything consumed is unicast to the source (ACK, §3.2 receiver (5));
//!   a duplicate ACK_REQ packet already consumed is acknowledged again (the
//!   source resent it: our ACK was lost);
//! - a NAK overheard from another member suppresses the entries of E it
//!   lists for Ts (FIX: nak\[2,4,5\] becomes nak\[1,5\], §3.1);
//! - Tr expiry: the unsuppressed entries of E are multicast as one NAK
//!   (as many as fit a frame) and suppressed for Ts (NAK, §3.2 receiver
//!   (3)); Tr is re-armed after the earliest suppression ends plus a fresh
//!   random delay, so a lost retransmission is naked again (an
//!   interpretation: the figure is not in the text);
//! - beyond the paper: after K Tr expiries (and `min_silence`) without any
//!   missing packet arriving, the source is reported silent and naking
//!   stops until new DATA arrives; DATA beyond the window means the source
//!   gave up on this receiver ([`ReceiverEvent::Abandoned`]).
//!
//! Baselines: NAK = Tr of zero (a NAK as soon as a gap shows), unicast to
//! the source, no suppression by others, no ACKs, re-naked after Ts; ACK
//! and iterative = ACKs only (their stop-and-wait senders leave no gaps).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use netcore::time::later;
use netcore::timer::{TimerKind, TimerTable};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tracing::{debug, trace, warn, Span};

use crate::config::{Config, ConfigError};
use crate::member::{Addr, Dest, GroupId, Member, MemberId, Transmit};
use crate::reassembly::{Reassembly, ReceiverEvent};
pub use crate::stats::ReceiverStats;
use crate::wire::{Flags, Header, Repr, Seq, SeqList, Strategy};

/// The receiver's state (paper fig. 7; NAK, FIX and ACK are transient).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverState {
    /// No packet missing.
    Receiving,
    /// Packets missing (E not empty), Tr running.
    Waiting,
    /// The source moved on without this receiver.
    Abandoned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// Tr: the random NAK delay.
    Nak,
}

impl TimerKind for Timer {
    const ALL: &'static [Self] = &[Timer::Nak];
    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug)]
enum Slot {
    Missing {
        suppressed_until: Option<Instant>,
    },
    Have {
        flags: Flags,
        msg: u32,
        msg_len: u32,
        payload: Vec<u8>,
    },
}

/// The receiver of one source's stream in group `group`.
#[derive(Debug)]
pub struct Receiver<A: Addr> {
    cfg: Config,
    window: u32,
    group: GroupId,
    me: MemberId,
    source: Member<A>,
    /// First packet not consumed.
    next: Seq,
    /// Packets `next..next + slots.len()`.
    slots: VecDeque<Slot>,
    /// Missing slots (E).
    missing: usize,
    /// The highest ACK_REQ packet seen and not yet acknowledged.
    ack_wanted: Option<Seq>,
    ack_due: bool,
    nak_out: Vec<Seq>,
    timers: TimerTable<Timer, 1>,
    /// Tr expiries since the last progress, and since when.
    rounds: u32,
    stall_since: Option<Instant>,
    /// Naking paused after K rounds without progress (until new DATA).
    stalled: bool,
    /// The source was reported silent in this stall.
    silent_reported: bool,
    abandoned: bool,
    reasm: Reassembly,
    rng: ChaCha8Rng,
    stats: ReceiverStats,
    /// `mak_receiver` (see `span.rs`).
    span: Span,
}

impl<A: Addr> Receiver<A> {
    /// A receiver with member id `me` in group `group` for the stream of
    /// `source`, starting at packet `start` (the sender's `start`, or what
    /// its `add_member` returned). `seed` seeds the random NAK delays (give
    /// every member a different one).
    ///
    /// Errors: an invalid `cfg` ([`Config::validate`]), `me` = the source.
    pub fn new(
        cfg: Config,
        group: GroupId,
        me: MemberId,
        source: Member<A>,
        start: Seq,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        if source.id == me {
            return Err(ConfigError::SelfMember(me.0));
        }
        let span = tracing::debug_span!(
            "mak_receiver",
            group = group.0,
            me = me.0,
            source = source.id.0
        );
        Ok(Self {
            window: cfg.effective_window(),
            reasm: Reassembly::new(cfg.max_message_bytes, cfg.recv_buffer_bytes),
            cfg,
            group,
            me,
            source,
            next: start,
            slots: VecDeque::new(),
            missing: 0,
            ack_wanted: None,
            ack_due: false,
            nak_out: Vec::new(),
            timers: TimerTable::default(),
            rounds: 0,
            stall_since: None,
            stalled: false,
            silent_reported: false,
            abandoned: false,
            rng: ChaCha8Rng::seed_from_u64(seed),
            stats: ReceiverStats::default(),
            span,
        })
    }

    fn acks(&self) -> bool {
        self.cfg.strategy != Strategy::Nak
    }

    fn naks(&self) -> bool {
        matches!(self.cfg.strategy, Strategy::Mak | Strategy::Nak)
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
                debug!(error = %e, "MAK receiver: malformed frame dropped");
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
        if h.group != self.group || h.source != self.source.id || h.strategy != self.cfg.strategy {
            self.stats.foreign += 1;
            return;
        }
        match *repr {
            Repr::Data {
                flags,
                seq,
                msg,
                msg_len,
                payload,
                ..
            } => {
                if from != self.source.addr {
                    self.stats.forged += 1;
                    debug!(
                        ?from,
                        "MAK receiver: DATA of our source from another address"
                    );
                    return;
                }
                self.on_data(now, flags, seq, msg, msg_len, payload);
            }
            Repr::Nak {
                header, missing, ..
            } if self.cfg.strategy == Strategy::Mak && header.member != self.me => {
                self.on_overheard_nak(now, missing)
            }
            _ => self.stats.ignored += 1,
        }
    }

    fn on_data(
        &mut self,
        now: Instant,
        flags: Flags,
        seq: Seq,
        msg: u32,
        msg_len: u32,
        payload: &[u8],
    ) {
        self.stats.data_received += 1;
        if flags.contains(Flags::RETX) {
            self.stats.retx_received += 1;
        }
        if self.abandoned {
            self.stats.ignored += 1;
            return;
        }
        self.stalled = false;
        let off = seq.diff(self.next);
        if off < 0 {
            self.duplicate(seq, flags);
            return;
        }
        let off = off as usize;
        if off >= self.window as usize {
            self.stats.beyond_window += 1;
            self.abandon();
            return;
        }
        let mut gap = 0;
        let have = || Slot::Have {
            flags,
            msg,
            msg_len,
            payload: payload.to_vec(),
        };
        if off < self.slots.len() {
            match self.slots[off] {
                Slot::Have { .. } => {
                    self.duplicate(seq, flags);
                    return;
                }
                Slot::Missing { .. } => {
                    self.slots[off] = have();
                    self.missing -= 1;
                    self.stats.fixed += 1;
                    self.progress(now);
                    trace!(%seq, "MAK missing packet arrived");
                }
            }
        } else if off == 0 && self.reasm.has_room(payload.len()) {
            // In order with nothing buffered: straight into reassembly,
            // no copy into the window.
            self.next = self.next.add(1);
            self.reasm.push(flags, msg, msg_len, payload);
        } else {
            gap = off - self.slots.len();
            if gap > 0 {
                if self.missing == 0 {
                    self.progress(now);
                }
                self.stats.gaps += 1;
                debug!(from = %seq.sub(gap as u32), to = %seq, "MAK gap");
                self.slots.extend((0..gap).map(|_| Slot::Missing {
                    suppressed_until: None,
                }));
                self.missing += gap;
            }
            self.slots.push_back(have());
        }
        if flags.contains(Flags::ACK_REQ) && self.acks() {
            self.ack_wanted = Some(self.ack_wanted.map_or(seq, |w| w.max(seq)));
        }
        self.consume();
        self.update_nak_timer(now, gap > 0);
    }

    fn duplicate(&mut self, seq: Seq, flags: Flags) {
        self.stats.duplicates += 1;
        // The source resent an ACK request we have consumed: our ACK was lost.
        if flags.contains(Flags::ACK_REQ) && self.acks() && seq < self.next {
            self.ack_due = true;
        }
    }

    fn progress(&mut self, now: Instant) {
        self.rounds = 0;
        self.stall_since = Some(now);
        self.silent_reported = false;
    }

    /// Consumes the packets stored in order from `next` while the receive
    /// buffer has room; acknowledges once an ACK request is covered.
    fn consume(&mut self) {
        while let Some(Slot::Have { payload, .. }) = self.slots.front() {
            if !self.reasm.has_room(payload.len()) {
                self.stats.buffer_full += 1;
                break;
            }
            let Some(Slot::Have {
                flags,
                msg,
                msg_len,
                payload,
            }) = self.slots.pop_front()
            else {
                unreachable!("front is Have")
            };
            self.next = self.next.add(1);
            self.reasm.push(flags, msg, msg_len, &payload);
        }
        self.stats.messages_delivered = self.reasm.delivered;
        self.stats.messages_dropped = self.reasm.dropped;
        if let Some(r) = self.ack_wanted {
            if self.next > r {
                self.ack_wanted = None;
                self.ack_due = true;
            }
        }
    }

    fn nak_delay(&mut self) -> Duration {
        if self.cfg.strategy == Strategy::Nak {
            return Duration::ZERO;
        }
        let max = self.cfg.nak_delay_max.as_nanos().min(u64::MAX as u128) as u64;
        Duration::from_nanos(self.rng.random_range(0..=max))
    }

    /// Arms Tr for a new gap (`new_gap`) or when E is no longer empty;
    /// stops it when E is empty.
    fn update_nak_timer(&mut self, now: Instant, new_gap: bool) {
        if !self.naks() || self.missing == 0 {
            self.timers.stop(Timer::Nak);
            self.rounds = 0;
            return;
        }
        // A running Tr serves an old gap; only a new one re-arms it.
        if self.stalled || (!new_gap && self.timers.is_armed(Timer::Nak)) {
            return;
        }
        let d = self.nak_delay();
        if d.is_zero() {
            // NAK baseline: nak at once (§2 (3)); MAK with Dmax = 0 too.
            // Not a round without progress: new data just came.
            self.on_nak_timer(now, false);
        } else {
            // A new gap gets its own random delay, even if Tr runs for
            // entries suppressed until later.
            let at = later(now, d);
            let at = self.timers.get(Timer::Nak).map_or(at, |t| t.min(at));
            self.timers.set(Timer::Nak, at);
        }
    }

    fn on_overheard_nak(&mut self, now: Instant, list: SeqList) {
        self.stats.naks_overheard += 1;
        let until = later(now, self.cfg.suppression);
        for seq in list.iter() {
            let off = seq.diff(self.next);
            if off < 0 || off as usize >= self.slots.len() {
                continue;
            }
            if let Slot::Missing { suppressed_until } = &mut self.slots[off as usize] {
                if !matches!(suppressed_until, Some(u) if *u > now) {
                    self.stats.nak_entries_suppressed += 1;
                }
                *suppressed_until = Some(suppressed_until.map_or(until, |u| u.max(until)));
            }
        }
        trace!(?list, "MAK NAK overheard");
    }

    /// Tr expiry (`expiry`), or an immediate NAK for a new gap.
    fn on_nak_timer(&mut self, now: Instant, expiry: bool) {
        if self.missing == 0 || self.abandoned {
            return;
        }
        if expiry {
            self.rounds += 1;
        }
        let until = later(now, self.cfg.suppression);
        let max = self.cfg.max_nak_entries();
        let mut list = Vec::new();
        let mut earliest: Option<Instant> = None;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Slot::Missing { suppressed_until } = slot else {
                continue;
            };
            match *suppressed_until {
                Some(u) if u > now => earliest = Some(earliest.map_or(u, |e| e.min(u))),
                _ if list.len() < max => {
                    list.push(self.next.add(i as u32));
                    *suppressed_until = Some(until);
                    earliest = Some(earliest.map_or(until, |e| e.min(until)));
                }
                _ => earliest = Some(now),
            }
        }
        if list.is_empty() {
            self.stats.naks_suppressed += 1;
            trace!("MAK NAK suppressed: every missing packet was naked by another member");
        } else {
            debug!(?list, "MAK NAK");
            self.nak_out = list;
        }
        let since = *self.stall_since.get_or_insert(now);
        if self.rounds >= self.cfg.max_expiries
            && now.saturating_duration_since(since) >= self.cfg.min_silence
        {
            self.stalled = true;
            self.timers.stop(Timer::Nak);
            if !self.silent_reported {
                self.silent_reported = true;
                let first_missing = self.first_missing();
                warn!(%first_missing, rounds = self.rounds, "MAK source silent: missing packets never came");
                self.reasm
                    .push_event(ReceiverEvent::SenderSilent { first_missing });
            }
            return;
        }
        let at = earliest.unwrap_or(now).max(now);
        let d = self.nak_delay();
        self.timers.set(Timer::Nak, later(at, d));
    }

    fn first_missing(&self) -> Seq {
        let i = self
            .slots
            .iter()
            .position(|s| matches!(s, Slot::Missing { .. }))
            .unwrap_or(0);
        self.next.add(i as u32)
    }

    fn abandon(&mut self) {
        if self.abandoned {
            return;
        }
        self.abandoned = true;
        let first_missing = self.first_missing();
        warn!(%first_missing, "MAK receiver abandoned: the source freed packets we lack");
        self.slots.clear();
        self.missing = 0;
        self.nak_out.clear();
        self.ack_due = false;
        self.timers.stop(Timer::Nak);
        self.reasm
            .push_event(ReceiverEvent::Abandoned { first_missing });
    }

    /// Handles expired timers; call at (or after) [`poll_timeout`](Self::poll_timeout).
    pub fn handle_timeout(&mut self, now: Instant) {
        netcore::in_span!(self, state "MAK state", self.on_timers(now))
    }

    fn on_timers(&mut self, now: Instant) {
        while let Some(t) = self.timers.pop_expired(now) {
            match t {
                Timer::Nak => self.on_nak_timer(now, true),
            }
        }
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) must be
    /// called (None while no timer runs).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Writes the next frame (an ACK, then a NAK) into `buf` (at least
    /// `mtu` bytes) and returns its destination and length.
    pub fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<Transmit<A>> {
        netcore::in_span!(self, self.transmit(buf))
    }

    fn transmit(&mut self, buf: &mut [u8]) -> Option<Transmit<A>> {
        let header = Header {
            strategy: self.cfg.strategy,
            group: self.group,
            source: self.source.id,
            member: self.me,
        };
        let cum = self.next.sub(1);
        if self.ack_due {
            self.ack_due = false;
            self.stats.acks_sent += 1;
            trace!(acked = %cum, "MAK ACK sent");
            let len = Repr::Ack { header, seq: cum }.emit(buf);
            return Some(Transmit {
                dest: Dest::Member(self.source.addr),
                len,
            });
        }
        if !self.nak_out.is_empty() {
            let list = std::mem::take(&mut self.nak_out);
            self.stats.naks_sent += 1;
            self.stats.nak_entries_sent += list.len() as u64;
            let len = Repr::Nak {
                header,
                cum,
                missing: SeqList::Slice(&list),
            }
            .emit(buf);
            let dest = if self.cfg.strategy == Strategy::Nak {
                Dest::Member(self.source.addr)
            } else {
                Dest::Group
            };
            return Some(Transmit { dest, len });
        }
        None
    }

    /// The next event: a delivered message, a dropped one, or a report
    /// about the source. Reading frees receive buffer, which may let held
    /// packets be consumed (and acknowledged: call `poll_transmit`).
    pub fn poll_event(&mut self) -> Option<ReceiverEvent> {
        netcore::in_span!(self, state "MAK state", self.next_event())
    }

    fn next_event(&mut self) -> Option<ReceiverEvent> {
        let ev = self.reasm.pop_event()?;
        if !self.abandoned {
            self.consume();
        }
        Some(ev)
    }

    /// Whether [`poll_event`](Self::poll_event) has something to return.
    pub fn has_event(&self) -> bool {
        self.reasm.has_event()
    }

    /// Whether `poll_transmit` would return a frame now (an ACK or a NAK
    /// is due).
    pub fn wants_transmit(&self) -> bool {
        self.ack_due || !self.nak_out.is_empty()
    }

    /// The state of fig. 7.
    pub fn state(&self) -> ReceiverState {
        if self.abandoned {
            ReceiverState::Abandoned
        } else if self.missing > 0 {
            ReceiverState::Waiting
        } else {
            ReceiverState::Receiving
        }
    }

    /// The first packet not yet consumed.
    pub fn next_expected(&self) -> Seq {
        self.next
    }

    /// The packets currently missing (E), in order.
    pub fn missing(&self) -> Vec<Seq> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Slot::Missing { .. }))
            .map(|(i, _)| self.next.add(i as u32))
            .collect()
    }

    /// Counters.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// The source this receiver follows.
    pub fn source(&self) -> Member<A> {
        self.source
    }
}

#[cfg(test)]
#[path = "receiver_tests.rs"]
mod tests;
