//! The transmit batch: frames queued by sockets, sent with one
//! sendmmsg(2) (or sendmsg for a single frame), each frame a header written
//! into the batch's own buffer followed, optionally, by payload gathered
//! from the socket's buffer.

use std::io::{self, IoSlice};

use crate::slot::{GatherRef, SlotId};
use link::is_outage;

/// Frames per batch: one sendmmsg(2) call (`UIO_MAXIOV` allows 1024; 64
/// keeps the batch arrays in cache and bounds a single caller's latency).
pub const MAX_BATCH: usize = 64;

/// A queued frame.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TxFrame {
    /// Bytes written to the frame's slot of the buffer.
    pub head: usize,
    /// The slot that queued it and the payload it references.
    pub gather: Option<(SlotId, GatherRef)>,
    /// The slot that queued it (for send-failure accounting).
    pub owner: Option<SlotId>,
}

/// Up to [`MAX_BATCH`] frames waiting to be sent. See the module docs.
pub struct TxQueue {
    buf: Vec<u8>,
    slot_len: usize,
    pub(crate) frames: Vec<TxFrame>,
    owner: Option<SlotId>,
    limit: usize,
}

impl std::fmt::Debug for TxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxQueue")
            .field("queued", &self.frames.len())
            .field("slot_len", &self.slot_len)
            .finish()
    }
}

impl TxQueue {
    /// A queue whose frames are at most `max_frame` bytes (link MTU + 14).
    pub fn new(max_frame: usize) -> Self {
        Self {
            buf: vec![0; max_frame * MAX_BATCH],
            slot_len: max_frame,
            frames: Vec::with_capacity(MAX_BATCH),
            owner: None,
            limit: MAX_BATCH,
        }
    }

    /// Largest frame, bytes.
    #[inline]
    pub fn max_frame(&self) -> usize {
        self.slot_len
    }

    /// Whether no further frame fits in this batch (or in the share of it
    /// the current socket may fill).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.frames.len() >= self.limit
    }

    /// Frames queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The buffer of the next frame ([`TxQueue::max_frame`] bytes); write
    /// the frame (or its headers) there and call [`TxQueue::commit`].
    /// Panics when the queue is full (check [`TxQueue::is_full`]).
    #[inline]
    pub fn next_buf(&mut self) -> &mut [u8] {
        assert!(
            self.frames.len() < MAX_BATCH,
            "TxQueue: next_buf on a full batch"
        );
        let at = self.frames.len() * self.slot_len;
        &mut self.buf[at..at + self.slot_len]
    }

    /// Queues the frame written to [`TxQueue::next_buf`]: its first `head`
    /// bytes, followed on the wire by the payload `gather` refers to (see
    /// [`GatherRef`]), which must fit in the frame.
    #[inline]
    pub fn commit(&mut self, head: usize, gather: Option<GatherRef>) {
        debug_assert!(head + gather.map_or(0, |g| g.len) <= self.slot_len);
        let owner = self.owner;
        self.frames.push(TxFrame {
            head,
            gather: gather.and_then(|g| owner.map(|o| (o, g))),
            owner,
        });
    }

    /// Sets the slot whose frames follow (the runtime calls it before each
    /// socket's `poll_transmit`).
    #[inline]
    pub(crate) fn set_owner(&mut self, owner: Option<SlotId>) {
        self.owner = owner;
    }

    /// Lets the current socket add at most `share` more frames.
    #[inline]
    pub(crate) fn set_limit(&mut self, share: usize) {
        self.limit = (self.frames.len() + share).min(MAX_BATCH);
    }

    /// The header bytes of frame `i`.
    #[inline]
    pub(crate) fn head(&self, i: usize) -> &[u8] {
        let at = i * self.slot_len;
        &self.buf[at..at + self.frames[i].head]
    }

    /// Forgets every queued frame.
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
    }
}

/// Send errors after which a frame is dropped and recovered by the
/// protocol (retransmission) or reported as a send error to a datagram
/// caller: a full queue, EINTR, ENOBUFS, an oversized frame.
pub(crate) fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::InvalidInput
    ) || e.raw_os_error() == Some(nix::libc::ENOBUFS)
}

/// Why [`send_frames`] did not send a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// A transient error ([`is_transient`]): this frame only.
    Transient,
    /// A link outage (`link::is_outage`): this frame and
    /// every later one of the batch.
    Outage,
}

/// Builds the iovec arrays of `n` frames and hands them to `send` (the
/// link's `send_batch_vectored`), retrying after partial sends. `payload`
/// resolves frame `i`'s gathered payload, `tail` its authentication
/// padding and trailer ([`crate::auth`]; empty when off). Returns the
/// frames sent; `lost` is called for each frame not sent and why
/// ([`Lost`]: the caller reports them to their owners). A link outage
/// ends the batch without an error: the rest of it is lost.
///
/// Errors: fatal link errors (neither transient nor an outage).
pub(crate) fn send_frames<'p>(
    n: usize,
    head: impl Fn(usize) -> &'p [u8],
    payload: impl Fn(usize) -> (&'p [u8], &'p [u8]),
    tail: impl Fn(usize) -> (&'p [u8], &'p [u8]),
    mut send: impl FnMut(&[&[IoSlice<'_>]]) -> io::Result<usize>,
    mut lost: impl FnMut(usize, Lost),
) -> io::Result<usize> {
    if n == 0 {
        return Ok(0);
    }
    // A frame's non-empty pieces, head first: a frame without payload or
    // trailer stays one or two iovecs (one frame of at most four goes out
    // by sendmsg(2) rather than sendmmsg(2): see PacketLink).
    let piece = |i: usize| {
        let (a, b) = payload(i);
        let (pad, trailer) = tail(i);
        let mut v = [IoSlice::new(head(i)); 5];
        let mut k = 1;
        for p in [a, b, pad, trailer] {
            if !p.is_empty() {
                v[k] = IoSlice::new(p);
                k += 1;
            }
        }
        (v, k)
    };
    if n == 1 {
        let (p, k) = piece(0);
        return match send(&[&p[..k]]) {
            Ok(0) => {
                lost(0, Lost::Transient);
                Ok(0)
            }
            Ok(_) => Ok(1),
            Err(e) if is_transient(&e) => {
                lost(0, Lost::Transient);
                Ok(0)
            }
            Err(e) if is_outage(&e) => {
                lost(0, Lost::Outage);
                Ok(0)
            }
            Err(e) => Err(e),
        };
    }
    let mut iov: [[IoSlice<'_>; 5]; MAX_BATCH] = [[IoSlice::new(&[]); 5]; MAX_BATCH];
    let mut lens = [0usize; MAX_BATCH];
    for i in 0..n {
        (iov[i], lens[i]) = piece(i);
    }
    let frames: [&[IoSlice<'_>]; MAX_BATCH] = std::array::from_fn(|i| &iov[i][..lens[i]]);
    let mut done = 0;
    let mut sent = 0;
    while done < n {
        match send(&frames[done..n]) {
            Ok(0) => {
                // Nothing accepted: the rest is lost locally.
                for i in done..n {
                    lost(i, Lost::Transient);
                }
                done = n;
            }
            Ok(m) => {
                done += m;
                sent += m;
            }
            Err(e) if is_transient(&e) => {
                lost(done, Lost::Transient);
                done += 1;
            }
            Err(e) if is_outage(&e) => {
                // Every later frame would fail the same way.
                for i in done..n {
                    lost(i, Lost::Outage);
                }
                done = n;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_tracks_heads_and_gather_refs() {
        let mut q = TxQueue::new(100);
        q.set_owner(Some(SlotId::FIRST));
        q.next_buf()[..3].copy_from_slice(b"abc");
        q.commit(
            3,
            Some(GatherRef {
                tag: 1,
                offset: 10,
                len: 5,
            }),
        );
        q.next_buf()[..2].copy_from_slice(b"xy");
        q.commit(2, None);
        assert_eq!(q.len(), 2);
        assert_eq!(q.head(0), b"abc");
        assert_eq!(q.head(1), b"xy");
        assert_eq!(q.frames[0].gather.unwrap().1.offset, 10);
        assert!(q.frames[1].gather.is_none());
        q.clear();
        assert!(q.is_empty());
    }

    #[test]
    fn send_frames_retries_partial_batches_and_reports_losses() {
        let heads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 4]).collect();
        let mut calls = Vec::new();
        let mut lost = Vec::new();
        let sent = send_frames(
            5,
            |i| &heads[i][..],
            |_| (&b"pp"[..], &[][..]),
            |_| (&[][..], &[][..]),
            |fs| {
                calls.push(fs.len());
                match calls.len() {
                    1 => Ok(2),
                    2 => Err(io::ErrorKind::WouldBlock.into()),
                    _ => Ok(fs.len()),
                }
            },
            |i, why| lost.push((i, why)),
        )
        .unwrap();
        assert_eq!(calls, vec![5, 3, 2]);
        assert_eq!(lost, vec![(2, Lost::Transient)]);
        assert_eq!(sent, 4);
    }

    #[test]
    fn an_outage_loses_the_rest_of_the_batch_without_an_error() {
        let heads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 4]).collect();
        let mut calls = 0;
        let mut lost = Vec::new();
        let sent = send_frames(
            5,
            |i| &heads[i][..],
            |_| (&[][..], &[][..]),
            |_| (&[][..], &[][..]),
            |_| {
                calls += 1;
                match calls {
                    1 => Ok(2),
                    _ => Err(io::Error::from_raw_os_error(nix::libc::ENETDOWN)),
                }
            },
            |i, why| lost.push((i, why)),
        )
        .unwrap();
        assert_eq!(calls, 2, "no call per frame once the link is down");
        assert_eq!(sent, 2);
        assert_eq!(
            lost,
            vec![(2, Lost::Outage), (3, Lost::Outage), (4, Lost::Outage)]
        );
        // A broken socket is still an error.
        let r = send_frames(
            1,
            |i| &heads[i][..],
            |_| (&[][..], &[][..]),
            |_| (&[][..], &[][..]),
            |_| Err(io::Error::from_raw_os_error(nix::libc::EBADF)),
            |_, _| {},
        );
        assert!(r.is_err());
    }
}
