//! Completion queues (fi_cq(3)): a bounded queue of successful and failed
//! completions, and the endpoints a read drives (manual progress: reading
//! a CQ gives each endpoint bound to it one turn first).
//!
//! fi_cq(3)'s rules kept here: a read returns successful entries in order
//! up to the first error entry; when an error entry is at the head, the
//! read answers FI_EAVAIL ([`Read::ErrorAvailable`]) and `fi_cq_readerr`
//! takes it. Endpoints check [`Cq::has_room`] before starting an operation
//! that will complete here (FI_RM_ENABLED: the provider never overruns a
//! CQ; the caller gets FI_EAGAIN instead).

use std::collections::VecDeque;
use std::sync::{Mutex, RwLock, Weak};

use crate::error::ProvErrno;
use crate::limits::{RX_SIZE, TX_SIZE};

/// Completions a CQ holds at least, whatever size the application asks
/// (Open MPI asks 100): sends and posted receives of one endpoint fit.
pub const MIN_CQ_ENTRIES: usize = TX_SIZE + RX_SIZE;

/// Most completions a CQ holds.
pub const MAX_CQ_ENTRIES: usize = 1 << 16;

/// A successful completion (the fields of `struct fi_cq_tagged_entry`,
/// plus the source address `fi_cq_readfrom` reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completion {
    /// The operation's context pointer, as an integer.
    pub context: u64,
    /// FI_SEND / FI_RECV / FI_MSG / FI_TAGGED / FI_REMOTE_CQ_DATA ...
    pub flags: u64,
    /// Bytes received (receives), or 0.
    pub len: usize,
    /// Start of the receive buffer (receives), as an integer, or 0.
    pub buf: u64,
    /// Remote CQ data (with FI_REMOTE_CQ_DATA).
    pub data: u64,
    /// The message's tag (tagged receives).
    pub tag: u64,
    /// The sender's `fi_addr_t`, or FI_ADDR_NOTAVAIL.
    pub src: u64,
}

/// A failed completion (`struct fi_cq_err_entry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrCompletion {
    /// The completion fields that apply.
    pub base: Completion,
    /// Positive FI_E* code: FI_ETRUNC, FI_ECANCELED, FI_ENOMSG, FI_EIO ...
    pub err: u32,
    /// Bytes that did not fit the buffer (FI_ETRUNC).
    pub olen: usize,
    /// Provider error number.
    pub prov: ProvErrno,
    /// What happened, for `fi_cq_strerror` and the log.
    pub msg: String,
    /// The bytes the entry carries in `err_data` (fi_cq(3)): the sender's
    /// name for FI_EADDRNOTAVAIL (FI_SOURCE_ERR), empty for every other
    /// error (libfabric's own providers carry none either).
    pub data: Vec<u8>,
}

/// One queue entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Success.
    Ok(Completion),
    /// Failure.
    Err(ErrCompletion),
}

/// An endpoint a CQ read drives.
pub trait CqSource: Send + Sync {
    /// One nonblocking turn: move what arrived into completions.
    fn progress(&self);

    /// Waits up to `timeout` until the endpoint has a completion to move
    /// (fi_cq_sread); false when it cannot wait (the caller then yields
    /// and polls).
    fn wait(&self, timeout: std::time::Duration) -> bool {
        let _ = timeout;
        false
    }
}

/// The outcome of [`Cq::read`].
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// This many entries were appended to the output.
    Entries(usize),
    /// An error entry is at the head (FI_EAVAIL).
    ErrorAvailable,
    /// Nothing (FI_EAGAIN).
    Empty,
}

/// A completion queue. See the module documentation.
pub struct Cq {
    capacity: usize,
    queue: Mutex<VecDeque<Entry>>,
    /// Read on every fi_cq_read (each source gets its turn under the read
    /// lock, no copy of the list); written when an endpoint binds.
    sources: RwLock<Vec<Weak<dyn CqSource>>>,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Cq {
    /// A queue for `size` entries (raised to [`MIN_CQ_ENTRIES`], capped at
    /// [`MAX_CQ_ENTRIES`]).
    pub fn new(size: usize) -> Cq {
        let capacity = size.clamp(MIN_CQ_ENTRIES, MAX_CQ_ENTRIES);
        Cq {
            capacity,
            queue: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
            sources: RwLock::new(Vec::new()),
        }
    }

    /// Entries it holds at most.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `n` more entries fit.
    pub fn has_room(&self, n: usize) -> bool {
        self.lock().len() + n <= self.capacity
    }

    /// How many more entries fit.
    pub fn room(&self) -> usize {
        self.capacity - self.lock().len()
    }

    /// Appends `e`; gives it back when the queue is full.
    pub fn push(&self, e: Entry) -> Result<(), Entry> {
        let mut q = self.lock();
        if q.len() >= self.capacity {
            return Err(e);
        }
        q.push_back(e);
        Ok(())
    }

    /// Adds an endpoint that reads drive.
    pub fn add_source(&self, s: Weak<dyn CqSource>) {
        let mut v = self.sources.write().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(s);
    }

    /// Waits up to `timeout` for a completion of the one endpoint bound to
    /// this CQ, by that endpoint's wait (fi_cq_sread); false when not
    /// exactly one endpoint that can wait is bound.
    pub fn wait_source(&self, timeout: std::time::Duration) -> bool {
        let one = {
            let v = self.sources.read().unwrap_or_else(|p| p.into_inner());
            let mut live = v.iter().filter_map(Weak::upgrade);
            match (live.next(), live.next()) {
                (Some(one), None) => Some(one),
                _ => None,
            }
        };
        // Waits outside the lock: a bind meanwhile is not held up.
        one.is_some_and(|s| s.wait(timeout))
    }

    /// Gives every bound endpoint one turn (what every fi_cq_read does:
    /// no allocation, one shared lock).
    pub fn progress(&self) {
        let v = self.sources.read().unwrap_or_else(|p| p.into_inner());
        for s in v.iter().filter_map(Weak::upgrade) {
            s.progress();
        }
    }

    /// Takes up to `max` successful entries from the head, handing each to
    /// `out` with its position.
    pub fn read(&self, max: usize, mut out: impl FnMut(usize, &Completion)) -> Read {
        let mut q = self.lock();
        match q.front() {
            None => return Read::Empty,
            Some(Entry::Err(_)) => return Read::ErrorAvailable,
            Some(Entry::Ok(_)) => {}
        }
        let mut n = 0;
        while n < max {
            match q.front() {
                Some(Entry::Ok(c)) => {
                    out(n, c);
                    q.pop_front();
                    n += 1;
                }
                _ => break,
            }
        }
        Read::Entries(n)
    }

    /// Takes the error entry at the head, if the head is one.
    pub fn read_err(&self) -> Option<ErrCompletion> {
        let mut q = self.lock();
        match q.front() {
            Some(Entry::Err(_)) => match q.pop_front() {
                Some(Entry::Err(e)) => Some(e),
                _ => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(c: u64) -> Entry {
        Entry::Ok(Completion {
            context: c,
            ..Completion::default()
        })
    }

    fn err(c: u64) -> Entry {
        Entry::Err(ErrCompletion {
            base: Completion {
                context: c,
                ..Completion::default()
            },
            err: crate::fi::FI_ETRUNC,
            olen: 5,
            prov: ProvErrno::Truncated,
            msg: "truncated".into(),
            data: Vec::new(),
        })
    }

    #[test]
    fn reads_stop_at_an_error_which_readerr_takes() {
        let cq = Cq::new(0);
        for e in [ok(1), ok(2), err(3), ok(4)] {
            cq.push(e).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(cq.read(10, |_, c| out.push(*c)), Read::Entries(2));
        assert_eq!(out.iter().map(|c| c.context).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(cq.read(10, |_, c| out.push(*c)), Read::ErrorAvailable);
        assert_eq!(cq.read_err().unwrap().base.context, 3);
        assert!(cq.read_err().is_none());
        assert_eq!(
            cq.read(1, |i, c| assert_eq!((i, c.context), (0, 4))),
            Read::Entries(1)
        );
        assert_eq!(cq.read(1, |_, _| {}), Read::Empty);
    }

    #[test]
    fn the_queue_is_bounded() {
        let cq = Cq::new(0);
        assert_eq!(cq.capacity(), MIN_CQ_ENTRIES);
        for i in 0..cq.capacity() {
            cq.push(ok(i as u64)).unwrap();
        }
        assert!(!cq.has_room(1));
        assert!(cq.push(ok(0)).is_err());
        assert_eq!(Cq::new(usize::MAX).capacity(), MAX_CQ_ENTRIES);
    }
}
