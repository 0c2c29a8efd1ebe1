//! Building frames (quinn's `packet_builder.rs`): what to send next, in
//! priority order, and the Ethernet + ESP headers around it.
//!
//! Priority: a pending RST; in CLOSED only a last ACK; an ACK carrying SACK
//! or DSACK blocks (data segments carry no options, so SACK information
//! travels on pure ACKs); retransmissions from the lost list
//! (congestion-window limited except the head); new data (window and
//! congestion window permitting), then the FIN; a plain ACK; a probe.

use std::time::Instant;

use link::ETH_HEADER_LEN;

use link::eth::EthernetRepr;

use netcore::congestion::Controller;

use super::recovery::SegmentKind;
use super::timer::Timer;
use super::{Connection, State};
use crate::wire::{
    emit_esp_frame, fill_checksum, fill_checksum_gather, EspRepr, Flags, MacAddr, SackBlocks, Seq,
    MAX_SACK_BLOCKS,
};

/// A frame from [`Connection::poll_transmit_gather`]: `header_len` bytes of
/// Ethernet and ESP header in the caller's buffer, followed on the wire by
/// `payload_len` bytes of the send buffer from stream offset `payload_off`
/// ([`Connection::payload`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GatherFrame {
    /// Bytes of header written to the buffer (Ethernet + ESP + options).
    pub header_len: usize,
    /// Stream offset of the first payload byte.
    pub payload_off: u64,
    /// Payload bytes (0 for control segments).
    pub payload_len: usize,
}

/// Gather mode of the current `poll_transmit` call.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Gather {
    /// Data segments are emitted as a header only, their payload left in
    /// the send buffer for the caller to gather.
    on: bool,
    /// The payload (stream offset, bytes) of the last gathered segment.
    taken: Option<(u64, usize)>,
}

impl Connection {
    /// Writes the next frame to send (Ethernet header + ESP header + payload)
    /// into `buf` and returns its length in bytes, or `None` when nothing is
    /// due. Call until `None` after every event. `buf` must hold at least
    /// MTU + 14 bytes.
    #[must_use = "a returned frame must be sent"]
    #[inline]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        netcore::in_span!(self, self.transmit(now, buf))
    }

    #[inline]
    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        #[cfg(debug_assertions)]
        let due = self.transmit_due();
        let out = self.next_frame(now, buf);
        #[cfg(debug_assertions)]
        debug_assert!(
            due || out.is_none(),
            "transmit_due() was false, yet a frame was built: {self:?}"
        );
        if out.is_some() {
            self.stats.sent += 1;
        }
        self.update_probe_timers(now);
        out
    }

    /// Like [`poll_transmit`](Self::poll_transmit), but a data segment's
    /// payload is not copied: `buf` receives the Ethernet and ESP headers
    /// (checksum over header and payload included) and the returned
    /// [`GatherFrame`] says which bytes of the send buffer follow them on the
    /// wire; read them with [`payload`](Self::payload) and send header and
    /// payload as one frame (sendmmsg with an iovec per piece). The payload
    /// stays valid until the next call that takes `&mut self` other than this
    /// one (new data, an ACK, a timeout).
    #[must_use = "a returned frame must be sent"]
    #[inline]
    pub fn poll_transmit_gather(&mut self, now: Instant, buf: &mut [u8]) -> Option<GatherFrame> {
        netcore::in_span!(self, self.transmit_gather(now, buf))
    }

    fn transmit_gather(&mut self, now: Instant, buf: &mut [u8]) -> Option<GatherFrame> {
        self.gather = Gather {
            on: true,
            taken: None,
        };
        let out = self.transmit(now, buf);
        let (payload_off, payload_len) = self.gather.taken.take().unwrap_or((self.send.base(), 0));
        self.gather.on = false;
        out.map(|n| GatherFrame {
            header_len: n,
            payload_off,
            payload_len,
        })
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) may have a frame now:
    /// false only when nothing is owed (no RST, no ACK due, no probe, no
    /// segment on the lost list, no unsent byte, no unsent FIN). A driver
    /// may skip the transmit call after an event that leaves this false
    /// (an in-order data segment whose ACK is delayed, RFC 1122 sec.
    /// 4.2.3.2): the timers the call would also have updated (persist,
    /// keepalive) are updated by every event already. Conservative: true
    /// does not promise a frame (the window may be closed). Checked
    /// against `next_frame` on every call in debug builds.
    #[inline]
    pub fn transmit_due(&self) -> bool {
        self.rst_pending.is_some()
            || self.ack.now
            || self.probes.now
            || self.recovery.lost_len() > 0
            || self.send.unsent() > 0
            || (self.send.fin_requested && !self.send.fin_sent)
    }

    /// `len` bytes of the send buffer from stream offset `off`, as one or
    /// two slices (the buffer is a ring). Panics if the range is not in the
    /// send buffer; [`GatherFrame`]s from
    /// [`poll_transmit_gather`](Self::poll_transmit_gather) always are.
    pub fn payload(&self, off: u64, len: usize) -> (&[u8], &[u8]) {
        self.send.payload(off, len)
    }

    #[inline]
    fn next_frame(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(rst) = self.rst_pending.take() {
            return Some(self.emit(buf, rst, &[]));
        }
        if self.state == State::Closed {
            if self.ack.now {
                return Some(self.emit_ack(buf, false));
            }
            return None;
        }
        // An ACK that carries SACK goes first: data segments carry no options.
        if self.ack.now
            && (self.recv.out_of_order() > 0 || self.ack.dsack.is_some())
            && self.state.is_synchronized()
        {
            return Some(self.emit_ack(buf, true));
        }
        // Retransmissions.
        if let Some(idx) = self.recovery.next_lost(self.cc.window()) {
            return Some(self.emit_queued(now, idx, buf));
        }
        // New data, then FIN.
        if self.state.may_send_data() {
            let unsent = self.send.unsent();
            let window_open = self.recovery.nxt().diff(self.snd_wnd.edge) < 0;
            let cwnd_open = self.recovery.pipe() < self.cc.window();
            if unsent > 0 && window_open && cwnd_open {
                let len = unsent.min(self.mss);
                let off = self.send.take(len);
                let idx = self
                    .recovery
                    .push_new(SegmentKind::Data, off, len as u16, now);
                return Some(self.emit_queued(now, idx, buf));
            }
            if unsent == 0 && self.send.fin_requested && !self.send.fin_sent {
                self.send.fin_sent = true;
                let idx = self
                    .recovery
                    .push_new(SegmentKind::Fin, self.send.next_off(), 0, now);
                tracing::debug!(seq = %self.recovery.una().add(idx as u32), "FIN sent");
                return Some(self.emit_queued(now, idx, buf));
            }
        }
        if self.state.is_synchronized() && self.state != State::SynRcvd {
            if self.ack.now {
                return Some(self.emit_ack(buf, true));
            }
            if self.probes.now {
                self.probes.now = false;
                self.stats.probes += 1;
                let repr = self.header(Flags::ACK, self.recovery.nxt().sub(1));
                return Some(self.emit(buf, repr, &[]));
            }
        }
        None
    }

    /// The header of a segment at `seq`; with ACK set it carries RCV.NXT
    /// and the window, and counts as the ACK owed.
    #[inline]
    fn header(&mut self, flags: Flags, seq: Seq) -> EspRepr {
        let mut r = EspRepr {
            src_port: self.local.1,
            dst_port: self.remote.1,
            flags,
            seq,
            ..Default::default()
        };
        if flags.ack() {
            let w = self.rcv_window();
            r.ack = self.recv.nxt;
            r.window = w as u16;
            self.recv.adv = self.recv.nxt.add(w);
            self.ack.pending = 0;
            self.ack.now = false;
            self.timers.stop(Timer::DelayedAck);
        }
        r
    }

    /// A pure ACK; with `with_sack`, a DSACK block (RFC 2883: the duplicate
    /// first) and the reassembly queue's blocks (RFC 2018 order).
    fn emit_ack(&mut self, buf: &mut [u8], with_sack: bool) -> usize {
        let mut repr = self.header(Flags::ACK, self.recovery.nxt());
        let dsack = self.ack.dsack.take();
        if with_sack && (self.recv.out_of_order() > 0 || dsack.is_some()) {
            let mut sack = SackBlocks::new();
            if let Some(d) = dsack {
                sack.push(d, d.add(1));
            }
            let base = self.recv.nxt;
            let blocks = self
                .recv
                .reassembly_mut()
                .sack_blocks(MAX_SACK_BLOCKS - sack.len());
            for r in blocks.iter() {
                sack.push(base.add(r.start as u32), base.add(r.end as u32));
            }
            repr.sack = sack;
            if self.recv.reassembly().has_unreported() {
                // More blocks changed than one option holds: another ACK.
                self.ack.now = true;
            }
        }
        self.emit(buf, repr, &[])
    }

    /// Emits queued segment `idx` (first transmission or retransmission)
    /// and arms the retransmission timer if it is not running.
    #[inline]
    fn emit_queued(&mut self, now: Instant, idx: usize, buf: &mut [u8]) -> usize {
        let s = self.recovery.segment(idx);
        let seq = self.recovery.una().add(idx as u32);
        let flags = match s.kind {
            SegmentKind::Syn if self.state == State::SynSent => Flags::SYN,
            SegmentKind::Syn => Flags::SYN | Flags::ACK,
            SegmentKind::Data => Flags::ACK,
            SegmentKind::Fin => Flags::FIN | Flags::ACK,
        };
        let mut repr = self.header(flags, seq);
        if s.kind == SegmentKind::Syn {
            // The SYN advertises the window too (RFC 7323 would not scale it).
            let w = self.rcv_window_initial();
            repr.window = w as u16;
            // The offer (SYN) or the choice (SYN-ACK): `crate::auth`.
            repr.nego = Some(self.nego_out());
            if flags.ack() {
                self.recv.adv = self.recv.nxt.add(w);
            }
        }
        if self.recovery.on_transmit(idx, now) {
            self.stats.retransmitted += 1;
            tracing::debug!(seq = %seq, kind = ?s.kind, tx = s.tx_count + 1, "retransmit");
        }
        if !self.timers.is_armed(Timer::Rto) {
            self.timers.set(Timer::Rto, now + self.rtt.rto());
        }
        let hlen = repr.header_len();
        let len = s.len as usize;
        let start = ETH_HEADER_LEN + hlen;
        repr.payload_len = len as u16;
        trace_out(&repr);
        self.write_eth(buf);
        repr.emit(&mut buf[ETH_HEADER_LEN..]);
        let (a, b) = self.send.payload(s.off, len);
        if self.gather.on {
            fill_checksum_gather(
                &mut buf[ETH_HEADER_LEN..start],
                &[a, b],
                self.cfg.checksum.computed(),
            );
            self.gather.taken = Some((s.off, len));
            return start;
        }
        buf[start..start + a.len()].copy_from_slice(a);
        buf[start + a.len()..start + len].copy_from_slice(b);
        fill_checksum(
            &mut buf[ETH_HEADER_LEN..start + len],
            self.cfg.checksum.computed(),
        );
        start + len
    }

    fn write_eth(&self, buf: &mut [u8]) {
        EthernetRepr {
            dst: self.remote.0,
            src: self.local.0,
            ethertype: self.cfg.ethertype,
        }
        .emit(buf);
    }

    /// Emits a control segment `repr` with `payload` (empty here).
    fn emit(&mut self, buf: &mut [u8], repr: EspRepr, payload: &[u8]) -> usize {
        self.write_eth(buf);
        let mut repr = repr;
        repr.payload_len = payload.len() as u16;
        trace_out(&repr);
        let h = repr.emit(&mut buf[ETH_HEADER_LEN..]);
        let start = ETH_HEADER_LEN + h;
        buf[start..start + payload.len()].copy_from_slice(payload);
        fill_checksum(
            &mut buf[ETH_HEADER_LEN..start + payload.len()],
            self.cfg.checksum.computed(),
        );
        start + payload.len()
    }
}

/// A trace event for a segment sent.
#[inline]
fn trace_out(repr: &EspRepr) {
    tracing::trace!(
        seq = %repr.seq,
        ack = %repr.ack,
        flags = ?repr.flags,
        len = repr.payload_len,
        wnd = repr.window,
        sack = ?repr.sack,
        "segment out"
    );
}

/// Builds the frame that answers `repr` (received from `peer_mac`) when no
/// connection or listener wants it (RFC 793 reset generation, thesis ch.
/// 5.2.9): returns its length in `buf`, or `None` for an incoming RST or a
/// group source address.
pub fn reset_frame(
    buf: &mut [u8],
    local_mac: MacAddr,
    peer_mac: MacAddr,
    ethertype: u16,
    repr: &EspRepr,
) -> Option<usize> {
    let rst = repr.reset_reply()?;
    if peer_mac.is_group() {
        return None;
    }
    let eth = EthernetRepr {
        dst: peer_mac,
        src: local_mac,
        ethertype,
    };
    emit_esp_frame(buf, &eth, &rst, &[]).ok()
}
