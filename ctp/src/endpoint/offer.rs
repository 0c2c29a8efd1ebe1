//! The sender's side of pulled messages (beyond the spec; PROTOCOL.md
//! "Pulled messages"): requests served from the offered body, and the
//! receiver's "done" that drops it. Announcements are sent by
//! [`Endpoint::send_offer`] (`send.rs`) and arrive as deliveries
//! (`recv.rs`).
//!
//! A sender keeps no timer for the parts it serves: it sends what it is
//! asked for, when it is asked. The one exception to serving a request in
//! full is a part asked again (a retry) that left here less than half a
//! round trip ago (at least `min_reorder_window`): the receiver cannot
//! have missed it yet, so the retry crossed it (both were waiting here
//! while this process was off its CPU) and the part is not sent twice.

use std::time::Instant;

use super::{Endpoint, PeerAddr, Tx};
use crate::sender::Dest;
use crate::wire::{id_less, PullRequest, Repr, REQUEST_RETRY};

/// Most parts one request may ask for (a request of one range could ask
/// for 2^32 - 1).
pub const MAX_PARTS_PER_REQUEST: u32 = 4096;

impl<P: PeerAddr> Endpoint<P> {
    /// A request from `from` for parts of the offered message whose
    /// announcement had id `r.id`: the parts go into the transmit queue.
    pub(super) fn on_request(&mut self, now: Instant, from: P, r: &Repr, body: &[u8]) {
        self.stats.pull_requests_received += 1;
        let Ok(req) = PullRequest::parse(body) else {
            self.stats.malformed += 1;
            return;
        };
        let Some((key, session)) = self
            .send_sessions
            .find(&Dest::Peer(from))
            .and_then(|sid| Some((self.send_sessions.list_at(sid).msg(r.id)?, sid)))
        else {
            // Done already (a late request), or never offered.
            self.stats.stale_pull_packets += 1;
            return;
        };
        let srtt = self.send_sessions.list_at(session).timing.srtt();
        let fresh = (srtt.unwrap_or_default() / 2).max(self.cfg.min_reorder_window);
        let fresh_us = u64::try_from(fresh.as_micros()).unwrap_or(u64::MAX);
        let (data_size, max_queued) = (self.cfg.data_size, self.cfg.max_queued_parts);
        let Some(o) = self.sent.get_mut(&key).and_then(|m| m.offer.as_mut()) else {
            self.stats.stale_pull_packets += 1;
            return;
        };
        if req.part == 0 || req.part as usize > data_size || (o.part != 0 && o.part != req.part) {
            self.stats.malformed += 1;
            return;
        }
        let parts = o.size().div_ceil(u64::from(req.part));
        let Ok(parts) = u32::try_from(parts) else {
            self.stats.malformed += 1;
            return;
        };
        if o.part == 0 {
            let mut served = Vec::new();
            if served.try_reserve_exact(parts as usize).is_err() {
                return;
            }
            served.resize(parts as usize, 0);
            o.served = served;
            o.part = req.part;
        }
        // Requests are numbered in the order they were sent: one not newer
        // than the last served is a duplicate or overtaken (the receiver
        // asks again for what it still misses).
        if o.last_seq.is_some_and(|l| !id_less(l, r.number)) {
            self.stats.stale_pull_packets += 1;
            return;
        }
        o.last_seq = Some(r.number);
        let retry = req.flags & REQUEST_RETRY != 0;
        let t = u64::try_from(now.saturating_duration_since(o.epoch).as_micros())
            .unwrap_or(u64::MAX - 1)
            + 1;
        let mut budget = MAX_PARTS_PER_REQUEST;
        'ranges: for (first, count) in req.ranges() {
            let end = first.saturating_add(count).min(parts);
            for i in first..end {
                if budget == 0 || self.queued_parts >= max_queued {
                    self.stats.pulled_parts_dropped += u64::from(end - i);
                    break 'ranges;
                }
                let stamp = &mut o.served[i as usize];
                if *stamp != 0 {
                    if retry && t.saturating_sub(*stamp) < fresh_us {
                        self.stats.pull_resends_skipped += 1;
                        continue;
                    }
                    self.stats.pulled_parts_resent += 1;
                }
                *stamp = t;
                budget -= 1;
                self.queued_parts += 1;
                self.stats.pulled_parts_sent += 1;
                self.tx.push_back(Tx::Part {
                    key,
                    idx: i,
                    echo: r.number,
                });
            }
        }
    }

    /// The receiver of the offered message whose announcement had id
    /// `handle` is done with it: the message leaves the storage (it counts
    /// as confirmed, its announcement too if the done overtook that
    /// confirmation).
    pub(super) fn on_done(&mut self, now: Instant, from: P, handle: u32) {
        let Some(key) = self
            .send_sessions
            .get(&Dest::Peer(from))
            .and_then(|s| s.msg(handle))
        else {
            self.stats.stale_pull_packets += 1;
            return;
        };
        let Some(session) = self
            .sent
            .get(&key)
            .filter(|m| m.offer.is_some())
            .map(|m| m.session)
        else {
            self.stats.stale_pull_packets += 1;
            return;
        };
        self.stats.messages_confirmed += 1;
        self.stats.offers_done += 1;
        self.remove_msg(key);
        self.release(now, session);
    }

    /// Drops every offered message still stored (its receiver had not
    /// finished pulling it): no part of its body is sent afterwards, and
    /// the bodies (the owners' buffers) are dropped now. For an owner that
    /// goes away (its socket closes).
    pub fn cancel_offers(&mut self, now: Instant) {
        let keys: Vec<(crate::MsgId, crate::sender::SessionId)> = self
            .sent
            .iter()
            .filter(|(_, m)| m.offer.is_some())
            .map(|(k, m)| (k, m.session))
            .collect();
        for (k, session) in keys {
            self.remove_msg(k);
            self.release(now, session);
        }
    }
}
