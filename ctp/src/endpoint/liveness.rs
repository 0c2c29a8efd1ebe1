//! Suspect is not dead: a destination that stops confirming is suspected
//! at the spec's "not confirmed" deadline and declared dead only after the
//! user timeout (`Config::user_timeout`, RFC 5482's idea; not in the CTP
//! spec, wire-compatible).
//!
//! At a packet's spec error deadline (`max_resends` resends, `(2^9 - 1) x
//! T` after its first send, at least `min_error_delay`):
//! - if the destination is *silent* (it confirmed nothing for at least half
//!   of that span), the packet's error is postponed to the moment the
//!   destination will have been silent for the user timeout (the
//!   destination's clock: from its last confirmation, or from the first
//!   packet sent after it; later messages do not restart it), and the
//!   destination is *suspected*: one [`ErrorType::Unresponsive`] delivery
//!   per episode (code: milliseconds since its last confirmation), a
//!   `warn` trace event, `Stats::unresponsive`. Resends to a suspected
//!   destination come at most `max_probe_period` apart, so a learning
//!   switch relearns the path within that of the outage's end;
//! - a postponed packet whose destination confirms again gets a fresh
//!   spec span from that moment (a packet the live peer keeps refusing
//!   still fails);
//! - otherwise the spec's rule: [`ErrorType::NotConfirmed`].
//!
//! The first confirmation from a suspected destination ends the suspicion
//! (`Stats::recovered`, a trace event). With `user_timeout` `None` the
//! spec's rule applies unchanged. NoResend packets (pings) keep the spec's
//! rule: their sender asked for no retry.

use std::time::{Duration, Instant};

use super::{Endpoint, ErrorType, MsgId, PeerAddr, Stats};
use crate::peer::SendTiming;
use crate::sender::{Dest, PktPhase, SessionId};
use netcore::time::later;

impl<P: PeerAddr> Endpoint<P> {
    /// Under a user timeout, handles the spec error deadline of packet `i`
    /// of `key` (to `dest`) at `now` when the destination is silent or back
    /// from a suspicion: postpones the error and returns true. False: the
    /// spec's rule applies (the caller reports "not confirmed").
    pub(super) fn postpone_error(
        &mut self,
        now: Instant,
        key: MsgId,
        i: u32,
        dest: Dest<P>,
    ) -> bool {
        let Some(ut) = self.cfg.user_timeout else {
            return false;
        };
        let Some(m) = self.sent.get_mut(&key) else {
            return false;
        };
        let (session, command) = (m.session, m.command);
        let p = m.pkt_mut(i);
        if p.resend_at.is_none() || p.phase != PktPhase::InFlight {
            return false; // NoResend: the spec's rule
        }
        let span = self.cfg.error_after(p.base);
        let t = &mut self.send_sessions.at_mut(session).timing;
        let heard = t.last_confirm;
        let silent = heard.is_none_or(|c| now.saturating_duration_since(c) >= span / 2);
        let deadline = if silent {
            // Dead once silent for the user timeout: the destination's
            // clock, which a message sent after the silence began does not
            // restart.
            let quiet_from = *t
                .stall_start
                .get_or_insert_with(|| heard.map_or(p.first_sent, |c| c.max(p.first_sent)));
            later(quiet_from, ut)
        } else if p.postponed {
            // The destination is back: a fresh spec span from its return.
            later(t.recovered_at.unwrap_or(now), span)
        } else {
            return false;
        };
        if now >= deadline {
            return false;
        }
        p.postponed = true;
        p.error_at = Some(deadline);
        let cap = later(now, self.cfg.max_probe_period);
        p.resend_at = p.resend_at.map(|r| r.min(cap));
        p.update_due();
        if silent {
            let quiet = now.saturating_duration_since(heard.unwrap_or(p.first_sent));
            self.suspect(now, session, dest, command, key, quiet, deadline);
        }
        true
    }

    /// `dest` is suspected at `now` (silent for `quiet`; dead at
    /// `dead_at` unless it confirms first): once per episode, an
    /// [`ErrorType::Unresponsive`] delivery and a trace event.
    #[allow(clippy::too_many_arguments)]
    fn suspect(
        &mut self,
        now: Instant,
        session: SessionId,
        dest: Dest<P>,
        command: u16,
        key: MsgId,
        quiet: Duration,
        dead_at: Instant,
    ) {
        let t = &mut self.send_sessions.at_mut(session).timing;
        if t.suspected_since.is_some() {
            return;
        }
        t.suspected_since = Some(now);
        self.stats.unresponsive += 1;
        let peer = match dest {
            Dest::Peer(p) => Some(p),
            Dest::Broadcast => self.broadcast_addr,
        };
        tracing::warn!(
            ?peer,
            silent_ms = quiet.as_millis() as u64,
            dead_in_ms = dead_at.saturating_duration_since(now).as_millis() as u64,
            "CTP peer unresponsive: suspected, not dead; resending every {} ms until the user timeout",
            self.cfg.max_probe_period.as_millis()
        );
        self.error(
            now,
            ErrorType::Unresponsive,
            i64::try_from(quiet.as_millis()).unwrap_or(i64::MAX),
            peer,
            Some(command),
            Some(key),
        );
    }

    /// Whether packets to a suspected destination are resent at most
    /// `max_probe_period` apart.
    pub(super) fn probe_cap(&self, session: SessionId) -> Option<Duration> {
        self.send_sessions
            .list_at(session)
            .timing
            .suspected_since
            .map(|_| self.cfg.max_probe_period)
    }

    /// Since when `peer` is suspected (see the module documentation), if
    /// it is.
    pub fn unresponsive_since(&self, peer: P) -> Option<Instant> {
        self.send_sessions
            .get(&Dest::Peer(peer))?
            .timing
            .suspected_since
    }
}

/// A confirmation from a destination with timing `t` arrived at `now`: a
/// suspicion ends (counted in `stats`).
#[cold]
pub(super) fn heard_again(t: &mut SendTiming, stats: &mut Stats, now: Instant) {
    t.stall_start = None;
    let Some(since) = t.suspected_since.take() else {
        return;
    };
    t.recovered_at = Some(now);
    stats.recovered += 1;
    tracing::warn!(
        suspected_ms = now.saturating_duration_since(since).as_millis() as u64,
        "CTP peer responsive again"
    );
}
