//! Probes when nothing is in flight: the persist timer (zero-window probes,
//! RFC 1122 sec. 4.2.2.17, RFC 9293 sec. 3.8.6.1) and keepalive (RFC 1122
//! sec. 4.2.3.6), two separate timers ([`Timer::Persist`],
//! [`Timer::KeepAlive`]) of which at most one is armed: persisting takes
//! precedence.
//!
//! - Persist: data waits, nothing is in flight and the peer's window is
//!   closed; the probe is a pure ACK at SND.NXT - 1 that draws the peer's
//!   window. Intervals: the base RTO doubled per probe, at most `max_rto`;
//!   the backoff is cleared when the window opens.
//! - Keepalive: an idle established connection with `keepalive` set sends
//!   the same probe after `keepalive` of silence, then at the base RTO
//!   doubled per unanswered probe.
//! - Unanswered probes count as retransmissions: after
//!   `max_retransmissions` the peer is suspected (or, under the thesis's
//!   rule, the connection times out), and the connection ends at the user
//!   timeout, so even a pure receiver detects a dead peer (`liveness.rs`).
//!   The interval stops doubling at the maximum RTO, so a suspected peer
//!   is probed once per maximum RTO. Any acceptable segment from the peer
//!   answers them.

use std::time::Instant;

use super::timer::Timer;
use super::{Connection, State};

/// Probe state.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Probes {
    /// A probe is due in the next `poll_transmit`.
    pub(crate) now: bool,
    /// Probes sent since the peer was last heard from.
    pub(crate) unanswered: u32,
    /// Doublings of the persist interval since the window last opened.
    pub(crate) persist_backoff: u32,
}

impl Connection {
    /// Zero-window probing is needed: nothing in flight, data waiting, the
    /// window closed.
    pub(super) fn persist_needed(&self) -> bool {
        self.recovery.is_empty()
            && self.state.is_synchronized()
            && self.recovery.nxt().diff(self.snd_wnd.edge) >= 0
            && self.send.unsent() > 0
    }

    /// Keepalive probing is needed: configured, nothing in flight, and the
    /// connection can still hear from the peer.
    pub(super) fn keepalive_needed(&self) -> bool {
        self.cfg.keepalive.is_some()
            && self.recovery.is_empty()
            && matches!(
                self.state,
                State::Established | State::CloseWait | State::FinWait2
            )
    }

    /// The persist timer expired at `now`.
    pub(super) fn on_persist_timer(&mut self, now: Instant) {
        if !self.persist_needed() {
            return;
        }
        if self.probe_limit_reached(now) {
            return;
        }
        self.probes.unanswered += 1;
        self.probes.persist_backoff += 1;
        self.probes.now = true;
        tracing::debug!(
            probes = self.probes.unanswered,
            "zero-window probe (persist timer)"
        );
    }

    /// The keepalive timer expired at `now`.
    pub(super) fn on_keepalive_timer(&mut self, now: Instant) {
        if !self.keepalive_needed() {
            return;
        }
        if self.probe_limit_reached(now) {
            return;
        }
        self.probes.unanswered += 1;
        self.probes.now = true;
        tracing::debug!(probes = self.probes.unanswered, "keepalive probe");
    }

    /// Before a probe at `now`: the first unanswered probe starts a
    /// stall; after `max_retransmissions` unanswered probes the peer is
    /// suspected (the thesis's rule: dead); a stall of the user timeout
    /// ends the connection (`liveness.rs`). Returns true when it ended.
    fn probe_limit_reached(&mut self, now: Instant) -> bool {
        if self.probes.unanswered == 0 {
            self.liveness.stall(now);
        }
        if self.probes.unanswered >= self.cfg.max_retransmissions
            && self.retransmissions_exhausted(now, "probes unanswered")
        {
            return true;
        }
        self.user_timeout_passed(now)
    }

    /// Arms the persist or keepalive timer when needed (and not armed),
    /// stops them when not: called after every event.
    #[inline]
    pub(super) fn update_probe_timers(&mut self, now: Instant) {
        if !self.recovery.is_empty() {
            // Something in flight: the retransmission timer watches the
            // peer, no probe is needed (the common case, kept cheap).
            self.timers.stop(Timer::Persist);
            self.timers.stop(Timer::KeepAlive);
            self.probes.now = false;
            return;
        }
        let persist = self.persist_needed();
        let keepalive = !persist && self.keepalive_needed();
        if !persist {
            self.timers.stop(Timer::Persist);
        }
        if !keepalive {
            self.timers.stop(Timer::KeepAlive);
        }
        if !(persist || keepalive) {
            if !persist {
                self.probes.now = false;
            }
            return;
        }
        if self.probes.now {
            return;
        }
        let base = self.rtt.base();
        let max = self.cfg.rto.max;
        let backoff = |n: u32| base.saturating_mul(1u32 << n.min(20)).min(max);
        if persist {
            if !self.timers.is_armed(Timer::Persist) {
                let n = self.probes.persist_backoff.max(self.probes.unanswered);
                self.timers.set(Timer::Persist, now + backoff(n));
            }
        } else if !self.timers.is_armed(Timer::KeepAlive) {
            let interval = if self.probes.unanswered == 0 {
                self.cfg.keepalive.unwrap_or(max)
            } else {
                backoff(self.probes.unanswered)
            };
            self.timers.set(Timer::KeepAlive, now + interval);
        }
    }

    /// The peer was heard from at `now` (an acceptable segment): its
    /// probes are answered and the keepalive interval restarts; a stall
    /// of probes (nothing in flight) ends.
    #[inline]
    pub(super) fn touch_peer(&mut self, now: Instant) {
        self.probes.unanswered = 0;
        self.timers.stop(Timer::KeepAlive);
        if self.liveness.is_stalled() {
            if self.recovery.is_empty() {
                self.on_progress(now);
            } else if self.liveness() != super::Liveness::Responsive {
                // A suspected peer is heard again (its probe crossed the
                // path that came back): retransmit now rather than at the
                // next maximum RTO.
                self.timers.set(Timer::Rto, now);
            }
        }
    }
}
