//! Arrival checks of segments in synchronized states (RFC 9293 sec. 3.10.7.4
//! "SEGMENT ARRIVES", in segments; RFC 5961 against blind resets and
//! injection) and the rate limits of the ACKs they draw.
//!
//! - RST: resets only with the exact sequence number RCV.NXT; an in-window
//!   RST draws a challenge ACK; anything else is dropped (RFC 5961 sec. 3.2).
//! - SYN: in a synchronized state draws a challenge ACK (RFC 5961 sec. 4.2),
//!   except the peer's retransmitted SYN in SYN_RCVD (our SYN-ACK was lost).
//! - Sequence acceptability (RFC 9293 sec. 3.10.7.4, first check): a
//!   zero-length segment must lie at RCV.NXT <= SEG.SEQ <= RCV.NXT +
//!   RCV.WND (the right edge included, as Linux's `tcp_sequence`: a peer
//!   that filled our window sends its ACKs there), a segment consuming a
//!   number inside the window (or be the FIN at RCV.NXT). Unacceptable
//!   segments never reach the ACK, window or data processing.
//!   - A *plausible old* segment, at most a maximum window below RCV.NXT,
//!     is the peer's: a duplicate data segment is answered at once with a
//!     DSACK (RFC 2883; the sender's undo needs every one), a zero-length
//!     one (a keepalive or zero-window probe at SND.NXT - 1, or a reordered
//!     ACK) at most once per `min_rto / 2` (enough for probes, sent an RTO
//!     apart).
//!   - Anything else is *out of window* (counted in `Stats::out_of_window`):
//!     answered with an ACK at most once per `min_rto / 2`, on a limiter of
//!     its own so that a flood of junk cannot starve the probes' answers
//!     (RFC 5961 sec. 7; Linux `tcp_invalid_ratelimit` / `tcp_oow_rate_limited`,
//!     which applies one limiter to both). A blind attacker's random sequence
//!     numbers fall here with probability 1 - 2^-15.
//! - ACK field: an ACK of data not yet sent, or older than a window, draws a
//!   challenge ACK (RFC 5961 sec. 5.2) and the segment is dropped. At most
//!   `challenge_ack_limit` challenge ACKs per second (RFC 5961 sec. 7).
//! - Window update (RFC 9293 sec. 3.10.7.4, fifth check): only from an
//!   acceptable segment with SND.UNA <= SEG.ACK <= SND.NXT and (SND.WL1,
//!   SND.WL2) older than (SEG.SEQ, SEG.ACK); see `send_buffer.rs`.
//!
//! Every suppressed answer is counted in `Stats::rate_limited`.

use std::time::{Duration, Instant};

use super::{Connection, ConnectionError, State, MAX_WINDOW};
use crate::wire::{EspRepr, Seq};

/// Rate-limit state of challenge ACKs and answers to unacceptable segments.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AckLimits {
    /// Start of the current one-second challenge-ACK interval.
    challenge_start: Option<Instant>,
    /// Challenge ACKs sent in it.
    challenge_count: u32,
    /// When an old zero-length segment (a probe) was last answered.
    old_answered: Option<Instant>,
    /// When an out-of-window segment was last answered.
    oow_answered: Option<Instant>,
}

/// Which limiter an answer to an unacceptable segment goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// A plausible old zero-length segment (probe, reordered ACK).
    Old,
    /// A segment outside the window.
    OutOfWindow,
}

impl Connection {
    /// Processes a segment in a synchronized state (SYN_RCVD and later).
    /// Returns the payload bytes placed in `dst` (see
    /// [`Connection::handle_segment_into`]).
    pub(super) fn on_synchronized(
        &mut self,
        now: Instant,
        repr: &EspRepr,
        payload: &[u8],
        dst: &mut [u8],
    ) -> usize {
        let f = repr.flags;
        let wnd = self.rcv_window().max(1);
        let in_window = repr.seq.in_window(self.recv.nxt, wnd);

        if f.rst() {
            if repr.seq == self.recv.nxt {
                tracing::debug!(state = %self.state, "RST received");
                match self.state {
                    State::LastAck | State::Closing => self.enter_closed(),
                    State::SynRcvd => self.die(ConnectionError::Refused),
                    _ => self.die(ConnectionError::Reset),
                }
            } else {
                self.stats.dropped += 1;
                if in_window {
                    self.challenge_ack(now, "RST in window, not exact");
                }
            }
            return 0;
        }

        if f.syn() {
            if self.state == State::SynRcvd && !f.ack() && repr.seq == self.recv.irs {
                // The peer retransmitted its SYN: our SYN-ACK was lost.
                tracing::debug!("SYN retransmitted by the peer: SYN-ACK resent");
                self.recovery.resend_syn();
                return 0;
            }
            // Any SYN in a synchronized state draws a challenge ACK (this
            // also re-acknowledges a retransmitted SYN-ACK whose final ACK
            // was lost).
            self.stats.dropped += 1;
            self.challenge_ack(now, "SYN in a synchronized state");
            return 0;
        }
        if !f.ack() {
            self.stats.dropped += 1;
            return 0;
        }

        let seg_len = repr.seq_len();
        let behind = self.recv.nxt.diff(repr.seq);
        let plausible_old = behind > 0 && behind <= MAX_WINDOW as i32;
        if seg_len == 0 {
            // RCV.NXT <= SEG.SEQ <= right edge (the edge itself included:
            // a peer that filled the window sends its ACKs at SND.NXT).
            let right = self.recv.nxt.add(wnd);
            let edge = if self.recv.adv.diff(right) > 0 {
                self.recv.adv
            } else {
                right
            };
            if plausible_old {
                // A keepalive or zero-window probe at SND.NXT - 1, or a
                // reordered ACK: answer (throttled: a peer whose SND.NXT
                // is behind our RCV.NXT after a forged FIN sends only such
                // segments, and answering each would ping-pong ACKs, RFC
                // 5961 sec. 7). Only one with a plausible ACK field counts
                // as the peer's.
                if self.ack_field_plausible(repr.ack) {
                    self.answer_unacceptable(now, Answer::Old);
                    self.touch_peer(now);
                } else {
                    self.out_of_window(now);
                }
                return 0;
            }
            if behind > 0 || repr.seq.diff(edge) > 0 {
                self.out_of_window(now);
                return 0;
            }
        } else if !(in_window || f.fin() && repr.seq == self.recv.nxt) {
            if plausible_old {
                // A duplicate: ACK at once with a DSACK (RFC 2883).
                self.stats.duplicates += 1;
                self.ack.dsack = Some(repr.seq);
                self.ack.now = true;
            } else {
                self.out_of_window(now);
            }
            return 0;
        }

        // An ACK of data not yet sent draws an ACK (RFC 793), rate limited
        // as a challenge ACK: two ends that disagree about the sequence
        // numbers would otherwise exchange ACKs forever.
        if repr.ack.diff(self.recovery.nxt()) > 0 {
            self.stats.dropped += 1;
            self.challenge_ack(now, "ACK of unsent data");
            return 0;
        }
        if repr.ack.diff(self.recovery.una()) < -(MAX_WINDOW as i32) {
            self.stats.dropped += 1;
            self.challenge_ack(now, "ACK older than a window");
            return 0;
        }
        if self.state == State::SynRcvd {
            if repr.ack != self.iss.add(1) {
                self.stats.dropped += 1;
                self.rst_pending = repr.reset_reply();
                return 0;
            }
            let next = if self.send.fin_requested {
                State::FinWait1
            } else {
                State::Established
            };
            self.set_state(next);
            self.established_once = true;
        }
        self.touch_peer(now);
        self.process_ack(now, repr);
        if self.state == State::Closed {
            return 0;
        }

        if self.recv.fin_received {
            // RFC 9293 sec. 3.10.7.4 ("seventh, process the segment text")
            // and the FIN step: in CLOSE-WAIT, CLOSING, LAST-ACK the peer's
            // FIN was received, so text and another FIN at or after it are
            // ignored (nothing beyond the end of the stream is delivered).
            if seg_len > 0 {
                self.stats.dropped += 1;
            }
            return 0;
        }
        if !payload.is_empty() {
            return self.process_data(now, repr.seq, payload, dst);
        }
        if f.fin() {
            self.process_fin_at(repr.seq);
        }
        0
    }

    /// Queues a challenge ACK (RFC 5961), at most `challenge_ack_limit` per
    /// second.
    pub(super) fn challenge_ack(&mut self, now: Instant, why: &'static str) {
        let l = &mut self.limits;
        match l.challenge_start {
            Some(t) if now.saturating_duration_since(t) < Duration::from_secs(1) => {}
            _ => {
                l.challenge_start = Some(now);
                l.challenge_count = 0;
            }
        }
        if l.challenge_count < self.cfg.challenge_ack_limit {
            l.challenge_count += 1;
            self.stats.challenge_acks += 1;
            self.ack.now = true;
            tracing::debug!(why, "challenge ACK");
        } else {
            self.stats.rate_limited += 1;
            tracing::trace!(why, "challenge ACK rate-limited");
        }
    }

    /// Whether `ack` lies in SND.UNA - MAX_WINDOW ..= SND.NXT (RFC 5961
    /// sec. 5.2's acceptable range).
    fn ack_field_plausible(&self, ack: Seq) -> bool {
        ack.diff(self.recovery.nxt()) <= 0 && ack.diff(self.recovery.una()) >= -(MAX_WINDOW as i32)
    }

    /// A segment outside the window: counted, dropped, answered throttled.
    fn out_of_window(&mut self, now: Instant) {
        self.stats.out_of_window += 1;
        self.stats.dropped += 1;
        self.answer_unacceptable(now, Answer::OutOfWindow);
    }

    /// Answers an unacceptable segment with an ACK, at most once per
    /// `min_rto / 2` per limiter (so every zero-window or keepalive probe,
    /// sent at least one RTO apart, is still answered).
    fn answer_unacceptable(&mut self, now: Instant, kind: Answer) {
        let interval = (self.cfg.rto.min / 2).max(Duration::from_micros(1));
        let last = match kind {
            Answer::Old => &mut self.limits.old_answered,
            Answer::OutOfWindow => &mut self.limits.oow_answered,
        };
        if let Some(t) = *last {
            if now.saturating_duration_since(t) < interval {
                self.stats.rate_limited += 1;
                return;
            }
        }
        *last = Some(now);
        self.ack.now = true;
    }
}
