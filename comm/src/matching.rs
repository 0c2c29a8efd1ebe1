//! The matching engine, sans-IO: the posted-receive queue and the
//! unexpected-message queue of one context (MPI 4.0 section 3.5
//! "Communication modes" and 3.8 "Probe and Cancel"; the two queues are the
//! usual implementation, as in Open MPI's `ob1` PML).
//!
//! The engine, [`TagMatcher`], matches 64-bit tags under 64-bit ignore
//! masks with libfabric's rule (`fi_tagged(3)`: a receive with tag `T` and
//! ignore `I` takes a message with tag `M` iff `(M & !I) == (T & !I)`), and
//! sources given exactly or not at all (`FI_ADDR_UNSPEC`, `MPI_ANY_SOURCE`).
//! MPI's view of it, 32-bit tags with `MPI_ANY_TAG`, is [`Matcher`]
//! (`matching/mpi.rs`): `MPI_ANY_TAG` is the ignore mask of every bit.
//!
//! Rules (MPI 4.0 section 3.5, "Order"; libfabric's `FI_ORDER_SAS` asks the
//! same): messages are *non-overtaking*. If a sender sends two messages in
//! succession to the same destination and both match the same receive, the
//! receive cannot match the second while the first is pending; if a
//! receiver posts two receives in succession and both match the same
//! message, the second cannot be satisfied by it while the first is
//! pending. The engine keeps both orders by construction:
//! - an arriving message is matched against the posted receives in posting
//!   order (the first that matches takes it), else queued as unexpected in
//!   arrival order;
//! - a new receive is matched against the unexpected messages in arrival
//!   order (the first that matches is taken), else queued as posted.
//!
//! Messages must therefore be handed to [`TagMatcher::arrive`] in each
//! source's send order; the communicator's per-peer sequence numbers do
//! that (`crate::reorder`).
//!
//! Probes (MPI_Iprobe / MPI_Improbe, section 3.8; libfabric's `FI_PEEK`,
//! `FI_CLAIM`, `FI_DISCARD`, `fi_tagged(3)`): [`TagMatcher::peek`] reports
//! the first unexpected message a receive would take, without taking it;
//! [`TagMatcher::claim`] takes it out of matching and keeps it under a key
//! (libfabric: the operation's context) for a later
//! [`TagMatcher::take_claimed`] or [`TagMatcher::discard_claimed`];
//! [`TagMatcher::discard`] drops the first match. Claimed messages stay
//! counted in the unexpected queue's bounds until taken.
//!
//! Bounds: the unexpected queue holds at most
//! [`MatchLimits::max_unexpected_messages`] messages and
//! [`MatchLimits::max_unexpected_bytes`] payload bytes (one message larger
//! than the byte bound is admitted into an empty queue, so it can still be
//! received); a message beyond them is refused with [`TagOverflow`], given
//! back to the caller and counted ([`MatchStats::overflows`]), never
//! dropped. The posted queue holds at most [`MatchLimits::max_posted`]
//! receives ([`PostError::TooManyPosted`]).
//!
//! Both queues are searched linearly (as Open MPI's per-source lists are);
//! the bounds keep the cost bounded.
//!
//! The engine holds a message's payload as the caller gives it
//! ([`Payload`]): its bytes (`Vec<u8>`, the default), or a handle to bytes
//! still at the sender (the communicator's rendezvous announcements),
//! whose byte count toward the unexpected bound is what it holds, not the
//! message's length.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

mod mpi;

pub use mpi::{
    selector, Envelope, Matched, Matcher, Overflow, SourceSel, Tag, TagSel, ANY_SOURCE, ANY_TAG,
    MAX_TAG,
};

/// A message's payload as the engine holds it.
pub trait Payload {
    /// The message's length, bytes (what a probe reports).
    fn msg_len(&self) -> usize;

    /// Bytes it holds here, counted against
    /// [`MatchLimits::max_unexpected_bytes`]: the message's length, unless
    /// the bytes are elsewhere.
    fn held_bytes(&self) -> u64 {
        self.msg_len() as u64
    }
}

impl Payload for Vec<u8> {
    fn msg_len(&self) -> usize {
        self.len()
    }
}

/// Which messages a receive accepts: a source (`None`: any) and a 64-bit
/// tag under an ignore mask (`fi_trecv(3)`'s `src_addr`, `tag`, `ignore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Selector {
    /// The sending peer, or `None` for any (`FI_ADDR_UNSPEC`).
    pub source: Option<usize>,
    /// The tag.
    pub tag: u64,
    /// Bits of the tag that do not count (all ones: any tag).
    pub ignore: u64,
}

impl Selector {
    /// A selector of exactly `tag` from `source`.
    pub fn exact(source: Option<usize>, tag: u64) -> Self {
        Selector {
            source,
            tag,
            ignore: 0,
        }
    }

    /// True if a message with envelope `e` is accepted: the source matches
    /// (or is any) and `(e.tag & !ignore) == (tag & !ignore)`.
    pub fn accepts(&self, e: &TagEnvelope) -> bool {
        self.source.is_none_or(|s| s == e.source) && (e.tag ^ self.tag) & !self.ignore == 0
    }
}

/// A message's envelope as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TagEnvelope {
    /// The sending peer.
    pub source: usize,
    /// The 64-bit tag.
    pub tag: u64,
    /// Remote CQ data sent with the message (`fi_tsenddata(3)`), if any.
    pub data: Option<u64>,
}

/// Bounds of a [`TagMatcher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchLimits {
    /// Most messages in the unexpected queue (claimed ones included).
    /// Default 65536.
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

/// Counters of a matching engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchStats {
    /// Messages that found a posted receive on arrival.
    pub matched_posted: u64,
    /// Messages queued as unexpected.
    pub queued_unexpected: u64,
    /// Receives satisfied from the unexpected queue.
    pub matched_unexpected: u64,
    /// Arrivals refused because the unexpected queue was full.
    pub overflows: u64,
    /// Receives refused because the posted queue was full.
    pub posted_refused: u64,
    /// Messages dropped by `discard` (`FI_DISCARD`).
    pub discarded: u64,
}

/// An arrival refused because the unexpected queue is full: the message,
/// given back (MPI leaves the buffering of unexpected messages to the
/// implementation; this one bounds it and makes the sender wait).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagOverflow<D = Vec<u8>> {
    /// The refused message's envelope.
    pub envelope: TagEnvelope,
    /// The refused message's payload.
    pub data: D,
    /// Messages queued when it was refused.
    pub queued: usize,
    /// Payload bytes queued when it was refused.
    pub queued_bytes: u64,
}

impl<D: Payload> std::fmt::Display for TagOverflow<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unexpected-message queue full: {} messages / {} bytes queued, a message of {} bytes from peer {} tag {:#x} does not fit",
            self.queued,
            self.queued_bytes,
            self.data.msg_len(),
            self.envelope.source,
            self.envelope.tag
        )
    }
}

impl<D: Payload + std::fmt::Debug> std::error::Error for TagOverflow<D> {}

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
    sel: Selector,
}

/// A message nobody has asked for yet.
#[derive(Debug, Clone)]
struct Unexpected<D> {
    envelope: TagEnvelope,
    data: D,
}

/// A receive matched with its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagMatched<R, D = Vec<u8>> {
    /// The receive's handle.
    pub id: R,
    /// The message's envelope.
    pub envelope: TagEnvelope,
    /// The message.
    pub data: D,
}

/// The matching engine of one context. `R` identifies posted receives
/// (e.g. a request id), `D` is the payload held ([`Payload`]). See the
/// module documentation.
#[derive(Debug, Clone)]
pub struct TagMatcher<R, D = Vec<u8>> {
    limits: MatchLimits,
    posted: VecDeque<Posted<R>>,
    unexpected: VecDeque<Unexpected<D>>,
    /// Claimed messages by key (`FI_CLAIM`): out of matching, in the bounds.
    claimed: FxHashMap<u64, Unexpected<D>>,
    unexpected_bytes: u64,
    stats: MatchStats,
}

impl<R: Clone + PartialEq, D: Payload> TagMatcher<R, D> {
    /// An empty engine with `limits`.
    pub fn new(limits: MatchLimits) -> Self {
        Self {
            limits,
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            claimed: FxHashMap::default(),
            unexpected_bytes: 0,
            stats: MatchStats::default(),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> MatchLimits {
        self.limits
    }

    fn first_unexpected(&self, sel: &Selector) -> Option<usize> {
        self.unexpected
            .iter()
            .position(|u| sel.accepts(&u.envelope))
    }

    fn remove_unexpected(&mut self, i: usize) -> Unexpected<D> {
        let u = self.unexpected.remove(i).expect("index from position");
        self.unexpected_bytes -= u.data.held_bytes();
        u
    }

    /// Posts receive `id` for `sel`. If an unexpected message matches, the
    /// first in arrival order is taken and returned (the receive is then not
    /// queued); otherwise the receive is queued.
    ///
    /// Errors: [`PostError::TooManyPosted`] when it would be queued beyond
    /// [`MatchLimits::max_posted`].
    pub fn post(&mut self, id: R, sel: Selector) -> Result<Option<TagMatched<R, D>>, PostError> {
        if let Some(i) = self.first_unexpected(&sel) {
            let u = self.remove_unexpected(i);
            self.stats.matched_unexpected += 1;
            return Ok(Some(TagMatched {
                id,
                envelope: u.envelope,
                data: u.data,
            }));
        }
        if self.posted.len() >= self.limits.max_posted {
            self.stats.posted_refused += 1;
            return Err(PostError::TooManyPosted(self.posted.len()));
        }
        self.posted.push_back(Posted { id, sel });
        Ok(None)
    }

    /// Hands over a message that arrived (in its source's send order). If a
    /// posted receive matches, the first in posting order takes it and is
    /// returned; otherwise the message is queued as unexpected.
    ///
    /// Errors: [`TagOverflow`] (the message given back, counted) when the
    /// unexpected queue is full.
    pub fn arrive(
        &mut self,
        envelope: TagEnvelope,
        data: D,
    ) -> Result<Option<TagMatched<R, D>>, Box<TagOverflow<D>>> {
        if let Some(i) = self.posted.iter().position(|p| p.sel.accepts(&envelope)) {
            let p = self.posted.remove(i).expect("index from position");
            self.stats.matched_posted += 1;
            return Ok(Some(TagMatched {
                id: p.id,
                envelope,
                data,
            }));
        }
        if !self.has_room(data.held_bytes()) {
            self.stats.overflows += 1;
            return Err(Box::new(TagOverflow {
                envelope,
                data,
                queued: self.unexpected_len(),
                queued_bytes: self.unexpected_bytes,
            }));
        }
        self.unexpected_bytes += data.held_bytes();
        self.unexpected.push_back(Unexpected { envelope, data });
        self.stats.queued_unexpected += 1;
        Ok(None)
    }

    /// True if a message of `len` bytes that matches no posted receive
    /// would fit the unexpected queue.
    pub fn has_room(&self, len: u64) -> bool {
        let n = self.unexpected_len();
        if n == 0 {
            return self.limits.max_unexpected_messages > 0;
        }
        n < self.limits.max_unexpected_messages
            && self.unexpected_bytes.saturating_add(len) <= self.limits.max_unexpected_bytes
    }

    /// True if [`TagMatcher::arrive`] would take a message of `len` bytes
    /// with `envelope` now (a posted receive matches it, or it fits the
    /// unexpected queue), without counting anything.
    pub fn takes(&self, envelope: &TagEnvelope, len: u64) -> bool {
        self.has_room(len) || self.posted.iter().any(|p| p.sel.accepts(envelope))
    }

    /// The envelope and size (bytes) of the first unexpected message `sel`
    /// would match, without taking it (`MPI_Iprobe`, section 3.8.1;
    /// `FI_PEEK`).
    pub fn peek(&self, sel: &Selector) -> Option<(TagEnvelope, usize)> {
        self.unexpected
            .iter()
            .find(|u| sel.accepts(&u.envelope))
            .map(|u| (u.envelope, u.data.msg_len()))
    }

    /// Takes the first unexpected message `sel` matches out of matching and
    /// keeps it under `key` (`MPI_Improbe`, section 3.8.2; `FI_PEEK |
    /// FI_CLAIM`); returns its envelope and size. `None` (nothing taken)
    /// when no message matches or `key` already holds one.
    pub fn claim(&mut self, sel: &Selector, key: u64) -> Option<(TagEnvelope, usize)> {
        if self.claimed.contains_key(&key) {
            return None;
        }
        let i = self.first_unexpected(sel)?;
        let u = self.unexpected.remove(i).expect("index from position");
        let r = (u.envelope, u.data.msg_len());
        self.claimed.insert(key, u);
        Some(r)
    }

    /// The message claimed under `key` (`MPI_Mrecv`; `FI_CLAIM`), if any.
    pub fn take_claimed(&mut self, key: u64) -> Option<(TagEnvelope, D)> {
        let u = self.claimed.remove(&key)?;
        self.unexpected_bytes -= u.data.held_bytes();
        self.stats.matched_unexpected += 1;
        Some((u.envelope, u.data))
    }

    /// Drops the message claimed under `key` (`FI_CLAIM | FI_DISCARD`);
    /// returns its envelope and payload.
    pub fn discard_claimed(&mut self, key: u64) -> Option<(TagEnvelope, D)> {
        let u = self.claimed.remove(&key)?;
        self.unexpected_bytes -= u.data.held_bytes();
        self.stats.discarded += 1;
        Some((u.envelope, u.data))
    }

    /// Drops the first unexpected message `sel` matches (`FI_PEEK |
    /// FI_DISCARD`); returns its envelope and payload.
    pub fn discard(&mut self, sel: &Selector) -> Option<(TagEnvelope, D)> {
        let i = self.first_unexpected(sel)?;
        let u = self.remove_unexpected(i);
        self.stats.discarded += 1;
        Some((u.envelope, u.data))
    }

    /// The selectors of the posted receives, in posting order.
    pub fn posted_selectors(&self) -> impl Iterator<Item = &Selector> + '_ {
        self.posted.iter().map(|p| &p.sel)
    }

    /// Removes posted receive `id`; false if it is not posted (already
    /// matched). `MPI_Cancel` of a receive (section 3.8.4), `fi_cancel(3)`.
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
    /// a failed peer: they can never complete). Receives from any source
    /// stay.
    pub fn cancel_source(&mut self, source: usize) -> Vec<R> {
        let mut gone = Vec::new();
        self.posted.retain(|p| {
            if p.sel.source == Some(source) {
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

    /// Number of unexpected messages (claimed ones included).
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len() + self.claimed.len()
    }

    /// Payload bytes in unexpected messages (claimed ones included).
    pub fn unexpected_bytes(&self) -> u64 {
        self.unexpected_bytes
    }

    /// Number of claimed messages.
    pub fn claimed_len(&self) -> usize {
        self.claimed.len()
    }

    /// Counters.
    pub fn stats(&self) -> MatchStats {
        self.stats
    }
}

#[cfg(test)]
#[path = "matching/tests.rs"]
mod tests;
