//! An ESP connection as it lives in a runtime slot: frames in, timers,
//! gathered segments out, readiness from the connection's state, and the
//! linger after its handle is dropped.

use std::time::{Duration, Instant};

use runtime::protocol::{Cx, DirectRead, GatherRef, Ready, RxFrame, Socket, TxQueue};

use crate::conn::{Connection, State};
use crate::wire::EspFrame;

/// Frames a connection's slot dropped before the connection saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotStats {
    /// Frames that failed to parse (bad checksum, truncated); the
    /// connection counts them as received and dropped too.
    pub malformed: u64,
    /// Segments sent to a group (broadcast or multicast) destination: a
    /// stream is point to point, so they are never accepted.
    pub group_addressed: u64,
}

/// The connection in its slot. See the module documentation.
pub(crate) struct ConnSocket {
    pub conn: Connection,
    /// How long a dropped stream keeps closing (0 = abort at once).
    linger: Duration,
    /// Set when the handle was dropped: the closing gives up then.
    linger_until: Option<Instant>,
    /// `poll_transmit` stopped because the batch was full.
    more: bool,
    pub stats: SlotStats,
}

impl ConnSocket {
    pub(crate) fn new(conn: Connection, linger: Duration) -> Self {
        Self {
            conn,
            linger,
            linger_until: None,
            more: false,
            stats: SlotStats::default(),
        }
    }

    /// Hands `frame` to the connection: to the header prediction's fast
    /// path when it takes the segment (addressed to one station; the
    /// runtime checked the rest of the Ethernet header), else parsed, to
    /// the general path. Returns the payload bytes placed in `dst` (a
    /// waiting reader's buffer, or empty).
    #[inline]
    fn deliver(&mut self, cx: &Cx<'_>, frame: RxFrame<'_>, dst: &mut [u8]) -> usize {
        if !frame.eth.dst.is_group() {
            if let Some(n) = self
                .conn
                .handle_predicted(cx.now, frame.packet, cx.tag, dst)
            {
                return n;
            }
        }
        match self.parse(frame) {
            Some(f) => self
                .conn
                .handle_segment_tagged(cx.now, &f.header, f.payload, cx.tag, dst),
            None => 0,
        }
    }

    fn parse<'f>(&mut self, frame: RxFrame<'f>) -> Option<EspFrame<'f>> {
        match EspFrame::with_eth(frame.eth, frame.packet) {
            Ok(f) if f.eth.dst.is_group() => {
                self.stats.group_addressed += 1;
                None
            }
            Ok(f) => Some(f),
            Err(e) => {
                tracing::trace!(error = %e, "ESP: malformed frame dropped");
                self.stats.malformed += 1;
                self.conn.on_malformed();
                None
            }
        }
    }
}

impl Socket for ConnSocket {
    fn on_frame(&mut self, cx: &mut Cx<'_>, frame: RxFrame<'_>) {
        self.deliver(cx, frame, &mut []);
    }

    /// A reader is waiting with `direct`: in-order payload goes straight
    /// into its buffer when nothing is buffered (one copy from the ring
    /// slot to the reader, as kernel TCP's copy to user).
    fn on_frame_direct(
        &mut self,
        cx: &mut Cx<'_>,
        frame: RxFrame<'_>,
        direct: &mut DirectRead<'_>,
    ) {
        direct.filled += self.deliver(cx, frame, &mut direct.buf[direct.filled..]);
    }

    /// In SYN_SENT and under method `none` (`Connection::accepts_unverified`).
    fn accepts_unverified(&self) -> bool {
        self.conn.accepts_unverified()
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.conn.handle_timeout(cx.now);
        if self.linger_until.is_some_and(|t| cx.now >= t) && self.conn.state() != State::Closed {
            tracing::debug!(remote = ?self.conn.remote(), "ESP: linger expired; aborting");
            self.conn.abort();
        }
    }

    fn poll_transmit(&mut self, cx: &mut Cx<'_>, tx: &mut TxQueue) {
        self.more = false;
        loop {
            if tx.is_full() {
                self.more = true;
                return;
            }
            let Some(g) = self.conn.poll_transmit_gather(cx.now, tx.next_buf()) else {
                return;
            };
            let gather = (g.payload_len > 0).then_some(GatherRef {
                tag: 0,
                offset: g.payload_off,
                len: g.payload_len,
            });
            tx.commit(g.header_len, gather);
            if !self.conn.transmit_due() {
                // Nothing more owed: no call that would only say so.
                return;
            }
        }
    }

    fn gather(&self, r: GatherRef) -> (&[u8], &[u8]) {
        self.conn.payload(r.offset, r.len)
    }

    fn on_send_failed(&mut self) {
        self.conn.on_send_error();
    }

    fn poll_timeout(&self) -> Option<Instant> {
        netcore::time::earliest(self.conn.poll_timeout(), self.linger_until)
    }

    fn readiness(&self) -> Ready {
        let mut r = Ready::NONE;
        if self.conn.is_readable() {
            r |= Ready::READABLE;
        }
        if self.conn.is_writable() {
            r |= Ready::WRITABLE;
        }
        if self.conn.error().is_some() {
            r |= Ready::ERROR;
        } else if self.conn.liveness() != crate::conn::Liveness::Responsive {
            r |= Ready::UNRESPONSIVE;
        }
        r
    }

    fn wants_transmit(&self) -> bool {
        self.more
    }

    /// `Connection::transmit_due`, or a batch that was full.
    fn transmit_due(&self) -> bool {
        self.more || self.conn.transmit_due()
    }

    fn before_sleep(&mut self, _now: Instant) {
        self.conn.flush_delayed_ack();
    }

    fn on_handle_dropped(&mut self, now: Instant) -> bool {
        if self.linger.is_zero() || self.conn.error().is_some() || self.is_finished() {
            return true;
        }
        // Graceful close in the background, like the kernel's orphaned TCP
        // sockets: FIN after the buffered data, then the peer's FIN.
        self.conn.close();
        self.linger_until = Some(now + self.linger);
        false
    }

    fn is_finished(&self) -> bool {
        (self.conn.state() == State::Closed && self.conn.is_finished())
            || (self.conn.error().is_some() && self.conn.is_finished())
    }
}
