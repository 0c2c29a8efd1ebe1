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
//! - a peer is declared failed once it has been silent for `T` and the
//!   first probe of its silence has gone unanswered for `T / 2` (many
//!   resend timeouts on a LAN). A peer that dies while watched is thus
//!   declared failed `T` after its last sign of life, plus at most one
//!   check period (`T / 32`). A peer unwatched (for instance while the
//!   application computes without calling the communicator) is never
//!   declared failed for that time: its first probe must go unanswered for
//!   `T / 2` first. A peer never heard from is declared failed `T / 2`
//!   after its first probe;
//! - no peer is declared failed while the communicator holds deliveries
//!   back (its unexpected queue is full, `State::holding`): the peer's
//!   last messages may wait in CTP's queue, so its silence proves nothing;
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
    last_heard: Option<Instant>,
    /// When the first probe since the peer was last heard went.
    first_probe: Option<Instant>,
    last_probe: Option<Instant>,
}

/// The failure detector of one rank (see the module documentation).
#[derive(Debug)]
pub(crate) struct Liveness {
    timeout: Option<Duration>,
    /// The time of the caller's latest step (`set_now`).
    now: Option<Instant>,
    next_check: Option<Instant>,
    peers: Vec<PeerLive>,
}

impl Liveness {
    /// A detector for `size` peers; `timeout` `None` turns it off.
    pub fn new(size: usize, timeout: Option<Duration>) -> Self {
        Self {
            timeout: timeout.filter(|t| !t.is_zero()),
            now: None,
            next_check: None,
            peers: vec![PeerLive::default(); size],
        }
    }

    /// Adds a peer (the next index), never heard from.
    pub fn add_peer(&mut self) {
        self.peers.push(PeerLive::default());
    }

    /// The probe interval `I = T / 4`.
    fn interval(t: Duration) -> Duration {
        t / 4
    }

    /// The time of the caller's current step: answers (`heard`) are
    /// stamped with it (the state learns of them without a clock).
    pub fn set_now(&mut self, now: Instant) {
        self.now = Some(now);
    }

    /// `rank` answered (a message or a confirmation), at the time of the
    /// current step; before any step, at the first check.
    pub fn heard(&mut self, rank: usize) {
        let p = &mut self.peers[rank];
        p.last_heard = self.now.or(p.last_heard);
        p.first_probe = None;
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

    /// True when a check is due at `now` (one every `T / 32`, at least
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
        self.now = Some(now);
        self.next_check = Some(now + (t / 32).max(Duration::from_millis(1)));
        for (rank, p) in self.peers.iter_mut().enumerate() {
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
                        Some(f)
                            if now >= f + t / 2 && p.last_heard.is_none_or(|h| now >= h + t) =>
                        {
                            let since = p.last_heard.map_or(now - f, |h| now - h);
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
        let mut l = Liveness::new(2, Some(ms(1000)));
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
