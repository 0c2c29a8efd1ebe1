//! The send path: messages into the sent-commands storage (CTP spec
//! "Storages"), packets released into the transmit queue as the
//! destination's window allows, the per-destination settings.

use std::time::{Duration, Instant};

use rand::RngCore;

use super::{Endpoint, MsgId, PeerAddr, SendError, Tx};
use crate::sender::{
    Dest, Offered, PktPhase, PktState, SendSession, SentMsg, SentStore, SessionId,
};
use crate::wire::{Options, MAX_COMMAND, MAX_MESSAGE_SIZE, OFFER_PREFIX_LEN};
use netcore::time::later;
use netcore::timer::TimerQueue;

impl<P: PeerAddr> Endpoint<P> {
    /// Sets the receivers a broadcast must be confirmed by (at most 64). With
    /// an empty group (the default) a broadcast packet counts as confirmed at
    /// its first confirmation, since the sender cannot know the receivers.
    ///
    /// Errors: `Err(n)` if the group has more than 64 members.
    pub fn set_broadcast_group(&mut self, group: Vec<P>) -> Result<(), usize> {
        if group.len() > 64 {
            return Err(group.len());
        }
        self.group = group;
        Ok(())
    }

    /// Fixes the resend timeout for `peer` (no adaptation); zero disables resending.
    pub fn set_peer_timeout(&mut self, peer: P, timeout: Duration) {
        self.session(Dest::Peer(peer)).timing.fix(timeout);
    }

    /// The current resend timeout for `peer` (the default before any exchange).
    pub fn peer_timeout(&self, peer: P) -> Duration {
        self.send_sessions
            .get(&Dest::Peer(peer))
            .map_or(self.cfg.default_timeout, |s| s.timing.timeout())
    }

    /// The measured (smoothed) send-to-confirmation time for `peer`, if any.
    pub fn peer_srtt(&self, peer: P) -> Option<Duration> {
        self.send_sessions
            .get(&Dest::Peer(peer))
            .and_then(|s| s.timing.srtt())
    }

    /// Sets the id of the next packet to `dest` (the start is random
    /// otherwise). For tests of id wraparound, before the first message to
    /// `dest` (ids must stay in send order); the session's StartSession
    /// flag is unchanged.
    pub fn set_next_id(&mut self, dest: Dest<P>, id: u32) {
        self.session(dest).next_id = id;
    }

    /// The sending session of `dest`, created with a random starting id
    /// (spec: "initial value of ID ... pseudorandom") and the default
    /// timeout.
    pub(super) fn session(&mut self, dest: Dest<P>) -> &mut SendSession {
        let id = self.session_id(dest);
        self.send_sessions.at_mut(id)
    }

    /// [`session`](Self::session) by its id.
    fn session_id(&mut self, dest: Dest<P>) -> SessionId {
        let rng = &mut self.rng;
        let timeout = self.cfg.default_timeout;
        self.send_sessions.id_of(dest, || {
            tracing::debug!(?dest, "sending session created");
            SendSession::new(rng.next_u32(), timeout)
        })
    }

    /// Sends `data` as command `command` to `peer` (copying it). Options as in
    /// the spec; Broadcast (or `peer` equal to the broadcast address) sends to
    /// every receiver. Returns the message id used in later error deliveries.
    ///
    /// Errors: [`SendError`] (command above 32767, message larger than
    /// `max_message_size`, no broadcast address, allocation failure, storage
    /// full).
    pub fn send(
        &mut self,
        now: Instant,
        command: u16,
        peer: P,
        data: &[u8],
        options: Options,
    ) -> Result<MsgId, SendError> {
        let mut v = self.spare.take(data.len()).unwrap_or_default();
        v.try_reserve_exact(data.len())
            .map_err(|_| SendError::OutOfMemory(data.len() as u64))?;
        v.extend_from_slice(data);
        self.send_vec(now, command, peer, v, options)
    }

    /// As [`send`](Self::send), taking ownership of the data (no copy: the
    /// packets are sent from this buffer, see
    /// [`poll_transmit_gather`](Self::poll_transmit_gather)).
    pub fn send_vec(
        &mut self,
        now: Instant,
        command: u16,
        peer: P,
        data: Vec<u8>,
        options: Options,
    ) -> Result<MsgId, SendError> {
        // Offer and Pull are the endpoint's own (`send_offer`, `pull`).
        let options = options.difference(Options::OFFER | Options::PULL);
        self.store(now, command, peer, data, options, None)
    }

    /// Offers `body` to `peer` for pulling (PROTOCOL.md "Pulled messages"):
    /// sends `head` as command `command` with the body's size in front (one
    /// packet: `head` must fit the data size with 12 bytes to spare); the
    /// receiver gets it with [`ReceivedData::offer`](super::ReceivedData)
    /// and pulls the body into a buffer of its own
    /// ([`Endpoint::pull`](Self::pull)). The body stays here, counted
    /// nowhere in the storage's bytes, until the receiver says it is done
    /// ([`Endpoint::is_pending`] turns false) or the message is cancelled;
    /// its announcement is confirmed as any command
    /// ([`Endpoint::is_unconfirmed`]). No resend of the body's parts is
    /// ever timed here: the receiver asks again for what it misses.
    ///
    /// Errors: as [`Endpoint::send_vec`]; [`SendError::TooLarge`] when
    /// `head` does not fit one packet; [`SendError::NoBroadcast`] for a
    /// broadcast destination (a body is pulled by one receiver).
    pub fn send_offer(
        &mut self,
        now: Instant,
        command: u16,
        peer: P,
        head: &[u8],
        body: Box<dyn crate::SendBuf>,
    ) -> Result<MsgId, SendError> {
        if Some(peer) == self.broadcast_addr {
            return Err(SendError::NoBroadcast);
        }
        let max = self.cfg.data_size.saturating_sub(OFFER_PREFIX_LEN);
        if head.len() > max {
            return Err(SendError::TooLarge {
                size: head.len() as u64,
                max: max as u64,
            });
        }
        let size = body.bytes().len() as u64;
        if size > MAX_MESSAGE_SIZE {
            return Err(SendError::TooLarge {
                size,
                max: MAX_MESSAGE_SIZE,
            });
        }
        let mut data = Vec::with_capacity(OFFER_PREFIX_LEN + head.len());
        data.extend_from_slice(&size.to_le_bytes());
        data.extend_from_slice(&(self.cfg.data_size as u32).to_le_bytes());
        data.extend_from_slice(head);
        let offer = Box::new(Offered {
            buf: body,
            part: 0,
            served: Vec::new(),
            epoch: now,
            last_seq: None,
        });
        let id = self.store(now, command, peer, data, Options::OFFER, Some(offer))?;
        self.stats.offers_sent += 1;
        Ok(id)
    }

    /// Stores message `data` if it fits the storage's bytes (a pull's
    /// "done", `Options::OFFER | Options::PULL`, always: it ends a
    /// transfer) and releases what the window lets go.
    pub(super) fn store(
        &mut self,
        now: Instant,
        command: u16,
        peer: P,
        data: Vec<u8>,
        options: Options,
        offer: Option<Box<Offered>>,
    ) -> Result<MsgId, SendError> {
        let check_room = !options.contains(Options::OFFER | Options::PULL);
        if command > MAX_COMMAND {
            return Err(SendError::CommandOutOfRange(command));
        }
        let bcast = options.contains(Options::BROADCAST) || Some(peer) == self.broadcast_addr;
        if bcast && self.broadcast_addr.is_none() {
            return Err(SendError::NoBroadcast);
        }
        let size = data.len() as u64;
        let max = self.cfg.max_message_size.min(MAX_MESSAGE_SIZE);
        if size > max {
            return Err(SendError::TooLarge { size, max });
        }
        if check_room && !self.has_room(size) {
            return Err(SendError::Full {
                stored: self.stored_bytes,
                size,
                limit: self.cfg.max_stored_bytes,
            });
        }
        let part = if bcast {
            self.cfg.data_size
        } else {
            self.data_size_to(peer)
        };
        let count = (data.len().div_ceil(part)).max(1);
        if count > u32::MAX as usize {
            return Err(SendError::TooLarge {
                size,
                max: u32::MAX as u64 * part as u64,
            });
        }
        let count = count as u32;
        let dest = if bcast {
            Dest::Broadcast
        } else {
            Dest::Peer(peer)
        };
        let options = options.difference(Options::START_SESSION | Options::BROADCAST);
        let mut many = Vec::new();
        if count > 1 {
            many.try_reserve_exact(count as usize)
                .map_err(|_| SendError::OutOfMemory(size))?;
            many.resize(count as usize, PktState::new(now));
        }
        let span = self.span.clone();
        let _entered = span.enter();
        if options.contains(Options::UNIQUE_COMMAND) {
            if let Some(old) = self.unique_index.remove(&(dest, command)) {
                self.remove_msg(old);
            }
        }
        let session = self.session_id(dest);
        let sess = self.send_sessions.at_mut(session);
        let first_id = sess.next_id;
        sess.next_id = first_id.wrapping_add(count);
        let start_session = !sess.started;
        sess.started = true;
        let key = self.sent.insert(SentMsg {
            dest,
            session,
            command,
            options,
            first_id,
            amount: count,
            part_size: part,
            data,
            start_session,
            single: PktState::new(now),
            many,
            next_unsent: 0,
            unconfirmed: count,
            active: true,
            errored: false,
            offer,
        });
        if !sess.enqueue(key, count, self.cfg.max_active_large) {
            self.sent.get_mut(&key).expect("inserted").active = false;
        }
        sess.add_msg(first_id, key);
        sess.unsent_bytes += size;
        self.stored_bytes += size;
        if options.contains(Options::UNIQUE_COMMAND) {
            self.unique_index.insert((dest, command), key);
        }
        self.release(now, session);
        Ok(key)
    }

    /// Sends a ping: an empty command with DelAfterError|NoResend|UniqueCommand
    /// (spec, "Options"). The peer confirms it; no confirmation within the
    /// resend schedule gives a NotConfirmed error delivery.
    pub fn ping(&mut self, now: Instant, command: u16, peer: P) -> Result<MsgId, SendError> {
        self.send_vec(now, command, peer, Vec::new(), Options::PING)
    }

    /// Drops a message from the sent-commands storage (no further resends, no
    /// error) at `now`; the packets waiting behind it are released into the
    /// window it held. Returns false if it was not there (already confirmed
    /// or dropped).
    pub fn cancel(&mut self, now: Instant, msg: MsgId) -> bool {
        let Some(session) = self.sent.get(&msg).map(|m| m.session) else {
            return false;
        };
        self.remove_msg(msg);
        self.release(now, session);
        true
    }

    /// True if a message of `size` bytes fits the sent-commands storage now
    /// (see [`Config::max_stored_bytes`](super::Config::max_stored_bytes)).
    pub fn has_room(&self, size: u64) -> bool {
        self.stored_bytes == 0 || self.stored_bytes + size <= self.cfg.max_stored_bytes
    }

    /// [`Endpoint::has_room`], and `peer` has fewer unsent bytes than
    /// [`Config::notsent_lowat`](super::Config::notsent_lowat) (messages
    /// stored and not yet released to its window): what `CtpSocket::send`
    /// waits for.
    pub fn has_room_to(&self, peer: P, size: u64) -> bool {
        self.has_room(size)
            && self
                .send_sessions
                .get(&Dest::Peer(peer))
                .is_none_or(|s| s.unsent_bytes < self.cfg.notsent_lowat)
    }

    /// Whether a destination's unsent bytes fell below
    /// `Config::notsent_lowat` since the last call (a sender waiting in
    /// [`Endpoint::has_room_to`] may go on), clearing it.
    pub fn take_unsent_news(&mut self) -> bool {
        std::mem::take(&mut self.unsent_news)
    }

    /// Bytes of message data in the sent-commands storage.
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// A count that grows whenever a stored message settles: it leaves the
    /// storage (confirmed, cancelled, given up) or, for an offered message,
    /// its announcement is confirmed. One load tells an owner polling
    /// [`Endpoint::is_unconfirmed`] / [`Endpoint::is_pending`] whether
    /// anything changed.
    pub fn settled(&self) -> u64 {
        self.settled
    }

    /// True while message `msg` awaits confirmation (an offered message:
    /// until its receiver is done with it).
    pub fn is_pending(&self, msg: MsgId) -> bool {
        self.sent.contains_key(&msg)
    }

    /// True while some packet of message `msg` is unconfirmed: for an
    /// offered message, while its announcement is (then the receiver has
    /// it, and pulls the body when it wants).
    pub fn is_unconfirmed(&self, msg: MsgId) -> bool {
        self.sent.get(&msg).is_some_and(|m| m.unconfirmed > 0)
    }

    /// Removes message `key` from the storage and its packets from the
    /// window (their timers go stale).
    pub(super) fn remove_msg(&mut self, key: MsgId) {
        let Some(m) = self.sent.remove(&key) else {
            return;
        };
        self.settled += 1;
        self.stored_bytes -= m.data.len() as u64;
        let released = m.part(m.next_unsent.min(m.count())).0.min(m.data.len());
        let unreleased = (m.data.len() - released) as u64;
        if m.options.contains(Options::UNIQUE_COMMAND)
            && self.unique_index.get(&(m.dest, m.command)) == Some(&key)
        {
            self.unique_index.remove(&(m.dest, m.command));
        }
        let s = self.send_sessions.at_mut(m.session);
        s.remove_msg(m.first_id);
        let lowat = self.cfg.notsent_lowat;
        self.unsent_news |= s.unsent_bytes >= lowat && s.unsent_bytes - unreleased < lowat;
        s.unsent_bytes -= unreleased;
        if m.active && m.count() > 1 {
            s.retire_large(&mut self.sent, self.cfg.max_active_large);
        }
        for i in 0..m.count() {
            if m.pkt(i).phase == PktPhase::InFlight {
                s.in_flight_pkts -= 1;
                s.in_flight_bytes -= m.wire_len(i);
            }
        }
        self.spare.put(m.data);
    }

    /// An empty buffer of at least `len` bytes of capacity for a message to
    /// send with [`send_vec`](Self::send_vec): a spent one of about that
    /// size if the pool has one (`Config::max_spare_bytes`), else a new one.
    ///
    /// Errors: [`SendError::OutOfMemory`] if a new buffer cannot be
    /// allocated.
    pub fn take_buffer(&mut self, len: usize) -> Result<Vec<u8>, SendError> {
        let mut v = self.spare.take(len).unwrap_or_default();
        v.try_reserve_exact(len)
            .map_err(|_| SendError::OutOfMemory(len as u64))?;
        Ok(v)
    }

    /// Hands back a buffer the application is done with (a delivered
    /// message's, say) for later sends and reassemblies; kept if it is
    /// large enough and the pool has room (`Config::max_spare_bytes`),
    /// else freed.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.spare.put(buf);
    }

    /// Releases packets of queued messages into the transmit queue while the
    /// destination's window allows (round-robin, one packet per message turn),
    /// arming each packet's resend and error timers, and the tail probe of
    /// the last one released.
    pub(super) fn release(&mut self, now: Instant, session: SessionId) {
        let sess = self.send_sessions.at_mut(session);
        let mut newest = None;
        // The last packet is armed after the tail probe below, so its group's
        // entry is pushed at its earliest `due`, not once more for the probe.
        let mut unqueued = None;
        loop {
            if sess.in_flight_pkts >= self.cfg.window_packets
                || (sess.in_flight_pkts > 0 && sess.in_flight_bytes >= self.cfg.window_bytes)
            {
                break;
            }
            let Some(key) = sess.queue.pop_front() else {
                break;
            };
            if let Some((k, j)) = unqueued.take() {
                arm(&mut self.sent, &mut self.timers, k, j);
            }
            let Some(m) = self.sent.get_mut(&key) else {
                continue;
            };
            if m.next_unsent >= m.count() {
                continue;
            }
            let i = m.next_unsent;
            m.next_unsent += 1;
            let (s, e) = m.part(i);
            let lowat = self.cfg.notsent_lowat;
            self.unsent_news |=
                sess.unsent_bytes >= lowat && sess.unsent_bytes - ((e - s) as u64) < lowat;
            sess.unsent_bytes -= (e - s) as u64;
            let timeout = sess.timing.timeout();
            let wire = m.wire_len(i);
            let no_resend = m.options.contains(Options::NO_RESEND);
            let p = m.pkt_mut(i);
            p.phase = PktPhase::InFlight;
            p.transmissions = 1;
            p.first_sent = now;
            p.mult = 1;
            p.base = timeout;
            if !timeout.is_zero() {
                // spec: 8 resends at (2^k - 1) T, the error at 511 T
                let error_after = self.cfg.error_after(timeout);
                p.resend_at = (!no_resend).then(|| later(now, timeout));
                p.error_at = Some(later(now, error_after));
                if let (Some(stall), Some(ut)) = (sess.timing.stall_start, self.cfg.user_timeout) {
                    // To a suspected destination: its error comes by the
                    // destination's user timeout (at least min_error_delay
                    // after this send), however long T grew meanwhile
                    // (liveness.rs).
                    let dead = later(stall, ut).max(later(now, self.cfg.min_error_delay));
                    p.error_at = p.error_at.map(|e| e.min(dead));
                    p.resend_at = p
                        .resend_at
                        .map(|r| r.min(later(now, self.cfg.max_probe_period)));
                }
                p.update_due();
                unqueued = Some((key, i));
            }
            p.seq = sess.note_transmission(key, i);
            p.first_seq = p.seq;
            sess.newest_first_seq = p.seq;
            newest = Some((key, i));
            sess.in_flight_pkts += 1;
            sess.in_flight_bytes += wire;
            self.tx.push_back(Tx::Data { key, idx: i });
            self.stats.data_packets_sent += 1;
            if m.next_unsent < m.count() {
                sess.queue.push_back(key);
            } else if m.count() > 1 {
                m.active = false;
                sess.retire_large(&mut self.sent, self.cfg.max_active_large);
            }
        }
        if let (Some((key, i)), Some(srtt), true) =
            (newest, sess.timing.srtt(), self.cfg.tail_probe)
        {
            // the tail of what was just sent: arm its probe (RFC 8985 7.2)
            let pto = (srtt * 2)
                .max(self.cfg.min_probe_timeout)
                .max(sess.timing.stall());
            let at = later(now, pto);
            let p = self.sent.get_mut(&key).expect("released").pkt_mut(i);
            if p.resend_at.is_some_and(|r| at < r) {
                p.probe_at = Some(at);
                p.update_due();
                // With a resend time the newest packet has timers: it is the
                // one not armed yet.
                debug_assert_eq!(unqueued, Some((key, i)));
            }
        }
        if let Some((k, j)) = unqueued {
            arm(&mut self.sent, &mut self.timers, k, j);
        }
        self.compact_send_order(session);
    }
}

/// Arms packet `i` of message `key` in the timer queue ([`SentMsg::arm`]),
/// if the message is still stored.
fn arm<P: PeerAddr>(
    sent: &mut SentStore<P>,
    timers: &mut TimerQueue<(MsgId, u32)>,
    key: MsgId,
    i: u32,
) {
    if let Some(m) = sent.get_mut(&key) {
        m.arm(i, key, timers);
    }
}
