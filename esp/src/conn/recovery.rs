//! Loss detection and recovery of the send side: the retransmission queue
//! (segments SND.UNA..SND.NXT), the SACK scoreboard, the lost list, loss
//! episodes with their undo record, and the adaptive duplicate-ACK
//! threshold.
//!
//! - Fast retransmit on [`DUP_THRESH`] duplicate ACKs (RFC 5681 sec. 3.2) or
//!   when DupThresh segments above an unSACKed one were SACKed (RFC 6675
//!   `IsLost`); one loss episode ("recovery epoch") per window, ended when
//!   the cumulative ACK passes the recovery point (RFC 6582 NewReno:
//!   partial ACKs mark the new head lost).
//! - A retransmission timeout presumes every unSACKed segment lost
//!   (go-back-N over the holes) and starts a timeout episode.
//! - `pipe` = segments in flight, not SACKed and not marked lost (RFC 6675
//!   sec. 4): the congestion controller compares it with its window.
//! - DSACK (RFC 2883): when every retransmission of an episode was
//!   reported duplicate, the episode was spurious (RFC 3708 sec. 3; Linux
//!   `undo_retrans`) and the congestion state is restored; a fast
//!   retransmission shown spurious doubles the duplicate-ACK threshold
//!   (RFC 4653 sec. 3.4 spirit).
//! - Reordering (RFC 4653 spirit, Linux `tcp_check_sack_reordering`): a
//!   head segment sent once and never SACKed that is acknowledged after
//!   later segments were SACKed up to distance `d` was reordered, not lost:
//!   the threshold rises to `d` (at most [`MAX_DUP_THRESH`]).
//!
//! The receiver never discards a segment it SACKed (no reneging), so
//! SACKed segments are never retransmitted.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use netcore::congestion::{CongestionEvent, Controller, Snapshot};

use super::timer::Timer;
use super::State;
use crate::wire::{EspRepr, SackBlocks, Seq};

/// Duplicate ACKs (or SACKed segments above a hole) that trigger fast
/// retransmit (RFC 5681 sec. 3.2, RFC 6675 DupThresh).
pub const DUP_THRESH: u32 = 3;
/// Upper bound of the adaptive duplicate-ACK threshold, segments (Linux's
/// `tcp_max_reordering` is 300). The threshold starts at [`DUP_THRESH`] and
/// rises to the reordering degree observed: a segment sent once that is
/// acknowledged after `d` later segments were SACKed was reordered by `d`,
/// not lost (RFC 4653 spirit; Linux `tcp_check_sack_reordering`). It never
/// exceeds half the segments in flight (but at least [`DUP_THRESH`]), so a
/// short flight still recovers by fast retransmit.
pub const MAX_DUP_THRESH: u32 = 256;

/// What a queued segment carries (each consumes one sequence number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentKind {
    Syn,
    Data,
    Fin,
}

/// A segment sent (or queued to be sent first) and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SentSegment {
    pub(crate) kind: SegmentKind,
    /// Absolute stream offset of the first payload byte.
    pub(crate) off: u64,
    /// Payload bytes.
    pub(crate) len: u16,
    /// When it was last transmitted.
    pub(crate) last_sent: Instant,
    /// Transmissions so far (0 = queued, not yet sent).
    pub(crate) tx_count: u32,
    sacked: bool,
    /// On the lost list and not yet resent.
    lost: bool,
    /// Recovery epoch in which it was last marked lost.
    epoch: u32,
}

/// Congestion state saved when a loss episode starts.
#[derive(Debug, Clone, Copy)]
struct Undo {
    cc: Snapshot,
    /// Sequence range outstanding when the episode started.
    from: Seq,
    to: Seq,
    /// The episode began with a retransmission timeout (its DSACK shows a
    /// slow ACK path, not reordering).
    by_timeout: bool,
}

/// What a cumulative acknowledgement removed from the queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Acked {
    /// Segments acknowledged.
    pub(crate) segments: u32,
    /// Payload bytes acknowledged (to drop from the send buffer).
    pub(crate) bytes: usize,
    /// An RTT sample under Karn's rule, strictly: from a segment sent once
    /// and never SACKed, and only when the ACK covers no retransmitted or
    /// SACKed segment (held back by a hole, it would measure the recovery,
    /// not the path).
    pub(crate) rtt_sample: Option<Duration>,
    /// The FIN was acknowledged.
    pub(crate) fin: bool,
}

/// Events of one ACK, for the caller's counters and trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AckEvents {
    /// A fast-retransmit episode started.
    pub(crate) fast_retransmit: bool,
    /// A DSACK undid the current episode.
    pub(crate) undone: bool,
    /// The duplicate-ACK threshold rose (reordering seen).
    pub(crate) reordering: bool,
}

/// The send side's loss recovery state (see the module documentation).
#[derive(Debug)]
pub(crate) struct Recovery {
    /// SND.UNA: the oldest unacknowledged sequence number; `queue[i]` is
    /// segment `una + i`.
    una: Seq,
    /// SND.NXT: the next sequence number to send.
    nxt: Seq,
    queue: VecDeque<SentSegment>,
    /// Segments to retransmit, in the order they were found lost.
    lost: VecDeque<Seq>,
    sacked_count: u32,
    lost_count: u32,
    /// Current loss episode; segments remember the epoch they were marked
    /// lost in, so each is marked at most once per episode.
    epoch: u32,
    /// The recovery point (SND.NXT when the episode began), while in
    /// recovery.
    point: Option<Seq>,
    /// The episode was started by a timeout (the window grows in slow start
    /// during it).
    by_timeout: bool,
    /// Congestion state before the current (or last) episode, kept until
    /// the next one: a DSACK of a spurious timeout arrives after the ACK
    /// that ended it.
    undo: Option<Undo>,
    /// Segments retransmitted in the episode and not yet reported back by
    /// a DSACK.
    undo_retrans: Vec<Seq>,
    dup_acks: u32,
    /// Adaptive duplicate-ACK threshold, segments (see [`MAX_DUP_THRESH`]).
    dup_thresh: u32,
    /// One past the highest SACKed segment (meaningful above `una`).
    high_sacked: Seq,
    /// Fast-retransmit episodes started.
    pub(crate) fast_retransmits: u64,
    /// Episodes undone by DSACK.
    pub(crate) spurious: u64,
}

impl Recovery {
    /// An empty queue starting at the initial send sequence number `iss`.
    pub(crate) fn new(iss: Seq) -> Self {
        Self {
            una: iss,
            nxt: iss,
            queue: VecDeque::new(),
            lost: VecDeque::new(),
            sacked_count: 0,
            lost_count: 0,
            epoch: 0,
            point: None,
            by_timeout: false,
            undo: None,
            undo_retrans: Vec::new(),
            dup_acks: 0,
            dup_thresh: DUP_THRESH,
            high_sacked: iss,
            fast_retransmits: 0,
            spurious: 0,
        }
    }

    /// SND.UNA.
    #[inline]
    pub(crate) fn una(&self) -> Seq {
        self.una
    }
    /// SND.NXT.
    #[inline]
    pub(crate) fn nxt(&self) -> Seq {
        self.nxt
    }
    /// Segments in the queue (sent or queued, unacknowledged).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
    /// Whether nothing is unacknowledged.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
    /// The segment at `idx` (`una + idx`).
    #[inline]
    pub(crate) fn segment(&self, idx: usize) -> SentSegment {
        self.queue[idx]
    }
    /// The oldest unacknowledged segment.
    #[inline]
    pub(crate) fn head(&self) -> Option<&SentSegment> {
        self.queue.front()
    }
    /// The duplicate-ACK threshold in force.
    #[inline]
    pub(crate) fn dup_thresh(&self) -> u32 {
        self.dup_thresh
    }
    /// Segments on the lost list (queued for retransmission).
    #[inline]
    pub(crate) fn lost_len(&self) -> usize {
        self.lost.len()
    }
    /// SACKed segments in the queue.
    #[inline]
    pub(crate) fn sacked_count(&self) -> u32 {
        self.sacked_count
    }
    /// Segments marked lost and not yet resent.
    #[inline]
    pub(crate) fn lost_count(&self) -> u32 {
        self.lost_count
    }
    /// The recovery point while in a loss episode.
    #[inline]
    pub(crate) fn recovery_point(&self) -> Option<Seq> {
        self.point
    }

    /// Segments in flight: not SACKed, not marked lost (RFC 6675 `pipe`).
    #[inline]
    pub(crate) fn pipe(&self) -> u32 {
        (self.queue.len() as u32)
            .saturating_sub(self.sacked_count)
            .saturating_sub(self.lost_count)
    }

    /// Queues a control segment (SYN) to be sent first: it is put on the
    /// lost list at once.
    pub(crate) fn push_control(&mut self, kind: SegmentKind, off: u64, now: Instant) {
        let seq = self.nxt;
        self.queue.push_back(SentSegment {
            kind,
            off,
            len: 0,
            last_sent: now,
            tx_count: 0,
            sacked: false,
            lost: true,
            epoch: self.epoch,
        });
        self.lost_count += 1;
        self.lost.push_back(seq);
        self.nxt = seq.add(1);
    }

    /// Appends a new segment (data or FIN) about to be sent; returns its
    /// index.
    #[inline]
    pub(crate) fn push_new(
        &mut self,
        kind: SegmentKind,
        off: u64,
        len: u16,
        now: Instant,
    ) -> usize {
        self.queue.push_back(SentSegment {
            kind,
            off,
            len,
            last_sent: now,
            tx_count: 0,
            sacked: false,
            lost: false,
            epoch: self.epoch.wrapping_sub(1),
        });
        self.nxt = self.nxt.add(1);
        self.queue.len() - 1
    }

    /// The index of the next segment to retransmit, taken off the lost
    /// list, or `None`. The head (and a segment never sent) goes at once;
    /// others only while `pipe < window` (RFC 6675 sec. 5 step 4).
    #[inline]
    pub(crate) fn next_lost(&mut self, window: u32) -> Option<usize> {
        while let Some(&seq) = self.lost.front() {
            let idx = seq.diff(self.una);
            if idx < 0 || idx as usize >= self.queue.len() {
                self.lost.pop_front();
                continue;
            }
            let idx = idx as usize;
            let s = self.queue[idx];
            if !s.lost || s.sacked {
                self.lost.pop_front();
                continue;
            }
            let first = idx == 0 || s.tx_count == 0;
            if !first && self.pipe() >= window {
                return None;
            }
            self.lost.pop_front();
            return Some(idx);
        }
        None
    }

    /// Segment `idx` is being transmitted at `now`; returns true if it is
    /// a retransmission (then recorded for the undo check when it belongs
    /// to the current episode's range).
    #[inline]
    pub(crate) fn on_transmit(&mut self, idx: usize, now: Instant) -> bool {
        let seq = self.una.add(idx as u32);
        let e = &mut self.queue[idx];
        let retransmission = e.tx_count > 0;
        e.tx_count += 1;
        e.last_sent = now;
        if e.lost {
            e.lost = false;
            self.lost_count -= 1;
        }
        if retransmission {
            if let Some(u) = self.undo {
                if seq.diff(u.from) >= 0 && seq.diff(u.to) < 0 && !self.undo_retrans.contains(&seq)
                {
                    self.undo_retrans.push(seq);
                }
            }
        }
        retransmission
    }

    /// The peer retransmitted its SYN while the SYN-ACK (the head) is in
    /// flight: our SYN-ACK was lost, resend it now.
    pub(crate) fn resend_syn(&mut self) {
        if let Some(s) = self.queue.front_mut() {
            if s.kind == SegmentKind::Syn && !s.lost {
                s.lost = true;
                self.lost_count += 1;
                self.lost.push_back(self.una);
            }
        }
    }

    /// Drops the queue and the lost list (the connection closed).
    pub(crate) fn clear(&mut self) {
        self.queue.clear();
        self.lost.clear();
    }

    /// Processes the acknowledgement part of a synchronized segment: DSACK
    /// check, SACK scoreboard, cumulative ACK, duplicate-ACK counting and
    /// loss marking. `pure` is true for a segment consuming no sequence
    /// number (only such a segment can be a duplicate ACK, RFC 5681 sec. 2,
    /// and only when it newly SACKs data, RFC 6675 sec. 2).
    #[inline]
    pub(crate) fn on_ack(
        &mut self,
        now: Instant,
        ack: Seq,
        sack: &SackBlocks,
        pure: bool,
        cc: &mut impl Controller,
    ) -> (Acked, AckEvents) {
        let mut ev = AckEvents {
            undone: self.check_dsack(ack, sack, cc),
            ..AckEvents::default()
        };
        let advanced = ack.diff(self.una) > 0;
        let high_before = self.high_sacked;
        let new_sacks = self.apply_sack(sack, ack);
        let mut acked = Acked::default();
        if advanced {
            ev.reordering = self.check_reordering(high_before);
            acked = self.on_cumulative_ack(now, ack, cc);
        } else if ack == self.una && pure && !self.queue.is_empty() && new_sacks > 0 {
            // A duplicate ACK counts only when it newly SACKs data (RFC
            // 6675 sec. 2, SACK being always on): ACKs a receiver sends for
            // an attacker's out-of-window junk, challenge ACKs and window
            // updates carry no new SACK information, so a blind attacker
            // cannot make the sender retransmit (or, after DSACK undo,
            // raise its duplicate-ACK threshold).

            self.dup_acks += 1;
            if self.dup_acks == self.loss_thresh() {
                ev.fast_retransmit |= self.enter_recovery(true, cc);
            }
        }
        if new_sacks > 0 {
            ev.fast_retransmit |= self.mark_lost_by_sack(cc);
        }
        (acked, ev)
    }

    /// Cumulative acknowledgement of everything before `ack`: removes the
    /// segments, handles a partial ACK in recovery (RFC 6582: the new head
    /// is lost too) or ends the episode, and lets the controller grow the
    /// window.
    #[inline]
    pub(crate) fn on_cumulative_ack(
        &mut self,
        now: Instant,
        ack: Seq,
        cc: &mut impl Controller,
    ) -> Acked {
        let n = (ack.diff(self.una).max(0) as usize).min(self.queue.len());
        let in_flight = self.pipe();
        let mut acked = Acked {
            segments: n as u32,
            ..Acked::default()
        };
        let mut sample = None;
        let mut ambiguous = false;
        for _ in 0..n {
            let s = self.queue.pop_front().expect("n <= queue.len()");
            if s.sacked {
                self.sacked_count -= 1;
            }
            if s.lost {
                self.lost_count -= 1;
            }
            acked.bytes += s.len as usize;
            if s.tx_count == 1 && !s.sacked {
                sample = Some(now.saturating_duration_since(s.last_sent));
            } else {
                ambiguous = true;
            }
            acked.fin |= s.kind == SegmentKind::Fin;
        }
        self.una = self.una.add(n as u32);
        if !ambiguous {
            acked.rtt_sample = sample;
        }
        self.dup_acks = 0;
        let mut in_recovery = false;
        match self.point {
            Some(rp) if self.una.diff(rp) < 0 => {
                if !self.queue.is_empty()
                    && !self.queue[0].sacked
                    && self.queue[0].epoch != self.epoch
                {
                    self.mark_lost(0);
                }
                in_recovery = !self.by_timeout;
            }
            Some(_) => {
                self.point = None;
                self.by_timeout = false;
            }
            None => {}
        }
        cc.on_ack(n as u32, in_flight, in_recovery);
        acked
    }

    /// A retransmission timeout (after the caller checked the retry limit
    /// and backed the RTO off): a timeout episode starts, every unSACKed
    /// segment is presumed lost.
    pub(crate) fn on_timeout(&mut self, cc: &mut impl Controller) {
        if self.undo.is_none() || !self.by_timeout {
            self.save_undo(true, cc.snapshot());
        }
        cc.on_congestion_event(CongestionEvent::Timeout, self.pipe());
        self.dup_acks = 0;
        self.epoch = self.epoch.wrapping_add(1);
        self.point = Some(self.nxt);
        self.by_timeout = true;
        self.lost.clear();
        for i in 0..self.queue.len() {
            let s = &mut self.queue[i];
            if s.lost {
                s.lost = false;
                self.lost_count -= 1;
            }
            self.mark_lost(i);
        }
    }

    /// Marks SACKed segments; returns how many were newly SACKed.
    #[inline]
    fn apply_sack(&mut self, sack: &SackBlocks, ack: Seq) -> u32 {
        let mut n = 0;
        let mut high = self.high_sacked;
        if high.diff(self.una) < 0 {
            high = self.una;
        }
        for &(s, e) in sack.as_slice() {
            let start = s.diff(self.una).max(0) as usize;
            let end = (e.diff(self.una).max(0) as usize).min(self.queue.len());
            for i in start..end {
                let seg = &mut self.queue[i];
                if !seg.sacked {
                    seg.sacked = true;
                    if seg.lost {
                        seg.lost = false;
                        self.lost_count -= 1;
                    }
                    n += 1;
                }
            }
            // A DSACK block (at or below the cumulative ACK) says nothing
            // about segments above it.
            if end > start && e.diff(ack) > 0 && self.una.add(end as u32).diff(high) > 0 {
                high = self.una.add(end as u32);
            }
        }
        self.high_sacked = high;
        self.sacked_count += n;
        n
    }

    /// RFC 6675-style loss detection: an unSACKed segment with at least
    /// DupThresh SACKed segments above it is lost (once per episode).
    /// Returns true if this started a fast-retransmit episode.
    fn mark_lost_by_sack(&mut self, cc: &mut impl Controller) -> bool {
        let thresh = self.loss_thresh();
        if self.sacked_count < thresh {
            return false;
        }
        let started = self.point.is_none() && self.enter_recovery(false, cc);
        // Forward scan; `sacked_count - seen` = SACKed segments above index i.
        let mut seen = 0u32;
        for i in 0..self.queue.len() {
            let s = self.queue[i];
            if s.sacked {
                seen += 1;
                continue;
            }
            if self.sacked_count - seen < thresh {
                break;
            }
            if !s.lost && s.epoch != self.epoch {
                self.mark_lost(i);
            }
        }
        started
    }

    fn mark_lost(&mut self, i: usize) {
        let seq = self.una.add(i as u32);
        let ep = self.epoch;
        let s = &mut self.queue[i];
        if s.sacked || s.lost {
            return;
        }
        s.lost = true;
        s.epoch = ep;
        self.lost_count += 1;
        self.lost.push_back(seq);
    }

    fn save_undo(&mut self, by_timeout: bool, cc: Snapshot) {
        self.undo_retrans.clear();
        self.undo = Some(Undo {
            cc,
            from: self.una,
            to: self.nxt,
            by_timeout,
        });
    }

    /// Segments SACKed above an unSACKed one before it counts as lost: the
    /// adaptive threshold, bounded by half the flight (see
    /// [`MAX_DUP_THRESH`]).
    fn loss_thresh(&self) -> u32 {
        self.dup_thresh
            .min((self.queue.len() as u32 / 2).max(DUP_THRESH))
    }

    /// Called when the cumulative ACK moves past the head segment, with
    /// `high_sacked` as it was before this ACK: if the head was sent once
    /// and never SACKed while earlier ACKs had already SACKed later segments
    /// up to `high_before`, it arrived late — reordered by that distance,
    /// not lost. (Only the head counts: segments above a retransmitted hole
    /// may simply not have fit in the peer's SACK blocks; and SACKs arriving
    /// with this very ACK only show a new hole above segments whose ACK was
    /// delayed.) Returns true if the threshold rose.
    #[inline]
    fn check_reordering(&mut self, high_before: Seq) -> bool {
        let Some(head) = self.queue.front() else {
            return false;
        };
        let d = high_before.diff(self.una);
        let in_flight = high_before.diff(self.nxt) <= 0;
        if head.tx_count == 1 && !head.sacked && d > 0 && in_flight {
            let before = self.dup_thresh;
            self.dup_thresh = self.dup_thresh.max((d as u32).min(MAX_DUP_THRESH));
            return self.dup_thresh != before;
        }
        false
    }

    /// A DSACK (first SACK block at or below the cumulative ACK) reports a
    /// segment the receiver got twice: if it is the last outstanding
    /// retransmission of the current episode, the episode was spurious:
    /// restore the congestion state and cancel the pending
    /// retransmissions. Returns true if the episode was undone.
    #[inline]
    fn check_dsack(&mut self, ack: Seq, sack: &SackBlocks, cc: &mut impl Controller) -> bool {
        let Some(&(s, e)) = sack.as_slice().first() else {
            return false;
        };
        if e.diff(ack) > 0 {
            return false; // an ordinary SACK block
        }
        let Some(u) = self.undo else {
            return false;
        };
        if s.diff(u.from) < 0 || s.diff(u.to) >= 0 {
            return false;
        }
        let Some(i) = self.undo_retrans.iter().position(|&r| r == s) else {
            return false; // not a retransmission: the network duplicated it
        };
        self.undo_retrans.swap_remove(i);
        if !self.undo_retrans.is_empty() {
            return false; // other retransmissions may still have been needed
        }
        self.undo = None;
        self.spurious += 1;
        if !u.by_timeout {
            // A fast retransmission proved unnecessary: the original arrived
            // after DupThresh later segments (RFC 4653 sec. 3.4 spirit).
            self.dup_thresh = (self.dup_thresh * 2).min(MAX_DUP_THRESH);
        }
        cc.on_spurious_congestion_event(u.cc);
        self.point = None;
        self.by_timeout = false;
        self.lost.clear();
        for seg in self.queue.iter_mut() {
            seg.lost = false;
        }
        self.lost_count = 0;
        true
    }

    /// Starts a fast-retransmit episode unless one runs (returns true if it
    /// started one); with `retransmit_head`, marks the head lost unless it
    /// was already retransmitted in this episode.
    fn enter_recovery(&mut self, retransmit_head: bool, cc: &mut impl Controller) -> bool {
        let started = self.point.is_none();
        if started {
            self.epoch = self.epoch.wrapping_add(1);
            self.point = Some(self.nxt);
            self.by_timeout = false;
            self.fast_retransmits += 1;
            self.save_undo(false, cc.snapshot());
            cc.on_congestion_event(CongestionEvent::FastRetransmit, self.pipe());
        }
        if retransmit_head && !self.queue.is_empty() {
            let ep = self.epoch;
            if self.queue[0].epoch != ep || self.queue[0].tx_count <= 1 {
                self.mark_lost(0);
            }
        }
        started
    }
}

impl super::Connection {
    /// The acknowledgement part of an acceptable segment: window update,
    /// then [`Recovery::on_ack`], then what the acknowledgement means for
    /// the send buffer, the RTT, the retransmission timer and the state.
    #[inline]
    pub(super) fn process_ack(&mut self, now: Instant, repr: &EspRepr) {
        let advanced = repr.ack.diff(self.recovery.una()) > 0;
        // RFC 9293 sec. 3.10.7.4: the window is updated only when
        // SND.UNA =< SEG.ACK =< SND.NXT (the caller checked the upper
        // bound); an old ACK (reordered) carries an old window.
        let wu = if repr.ack.diff(self.recovery.una()) >= 0 {
            self.snd_wnd.update(repr.seq, repr.ack, repr.window)
        } else {
            Default::default()
        };
        if wu.taken {
            if wu.edge_advanced && self.recovery.nxt().diff(self.snd_wnd.edge) < 0 {
                self.probes.persist_backoff = 0;
            }
            if wu.changed {
                tracing::trace!(window = self.snd_wnd.wnd, edge = %self.snd_wnd.edge, "peer window");
            }
        }
        let (acked, ev) =
            self.recovery
                .on_ack(now, repr.ack, &repr.sack, repr.seq_len() == 0, &mut self.cc);
        if ev.undone {
            tracing::debug!(
                cwnd = self.cc.window(),
                dup_thresh = self.recovery.dup_thresh(),
                "DSACK: loss episode was spurious, undone"
            );
        }
        if ev.reordering {
            tracing::debug!(dup_thresh = self.recovery.dup_thresh(), "reordering seen");
        }
        if advanced {
            self.after_cumulative_ack(now, acked);
        }
        if ev.fast_retransmit {
            tracing::debug!(
                snd_una = %self.recovery.una(),
                lost = self.recovery.lost_count(),
                cwnd = self.cc.window(),
                "fast retransmit: loss episode starts"
            );
        }
    }

    /// Cumulative acknowledgement of everything before `ack` (the SYN-ACK's
    /// ACK in SYN_SENT).
    pub(super) fn on_new_ack(&mut self, now: Instant, ack: Seq) {
        let acked = self.recovery.on_cumulative_ack(now, ack, &mut self.cc);
        self.after_cumulative_ack(now, acked);
    }

    #[inline]
    fn after_cumulative_ack(&mut self, now: Instant, acked: Acked) {
        self.send.acked(acked.bytes);
        if let Some(rtt) = acked.rtt_sample {
            self.rtt.on_sample(now, rtt);
        }
        // RFC 6298 5.7 note: an acknowledgement of new data clears the
        // backoff.
        self.rtt.reset_backoff();
        if self.liveness.is_stalled() {
            self.on_progress(now);
        }
        if self.recovery.is_empty() {
            self.timers.stop(Timer::Rto);
        } else {
            self.timers.set(Timer::Rto, now + self.rtt.rto());
        }
        if acked.fin {
            match self.state {
                State::FinWait1 => self.set_state(State::FinWait2),
                State::Closing | State::LastAck => self.enter_closed(),
                _ => {}
            }
        }
    }

    /// The retransmission timer expired at `now` (RFC 6298 sec.
    /// 5.4-5.6): the head is retransmitted after the RTO doubles (at most
    /// to its maximum). A SYN that reached `max_syn_retransmissions` ends
    /// the handshake. A segment that reached `max_retransmissions` makes
    /// the peer suspected, or, under the thesis's rule (no user timeout),
    /// ends the connection; a connection that stalled for the user timeout
    /// ends (`liveness.rs`). With the thesis's `ESP_TIMEOUT_CONN`, a
    /// doubled RTO past its maximum ends it too.
    pub(super) fn on_rto(&mut self, now: Instant) {
        let Some(head) = self.recovery.head().copied() else {
            return;
        };
        self.stats.timeouts += 1;
        let head_retx = head.tx_count.saturating_sub(1);
        if head.kind == SegmentKind::Syn {
            if head_retx >= self.cfg.max_syn_retransmissions {
                tracing::debug!(
                    retransmissions = head_retx,
                    "SYN retransmission limit reached"
                );
                self.timed_out();
                return;
            }
        } else {
            // RFC 5482's clock: the head has waited since it was sent.
            self.liveness.stall(head.last_sent);
            if head_retx >= self.cfg.max_retransmissions
                && self.retransmissions_exhausted(now, "retransmission timeout")
            {
                return;
            }
            if self.user_timeout_passed(now) {
                return;
            }
        }
        self.rtt.back_off();
        if self.rtt.past_max() {
            tracing::debug!(rto = ?self.rtt.rto(), "doubled RTO passed the maximum");
            self.timed_out();
            return;
        }
        self.recovery.on_timeout(&mut self.cc);
        tracing::debug!(
            snd_una = %self.recovery.una(),
            in_flight = self.recovery.len(),
            backoff = self.rtt.backoff(),
            rto = ?self.rtt.rto(),
            "RTO expired: everything unSACKed presumed lost"
        );
    }
}

#[cfg(test)]
mod tests;
