//! A queue of frames held until their release instant, shared by
//! [`FaultLink`](crate::FaultLink) (frames delayed on the way out) and the sim
//! ports (frames in flight to a receiver).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// A frame waiting until its release instant; ordered by (instant,
/// sequence) so equal instants keep the order of arrival.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pending {
    pub(crate) at: Instant,
    pub(crate) seq: u64,
    pub(crate) bytes: Vec<u8>,
}

/// Frames by release instant, then arrival order.
#[derive(Debug, Default)]
pub(crate) struct DelayQueue {
    heap: BinaryHeap<Reverse<Pending>>,
    seq: u64,
}

impl DelayQueue {
    /// Holds `bytes` until `at`.
    pub(crate) fn push(&mut self, at: Instant, bytes: Vec<u8>) {
        self.seq += 1;
        self.heap.push(Reverse(Pending {
            at,
            seq: self.seq,
            bytes,
        }));
    }

    /// The earliest release instant, due or not.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(p)| p.at)
    }

    /// The earliest frame if its release instant is at or before `now`.
    pub(crate) fn peek_due(&self, now: Instant) -> Option<&[u8]> {
        match self.heap.peek() {
            Some(Reverse(p)) if p.at <= now => Some(&p.bytes),
            _ => None,
        }
    }

    /// Removes and returns the earliest frame if due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.peek_due(now).is_some() {
            self.heap.pop().map(|Reverse(p)| p.bytes)
        } else {
            None
        }
    }

    /// Frames held.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn releases_by_instant_then_arrival() {
        let t0 = Instant::now();
        let us = Duration::from_micros(1);
        let mut q = DelayQueue::default();
        q.push(t0 + us * 2, vec![1]);
        q.push(t0 + us, vec![2]);
        q.push(t0 + us * 2, vec![3]);
        assert_eq!(q.next_at(), Some(t0 + us));
        assert_eq!(q.pop_due(t0), None);
        assert_eq!(q.pop_due(t0 + us), Some(vec![2]));
        assert_eq!(q.peek_due(t0 + us), None);
        assert_eq!(q.pop_due(t0 + us * 5), Some(vec![1]));
        assert_eq!(q.pop_due(t0 + us * 5), Some(vec![3]));
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
    }
}
