//! Arrival checks of segments in synchronized states (RFC 793 sec. 3.3 and
//! 3.9 "SEGMENT ARRIVES", in segments; RFC 5961 against blind resets and
//! injection) and the rate limits of the ACKs they draw.
//!
//! - RST: resets only with the exact sequence number RCV.NXT; an in-window
//!   RST draws a challenge ACK; anything else is dropped (RFC 5961 sec. 3.2).
//! - SYN: in a synchronized state draws a challenge ACK (RFC 5961 sec. 4.2),
//!   except the peer's retransmitted SYN in SYN_RCVD (our SYN-ACK was lost).
//! - Sequence acceptability: a segment consuming a number must lie in the
//!   receive window (or be the FIN at RCV.NXT); an old one is a duplicate
//!   (answered with an ACK carrying a DSACK). An old zero-length segment (a
//!   probe or a reordered ACK) is answered with an ACK, at most one per
//!   `min_rto / 2` (RFC 5961 sec. 7; Linux `tcp_invalid_ratelimit`).
//! - ACK field: an ACK of data not yet sent, or older than a window, draws a
//!   challenge ACK (RFC 5961 sec. 5.2). At most `challenge_ack_limit`
//!   challenge ACKs per second (RFC 5961 sec. 7).

use std::time::{Duration, Instant};

use super::{Connection, ConnectionError, State, MAX_WINDOW};
use crate::wire::EspRepr;

/// Rate-limit state of challenge ACKs and answers to old segments.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AckLimits {
    /// Start of the current one-second challenge-ACK interval.
    challenge_start: Option<Instant>,
    /// Challenge ACKs sent in it.
    challenge_count: u32,
    /// When an old zero-length segment was last answered.
    old_answered: Option<Instant>,
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
        if seg_len == 0 {
            if repr.seq.diff(self.recv.nxt) < 0 {
                // Old sequence number: a zero-window or keepalive probe, or
                // a reordered ACK. Answer with an ACK (thesis 5.2.10 step 1),
                // throttled: a peer whose SND.NXT is behind our RCV.NXT
                // (after a forged FIN) sends only such segments, and
                // answering each would ping-pong ACKs with its answers to
                // ours (RFC 5961 sec. 7).
                self.answer_old_segment(now);
                self.touch_peer();
                return 0;
            }
        } else if !(in_window || f.fin() && repr.seq == self.recv.nxt) {
            if repr.seq.diff(self.recv.nxt) < 0 {
                self.stats.duplicates += 1;
                self.ack.dsack = Some(repr.seq);
            } else {
                self.stats.dropped += 1;
            }
            self.ack.now = true;
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
        self.touch_peer();
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
            tracing::trace!(why, "challenge ACK rate-limited");
        }
    }

    /// Answers an old zero-length segment with an ACK, at most once per
    /// `min_rto / 2` (so every zero-window or keepalive probe, sent at least
    /// one RTO apart, is still answered).
    fn answer_old_segment(&mut self, now: Instant) {
        let interval = (self.cfg.rto.min / 2).max(Duration::from_micros(1));
        if let Some(t) = self.limits.old_answered {
            if now.saturating_duration_since(t) < interval {
                return;
            }
        }
        self.limits.old_answered = Some(now);
        self.ack.now = true;
    }
}
