//! The sans-IO CTP core: an [`Endpoint`] takes datagrams (`handle_datagram(now,
//! from, bytes)`) and timeouts (`handle_timeout(now)`), and yields datagrams to
//! send ([`Endpoint::poll_transmit`], [`Endpoint::poll_transmit_gather`]),
//! deliveries ([`Endpoint::poll_delivery`]) and its next deadline
//! ([`Endpoint::poll_timeout`]). It does no I/O and reads no clock: every
//! instant is an argument, so tests run on a virtual clock.
//!
//! Rules (CTP spec v1.2, "Internal World"; details in PROTOCOL.md):
//! - every data packet is confirmed by a header-only confirmation; duplicates
//!   are confirmed again and never delivered twice (per-peer received-id list);
//! - a sent packet is kept until confirmed, resent with an exponentially
//!   growing period (1, 2, 4, ... timeouts); after 8 resends (511 timeouts
//!   after the first send) without a confirmation the sender gets a "not
//!   confirmed" error delivery;
//! - the per-peer timeout is 100 ms until the first exchange, then the measured
//!   time x 3 (here: max(3 x SRTT, SRTT + 4 x RTTVAR), RFC 6298, Karn's rule);
//! - large messages are split into parts of at most `data_size` bytes and
//!   delivered only when complete.
//!
//! Beyond the spec (wire-compatible): a destination that stops confirming is
//! suspected at the spec's "not confirmed" deadline and declared dead only
//! after [`Config::user_timeout`] (`liveness`); a per-destination send window; bounded
//! sessions, received-id lists, reassembly memory, delivery and confirmation
//! queues ([`Config`], each limit counted in [`Stats`]); on a live link a
//! packet's resend period stops growing at [`Config::max_resend_period`];
//! early resend ([`Config::early_resend`]) and tail probes
//! ([`Config::tail_probe`]) after RFC 8985.
//!
//! Files, one concept each: `config`, `delivery` (the public output types
//! and the bounded deliveries storage), `stats`, `send` (the send path and
//! window release), `loss` (confirmations, RTT samples, loss detection, the
//! per-packet timer actions), `liveness` (suspicion and the user timeout),
//! `recv` (received data, reassembly and its
//! limits), `sessions` (the bounded receiving sessions), `timers`
//! (`handle_timeout` / `poll_timeout` over the packet timer queue).

use std::collections::VecDeque;
use std::time::{Instant, SystemTime};

use netcore::timer::TimerQueue;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::pool::BufferPool;
use crate::puller::{PullId, Pulls, MAX_RANGES};
use crate::receiver::Reassembly;
use crate::sender::{Dest, PktPhase, SendSessions, SentStore};
use crate::wire::{Kind, Options, Repr, CTP_HEADER_LEN, MAX_PACKET_LEN, REQUEST_PREFIX_LEN};

mod config;
mod delivery;
mod liveness;
mod loss;
mod offer;
mod pull;
mod recv;
mod send;
mod sessions;
mod stats;
mod timers;

pub use crate::id::{MsgId, PeerAddr};
pub use config::Config;
pub use delivery::{
    Delivery, ErrorInfo, ErrorType, GatherTransmit, Offer, PayloadRef, Pulled, ReceivedData,
    SendError, Transmit,
};
pub use offer::MAX_PARTS_PER_REQUEST;
pub use stats::{Stats, StorageSizes};

use delivery::DeliveryQueue;
use sessions::{RecvSessions, Source};

/// A datagram waiting in the transmit queues.
#[derive(Debug, Clone, Copy)]
enum Tx<P> {
    Confirm {
        to: P,
        repr: Repr,
    },
    Data {
        key: MsgId,
        idx: u32,
    },
    /// Part `idx` of offered message `key`, answering request `echo`.
    Part {
        key: MsgId,
        idx: u32,
        echo: u32,
    },
    /// Request `seq` of pull `pull`.
    Request {
        pull: PullId,
        seq: u32,
    },
}

/// Bytes [`Endpoint::poll_transmit_gather`] may write into its header
/// buffer: a request's header and body (a header of a data packet or a
/// confirmation is [`CTP_HEADER_LEN`]).
pub const MAX_INLINE_LEN: usize = CTP_HEADER_LEN + REQUEST_PREFIX_LEN + 8 * MAX_RANGES;

/// The CTP protocol state of one local endpoint (all peers).
#[derive(Debug)]
pub struct Endpoint<P: PeerAddr> {
    cfg: Config,
    broadcast_addr: Option<P>,
    wall_base: (Instant, SystemTime),
    rng: ChaCha8Rng,
    span: tracing::Span,
    // --- sending (send.rs, loss.rs) ---
    send_sessions: SendSessions<P>,
    sent: SentStore<P>,
    unique_index: FxHashMap<(Dest<P>, u16), MsgId>,
    stored_bytes: u64,
    /// Messages that left the storage or whose last packet was confirmed,
    /// ever ([`Endpoint::settled`]).
    settled: u64,
    /// A destination's unsent bytes fell below `Config::notsent_lowat`
    /// since the last [`Endpoint::take_unsent_news`].
    unsent_news: bool,
    /// Spent large buffers for reuse (`Config::max_spare_bytes`).
    spare: BufferPool,
    /// Peers whose links carry less than ours: data bytes per packet to
    /// each, below `Config::data_size` (`set_peer_data_size`); at most
    /// [`MAX_PEER_DATA_SIZES`] entries.
    peer_data_size: FxHashMap<P, usize>,
    /// Packet deadlines (resend, tail probe, error), one entry per
    /// (message, group of `TIMER_GROUP` packets), lazily invalidated: an
    /// entry is live while its group's `group_due` is that time (timers.rs).
    timers: TimerQueue<(MsgId, u32)>,
    // --- receiving (recv.rs, sessions.rs) ---
    recv_ids: RecvSessions<P>,
    reassembly: FxHashMap<(P, bool, u32), Reassembly>,
    /// Bytes reserved by `reassembly`, in all and per source.
    reassembly_bytes: u64,
    reassembly_per_source: FxHashMap<Source<P>, u64>,
    /// Messages refused for the reassembly limits and already reported
    /// (one error each); cleared beyond 4096 entries.
    refused_reassemblies: FxHashSet<(P, bool, u32)>,
    next_reassembly_check: Option<Instant>,
    deliveries: DeliveryQueue<P>,
    // --- pulled messages (offer.rs, pull.rs) ---
    pulls: Pulls<P>,
    /// Parts of offered messages in the transmit queue
    /// (`Config::max_queued_parts`).
    queued_parts: usize,
    // --- output ---
    tx: VecDeque<Tx<P>>,
    /// Confirmations wait behind data: a reply goes out before the
    /// confirmation of the request it answers (latency), a few packets later.
    tx_conf: VecDeque<Tx<P>>,
    group: Vec<P>,
    /// Addresses our own broadcasts came back from (UDP loopback of a
    /// broadcast to our own port).
    self_addrs: Vec<P>,
    stats: Stats,
}

/// Most peers with a data size of their own
/// ([`Endpoint::set_peer_data_size`]).
pub const MAX_PEER_DATA_SIZES: usize = 1 << 16;

/// Most queued confirmations [`Endpoint::take_confirmations_to`] looks at
/// for one packet (bounds its cost when many peers are owed one).
pub const PACK_SCAN: usize = 64;

impl<P: PeerAddr> Endpoint<P> {
    /// A new endpoint. `now`/`wall_now` pair the monotonic and wall clocks for
    /// error timestamps; `seed` seeds the random starting ids (spec: "initial
    /// value of ID ... pseudorandom"); `broadcast_addr` is the transport's
    /// broadcast destination, if it has one. Its `tracing` span is
    /// `ctp_endpoint{seed}` until [`set_span`](Self::set_span).
    ///
    /// Panics if `cfg.data_size` is 0 or exceeds 65510 (the 16-bit size field).
    pub fn new(
        cfg: Config,
        now: Instant,
        wall_now: SystemTime,
        seed: u64,
        broadcast_addr: Option<P>,
    ) -> Self {
        assert!(
            cfg.data_size > 0 && cfg.data_size + CTP_HEADER_LEN <= MAX_PACKET_LEN,
            "CTP data size {} out of range 1..={}",
            cfg.data_size,
            MAX_PACKET_LEN - CTP_HEADER_LEN
        );
        let deliveries = DeliveryQueue::new(cfg.max_queued_errors);
        let spare = BufferPool::new(cfg.max_spare_bytes);
        Self {
            cfg,
            broadcast_addr,
            wall_base: (now, wall_now),
            rng: ChaCha8Rng::seed_from_u64(seed),
            span: tracing::debug_span!("ctp_endpoint", seed),
            send_sessions: SendSessions::default(),
            sent: SentStore::default(),
            unique_index: FxHashMap::default(),
            stored_bytes: 0,
            settled: 0,
            unsent_news: false,
            spare,
            peer_data_size: FxHashMap::default(),
            timers: TimerQueue::new(),
            recv_ids: RecvSessions::new(),
            reassembly: FxHashMap::default(),
            reassembly_bytes: 0,
            reassembly_per_source: FxHashMap::default(),
            refused_reassemblies: FxHashSet::default(),
            next_reassembly_check: None,
            deliveries,
            pulls: Pulls::default(),
            queued_parts: 0,
            tx: VecDeque::new(),
            tx_conf: VecDeque::new(),
            group: Vec::new(),
            self_addrs: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Replaces the `tracing` span the endpoint's events are recorded in
    /// (a driver names it after its local address).
    pub fn set_span(&mut self, span: tracing::Span) {
        self.span = span;
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Sends messages to `peer` in packets of at most `size` data bytes
    /// (never more than `Config::data_size`; at least 1): a peer whose
    /// link carries smaller frames than ours (another MTU) gets every part
    /// whole. Messages queued already keep their part size. Returns false
    /// when [`MAX_PEER_DATA_SIZES`] peers have a limit already (the peer
    /// then gets `Config::data_size`).
    pub fn set_peer_data_size(&mut self, peer: P, size: usize) -> bool {
        let size = size.clamp(1, self.cfg.data_size);
        if size == self.cfg.data_size {
            self.peer_data_size.remove(&peer);
            return true;
        }
        if self.peer_data_size.len() >= MAX_PEER_DATA_SIZES
            && !self.peer_data_size.contains_key(&peer)
        {
            return false;
        }
        self.peer_data_size.insert(peer, size);
        true
    }

    /// Data bytes per packet of a message to `peer` (see
    /// [`Endpoint::set_peer_data_size`]).
    pub fn data_size_to(&self, peer: P) -> usize {
        self.peer_data_size
            .get(&peer)
            .copied()
            .unwrap_or(self.cfg.data_size)
    }

    /// The broadcast destination of the transport.
    pub fn broadcast_addr(&self) -> Option<P> {
        self.broadcast_addr
    }

    /// Handles one received datagram from `from`. Malformed input is counted
    /// in [`Stats::malformed`] and dropped.
    pub fn handle_datagram(&mut self, now: Instant, from: P, datagram: &[u8]) {
        let span = self.span.clone();
        let _entered = span.enter();
        let (r, body) = match Repr::parse(datagram) {
            Ok(x) => x,
            Err(e) => {
                tracing::trace!(?from, error = %e, "malformed datagram dropped");
                self.stats.malformed += 1;
                return;
            }
        };
        match r.kind() {
            Kind::Confirm => self.on_confirm(now, from, &r),
            Kind::Request => self.on_request(now, from, &r, body),
            Kind::Part => self.on_pulled_part(now, from, &r, body),
            Kind::Data | Kind::Offer | Kind::Done => self.on_data(now, from, &r, body),
        }
    }

    /// Writes the CTP header of the next datagram to send into `hdr` (at
    /// least [`MAX_INLINE_LEN`] bytes: a pull's request carries its short
    /// body behind the header) and returns its destination, the header
    /// length and a reference to its data part, which
    /// [`payload`](Self::payload) resolves to bytes inside the stored
    /// message: the body is not copied (a confirmation has none). Send the
    /// header followed by the payload as one datagram.
    ///
    /// Panics if `hdr` is shorter than 25 bytes.
    #[must_use]
    pub fn poll_transmit_gather(&mut self, hdr: &mut [u8]) -> Option<GatherTransmit<P>> {
        while let Some(tx) = self.tx.pop_front().or_else(|| self.tx_conf.pop_front()) {
            match tx {
                Tx::Confirm { to, repr } => {
                    repr.emit(hdr);
                    return Some(GatherTransmit {
                        dest: to,
                        header_len: CTP_HEADER_LEN,
                        payload: PayloadRef::EMPTY,
                        confirm: true,
                    });
                }
                Tx::Data { key, idx } => {
                    let Some(m) = self.sent.get(&key) else {
                        continue;
                    };
                    if m.pkt(idx).phase != PktPhase::InFlight {
                        continue;
                    }
                    let dest = match m.dest {
                        Dest::Peer(p) => p,
                        Dest::Broadcast => match self.broadcast_addr {
                            Some(b) => b,
                            None => continue,
                        },
                    };
                    m.repr(idx).emit(hdr);
                    let (start, end) = m.part(idx);
                    return Some(GatherTransmit {
                        dest,
                        header_len: CTP_HEADER_LEN,
                        payload: PayloadRef {
                            msg: key,
                            start,
                            end,
                            body: false,
                        },
                        confirm: false,
                    });
                }
                Tx::Part { key, idx, echo } => {
                    self.queued_parts -= 1;
                    let Some(m) = self.sent.get(&key) else {
                        continue;
                    };
                    let (Some(o), Dest::Peer(dest)) = (m.offer.as_ref(), m.dest) else {
                        continue;
                    };
                    let (start, end) = o.part_range(idx);
                    Repr {
                        command: m.command,
                        confirm: false,
                        number: idx,
                        amount: echo,
                        id: m.first_id,
                        message_size: o.size(),
                        options: Options::PULL,
                        payload_len: (end - start) as u16,
                    }
                    .emit(hdr);
                    return Some(GatherTransmit {
                        dest,
                        header_len: CTP_HEADER_LEN,
                        payload: PayloadRef {
                            msg: key,
                            start,
                            end,
                            body: true,
                        },
                        confirm: false,
                    });
                }
                Tx::Request { pull, seq } => {
                    let Some((dest, len)) = self.emit_request(pull, seq, hdr) else {
                        continue;
                    };
                    return Some(GatherTransmit {
                        dest,
                        header_len: len,
                        payload: PayloadRef::EMPTY,
                        confirm: false,
                    });
                }
            }
        }
        None
    }

    /// After [`poll_transmit_gather`](Self::poll_transmit_gather) returned a
    /// packet to `to`: takes the confirmations queued for the same peer
    /// (among the first `PACK_SCAN` queued) and writes their 25-byte
    /// headers back to back into `hdrs`, as many as fit; returns the bytes
    /// written (a multiple of 25). A carrier that can put several CTP
    /// packets in one datagram (CTP over EDP, ctp/PROTOCOL.md
    /// "Confirmations share a frame") sends them in front of that packet,
    /// so a reply carries the confirmation of the request; over UDP every
    /// packet stays its own datagram (wire compatibility).
    pub fn take_confirmations_to(&mut self, to: &P, hdrs: &mut [u8]) -> usize {
        let mut written = 0;
        let mut i = 0;
        let mut scanned = 0;
        while scanned < PACK_SCAN
            && i < self.tx_conf.len()
            && written + CTP_HEADER_LEN <= hdrs.len()
        {
            scanned += 1;
            match &self.tx_conf[i] {
                Tx::Confirm { to: t, repr } if t == to => {
                    repr.emit(&mut hdrs[written..written + CTP_HEADER_LEN]);
                    self.tx_conf.remove(i);
                    written += CTP_HEADER_LEN;
                }
                _ => i += 1,
            }
        }
        written
    }

    /// The data part `r` of a [`GatherTransmit`]: bytes of the stored
    /// message. Valid until the endpoint is changed by anything other than
    /// [`poll_transmit_gather`](Self::poll_transmit_gather); a reference made
    /// stale by a confirmation resolves to an empty slice.
    pub fn payload(&self, r: PayloadRef) -> &[u8] {
        if r.is_empty() {
            return &[];
        }
        let m = self.sent.get(&r.msg);
        let bytes = if r.body {
            m.and_then(|m| m.offer.as_ref())
                .and_then(|o| o.buf.bytes().get(r.start..r.end))
        } else {
            m.and_then(|m| m.data.get(r.start..r.end))
        };
        debug_assert!(bytes.is_some(), "stale CTP payload reference {r:?}");
        bytes.unwrap_or(&[])
    }

    /// Writes the next datagram to send into `buf` (which must hold at least
    /// [`Config::max_packet_len`] bytes) and returns its destination and
    /// length: [`poll_transmit_gather`](Self::poll_transmit_gather) with the
    /// data part copied behind the header, for transports that take one
    /// buffer.
    #[must_use]
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit<P>> {
        let t = self.poll_transmit_gather(buf)?;
        let body = self.payload(t.payload);
        buf[t.header_len..t.header_len + body.len()].copy_from_slice(body);
        Some(Transmit {
            dest: t.dest,
            len: t.len(),
        })
    }

    /// Packets (data, pulled parts, pull requests; not confirmations)
    /// waiting in the transmit queue: compared before and after a call to
    /// learn whether it queued any.
    pub fn queued_packets(&self) -> usize {
        self.tx.len()
    }

    /// True if [`poll_transmit`](Self::poll_transmit) may return a datagram.
    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty() || !self.tx_conf.is_empty()
    }

    /// Whether a delivery (data or an error) waits for
    /// [`poll_delivery`](Self::poll_delivery).
    pub fn has_delivery(&self) -> bool {
        !self.deliveries.is_empty()
    }

    /// The next delivery, if any.
    #[must_use]
    pub fn poll_delivery(&mut self) -> Option<Delivery<P>> {
        self.deliveries.pop()
    }

    /// Large messages being reassembled (cheap; see [`StorageSizes`]).
    pub fn reassembling(&self) -> usize {
        self.reassembly.len()
    }

    /// Storage sizes (O(receiving sessions)).
    pub fn storage_sizes(&self) -> StorageSizes {
        // peers as the spec counts them: a destination with send or receive
        // state; every source's broadcast list belongs to the one broadcast
        // session
        let mut recv_only = 0;
        let mut broadcast_only = false;
        for (p, b) in self.recv_ids.sources() {
            if *b {
                broadcast_only |= !self.send_sessions.contains_key(&Dest::Broadcast);
            } else if !self.send_sessions.contains_key(&Dest::Peer(*p)) {
                recv_only += 1;
            }
        }
        StorageSizes {
            awaiting_confirmation: self.sent.len(),
            sessions: self.send_sessions.len() + recv_only + usize::from(broadcast_only),
            large_in_progress: self.reassembly.len(),
            deliveries_queued: self.deliveries.len(),
            busy_deliverers: 0,
            deliverers: 0,
            receiving_sessions: self.recv_ids.len(),
            out_of_order_ids: self.recv_ids.ids_total(),
            reassembly_bytes: self.reassembly_bytes,
            delivery_bytes_queued: self.deliveries.data_bytes(),
            errors_queued: self.deliveries.errors(),
            confirmations_queued: self.tx_conf.len(),
        }
    }

    /// Event counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The received-id list of `peer` as the spec writes it (for tests and debugging).
    pub fn received_ids(&self, peer: P, broadcast: bool) -> Vec<u32> {
        self.recv_ids
            .list(&(peer, broadcast))
            .map(|l| l.as_vec())
            .unwrap_or_default()
    }

    /// Queues an error delivery (used by drivers for transport errors;
    /// bounded by [`Config::max_queued_errors`]).
    pub fn push_error(&mut self, now: Instant, kind: ErrorType, code: i64, peer: Option<P>) {
        self.error(now, kind, code, peer, None, None);
    }

    /// Queues an error delivery, stamped with the wall-clock time of `now`
    /// (spec: the time of the error, not of its delivery).
    fn error(
        &mut self,
        now: Instant,
        kind: ErrorType,
        code: i64,
        peer: Option<P>,
        command: Option<u16>,
        msg: Option<MsgId>,
    ) {
        let timestamp = self.wall_base.1 + now.saturating_duration_since(self.wall_base.0);
        let queued = self.deliveries.push_error(ErrorInfo {
            kind,
            code,
            peer,
            command,
            msg,
            at: now,
            timestamp,
        });
        if !queued {
            self.stats.errors_suppressed += 1;
            tracing::debug!(?kind, ?peer, "error delivery dropped: error queue full");
        }
    }
}

#[cfg(test)]
mod tests;
