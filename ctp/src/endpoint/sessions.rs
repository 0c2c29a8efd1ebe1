//! The receiving half of the session information storage (CTP spec v1.2,
//! "Storages"): one received-id list per source (address, broadcast?),
//! bounded three ways, none of which is in the spec (its sessions live as
//! long as the node, which lets forged source addresses fill the table):
//!
//! - at most `max_sessions` sessions: a new source evicts the session idle
//!   the longest (least recently active), so a new peer is always served;
//! - a session idle for `session_idle_timeout` expires;
//! - the ids held beyond the in-sequence one, over all lists, stay within
//!   `max_out_of_order_ids_total` (on top of each list's own cap).
//!
//! Recency is kept in an activity queue of `(instant, session)` entries. A
//! session touched [`ACTIVITY_GRAIN`] or more after its queued entry
//! appends a new one; the entry whose instant equals the session's
//! `queued_at` is live, older ones are skipped when they reach the front
//! and compacted away once they outnumber the sessions. A touch within the
//! grain only moves `last_active`: most packets cost no queue work and no
//! hash lookup beyond the session's own. The front live entry is the least
//! recently active session to within the grain (for non-decreasing `now`),
//! and its instant plus the idle timeout a lower bound of the next expiry:
//! when that comes and the session was active since, its entry moves to the
//! back at `last_active` and the session stays. O(1) amortized per packet,
//! no ordering on addresses needed (a heap would need `P: Ord`). The next
//! expiry is cached until the queue's front changes.
//!
//! Sessions live in slots (`slotmap`), found by source through a hash map
//! once per packet: [`RecvSessions::open`] returns the slot's
//! [`SessionKey`], which the packet's further steps (duplicate check, id
//! record) and the activity queue use without hashing again; a key whose
//! session was dropped finds nothing.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use slotmap::SlotMap;

use crate::id::PeerAddr;
use crate::peer::{IdStatus, RecvIdList};

/// A source: its address and whether the list is for its broadcasts.
pub(crate) type Source<P> = (P, bool);

/// Activity closer than this to a session's queued entry does not queue a
/// new one: eviction picks the least recently active session to within
/// this, and idle expiry stays exact (it checks `last_active`). 1 ms is
/// far below the idle timeout (600 s by default) and, in a ping-pong at a
/// few microseconds per message, leaves one queue entry per few hundred
/// packets.
pub(crate) const ACTIVITY_GRAIN: Duration = Duration::from_millis(1);

slotmap::new_key_type! {
    /// A receiving session's slot.
    pub(crate) struct SessionKey;
}

#[derive(Debug)]
struct RecvSession<P> {
    src: Source<P>,
    ids: RecvIdList,
    /// The latest packet's instant.
    last_active: Instant,
    /// The instant of the session's live entry in the activity queue.
    queued_at: Instant,
}

/// What [`RecvSessions::open`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opened<P> {
    /// The source had a session.
    Existing,
    /// A session was created, evicting the given one to make room.
    Created { evicted: Option<Source<P>> },
}

/// The receiving sessions of an endpoint (see the module documentation).
#[derive(Debug)]
pub(crate) struct RecvSessions<P> {
    index: FxHashMap<Source<P>, SessionKey>,
    slots: SlotMap<SessionKey, RecvSession<P>>,
    order: VecDeque<(Instant, SessionKey)>,
    ids_total: usize,
    /// The queue's first live entry's instant, while known (`None`: look
    /// again; `Some(None)`: no session).
    front: Option<Option<Instant>>,
    /// The source `open` found last and its key (checked against the slot
    /// before use: a removed session's key finds nothing), so a stream
    /// from one peer hashes nothing.
    last: Option<(Source<P>, SessionKey)>,
}

impl<P: PeerAddr> RecvSessions<P> {
    pub fn new() -> Self {
        Self {
            index: FxHashMap::default(),
            slots: SlotMap::with_key(),
            order: VecDeque::new(),
            ids_total: 0,
            front: None,
            last: None,
        }
    }

    /// Sessions open.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Ids held beyond the in-sequence one, over all lists.
    pub fn ids_total(&self) -> usize {
        self.ids_total
    }

    /// Entries of the activity queue, live and stale (bounded by about
    /// twice the sessions).
    #[cfg(test)]
    pub fn order_len(&self) -> usize {
        self.order.len()
    }

    /// The sources with a session.
    pub fn sources(&self) -> impl Iterator<Item = &Source<P>> {
        self.index.keys()
    }

    /// The received-id list of `src`.
    pub fn list(&self, src: &Source<P>) -> Option<&RecvIdList> {
        self.index
            .get(src)
            .and_then(|&k| self.slots.get(k))
            .map(|s| &s.ids)
    }

    /// Marks `src` active at `now`, creating its session with a list of
    /// `cap` ids when it has none; when `max` sessions are open the least
    /// recently active one is evicted first. Returns the session's key
    /// for the packet's further steps.
    pub fn open(
        &mut self,
        now: Instant,
        src: Source<P>,
        max: usize,
        cap: usize,
    ) -> (SessionKey, Opened<P>) {
        let found = match self.last {
            Some((last, key)) if last == src && self.slots.contains_key(key) => Some(key),
            _ => self.index.get(&src).copied(),
        };
        if let Some(key) = found {
            self.last = Some((src, key));
            let s = &mut self.slots[key];
            if now > s.last_active {
                s.last_active = now;
                if now.saturating_duration_since(s.queued_at) >= ACTIVITY_GRAIN {
                    s.queued_at = now;
                    self.push(now, key);
                }
            }
            return (key, Opened::Existing);
        }
        let evicted = if self.slots.len() >= max.max(1) {
            self.pop_least_recent()
        } else {
            None
        };
        let key = self.slots.insert(RecvSession {
            src,
            ids: RecvIdList::new(cap),
            last_active: now,
            queued_at: now,
        });
        self.index.insert(src, key);
        self.last = Some((src, key));
        self.push(now, key);
        (key, Opened::Created { evicted })
    }

    /// Queues the live entry `(at, key)`.
    fn push(&mut self, at: Instant, key: SessionKey) {
        if self.order.is_empty() {
            self.front = None;
        }
        self.order.push_back((at, key));
        self.compact();
    }

    fn is_live(&self, at: Instant, key: SessionKey) -> bool {
        self.slots.get(key).is_some_and(|s| s.queued_at == at)
    }

    /// Drops session `key`; returns its source.
    fn remove(&mut self, key: SessionKey) -> Option<Source<P>> {
        let s = self.slots.remove(key)?;
        self.index.remove(&s.src);
        self.ids_total -= s.ids.pending_len();
        self.front = None;
        Some(s.src)
    }

    fn pop_least_recent(&mut self) -> Option<Source<P>> {
        self.front = None;
        while let Some((at, key)) = self.order.pop_front() {
            if self.is_live(at, key) {
                return self.remove(key);
            }
        }
        None
    }

    /// Drops stale activity entries once they outnumber the sessions
    /// (amortized O(1) per touch).
    fn compact(&mut self) {
        if self.order.len() <= 2 * self.slots.len() + 64 {
            return;
        }
        let slots = &self.slots;
        self.order
            .retain(|(at, key)| slots.get(*key).is_some_and(|s| s.queued_at == *at));
        self.front = None;
    }

    /// Drops the sessions idle for `idle` at `now` (none when `idle` is
    /// zero); returns how many.
    pub fn expire(&mut self, now: Instant, idle: Duration) -> u64 {
        if idle.is_zero() {
            return 0;
        }
        let mut n = 0;
        self.front = None;
        while let Some(&(at, key)) = self.order.front() {
            let Some(last) = self
                .slots
                .get(key)
                .filter(|s| s.queued_at == at)
                .map(|s| s.last_active)
            else {
                self.order.pop_front();
                continue;
            };
            if netcore::time::later(at, idle) > now {
                break;
            }
            self.order.pop_front();
            if netcore::time::later(last, idle) > now {
                // Active since its entry was queued: queued again at its
                // latest activity.
                self.slots[key].queued_at = last;
                self.order.push_back((last, key));
                continue;
            }
            if let Some(src) = self.remove(key) {
                tracing::debug!(peer = ?src.0, broadcast = src.1, "receiving session expired (idle)");
            }
            n += 1;
        }
        n
    }

    /// When [`expire`](Self::expire) must run next: `idle` after the
    /// front live activity entry (a session may turn out active since and
    /// stay); discards stale activity entries in front. No lookup while
    /// the front is unchanged.
    pub fn next_expiry(&mut self, idle: Duration) -> Option<Instant> {
        if idle.is_zero() {
            return None;
        }
        if let Some(front) = self.front {
            return front.map(|at| netcore::time::later(at, idle));
        }
        let mut front = None;
        while let Some(&(at, key)) = self.order.front() {
            if self.is_live(at, key) {
                front = Some(at);
                break;
            }
            self.order.pop_front();
        }
        self.front = Some(front);
        front.map(|at| netcore::time::later(at, idle))
    }

    /// True if `id` was received in session `key` before.
    pub fn contains(&self, key: SessionKey, id: u32) -> bool {
        self.slots.get(key).is_some_and(|s| s.ids.contains(id))
    }

    /// A StartSession packet `id` in session `key`.
    pub fn start_session(&mut self, key: SessionKey, id: u32) {
        if let Some(s) = self.slots.get_mut(key) {
            let before = s.ids.pending_len();
            s.ids.start_session(id);
            self.ids_total = self.ids_total - before + s.ids.pending_len();
        }
    }

    /// Records `id` in session `key` within the budget of `total` ids over
    /// all lists (`Full` if the session is gone).
    pub fn insert(&mut self, key: SessionKey, id: u32, total: usize) -> IdStatus {
        let room = total.saturating_sub(self.ids_total);
        let Some(s) = self.slots.get_mut(key) else {
            return IdStatus::Full;
        };
        let before = s.ids.pending_len();
        let st = s.ids.insert_within(id, room);
        self.ids_total = self.ids_total - before + s.ids.pending_len();
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_active_is_evicted_and_idle_ones_expire() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s: RecvSessions<u32> = RecvSessions::new();
        for p in 0..3 {
            assert_eq!(
                s.open(ms(p as u64), (p, false), 3, 16).1,
                Opened::Created { evicted: None }
            );
        }
        // 0 becomes the most recent; 1 is now the least recent
        assert_eq!(s.open(ms(10), (0, false), 3, 16).1, Opened::Existing);
        assert_eq!(
            s.open(ms(11), (9, false), 3, 16).1,
            Opened::Created {
                evicted: Some((1, false))
            }
        );
        assert_eq!(s.len(), 3);
        let idle = Duration::from_millis(100);
        assert_eq!(s.next_expiry(idle), Some(ms(102)));
        assert_eq!(s.expire(ms(105), idle), 1, "2 expires");
        assert_eq!(s.next_expiry(idle), Some(ms(110)));
        assert_eq!(s.expire(ms(1000), idle), 2);
        assert_eq!((s.len(), s.next_expiry(idle)), (0, None));
        // 9 was found last; its remembered key died with its session.
        assert_eq!(
            s.open(ms(1001), (9, false), 3, 16).1,
            Opened::Created { evicted: None }
        );
        assert_eq!(s.open(ms(1002), (9, false), 3, 16).1, Opened::Existing);
        assert_eq!(s.len(), 1);
    }

    /// Activity within the grain queues nothing; a session active since
    /// its entry was queued is not expired at that entry's deadline but
    /// at its latest activity's, and eviction still picks the least
    /// recently active.
    #[test]
    fn activity_within_the_grain_moves_expiry_without_queueing() {
        let t0 = Instant::now();
        let us = |n| t0 + Duration::from_micros(n);
        let mut s: RecvSessions<u32> = RecvSessions::new();
        s.open(us(0), (1, false), 8, 16);
        s.open(us(10), (2, false), 8, 16);
        for k in 1..500 {
            s.open(us(k), (1, false), 8, 16);
        }
        assert_eq!(s.order_len(), 2, "touches within the grain queue nothing");
        let idle = Duration::from_millis(100);
        // Source 1's entry is the front: the bound is 100 ms after it.
        assert_eq!(s.next_expiry(idle), Some(us(0) + idle));
        assert_eq!(s.expire(us(0) + idle, idle), 0, "1 was active at 499 us");
        assert_eq!(s.next_expiry(idle), Some(us(10) + idle), "2 in front now");
        assert_eq!(s.expire(us(10) + idle, idle), 1, "2 idle since 10 us");
        assert_eq!(s.next_expiry(idle), Some(us(499) + idle));
        assert_eq!(s.expire(us(499) + idle, idle), 1);
        assert_eq!((s.len(), s.next_expiry(idle)), (0, None));
        // A touch a grain later queues an entry; the oldest is evicted.
        s.open(us(0), (1, false), 2, 16);
        s.open(us(1), (2, false), 2, 16);
        s.open(t0 + ACTIVITY_GRAIN, (1, false), 2, 16);
        assert_eq!(s.order_len(), 3);
        assert_eq!(
            s.open(t0 + 2 * ACTIVITY_GRAIN, (3, false), 2, 16).1,
            Opened::Created {
                evicted: Some((2, false))
            }
        );
    }

    #[test]
    fn activity_queue_stays_bounded_for_a_busy_source() {
        let t0 = Instant::now();
        let mut s: RecvSessions<u32> = RecvSessions::new();
        for k in 0..10_000u64 {
            s.open(t0 + Duration::from_micros(k), (k as u32 % 3, false), 8, 16);
        }
        assert!(s.order_len() <= 2 * 3 + 65, "{}", s.order_len());
    }

    #[test]
    fn id_budget_is_shared_and_released_with_the_session() {
        let t0 = Instant::now();
        let mut s: RecvSessions<u32> = RecvSessions::new();
        let keys: Vec<SessionKey> = (0..2)
            .map(|p| {
                let (k, _) = s.open(t0, (p, false), 8, 100);
                s.start_session(k, 1);
                assert_eq!(s.insert(k, 1, 12), IdStatus::New);
                k
            })
            .collect();
        // ids 3, 5, 7, ... are out of order (2, 4, ... missing)
        let mut held = 0;
        for k in 1..=10 {
            for &key in &keys {
                if s.insert(key, 2 * k + 1, 12) == IdStatus::New {
                    held += 1;
                }
            }
        }
        assert_eq!((held, s.ids_total()), (12, 12));
        assert_eq!(
            s.insert(keys[0], 2, 12),
            IdStatus::New,
            "in sequence: no room needed"
        );
        s.open(t0, (7, false), 2, 100); // evicts one of the two
        assert!(s.ids_total() < 12);
        let gone = if s.list(&(0, false)).is_none() { 0 } else { 1 };
        assert_eq!(
            s.insert(keys[gone], 40, 100),
            IdStatus::Full,
            "an evicted session's key finds nothing"
        );
    }
}
