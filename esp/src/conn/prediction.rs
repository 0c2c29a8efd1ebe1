//! Header prediction: the receive fast path for the segment an established
//! connection expects next (Van Jacobson's TCP header prediction, "4.3BSD
//! header prediction", 1990; Linux `tcp_rcv_established`'s fast path).
//!
//! In a steady exchange nearly every segment is the *predicted* one: flags
//! ACK alone, no option, SEG.SEQ = RCV.NXT, SND.UNA <= SEG.ACK <= SND.NXT,
//! in ESTABLISHED. For it every arrival check of `acceptance.rs` passes
//! (RFC 9293 sec. 3.10.7.4's sequence and ACK checks, RFC 5961's RST, SYN
//! and ACK checks), so the segment goes straight to the steps that follow
//! them, in RFC 9293's order and through the same functions as every other
//! segment: the peer is alive, the ACK (window, retransmission queue, RTT,
//! RTO, congestion window: `Connection::process_ack`), then the text
//! (`Connection::process_data`), then the window update and the probe
//! timers. What it skips is work whose outcome is known: the full parse
//! into an [`EspRepr`] (options, SACK blocks, the checksum when the field
//! is 0) and the checks. A segment that is not predicted is not touched:
//! the caller parses it and hands it to
//! [`Connection::handle_segment_tagged`].

use std::time::Instant;

use super::{Connection, State};
use crate::auth::TagStatus;
use crate::wire::{EspPacket, EspRepr, Flags, ESP_HEADER_LEN};

impl Connection {
    /// Processes `segment` (the ESP header and payload: a frame's bytes
    /// after its Ethernet header, the peer's MAC already matched) if it is
    /// the predicted segment (module documentation), exactly as
    /// [`handle_segment_tagged`](Self::handle_segment_tagged) would, and
    /// returns the payload bytes placed in `dst` (see
    /// [`handle_segment_into`](Self::handle_segment_into)). Returns `None`,
    /// having changed nothing, for any other segment: one with options, a
    /// checksum to verify, flags other than ACK alone, lengths that do not
    /// add up, other ports, a sequence number other than RCV.NXT, an ACK
    /// outside SND.UNA..=SND.NXT, a tag that frame authentication requires
    /// but did not verify, a state other than ESTABLISHED, or a connection
    /// whose trace span is enabled (its events are the general path's).
    #[inline]
    pub fn handle_predicted(
        &mut self,
        now: Instant,
        segment: &[u8],
        tag: TagStatus,
        dst: &mut [u8],
    ) -> Option<usize> {
        let repr = self.predict(segment, tag)?;
        let payload = &segment[ESP_HEADER_LEN..ESP_HEADER_LEN + repr.payload_len as usize];
        // `segment_in` and `on_synchronized` for a segment whose checks
        // all pass (see `predict`).
        tracing::trace!(
            seq = %repr.seq,
            ack = %repr.ack,
            len = payload.len(),
            wnd = repr.window,
            "segment in (predicted)"
        );
        self.stats.received += 1;
        self.touch_peer(now);
        self.process_ack(now, &repr);
        let placed = if self.state == State::Closed || payload.is_empty() {
            0
        } else {
            self.process_data(now, repr.seq, payload, dst)
        };
        if placed > 0 {
            self.maybe_window_update();
        }
        self.update_probe_timers(now);
        Some(placed)
    }

    /// The header of `segment` when it is the predicted segment. Each
    /// condition is one that `segment_in` and `on_synchronized` would
    /// otherwise test on the parsed header:
    /// - the span is disabled (`in_span!` adds nothing), the state is
    ///   ESTABLISHED (`on_synchronized`, and no SYN_RCVD transition), the
    ///   peer's FIN not received (no text after the end of the stream);
    /// - the header is the 20 bytes without options, its checksum field 0
    ///   (nothing to verify: `EspPacket::verify_checksum`), the payload
    ///   within the segment and no undefined flag bit (`EspPacket::new_checked`),
    ///   flags exactly ACK
    ///   (no RST, SYN or FIN: `EspRepr::parse_packet`'s flag checks and the
    ///   first three checks of `on_synchronized`);
    /// - the ports are this connection's and the tag is verified where the
    ///   negotiated method requires one (`segment_in`);
    /// - SEG.SEQ = RCV.NXT: acceptable for any receive window of at least
    ///   one segment, which the check uses, with or without payload;
    /// - SND.UNA <= SEG.ACK <= SND.NXT: neither an ACK of unsent data nor
    ///   one older than a window.
    #[inline]
    fn predict(&self, segment: &[u8], tag: TagStatus) -> Option<EspRepr> {
        if !self.span.is_disabled() || self.state != State::Established || self.recv.fin_received {
            return None;
        }
        // The codec's length checks (`EspPacket::new_checked`), then the
        // fields it reads.
        let p = EspPacket::new_checked(segment).ok()?;
        if p.header_len() != ESP_HEADER_LEN
            || p.flags() != Flags::ACK
            || p.checksum() != 0
            || p.src_port() != self.remote.1
            || p.dst_port() != self.local.1
            || (self.auth.is_some_and(|m| m.requires_tag()) && tag != TagStatus::Verified)
            || p.seq() != self.recv.nxt
            || p.ack().diff(self.recovery.una()) < 0
            || p.ack().diff(self.recovery.nxt()) > 0
        {
            return None;
        }
        Some(EspRepr {
            src_port: self.remote.1,
            dst_port: self.local.1,
            flags: Flags::ACK,
            seq: p.seq(),
            ack: p.ack(),
            window: p.window(),
            payload_len: p.payload_len(),
            ..Default::default()
        })
    }
}
