//! Confirmations and loss recovery of sent packets: RTT samples (Karn's
//! rule), the first-sample re-base, early resend (RFC 8985 RACK by send
//! order), and the actions of a packet's timers: the "not confirmed" error
//! deadline (spec), the tail probe (RFC 8985 section 7) and the resend with
//! its period (spec doubling, live-link cap).

use std::time::{Duration, Instant};

use super::{Config, Endpoint, ErrorType, MsgId, PeerAddr, Tx};
use crate::sender::{Dest, PktPhase, PktState, ResentConfirmed, SessionId, RESENT_WATCH};
use crate::wire::{Options, Repr};
use netcore::time::later;

impl<P: PeerAddr> Endpoint<P> {
    pub(super) fn on_confirm(&mut self, now: Instant, from: P, r: &Repr) {
        self.stats.confirmations_received += 1;
        let bcast = r.options.contains(Options::BROADCAST);
        let dest = if bcast {
            Dest::Broadcast
        } else {
            Dest::Peer(from)
        };
        let first_id = r.id.wrapping_sub(r.number);
        let Some(key) = self.send_sessions.get(&dest).and_then(|s| s.msg(first_id)) else {
            self.stale_confirmation(now, dest, r.id);
            return;
        };
        let Some(m) = self.sent.get_mut(&key) else {
            self.stale_confirmation(now, dest, r.id);
            return;
        };
        if r.command != m.command || r.amount != m.amount || r.number >= m.count() {
            self.stats.malformed += 1;
            return;
        }
        let wire = m.wire_len(r.number);
        let session = m.session;
        let group = &self.group;
        let p = m.pkt_mut(r.number);
        let abandoned = match p.phase {
            PktPhase::InFlight => false,
            PktPhase::Abandoned => true,
            PktPhase::Unsent => {
                self.stats.stale_confirmations += 1;
                return;
            }
            PktPhase::Confirmed => {
                self.stale_confirmation(now, dest, r.id);
                return;
            }
        };
        if bcast && self.self_addrs.contains(&from) {
            // our own confirmation of our own broadcast (UDP loops it back)
            self.stats.stale_confirmations += 1;
            return;
        }
        let s = self.send_sessions.at_mut(session);
        // the destination works (live-link resend cap)
        s.timing.last_confirm = Some(now);
        if s.timing.stall_start.is_some() {
            super::liveness::heard_again(&mut s.timing, &mut self.stats, now);
        }
        if bcast && !group.is_empty() {
            let Some(pos) = group.iter().position(|g| *g == from) else {
                self.stats.stale_confirmations += 1;
                return;
            };
            p.acks |= 1 << pos;
            if (p.acks.count_ones() as usize) < group.len() {
                return;
            }
        }
        p.phase = PktPhase::Confirmed;
        // An abandoned packet's confirmation comes after its error deadline:
        // no sample of the path, and it already left the window.
        let sample = (p.transmissions == 1 && !abandoned)
            .then(|| now.saturating_duration_since(p.first_sent));
        // A resent packet: watch for its copies' confirmations (a spurious
        // resend proves how late this destination confirms).
        let resent = (p.transmissions > 1 && !abandoned && !bcast).then(|| ResentConfirmed {
            id: r.id,
            delay: now.saturating_duration_since(p.first_sent),
            copies_left: p.transmissions - 1,
        });
        let first_seq = p.first_seq;
        m.unconfirmed -= 1;
        // An offered message stays until its receiver is done pulling.
        let done = m.unconfirmed == 0 && m.offer.is_none();
        if m.unconfirmed == 0 && m.offer.is_some() {
            self.settled += 1;
        }
        let mut first_sample = false;
        {
            let s = self.send_sessions.at_mut(session);
            if !abandoned {
                s.in_flight_pkts -= 1;
                s.in_flight_bytes -= wire;
            }
            if let Some(w) = resent {
                if s.resent_confirmed.len() >= RESENT_WATCH {
                    s.resent_confirmed.pop_front();
                }
                s.resent_confirmed.push_back(w);
            }
            s.timing.expire_stall(now, self.cfg.stall_window);
            if let (Some(sample), true) = (sample, self.cfg.adaptive_timeout) {
                first_sample = s.timing.srtt().is_none();
                let before = s.timing.timeout();
                s.timing.sample(
                    now,
                    sample,
                    self.cfg.timeout_multiplier,
                    self.cfg.min_timeout,
                    self.cfg.max_timeout,
                );
                if s.timing.timeout() != before {
                    tracing::trace!(
                        ?dest,
                        sample_us = sample.as_micros() as u64,
                        timeout_us = s.timing.timeout().as_micros() as u64,
                        "timeout adapted"
                    );
                }
            }
        }
        if done {
            self.stats.messages_confirmed += 1;
            self.remove_msg(key);
        }
        if first_sample {
            self.rebase_in_flight(now, session);
        }
        self.detect_losses(now, session, first_seq);
        self.release(now, session);
    }

    /// A confirmation of a packet no longer in flight, from `dest` for
    /// packet `id`. If it is the last copy of a watched resent packet to be
    /// confirmed, every copy arrived, so the resend was spurious and the
    /// first confirmation answered the first transmission: its delay is a
    /// proven stall of the destination ([`SendTiming::prove_stall`];
    /// RFC 3708's detection, CTP's confirmation of every copy standing in
    /// for TCP's DSACK).
    ///
    /// [`SendTiming::prove_stall`]: crate::peer::SendTiming::prove_stall
    fn stale_confirmation(&mut self, now: Instant, dest: Dest<P>, id: u32) {
        self.stats.stale_confirmations += 1;
        if matches!(dest, Dest::Broadcast) {
            return;
        }
        let Some(session) = self.send_sessions.find(&dest) else {
            return;
        };
        let s = self.send_sessions.at_mut(session);
        let Some(pos) = s.resent_confirmed.iter().position(|w| w.id == id) else {
            return;
        };
        let w = &mut s.resent_confirmed[pos];
        w.copies_left -= 1;
        if w.copies_left > 0 {
            return;
        }
        let delay = w.delay;
        s.resent_confirmed.remove(pos);
        self.stats.spurious_resends += 1;
        if self.cfg.adaptive_timeout && !self.cfg.stall_window.is_zero() {
            // At most the live link's resend cap (20 ms): T <= 2 x that.
            let cap = if self.cfg.max_resend_period.is_zero() {
                self.cfg.max_timeout / 2
            } else {
                self.cfg.max_resend_period
            };
            s.timing.prove_stall(now, delay, cap);
            tracing::debug!(
                ?dest,
                delay_us = delay.as_micros() as u64,
                timeout_us = s.timing.timeout().as_micros() as u64,
                "spurious resend: the destination confirmed the first transmission late"
            );
        }
    }

    /// The first measurement replaced `default_timeout` (spec: the default
    /// "initially", the measured time x 3 "after the first interchange"):
    /// packets to `dest` still in flight on their first transmission with a
    /// longer base take the measured `T` as theirs — resend at `first_sent +
    /// T` (not before `now`), error deadline `first_sent + max(511 T,
    /// min_error_delay)` — as RFC 6298 5.3 restarts the timer with the
    /// current RTO. Without this a burst sent to a fresh peer before its
    /// first confirmation waited 100 ms for any loss at its tail.
    fn rebase_in_flight(&mut self, now: Instant, session: SessionId) {
        let s = self.send_sessions.at_mut(session);
        let t = s.timing.timeout();
        if t.is_zero() || s.timing.is_fixed() {
            return;
        }
        let error_after = self.cfg.error_after(t);
        for &(q, key, idx) in &s.sent_order {
            let Some(m) = self.sent.get_mut(&key) else {
                continue;
            };
            let p = m.pkt_mut(idx);
            if p.phase != PktPhase::InFlight || p.seq != q || p.transmissions != 1 || p.base <= t {
                continue;
            }
            p.base = t;
            let first_sent = p.first_sent;
            p.resend_at = p.resend_at.map(|r| r.min(later(first_sent, t).max(now)));
            p.error_at = p.error_at.map(|e| e.min(later(first_sent, error_after)));
            if p.update_due() {
                m.arm(idx, key, &mut self.timers);
            }
        }
    }

    /// Early resend (see [`Config::early_resend`]): a packet first sent with
    /// transmission sequence number `seq` was confirmed (whichever copy the
    /// confirmation answers, it was sent no earlier than that); packets to
    /// `dest` whose latest transmission came before it and still unconfirmed
    /// are resent after the reorder window, unless their timer comes sooner.
    fn detect_losses(&mut self, now: Instant, session: SessionId, seq: u64) {
        if !self.cfg.early_resend {
            return;
        }
        let s = self.send_sessions.at_mut(session);
        if seq < s.rack_seq {
            return;
        }
        s.rack_seq = seq + 1;
        let reo = s
            .timing
            .srtt()
            .map_or(Duration::ZERO, |r| r / 4)
            .max(self.cfg.min_reorder_window);
        let at = later(now, reo);
        while let Some(&(q, key, idx)) = s.sent_order.front() {
            if q >= s.rack_seq {
                break;
            }
            s.sent_order.pop_front();
            let Some(m) = self.sent.get_mut(&key) else {
                continue;
            };
            let p = m.pkt_mut(idx);
            if p.phase != PktPhase::InFlight || p.seq != q || p.early {
                continue;
            }
            // NoResend, resending disabled, or the timer comes sooner anyway
            if p.resend_at.is_none_or(|r| r <= at) {
                continue;
            }
            p.resend_at = Some(at);
            p.early = true;
            self.stats.presumed_lost += 1;
            p.update_due();
            m.arm(idx, key, &mut self.timers);
            tracing::trace!(
                msg = key,
                packet = idx,
                "presumed lost (RACK): early resend"
            );
        }
    }

    /// Drops entries of `dest`'s send-order queue whose packets were
    /// confirmed or sent again since, once it holds many more entries than
    /// packets in flight (resends to a peer that confirms nothing would
    /// otherwise grow it without bound). Amortized O(1) per transmission.
    pub(super) fn compact_send_order(&mut self, session: SessionId) {
        let s = self.send_sessions.at_mut(session);
        if s.sent_order.len() <= 2 * s.in_flight_pkts + 64 {
            return;
        }
        let sent = &self.sent;
        s.sent_order.retain(|&(q, key, idx)| {
            sent.get(&key)
                .is_some_and(|m| m.pkt(idx).phase == PktPhase::InFlight && m.pkt(idx).seq == q)
        });
    }

    /// The error deadline of packet `i` of `key` passed: spec "Command is not
    /// confirmed too long", one error per message, unless a user timeout
    /// postpones it (`liveness.rs`). Returns true if the message was
    /// removed (DelAfterError).
    pub(super) fn on_error_deadline(
        &mut self,
        now: Instant,
        key: MsgId,
        i: u32,
        dest: Dest<P>,
    ) -> bool {
        if self.postpone_error(now, key, i, dest) {
            return false;
        }
        let Some(m) = self.sent.get_mut(&key) else {
            return true;
        };
        let session = m.session;
        let wire = m.wire_len(i);
        let p = m.pkt_mut(i);
        p.error_at = None;
        let transmissions = p.transmissions;
        // Never resent and now reported: it leaves the window.
        let abandon = p.resend_at.is_none() && p.phase == PktPhase::InFlight;
        if abandon {
            p.phase = PktPhase::Abandoned;
            let s = self.send_sessions.at_mut(session);
            s.in_flight_pkts -= 1;
            s.in_flight_bytes -= wire;
        }
        let first_error = !m.errored;
        m.errored = true;
        let command = m.command;
        let del = m.options.contains(Options::DEL_AFTER_ERROR);
        if first_error {
            self.stats.not_confirmed_errors += 1;
            let peer = match dest {
                Dest::Peer(p) => Some(p),
                Dest::Broadcast => self.broadcast_addr,
            };
            tracing::debug!(
                msg = key,
                ?peer,
                command,
                transmissions,
                "not confirmed: error deadline passed"
            );
            self.error(
                now,
                ErrorType::NotConfirmed,
                transmissions as i64,
                peer,
                Some(command),
                Some(key),
            );
        }
        if del {
            self.remove_msg(key);
        }
        if del || abandon {
            self.release(now, session);
        }
        del
    }

    /// The tail probe of packet `i` of `key` is due (RFC 8985 7.3): resend it
    /// once if nothing new was sent to `dest` after it (resends of others may
    /// have been), it was sent once and its timer is still ahead; its timer
    /// stays as it was.
    pub(super) fn on_tail_probe(&mut self, now: Instant, key: MsgId, i: u32, dest: Dest<P>) {
        let Some(m) = self.sent.get_mut(&key) else {
            return;
        };
        let s = self.send_sessions.at_mut(m.session);
        let p = m.pkt_mut(i);
        p.probe_at = None;
        if s.newest_first_seq == p.first_seq
            && p.transmissions == 1
            && p.resend_at.is_some_and(|t| t > now)
        {
            p.seq = s.note_transmission(key, i);
            p.transmissions += 1;
            self.tx.push_back(Tx::Data { key, idx: i });
            self.stats.data_packets_resent += 1;
            self.stats.tail_probes += 1;
            tracing::trace!(msg = key, packet = i, ?dest, "tail probe");
        }
    }

    /// The resend timer of packet `i` of `key` expired: resend it, back the
    /// destination's timeout off if its estimate may be stale (Karn), and
    /// set the next resend one period later ([`resend_period`]).
    pub(super) fn on_resend(&mut self, now: Instant, key: MsgId, i: u32, dest: Dest<P>) {
        let Some(session) = self.sent.get(&key).map(|m| m.session) else {
            return;
        };
        let probe_cap = self.probe_cap(session);
        let m = self.sent.get_mut(&key).expect("present");
        let s = self.send_sessions.at_mut(m.session);
        let p = m.pkt_mut(i);
        let (first_sent, base, early) = (p.first_sent, p.base, p.early);
        if self.cfg.adaptive_timeout && !early {
            let before = s.timing.timeout();
            s.timing.expired(first_sent, base, self.cfg.max_timeout);
            if s.timing.timeout() != before {
                tracing::debug!(
                    ?dest,
                    timeout_us = s.timing.timeout().as_micros() as u64,
                    "timeout backed off (no valid sample since the packet was sent)"
                );
            }
        }
        let live = s.timing.last_confirm.is_some_and(|c| {
            c >= first_sent && now.saturating_duration_since(c) <= self.cfg.live_window
        });
        let current = s.timing.timeout();
        p.seq = s.note_transmission(key, i);
        p.transmissions += 1;
        p.early = false;
        self.tx.push_back(Tx::Data { key, idx: i });
        self.stats.data_packets_resent += 1;
        if early {
            self.stats.early_resends += 1;
        }
        let mut period = resend_period(&self.cfg, p, early, live, current);
        if let Some(cap) = probe_cap {
            // A suspected destination is probed at least this often.
            period = period.min(cap);
        }
        p.resend_at = Some(later(now, period));
        tracing::trace!(
            msg = key,
            packet = i,
            ?dest,
            transmissions = p.transmissions,
            early,
            live,
            next_in_us = period.as_micros() as u64,
            "resend"
        );
    }
}

/// The period until the next resend of packet `p` after a resend now: an
/// early resend keeps the period (it was not a timeout); on a live link
/// the doubled period is capped at `max(max_resend_period, current)`
/// (`current`: the destination's timeout; see
/// [`Config::max_resend_period`]); otherwise the multiplier doubles (spec),
/// up to `max_resend_multiplier`.
fn resend_period(
    cfg: &Config,
    p: &mut PktState,
    early: bool,
    live: bool,
    current: Duration,
) -> Duration {
    let doubled = p
        .mult
        .saturating_mul(2)
        .min(cfg.max_resend_multiplier.max(1));
    let cap = cfg.max_resend_period.max(current);
    if early {
        p.base.saturating_mul(p.mult)
    } else if live && !cfg.max_resend_period.is_zero() && p.base.saturating_mul(doubled) > cap {
        cap
    } else {
        p.mult = doubled;
        p.base.saturating_mul(p.mult)
    }
}
