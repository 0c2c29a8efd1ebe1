//! Failure detection and rejoin in the communicator's state (`liveness.rs`
//! has the timing rule, `control.rs` the incarnation): probes out, failed
//! peers declared and reset, traffic from a failed process refused, and a
//! restarted rank taken back when it announces a new incarnation.

use std::hash::Hash;
use std::time::{Duration, Instant};

use super::tx::{Intro, PeerTx};
use super::State;
use crate::control::Control;
use crate::flow::Grants;
use crate::liveness::{Verdict, Watch};
use crate::request::ReqState;
use crate::CommError;

impl<A: Copy + Eq + Hash + std::fmt::Debug> State<A> {
    /// Queues control message `c` to `peer`, after the introduction
    /// (`PROBE` with our incarnation) if `peer` does not have it yet and
    /// `c` does not carry it (see `Intro`).
    pub(super) fn push_ctl(&mut self, peer: usize, c: Control) {
        let tx = &mut self.tx[peer];
        if tx.intro == Intro::None {
            tx.intro = Intro::Queued;
            if c.incarnation().is_none() {
                let intro = Control::Probe {
                    incarnation: self.incarnation,
                };
                self.ctl_out.push_back((peer, intro));
            }
        }
        self.ctl_out.push_back((peer, c));
    }

    /// When the failure detector's next check is due, if known.
    pub fn liveness_next_check(&self) -> Option<Instant> {
        self.liveness.next_check()
    }

    /// Runs the failure detector if a check is due at `now`: probes the
    /// silent peers something waits on, declares failed those whose probe
    /// went unanswered (`liveness.rs`), and reprobes failed ones for a
    /// restart.
    pub fn liveness_tick(&mut self, now: Instant) {
        self.liveness.set_now(now);
        if !self.liveness.due(now) {
            return;
        }
        let mut named = vec![false; self.size];
        if let Some(r) = self.awaited {
            named[r] = true;
        }
        let mut any_source = false;
        for s in self
            .p2p
            .posted_selectors()
            .chain(self.coll.posted_selectors())
        {
            match s.source {
                Some(r) => named[r] = true,
                None => any_source = true,
            }
        }
        let watch = |r: usize| {
            let tx = &self.tx[r];
            if r == self.rank || self.removed[r] {
                Watch::Idle
            } else if self.failed[r].is_some() {
                Watch::Failed
            } else if tx.win.explicit {
                Watch::Idle
            } else if !tx.pending.is_empty()
                || !tx.in_flight.is_empty()
                || !tx.ctl_in_flight.is_empty()
                || named[r]
                || (any_source && (tx.intro != Intro::None || self.rx[r].is_some()))
            {
                Watch::Live
            } else {
                Watch::Idle
            }
        };
        let watches: Vec<Watch> = (0..self.size).map(watch).collect();
        let mut out = Vec::new();
        self.liveness.check(now, |r| watches[r], &mut out);
        let probe = Control::Probe {
            incarnation: self.incarnation,
        };
        for (r, v) in out {
            match v {
                Verdict::Probe => {
                    tracing::trace!(peer = r, "comm: probe (silent peer)");
                    self.push_ctl(r, probe)
                }
                Verdict::Reprobe => {
                    tracing::trace!(peer = r, "comm: probe (failed peer, for a restart)");
                    // Only the newest probe stays in CTP for a dead peer.
                    let tx = &mut self.tx[r];
                    self.to_cancel.append(&mut tx.ctl_in_flight);
                    tx.intro = Intro::None;
                    self.push_ctl(r, probe);
                }
                // While deliveries wait in CTP (the unexpected queue is
                // full), silence is no evidence: the peer's last messages
                // may be among them. The count goes on.
                Verdict::Fail(_) if self.holding() => {}
                Verdict::Fail(silence) => self.declare_failed(r, silence),
                Verdict::Suspect(silence) => {
                    self.on_suspected(r, &format!("no answer for {} ms", silence.as_millis()))
                }
            }
        }
    }

    /// `rank` became suspected (the detector's verdict or CTP's): counted
    /// and logged; nothing fails until the failure timeout.
    pub(super) fn on_suspected(&mut self, rank: usize, why: &str) {
        self.stats.suspicions += 1;
        tracing::warn!(
            rank = self.rank,
            peer = rank,
            reason = why,
            failure_timeout_ms = self.cfg.failure_timeout.map(|t| t.as_millis()),
            "comm: peer unresponsive: suspected, not failed; probing until the failure timeout"
        );
    }

    /// How long `rank` has been silent, if it is suspected (the
    /// detector's `S` of silence passed, or CTP suspects it), at the
    /// latest step; `None` while it answers, and once it failed
    /// (`peer_state` says so then).
    pub fn unresponsive(&self, rank: usize) -> Result<Option<Duration>, CommError> {
        self.check_rank(rank)?;
        if rank == self.rank || self.failed[rank].is_some() {
            return Ok(None);
        }
        Ok(self.liveness.suspected(rank))
    }

    /// The failure detector's verdict: `rank` did not answer.
    fn declare_failed(&mut self, rank: usize, silence: Duration) {
        self.stats.detected_failures += 1;
        let t = self.cfg.failure_timeout.unwrap_or_default();
        self.fail_peer(
            rank,
            format!(
                "no answer for {} ms (failure_timeout {} ms): the process is dead, \
                 stopped or unreachable; if it restarts it rejoins by itself",
                silence.as_millis(),
                t.as_millis()
            ),
        );
    }

    /// Marks `rank` failed: its queued fragments are dropped, its sends and
    /// the receives naming it fail, and everything toward it starts afresh
    /// for its next incarnation (CTP's copies cancelled, sequence numbers
    /// from 0, the default window, no partial messages kept from it).
    pub fn fail_peer(&mut self, rank: usize, reason: String) {
        if self.failed[rank].is_some() {
            return;
        }
        tracing::warn!(rank = self.rank, peer = rank, %reason, "comm: peer failed");
        self.stats.peer_failures += 1;
        self.failed[rank] = Some(reason.clone());
        self.news = true;
        let err = || CommError::PeerFailed {
            rank,
            reason: reason.clone(),
        };
        let share = Grants::default_share(self.size, self.cfg.recv_budget_bytes);
        let tx = std::mem::replace(&mut self.tx[rank], PeerTx::new(share));
        self.pending_fragments -= tx.pending.iter().map(|m| m.slots).sum::<usize>();
        self.to_cancel
            .extend(tx.in_flight.iter().map(|f| f.1).chain(tx.ctl_in_flight));
        self.ctl_out.retain(|(p, _)| *p != rank);
        self.rx[rank] = None;
        self.grants.on_disconnect(rank);
        self.liveness.reset(rank);
        self.expelled[rank] = false;
        let mut tagged = Vec::new();
        let mut carried = 0;
        for (id, r) in self.requests.iter_mut() {
            if let ReqState::Send {
                dest,
                left,
                failed,
                op,
                ..
            } = r
            {
                if *dest == rank && *left > 0 && failed.is_none() {
                    *failed = Some(err());
                    carried += 1;
                    if op.is_some() {
                        tagged.push(*id);
                    }
                }
            }
        }
        for id in tagged {
            self.finish_tagged(id);
        }
        let mut gone = self.p2p.cancel_source(rank);
        gone.extend(self.coll.cancel_source(rank));
        carried += gone.len();
        for req in gone {
            self.fail_recv(req, err());
        }
        // No request carried it: the application's next call naming the
        // rank does (it may have rejoined by then: a restart).
        self.unreported[rank] = (carried == 0).then_some(reason);
    }

    /// `src` announced incarnation `inc` (a `CONNECT` or `PROBE`). Returns
    /// false if the message must be dropped (from a failed process).
    pub(super) fn on_incarnation(&mut self, src: usize, inc: u64) -> bool {
        let known = self.peer_incarnation[src];
        if inc == 0 {
            // A sender that does not tell: only its liveness counts.
            if self.failed[src].is_some() {
                self.on_failed_traffic(src);
                return false;
            }
            return true;
        }
        if self.failed[src].is_some() {
            if known == Some(inc) {
                self.on_failed_traffic(src);
                return false;
            }
            self.rejoin(src, inc);
            return true;
        }
        match known {
            Some(k) if k != inc => {
                // Restarted before we noticed its death.
                self.fail_peer(
                    src,
                    format!("rank {src} restarted (a new process announced itself)"),
                );
                self.rejoin(src, inc);
            }
            _ => self.peer_incarnation[src] = Some(inc),
        }
        true
    }

    /// A new incarnation of the failed rank `src`: it is a peer again.
    fn rejoin(&mut self, src: usize, inc: u64) {
        tracing::info!(
            rank = self.rank,
            peer = src,
            "comm: rank rejoined (new incarnation)"
        );
        self.failed[src] = None;
        self.peer_incarnation[src] = Some(inc);
        self.expelled[src] = false;
        self.liveness.reset(src);
        self.stats.rejoins += 1;
    }

    /// Traffic from a process we declared failed: dropped and counted; the
    /// first one is answered with `EXPEL` so that its application gets
    /// errors rather than silence.
    pub(super) fn on_failed_traffic(&mut self, src: usize) {
        self.stats.from_failed += 1;
        if !std::mem::replace(&mut self.expelled[src], true) {
            tracing::info!(
                rank = self.rank,
                peer = src,
                "comm: traffic from a failed process: EXPEL"
            );
            self.push_ctl(src, Control::Expel);
        }
    }

    /// `src` declared us failed (`EXPEL`).
    pub(super) fn on_expel(&mut self, src: usize) {
        self.fail_peer(
            src,
            format!(
                "rank {src} declared this rank failed (it heard nothing from this process \
                 within its failure_timeout: was it stopped?); restart this rank to rejoin"
            ),
        );
    }
}
