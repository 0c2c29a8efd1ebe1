//! The receive path: data packets into received-id lists (duplicates
//! confirmed again, never delivered twice), normal commands into the
//! deliveries storage, parts of large messages into the large-commands
//! storage (CTP spec "Storages"), confirmations; and the limits on all of
//! it (`Config`: sessions, ids, reassembly memory, queues).

use std::time::Instant;

use super::sessions::{Opened, SessionKey, Source};
use super::{Endpoint, ErrorType, Offer, PeerAddr, ReceivedData, Tx};
use crate::peer::IdStatus;
use crate::receiver::Reassembly;
use crate::sender::{Dest, PktPhase};
use crate::wire::{Kind, Options, Repr, OFFER_PREFIX_LEN};

/// Most messages remembered as refused for the reassembly limits (one
/// error delivery each); the set is cleared beyond it.
const MAX_REFUSED_REMEMBERED: usize = 4096;

impl<P: PeerAddr> Endpoint<P> {
    pub(super) fn on_data(&mut self, now: Instant, from: P, r: &Repr, body: &[u8]) {
        self.stats.data_packets_received += 1;
        let bcast = r.options.contains(Options::BROADCAST);
        if bcast && !self.self_addrs.contains(&from) && self.is_own_broadcast(r, body) {
            // A node bound to the broadcast port hears its own broadcasts:
            // remember the address they come from, so that our confirmation
            // of them is not taken for a receiver's.
            if self.self_addrs.len() < 16 {
                self.self_addrs.push(from);
            }
        }
        let src = (from, bcast);
        let session = self.open_session(now, src);
        if r.options.contains(Options::START_SESSION) {
            self.recv_ids.start_session(session, r.id);
        }
        if self.recv_ids.contains(session, r.id) {
            self.stats.duplicates_received += 1;
            self.confirm(from, r);
            return;
        }
        if r.kind() == Kind::Done {
            // A receiver is done with a body we offered: confirmed as any
            // command, delivered to nobody.
            if self.record_id(session, from, r) {
                self.confirm(from, r);
                let handle = u32::from_le_bytes(body[..4].try_into().expect("parse checked 4"));
                self.on_done(now, from, handle);
            }
        } else if r.amount <= 1 {
            self.on_command(session, from, bcast, r, body);
        } else {
            self.on_part(now, session, from, bcast, r, body);
        }
    }

    /// Marks `src` active, creating its receiving session (see
    /// `Config::max_sessions`).
    fn open_session(&mut self, now: Instant, src: Source<P>) -> SessionKey {
        let (key, opened) = self.recv_ids.open(
            now,
            src,
            self.cfg.max_sessions,
            self.cfg.max_out_of_order_ids,
        );
        if let Opened::Created { evicted } = opened {
            self.stats.sessions_created += 1;
            tracing::debug!(peer = ?src.0, broadcast = src.1, "receiving session created");
            if let Some(old) = evicted {
                self.stats.sessions_evicted += 1;
                tracing::debug!(
                    peer = ?old.0,
                    broadcast = old.1,
                    max_sessions = self.cfg.max_sessions,
                    "receiving session evicted (least recently active; table full)"
                );
            }
        }
        key
    }

    /// A normal command (one packet): delivered if the queue has room,
    /// copied once from the datagram into the delivery. An offer's
    /// delivery carries the offer; its data is what follows the prefix.
    fn on_command(&mut self, session: SessionKey, from: P, bcast: bool, r: &Repr, body: &[u8]) {
        let (offer, body) = if r.kind() == Kind::Offer {
            let size = u64::from_le_bytes(body[..8].try_into().expect("parse checked 12"));
            let part = u32::from_le_bytes(body[8..12].try_into().expect("parse checked 12"));
            if size > crate::wire::MAX_MESSAGE_SIZE || part == 0 {
                self.stats.malformed += 1;
                return;
            }
            let offer = Offer {
                handle: r.id,
                size,
                part,
                command: r.command,
            };
            (Some(offer), &body[OFFER_PREFIX_LEN..])
        } else {
            (None, body)
        };
        if !self.delivery_room(body.len() as u64) {
            return;
        }
        let mut data = Vec::new();
        if data.try_reserve_exact(body.len()).is_err() {
            self.stats.refused += 1;
            self.stats.refused_deliveries += 1;
            return;
        }
        if !self.record_id(session, from, r) {
            return;
        }
        data.extend_from_slice(body);
        self.confirm(from, r);
        if offer.is_some() {
            self.stats.offers_received += 1;
        }
        self.deliver(from, bcast, r.command, data, offer);
    }

    /// A part of a large message: stored straight into its message's buffer
    /// (reserved on the first part, within the reassembly limits); the
    /// message is delivered when its last part arrives.
    fn on_part(
        &mut self,
        now: Instant,
        session: SessionKey,
        from: P,
        bcast: bool,
        r: &Repr,
        body: &[u8],
    ) {
        let lkey = (from, bcast, r.id.wrapping_sub(r.number));
        let mut created = false;
        if !self.reassembly.contains_key(&lkey) {
            if !self.admit_reassembly(now, lkey, r) {
                return;
            }
            created = true;
        }
        let ra = self.reassembly.get(&lkey).expect("admitted above");
        if ra.check(r, body.len()).is_err() {
            self.stats.malformed += 1;
            if created {
                self.drop_reassembly(&lkey);
            }
            return;
        }
        if ra.remaining == 1 && !self.delivery_room(ra.size) {
            return;
        }
        if !self.record_id(session, from, r) {
            return;
        }
        let ra = self.reassembly.get_mut(&lkey).expect("admitted above");
        let done = ra.store(r, body, now);
        self.confirm(from, r);
        if done {
            let ra = self.drop_reassembly(&lkey).expect("present");
            let command = ra.command;
            self.deliver(from, bcast, command, ra.into_data(), None);
        }
    }

    /// Starts reassembling the message `lkey` of part `r` if it fits the
    /// reassembly limits (per source and in all) and can be allocated;
    /// otherwise refuses it, with one error delivery per message.
    fn admit_reassembly(&mut self, now: Instant, lkey: (P, bool, u32), r: &Repr) -> bool {
        let src = (lkey.0, lkey.1);
        let need = Reassembly::budget(r.message_size, r.amount);
        let mine = self.reassembly_per_source.get(&src).copied().unwrap_or(0);
        let fits = self.reassembly_bytes.saturating_add(need) <= self.cfg.max_reassembly_bytes
            && mine.saturating_add(need) <= self.cfg.max_reassembly_bytes_per_peer;
        let ra = if fits {
            let spare = usize::try_from(r.message_size)
                .ok()
                .and_then(|n| self.spare.take(n));
            Reassembly::new(r, now, spare)
        } else {
            None
        };
        let Some(ra) = ra else {
            self.stats.refused += 1;
            self.stats.refused_reassembly += 1;
            if self.refused_reassemblies.len() >= MAX_REFUSED_REMEMBERED {
                self.refused_reassemblies.clear();
            }
            if self.refused_reassemblies.insert(lkey) {
                let kind = if fits {
                    ErrorType::OutOfMemory
                } else {
                    ErrorType::ReassemblyLimit
                };
                tracing::debug!(
                    peer = ?src.0,
                    size = r.message_size,
                    reserved = self.reassembly_bytes,
                    reserved_by_peer = mine,
                    ?kind,
                    "large message refused"
                );
                let size = i64::try_from(r.message_size).unwrap_or(i64::MAX);
                self.error(now, kind, size, Some(src.0), Some(r.command), None);
            }
            return false;
        };
        self.reassembly_bytes += need;
        *self.reassembly_per_source.entry(src).or_insert(0) += need;
        self.reassembly.insert(lkey, ra);
        self.refused_reassemblies.remove(&lkey);
        if self.next_reassembly_check.is_none() {
            self.next_reassembly_check =
                Some(netcore::time::later(now, self.cfg.reassembly_idle_timeout));
        }
        true
    }

    /// Removes a reassembly and releases its reservation.
    fn drop_reassembly(&mut self, lkey: &(P, bool, u32)) -> Option<Reassembly> {
        let ra = self.reassembly.remove(lkey)?;
        let need = Reassembly::budget(ra.size, ra.amount);
        self.reassembly_bytes -= need;
        let src = (lkey.0, lkey.1);
        if let Some(b) = self.reassembly_per_source.get_mut(&src) {
            *b -= need;
            if *b == 0 {
                self.reassembly_per_source.remove(&src);
            }
        }
        Some(ra)
    }

    /// Drops the large messages with no new part for
    /// `reassembly_idle_timeout`, with an error delivery each.
    pub(super) fn sweep_reassemblies(&mut self, now: Instant) {
        let idle = self.cfg.reassembly_idle_timeout;
        let expired: Vec<_> = self
            .reassembly
            .iter()
            .filter(|(_, ra)| netcore::time::later(ra.last_activity, idle) <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            if let Some(ra) = self.drop_reassembly(&k) {
                tracing::debug!(peer = ?k.0, size = ra.size, "large message abandoned (idle)");
                let size = i64::try_from(ra.size).unwrap_or(i64::MAX);
                self.error(
                    now,
                    ErrorType::ReassemblyAbandoned,
                    size,
                    Some(k.0),
                    Some(ra.command),
                    None,
                );
            }
        }
        self.next_reassembly_check = self
            .reassembly
            .values()
            .map(|ra| netcore::time::later(ra.last_activity, idle))
            .min();
    }

    /// True if a data delivery of `size` bytes fits the queue; otherwise
    /// counts the refusal (the packet stays unconfirmed).
    fn delivery_room(&mut self, size: u64) -> bool {
        let room = self.deliveries.has_data_room(
            size,
            self.cfg.max_queued_deliveries,
            self.cfg.max_queued_delivery_bytes,
        );
        if !room {
            self.stats.refused += 1;
            self.stats.refused_deliveries += 1;
            tracing::trace!(size, "data refused: delivery queue full");
        }
        room
    }

    /// Queues a complete message for the application.
    fn deliver(
        &mut self,
        from: P,
        broadcast: bool,
        command: u16,
        data: Vec<u8>,
        offer: Option<Offer>,
    ) {
        self.stats.messages_delivered += 1;
        self.deliveries.push_data(ReceivedData {
            command,
            size: data.len() as u64,
            from,
            broadcast,
            data,
            offer,
        });
    }

    /// Enters `r.id` in the received-id list of `session` (the packet's
    /// source, `from`); true when it is new. A duplicate is confirmed again and
    /// counted, a full list refuses the packet (counted).
    fn record_id(&mut self, session: SessionKey, from: P, r: &Repr) -> bool {
        let total = self.cfg.max_out_of_order_ids_total;
        match self.recv_ids.insert(session, r.id, total) {
            IdStatus::New => true,
            IdStatus::Duplicate => {
                self.stats.duplicates_received += 1;
                self.confirm(from, r);
                false
            }
            IdStatus::Full => {
                self.stats.refused += 1;
                self.stats.refused_ids += 1;
                tracing::trace!(?from, id = r.id, "data refused: received-id list full");
                false
            }
        }
    }

    /// Queues the confirmation of `r` to `to` (spec "Confirmations").
    fn confirm(&mut self, to: P, r: &Repr) {
        if self.tx_conf.len() >= self.cfg.max_queued_confirmations {
            self.stats.confirmations_dropped += 1;
            tracing::trace!(?to, "confirmation dropped: queue full");
            return;
        }
        self.tx_conf.push_back(Tx::Confirm {
            to,
            repr: r.confirmation(),
        });
        self.stats.confirmations_sent += 1;
    }

    /// True if `r`/`body` is exactly a packet of one of our own broadcasts in flight.
    fn is_own_broadcast(&self, r: &Repr, body: &[u8]) -> bool {
        let first_id = r.id.wrapping_sub(r.number);
        let Some(m) = self
            .send_sessions
            .get(&Dest::Broadcast)
            .and_then(|s| s.msg(first_id))
            .and_then(|k| self.sent.get(&k))
        else {
            return false;
        };
        if r.number >= m.count()
            || !matches!(
                m.pkt(r.number).phase,
                PktPhase::InFlight | PktPhase::Abandoned
            )
        {
            return false;
        }
        let mine = m.repr(r.number);
        let (s, e) = m.part(r.number);
        mine.command == r.command
            && mine.amount == r.amount
            && mine.message_size == r.message_size
            && m.data[s..e] == *body
    }
}
