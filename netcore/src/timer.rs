//! Timers of protocol cores, without a clock: deadlines are `Instant`s the
//! caller compares with the `now` it passes in.
//!
//! - [`TimerTable`]: a fixed set of named timers of one connection (quinn's
//!   `connection/timer.rs`): set, stop, query, the earliest deadline.
//! - [`TimerQueue`]: many keyed deadlines (one per packet or per socket) in
//!   a binary heap with *lazy invalidation*: re-arming pushes a new entry
//!   and leaves the old one in place; the owner tells, when an entry
//!   surfaces, whether it is still live. Re-arming is O(log n) and nothing
//!   is ever searched for.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// A timer kind usable as an index of a [`TimerTable`] of `N` timers.
pub trait TimerKind: Copy + Eq + std::fmt::Debug + 'static {
    /// Every kind, in index order; `ALL[k.index()] == k`.
    const ALL: &'static [Self];
    /// Position of this timer in the table, `< ALL.len()`.
    fn index(self) -> usize;
}

/// The deadlines of a fixed set of timers `T` (`N` = `T::ALL.len()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerTable<T: TimerKind, const N: usize> {
    at: [Option<Instant>; N],
    _kind: std::marker::PhantomData<T>,
}

impl<T: TimerKind, const N: usize> Default for TimerTable<T, N> {
    fn default() -> Self {
        Self {
            at: [None; N],
            _kind: std::marker::PhantomData,
        }
    }
}

impl<T: TimerKind, const N: usize> TimerTable<T, N> {
    /// Arms (or re-arms) `t` to expire at `at`.
    #[inline]
    pub fn set(&mut self, t: T, at: Instant) {
        self.at[t.index()] = Some(at);
    }

    /// The deadline of `t`, if armed.
    #[inline]
    pub fn get(&self, t: T) -> Option<Instant> {
        self.at[t.index()]
    }

    /// Disarms `t`.
    #[inline]
    pub fn stop(&mut self, t: T) {
        self.at[t.index()] = None;
    }

    /// Whether `t` is armed.
    #[inline]
    pub fn is_armed(&self, t: T) -> bool {
        self.at[t.index()].is_some()
    }

    /// Whether `t` is armed and its deadline is at or before `now`.
    #[inline]
    pub fn is_expired(&self, t: T, now: Instant) -> bool {
        self.at[t.index()].is_some_and(|at| at <= now)
    }

    /// Disarms and returns the first (in `T::ALL` order) timer expired at
    /// `now`; loop on it to fire every due timer exactly once.
    pub fn pop_expired(&mut self, now: Instant) -> Option<T> {
        let i = self.at.iter().position(|a| a.is_some_and(|a| a <= now))?;
        self.at[i] = None;
        Some(T::ALL[i])
    }

    /// The earliest deadline of all armed timers.
    #[inline]
    pub fn next_timeout(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// The armed timers and their deadlines, in `T::ALL` order (for
    /// diagnostics).
    pub fn armed(&self) -> impl Iterator<Item = (T, Instant)> + '_ {
        self.at
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.map(|a| (T::ALL[i], a)))
    }
}

/// Many keyed deadlines, earliest first, with lazy invalidation (see the
/// module documentation). Bounded by what its owner pushes: owners push at
/// most one live entry per key and prune dead ones on
/// [`TimerQueue::peek_live`], so stale entries are bounded by re-arms.
#[derive(Debug, Clone)]
pub struct TimerQueue<K: Ord + Copy> {
    heap: BinaryHeap<Reverse<(Instant, K)>>,
}

impl<K: Ord + Copy> Default for TimerQueue<K> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
        }
    }
}

impl<K: Ord + Copy> TimerQueue<K> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the deadline `at` for `key`. An earlier entry for the same key
    /// stays until it surfaces and its owner declares it stale.
    #[inline]
    pub fn push(&mut self, at: Instant, key: K) {
        self.heap.push(Reverse((at, key)));
    }

    /// The earliest entry whose `(deadline, key)` `is_live` accepts,
    /// dropping the stale entries in front of it.
    #[inline]
    pub fn peek_live(&mut self, mut is_live: impl FnMut(Instant, K) -> bool) -> Option<Instant> {
        while let Some(&Reverse((at, key))) = self.heap.peek() {
            if is_live(at, key) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// The earliest entry, live or not (a lower bound on the next live
    /// deadline: waking at it is at worst early).
    #[inline]
    pub fn peek(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Removes and returns the earliest entry if it is due at `now`; the
    /// caller checks whether it is still live.
    #[inline]
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, K)> {
        match self.heap.peek() {
            Some(&Reverse((at, key))) if at <= now => {
                self.heap.pop();
                Some((at, key))
            }
            _ => None,
        }
    }

    /// Entries held, live and stale.
    #[inline]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no entry is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Drops every entry whose `(deadline, key)` `is_live` rejects (for
    /// owners that want to bound stale entries after mass cancellation).
    pub fn retain(&mut self, mut is_live: impl FnMut(Instant, K) -> bool) {
        self.heap.retain(|Reverse((at, key))| is_live(*at, *key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum T {
        Rto,
        Ack,
        Persist,
    }
    impl TimerKind for T {
        const ALL: &'static [T] = &[T::Rto, T::Ack, T::Persist];
        fn index(self) -> usize {
            self as usize
        }
    }

    #[test]
    fn table_tracks_each_timer_and_the_earliest() {
        let t0 = Instant::now();
        let us = |n| t0 + Duration::from_micros(n);
        let mut tt: TimerTable<T, 3> = TimerTable::default();
        assert_eq!(tt.next_timeout(), None);
        tt.set(T::Rto, us(100));
        tt.set(T::Persist, us(50));
        assert_eq!(tt.next_timeout(), Some(us(50)));
        assert!(tt.is_expired(T::Persist, us(50)));
        assert!(!tt.is_expired(T::Rto, us(99)));
        assert_eq!(tt.pop_expired(us(60)), Some(T::Persist));
        assert_eq!(tt.pop_expired(us(60)), None);
        assert_eq!(tt.get(T::Persist), None);
        tt.stop(T::Rto);
        assert_eq!(tt.next_timeout(), None);
        tt.set(T::Ack, us(7));
        assert_eq!(tt.armed().collect::<Vec<_>>(), vec![(T::Ack, us(7))]);
    }

    #[test]
    fn queue_skips_stale_entries_lazily() {
        let t0 = Instant::now();
        let us = |n| t0 + Duration::from_micros(n);
        let mut q: TimerQueue<u32> = TimerQueue::new();
        // Key 1 armed at 10, re-armed at 30; key 2 at 20.
        let live = |k: u32, at: Instant| (k == 1 && at == us(30)) || (k == 2 && at == us(20));
        q.push(us(10), 1);
        q.push(us(20), 2);
        q.push(us(30), 1);
        assert_eq!(q.peek(), Some(us(10)));
        assert_eq!(q.peek_live(|at, k| live(k, at)), Some(us(20)));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop_due(us(19)), None);
        assert_eq!(q.pop_due(us(25)), Some((us(20), 2)));
        assert_eq!(q.pop_due(us(40)), Some((us(30), 1)));
        assert!(q.is_empty());
    }

    #[test]
    fn queue_retain_bounds_stale_entries() {
        let t0 = Instant::now();
        let mut q: TimerQueue<u32> = TimerQueue::new();
        for k in 0..100 {
            q.push(t0 + Duration::from_micros(k as u64), k);
        }
        q.retain(|_, k| k % 10 == 0);
        assert_eq!(q.len(), 10);
    }
}
