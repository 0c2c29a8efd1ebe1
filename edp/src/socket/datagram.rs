//! The EDP datagram socket as it lives in a runtime slot: a bounded queue
//! of received datagrams (or, while its reader waits, straight into the
//! reader's buffer).

use std::collections::VecDeque;
use std::time::Instant;

use crate::wire::{EdpFrame, MacAddr};
use runtime::protocol::{Cx, DirectRead, Ready, RxFrame, Socket, Traits, TxQueue};

/// Counters of one EDP socket (the thesis's `struct edp_stats`, extended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdpStats {
    /// Datagrams handed to the link.
    pub sent: u64,
    /// Datagrams the link refused with an error (not counting `WouldBlock`
    /// on a nonblocking socket, which the caller retries).
    pub send_errors: u64,
    /// Datagrams delivered to the caller.
    pub received: u64,
    /// Frames received and discarded: malformed, from a non-peer while
    /// connected, larger than the caller's buffer, or arriving while the
    /// receive queue was full.
    pub dropped: u64,
    /// Of `dropped`: datagrams that found the receive queue full.
    pub queue_full: u64,
    /// Of `dropped`: datagrams sent to a group (broadcast or multicast)
    /// destination while the socket is connected to a unicast peer (its
    /// conversation is point to point).
    pub group_dropped: u64,
    /// Frames the kernel dropped before the runtime could read them (its
    /// receive buffer or ring was full), from `PACKET_STATISTICS`. The
    /// counter belongs to the runtime's packet socket, shared by every
    /// socket of the process on that interface.
    pub kernel_drops: u64,
}

/// A datagram taken from the queue: its length and sender, or `Err(len)`
/// when it did not fit the caller's buffer (dropped).
pub(crate) type Popped = Result<Option<(usize, (MacAddr, u16))>, usize>;

/// Metadata of a queued datagram.
#[derive(Debug, Clone, Copy)]
struct Meta {
    from: (MacAddr, u16),
    len: usize,
}

/// The socket in its slot. See the module documentation.
#[derive(Debug)]
pub(crate) struct DatagramSocket {
    pub port: u16,
    /// Connected peer: only its datagrams are accepted.
    pub peer: Option<(MacAddr, u16)>,
    /// Payload bytes of queued datagrams, in order.
    bytes: VecDeque<u8>,
    meta: VecDeque<Meta>,
    /// Most payload bytes queued (the socket's receive buffer).
    capacity: usize,
    pub stats: EdpStats,
}

impl DatagramSocket {
    pub(crate) fn new(port: u16, capacity: usize) -> Self {
        Self {
            port,
            peer: None,
            bytes: VecDeque::new(),
            meta: VecDeque::new(),
            capacity,
            stats: EdpStats::default(),
        }
    }

    /// Checks a frame; returns the datagram's sender and payload.
    fn accept<'f>(&mut self, frame: RxFrame<'f>) -> Option<((MacAddr, u16), &'f [u8])> {
        let f = match EdpFrame::with_eth(frame.eth, frame.packet) {
            Ok(f) => f,
            Err(e) => {
                tracing::trace!(port = self.port, error = %e, "EDP: malformed frame dropped");
                self.stats.dropped += 1;
                return None;
            }
        };
        let from = (f.eth.src, f.header.src_port);
        if f.eth.dst.is_group() && self.peer.is_some_and(|(m, _)| !m.is_group()) {
            self.stats.dropped += 1;
            self.stats.group_dropped += 1;
            return None;
        }
        let ok = f.header.dst_port == self.port
            && match self.peer {
                None => true,
                Some((m, p)) => m.is_group() || from == (m, p),
            };
        if !ok {
            self.stats.dropped += 1;
            return None;
        }
        Some((from, f.payload))
    }

    /// Takes the oldest queued datagram into `out`: `Ok(Some((len, from)))`,
    /// `Ok(None)` when the queue is empty, `Err(len)` when it did not fit
    /// `out` (consumed and counted as dropped).
    pub(crate) fn pop_into(&mut self, out: &mut [u8]) -> Popped {
        let Some(m) = self.meta.pop_front() else {
            return Ok(None);
        };
        if m.len > out.len() {
            self.bytes.drain(..m.len);
            self.stats.dropped += 1;
            return Err(m.len);
        }
        let (a, b) = self.bytes.as_slices();
        let from_a = m.len.min(a.len());
        out[..from_a].copy_from_slice(&a[..from_a]);
        out[from_a..m.len].copy_from_slice(&b[..m.len - from_a]);
        self.bytes.drain(..m.len);
        self.stats.received += 1;
        Ok(Some((m.len, m.from)))
    }

    /// Datagrams queued.
    pub(crate) fn queued(&self) -> usize {
        self.meta.len()
    }
}

impl Socket for DatagramSocket {
    fn on_frame(&mut self, _cx: &mut Cx<'_>, frame: RxFrame<'_>) {
        let Some((from, payload)) = self.accept(frame) else {
            return;
        };
        if self.bytes.len() + payload.len() > self.capacity {
            self.stats.dropped += 1;
            self.stats.queue_full += 1;
            return;
        }
        self.bytes.extend(payload);
        self.meta.push_back(Meta {
            from,
            len: payload.len(),
        });
    }

    fn on_frame_direct(
        &mut self,
        cx: &mut Cx<'_>,
        frame: RxFrame<'_>,
        direct: &mut DirectRead<'_>,
    ) {
        if !self.meta.is_empty() || direct.from.is_some() {
            return self.on_frame(cx, frame);
        }
        let Some((from, payload)) = self.accept(frame) else {
            return;
        };
        let n = payload.len().min(direct.buf.len());
        direct.buf[..n].copy_from_slice(&payload[..n]);
        direct.filled = n;
        direct.from = Some(from.into());
        direct.datagram_len = payload.len();
    }

    fn on_timeout(&mut self, _cx: &mut Cx<'_>) {}

    fn poll_transmit(&mut self, _cx: &mut Cx<'_>, _tx: &mut TxQueue) {}

    fn traits(&self) -> Traits {
        Traits {
            transmits: false,
            timed: false,
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn readiness(&self) -> Ready {
        if self.meta.is_empty() {
            Ready::WRITABLE
        } else {
            Ready::READABLE | Ready::WRITABLE
        }
    }
}
