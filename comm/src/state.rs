//! The communicator's protocol state, free of I/O: peers (lazy), fragment
//! queues and windows, per-peer reorder buffers, the two matching engines
//! (point-to-point and collective contexts), requests and counters. The
//! socket side (`communicator.rs`) feeds it CTP deliveries and hands its
//! fragments to CTP.

use std::collections::VecDeque;
use std::hash::Hash;

use std::time::Instant;

use ctp::{Delivery, Endpoint, ErrorInfo, ErrorType, MsgId, Options, PeerAddr, ReceivedData};
use rustc_hash::FxHashMap;

use crate::config::CommConfig;
use crate::control::{Control, CONTROL_COMMAND, CONTROL_LEN};
use crate::flow::{Grants, SendWindow};
use crate::liveness::Liveness;
use crate::matching::{Envelope, Matched, Matcher, SourceSel, Tag, TagSel, MAX_TAG};
use crate::reorder::{Complete, PeerRx};
use crate::request::{ReqState, Status};
use crate::stats::CommStats;
use crate::wire::{Header, COMM_COMMAND, FLAG_LAST, HEADER_LEN};
use crate::CommError;

#[path = "state_liveness.rs"]
mod liveness;
#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
#[path = "state_ulfc.rs"]
mod ulfc;

/// Bit of the context id marking collective traffic.
pub(crate) const COLLECTIVE_CONTEXT: u16 = 0x8000;

/// Most control messages queued for CTP (user requests: `through`,
/// `rapid`, `disconnect`, `reconnect`), per peer; beyond it the call fails
/// with `CommError::SendQueueFull`.
const CONTROL_QUEUE_PER_PEER: usize = 16;

/// A message waiting for the window: its bytes behind `HEADER_LEN` bytes
/// of room for the header (so a message sent in one fragment is not
/// copied again), how much of it is cut into fragments already, and the
/// request to credit when its last fragment is handed to CTP.
#[derive(Debug)]
struct OutMessage {
    context: u16,
    tag: Tag,
    buf: Vec<u8>,
    off: usize,
    req: u64,
    /// Fragment slots counted in `State::pending_fragments` (at the
    /// configured fragment size).
    slots: usize,
}

impl OutMessage {
    fn len(&self) -> usize {
        self.buf.len() - HEADER_LEN
    }
}

/// The send side of a peer (lazy connection on first send, thesis ch. 6).
///
/// Two windows hold a fragment back: the ULFC window in bytes
/// ([`SendWindow`], granted by the peer, `flow.rs`) and a span of sequence
/// numbers: a fragment is handed to CTP only while its sequence number is
/// less than the oldest unconfirmed one's plus `window_fragments`. CTP
/// confirms out of order, so counting unconfirmed fragments would let the
/// span (and the receiver's reorder buffer) grow without bound behind one
/// slow fragment. Fragments are cut when they go, at most
/// `fragment_bytes` and at most what the byte window allows.
#[derive(Debug)]
struct PeerTx {
    next_seq: u64,
    pending: VecDeque<OutMessage>,
    /// (sequence number, CTP message, bytes), in sequence order.
    in_flight: VecDeque<(u64, MsgId, u64)>,
    /// Control messages handed to CTP and unconfirmed.
    ctl_in_flight: Vec<MsgId>,
    win: SendWindow,
    /// A sequence reset is queued or unconfirmed (its CTP message once
    /// handed): no fragment goes until the peer's endpoint has it, so the
    /// peer sees it before the first renumbered fragment.
    reset: Option<Option<MsgId>>,
    /// Whether the peer has our incarnation (`liveness.rs`).
    intro: Intro,
}

/// How far the peer is in learning our incarnation: the first control
/// message to a peer is one that carries it (`CONNECT` or `PROBE`), and
/// nothing else goes to the peer until its endpoint has confirmed it, so
/// that no message of ours can overtake it (a restarted rank's first
/// fragments would otherwise reach a peer that still expects the old
/// process's sequence numbers). Costs one round trip before the first
/// message to each peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intro {
    /// Nothing sent yet.
    None,
    /// Queued in `ctl_out`.
    Queued,
    /// Handed to CTP, unconfirmed.
    InFlight(MsgId),
    /// Confirmed.
    Done,
}

impl PeerTx {
    fn new(share: u64) -> Self {
        PeerTx {
            next_seq: 0,
            pending: VecDeque::new(),
            in_flight: VecDeque::new(),
            ctl_in_flight: Vec::new(),
            win: SendWindow::new(share),
            reset: None,
            intro: Intro::None,
        }
    }

    /// Nothing but the introduction may go yet.
    fn gated(&self) -> bool {
        matches!(self.intro, Intro::Queued | Intro::InFlight(_))
    }
}

impl PeerTx {
    /// The payload length of the next fragment if both windows let it go.
    fn next_chunk(&self, frag: usize, span: usize) -> Option<usize> {
        let m = self.pending.front()?;
        if self.reset.is_some() || self.intro != Intro::Done {
            return None;
        }
        if let Some(&(oldest, _, _)) = self.in_flight.front() {
            if self.next_seq >= oldest + span as u64 {
                return None;
            }
        }
        let remaining = m.len() - m.off;
        let room = (self.win.window as usize).saturating_sub(HEADER_LEN);
        let chunk = remaining.min(frag).min(room);
        if chunk == 0 && remaining > 0 {
            return None;
        }
        self.win.fits((HEADER_LEN + chunk) as u64).then_some(chunk)
    }
}

/// A fragment ready for CTP.
#[derive(Debug)]
pub(crate) struct Sendable {
    pub dest: usize,
    pub seq: u64,
    pub bytes: Vec<u8>,
    /// Wire length, bytes (kept when `bytes` moves to CTP).
    pub len: u64,
    pub req: u64,
    pub last: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct State<A> {
    pub rank: usize,
    pub size: usize,
    pub cfg: CommConfig,
    by_addr: FxHashMap<A, usize>,
    tx: Vec<PeerTx>,
    grants: Grants,
    ctl_out: VecDeque<(usize, Control)>,
    rx: Vec<Option<PeerRx>>,
    failed: Vec<Option<String>>,
    p2p: Matcher<u64>,
    coll: Matcher<u64>,
    /// In-order messages the matching engines had no room for; while any is
    /// held no further delivery is taken from CTP (its queue fills and its
    /// senders resend later).
    held: VecDeque<(bool, Envelope, Vec<u8>)>,
    requests: FxHashMap<u64, ReqState>,
    next_req: u64,
    pending_fragments: usize,
    rr: usize,
    coll_seq: Tag,
    pub stats: CommStats,
    /// This process's incarnation (`control.rs`): random, nonzero.
    incarnation: u64,
    /// Each peer's incarnation as last announced; for a failed peer, the
    /// one that failed.
    peer_incarnation: Vec<Option<u64>>,
    /// `EXPEL` sent to the (failed) peer since it failed.
    expelled: Vec<bool>,
    liveness: Liveness,
    /// CTP messages to cancel at the next `pump_sends` (toward failed
    /// peers: no resending to a dead process).
    to_cancel: Vec<MsgId>,
    /// A rank waited on outside the matching engines (the root of a
    /// broadcast over MAK): watched by the failure detector as if a
    /// receive named it.
    pub awaited: Option<usize>,
}

impl<A: Copy + Eq + Hash + std::fmt::Debug> State<A> {
    pub fn new(rank: usize, hosts: &[A], cfg: CommConfig) -> Result<Self, CommError> {
        let size = hosts.len();
        if rank >= size {
            return Err(CommError::InvalidRank { rank, size });
        }
        let mut by_addr = FxHashMap::default();
        for (r, a) in hosts.iter().enumerate() {
            if let Some(other) = by_addr.insert(*a, r) {
                return Err(CommError::Bootstrap(format!(
                    "ranks {other} and {r} have the same address {a:?}: each rank needs its own endpoint"
                )));
            }
        }
        let grants = Grants::new(rank, size, cfg.recv_budget_bytes, cfg.rapid_window_bytes)
            .map_err(CommError::Bootstrap)?;
        let share = Grants::default_share(size, cfg.recv_budget_bytes);
        Ok(Self {
            rank,
            size,
            by_addr,
            tx: (0..size).map(|_| PeerTx::new(share)).collect(),
            grants,
            ctl_out: VecDeque::new(),
            rx: (0..size).map(|_| None).collect(),
            failed: vec![None; size],
            p2p: Matcher::new(cfg.limits),
            coll: Matcher::new(cfg.limits),
            held: VecDeque::new(),
            requests: FxHashMap::default(),
            next_req: 1,
            pending_fragments: 0,
            rr: 0,
            coll_seq: 0,
            stats: CommStats::default(),
            incarnation: liveness::new_incarnation(),
            peer_incarnation: vec![None; size],
            expelled: vec![false; size],
            liveness: Liveness::new(size, cfg.failure_timeout),
            to_cancel: Vec::new(),
            awaited: None,
            cfg,
        })
    }

    fn check_rank(&self, rank: usize) -> Result<(), CommError> {
        if rank >= self.size {
            return Err(CommError::InvalidRank {
                rank,
                size: self.size,
            });
        }
        Ok(())
    }

    /// Receives naming `rank` fail while it failed or is implicitly
    /// disconnected.
    fn peer_failed(&self, rank: usize) -> Result<(), CommError> {
        match self.failed[rank]
            .as_ref()
            .or(self.tx[rank].win.implicit.as_ref())
        {
            Some(reason) => Err(CommError::PeerFailed {
                rank,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Why receives naming `rank` fail, if they do.
    pub fn failure(&self, rank: usize) -> Option<CommError> {
        if rank >= self.size {
            return None;
        }
        self.peer_failed(rank).err()
    }

    /// Writes to `rank` also fail while it is explicitly disconnected.
    fn send_allowed(&self, rank: usize) -> Result<(), CommError> {
        if self.tx[rank].win.explicit {
            return Err(CommError::Disconnected { rank });
        }
        self.peer_failed(rank)
    }

    fn new_request(&mut self, r: ReqState) -> Result<u64, CommError> {
        if self.requests.len() >= self.cfg.max_requests {
            return Err(CommError::TooManyRequests(self.requests.len()));
        }
        let id = self.next_req;
        self.next_req += 1;
        self.requests.insert(id, r);
        Ok(id)
    }

    /// Queues a message of the concatenated `parts` to `dest`; returns its
    /// request. A message to ourselves goes straight to matching.
    pub fn isend(
        &mut self,
        dest: usize,
        tag: Tag,
        parts: &[&[u8]],
        coll: bool,
    ) -> Result<u64, CommError> {
        self.isend_in(dest, tag, parts, coll, Vec::new())
    }

    /// As [`State::isend`], building the message in `buf` (emptied first):
    /// a spent buffer of CTP's pool (`ctp::Endpoint::take_buffer`) saves a
    /// fresh allocation whose pages fault in one by one.
    pub fn isend_in(
        &mut self,
        dest: usize,
        tag: Tag,
        parts: &[&[u8]],
        coll: bool,
        mut buf: Vec<u8>,
    ) -> Result<u64, CommError> {
        self.check_rank(dest)?;
        if tag > MAX_TAG {
            return Err(CommError::InvalidTag(tag));
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len as u64 > self.cfg.max_message_bytes {
            return Err(CommError::TooLarge {
                len: len as u64,
                max: self.cfg.max_message_bytes,
            });
        }
        if dest != self.rank {
            self.send_allowed(dest)?;
        }
        let frag = self.cfg.fragment_bytes.max(1);
        let nfrags = len.div_ceil(frag).max(1);
        if dest != self.rank && self.pending_fragments + nfrags > self.cfg.max_pending_fragments {
            return Err(CommError::SendQueueFull {
                pending: self.pending_fragments,
            });
        }
        let req = self.new_request(ReqState::Send {
            dest,
            tag,
            len,
            left: usize::from(dest != self.rank),
            failed: None,
        })?;
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += len as u64;
        if dest == self.rank {
            let data = parts.concat();
            let env = Envelope {
                source: self.rank,
                tag,
            };
            self.deliver_in_order(coll, env, data);
            return Ok(req);
        }
        let context = self.context(coll);
        if self.tx[dest].win.contact() {
            self.stats.connections += 1;
            tracing::debug!(
                rank = self.rank,
                dest,
                "comm: first send to peer (lazy connection): CONNECT"
            );
            self.push_ctl(
                dest,
                Control::Connect {
                    incarnation: self.incarnation,
                },
            );
        }
        buf.clear();
        buf.reserve_exact(HEADER_LEN + len);
        buf.resize(HEADER_LEN, 0);
        for p in parts {
            buf.extend_from_slice(p);
        }
        self.tx[dest].pending.push_back(OutMessage {
            context,
            tag,
            buf,
            off: 0,
            req,
            slots: nfrags,
        });
        self.pending_fragments += nfrags;
        Ok(req)
    }

    fn context(&self, coll: bool) -> u16 {
        if coll {
            self.cfg.context | COLLECTIVE_CONTEXT
        } else {
            self.cfg.context & !COLLECTIVE_CONTEXT
        }
    }

    /// Posts a receive; returns its request (complete at once if an
    /// unexpected message matches).
    pub fn irecv(&mut self, source: SourceSel, tag: TagSel, coll: bool) -> Result<u64, CommError> {
        if let SourceSel::Rank(r) = source {
            self.check_rank(r)?;
        }
        if let TagSel::Tag(t) = tag {
            if t > MAX_TAG {
                return Err(CommError::InvalidTag(t));
            }
        }
        let req = self.new_request(ReqState::Recv {
            coll,
            source,
            done: None,
        })?;
        let m = if coll { &mut self.coll } else { &mut self.p2p };
        match m.post(req, source, tag) {
            Ok(Some(matched)) => self.complete_recv(matched),
            Ok(None) => {
                // A held message may match it first; else a receive naming
                // a failed peer cannot complete.
                self.pump_held();
                if let SourceSel::Rank(r) = source {
                    if let Err(e) = self.peer_failed(r) {
                        let m = if coll { &mut self.coll } else { &mut self.p2p };
                        if m.cancel(&req) {
                            self.fail_recv(req, e);
                        }
                    }
                }
            }
            Err(e) => {
                self.requests.remove(&req);
                return Err(e.into());
            }
        }
        // A held message may match the new receive.
        self.pump_held();
        Ok(req)
    }

    fn complete_recv(&mut self, m: Matched<u64>) {
        self.stats.messages_received += 1;
        self.stats.bytes_received += m.data.len() as u64;
        if let Some(ReqState::Recv { done, .. }) = self.requests.get_mut(&m.id) {
            let status = Status {
                source: m.envelope.source,
                tag: m.envelope.tag,
                len: m.data.len(),
            };
            *done = Some(Ok((status, m.data)));
        }
    }

    fn fail_recv(&mut self, req: u64, e: CommError) {
        if let Some(ReqState::Recv { done, .. }) = self.requests.get_mut(&req) {
            *done = Some(Err(e));
        }
    }

    /// Hands an in-order message to matching, or holds it (see `held`).
    fn deliver_in_order(&mut self, coll: bool, env: Envelope, data: Vec<u8>) {
        if !self.held.is_empty() {
            self.held.push_back((coll, env, data));
            return;
        }
        let m = if coll { &mut self.coll } else { &mut self.p2p };
        match m.arrive(env, data) {
            Ok(Some(matched)) => self.complete_recv(matched),
            Ok(None) => {}
            Err(o) => {
                self.stats.unexpected_overflows += 1;
                tracing::debug!(rank = self.rank, error = %o, "comm: holding a message");
                self.held.push_back((coll, o.envelope, o.data));
            }
        }
    }

    /// Moves held messages into matching while they are taken.
    pub fn pump_held(&mut self) {
        while let Some((coll, env, data)) = self.held.front() {
            let m = if *coll { &mut self.coll } else { &mut self.p2p };
            if !m.takes(*env, data.len() as u64) {
                return;
            }
            let (coll, env, data) = self.held.pop_front().expect("front exists");
            let m = if coll { &mut self.coll } else { &mut self.p2p };
            match m.arrive(env, data) {
                Ok(Some(matched)) => self.complete_recv(matched),
                Ok(None) => {}
                Err(_) => unreachable!("takes() said it fits"),
            }
        }
    }

    /// True while messages are held: take no delivery from CTP.
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// The error a blocked wait reports when held messages cannot move.
    pub fn held_error(&self) -> CommError {
        let coll = self.held.front().is_some_and(|h| h.0);
        let m = if coll { &self.coll } else { &self.p2p };
        CommError::UnexpectedQueueFull {
            queued: m.unexpected_len(),
            queued_bytes: m.unexpected_bytes(),
        }
    }

    /// Takes one CTP delivery.
    pub fn on_delivery(&mut self, d: Delivery<A>) {
        match d {
            Delivery::Data(d) => self.on_data(d),
            Delivery::Error(e) => self.on_error(e),
        }
    }

    fn on_data(&mut self, d: ReceivedData<A>) {
        if d.command != COMM_COMMAND && d.command != CONTROL_COMMAND {
            self.stats.foreign_command += 1;
            return;
        }
        let Some(&src) = self.by_addr.get(&d.from) else {
            self.stats.unknown_source += 1;
            tracing::debug!(from = ?d.from, "comm: message from an address not in the host list");
            return;
        };
        if d.command == CONTROL_COMMAND {
            return self.on_control(src, &d.data);
        }
        let (h, off) = match Header::decode(&d.data) {
            Ok((h, payload)) => (h, d.data.len() - payload.len()),
            Err(e) => {
                self.stats.malformed += 1;
                tracing::debug!(src, error = %e, "comm: malformed message");
                return;
            }
        };
        if h.context != self.context(false) && h.context != self.context(true) {
            self.stats.foreign_context += 1;
            return;
        }
        if self.failed[src].is_some() {
            return self.on_failed_traffic(src);
        }
        self.heard_from(src);
        let (window, max) = (self.cfg.window_fragments, self.cfg.max_message_bytes);
        let rx = self.rx[src].get_or_insert_with(|| PeerRx::new(window, max));
        let mut out: Vec<Complete> = Vec::new();
        if let Err(e) = rx.accept_owned(h, d.data, off, &mut out) {
            self.stats.refused_fragments += 1;
            tracing::debug!(src, error = %e, "comm: fragment refused");
        }
        for c in out {
            let env = Envelope {
                source: src,
                tag: c.tag,
            };
            let coll = c.context & COLLECTIVE_CONTEXT != 0;
            self.deliver_in_order(coll, env, c.data);
        }
    }

    fn on_error(&mut self, e: ErrorInfo<A>) {
        self.stats.ctp_errors += 1;
        let rank = e.peer.and_then(|p| self.by_addr.get(&p).copied());
        match (e.kind, rank) {
            // CTP suspects a silent peer (and keeps resending) at the
            // spec's deadline, and fails its messages only at its user
            // timeout: either is an implicit disconnect.
            (ErrorType::NotConfirmed | ErrorType::Unresponsive, Some(rank)) => {
                self.implicit_disconnect(rank, e.to_string())
            }
            _ => tracing::warn!(error = %e, "comm: CTP error"),
        }
    }

    /// Forgets the in-flight fragments CTP no longer holds (confirmed).
    /// Each confirmation frees window bytes and shows that the peer
    /// answers (ending an implicit disconnect).
    pub fn reap(&mut self, is_pending: impl Fn(MsgId) -> bool) {
        for rank in 0..self.size {
            let tx = &mut self.tx[rank];
            let (mut freed, mut confirmed) = (0, false);
            tx.in_flight.retain(|&(_, m, len)| {
                let keep = is_pending(m);
                if !keep {
                    freed += len;
                }
                keep
            });
            let before = tx.ctl_in_flight.len();
            tx.ctl_in_flight.retain(|m| is_pending(*m));
            if let Some(Some(m)) = tx.reset {
                if !is_pending(m) {
                    tx.reset = None;
                }
            }
            if let Intro::InFlight(m) = tx.intro {
                if !is_pending(m) {
                    tx.intro = Intro::Done;
                }
            }
            confirmed |= freed > 0 || tx.ctl_in_flight.len() < before;
            if freed > 0 {
                if let Some(seq) = tx.win.release(freed) {
                    self.push_ctl(rank, Control::Applied { seq });
                }
            }
            if confirmed {
                self.heard_from(rank);
            }
        }
    }

    /// Forgets confirmed fragments, then hands `ep` the fragments the
    /// windows and its sent-commands storage let go (never waiting: a
    /// fragment that does not fit the storage waits for the next call).
    /// `addrs[r]` is rank r's address.
    pub fn pump_sends(&mut self, ep: &mut Endpoint<A>, now: Instant, addrs: &[A])
    where
        A: PeerAddr,
    {
        for m in self.to_cancel.drain(..) {
            ep.cancel(now, m);
        }
        if self.any_in_flight().is_some() {
            self.reap(|m| ep.is_pending(m));
        }
        self.queue_grants();
        let context = self.context(false);
        // In order, except that a peer's messages wait behind its
        // unconfirmed introduction (`Intro`).
        let mut i = 0;
        while let Some(&(dest, c)) = self.ctl_out.get(i) {
            let intro = c.incarnation().is_some();
            if self.tx[dest].gated() && !(intro && self.tx[dest].intro == Intro::Queued) {
                i += 1;
                continue;
            }
            if !ep.has_room(CONTROL_LEN as u64) {
                return;
            }
            self.ctl_out.remove(i);
            let bytes = c.encode(context).to_vec();
            match ep.send_vec(now, CONTROL_COMMAND, addrs[dest], bytes, Options::NONE) {
                Ok(m) => {
                    let tx = &mut self.tx[dest];
                    tx.ctl_in_flight.push(m);
                    if matches!(c, Control::SeqReset { .. }) {
                        tx.reset = Some(Some(m));
                    }
                    if intro && tx.intro == Intro::Queued {
                        tx.intro = Intro::InFlight(m);
                    }
                }
                Err(e) => tracing::warn!(dest, error = %e, "comm: CTP refused a control message"),
            }
        }
        while let Some((dest, len)) = self.peek_sendable() {
            if !ep.has_room(len as u64) {
                return;
            }
            let mut s = self.take_sendable(dest).expect("peeked");
            let bytes = std::mem::take(&mut s.bytes);
            match ep.send_vec(now, COMM_COMMAND, addrs[dest], bytes, Options::NONE) {
                Ok(msg) => self.handed(&s, msg),
                // The peer's sequence now has a gap: nothing more can be
                // delivered to it in order.
                Err(e) => self.fail_peer(dest, format!("CTP refused a fragment: {e}")),
            }
        }
    }

    /// True if fragments wait or are in flight (`pump_sends` has work).
    pub fn has_work_for_ctp(&self) -> bool {
        self.pending_fragments > 0
            || !self.ctl_out.is_empty()
            || self.grants.has_grants()
            || self.any_in_flight().is_some()
    }

    /// True if some fragment or control message is handed to CTP and
    /// unconfirmed.
    pub fn any_in_flight(&self) -> Option<MsgId> {
        self.tx.iter().find_map(|t| {
            t.in_flight
                .front()
                .map(|f| f.1)
                .or(t.ctl_in_flight.first().copied())
        })
    }

    /// A fragment a blocked sender can wait for: the oldest in flight to a
    /// peer with fragments waiting for the window (else any in flight while
    /// fragments wait for CTP's storage); `None` if nothing waits.
    pub fn blocked_in_flight(&self) -> Option<MsgId> {
        let mut waiting = false;
        let (frag, span) = (
            self.cfg.fragment_bytes.max(1),
            self.cfg.window_fragments.max(1),
        );
        for t in self.tx.iter() {
            if !t.pending.is_empty() {
                waiting = true;
                if let Intro::InFlight(m) = t.intro {
                    // Waiting for the introduction's confirmation.
                    return Some(m);
                }
                if t.next_chunk(frag, span).is_none() {
                    // Nothing in flight: the window waits for a grant or
                    // a reconnect (a delivery), not a confirmation.
                    return t.in_flight.front().map(|f| f.1);
                }
            }
        }
        if waiting {
            self.any_in_flight()
        } else {
            None
        }
    }

    /// The status of the first message a receive for `(source, tag)` would
    /// take now (point-to-point context).
    pub fn probe(&self, source: SourceSel, tag: TagSel) -> Option<Status> {
        self.p2p.probe(source, tag).map(|(e, len)| Status {
            source: e.source,
            tag: e.tag,
            len,
        })
    }

    /// The next collective's tag.
    pub fn next_coll_tag(&mut self) -> Tag {
        let t = self.coll_seq;
        self.coll_seq = (self.coll_seq + 1) & MAX_TAG;
        t
    }

    /// The length of the next fragment that the window lets go, and its
    /// peer (round robin over peers).
    pub fn peek_sendable(&mut self) -> Option<(usize, usize)> {
        let (frag, span) = (
            self.cfg.fragment_bytes.max(1),
            self.cfg.window_fragments.max(1),
        );
        for k in 0..self.size {
            let dest = (self.rr + k) % self.size;
            if let Some(chunk) = self.tx[dest].next_chunk(frag, span) {
                return Some((dest, HEADER_LEN + chunk));
            }
        }
        None
    }

    /// Cuts and takes the next fragment for `dest` (after `peek_sendable`).
    pub fn take_sendable(&mut self, dest: usize) -> Option<Sendable> {
        let (frag, span) = (
            self.cfg.fragment_bytes.max(1),
            self.cfg.window_fragments.max(1),
        );
        let tx = &mut self.tx[dest];
        let chunk = tx.next_chunk(frag, span)?;
        let m = tx.pending.front_mut().expect("next_chunk needs one");
        let last = m.off + chunk == m.len();
        let h = Header {
            flags: if last { FLAG_LAST } else { 0 },
            context: m.context,
            tag: m.tag,
            seq: tx.next_seq,
            len: m.len() as u64,
        };
        tx.next_seq += 1;
        let req = m.req;
        let bytes = if m.off == 0 && last {
            // The whole message in one fragment: the header goes into the
            // room left for it, no copy.
            let mut b = std::mem::take(&mut m.buf);
            h.encode(&mut b);
            b
        } else {
            let mut b = Vec::with_capacity(HEADER_LEN + chunk);
            b.extend_from_slice(&h.to_bytes());
            b.extend_from_slice(&m.buf[HEADER_LEN + m.off..HEADER_LEN + m.off + chunk]);
            b
        };
        m.off += chunk;
        if last {
            let m = tx.pending.pop_front().expect("front");
            self.pending_fragments -= m.slots;
        }
        self.rr = (dest + 1) % self.size;
        Some(Sendable {
            dest,
            seq: h.seq,
            len: bytes.len() as u64,
            bytes,
            req,
            last,
        })
    }

    /// A fragment was handed to CTP as `msg`.
    pub fn handed(&mut self, s: &Sendable, msg: MsgId) {
        self.stats.fragments_sent += 1;
        let tx = &mut self.tx[s.dest];
        tx.in_flight.push_back((s.seq, msg, s.len));
        tx.win.sent(s.len);
        if s.last {
            if let Some(ReqState::Send { left, .. }) = self.requests.get_mut(&s.req) {
                *left = 0;
            }
        }
    }

    /// Is request `id` complete?
    pub fn is_complete(&self, id: u64) -> Result<bool, CommError> {
        self.requests
            .get(&id)
            .map(|r| r.is_complete())
            .ok_or(CommError::UnknownRequest(id))
    }

    /// Removes complete request `id` and returns its state.
    pub fn take_complete(&mut self, id: u64) -> Option<ReqState> {
        if self.requests.get(&id)?.is_complete() {
            self.requests.remove(&id)
        } else {
            None
        }
    }

    /// Drops request `id`'s state (a send's fragments still go).
    pub fn forget(&mut self, id: u64) {
        self.requests.remove(&id);
    }

    /// Cancels receive `id` if still posted (MPI_Cancel, MPI 4.0 section
    /// 3.8.4); true if cancelled (the request is gone).
    pub fn cancel_recv(&mut self, id: u64) -> bool {
        let coll = match self.requests.get(&id) {
            Some(ReqState::Recv {
                coll, done: None, ..
            }) => *coll,
            _ => return false,
        };
        let m = if coll { &mut self.coll } else { &mut self.p2p };
        if m.cancel(&id) {
            self.requests.remove(&id);
            true
        } else {
            false
        }
    }

    /// The source a receive request names (for error messages).
    pub fn describe(&self, id: u64) -> String {
        match self.requests.get(&id) {
            Some(ReqState::Send { dest, tag, len, .. }) => {
                format!("send of {len} bytes to rank {dest} tag {tag}")
            }
            Some(ReqState::Recv { source, .. }) => format!("receive from {source:?}"),
            None => format!("request {id}"),
        }
    }

    /// Counters with the matching engines' and queues' current sizes.
    pub fn snapshot(&self) -> CommStats {
        let mut s = self.stats;
        s.unexpected = self.p2p.unexpected_len() + self.coll.unexpected_len();
        s.unexpected_bytes = self.p2p.unexpected_bytes() + self.coll.unexpected_bytes();
        s.posted = self.p2p.posted_len() + self.coll.posted_len();
        s.held = self.held.len();
        s.pending_fragments = self.pending_fragments;
        s.reorder_buffered = self.rx.iter().flatten().map(|r| r.buffered()).sum();
        s.reorder_buffered_bytes = self.rx.iter().flatten().map(|r| r.buffered_bytes()).sum();
        s.out_of_order_fragments = self.rx.iter().flatten().map(|r| r.early_total()).sum();
        s
    }
}
