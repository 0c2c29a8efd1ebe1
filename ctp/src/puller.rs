//! The pulls storage (beyond the spec; PROTOCOL.md "Pulled messages"): the
//! receiver's side of receiver-driven transfers. A pull fetches an offered
//! body into the buffer its owner gave, in parts of a fixed size, by
//! requests naming ranges of parts; each part is copied once, from the
//! received frame straight into its place in the buffer. Which parts
//! arrived is a bitmap, so a part arriving twice is placed once.
//!
//! The storage keeps, per pull, the requests not yet answered in full (in
//! send order) and which of their parts are missing; the endpoint
//! (`endpoint/pull.rs`) decides when to ask, and when to ask again.

use std::collections::VecDeque;
use std::time::Instant;

use netcore::timer::TimerQueue;
use rustc_hash::FxHashMap;
use slotmap::{Key, KeyData, SlotMap};

use crate::buf::RecvBuf;
use crate::endpoint::Pulled;
pub use crate::id::PullId;

/// Most `(first, count)` ranges in one request (its body is 8 + 8 x this
/// bytes: it fits any frame).
pub const MAX_RANGES: usize = 32;

slotmap::new_key_type! {
    struct PullKey;
}

/// A request for parts, as sent.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    /// Its sequence number (per endpoint; the parts answering it echo it).
    pub seq: u32,
    /// When it was queued for sending.
    pub sent: Instant,
    /// It asks again for parts asked before.
    pub retry: bool,
    /// `(first part, count)` ranges, at most [`MAX_RANGES`].
    pub ranges: Vec<(u32, u32)>,
    /// A part answering it arrived (its round trip was sampled).
    pub answered: bool,
    /// A part answering a later request arrived while parts of this one
    /// were missing: they are presumed lost from then on.
    pub lost_at: Option<Instant>,
}

/// One pull. See the module documentation.
pub(crate) struct Pull<P> {
    pub from: P,
    pub handle: u32,
    pub command: u16,
    /// The body's size at the sender, bytes.
    pub size: u64,
    /// Bytes wanted: the front of the body (at most the buffer's length).
    pub len: u64,
    /// Part size, bytes.
    pub part: u32,
    /// Parts covering `len`.
    pub parts: u32,
    got: Vec<u64>,
    /// Parts not yet received.
    pub missing: u32,
    /// First part never requested.
    pub next: u32,
    /// Parts requested (once or more) and not yet received: the pull's
    /// share of the window is `pending x part`.
    pub pending: u32,
    /// Requests with parts not yet received, in send order.
    pub reqs: VecDeque<Req>,
    pub sink: Box<dyn RecvBuf>,
    /// The last new part arrived (or the pull began).
    pub last_progress: Instant,
    /// The last request was queued.
    pub last_request: Instant,
    /// Timeouts in a row without a new part (the backoff's exponent).
    pub timeouts: u32,
    /// The sequence number the last arrived part echoed.
    pub last_echo: Option<u32>,
    /// Time of this pull's live entry in the timer queue.
    pub queued_at: Option<Instant>,
}

impl<P> Pull<P> {
    /// A pull of the first `len` bytes of a body of `size` bytes in parts
    /// of `part` bytes into `sink`.
    ///
    /// Errors: `sink` back if the part count exceeds 2^32 - 1 or the
    /// bitmap cannot be allocated.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        from: P,
        handle: u32,
        command: u16,
        size: u64,
        len: u64,
        part: u32,
        sink: Box<dyn RecvBuf>,
        now: Instant,
    ) -> Result<Self, Box<dyn RecvBuf>> {
        let part = part.max(1);
        let Ok(parts) = u32::try_from(len.div_ceil(u64::from(part))) else {
            return Err(sink);
        };
        let mut got = Vec::new();
        if got
            .try_reserve_exact((parts as usize).div_ceil(64))
            .is_err()
        {
            return Err(sink);
        }
        got.resize((parts as usize).div_ceil(64), 0);
        Ok(Self {
            from,
            handle,
            command,
            size,
            len,
            part,
            parts,
            got,
            missing: parts,
            next: 0,
            pending: 0,
            reqs: VecDeque::new(),
            sink,
            last_progress: now,
            last_request: now,
            timeouts: 0,
            last_echo: None,
            queued_at: None,
        })
    }

    /// True if part `i` arrived.
    pub fn has(&self, i: u32) -> bool {
        self.got
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn set(&mut self, i: u32) {
        self.got[(i / 64) as usize] |= 1 << (i % 64);
    }

    /// The length the sender's part `i` has: the part size, or what is
    /// left of the body for its last part.
    pub fn part_len(&self, i: u32) -> u64 {
        let start = u64::from(i) * u64::from(self.part);
        u64::from(self.part).min(self.size.saturating_sub(start))
    }

    /// Places part `i` (checked: `i < parts`, `body` of `part_len(i)`
    /// bytes, not yet here): the bytes of it within `len` into the buffer.
    pub fn place(&mut self, i: u32, body: &[u8]) {
        let start = u64::from(i) * u64::from(self.part);
        let end = (start + body.len() as u64).min(self.len);
        let (s, e) = (start as usize, end as usize);
        self.sink.place(s, &body[..e - s]);
        self.set(i);
        self.missing -= 1;
        self.pending = self.pending.saturating_sub(1);
    }

    /// True if every part of `q` arrived.
    pub fn answered_in_full(&self, q: &Req) -> bool {
        q.ranges
            .iter()
            .all(|&(first, count)| (first..first + count).all(|i| self.has(i)))
    }

    /// The parts of `ranges` still missing, as ranges, appended to `out`.
    pub fn missing_of(&self, ranges: &[(u32, u32)], out: &mut Vec<(u32, u32)>) {
        for &(first, count) in ranges {
            let mut run: Option<(u32, u32)> = None;
            for i in first..first + count {
                if self.has(i) {
                    if let Some(r) = run.take() {
                        out.push(r);
                    }
                } else {
                    match run.as_mut() {
                        Some(r) => r.1 += 1,
                        None => run = Some((i, 1)),
                    }
                }
            }
            out.extend(run);
        }
    }

    /// Removes from the front the requests answered in full.
    pub fn drop_answered(&mut self) {
        while let Some(q) = self.reqs.front() {
            if !self.answered_in_full(q) {
                break;
            }
            self.reqs.pop_front();
        }
    }
}

/// The pulls of an endpoint. See the module documentation.
pub(crate) struct Pulls<P> {
    slots: SlotMap<PullKey, Pull<P>>,
    index: FxHashMap<(P, u32), PullId>,
    /// Pulls with parts never requested, in the order they began (the
    /// window serves them first come, first served).
    pub order: VecDeque<PullId>,
    /// One live entry per pull with requests outstanding.
    pub timers: TimerQueue<PullId>,
    /// Ended pulls for the owner ([`Endpoint::poll_pulled`](crate::Endpoint::poll_pulled)).
    pub ended: VecDeque<Pulled<P>>,
    /// Bytes requested and not yet received, over all pulls (the window).
    pub in_flight: u64,
    /// The next request's sequence number.
    pub next_seq: u32,
}

impl<P> std::fmt::Debug for Pulls<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pulls")
            .field("pulls", &self.slots.len())
            .field("in_flight", &self.in_flight)
            .field("ended", &self.ended.len())
            .finish_non_exhaustive()
    }
}

impl<P> Default for Pulls<P> {
    fn default() -> Self {
        Self {
            slots: SlotMap::with_key(),
            index: FxHashMap::default(),
            order: VecDeque::new(),
            timers: TimerQueue::new(),
            ended: VecDeque::new(),
            in_flight: 0,
            next_seq: 0,
        }
    }
}

impl<P: Copy + Eq + std::hash::Hash> Pulls<P> {
    fn key(id: PullId) -> PullKey {
        KeyData::from_ffi(id).into()
    }

    /// Pulls in progress.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The pull of offer `handle` from `from`, if any.
    pub fn find(&self, from: P, handle: u32) -> Option<PullId> {
        self.index.get(&(from, handle)).copied()
    }

    /// Stores `p`; returns its id.
    pub fn insert(&mut self, p: Pull<P>) -> PullId {
        let k = (p.from, p.handle);
        let id = self.slots.insert(p).data().as_ffi();
        self.index.insert(k, id);
        id
    }

    pub fn get(&self, id: PullId) -> Option<&Pull<P>> {
        self.slots.get(Self::key(id))
    }

    pub fn get_mut(&mut self, id: PullId) -> Option<&mut Pull<P>> {
        self.slots.get_mut(Self::key(id))
    }

    /// Removes pull `id`, releasing its share of the window.
    pub fn remove(&mut self, id: PullId) -> Option<Pull<P>> {
        let p = self.slots.remove(Self::key(id))?;
        self.index.remove(&(p.from, p.handle));
        self.in_flight = self
            .in_flight
            .saturating_sub(u64::from(p.pending) * u64::from(p.part));
        Some(p)
    }

    /// A fresh request sequence number.
    pub fn take_seq(&mut self) -> u32 {
        let s = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        s
    }

    /// Makes the timer queue surface pull `id` at `at`: pushes an entry
    /// unless its live one comes no later.
    pub fn arm(&mut self, id: PullId, at: Instant) {
        let Some(p) = self.slots.get_mut(Self::key(id)) else {
            return;
        };
        if p.queued_at.is_none_or(|t| at < t) {
            p.queued_at = Some(at);
            self.timers.push(at, id);
        }
    }

    /// The earliest live timer entry (stale ones in front are dropped).
    pub fn next_deadline(&mut self) -> Option<Instant> {
        let slots = &self.slots;
        self.timers.peek_live(|at, id| {
            slots
                .get(Self::key(id))
                .is_some_and(|p| p.queued_at == Some(at))
        })
    }

    /// Whether a timer entry of `id` at `at` is its live one.
    pub fn timer_live(&self, id: PullId, at: Instant) -> bool {
        self.get(id).is_some_and(|p| p.queued_at == Some(at))
    }
}
