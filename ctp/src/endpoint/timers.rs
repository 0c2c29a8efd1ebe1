//! The endpoint's timers: `handle_timeout` runs what is due (in quinn's
//! shape: one loop, one `match` arm per timer kind) and `poll_timeout` says
//! when to call it next.
//!
//! Each packet in flight has up to three deadlines (error, tail probe,
//! resend); its earliest is `due`. The [`netcore::timer::TimerQueue`] holds
//! one entry per group of [`TIMER_GROUP`] packets of a message, keyed by
//! (message, group), at the earliest `due` of the group when armed; an
//! entry is live while its message exists and the group's `group_due` is
//! that time, so confirmations never search the queue. A live entry fires
//! the group's due packets and re-arms it at the earliest deadline left.
//! Besides: the pulls' timers (one live entry per pull with requests
//! outstanding, `pull.rs`), the reassembly idle sweep and the receiving
//! sessions' idle expiry.

use std::time::Instant;

use netcore::time::earliest;

use super::{Endpoint, MsgId, PeerAddr};
use crate::sender::PktPhase;
#[cfg(doc)]
use crate::sender::TIMER_GROUP;

/// The timers of one packet, in the order they are handled when several
/// are due at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PacketTimer {
    /// Spec: "Command is not confirmed too long".
    ErrorDeadline,
    /// RFC 8985 section 7: resend the tail of a burst once.
    TailProbe,
    /// Spec: resend with a growing period.
    Resend,
}

impl PacketTimer {
    const ALL: [PacketTimer; 3] = [Self::ErrorDeadline, Self::TailProbe, Self::Resend];
}

impl<P: PeerAddr> Endpoint<P> {
    /// Runs the timers due at `now`: "not confirmed" errors, tail probes,
    /// resends, dropping abandoned reassemblies, expiring idle sessions.
    pub fn handle_timeout(&mut self, now: Instant) {
        let span = self.span.clone();
        let _entered = span.enter();
        while let Some((due, (key, g))) = self.timers.pop_due(now) {
            let Some(m) = self.sent.get_mut(&key) else {
                continue;
            };
            if !m.timer_live(g, due) {
                continue;
            }
            let group = m.group(g);
            m.pkt_mut(group.start).group_due = None;
            let (dest, session) = (m.dest, m.session);
            let mut removed = false;
            for i in group.clone() {
                if !self.is_due(key, i, now) {
                    continue;
                }
                for timer in PacketTimer::ALL {
                    if !self.is_expired(timer, key, i, now) {
                        continue;
                    }
                    match timer {
                        PacketTimer::ErrorDeadline => {
                            removed = self.on_error_deadline(now, key, i, dest);
                        }
                        PacketTimer::TailProbe => self.on_tail_probe(now, key, i, dest),
                        PacketTimer::Resend => self.on_resend(now, key, i, dest),
                    }
                    if removed {
                        break;
                    }
                }
                if removed {
                    break;
                }
            }
            if !removed {
                // Re-arm the group at the earliest deadline of its packets
                // still in flight (confirmed ones have dropped out).
                let m = self.sent.get_mut(&key).expect("present");
                m.rearm_group(g, key, &mut self.timers);
            }
            self.compact_send_order(session);
        }
        while let Some((due, id)) = self.pulls.timers.pop_due(now) {
            if self.pulls.timer_live(id, due) {
                self.on_pull_timer(now, id);
            }
        }
        if self.next_reassembly_check.is_some_and(|t| t <= now) {
            self.sweep_reassemblies(now);
        }
        let idle = self.cfg.session_idle_timeout;
        if self.recv_ids.next_expiry(idle).is_some_and(|t| t <= now) {
            self.stats.sessions_expired += self.recv_ids.expire(now, idle);
        }
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) must be called
    /// (None when no timer runs). Discards timers made stale by confirmations.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let sent = &self.sent;
        let packets = self
            .timers
            .peek_live(|due, (key, g)| sent.get(&key).is_some_and(|m| m.timer_live(g, due)));
        let sessions = self.recv_ids.next_expiry(self.cfg.session_idle_timeout);
        let pulls = self.pulls.next_deadline();
        earliest(
            earliest(packets, self.next_reassembly_check),
            earliest(sessions, pulls),
        )
    }

    /// Whether packet `i` of `key` is in flight with a deadline at or
    /// before `now`.
    fn is_due(&self, key: MsgId, i: u32, now: Instant) -> bool {
        self.sent.get(&key).is_some_and(|m| {
            let p = m.pkt(i);
            p.phase == PktPhase::InFlight && p.next_deadline().is_some_and(|t| t <= now)
        })
    }

    fn is_expired(&self, timer: PacketTimer, key: MsgId, i: u32, now: Instant) -> bool {
        let Some(m) = self.sent.get(&key) else {
            return false;
        };
        let p = m.pkt(i);
        let at = match timer {
            PacketTimer::ErrorDeadline => p.error_at,
            PacketTimer::TailProbe => p.probe_at,
            PacketTimer::Resend => p.resend_at,
        };
        at.is_some_and(|t| t <= now)
    }
}
