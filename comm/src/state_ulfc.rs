//! The ULFC part of the communicator's state (`flow.rs` has the rules):
//! control messages in, grants out, implicit disconnect and recovery, and
//! the per-peer calls `dest_buf`, `through` / `rapid`, `disconnect` /
//! `reconnect`, `state`.

use std::hash::Hash;

use super::tx::Intro;
use super::{State, CONTROL_QUEUE_PER_PEER};
use crate::control::{Control, Mode};
#[cfg(test)]
use crate::flow::Grants;
use crate::flow::PeerState;
use crate::reorder::PeerRx;
use crate::CommError;

impl<A: Copy + Eq + Hash + std::fmt::Debug> State<A> {
    /// A control message from `src` (`control.rs`; ULFC, `flow.rs`).
    pub(super) fn on_control(&mut self, src: usize, data: &[u8]) {
        let c = match Control::decode(data) {
            Ok((c, ctx)) if ctx == self.context(false) => c,
            Ok(_) => {
                self.stats.foreign_context += 1;
                return;
            }
            Err(e) => {
                self.stats.malformed += 1;
                tracing::debug!(src, error = %e, "comm: malformed control message");
                return;
            }
        };
        if src == self.rank {
            return;
        }
        match c.incarnation() {
            Some(inc) if !self.on_incarnation(src, inc) => return,
            None if self.failed[src].is_some() => return self.on_failed_traffic(src),
            _ => {}
        }
        self.heard_from(src);
        tracing::debug!(rank = self.rank, src, ?c, "comm: control message");
        match c {
            Control::Connect { .. } => self.grants.on_connect(src),
            Control::Probe { .. } => {
                // A peer we never sent to: tell it who we are (a restarted
                // rank makes itself known this way).
                if self.tx[src].intro == Intro::None {
                    let me = Control::Probe {
                        incarnation: self.incarnation,
                    };
                    self.push_ctl(src, me);
                }
            }
            Control::Expel => self.on_expel(src),
            Control::WinGrant { seq, window } => {
                let was = self.tx[src].win.state();
                if let Some(seq) = self.tx[src].win.on_grant(seq, window) {
                    self.push_ctl(src, Control::Applied { seq });
                }
                if was == PeerState::Connecting && self.tx[src].win.state() == PeerState::Connected
                {
                    tracing::debug!(peer = src, window, "comm: peer connected (first grant)");
                }
            }
            Control::WinReq(m) => self.grants.on_request(src, m),
            Control::Disconnect => self.grants.on_disconnect(src),
            Control::Applied { seq } => self.grants.on_applied(src, seq),
            Control::SeqReset { seq } => {
                if let Some(rx) = self.rx[src].as_mut() {
                    let dropped = rx.reset(seq);
                    self.stats.refused_fragments += dropped as u64;
                    tracing::info!(rank = self.rank, src, seq, dropped, "comm: sequence reset");
                } else if seq != 0 {
                    let (w, max) = (self.cfg.window_fragments, self.cfg.max_message_bytes);
                    let mut rx = PeerRx::new(w, max);
                    rx.reset(seq);
                    self.rx[src] = Some(rx);
                }
            }
        }
    }

    /// CTP did not get a confirmation from `rank` in time ("not
    /// confirmed", CTP spec): the peer is implicitly disconnected (ULFC,
    /// notes fig. 5). Departure from the notes' proposal (writes queue):
    /// writes to it fail at once with `CommError::PeerFailed`, as do the
    /// receives naming it, so a dead peer gives an explicit error; the data
    /// already accepted stays queued and in CTP (which keeps resending it
    /// without `DelAfterError`, PROTOCOL.md "Error floor": the resends are
    /// the probe), and the state ends by itself when the peer answers.
    pub fn implicit_disconnect(&mut self, rank: usize, reason: String) {
        if rank == self.rank || self.tx[rank].win.implicit.is_some() {
            return;
        }
        tracing::warn!(rank = self.rank, peer = rank, %reason, "comm: peer implicitly disconnected");
        self.stats.peer_failures += 1;
        self.tx[rank].win.implicit = Some(reason.clone());
        self.news = true;
        let mut gone = self.p2p.cancel_source(rank);
        gone.extend(self.coll.cancel_source(rank));
        for req in gone {
            self.fail_recv(
                req,
                CommError::PeerFailed {
                    rank,
                    reason: reason.clone(),
                },
            );
        }
    }

    /// The peer answered (a message or a confirmation): an implicit
    /// disconnect ends.
    pub(super) fn heard_from(&mut self, rank: usize) {
        if let Some(t) = self.liveness.heard(rank) {
            self.stats.suspicion_recoveries += 1;
            tracing::info!(
                rank = self.rank,
                peer = rank,
                suspected_ms = t.as_millis(),
                "comm: suspected peer answers again"
            );
        }
        if self.tx[rank].win.implicit.take().is_some() {
            self.stats.implicit_recoveries += 1;
            tracing::info!(
                rank = self.rank,
                peer = rank,
                "comm: peer answers again: reconnected"
            );
        }
    }

    /// Moves the grants `Grants` has decided into the control queue.
    pub(super) fn queue_grants(&mut self) {
        for (peer, seq, window) in self.grants.take_grants() {
            tracing::debug!(peer, seq, window, "comm: grant");
            self.push_ctl(peer, Control::WinGrant { seq, window });
        }
    }

    /// The window `peer` granted us, bytes (ULFC `getdestbuf`).
    pub fn dest_buf(&self, peer: usize) -> Result<u64, CommError> {
        self.check_rank(peer)?;
        Ok(if peer == self.rank {
            0
        } else {
            self.tx[peer].win.window
        })
    }

    /// Our unconfirmed bytes toward `peer`.
    #[cfg(test)]
    pub fn in_flight_bytes(&self, peer: usize) -> u64 {
        self.tx[peer].win.in_flight
    }

    /// This rank's grants (receiving side).
    #[cfg(test)]
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// `peer`'s state (ULFC `datagram_state`); ourselves: connected.
    pub fn peer_state(&self, peer: usize) -> Result<PeerState, CommError> {
        self.check_rank(peer)?;
        Ok(if peer == self.rank {
            PeerState::Connected
        } else if self.failed[peer].is_some() {
            PeerState::Failed
        } else {
            self.tx[peer].win.state()
        })
    }

    fn queue_control(&mut self, peer: usize, c: Control) -> Result<(), CommError> {
        let queued = self.ctl_out.iter().filter(|(p, _)| *p == peer).count();
        if queued >= CONTROL_QUEUE_PER_PEER {
            return Err(CommError::SendQueueFull { pending: queued });
        }
        self.push_ctl(peer, c);
        Ok(())
    }

    /// Asks `peer` for priority `mode` (ULFC `through` / `rapid`, or back
    /// to normal): a `WIN_REQ`; the peer answers with a grant.
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::Disconnected`],
    /// [`CommError::SendQueueFull`] (too many control messages queued).
    pub fn request_mode(&mut self, peer: usize, mode: Mode) -> Result<(), CommError> {
        self.check_rank(peer)?;
        if peer == self.rank {
            return Ok(());
        }
        if self.tx[peer].win.explicit {
            return Err(CommError::Disconnected { rank: peer });
        }
        self.queue_control(peer, Control::WinReq(mode))
    }

    /// Explicit suspend (ULFC `disconnect`): writes to `peer` fail with
    /// [`CommError::Disconnected`] from now on; messages accepted before
    /// stay queued (fragments already handed to CTP are still delivered),
    /// and go on after [`State::reconnect`]. Sends `DISCONNECT` once.
    pub fn disconnect(&mut self, peer: usize) -> Result<(), CommError> {
        self.check_rank(peer)?;
        if peer == self.rank || self.tx[peer].win.explicit {
            return Ok(());
        }
        self.queue_control(peer, Control::Disconnect)?;
        tracing::info!(rank = self.rank, peer, "comm: explicit disconnect");
        self.tx[peer].win.explicit = true;
        Ok(())
    }

    /// Ends an explicit disconnect (ULFC `reconnect`): sends `CONNECT`, the
    /// peer grants again, queued messages go. On an implicitly
    /// disconnected peer it sends `CONNECT` as a probe.
    pub fn reconnect(&mut self, peer: usize) -> Result<(), CommError> {
        self.check_rank(peer)?;
        if peer == self.rank {
            return Ok(());
        }
        let w = &self.tx[peer].win;
        if !w.explicit && w.implicit.is_none() {
            return Ok(());
        }
        let me = Control::Connect {
            incarnation: self.incarnation,
        };
        self.queue_control(peer, me)?;
        tracing::info!(rank = self.rank, peer, "comm: reconnect");
        self.tx[peer].win.explicit = false;
        Ok(())
    }

    /// Restarts the numbering of our fragments to `peer` at 0 (the paper's
    /// sequence reset, L132; `SEQ_RESET`): `peer` drops what it holds of
    /// our unfinished messages and expects 0. For a rank that restarted
    /// (a new process counts from 0 while its peers expect more), called
    /// toward each peer before sending. Our next fragment to `peer` waits
    /// until `peer`'s endpoint has confirmed the reset, so it cannot
    /// overtake it.
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::Disconnected`],
    /// [`CommError::ResetBusy`] while messages to `peer` are queued or
    /// unconfirmed, [`CommError::SendQueueFull`].
    pub fn reset_seq(&mut self, peer: usize) -> Result<(), CommError> {
        self.check_rank(peer)?;
        if peer == self.rank {
            return Ok(());
        }
        let tx = &self.tx[peer];
        if tx.win.explicit {
            return Err(CommError::Disconnected { rank: peer });
        }
        if !tx.pending.is_empty() || !tx.in_flight.is_empty() {
            return Err(CommError::ResetBusy {
                rank: peer,
                pending: tx.pending.len(),
                in_flight: tx.in_flight.len(),
            });
        }
        self.queue_control(peer, Control::SeqReset { seq: 0 })?;
        let tx = &mut self.tx[peer];
        tx.next_seq = 0;
        tx.reset = Some(None);
        if tx.win.contact() {
            self.stats.connections += 1;
            let me = Control::Connect {
                incarnation: self.incarnation,
            };
            self.push_ctl(peer, me);
        }
        Ok(())
    }
}
