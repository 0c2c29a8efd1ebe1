//! Failure detection, sans-IO: which peers to probe and which to declare
//! failed, from what was heard from them and when.
//!
//! Source: the LAM journal's advice to detect a down host with a short
//! echo timeout rather than a long connect, and the thesis's Open MPI port
//! (ch. 6.3), which checks reachability with EDP echo. Departure: the probe
//! is a comm `PROBE` control message (`control.rs`), one CTP message the
//! peer's CTP endpoint confirms, not an EDP control-port echo. The echo is
//! answered by whichever process on the host holds the control-port lease
//! (`edp::echo`), so it shows the *host* alive; the confirmation comes from
//! the rank's own endpoint (its runtime's service thread, even while the
//! application computes), so it shows the *rank* alive, and it works over
//! CTP's UDP transport too. The probe is still one small frame with a
//! short timeout, as LAM recommends.
//!
//! The rule, with `S` = `CommConfig::suspect_timeout`, `T` =
//! `CommConfig::failure_timeout` (`S <= T`; `S` is `T` when not set) and
//! the probe interval `I = S / 4`:
//! - a peer is *watched* while this rank waits on it: data queued or
//!   unconfirmed toward it, a receive naming it, or a receive from any
//!   source once the peer was in contact (the caller decides, see
//!   `State::liveness_tick`);
//! - a watched peer not heard from (a message, or a confirmation of
//!   anything sent to it) for `I` is probed, once per silence: CTP resends
//!   the probe on its own timer until it is confirmed (while CTP suspects
//!   the peer, at least once per `ctp::Config::max_probe_period`, so a
//!   learning switch relearns the path as soon as it is back);
//! - a peer is *suspected* once it has been silent for `S` and the first
//!   probe of its silence has gone unanswered for `S / 2`: the application
//!   can see it (`Communicator::unresponsive`), nothing fails, and the
//!   suspicion ends when the peer is heard again. CTP's `Unresponsive`
//!   delivery (its own suspicion of a destination) suspects the peer too;
//! - a peer is declared *failed* once it has been silent for `T` and the
//!   first probe of its silence has gone unanswered for `T / 2` (RFC
//!   5482's user timeout, as ESP's and CTP's). A peer that dies while
//!   watched is thus suspected `S` and declared failed `T` after its last
//!   sign of life, plus at most one check period (`S / 32`). A peer
//!   unwatched (for instance while the application computes without
//!   calling the communicator) is never suspected or declared failed for
//!   that time: its first probe must go unanswered for `S / 2` or `T / 2`
//!   first. A peer never heard from is suspected `S / 2` and declared
//!   failed `T / 2` after its first probe;
//! - no peer is declared failed while the communicator holds deliveries
//!   back (its unexpected queue is full, `State::holding`): the peer's
//!   last messages may wait in CTP's queue, so its silence proves nothing;
//! - a failed peer is probed every `S` (the previous probe cancelled), so
//!   that a restarted rank at the same address learns of this rank and
//!   announces its new incarnation (`PROBE` answered by `PROBE`).
//!
//! With `S = T` (`suspect_timeout` of `None`) this is the rule before
//! suspicion existed: a silent peer is failed at its first verdict.

use std::time::{Duration, Instant};

/// What the caller knows of a peer at a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// Nothing waits on it: no probes.
    Idle,
    /// Something waits on it: probe when silent, declare failed when the
    /// probe stays unanswered.
    Live,
    /// Declared failed: probe slowly for a restart.
    Failed,
}

/// The verdict of a check for one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Send a probe.
    Probe,
    /// Send a probe after cancelling the previous one (a failed peer).
    Reprobe,
    /// Suspect the peer (once per silence); the value is its silence.
    Suspect(Duration),
    /// Declare the peer failed; the value is its silence.
    Fail(Duration),
}

#[derive(Debug, Clone, Copy, Default)]
struct PeerLive {
    last_heard: Option<Instant>,
    /// When the first probe since the peer was last heard went.
    first_probe: Option<Instant>,
    last_probe: Option<Instant>,
    /// When the peer became suspected (this silence), if it is.
    suspected_at: Option<Instant>,
}

/// The failure detector of one rank (see the module documentation).
#[derive(Debug)]
pub(crate) struct Liveness {
    /// `T`: silence until a peer is declared failed; `None`: detection off.
    timeout: Option<Duration>,
    /// `S`: silence until a peer is suspected, at most `T`.
    suspect: Duration,
    /// The time of the caller's latest step (`set_now`).
    now: Option<Instant>,
    next_check: Option<Instant>,
    peers: Vec<PeerLive>,
}

impl Liveness {
    /// A detector for `size` peers: failed after `timeout` (`None` or
    /// zero turns detection off), suspected after `suspect` (at most
    /// `timeout`; `None`: `timeout`).
    pub fn new(size: usize, timeout: Option<Duration>, suspect: Option<Duration>) -> Self {
        let timeout = timeout.filter(|t| !t.is_zero());
        let t = timeout.unwrap_or_default();
        Self {
            timeout,
            suspect: suspect.filter(|s| !s.is_zero()).map_or(t, |s| s.min(t)),
            now: None,
            next_check: None,
            peers: vec![PeerLive::default(); size],
        }
    }

    /// Adds a peer (the next index), never heard from.
    pub fn add_peer(&mut self) {
        self.peers.push(PeerLive::default());
    }

    /// The probe interval `I = S / 4`.
    fn interval(&self) -> Duration {
        self.suspect / 4
    }

    /// The time of the caller's current step: answers (`heard`) are
    /// stamped with it (the state learns of them without a clock).
    pub fn set_now(&mut self, now: Instant) {
        self.now = Some(now);
    }

    /// `rank` answered (a message or a confirmation), at the time of the
    /// current step; before any step, at the first check. Returns how
    /// long it had been suspected, if it was.
    pub fn heard(&mut self, rank: usize) -> Option<Duration> {
        let now = self.now;
        let p = &mut self.peers[rank];
        p.last_heard = now.or(p.last_heard);
        p.first_probe = None;
        let since = p.suspected_at.take()?;
        Some(now.map_or(Duration::ZERO, |n| n.saturating_duration_since(since)))
    }

    /// Suspects `rank` (CTP found it silent) unless it already is; true
    /// if it was not.
    pub fn suspect(&mut self, rank: usize) -> bool {
        let now = self.now;
        let p = &mut self.peers[rank];
        if p.suspected_at.is_some() {
            return false;
        }
        p.suspected_at = now.or(Some(Instant::now()));
        true
    }

    /// How long `rank` has been silent at the current step, if it is
    /// suspected (since it was last heard; never heard: since suspected).
    pub fn suspected(&self, rank: usize) -> Option<Duration> {
        let p = &self.peers[rank];
        let since = p.suspected_at?;
        let from = p.last_heard.map_or(since, |h| h.min(since));
        Some(
            self.now
                .map_or(Duration::ZERO, |n| n.saturating_duration_since(from)),
        )
    }

    /// Forgets what was known of `rank` (declared failed, or a new
    /// incarnation): its next probe starts a new count.
    pub fn reset(&mut self, rank: usize) {
        self.peers[rank] = PeerLive::default();
    }

    /// When the next check is due (`None`: detection off, or no check
    /// yet: the first one is due at once).
    pub fn next_check(&self) -> Option<Instant> {
        self.timeout.and(self.next_check)
    }

    /// True when a check is due at `now` (one every `S / 32`, at least
    /// 1 ms apart).
    pub fn due(&self, now: Instant) -> bool {
        self.timeout.is_some() && self.next_check.is_none_or(|t| now >= t)
    }

    /// One check at `now`: `watch(rank)` says what waits on each peer;
    /// `out` gets the verdicts.
    pub fn check(
        &mut self,
        now: Instant,
        mut watch: impl FnMut(usize) -> Watch,
        out: &mut Vec<(usize, Verdict)>,
    ) {
        let Some(t) = self.timeout else {
            return;
        };
        let (s, i) = (self.suspect, self.interval());
        self.now = Some(now);
        self.next_check = Some(now + (s / 32).max(Duration::from_millis(1)));
        for (rank, p) in self.peers.iter_mut().enumerate() {
            match watch(rank) {
                Watch::Idle => {}
                Watch::Failed => {
                    if p.last_probe.is_none_or(|at| now >= at + s) {
                        p.last_probe = Some(now);
                        out.push((rank, Verdict::Reprobe));
                    }
                }
                Watch::Live => {
                    if p.last_heard.is_some_and(|h| now < h + i) {
                        continue;
                    }
                    let Some(f) = p.first_probe else {
                        p.first_probe = Some(now);
                        p.last_probe = Some(now);
                        out.push((rank, Verdict::Probe));
                        continue;
                    };
                    let since = p.last_heard.map_or(now - f, |h| now - h);
                    let silent_for =
                        |d: Duration| now >= f + d / 2 && p.last_heard.is_none_or(|h| now >= h + d);
                    if silent_for(t) {
                        out.push((rank, Verdict::Fail(since)));
                    } else if p.suspected_at.is_none() && silent_for(s) {
                        p.suspected_at = Some(now);
                        out.push((rank, Verdict::Suspect(since)));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_silent_watched_peer_is_probed_then_failed_within_the_timeout() {
        let t0 = Instant::now();
        let mut l = Liveness::new(2, Some(ms(1000)), None);
        l.set_now(t0);
        l.heard(1);
        let mut out = Vec::new();
        // Heard: nothing for rank 1; rank 0 idle.
        l.check(t0, |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert!(out.is_empty(), "{out:?}");
        l.check(t0 + ms(100), |_| Watch::Live, &mut out);
        // Rank 0 never heard: probed at once.
        assert_eq!(out, vec![(0, Verdict::Probe)]);
        out.clear();
        // Rank 1 silent for the interval: one probe.
        l.check(t0 + ms(250), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Probe)]);
        out.clear();
        // No second probe while the first is outstanding, no failure
        // before T of silence.
        l.check(t0 + ms(999), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert!(out.is_empty(), "{out:?}");
        l.check(t0 + ms(1000), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Fail(ms(1000)))]);
        out.clear();
        // Rank 0, never heard, probed at 100: failed once that probe went
        // unanswered for T/2.
        l.check(t0 + ms(1000), |r| [Watch::Live, Watch::Failed][r], &mut out);
        assert_eq!(out, vec![(0, Verdict::Fail(ms(900)))]);
    }

    #[test]
    fn an_answer_ends_the_count_and_idle_time_does_not_count() {
        let t0 = Instant::now();
        let mut l = Liveness::new(2, Some(ms(1000)), None);
        let mut out = Vec::new();
        l.check(t0, |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Probe)]);
        out.clear();
        l.set_now(t0 + ms(450));
        l.heard(1);
        l.check(t0 + ms(600), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert!(out.is_empty(), "{out:?}");
        // Silent again for the interval: a new probe, no failure.
        l.check(t0 + ms(700), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Probe)]);
        out.clear();
        l.set_now(t0 + ms(800));
        l.heard(1);
        // Long unwatched (the application computed): a probe, and no
        // failure until it went unanswered for T/2.
        l.check(t0 + ms(60_000), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Probe)]);
        out.clear();
        l.check(t0 + ms(60_499), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert!(out.is_empty(), "{out:?}");
        l.check(t0 + ms(60_500), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Fail(ms(59_700)))]);
    }

    #[test]
    fn failed_peers_are_reprobed_every_timeout_and_off_means_off() {
        let t0 = Instant::now();
        let mut l = Liveness::new(1, Some(ms(400)), None);
        let mut out = Vec::new();
        for k in 0..9 {
            l.check(t0 + ms(100 * k), |_| Watch::Failed, &mut out);
        }
        assert_eq!(out, vec![(0, Verdict::Reprobe); 3]);
        let off = Liveness::new(1, None, Some(ms(100)));
        assert!(!off.due(t0));
        let zero = Liveness::new(1, Some(Duration::ZERO), None);
        assert!(!zero.due(t0));
    }

    #[test]
    fn suspected_at_the_suspicion_bound_failed_only_at_the_timeout() {
        let t0 = Instant::now();
        let live = |_| Watch::Live;
        let mut l = Liveness::new(1, Some(ms(60_000)), Some(ms(3000)));
        l.set_now(t0);
        l.heard(0);
        let mut out = Vec::new();
        // Probed after S/4 of silence.
        l.check(t0 + ms(749), live, &mut out);
        assert!(out.is_empty(), "{out:?}");
        l.check(t0 + ms(750), live, &mut out);
        assert_eq!(out, vec![(0, Verdict::Probe)]);
        out.clear();
        // Suspected at S, once.
        l.check(t0 + ms(2999), live, &mut out);
        assert!(out.is_empty() && l.suspected(0).is_none(), "{out:?}");
        l.check(t0 + ms(3000), live, &mut out);
        assert_eq!(out, vec![(0, Verdict::Suspect(ms(3000)))]);
        out.clear();
        assert_eq!(l.suspected(0), Some(ms(3000)));
        l.check(t0 + ms(30_000), live, &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(l.suspected(0), Some(ms(30_000)));
        // Heard again: the suspicion ends, the count restarts.
        l.set_now(t0 + ms(40_000));
        assert_eq!(l.heard(0), Some(ms(37_000)));
        assert_eq!(l.suspected(0), None);
        l.check(t0 + ms(40_750), live, &mut out);
        assert_eq!(out, vec![(0, Verdict::Probe)]);
        out.clear();
        l.check(t0 + ms(43_000), live, &mut out);
        assert_eq!(out, vec![(0, Verdict::Suspect(ms(3000)))]);
        out.clear();
        // Failed only at T of silence.
        l.check(t0 + ms(99_999), live, &mut out);
        assert!(out.is_empty(), "{out:?}");
        l.check(t0 + ms(100_000), live, &mut out);
        assert_eq!(out, vec![(0, Verdict::Fail(ms(60_000)))]);
        out.clear();
        // A failed peer is reprobed every S.
        l.reset(0);
        for k in 0..4 {
            l.check(t0 + ms(100_000 + 1000 * k), |_| Watch::Failed, &mut out);
        }
        assert_eq!(out, vec![(0, Verdict::Reprobe); 2]);
        // CTP's suspicion counts once, and ends when the peer is heard.
        let mut c = Liveness::new(1, Some(ms(60_000)), Some(ms(3000)));
        c.set_now(t0);
        assert!(c.suspect(0));
        assert!(!c.suspect(0));
        c.set_now(t0 + ms(500));
        assert_eq!(c.suspected(0), Some(ms(500)));
        assert_eq!(c.heard(0), Some(ms(500)));
    }
}
