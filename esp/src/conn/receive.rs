//! The receive side: in-order bytes waiting for the reader, the
//! reassembly queue of segments received ahead of a gap
//! ([`netcore::assembler::Assembler`]), the advertised window and the
//! acknowledgement state.
//!
//! - In-order segments go to the receive buffer (or straight into a
//!   waiting reader's buffer, [`Connection::handle_segment_into`]); a
//!   segment filling a gap releases the queued ones behind it.
//! - ACKs: every `delayed_ack_segments` in-order segments or after
//!   `delayed_ack_time`; at once for out-of-order segments and gap fills
//!   (RFC 5681 sec. 4.2). SACK blocks in RFC 2018 order, a DSACK first
//!   (RFC 2883).
//! - Window: `free receive buffer / MSS` segments beyond RCV.NXT, never
//!   less than promised (the right edge never moves left); an update is
//!   sent when it opens from (nearly) closed or by a quarter of the buffer
//!   (receiver-side silly window avoidance, RFC 1122 sec. 4.2.3.3).
//! - The stream ends at the peer's FIN: nothing at or after it is stored
//!   or delivered (RFC 9293 sec. 3.10.7.4).

use std::collections::VecDeque;
use std::time::Instant;

use netcore::assembler::{Assembler, EndInsert, Insert, Slot};

use super::timer::Timer;
use super::{Connection, State, MAX_WINDOW};
use crate::wire::Seq;

/// Received bytes and segments not yet read.
#[derive(Debug, Default)]
pub(crate) struct ReceiveBuffer {
    /// IRS: the peer's initial sequence number.
    pub(crate) irs: Seq,
    /// RCV.NXT: the next segment expected.
    pub(crate) nxt: Seq,
    /// Right edge last advertised (RCV.NXT + window at the last ACK).
    pub(crate) adv: Seq,
    /// In-order bytes for the reader.
    buf: VecDeque<u8>,
    /// Segments received ahead of RCV.NXT.
    reassembly: Assembler<Vec<u8>>,
    /// Payload vectors of delivered segments, reused (bounded by
    /// `max_out_of_order`: at most that many are ever out).
    pool: Vec<Vec<u8>>,
    /// The peer's FIN was received (in order).
    pub(crate) fin_received: bool,
}

/// What draining the reassembly queue delivered.
#[derive(Debug, Default, Clone, Copy)]
struct Drained {
    /// A stored segment (or the FIN) became in order: a gap was filled.
    filled: bool,
    /// Payload bytes moved to the receive buffer.
    bytes: usize,
    /// The FIN became in order.
    fin: bool,
}

impl ReceiveBuffer {
    /// Bytes ready for the reader.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether no byte is ready.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Segments (and the FIN) stored out of order.
    #[inline]
    pub(crate) fn out_of_order(&self) -> usize {
        self.reassembly.stored()
    }

    /// The reassembly queue (for SACK blocks).
    #[inline]
    pub(crate) fn reassembly(&self) -> &Assembler<Vec<u8>> {
        &self.reassembly
    }

    /// The reassembly queue, to take SACK blocks from.
    #[inline]
    pub(crate) fn reassembly_mut(&mut self) -> &mut Assembler<Vec<u8>> {
        &mut self.reassembly
    }

    /// Copies up to `out.len()` ready bytes into `out` and drops them;
    /// returns how many.
    #[inline]
    pub(crate) fn read(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.buf.len());
        let (a, b) = self.buf.as_slices();
        let na = n.min(a.len());
        out[..na].copy_from_slice(&a[..na]);
        if n > na {
            out[na..n].copy_from_slice(&b[..n - na]);
        }
        self.buf.drain(..n);
        n
    }

    /// Drops every ready byte (abort).
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
    }

    /// Moves the segments that became in order from the reassembly queue
    /// to the receive buffer (RCV.NXT was just advanced past an in-order
    /// segment).
    fn drain_in_order(&mut self) -> Drained {
        let mut d = Drained::default();
        loop {
            match self.reassembly.advance() {
                Some(Slot::Data(v)) => {
                    d.filled = true;
                    d.bytes += v.len();
                    self.buf.extend(&v);
                    self.pool.push(v);
                    self.nxt = self.nxt.add(1);
                }
                Some(Slot::End) => {
                    d.filled = true;
                    d.fin = true;
                    self.nxt = self.nxt.add(1);
                    return d;
                }
                Some(Slot::Empty) | None => return d,
            }
        }
    }

    /// Stores a segment `offset >= 1` segments beyond RCV.NXT.
    fn store(&mut self, offset: usize, limit: usize, payload: &[u8]) -> Insert {
        let pool = &mut self.pool;
        self.reassembly.insert_with(offset, limit, || {
            let mut v = pool.pop().unwrap_or_default();
            v.clear();
            v.extend_from_slice(payload);
            v
        })
    }

    /// Forgets everything after the FIN.
    fn clear_reassembly(&mut self) {
        self.pool.extend(self.reassembly.clear());
    }
}

/// When and what to acknowledge.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AckState {
    /// In-order segments received since the last ACK.
    pub(crate) pending: u32,
    /// An ACK is due in the next `poll_transmit`.
    pub(crate) now: bool,
    /// A duplicate segment to report as DSACK in the next ACK.
    pub(crate) dsack: Option<Seq>,
}

/// A receive window of `free` bytes in segments of `mss` bytes:
/// floor(free / mss), at most [`MAX_WINDOW`] (ESP's window field counts
/// segments: esp/PROTOCOL.md).
pub(crate) fn window_segments(free: usize, mss: usize) -> u32 {
    ((free / mss) as u32).min(MAX_WINDOW)
}

impl Connection {
    /// Receive window in segments that can be advertised now:
    /// floor((recv_buffer - unread bytes) / MSS), at least what was promised.
    #[inline]
    pub(super) fn rcv_window(&self) -> u32 {
        let promised = self.recv.adv.diff(self.recv.nxt).max(0) as u32;
        self.free_window().max(promised)
    }

    /// floor((recv_buffer - unread bytes) / MSS) in segments, at most
    /// `MAX_WINDOW`; without a division while nothing is unread (the
    /// usual case when the reader keeps up).
    #[inline]
    fn free_window(&self) -> u32 {
        match self.recv.len() {
            0 => self.full_window,
            unread => window_segments(self.cfg.recv_buffer.saturating_sub(unread), self.mss),
        }
    }

    /// The window the SYN advertises: the whole buffer in segments.
    pub(super) fn rcv_window_initial(&self) -> u32 {
        self.full_window.max(1)
    }

    /// A data segment at `seq` (in the window, at or after RCV.NXT). In
    /// order and with nothing unread, as much payload as fits is placed in
    /// `dst` (returned: counted as read); the rest is buffered.
    #[inline]
    pub(super) fn process_data(
        &mut self,
        now: Instant,
        seq: Seq,
        payload: &[u8],
        dst: &mut [u8],
    ) -> usize {
        if seq == self.recv.nxt {
            if self.recv.len() + payload.len() > self.cfg.recv_buffer {
                // The peer overran the advertised window.
                self.stats.dropped += 1;
                self.ack.now = true;
                tracing::debug!(seq = %seq, len = payload.len(), "window overrun, segment dropped");
                return 0;
            }
            let placed = if !dst.is_empty() && self.recv.is_empty() {
                let n = dst.len().min(payload.len());
                dst[..n].copy_from_slice(&payload[..n]);
                n
            } else {
                0
            };
            self.recv.buf.extend(&payload[placed..]);
            self.stats.bytes_received += payload.len() as u64;
            self.recv.nxt = self.recv.nxt.add(1);
            let d = if self.recv.reassembly.is_empty() {
                // Nothing queued behind it (the common case): only the
                // queue's position moves.
                self.recv.reassembly.advance();
                Drained::default()
            } else {
                self.recv.drain_in_order()
            };
            self.stats.bytes_received += d.bytes as u64;
            if d.filled {
                tracing::trace!(rcv_nxt = %self.recv.nxt, "gap filled");
            }
            if d.fin {
                self.on_fin();
            }
            if d.filled || !self.recv.reassembly.is_empty() {
                self.ack.now = true;
            } else {
                self.ack.pending += 1;
                if self.ack.pending >= self.cfg.delayed_ack_segments {
                    self.ack.now = true;
                } else if !self.timers.is_armed(Timer::DelayedAck) {
                    self.timers
                        .set(Timer::DelayedAck, now + self.cfg.delayed_ack_time);
                }
            }
            return placed;
        }
        // Out of order within the window.
        let offset = seq.diff(self.recv.nxt) as usize;
        self.ack.now = true;
        match self.recv.store(offset, self.cfg.max_out_of_order, payload) {
            Insert::Stored => {
                self.stats.out_of_sequence += 1;
                tracing::trace!(seq = %seq, rcv_nxt = %self.recv.nxt, "out of order, stored");
            }
            Insert::Duplicate => {
                self.stats.duplicates += 1;
                self.ack.dsack = Some(seq);
            }
            Insert::BeyondEnd | Insert::Full => {
                // After a queued FIN (the end of the stream), or the
                // out-of-order limit is reached.
                self.stats.dropped += 1;
            }
        }
        0
    }

    /// A FIN at `seq` (at or after RCV.NXT). The end of the stream never
    /// moves backwards over data already received: a FIN at or below a
    /// stored out-of-order segment (or a second FIN elsewhere) is dropped.
    pub(super) fn process_fin_at(&mut self, seq: Seq) {
        let offset = seq.diff(self.recv.nxt) as usize;
        self.ack.now = true;
        match self.recv.reassembly.insert_end(offset, MAX_WINDOW as usize) {
            EndInsert::AtNext => {
                self.recv.nxt = self.recv.nxt.add(1);
                self.on_fin();
            }
            EndInsert::Stored => self.stats.out_of_sequence += 1,
            EndInsert::Conflict => self.stats.dropped += 1,
            EndInsert::AlreadyStored | EndInsert::TooFar => {}
        }
    }

    /// The peer's FIN is in order: the stream ended.
    fn on_fin(&mut self) {
        self.recv.fin_received = true;
        self.ack.now = true;
        // Everything after the FIN is meaningless.
        self.recv.clear_reassembly();
        match self.state {
            State::Established | State::SynRcvd => self.set_state(State::CloseWait),
            State::FinWait1 => {
                if self.send.fin_sent && self.recovery.is_empty() {
                    self.enter_closed();
                } else {
                    self.set_state(State::Closing);
                }
            }
            State::FinWait2 => self.enter_closed(),
            _ => {}
        }
    }

    /// After the reader took bytes: schedules a window update when the
    /// window opens from (nearly) closed or by a quarter of the buffer.
    #[inline]
    pub(super) fn maybe_window_update(&mut self) {
        if !self.state.is_synchronized() || self.recv.fin_received {
            return;
        }
        let w = self.free_window();
        let edge = self.recv.nxt.add(w);
        let total = self.rcv_window_initial();
        let promised = self.recv.adv.diff(self.recv.nxt).max(0) as u32;
        if edge.diff(self.recv.adv) >= (total / 4).max(1) as i32
            || (promised < 2 && w >= 2.min(total)) && edge.diff(self.recv.adv) > 0
        {
            if !self.ack.now {
                tracing::trace!(window = w, "window update");
            }
            self.ack.now = true;
        }
    }
}
