//! Out-of-order reassembly with SACK block generation (RFC 2018, RFC 2883).
//!
//! An [`Assembler`] holds the units (segments, packets) received ahead of
//! the next expected one, by *offset* from it: offset 0 is the next
//! expected unit (never stored: the caller delivers it at once), offset
//! `k >= 1` is `k` units later. Each stored unit carries a payload of the
//! caller's type `T` (ESP: a pooled `Vec<u8>` per segment) or is the
//! stream's end (ESP's FIN). ESP's sequence numbers count segments, so one
//! slot is one sequence number.
//!
//! Rules kept here, so every user gets them the same:
//!
//! - a unit stored once is never discarded before delivery (no reneging,
//!   so the sender may trust SACK);
//! - nothing is stored at or beyond the stream's end, and the end never
//!   moves below stored data;
//! - at most `limit` units are stored (the caller's bound, counted by the
//!   caller when refused);
//! - SACK blocks (RFC 2018 sec. 4): the first block contains the most
//!   recently received unit; blocks that changed since they were last
//!   reported come first, most recent first, then the other recently
//!   changed blocks, then the remaining ones from the lowest. A receiver
//!   that takes many units per ACK (a receive batch) owes further ACKs
//!   while blocks are unreported ([`Assembler::has_unreported`]), so every
//!   block (up to 16 changed per ACK) reaches the sender at least once and
//!   the sender, which trusts
//!   SACK and counts SACKed units above a hole (RFC 6675), does not take
//!   an unreported block for lost. A duplicate of a stored unit counts as
//!   a change of its block (RFC 2883 sec. 4: after a DSACK block comes the
//!   block containing the duplicate).

use std::collections::VecDeque;
use std::ops::Range;

/// Most SACK blocks an [`Assembler`] reports (TCP's and ESP's option limit,
/// RFC 2018 sec. 3).
pub const MAX_SACK_BLOCKS: usize = 4;

/// One slot of the reassembly queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot<T> {
    /// Nothing received at this offset (a hole).
    Empty,
    /// A unit received ahead of the next expected one.
    Data(T),
    /// The end of the stream (consumes one position, as ESP's FIN).
    End,
}

/// Outcome of [`Assembler::insert_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// Stored for later delivery.
    Stored,
    /// A unit is already stored at that offset (report it as DSACK).
    Duplicate,
    /// At or beyond the stored end of the stream: meaningless, drop it.
    BeyondEnd,
    /// `limit` units are already stored: drop it (the sender retransmits).
    Full,
}

/// Outcome of [`Assembler::insert_end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndInsert {
    /// The end is at offset 0: the caller ends the stream now.
    AtNext,
    /// Stored; the stream ends once the units before it are delivered.
    Stored,
    /// The same end is already stored (a retransmission).
    AlreadyStored,
    /// Another end is stored, or the end lies at or below stored data (the
    /// end never moves backwards over data received): drop it.
    Conflict,
    /// Beyond `max_offset`: ignored.
    TooFar,
}

/// Up to [`MAX_SACK_BLOCKS`] ranges of offsets `[start, end)` (`start >=
/// 1`) of stored units, in reporting order (see the module documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SackRanges {
    len: usize,
    ranges: [(usize, usize); MAX_SACK_BLOCKS],
}

impl SackRanges {
    fn push(&mut self, r: (usize, usize)) {
        self.ranges[self.len] = r;
        self.len += 1;
    }
    fn contains(&self, start: usize) -> bool {
        self.ranges[..self.len].iter().any(|&(s, _)| s == start)
    }
    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether there is no range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The ranges, in reporting order.
    pub fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.ranges[..self.len].iter().map(|&(s, e)| s..e)
    }
}

/// The reassembly queue of one receiver (see the module documentation).
#[derive(Debug, Clone)]
pub struct Assembler<T> {
    /// `slots[i]` holds offset `i + 1`. The last slot, if any, is never
    /// `Empty`.
    slots: VecDeque<Slot<T>>,
    /// Non-empty slots.
    stored: usize,
    /// Absolute position of the next expected unit (advances with
    /// [`Assembler::advance`]); positions in `recent` are absolute.
    next: u64,
    /// Absolute ranges `[start, end)` of the blocks that most recently
    /// received a unit, most recent first (Linux's `selective_acks`): an
    /// arrival next to or inside a listed block extends it and moves it to
    /// the front; any other arrival starts a new entry, pushing out the
    /// oldest. With several arrivals per ACK a block that stopped growing
    /// keeps its place behind the growing one, so every block is reported
    /// in several successive ACKs (RFC 2018 sec. 4).
    recent: [Recent; RECENT_BLOCKS],
    recent_len: usize,
}

/// Blocks remembered as recently changed (see [`Assembler::sack_blocks`]).
const RECENT_BLOCKS: usize = 16;

/// A recently changed block: absolute `[start, end)` and whether it was
/// reported since it last changed.
#[derive(Debug, Clone, Copy, Default)]
struct Recent {
    start: u64,
    end: u64,
    reported: bool,
}

impl<T> Default for Assembler<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Assembler<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self {
            slots: VecDeque::new(),
            stored: 0,
            next: 0,
            recent: [Recent::default(); RECENT_BLOCKS],
            recent_len: 0,
        }
    }

    /// Whether nothing is stored (no slot at all).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Units stored (data and end).
    #[inline]
    pub fn stored(&self) -> usize {
        self.stored
    }

    /// One past the highest stored offset (0 when empty).
    #[inline]
    pub fn span(&self) -> usize {
        self.slots.len()
    }

    /// Whether the stream's end is stored.
    #[inline]
    pub fn has_end(&self) -> bool {
        matches!(self.slots.back(), Some(Slot::End))
    }

    /// The slot at `offset >= 1`, if within the span.
    pub fn get(&self, offset: usize) -> Option<&Slot<T>> {
        offset.checked_sub(1).and_then(|i| self.slots.get(i))
    }

    fn note_recent(&mut self, offset: usize) {
        let pos = self.next + offset as u64;
        let (mut s, mut e) = (pos, pos + 1);
        // Merge every listed block this unit touches (it may join two).
        let mut kept = 0;
        for i in 0..self.recent_len {
            let r = self.recent[i];
            if r.start <= e && s <= r.end {
                s = s.min(r.start);
                e = e.max(r.end);
            } else {
                self.recent[kept] = r;
                kept += 1;
            }
        }
        let keep = kept.min(RECENT_BLOCKS - 1);
        self.recent.copy_within(0..keep, 1);
        self.recent[0] = Recent {
            start: s,
            end: e,
            reported: false,
        };
        self.recent_len = keep + 1;
    }

    /// Whether a block changed since it was last reported by
    /// [`Assembler::sack_blocks`] (the caller sends another ACK).
    pub fn has_unreported(&self) -> bool {
        self.recent[..self.recent_len]
            .iter()
            .any(|r| !r.reported && r.end > self.next + 1)
    }

    /// Stores the unit at `offset >= 1`, building its payload with `data`
    /// only when it is stored. `limit` bounds the units stored.
    ///
    /// Panics if `offset` is 0 (the next expected unit is delivered, not
    /// stored: a caller bug).
    pub fn insert_with(&mut self, offset: usize, limit: usize, data: impl FnOnce() -> T) -> Insert {
        assert!(offset >= 1, "offset 0 is delivered, not stored");
        let idx = offset - 1;
        if self.has_end() && idx + 1 >= self.slots.len() {
            return Insert::BeyondEnd;
        }
        if idx < self.slots.len() && !matches!(self.slots[idx], Slot::Empty) {
            self.note_recent(offset);
            return Insert::Duplicate;
        }
        if self.stored >= limit {
            return Insert::Full;
        }
        while self.slots.len() <= idx {
            self.slots.push_back(Slot::Empty);
        }
        self.slots[idx] = Slot::Data(data());
        self.stored += 1;
        self.note_recent(offset);
        Insert::Stored
    }

    /// Records the stream's end at `offset >= 0` (ESP: a FIN at `rcv_nxt +
    /// offset`); ends beyond `max_offset` are ignored.
    pub fn insert_end(&mut self, offset: usize, max_offset: usize) -> EndInsert {
        if self.has_end() {
            return if offset == self.slots.len() {
                EndInsert::AlreadyStored
            } else {
                EndInsert::Conflict
            };
        }
        if offset <= self.slots.len() && !self.slots.is_empty() {
            return EndInsert::Conflict;
        }
        if offset == 0 {
            return EndInsert::AtNext;
        }
        if offset > max_offset {
            return EndInsert::TooFar;
        }
        let idx = offset - 1;
        while self.slots.len() <= idx {
            self.slots.push_back(Slot::Empty);
        }
        self.slots[idx] = Slot::End;
        self.stored += 1;
        self.note_recent(offset);
        EndInsert::Stored
    }

    /// The next expected unit was consumed: offset 1 becomes offset 0.
    /// Returns what was stored there (removed from the queue; `None` when
    /// the queue is empty). Call again after consuming a returned
    /// [`Slot::Data`]; stop at `Empty`, `End` or `None`.
    #[inline]
    pub fn advance(&mut self) -> Option<Slot<T>> {
        self.next += 1;
        let s = self.slots.pop_front()?;
        if !matches!(s, Slot::Empty) {
            self.stored -= 1;
        }
        Some(s)
    }

    /// Removes everything stored (the stream ended: nothing after its end
    /// means anything); returns the payloads for reuse.
    pub fn clear(&mut self) -> impl Iterator<Item = T> + '_ {
        self.stored = 0;
        self.recent_len = 0;
        self.slots.drain(..).filter_map(|s| match s {
            Slot::Data(t) => Some(t),
            _ => None,
        })
    }

    /// The block `[start, end)` of offsets containing stored offset `off`.
    fn block_at(&self, off: usize) -> Option<(usize, usize)> {
        let idx = off.checked_sub(1)?;
        if matches!(self.slots.get(idx)?, Slot::Empty) {
            return None;
        }
        let mut s = idx;
        while s > 0 && !matches!(self.slots[s - 1], Slot::Empty) {
            s -= 1;
        }
        let mut e = idx + 1;
        while e < self.slots.len() && !matches!(self.slots[e], Slot::Empty) {
            e += 1;
        }
        Some((s + 1, e + 1))
    }

    /// Up to `max` (at most [`MAX_SACK_BLOCKS`]) blocks of stored offsets
    /// to report, in RFC 2018 order: first the blocks changed since they
    /// were last reported, most recent first (the first contains the unit
    /// received last), then the other recently changed blocks, then the
    /// remaining blocks from the lowest. The blocks returned count as
    /// reported; while [`Assembler::has_unreported`] is true a receiver that
    /// took several units for one ACK owes another, so every block is
    /// reported at least once (RFC 2018 sec. 4).
    pub fn sack_blocks(&mut self, max: usize) -> SackRanges {
        let max = max.min(MAX_SACK_BLOCKS);
        let mut out = SackRanges::default();
        if max == 0 || self.slots.is_empty() {
            return out;
        }
        for pass_unreported in [true, false] {
            for i in 0..self.recent_len {
                if out.len >= max {
                    return out;
                }
                let r = self.recent[i];
                if r.reported == pass_unreported {
                    continue;
                }
                // Any still-stored position of the listed block finds it.
                let pos = r.start.max(self.next + 1);
                if pos >= r.end {
                    continue; // delivered meanwhile
                }
                if let Some(b) = self.block_at((pos - self.next) as usize) {
                    self.recent[i].reported = true;
                    if !out.contains(b.0) {
                        out.push(b);
                    }
                }
            }
        }
        let mut start: Option<usize> = None;
        for i in 0..=self.slots.len() {
            if out.len >= max {
                break;
            }
            let full = i < self.slots.len() && !matches!(self.slots[i], Slot::Empty);
            match (full, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    if !out.contains(s + 1) {
                        out.push((s + 1, i + 1));
                    }
                    start = None;
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 100;

    fn blocks<T>(a: &mut Assembler<T>, max: usize) -> Vec<Range<usize>> {
        a.sack_blocks(max).iter().collect()
    }

    /// Delivers from offset 0 the way a receiver does: returns the payloads
    /// that became in order and whether the end was reached.
    fn deliver<T>(a: &mut Assembler<T>) -> (Vec<T>, bool) {
        let mut got = vec![];
        loop {
            match a.advance() {
                Some(Slot::Data(v)) => got.push(v),
                Some(Slot::End) => return (got, true),
                Some(Slot::Empty) | None => return (got, false),
            }
        }
    }

    #[test]
    fn holes_fill_in_order() {
        let mut a = Assembler::new();
        // Next expected: unit 0. Units 2, 3 and 5 arrive early.
        for off in [2, 3, 5] {
            assert_eq!(a.insert_with(off, LIMIT, || off as u32), Insert::Stored);
        }
        assert_eq!((a.stored(), a.span()), (3, 5));
        // Unit 0 arrives in order: offset 1 is a hole, nothing follows.
        assert_eq!(deliver(&mut a), (vec![], false));
        // Now the old offsets 2, 3, 5 are 1, 2, 4; unit 1 arrives (offset 0).
        assert_eq!(deliver(&mut a), (vec![2, 3], false));
        assert_eq!(a.stored(), 1);
        // The old unit 5 is at offset 1 after units 1..=3 were consumed.
        assert_eq!(a.get(1), Some(&Slot::Data(5)));
        assert_eq!(deliver(&mut a), (vec![5], false));
        assert!(a.is_empty());
        assert_eq!(a.advance(), None);
    }

    #[test]
    fn duplicates_limits_and_end() {
        let mut a = Assembler::new();
        assert_eq!(a.insert_with(3, 2, || 3u32), Insert::Stored);
        let mut built = false;
        assert_eq!(
            a.insert_with(3, 2, || {
                built = true;
                0
            }),
            Insert::Duplicate
        );
        assert!(!built, "payload of a duplicate is not built");
        assert_eq!(a.insert_with(1, 2, || 1), Insert::Stored);
        assert_eq!(a.insert_with(2, 2, || 2), Insert::Full);
        // End at or below stored data, or at offset 0 with data stored.
        assert_eq!(a.insert_end(3, 1000), EndInsert::Conflict);
        assert_eq!(a.insert_end(0, 1000), EndInsert::Conflict);
        assert_eq!(a.insert_end(2000, 1000), EndInsert::TooFar);
        assert_eq!(a.insert_end(5, 1000), EndInsert::Stored);
        assert!(a.has_end());
        assert_eq!(a.insert_end(5, 1000), EndInsert::AlreadyStored);
        assert_eq!(a.insert_end(6, 1000), EndInsert::Conflict);
        // Nothing at or beyond the end.
        assert_eq!(a.insert_with(5, 10, || 9), Insert::BeyondEnd);
        assert_eq!(a.insert_with(7, 10, || 9), Insert::BeyondEnd);
        assert_eq!(a.insert_with(4, 10, || 4), Insert::Stored);
        assert_eq!(a.insert_with(2, 10, || 2), Insert::Stored);
        assert_eq!(deliver(&mut a), (vec![1, 2, 3, 4], true));
    }

    #[test]
    fn end_at_next_on_an_empty_queue() {
        let mut a: Assembler<u32> = Assembler::new();
        assert_eq!(a.insert_end(0, 10), EndInsert::AtNext);
        assert!(a.is_empty());
    }

    #[test]
    fn clear_returns_payloads() {
        let mut a = Assembler::new();
        a.insert_with(2, LIMIT, || vec![1u8]);
        a.insert_with(4, LIMIT, || vec![2u8]);
        a.insert_end(6, LIMIT);
        let back: Vec<Vec<u8>> = a.clear().collect();
        assert_eq!(back, vec![vec![1], vec![2]]);
        assert!(a.is_empty());
        assert_eq!(a.stored(), 0);
        assert!(a.sack_blocks(4).is_empty());
    }

    #[test]
    fn sack_blocks_report_the_most_recent_first() {
        let mut a = Assembler::new();
        // Arrivals: 2, 3 (block 2..4), then 6 (block 6..7), then 9.
        for off in [2, 3, 6, 9] {
            a.insert_with(off, LIMIT, || ());
        }
        assert_eq!(blocks(&mut a, 4), vec![9..10, 6..7, 2..4]);
        // 7 arrives: its block 6..8 goes first.
        a.insert_with(7, LIMIT, || ());
        assert_eq!(blocks(&mut a, 4), vec![6..8, 9..10, 2..4]);
        // Room for two only (a DSACK block takes one of three).
        assert_eq!(blocks(&mut a, 2), vec![6..8, 9..10]);
        // A duplicate of 2 puts its block first (RFC 2883 sec. 4).
        assert_eq!(a.insert_with(2, LIMIT, || ()), Insert::Duplicate);
        assert_eq!(blocks(&mut a, 4), vec![2..4, 6..8, 9..10]);
    }

    #[test]
    fn more_holes_than_blocks_still_reports_the_latest_arrival() {
        let mut a = Assembler::new();
        // Ten isolated units at 2, 4, ..., 20 arrive in ascending order.
        for k in 1..=10 {
            a.insert_with(2 * k, LIMIT, || ());
        }
        // The four most recent (20, 18, 16, 14), not the four lowest.
        assert_eq!(blocks(&mut a, 4), vec![20..21, 18..19, 16..17, 14..15]);
        // After the recent ones are delivered past, the rest ascend.
        let mut b = Assembler::new();
        for off in [5, 3, 9, 11, 13] {
            b.insert_with(off, LIMIT, || ());
        }
        assert_eq!(blocks(&mut b, 4), vec![13..14, 11..12, 9..10, 3..4]);
        // 5 was not reported yet: another ACK is owed.
        assert!(b.has_unreported());
        // Delivering units 0..=3 (offset 3 becomes 0): recents shift with
        // the next expected position.
        for _ in 0..3 {
            b.advance();
        }
        // Offsets now: 5->2, 9->6, 11->8, 13->10; the unreported block
        // first, then the recently reported ones.
        assert_eq!(blocks(&mut b, 4), vec![2..3, 10..11, 8..9, 6..7]);
        assert!(!b.has_unreported());
    }

    #[test]
    fn a_block_that_stopped_growing_stays_listed_behind_the_growing_one() {
        let mut a = Assembler::new();
        // Low blocks 2, 4, 6 (old), then block 8..10, then a burst of
        // arrivals at 12..20 (one ACK for all of them, as after a batch).
        for off in [2, 4, 6, 8, 9] {
            a.insert_with(off, LIMIT, || ());
        }
        for off in 12..20 {
            a.insert_with(off, LIMIT, || ());
        }
        // Per-arrival recency would list 19, 18, 17, 16 (one block) and
        // then the lowest blocks, never reporting 8..10.
        assert_eq!(blocks(&mut a, 4), vec![12..20, 8..10, 6..7, 4..5]);
        assert!(a.has_unreported(), "2..3 is owed");
        // A unit joining two listed blocks merges them; the changed block
        // and the one never reported go first.
        a.insert_with(10, LIMIT, || ());
        a.insert_with(11, LIMIT, || ());
        assert_eq!(blocks(&mut a, 4), vec![8..20, 2..3, 6..7, 4..5]);
        assert!(!a.has_unreported());
        // Nothing changed: the blocks in the order they last changed.
        assert_eq!(blocks(&mut a, 4), vec![8..20, 6..7, 4..5, 2..3]);
    }

    #[test]
    fn blocks_span_runs_and_ascend_when_no_recent_is_left() {
        let mut a = Assembler::new();
        for off in [1, 2, 3, 5, 6, 8] {
            a.insert_with(off, LIMIT, || ());
        }
        assert_eq!(blocks(&mut a, 4), vec![8..9, 5..7, 1..4]);
        assert_eq!(blocks(&mut a, 0), vec![]);
        // Deliver the first run: the recents 8, 6, 5, 3 shift by 4 (offset
        // 0 consumed, then 1..=3).
        let (got, end) = deliver(&mut a);
        assert_eq!((got.len(), end), (3, false));
        assert_eq!(blocks(&mut a, 4), vec![4..5, 1..3]);
    }

    #[test]
    fn end_is_reported_in_its_block() {
        let mut a = Assembler::new();
        a.insert_with(2, LIMIT, || ());
        a.insert_end(3, LIMIT);
        assert_eq!(blocks(&mut a, 4), vec![2..4]);
    }
}
