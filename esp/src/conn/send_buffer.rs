//! The send side's data and window: the bytes accepted by `send` until
//! they are acknowledged (quinn's `send_buffer.rs`), and the peer's
//! receive window (RFC 793 sec. 3.7 SND.WND, SND.WL1, SND.WL2).

use std::collections::VecDeque;

use crate::wire::Seq;

/// Bytes of the stream from the oldest unacknowledged one: first the
/// payload of the segments in flight, then the bytes not yet segmented.
/// Offsets are absolute stream offsets (bytes since the start).
#[derive(Debug, Default)]
pub(crate) struct SendBuffer {
    buf: VecDeque<u8>,
    /// Stream offset of `buf[0]`.
    base: u64,
    /// Stream offset of the first byte not yet in a segment.
    next_off: u64,
    /// `close()` was called: a FIN follows the last byte.
    pub(crate) fin_requested: bool,
    /// The FIN was put in the retransmission queue.
    pub(crate) fin_sent: bool,
}

impl SendBuffer {
    /// Bytes held (in flight and unsent).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes not yet put in a segment.
    #[inline]
    pub(crate) fn unsent(&self) -> usize {
        (self.base + self.buf.len() as u64).saturating_sub(self.next_off) as usize
    }

    /// Stream offset of the first byte not yet in a segment.
    #[inline]
    pub(crate) fn next_off(&self) -> u64 {
        self.next_off
    }

    /// Stream offset of the oldest byte held.
    #[inline]
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Appends `data`.
    #[inline]
    pub(crate) fn write(&mut self, data: &[u8]) {
        self.buf.extend(data);
    }

    /// Puts the next `len` unsent bytes in a segment; returns their stream
    /// offset.
    #[inline]
    pub(crate) fn take(&mut self, len: usize) -> u64 {
        let off = self.next_off;
        self.next_off += len as u64;
        off
    }

    /// The oldest `bytes` bytes were acknowledged: drops them.
    #[inline]
    pub(crate) fn acked(&mut self, bytes: usize) {
        if bytes > 0 {
            self.buf.drain(..bytes);
            self.base += bytes as u64;
        }
    }

    /// Drops every byte (abort).
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
    }

    /// `len` bytes from stream offset `off`, as one or two slices (the
    /// buffer is a ring). Panics if the range is not held.
    #[inline]
    pub(crate) fn payload(&self, off: u64, len: usize) -> (&[u8], &[u8]) {
        if len == 0 {
            return (&[], &[]);
        }
        let from = (off - self.base) as usize;
        let (a, b) = self.buf.as_slices();
        if from + len <= a.len() {
            (&a[from..from + len], &[])
        } else if from >= a.len() {
            let f = from - a.len();
            (&b[f..f + len], &[])
        } else {
            (&a[from..], &b[..len - (a.len() - from)])
        }
    }
}

/// The peer's receive window as the sender tracks it (RFC 793 sec. 3.7,
/// in segments).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendWindow {
    /// Right edge of the usable window (SND.UNA + SND.WND at the best
    /// update): segments below it may be sent. Never moves left.
    pub(crate) edge: Seq,
    /// SND.WND: the last window the peer advertised, segments.
    pub(crate) wnd: u32,
    /// SND.WL1: sequence number of the segment of the last window update.
    pub(crate) wl1: Seq,
    /// SND.WL2: acknowledgement number of the last window update.
    pub(crate) wl2: Seq,
}

/// What a window update did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowUpdate {
    /// The segment was taken as a window update (RFC 793 rule).
    pub(crate) taken: bool,
    /// The window or its acknowledgement changed (such an ACK is no
    /// duplicate ACK, RFC 5681 sec. 2).
    pub(crate) changed: bool,
    /// The right edge moved right.
    pub(crate) edge_advanced: bool,
}

impl SendWindow {
    /// Applies the window of a segment (`seq`, `ack`, `window`) if it is
    /// newer than the last update (RFC 793: SND.WL1 < SEG.SEQ, or equal and
    /// SND.WL2 =< SEG.ACK). The usable edge never moves left of what was
    /// granted.
    #[inline]
    pub(crate) fn update(&mut self, seq: Seq, ack: Seq, window: u16) -> WindowUpdate {
        let mut u = WindowUpdate::default();
        if self.wl1.diff(seq) < 0 || (self.wl1 == seq && self.wl2.diff(ack) <= 0) {
            let w = u32::from(window);
            u.taken = true;
            u.changed = w != self.wnd || ack != self.wl2;
            let right = ack.add(w);
            if right.diff(self.edge) > 0 {
                self.edge = right;
                u.edge_advanced = true;
            }
            self.wnd = w;
            self.wl1 = seq;
            self.wl2 = ack;
        }
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_spans_the_ring_halves() {
        let mut s = SendBuffer::default();
        s.write(&[1, 2, 3, 4, 5, 6]);
        assert_eq!(s.take(4), 0);
        assert_eq!(s.unsent(), 2);
        s.acked(3);
        s.write(&[7, 8, 9]);
        let (a, b) = s.payload(3, 5);
        let mut got = a.to_vec();
        got.extend_from_slice(b);
        assert_eq!(got, vec![4, 5, 6, 7, 8]);
        assert_eq!(s.payload(8, 0), (&[][..], &[][..]));
        assert_eq!((s.base(), s.next_off(), s.len()), (3, 4, 6));
        s.clear();
        assert_eq!(s.unsent(), 0, "never negative after an abort");
    }

    #[test]
    fn window_updates_follow_rfc793_and_the_edge_never_moves_left() {
        let mut w = SendWindow {
            edge: Seq(11),
            wnd: 1,
            wl1: Seq(0),
            wl2: Seq(10),
        };
        let u = w.update(Seq(5), Seq(10), 8);
        assert!(u.taken && u.changed && u.edge_advanced);
        assert_eq!(w.edge, Seq(18));
        // An older segment is no update.
        assert!(!w.update(Seq(4), Seq(12), 100).taken);
        // A shrunk window keeps the edge.
        let u = w.update(Seq(6), Seq(12), 2);
        assert!(u.taken && u.changed && !u.edge_advanced);
        assert_eq!((w.edge, w.wnd), (Seq(18), 2));
        // Same seq, same ack, same window: taken, unchanged.
        let u = w.update(Seq(6), Seq(12), 2);
        assert!(u.taken && !u.changed);
    }
}
