//! The receiver's side of pulled messages (beyond the spec; PROTOCOL.md
//! "Pulled messages"): pulls that fetch an offered body into the owner's
//! buffer, requests paced by the receive window, parts placed as they
//! arrive, and the requests asked again for what is missing.
//!
//! Requests go out first come, first served over all pulls while the bytes
//! requested and not yet received stay within `Config::pull_window_bytes`,
//! in blocks of `Config::pull_block_bytes`: the receiver never asks for
//! more than it takes. A sender serves requests in the order they arrive,
//! so a part answering a later request shows the missing parts of earlier
//! ones lost (RFC 8985's RACK, by request order): they are asked again one
//! reorder window later. A pull that hears nothing for the destination's
//! timeout `T` (doubling while it stays silent) asks again for its oldest
//! request's missing parts (RFC 6298 5.4: the earliest segment only); one
//! silent for the user timeout fails. No sender timer is
//! involved: a receiver that is not running asks for nothing, so nothing
//! is resent while it sleeps.

use std::time::{Duration, Instant};

use netcore::time::{earliest, later};

use super::{Endpoint, ErrorType, Offer, PeerAddr, Pulled, Tx};
use crate::buf::RecvBuf;
use crate::puller::{Pull, PullId, Req, MAX_RANGES};
use crate::sender::Dest;
use crate::wire::{Options, Repr};

impl<P: PeerAddr> Endpoint<P> {
    /// Pulls offer `offer` (a delivery's [`ReceivedData::offer`](super::ReceivedData))
    /// from `from` into `sink`: as much of the body as the buffer holds,
    /// from its start. The pull ends with [`Endpoint::poll_pulled`]
    /// giving the buffer back; when every byte wanted arrived the sender is
    /// told it may drop the body. A buffer of 0 bytes (or an empty body)
    /// ends at once: the way to discard an offer.
    ///
    /// Errors: the buffer back when `Config::max_pulls` pulls are in
    /// progress, the offer is being pulled already, or the part bitmap
    /// cannot be allocated.
    pub fn pull(
        &mut self,
        now: Instant,
        from: P,
        offer: &Offer,
        mut sink: Box<dyn RecvBuf>,
    ) -> Result<PullId, Box<dyn RecvBuf>> {
        if self.pulls.len() >= self.cfg.max_pulls || self.pulls.find(from, offer.handle).is_some() {
            return Err(sink);
        }
        let len = offer.size.min(sink.room() as u64);
        let part = offer.part.min(self.cfg.data_size as u32).max(1);
        let p = Pull::new(
            from,
            offer.handle,
            offer.command,
            offer.size,
            len,
            part,
            sink,
            now,
        )?;
        // The destination's round trips time the pull's requests (one
        // estimator per destination).
        self.session(Dest::Peer(from));
        let parts = p.parts;
        let id = self.pulls.insert(p);
        if parts == 0 {
            self.end_pull(now, id, None);
        } else {
            self.pulls.order.push_back(id);
            self.pump_pulls(now);
        }
        Ok(id)
    }

    /// Ends pull `id` without telling its sender (its peer failed, or the
    /// owner gave up); returns its buffer.
    pub fn cancel_pull(&mut self, now: Instant, id: PullId) -> Option<Box<dyn RecvBuf>> {
        let p = self.pulls.remove(id)?;
        self.pump_pulls(now);
        Some(p.sink)
    }

    /// Ends every pull without telling the senders and drops their
    /// buffers (the owners' receive buffers): nothing is placed in them
    /// afterwards. For an owner that goes away (its socket closes).
    pub fn cancel_pulls(&mut self) {
        self.pulls = crate::puller::Pulls::default();
    }

    /// The next ended pull, if any.
    #[must_use]
    pub fn poll_pulled(&mut self) -> Option<Pulled<P>> {
        self.pulls.ended.pop_front()
    }

    /// Pulls in progress.
    pub fn pulls(&self) -> usize {
        self.pulls.len()
    }

    /// True if [`Endpoint::poll_pulled`] has an ended pull.
    pub fn has_pulled(&self) -> bool {
        !self.pulls.ended.is_empty()
    }

    /// A part of a pulled body (`r.number`; `r.amount` echoes the request
    /// it answers), placed if it is new.
    pub(super) fn on_pulled_part(&mut self, now: Instant, from: P, r: &Repr, body: &[u8]) {
        self.stats.pulled_parts_received += 1;
        let Some(id) = self.pulls.find(from, r.id) else {
            self.stats.pulled_duplicates += 1;
            return;
        };
        let p = self.pulls.get_mut(id).expect("indexed");
        if r.number >= p.next
            || body.len() as u64 != p.part_len(r.number)
            || r.message_size != p.size
        {
            self.stats.malformed += 1;
            return;
        }
        if p.has(r.number) {
            self.stats.pulled_duplicates += 1;
            return;
        }
        p.place(r.number, body);
        p.last_progress = now;
        p.timeouts = 0;
        let part = u64::from(p.part);
        // The request it answers: a round-trip sample if it was asked once
        // (every request has its own number, so the sample is unambiguous).
        let echo = r.amount;
        let mut sample = None;
        if let Some(pos) = p.reqs.iter().position(|q| q.seq == echo) {
            let q = &mut p.reqs[pos];
            if !q.answered {
                q.answered = true;
                if !q.retry {
                    sample = Some(now.saturating_duration_since(q.sent));
                }
            }
            if p.last_echo != Some(echo) {
                // The first part of a request: the sender served every
                // earlier request before it, so their missing parts are
                // lost (or overtaken: hence the reorder window).
                let lost: Vec<usize> = (0..pos)
                    .filter(|&i| p.reqs[i].lost_at.is_none() && !p.answered_in_full(&p.reqs[i]))
                    .collect();
                for i in lost {
                    p.reqs[i].lost_at = Some(now);
                }
            }
        }
        p.last_echo = Some(echo);
        p.drop_answered();
        let done = p.missing == 0;
        self.pulls.in_flight = self.pulls.in_flight.saturating_sub(part);
        if let (Some(rtt), true) = (sample, self.cfg.adaptive_timeout) {
            let (mult, min, max) = (
                self.cfg.timeout_multiplier,
                self.cfg.min_timeout,
                self.cfg.max_timeout,
            );
            self.session(Dest::Peer(from))
                .timing
                .sample(now, rtt, mult, min, max);
        }
        if done {
            self.end_pull(now, id, None);
        } else {
            self.arm_pull(id);
        }
        self.pump_pulls(now);
    }

    /// Asks for the next blocks of the pulls waiting, first come first
    /// served, while the window has room for a block.
    pub(super) fn pump_pulls(&mut self, now: Instant) {
        let window = self.cfg.pull_window_bytes.max(1);
        while let Some(&id) = self.pulls.order.front() {
            let in_flight = self.pulls.in_flight;
            let Some(p) = self.pulls.get_mut(id) else {
                self.pulls.order.pop_front();
                continue;
            };
            if p.next >= p.parts {
                self.pulls.order.pop_front();
                continue;
            }
            let part = u64::from(p.part);
            let block = (self.cfg.pull_block_bytes / part).clamp(1, u64::from(u32::MAX)) as u32;
            let n = block.min(p.parts - p.next);
            if in_flight > 0 && in_flight + u64::from(n) * part > window {
                break;
            }
            let first = p.next;
            p.next += n;
            p.pending += n;
            p.last_request = now;
            let seq = self.pulls.take_seq();
            let p = self.pulls.get_mut(id).expect("present");
            p.reqs.push_back(Req {
                seq,
                sent: now,
                retry: false,
                ranges: vec![(first, n)],
                answered: false,
                lost_at: None,
            });
            self.pulls.in_flight += u64::from(n) * part;
            self.tx.push_back(Tx::Request { pull: id, seq });
            self.stats.pull_requests_sent += 1;
            self.arm_pull(id);
        }
    }

    /// The pull's next deadline: asking again for parts presumed lost,
    /// for everything outstanding after a silence, or giving up.
    fn pull_deadline(&self, id: PullId) -> Option<Instant> {
        let p = self.pulls.get(id)?;
        if p.reqs.is_empty() {
            return None;
        }
        let reorder = self.reorder_window(p.from);
        let silence = self.pull_silence(p.from, p.timeouts);
        let give_up = self.pull_give_up(p.from);
        let mut at = None;
        for q in &p.reqs {
            at = earliest(at, q.lost_at.map(|t| later(t, reorder)));
        }
        let quiet = p.last_progress.max(p.last_request);
        at = earliest(at, Some(later(quiet, silence)));
        earliest(at, Some(later(p.last_progress, give_up)))
    }

    fn arm_pull(&mut self, id: PullId) {
        if let Some(at) = self.pull_deadline(id) {
            self.pulls.arm(id, at);
        }
    }

    /// `max(SRTT / 4, min_reorder_window)` (RFC 8985 6.2) toward `peer`.
    fn reorder_window(&self, peer: P) -> Duration {
        let srtt = self.peer_srtt(peer).unwrap_or_default();
        (srtt / 4).max(self.cfg.min_reorder_window)
    }

    /// How long a pull with requests outstanding waits for a part before
    /// asking again: the destination's timeout `T`, doubled per timeout in
    /// a row, at most `max_probe_period` beyond `T`.
    fn pull_silence(&self, peer: P, timeouts: u32) -> Duration {
        let t = self.peer_timeout(peer).max(self.cfg.min_timeout);
        let backed = t.saturating_mul(1 << timeouts.min(16));
        backed.min(t.max(self.cfg.max_probe_period))
    }

    /// How long a pull hears nothing before it fails: the user timeout,
    /// or without one the spec's error deadline of the destination's `T`.
    fn pull_give_up(&self, peer: P) -> Duration {
        self.cfg
            .user_timeout
            .unwrap_or_else(|| self.cfg.error_after(self.peer_timeout(peer)))
    }

    /// Pull `id`'s timer fired at `now`.
    pub(super) fn on_pull_timer(&mut self, now: Instant, id: PullId) {
        let Some(p) = self.pulls.get(id) else {
            return;
        };
        let (from, timeouts) = (p.from, p.timeouts);
        let reorder = self.reorder_window(from);
        let silence = self.pull_silence(from, timeouts);
        let give_up = self.pull_give_up(from);
        let p = self.pulls.get_mut(id).expect("present");
        p.queued_at = None;
        if later(p.last_progress, give_up) <= now {
            tracing::debug!(peer = ?from, handle = p.handle, "pull failed: the sender is silent");
            self.end_pull(now, id, Some(ErrorType::NotConfirmed));
            return;
        }
        let mut again: Vec<(u32, u32)> = Vec::new();
        let quiet = p.last_progress.max(p.last_request);
        if !p.reqs.is_empty() && later(quiet, silence) <= now {
            // Silence: the oldest request again, as a retransmission
            // timeout resends only the earliest segment (RFC 6298 5.4).
            // The others stay outstanding: if they were lost, the retry's
            // answer shows it (it is the newest request) and they are
            // asked again one reorder window later; if the sender was
            // only off its CPU, their parts are on their way and asking
            // for them again would have them twice.
            self.stats.pull_timeouts += 1;
            p.timeouts += 1;
            if let Some(q) = p.reqs.pop_front() {
                p.missing_of(&q.ranges, &mut again);
            }
        } else {
            let mut kept = std::collections::VecDeque::new();
            for q in std::mem::take(&mut p.reqs) {
                if q.lost_at.is_some_and(|t| later(t, reorder) <= now) {
                    p.missing_of(&q.ranges, &mut again);
                } else {
                    kept.push_back(q);
                }
            }
            p.reqs = kept;
        }
        self.ask_again(now, id, &again);
        self.arm_pull(id);
    }

    /// Queues requests (flagged as retries) for the parts of `ranges`.
    fn ask_again(&mut self, now: Instant, id: PullId, ranges: &[(u32, u32)]) {
        // As many ranges as a packet of this endpoint's size carries.
        let room = self
            .cfg
            .max_packet_len()
            .saturating_sub(crate::wire::CTP_HEADER_LEN + crate::wire::REQUEST_PREFIX_LEN)
            / 8;
        for chunk in ranges.chunks(room.clamp(1, MAX_RANGES)) {
            let seq = self.pulls.take_seq();
            let Some(p) = self.pulls.get_mut(id) else {
                return;
            };
            p.last_request = now;
            p.reqs.push_back(Req {
                seq,
                sent: now,
                retry: true,
                ranges: chunk.to_vec(),
                answered: false,
                lost_at: None,
            });
            self.tx.push_back(Tx::Request { pull: id, seq });
            self.stats.pull_requests_sent += 1;
            self.stats.pull_retries += 1;
        }
    }

    /// Ends pull `id`: tells the sender when every byte wanted arrived
    /// (`error` None), queues the end for the owner.
    pub(super) fn end_pull(&mut self, now: Instant, id: PullId, error: Option<ErrorType>) {
        let Some(p) = self.pulls.remove(id) else {
            return;
        };
        if error.is_none() {
            self.stats.pulls_completed += 1;
            let done = p.handle.to_le_bytes().to_vec();
            if let Err(e) = self.store(
                now,
                p.command,
                p.from,
                done,
                Options::OFFER | Options::PULL,
                None,
            ) {
                tracing::warn!(peer = ?p.from, error = %e, "pull: done not sent");
            }
        } else {
            self.stats.pulls_failed += 1;
        }
        self.pulls.ended.push_back(Pulled {
            id,
            from: p.from,
            len: p.len,
            sink: p.sink,
            error,
        });
        self.pump_pulls(now);
    }

    /// Writes request `seq` of pull `id` into `hdr` (header and body);
    /// returns its destination and length, or `None` if it is gone.
    pub(super) fn emit_request(&self, id: PullId, seq: u32, hdr: &mut [u8]) -> Option<(P, usize)> {
        let p = self.pulls.get(id)?;
        let q = p.reqs.iter().find(|q| q.seq == seq)?;
        let body_len = crate::wire::REQUEST_PREFIX_LEN + 8 * q.ranges.len();
        let len = crate::wire::CTP_HEADER_LEN + body_len;
        if hdr.len() < len {
            debug_assert!(false, "header buffer of {} bytes for a request", hdr.len());
            return None;
        }
        Repr {
            command: p.command,
            confirm: true,
            number: seq,
            amount: p.parts,
            id: p.handle,
            message_size: 0,
            options: Options::PULL,
            payload_len: body_len as u16,
        }
        .emit(hdr);
        let flags = if q.retry {
            crate::wire::REQUEST_RETRY
        } else {
            0
        };
        crate::wire::PullRequest::emit(
            p.part,
            flags,
            &q.ranges,
            &mut hdr[crate::wire::CTP_HEADER_LEN..len],
        );
        Some((p.from, len))
    }
}
