//! MPI's view of the matching engine: ranks, 32-bit tags, `MPI_ANY_SOURCE`
//! and `MPI_ANY_TAG` (MPI 4.0 sections 3.2.3-3.2.4), over [`TagMatcher`]
//! (a tag is the low 32 bits of the engine's tag; `MPI_ANY_TAG` ignores
//! every bit).

use super::{MatchLimits, MatchStats, PostError, Selector, TagEnvelope, TagMatched, TagMatcher};

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

    /// The engine's source: `None` for any.
    pub fn rank(self) -> Option<usize> {
        match self {
            SourceSel::Any => None,
            SourceSel::Rank(r) => Some(r),
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

/// The engine's selector for MPI's `(source, tag)`.
pub fn selector(source: SourceSel, tag: TagSel) -> Selector {
    match tag {
        TagSel::Any => Selector {
            source: source.rank(),
            tag: 0,
            ignore: u64::MAX,
        },
        TagSel::Tag(t) => Selector::exact(source.rank(), u64::from(t)),
    }
}

/// The envelope of a message as MPI matching sees it: source rank and tag
/// (the communicator is implicit: one [`Matcher`] per context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Sending rank.
    pub source: usize,
    /// Tag.
    pub tag: Tag,
}

impl From<Envelope> for TagEnvelope {
    fn from(e: Envelope) -> Self {
        TagEnvelope {
            source: e.source,
            tag: u64::from(e.tag),
            data: None,
        }
    }
}

impl Envelope {
    /// MPI's envelope of an engine envelope (the tag's low 32 bits).
    pub fn of(e: &TagEnvelope) -> Self {
        Envelope {
            source: e.source,
            tag: e.tag as Tag,
        }
    }
}

/// An arrival refused because the unexpected queue is full: the message,
/// given back (see [`super::TagOverflow`]).
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

impl<R> From<TagMatched<R>> for Matched<R> {
    fn from(m: TagMatched<R>) -> Self {
        Matched {
            id: m.id,
            envelope: Envelope::of(&m.envelope),
            data: m.data,
        }
    }
}

/// The matching engine of one context in MPI's terms. `R` identifies
/// posted receives (e.g. a request id). See the module documentation.
#[derive(Debug, Clone)]
pub struct Matcher<R> {
    inner: TagMatcher<R>,
}

impl<R: Clone + PartialEq> Matcher<R> {
    /// An empty engine with `limits`.
    pub fn new(limits: MatchLimits) -> Self {
        Self {
            inner: TagMatcher::new(limits),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> MatchLimits {
        self.inner.limits()
    }

    /// Posts receive `id` for `(source, tag)` ([`TagMatcher::post`]).
    ///
    /// Errors: [`PostError::TooManyPosted`].
    pub fn post(
        &mut self,
        id: R,
        source: SourceSel,
        tag: TagSel,
    ) -> Result<Option<Matched<R>>, PostError> {
        Ok(self
            .inner
            .post(id, selector(source, tag))?
            .map(Matched::from))
    }

    /// Hands over a message that arrived, in its source's send order
    /// ([`TagMatcher::arrive`]).
    ///
    /// Errors: [`Overflow`] (the message given back, counted).
    pub fn arrive(
        &mut self,
        envelope: Envelope,
        data: Vec<u8>,
    ) -> Result<Option<Matched<R>>, Box<Overflow>> {
        match self.inner.arrive(envelope.into(), data) {
            Ok(m) => Ok(m.map(Matched::from)),
            Err(o) => Err(Box::new(Overflow {
                envelope,
                data: o.data,
                queued: o.queued,
                queued_bytes: o.queued_bytes,
            })),
        }
    }

    /// True if a message of `len` bytes matching no posted receive fits.
    pub fn has_room(&self, len: u64) -> bool {
        self.inner.has_room(len)
    }

    /// True if [`Matcher::arrive`] would take the message now.
    pub fn takes(&self, envelope: Envelope, len: u64) -> bool {
        self.inner.takes(&envelope.into(), len)
    }

    /// The envelope and size (bytes) of the first unexpected message
    /// `(source, tag)` would match, without taking it (`MPI_Iprobe`,
    /// section 3.8.1).
    pub fn probe(&self, source: SourceSel, tag: TagSel) -> Option<(Envelope, usize)> {
        self.inner
            .peek(&selector(source, tag))
            .map(|(e, len)| (Envelope::of(&e), len))
    }

    /// The source selectors of the posted receives, in posting order.
    pub fn posted_sources(&self) -> impl Iterator<Item = SourceSel> + '_ {
        self.inner
            .posted_selectors()
            .map(|s| s.source.map_or(SourceSel::Any, SourceSel::Rank))
    }

    /// Removes posted receive `id`; false if it is not posted
    /// (`MPI_Cancel`, section 3.8.4).
    pub fn cancel(&mut self, id: &R) -> bool {
        self.inner.cancel(id)
    }

    /// Removes and returns the posted receives naming `source` exactly.
    pub fn cancel_source(&mut self, source: usize) -> Vec<R> {
        self.inner.cancel_source(source)
    }

    /// Number of posted receives.
    pub fn posted_len(&self) -> usize {
        self.inner.posted_len()
    }

    /// Number of unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.inner.unexpected_len()
    }

    /// Payload bytes in unexpected messages.
    pub fn unexpected_bytes(&self) -> u64 {
        self.inner.unexpected_bytes()
    }

    /// Counters.
    pub fn stats(&self) -> MatchStats {
        self.inner.stats()
    }
}
