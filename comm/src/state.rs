//! The communicator's protocol state, free of I/O: peers (lazy), fragment
//! queues and windows, per-peer reorder buffers, the two matching engines
//! (point-to-point and collective contexts), requests and counters. The
//! socket side (`communicator.rs`) feeds it CTP deliveries and hands its
//! fragments to CTP.

use std::collections::VecDeque;
use std::hash::Hash;

use ctp::{Delivery, ErrorInfo, ErrorType, MsgId, PullId, ReceivedData, SendBuf};
use rustc_hash::FxHashMap;
use tracing::Span;

use crate::completion::TaggedCompletion;
use crate::config::CommConfig;
use crate::control::{Control, CONTROL_COMMAND};
use crate::flow::Grants;
use crate::liveness::Liveness;
use crate::matching::{
    selector, Payload, Selector, SourceSel, Tag, TagEnvelope, TagMatched, TagMatcher, TagSel,
    MAX_TAG,
};
use crate::reorder::{Complete, PeerRx};
use crate::request::{ReqState, Status, TaggedOp};
use crate::stats::CommStats;
use crate::wire::{Header, COLLECTIVE_CONTEXT, COMM_COMMAND, HEADER_LEN};
use crate::CommError;

#[path = "state_liveness.rs"]
mod liveness;
#[path = "state_rndv.rs"]
mod rndv;
#[path = "state_tagged.rs"]
mod tagged;
#[path = "state_tx.rs"]
mod tx;

use rndv::{Msg, PullOwner, PullStart};
#[cfg(test)]
use tx::Intro;
use tx::{OfferBody, OutMessage, PeerTx};

pub use tagged::PeekMode;

/// A message's bytes as [`State::send_msg`] takes them.
pub(crate) enum Body<'a> {
    /// Concatenated into the buffer (emptied first; its capacity reused).
    Parts(&'a [&'a [u8]], Vec<u8>),
    /// Built already by the caller (outside the engine lock): `HEADER_LEN`
    /// bytes of room for the header, then the payload.
    Built(Vec<u8>),
    /// The caller's own buffer, kept until the send completes: offered as
    /// it is when the message goes by rendezvous (no copy; the send then
    /// completes when the receiver has pulled it), copied otherwise.
    Buf(Box<dyn SendBuf>),
}

impl Body<'_> {
    /// The payload's length, bytes.
    fn len(&self) -> usize {
        match self {
            Body::Parts(parts, _) => parts.iter().map(|p| p.len()).sum(),
            Body::Built(b) => b.len().saturating_sub(HEADER_LEN),
            Body::Buf(b) => b.bytes().len(),
        }
    }

    /// The payload as a rendezvous offers it: the caller's buffer (a
    /// built one, its header room skipped), or the parts copied into
    /// `buf`.
    fn into_offer(self) -> Box<dyn SendBuf> {
        match self {
            Body::Parts(parts, mut buf) => {
                buf.clear();
                buf.reserve_exact(parts.iter().map(|p| p.len()).sum());
                for p in parts {
                    buf.extend_from_slice(p);
                }
                Box::new(buf)
            }
            Body::Built(b) => Box::new(ctp::Tail {
                buf: b,
                skip: HEADER_LEN,
            }),
            Body::Buf(b) => b,
        }
    }

    /// The message's buffer: header room, then the payload.
    fn into_buf(self) -> Vec<u8> {
        match self {
            Body::Parts(parts, mut buf) => {
                let len = parts.iter().map(|p| p.len()).sum::<usize>();
                buf.clear();
                buf.reserve_exact(HEADER_LEN + len);
                buf.resize(HEADER_LEN, 0);
                for p in parts {
                    buf.extend_from_slice(p);
                }
                buf
            }
            Body::Built(mut b) => {
                if b.len() < HEADER_LEN {
                    b.resize(HEADER_LEN, 0);
                }
                b
            }
            Body::Buf(b) => {
                let mut buf = Vec::with_capacity(HEADER_LEN + b.bytes().len());
                buf.resize(HEADER_LEN, 0);
                buf.extend_from_slice(b.bytes());
                buf
            }
        }
    }
}
#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
#[path = "state_ulfc.rs"]
mod ulfc;

/// Most control messages queued for CTP (user requests: `through`,
/// `rapid`, `disconnect`, `reconnect`), per peer; beyond it the call fails
/// with `CommError::SendQueueFull`.
const CONTROL_QUEUE_PER_PEER: usize = 16;

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
    p2p: TagMatcher<u64, Msg>,
    coll: TagMatcher<u64, Msg>,
    /// In-order messages the matching engines had no room for; while any is
    /// held no further delivery is taken from CTP (its queue fills and its
    /// senders resend later).
    held: VecDeque<(bool, TagEnvelope, Msg)>,
    /// Rendezvous pulls matched and not yet handed to CTP (`state_rndv.rs`).
    to_pull: VecDeque<PullStart>,
    /// Rendezvous pulls in progress in CTP, and who waits for each.
    pulling: FxHashMap<PullId, PullOwner>,
    /// Pulls from failed peers to end at the next pump.
    pulls_to_cancel: Vec<(PullId, CommError)>,
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
    /// A peer's failure that no request of the application carried (none
    /// was pending): the next send or receive naming the peer reports it,
    /// even if the rank rejoined since (a restarted process).
    unreported: Vec<Option<String>>,
    liveness: Liveness,
    /// CTP messages to cancel at the next `pump_sends` (toward failed
    /// peers: no resending to a dead process).
    to_cancel: Vec<MsgId>,
    /// Failed sends of the caller's own buffer that complete once
    /// `to_cancel` made CTP drop the buffer.
    after_cancel: Vec<u64>,
    /// A rank waited on outside the matching engines (the root of a
    /// broadcast over MAK): watched by the failure detector as if a
    /// receive named it.
    pub awaited: Option<usize>,
    /// Each peer's address (rank r at `addrs[r]`).
    addrs: Vec<A>,
    /// Something a waiting caller may want happened (a delivery was taken,
    /// a request completed): reported to the waiting threads by the engine
    /// (`ctp::UpperLayer::take_news`).
    pub news: bool,
    /// CTP's count of settled messages after the last `pump_sends`
    /// (`pump_due`).
    last_settled: u64,
    /// Data messages delivered in order (to matching), ever
    /// (`ctp::UpperLayer::app_messages`).
    pub app_messages: u64,
    /// Callers blocked in a wait: while there are any, the failure
    /// detector's checks run on the engine's timer too (`layer.rs`), as
    /// they do inside every call.
    pub waiting: usize,
    /// The largest tag a message may carry (MPI's `MAX_TAG`; a tagged
    /// endpoint's `u64::MAX`): a larger one is malformed.
    max_tag: u64,
    /// Peers removed (`remove_peer`): their ids are not reused.
    removed: Vec<bool>,
    /// The window every peer starts with, bytes (ULFC's default share).
    share: u64,
    /// Completions of tagged operations (`state_tagged.rs`), oldest first.
    cq: VecDeque<TaggedCompletion>,
    /// A tagged endpoint: a message from an address not in the table
    /// makes its sender a peer (first contact), within the table's bound.
    learn_peers: bool,
    /// Most completions queued and due (`cq` and `tagged_outstanding`).
    cq_cap: usize,
    /// Tagged operations that will make a completion and have not yet:
    /// with `cq`, bounded by `cq_cap`.
    tagged_outstanding: usize,
    /// `comm` (rank, size) or `comm_tagged`, entered wherever the state
    /// is worked on (`span.rs`).
    pub span: Span,
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
        let mut st = Self::build(rank, hosts, by_addr, grants, share, cfg);
        st.span = tracing::debug_span!("comm", rank, size);
        Ok(st)
    }

    /// The state of `hosts` (`by_addr` their index), this process at
    /// `rank` (`usize::MAX`: not among them).
    fn build(
        rank: usize,
        hosts: &[A],
        by_addr: FxHashMap<A, usize>,
        grants: Grants,
        share: u64,
        cfg: CommConfig,
    ) -> Self {
        let size = hosts.len();
        Self {
            rank,
            size,
            by_addr,
            tx: (0..size).map(|_| PeerTx::new(share)).collect(),
            grants,
            ctl_out: VecDeque::new(),
            rx: (0..size).map(|_| None).collect(),
            failed: vec![None; size],
            p2p: TagMatcher::new(cfg.limits),
            coll: TagMatcher::new(cfg.limits),
            held: VecDeque::new(),
            to_pull: VecDeque::new(),
            pulling: FxHashMap::default(),
            pulls_to_cancel: Vec::new(),
            requests: FxHashMap::default(),
            next_req: 1,
            pending_fragments: 0,
            rr: 0,
            coll_seq: 0,
            stats: CommStats::default(),
            incarnation: crate::control::new_incarnation(),
            peer_incarnation: vec![None; size],
            expelled: vec![false; size],
            unreported: vec![None; size],
            liveness: Liveness::new(size, cfg.failure_timeout, cfg.suspect_timeout),
            to_cancel: Vec::new(),
            after_cancel: Vec::new(),
            awaited: None,
            addrs: hosts.to_vec(),
            news: false,
            app_messages: 0,
            last_settled: 0,
            waiting: 0,
            max_tag: u64::from(MAX_TAG),
            removed: vec![false; size],
            share,
            cq: VecDeque::new(),
            learn_peers: false,
            cq_cap: 0,
            tagged_outstanding: 0,
            span: Span::none(),
            cfg,
        }
    }

    fn check_rank(&self, rank: usize) -> Result<(), CommError> {
        if rank >= self.size {
            return Err(CommError::InvalidRank {
                rank,
                size: self.size,
            });
        }
        if self.removed[rank] {
            return Err(CommError::UnknownPeer(rank));
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

    /// A failure of `rank` no request carried yet: reported now, once.
    fn take_unreported(&mut self, rank: usize) -> Result<(), CommError> {
        match self.unreported[rank].take() {
            Some(reason) => Err(CommError::PeerFailed { rank, reason }),
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
        buf: Vec<u8>,
    ) -> Result<u64, CommError> {
        if tag > MAX_TAG {
            return Err(CommError::InvalidTag(tag));
        }
        self.send_msg(
            dest,
            u64::from(tag),
            None,
            Body::Parts(parts, buf),
            coll,
            None,
        )
    }

    /// As [`State::isend`], of a message built already: `buf` holds
    /// `HEADER_LEN` bytes of room for the header, then the payload (the
    /// caller copies a large message outside the engine lock).
    pub fn isend_built(
        &mut self,
        dest: usize,
        tag: Tag,
        buf: Vec<u8>,
        coll: bool,
    ) -> Result<u64, CommError> {
        if tag > MAX_TAG {
            return Err(CommError::InvalidTag(tag));
        }
        self.send_msg(dest, u64::from(tag), None, Body::Built(buf), coll, None)
    }

    /// Queues message `body` to `dest` with a 64-bit tag and optional CQ
    /// data; `op` makes it a tagged endpoint's send. Returns its request.
    pub(crate) fn send_msg(
        &mut self,
        dest: usize,
        tag: u64,
        cq_data: Option<u64>,
        body: Body<'_>,
        coll: bool,
        op: Option<TaggedOp>,
    ) -> Result<u64, CommError> {
        self.check_rank(dest)?;
        let len = body.len();
        if len as u64 > self.cfg.max_message_bytes {
            return Err(CommError::TooLarge {
                len: len as u64,
                max: self.cfg.max_message_bytes,
            });
        }
        if dest != self.rank {
            self.take_unreported(dest)?;
            self.send_allowed(dest)?;
        }
        // Longer than the eager limit: one announcement, the bytes pulled
        // by the receiver (`state_rndv.rs`).
        let rndv = dest != self.rank && len > self.cfg.eager_limit;
        let frag = self.cfg.fragment_bytes.max(1);
        let nfrags = if rndv { 1 } else { len.div_ceil(frag).max(1) };
        if dest != self.rank && self.pending_fragments + nfrags > self.cfg.max_pending_fragments {
            return Err(CommError::SendQueueFull {
                pending: self.pending_fragments,
            });
        }
        // The caller's own buffer offered as it is: the send completes when
        // the receiver has pulled it (CTP drops it then).
        let zero_copy = rndv && matches!(body, Body::Buf(_));
        let req = self.new_request(ReqState::Send {
            dest,
            tag,
            len,
            left: usize::from(dest != self.rank),
            failed: None,
            op,
        })?;
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += len as u64;
        if dest == self.rank {
            let data = match body {
                Body::Parts(parts, _) => parts.concat(),
                Body::Built(mut b) => b.split_off(HEADER_LEN),
                Body::Buf(b) => b.bytes().to_vec(),
            };
            let env = TagEnvelope {
                source: self.rank,
                tag,
                data: cq_data,
            };
            self.deliver_in_order(coll, env, Msg::Eager(data));
            self.finish_tagged(req);
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
        let (buf, offer) = if rndv {
            self.stats.rendezvous_sent += 1;
            let offer = OfferBody {
                body: body.into_offer(),
                zero_copy,
            };
            (vec![0; HEADER_LEN], Some(offer))
        } else {
            (body.into_buf(), None)
        };
        self.tx[dest].pending.push_back(OutMessage {
            context,
            tag,
            cq_data,
            buf,
            off: 0,
            req,
            slots: nfrags,
            offer,
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
            if r != self.rank {
                self.take_unreported(r)?;
            }
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
        self.post_recv(req, selector(source, tag), coll)?;
        Ok(req)
    }

    /// Posts the receive of request `req` (already in `requests`) for
    /// `sel`; on error the request is gone.
    pub(crate) fn post_recv(
        &mut self,
        req: u64,
        sel: Selector,
        coll: bool,
    ) -> Result<(), CommError> {
        let m = if coll { &mut self.coll } else { &mut self.p2p };
        match m.post(req, sel) {
            Ok(Some(matched)) => self.complete_recv(matched),
            Ok(None) => {
                // A held message may match it first; else a receive naming
                // a failed peer cannot complete.
                self.pump_held();
                if let Some(r) = sel.source {
                    if let Err(e) = self.peer_failed(r) {
                        let m = if coll { &mut self.coll } else { &mut self.p2p };
                        if m.cancel(&req) {
                            self.fail_recv(req, e);
                        }
                    }
                }
            }
            Err(e) => {
                self.forget_tagged(req);
                return Err(e.into());
            }
        }
        // A held message may match the new receive.
        self.pump_held();
        Ok(())
    }

    fn complete_recv(&mut self, m: TagMatched<u64, Msg>) {
        let m = match m.data {
            Msg::Eager(data) => TagMatched {
                id: m.id,
                envelope: m.envelope,
                data,
            },
            Msg::Offer(offer) => return self.begin_pull(m.id, m.envelope, offer),
        };
        self.news = true;
        self.stats.messages_received += 1;
        self.stats.bytes_received += m.data.len() as u64;
        match self.requests.get_mut(&m.id) {
            Some(ReqState::Recv { done, .. }) => {
                let status = Status {
                    source: m.envelope.source,
                    // MPI's contexts carry tags up to MAX_TAG (`on_data`).
                    tag: m.envelope.tag as Tag,
                    len: m.data.len(),
                };
                *done = Some(Ok((status, m.data)));
            }
            Some(ReqState::TaggedRecv { .. }) => {
                self.complete_tagged_recv(m.id, m.envelope, &m.data)
            }
            _ => {}
        }
    }

    fn fail_recv(&mut self, req: u64, e: CommError) {
        self.news = true;
        match self.requests.get_mut(&req) {
            Some(ReqState::Recv { done, .. }) => *done = Some(Err(e)),
            Some(ReqState::TaggedRecv { .. }) => self.fail_tagged_recv(req, e),
            _ => {}
        }
    }

    /// Hands an in-order message to matching, or holds it (see `held`).
    /// A rendezvous counts as the application's message when its pull
    /// ends (`state_rndv.rs`), not here.
    fn deliver_in_order(&mut self, coll: bool, env: TagEnvelope, data: Msg) {
        if matches!(data, Msg::Eager(_)) {
            self.app_messages += 1;
        }
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
            if !m.takes(env, data.held_bytes()) {
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
        self.news = true;
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
        let Some(src) = self.source_of(d.from) else {
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
        if h.tag > self.max_tag {
            self.stats.malformed += 1;
            tracing::debug!(src, tag = h.tag, "comm: tag above the context's largest");
            return;
        }
        if self.failed[src].is_some() {
            return self.on_failed_traffic(src);
        }
        self.heard_from(src);
        if h.is_rndv() != d.offer.is_some() || d.offer.is_some_and(|o| o.size != h.len) {
            self.stats.malformed += 1;
            tracing::debug!(src, "comm: rendezvous header and CTP offer disagree");
            return;
        }
        let (window, max) = (self.cfg.window_fragments, self.cfg.max_message_bytes);
        let rx = self.rx[src].get_or_insert_with(|| PeerRx::new(window, max));
        let mut out: Vec<Complete> = Vec::new();
        if let Err(e) = rx.accept_owned(h, d.data, off, d.offer, &mut out) {
            self.stats.refused_fragments += 1;
            tracing::debug!(src, error = %e, "comm: fragment refused");
        }
        for c in out {
            let env = TagEnvelope {
                source: src,
                tag: c.tag,
                data: c.cq_data,
            };
            let coll = c.context & COLLECTIVE_CONTEXT != 0;
            let msg = match c.offer {
                Some(o) => Msg::Offer(o),
                None => Msg::Eager(c.data),
            };
            self.deliver_in_order(coll, env, msg);
        }
    }

    fn on_error(&mut self, e: ErrorInfo<A>) {
        self.stats.ctp_errors += 1;
        let rank = e
            .peer
            .and_then(|p| self.by_addr.get(&p).copied())
            .filter(|&r| !self.removed[r]);
        match (e.kind, rank) {
            // CTP suspects a silent peer (and keeps resending) at the
            // spec's deadline: suspected, nothing fails. It fails a
            // message at its user timeout (or, without one, at the
            // spec's deadline): an implicit disconnect.
            (ErrorType::Unresponsive, Some(rank)) => {
                if self.liveness.suspect(rank) {
                    self.on_suspected(rank, &e.to_string());
                }
            }
            (ErrorType::NotConfirmed, Some(rank)) => self.implicit_disconnect(rank, e.to_string()),
            _ => tracing::warn!(error = %e, "comm: CTP error"),
        }
    }

    /// The status of the first message a receive for `(source, tag)` would
    /// take now (point-to-point context).
    pub fn probe(&self, source: SourceSel, tag: TagSel) -> Option<Status> {
        self.p2p
            .peek(&selector(source, tag))
            .map(|(e, len)| Status {
                source: e.source,
                tag: e.tag as Tag,
                len,
            })
    }

    /// The next collective's tag.
    pub fn next_coll_tag(&mut self) -> Tag {
        let t = self.coll_seq;
        self.coll_seq = (self.coll_seq + 1) & MAX_TAG;
        t
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
            Some(ReqState::TaggedRecv {
                context, source, ..
            }) => {
                format!("tagged receive {context:#x} from {source:?}")
            }
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
