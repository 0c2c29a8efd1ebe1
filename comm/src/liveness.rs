//! Failure detection, sans-IO: which peers to probe and which to declare
//! failed, from what was heard from them and when (issue 12 item 5).
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
//! The rule, with `T` = `CommConfig::failure_timeout` and the probe
//! interval `I = T / 4`:
//! - a peer is *watched* while this rank waits on it: data queued or
//!   unconfirmed toward it, a receive naming it, or a receive from any
//!   source once the peer was in contact (the caller decides, see
//!   `State::liveness_tick`);
//! - a watched peer not heard from (a message, or a confirmation of
//!   anything sent to it) for `I` is probed, once per silence: CTP resends
//!   the probe on its own timer until it is confirmed;
//! - a peer is declared failed when the first probe of its silence has
//!   gone unanswered for `T - I`. Since the silence itself started at most
//!   `I` before that probe, a peer that dies while watched is declared
//!   failed at most `T` (plus one check period, `I / 4`) after its last
//!   sign of life. A peer unwatched (for instance while the application
//!   computes without calling the communicator) is never declared failed
//!   for that time: the first probe starts the count;
//! - a failed peer is probed every `T` (the previous probe cancelled), so
//!   that a restarted rank at the same address learns of this rank and
//!   announces its new incarnation (`PROBE` answered by `PROBE`).

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
    /// Declare the peer failed; the value is its silence.
    Fail(Duration),
}

#[derive(Debug, Clone, Copy, Default)]
struct PeerLive {
    /// Heard from since the last check (the state learns of answers
    /// without a clock; the check stamps them).
    answered: bool,
    last_heard: Option<Instant>,
    /// When the first probe since the peer was last heard went.
    first_probe: Option<Instant>,
    last_probe: Option<Instant>,
}

/// The failure detector of one rank (see the module documentation).
#[derive(Debug)]
pub(crate) struct Liveness {
    timeout: Option<Duration>,
    next_check: Option<Instant>,
    peers: Vec<PeerLive>,
}

impl Liveness {
    /// A detector for `size` peers; `timeout` `None` turns it off.
    pub fn new(size: usize, timeout: Option<Duration>) -> Self {
        Self {
            timeout: timeout.filter(|t| !t.is_zero()),
            next_check: None,
            peers: vec![PeerLive::default(); size],
        }
    }

    /// The probe interval `I = T / 4`.
    fn interval(t: Duration) -> Duration {
        t / 4
    }

    /// `rank` answered (a message or a confirmation); stamped with the
    /// time of the next check, so an answer counts at most one check
    /// period late (it only delays a probe).
    pub fn heard(&mut self, rank: usize) {
        self.peers[rank].answered = true;
    }

    /// Forgets what was known of `rank` (declared failed, or a new
    /// incarnation): its next probe starts a new count.
    pub fn reset(&mut self, rank: usize) {
        self.peers[rank] = PeerLive::default();
    }

    /// True when a check is due at `now` (one every `I / 4`, at least
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
        let i = Self::interval(t);
        self.next_check = Some(now + (i / 4).max(Duration::from_millis(1)));
        for (rank, p) in self.peers.iter_mut().enumerate() {
            if std::mem::take(&mut p.answered) {
                p.last_heard = Some(now);
                p.first_probe = None;
            }
            match watch(rank) {
                Watch::Idle => {}
                Watch::Failed => {
                    if p.last_probe.is_none_or(|s| now >= s + t) {
                        p.last_probe = Some(now);
                        out.push((rank, Verdict::Reprobe));
                    }
                }
                Watch::Live => {
                    if p.last_heard.is_some_and(|h| now < h + i) {
                        continue;
                    }
                    match p.first_probe {
                        None => {
                            p.first_probe = Some(now);
                            p.last_probe = Some(now);
                            out.push((rank, Verdict::Probe));
                        }
                        Some(f) if now >= f + (t - i) => {
                            let since = p.last_heard.map_or(now - f + i, |h| now - h);
                            out.push((rank, Verdict::Fail(since)));
                        }
                        Some(_) => {}
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
        let mut l = Liveness::new(2, Some(ms(1000)));
        l.heard(1);
        let mut out = Vec::new();
        // Heard (stamped now): nothing for rank 1; rank 0 idle.
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
        // No second probe while the first is outstanding, no failure yet.
        l.check(t0 + ms(999), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert!(out.is_empty(), "{out:?}");
        l.check(t0 + ms(1000), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Fail(ms(1000)))]);
    }

    #[test]
    fn an_answer_ends_the_count_and_idle_time_does_not_count() {
        let t0 = Instant::now();
        let mut l = Liveness::new(2, Some(ms(1000)));
        let mut out = Vec::new();
        l.check(t0, |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Probe)]);
        out.clear();
        l.heard(1);
        l.check(t0 + ms(700), |r| [Watch::Idle, Watch::Live][r], &mut out);
        l.check(t0 + ms(800), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert!(out.is_empty(), "{out:?}");
        // Past the timeout since the first probe, but answered: a new
        // probe, no failure.
        l.check(t0 + ms(1500), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Probe)]);
        out.clear();
        l.heard(1);
        // Long unwatched (the application computed): no failure, a probe.
        l.check(t0 + ms(1600), |_| Watch::Idle, &mut out);
        l.check(t0 + ms(60_000), |r| [Watch::Idle, Watch::Live][r], &mut out);
        assert_eq!(out, vec![(1, Verdict::Probe)]);
    }

    #[test]
    fn failed_peers_are_reprobed_every_timeout_and_off_means_off() {
        let t0 = Instant::now();
        let mut l = Liveness::new(1, Some(ms(400)));
        let mut out = Vec::new();
        for k in 0..9 {
            l.check(t0 + ms(100 * k), |_| Watch::Failed, &mut out);
        }
        assert_eq!(out, vec![(0, Verdict::Reprobe); 3]);
        let off = Liveness::new(1, None);
        assert!(!off.due(t0));
        let zero = Liveness::new(1, Some(Duration::ZERO));
        assert!(!zero.due(t0));
    }
}
