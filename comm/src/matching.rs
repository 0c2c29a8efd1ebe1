//! The matching engine, sans-IO: the posted-receive queue and the
//! unexpected-message queue of one communicator context (MPI 4.0 section
//! 3.5 "Communication modes" and 3.8 "Probe and Cancel"; the two queues are
//! the usual implementation, as in Open MPI's `ob1` PML).
//!
//! Rules (MPI 4.0 section 3.5, "Order"): messages are *non-overtaking*. If a
//! sender sends two messages in succession to the same destination and both
//! match the same receive, the receive cannot match the second while the
//! first is pending; if a receiver posts two receives in succession and both
//! match the same message, the second cannot be satisfied by it while the
//! first is pending. The engine keeps both orders by construction:
//! - an arriving message is matched against the posted receives in posting
//!   order (the first that matches takes it), else queued as unexpected in
//!   arrival order;
//! - a new receive is matched against the unexpected messages in arrival
//!   order (the first that matches is taken), else queued as posted.
//!
//! Messages must therefore be handed to [`Matcher::arrive`] in each
//! source's send order; the communicator's per-peer sequence numbers do
//! that (`crate::reorder`).
//!
//! Bounds: the unexpected queue holds at most
//! [`MatchLimits::max_unexpected_messages`] messages and
//! [`MatchLimits::max_unexpected_bytes`] payload bytes (one message larger
//! than the byte bound is admitted into an empty queue, so it can still be
//! received); a message beyond them is refused with
//! [`Overflow`], given back to the caller and counted
//! ([`MatchStats::overflows`]), never dropped. The posted queue holds at most
//! [`MatchLimits::max_posted`] receives ([`PostError::TooManyPosted`]).
//!
//! Both queues are searched linearly (as Open MPI's per-source lists are);
//! the bounds keep the cost bounded.

use std::collections::VecDeque;

/// A message tag: 0..=[`MAX_TAG`] (MPI's `MPI_TAG_UB` is at least 32767,
/// MPI 4.0 section 3.2.3; ours is `u32::MAX >> 1`, so a tag fits an MPI
/// `int`).
pub type Tag = u32;

/// The largest tag, `2^31 - 1` (MPI 4.0 section 3.2.3: `MPI_TAG_UB`).
pub const MAX_TAG: Tag = i32::MAX as Tag;

/// Which sources a receive accepts (MPI's `source` argument, section 3.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceSel {
    /// Any rank (`MPI_ANY_SOURCE`).
    Any,
    /// Exactly this rank.
    Rank(usize),
}

/// Which tags a receive accepts (MPI's `tag` argument, section 3.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TagSel {
    /// Any tag (`MPI_ANY_TAG`).
    Any,
    /// Exactly this tag.
    Tag(Tag),
}

/// `MPI_ANY_SOURCE`.
pub const ANY_SOURCE: SourceSel = SourceSel::Any;
/// `MPI_ANY_TAG`.
pub const ANY_TAG: TagSel = TagSel::Any;

impl From<usize> for SourceSel {
    fn from(rank: usize) -> Self {
        SourceSel::Rank(rank)
    }
}

impl From<Tag> for TagSel {
    fn from(tag: Tag) -> Self {
        TagSel::Tag(tag)
    }
}

impl SourceSel {
    /// True if a message from `source` is accepted.
    pub fn accepts(self, source: usize) -> bool {
        match self {
            SourceSel::Any => true,
            SourceSel::Rank(r) => r == source,
        }
    }
}

impl TagSel {
    /// True if a message tagged `tag` is accepted.
    pub fn accepts(self, tag: Tag) -> bool {
        match self {
            TagSel::Any => true,
            TagSel::Tag(t) => t == tag,
        }
    }
}

/// The envelope of a message as matching sees it: source rank and tag (the
/// communicator is implicit: one [`Matcher`] per context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Sending rank.
    pub source: usize,
    /// Tag.
    pub tag: Tag,
}

/// Bounds of a [`Matcher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchLimits {
    /// Most messages in the unexpected queue. Default 65536.
    pub max_unexpected_messages: usize,
    /// Most payload bytes in the unexpected queue (one larger message is
    /// admitted when the queue is empty). Default 256 MiB, the size of
    /// CTP's delivery queue (`ctp::Config::max_queued_delivery_bytes`).
    pub max_unexpected_bytes: u64,
    /// Most posted (unmatched) receives. Default 65536.
    pub max_posted: usize,
}

impl Default for MatchLimits {
    fn default() -> Self {
        Self {
            max_unexpected_messages: 1 << 16,
            max_unexpected_bytes: 256 << 20,
            max_posted: 1 << 16,
        }
    }
}

/// Counters of a [`Matcher`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchStats {
    /// Messages that found a posted receive on arrival.
    pub matched_posted: u64,
    /// Messages queued as unexpected.
    pub queued_unexpected: u64,
    /// Receives satisfied from the unexpected queue.
    pub matched_unexpected: u64,
    /// Arrivals refused because the unexpected queue was full ([`Overflow`]).
    pub overflows: u64,
    /// Receives refused because the posted queue was full.
    pub posted_refused: u64,
}

/// An arrival refused because the unexpected queue is full: the message,
/// given back (MPI leaves the buffering of unexpected messages to the
/// implementation; this one bounds it and makes the sender wait).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unexpected-message queue full: {queued} messages / {queued_bytes} bytes queued, a message of {} bytes from rank {} tag {} does not fit",
    data.len(), envelope.source, envelope.tag
)]
pub struct Overflow {
    /// The refused message's envelope.
    pub envelope: Envelope,
    /// The refused message's payload.
    pub data: Vec<u8>,
    /// Messages queued when it was refused.
    pub queued: usize,
    /// Payload bytes queued when it was refused.
    pub queued_bytes: u64,
}

/// Why a receive could not be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// [`MatchLimits::max_posted`] receives are already posted.
    #[error("{0} receives already posted (the limit): complete or cancel some first")]
    TooManyPosted(usize),
}

/// A posted receive, identified by the caller's handle `R`.
#[derive(Debug, Clone)]
struct Posted<R> {
    id: R,
    source: SourceSel,
    tag: TagSel,
}

/// A message nobody has asked for yet.
#[derive(Debug, Clone)]
struct Unexpected {
    envelope: Envelope,
    data: Vec<u8>,
}

/// A receive matched with its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched<R> {
    /// The receive's handle.
    pub id: R,
    /// The message's envelope.
    pub envelope: Envelope,
    /// The message.
    pub data: Vec<u8>,
}

/// The matching engine of one context. `R` identifies posted receives
/// (e.g. a request id). See the module documentation.
#[derive(Debug, Clone)]
pub struct Matcher<R> {
    limits: MatchLimits,
    posted: VecDeque<Posted<R>>,
    unexpected: VecDeque<Unexpected>,
    unexpected_bytes: u64,
    stats: MatchStats,
}

impl<R: Clone + PartialEq> Matcher<R> {
    /// An empty engine with `limits`.
    pub fn new(limits: MatchLimits) -> Self {
        Self {
            limits,
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            unexpected_bytes: 0,
            stats: MatchStats::default(),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> MatchLimits {
        self.limits
    }

    /// Posts receive `id` for `(source, tag)`. If an unexpected message
    /// matches, the first in arrival order is taken and returned (the
    /// receive is then not queued); otherwise the receive is queued.
    ///
    /// Errors: [`PostError::TooManyPosted`] when it would be queued beyond
    /// [`MatchLimits::max_posted`].
    pub fn post(
        &mut self,
        id: R,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<Matched<R>>, PostError> {
        if let Some(i) = self
            .unexpected
            .iter()
            .position(|u| source.accepts(u.envelope.source) && tag.accepts(u.envelope.tag))
        {
            let u = self.unexpected.remove(i).expect("index from position");
            self.unexpected_bytes -= u.data.len() as u64;
            self.stats.matched_unexpected += 1;
            return Ok(Some(Matched {
                id,
                envelope: u.envelope,
                data: u.data,
            }));
        }
        if self.posted.len() >= self.limits.max_posted {
            self.stats.posted_refused += 1;
            return Err(PostError::TooManyPosted(self.posted.len()));
        }
        self.posted.push_back(Posted { id, source, tag });
        Ok(None)
    }

    /// Hands over a message that arrived (in its source's send order). If a
    /// posted receive matches, the first in posting order takes it and is
    /// returned; otherwise the message is queued as unexpected.
    ///
    /// Errors: [`Overflow`] (the message given back, counted) when the
    /// unexpected queue is full.
    pub fn arrive(
        &mut self,
        envelope: Envelope,
        data: Vec<u8>,
    ) -> Result<Option<Matched<R>>, Box<Overflow>> {
        if let Some(i) = self
            .posted
            .iter()
            .position(|p| p.source.accepts(envelope.source) && p.tag.accepts(envelope.tag))
        {
            let p = self.posted.remove(i).expect("index from position");
            self.stats.matched_posted += 1;
            return Ok(Some(Matched {
                id: p.id,
                envelope,
                data,
            }));
        }
        if !self.has_room(data.len() as u64) {
            self.stats.overflows += 1;
            return Err(Box::new(Overflow {
                envelope,
                data,
                queued: self.unexpected.len(),
                queued_bytes: self.unexpected_bytes,
            }));
        }
        self.unexpected_bytes += data.len() as u64;
        self.unexpected.push_back(Unexpected { envelope, data });
        self.stats.queued_unexpected += 1;
        Ok(None)
    }

    /// True if a message of `len` bytes that matches no posted receive
    /// would fit the unexpected queue.
    pub fn has_room(&self, len: u64) -> bool {
        if self.unexpected.is_empty() {
            return self.limits.max_unexpected_messages > 0;
        }
        self.unexpected.len() < self.limits.max_unexpected_messages
            && self.unexpected_bytes.saturating_add(len) <= self.limits.max_unexpected_bytes
    }

    /// True if [`Matcher::arrive`] would take a message of `len` bytes
    /// with `envelope` now (a posted receive matches it, or it fits the
    /// unexpected queue), without counting anything.
    pub fn takes(&self, envelope: Envelope, len: u64) -> bool {
        self.has_room(len)
            || self
                .posted
                .iter()
                .any(|p| p.source.accepts(envelope.source) && p.tag.accepts(envelope.tag))
    }

    /// The envelope and size (bytes) of the first unexpected message
    /// `(source, tag)` would match, without taking it (MPI's `MPI_Iprobe`,
    /// section 3.8.1).
    pub fn probe(&self, source: SourceSel, tag: TagSel) -> Option<(Envelope, usize)> {
        self.unexpected
            .iter()
            .find(|u| source.accepts(u.envelope.source) && tag.accepts(u.envelope.tag))
            .map(|u| (u.envelope, u.data.len()))
    }

    /// The source selectors of the posted receives, in posting order.
    pub fn posted_sources(&self) -> impl Iterator<Item = SourceSel> + '_ {
        self.posted.iter().map(|p| p.source)
    }

    /// Removes posted receive `id`; false if it is not posted (already
    /// matched). MPI's `MPI_Cancel` of a receive (section 3.8.4).
    pub fn cancel(&mut self, id: &R) -> bool {
        match self.posted.iter().position(|p| &p.id == id) {
            Some(i) => {
                self.posted.remove(i);
                true
            }
            None => false,
        }
    }

    /// Removes and returns the posted receives naming `source` exactly (for
    /// a failed peer: they can never complete). Wildcard receives stay.
    pub fn cancel_source(&mut self, source: usize) -> Vec<R> {
        let mut gone = Vec::new();
        self.posted.retain(|p| {
            if p.source == SourceSel::Rank(source) {
                gone.push(p.id.clone());
                false
            } else {
                true
            }
        });
        gone
    }

    /// Number of posted receives.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Number of unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Payload bytes in unexpected messages.
    pub fn unexpected_bytes(&self) -> u64 {
        self.unexpected_bytes
    }

    /// Counters.
    pub fn stats(&self) -> MatchStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(source: usize, tag: Tag) -> Envelope {
        Envelope { source, tag }
    }

    #[test]
    fn posted_receive_takes_the_first_matching_arrival() {
        let mut m = Matcher::<u32>::new(MatchLimits::default());
        assert_eq!(m.post(1, SourceSel::Rank(2), TagSel::Tag(7)).unwrap(), None);
        // Wrong tag, wrong source: queued as unexpected.
        assert_eq!(m.arrive(env(2, 8), vec![1]).unwrap(), None);
        assert_eq!(m.arrive(env(3, 7), vec![2]).unwrap(), None);
        let got = m.arrive(env(2, 7), vec![3]).unwrap().unwrap();
        assert_eq!((got.id, got.data), (1, vec![3]));
        assert_eq!((m.posted_len(), m.unexpected_len()), (0, 2));
        assert_eq!(m.unexpected_bytes(), 2);
    }

    #[test]
    fn wildcards_take_unexpected_messages_in_arrival_order() {
        let mut m = Matcher::<u32>::new(MatchLimits::default());
        m.arrive(env(1, 5), b"a".to_vec()).unwrap();
        m.arrive(env(0, 6), b"b".to_vec()).unwrap();
        m.arrive(env(1, 6), b"c".to_vec()).unwrap();
        let a = m.post(1, ANY_SOURCE, TagSel::Tag(6)).unwrap().unwrap();
        assert_eq!((a.envelope, a.data), (env(0, 6), b"b".to_vec()));
        let b = m.post(2, SourceSel::Rank(1), ANY_TAG).unwrap().unwrap();
        assert_eq!((b.envelope, b.data), (env(1, 5), b"a".to_vec()));
        let c = m.post(3, ANY_SOURCE, ANY_TAG).unwrap().unwrap();
        assert_eq!((c.envelope, c.data), (env(1, 6), b"c".to_vec()));
        assert_eq!(m.post(4, ANY_SOURCE, ANY_TAG).unwrap(), None);
        assert_eq!(m.posted_len(), 1);
    }

    #[test]
    fn full_unexpected_queue_gives_the_message_back_and_counts() {
        let limits = MatchLimits {
            max_unexpected_messages: 2,
            max_unexpected_bytes: 10,
            max_posted: 1,
        };
        let mut m = Matcher::<u32>::new(limits);
        // One message larger than the byte bound fits an empty queue.
        m.arrive(env(0, 0), vec![0; 20]).unwrap();
        let o = m.arrive(env(0, 1), vec![9; 1]).unwrap_err();
        assert_eq!((o.envelope, o.data.clone()), (env(0, 1), vec![9]));
        assert_eq!((o.queued, o.queued_bytes), (1, 20));
        assert!(o.to_string().contains("from rank 0 tag 1"), "{o}");
        assert_eq!(m.stats().overflows, 1);
        // A posted receive still takes a message although the queue is full.
        m.post(7, ANY_SOURCE, TagSel::Tag(3)).unwrap();
        assert_eq!(m.arrive(env(1, 3), vec![1]).unwrap().unwrap().id, 7);
        // Taking the big one makes room again.
        assert_eq!(
            m.post(8, ANY_SOURCE, ANY_TAG).unwrap().unwrap().data.len(),
            20
        );
        m.arrive(env(0, 1), vec![9; 5]).unwrap();
        m.arrive(env(0, 2), vec![9; 5]).unwrap();
        assert!(m.arrive(env(0, 3), vec![]).is_err(), "count bound");
        // Posted bound.
        m.post(9, SourceSel::Rank(5), ANY_TAG).unwrap();
        assert_eq!(
            m.post(10, SourceSel::Rank(5), ANY_TAG),
            Err(PostError::TooManyPosted(1))
        );
        assert_eq!(m.stats().posted_refused, 1);
    }

    #[test]
    fn cancel_and_cancel_source() {
        let mut m = Matcher::<u32>::new(MatchLimits::default());
        m.post(1, SourceSel::Rank(3), ANY_TAG).unwrap();
        m.post(2, ANY_SOURCE, ANY_TAG).unwrap();
        m.post(3, SourceSel::Rank(3), TagSel::Tag(1)).unwrap();
        m.post(4, SourceSel::Rank(4), TagSel::Tag(1)).unwrap();
        assert_eq!(m.cancel_source(3), vec![1, 3]);
        assert!(m.cancel(&4));
        assert!(!m.cancel(&4));
        assert_eq!(m.posted_len(), 1);
        assert_eq!(m.arrive(env(3, 1), vec![]).unwrap().unwrap().id, 2);
    }

    #[test]
    fn probe_does_not_take() {
        let mut m = Matcher::<u32>::new(MatchLimits::default());
        assert_eq!(m.probe(ANY_SOURCE, ANY_TAG), None);
        m.arrive(env(2, 4), vec![1, 2, 3]).unwrap();
        assert_eq!(m.probe(ANY_SOURCE, TagSel::Tag(4)), Some((env(2, 4), 3)));
        assert_eq!(m.probe(SourceSel::Rank(1), ANY_TAG), None);
        assert_eq!(m.unexpected_len(), 1);
    }
}
