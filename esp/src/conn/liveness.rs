//! Whether the peer answers: suspicion after unanswered retransmissions,
//! death after the user timeout (RFC 5482's idea).
//!
//! - A connection is *stalled* from the moment it waits for the peer
//!   without progress: the send time of the oldest unacknowledged segment
//!   when its retransmission timer first expires (Linux's
//!   `retrans_stamp`), or the first keepalive or zero-window probe.
//!   Progress (a cumulative ACK of new data; for probes, any acceptable
//!   segment) ends the stall.
//! - After `max_retransmissions` unanswered retransmissions of a segment
//!   (or probes) the peer is *suspected*: [`Liveness::Unresponsive`],
//!   readiness `Ready::UNRESPONSIVE` at the socket layer, a `warn` trace
//!   event. The connection keeps retransmitting at the maximum RTO (1 s by
//!   default) and keeps probing, so that a learning switch that lost the
//!   path relearns it from our frames once the outage ends.
//! - With [`TransportConfig::user_timeout`](crate::TransportConfig) set
//!   (the default), the connection is *dead* once it stalled for that
//!   long: [`ConnectionError::UserTimeout`](super::ConnectionError). The
//!   check runs at each retransmission timeout or probe, so death comes
//!   within one maximum RTO after the user timeout. Without it (`None`),
//!   the thesis's rule: dead at suspicion (after `max_retransmissions`,
//!   `ESP_MAX_RETRANSMITS`).
//!
//! Departure from RFC 5482: the RFC's timer covers transmitted data only;
//! here unanswered keepalive and persist probes stall the connection too
//! (as Linux's `TCP_USER_TIMEOUT` does), so a pure receiver whose peer
//! vanished also ends at the user timeout.

use std::time::{Duration, Instant};

/// Whether the peer answers, as the application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The peer answers (or nothing was asked of it).
    Responsive,
    /// The peer left `max_retransmissions` retransmissions (or probes)
    /// unanswered: it is suspected, not dead; the connection keeps trying.
    Unresponsive {
        /// When the suspicion began.
        since: Instant,
        /// When the connection will be declared dead unless the peer
        /// answers first (the stall's start plus the user timeout; `None`
        /// without a user timeout).
        dead_at: Option<Instant>,
    },
}

/// The liveness state of one connection (see the module documentation).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tracker {
    /// Start of the current stall (no progress since).
    stalled_since: Option<Instant>,
    /// Start of the current suspicion.
    suspected_since: Option<Instant>,
    /// Suspicions so far.
    pub(crate) episodes: u64,
    /// Time suspected in finished episodes, us.
    pub(crate) suspected_us: u64,
}

impl Tracker {
    /// Whether the connection waits for the peer without progress.
    #[inline]
    pub(crate) fn is_stalled(&self) -> bool {
        self.stalled_since.is_some()
    }

    /// The connection waits for the peer since `since` (kept if it already
    /// did).
    pub(crate) fn stall(&mut self, since: Instant) {
        self.stalled_since.get_or_insert(since);
    }

    /// The peer is suspected at `now`; true when this starts a suspicion.
    pub(crate) fn suspect(&mut self, now: Instant) -> bool {
        if self.suspected_since.is_some() {
            return false;
        }
        self.suspected_since = Some(now);
        self.episodes += 1;
        true
    }

    /// Progress at `now`: the stall and any suspicion end. Returns how
    /// long the suspicion lasted, if there was one.
    pub(crate) fn progress(&mut self, now: Instant) -> Option<Duration> {
        self.stalled_since = None;
        let since = self.suspected_since.take()?;
        let d = now.saturating_duration_since(since);
        self.suspected_us = self
            .suspected_us
            .saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Some(d)
    }

    /// When the connection dies under `user_timeout` (`None`: not stalled,
    /// or no user timeout).
    pub(crate) fn dead_at(&self, user_timeout: Option<Duration>) -> Option<Instant> {
        Some(netcore::time::later(self.stalled_since?, user_timeout?))
    }

    /// The application's view.
    pub(crate) fn liveness(&self, user_timeout: Option<Duration>) -> Liveness {
        match self.suspected_since {
            None => Liveness::Responsive,
            Some(since) => Liveness::Unresponsive {
                since,
                dead_at: self.dead_at(user_timeout),
            },
        }
    }
}

impl super::Connection {
    /// Whether the peer answers (see the module documentation): a
    /// connection that stopped hearing from its peer is
    /// [`Liveness::Unresponsive`] after `max_retransmissions`
    /// retransmissions or probes, long before it is declared dead at the
    /// user timeout.
    pub fn liveness(&self) -> Liveness {
        self.liveness.liveness(self.cfg.user_timeout)
    }

    /// `max_retransmissions` retransmissions (or probes) went unanswered at
    /// `now`: the thesis's rule ends the connection; under a user timeout
    /// the peer is suspected and the connection goes on. Returns true when
    /// the connection died.
    pub(super) fn retransmissions_exhausted(&mut self, now: Instant, what: &str) -> bool {
        let Some(ut) = self.cfg.user_timeout else {
            tracing::debug!("{what}: retransmission limit reached");
            self.timed_out();
            return true;
        };
        if self.liveness.suspect(now) {
            self.stats.unresponsive += 1;
            tracing::warn!(
                local_port = self.local.1,
                remote_port = self.remote.1,
                peer = %self.remote.0,
                retransmissions = self.cfg.max_retransmissions,
                user_timeout_s = ut.as_secs_f64(),
                "ESP peer unresponsive ({what}): suspected, not dead; retrying every {} ms until the user timeout",
                self.cfg.rto.max.as_millis()
            );
        }
        false
    }

    /// Ends the connection if it stalled for the user timeout by `now`;
    /// returns true when it did.
    pub(super) fn user_timeout_passed(&mut self, now: Instant) -> bool {
        let Some(ut) = self.cfg.user_timeout else {
            return false;
        };
        if self.liveness.dead_at(Some(ut)).is_none_or(|t| now < t) {
            return false;
        }
        tracing::warn!(
            local_port = self.local.1,
            remote_port = self.remote.1,
            peer = %self.remote.0,
            user_timeout_s = ut.as_secs_f64(),
            "ESP connection dead: no progress for the user timeout"
        );
        self.queue_reset();
        self.die(super::ConnectionError::UserTimeout(ut));
        true
    }

    /// The peer made progress at `now` (a cumulative ACK of new data, or
    /// an answer to a probe): the stall ends, and a suspicion with it.
    #[cold]
    pub(super) fn on_progress(&mut self, now: Instant) {
        if let Some(d) = self.liveness.progress(now) {
            tracing::warn!(
                local_port = self.local.1,
                remote_port = self.remote.1,
                peer = %self.remote.0,
                suspected_ms = d.as_millis() as u64,
                "ESP peer responsive again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_keeps_its_start_and_ends_with_progress() {
        let t0 = Instant::now();
        let ut = Some(Duration::from_secs(60));
        let mut l = Tracker::default();
        assert_eq!(l.dead_at(ut), None);
        l.stall(t0);
        l.stall(t0 + Duration::from_secs(5));
        assert_eq!(l.dead_at(ut), Some(t0 + Duration::from_secs(60)));
        assert_eq!(l.dead_at(None), None);
        assert_eq!(l.liveness(ut), Liveness::Responsive);
        assert!(l.suspect(t0 + Duration::from_secs(1)));
        assert!(!l.suspect(t0 + Duration::from_secs(2)), "one episode");
        assert_eq!(
            l.liveness(ut),
            Liveness::Unresponsive {
                since: t0 + Duration::from_secs(1),
                dead_at: Some(t0 + Duration::from_secs(60))
            }
        );
        assert_eq!(
            l.progress(t0 + Duration::from_secs(4)),
            Some(Duration::from_secs(3))
        );
        assert!(!l.is_stalled());
        assert_eq!(l.liveness(ut), Liveness::Responsive);
        assert_eq!((l.episodes, l.suspected_us), (1, 3_000_000));
        assert_eq!(l.progress(t0 + Duration::from_secs(5)), None);
    }
}
