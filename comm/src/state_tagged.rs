//! The tagged endpoint's part of the state (`crate::tagged`): peers that
//! join and leave at run time, operations with a caller context that
//! complete into a bounded completion queue, receives copied straight into
//! caller-owned buffers (truncation reported with the message's length),
//! peek / claim / discard and cancel. Semantics from `fi_tagged(3)`,
//! `fi_cq(3)` and `fi_cancel(3)`.

use std::hash::Hash;

use super::rndv::Msg;
use super::tx::PeerTx;
use super::{Body, State};
use crate::completion::{OpError, OpKind, RecvBuf, TaggedCompletion};
use crate::config::CommConfig;
use crate::flow::Grants;
use crate::matching::{Payload, Selector, TagEnvelope};
use crate::request::{ReqState, Sink, TaggedOp};
use crate::CommError;

/// What a peek does with the first matching message (`fi_trecvmsg(3)`
/// flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeekMode {
    /// Report it, leave it (`FI_PEEK`).
    Peek,
    /// Report it and keep it for a later claimed receive with the same
    /// context (`FI_PEEK | FI_CLAIM`).
    Claim,
    /// Report it and drop it (`FI_PEEK | FI_DISCARD`).
    Discard,
}

/// The error a tagged operation completes with when `e` ends it.
pub(super) fn op_error(e: CommError) -> OpError {
    match e {
        CommError::PeerFailed { rank, reason } => OpError::PeerUnreachable { peer: rank, reason },
        CommError::Disconnected { rank } => OpError::PeerUnreachable {
            peer: rank,
            reason: "disconnected".into(),
        },
        other => OpError::PeerUnreachable {
            peer: usize::MAX,
            reason: other.to_string(),
        },
    }
}

impl<A: Copy + Eq + Hash + std::fmt::Debug> State<A> {
    /// The state of a tagged endpoint: no peers yet; each peer inserted
    /// starts with a window of `recv_budget_bytes / max_peers` (every
    /// process must use the same); at most `cq_cap` completions queued and
    /// due; tags of all 64 bits.
    ///
    /// Errors: [`CommError::Bootstrap`] for a budget too small for
    /// `max_peers` windows of `flow::MIN_WINDOW_BYTES`.
    pub fn new_dynamic(
        cfg: CommConfig,
        max_peers: usize,
        cq_cap: usize,
    ) -> Result<Self, CommError> {
        let share = cfg.recv_budget_bytes / max_peers.max(1) as u64;
        let grants = Grants::dynamic(cfg.recv_budget_bytes, cfg.rapid_window_bytes, share)
            .map_err(CommError::Bootstrap)?;
        let mut st = Self::build(usize::MAX, &[], Default::default(), grants, share, cfg);
        st.max_tag = u64::MAX;
        st.cq_cap = cq_cap.max(1);
        st.learn_peers = true;
        st.span = tracing::debug_span!("comm_tagged", max_peers);
        Ok(st)
    }

    /// Adds the peer at `addr` (`is_self`: this endpoint's own address, to
    /// which messages go straight to matching) and returns its id; an
    /// address already in the table gives its id.
    ///
    /// Errors: [`CommError::Bootstrap`] when the receive budget has no room
    /// for another peer's default window.
    pub fn insert_peer(&mut self, addr: A, is_self: bool) -> Result<usize, CommError> {
        if let Some(&id) = self.by_addr.get(&addr) {
            if !self.removed[id] {
                return Ok(id);
            }
        }
        self.grants
            .add_peer(self.share, is_self)
            .map_err(CommError::Bootstrap)?;
        let id = self.size;
        self.size += 1;
        self.by_addr.insert(addr, id);
        self.addrs.push(addr);
        self.tx.push(PeerTx::new(self.share));
        self.rx.push(None);
        self.failed.push(None);
        self.peer_incarnation.push(None);
        self.expelled.push(false);
        self.unreported.push(None);
        self.removed.push(false);
        self.liveness.add_peer();
        if is_self {
            self.rank = id;
        }
        Ok(id)
    }

    /// Removes peer `id`: its pending operations complete with
    /// [`OpError::PeerUnreachable`], CTP's copies of its messages are
    /// dropped, its messages arriving later are counted as from an unknown
    /// source (they do not make it a peer again: only inserting its
    /// address does, under a new id); the id is not reused. Unexpected
    /// messages it sent stay receivable.
    ///
    /// Errors: [`CommError::UnknownPeer`].
    pub fn remove_peer(&mut self, id: usize) -> Result<(), CommError> {
        self.check_rank(id)?;
        if id != self.rank {
            self.fail_peer(id, "removed from the peer table".into());
        }
        self.removed[id] = true;
        self.grants.remove_peer(id);
        if id == self.rank {
            self.rank = usize::MAX;
        }
        Ok(())
    }

    /// The address of peer `id`, if in the table.
    pub fn peer_addr(&self, id: usize) -> Option<A> {
        (id < self.size && !self.removed[id]).then(|| self.addrs[id])
    }

    /// The peer a message from `addr` comes from: a peer of the table; on
    /// first contact (a tagged endpoint, an address never inserted) a new
    /// one while the table has room (`CommStats::first_contacts`). `None`
    /// (counted) for a removed peer, a communicator's stranger, or a full
    /// table.
    pub(super) fn source_of(&mut self, addr: A) -> Option<usize> {
        match self.by_addr.get(&addr) {
            Some(&id) if !self.removed[id] => return Some(id),
            Some(_) => {
                self.stats.unknown_source += 1;
                tracing::debug!(from = ?addr, "comm: message from a removed peer");
                return None;
            }
            None if !self.learn_peers => {
                self.stats.unknown_source += 1;
                tracing::debug!(from = ?addr, "comm: message from an address not in the host list");
                return None;
            }
            None => {}
        }
        match self.insert_peer(addr, false) {
            Ok(id) => {
                self.stats.first_contacts += 1;
                tracing::debug!(from = ?addr, id, "comm: first contact, a new peer");
                Some(id)
            }
            Err(e) => {
                self.stats.unknown_source += 1;
                self.stats.first_contacts_refused += 1;
                tracing::debug!(from = ?addr, error = %e, "comm: first contact refused");
                None
            }
        }
    }

    /// Room for one more completion, or [`CommError::CompletionQueueFull`].
    fn cq_room(&self) -> Result<(), CommError> {
        let due = self.cq.len() + self.tagged_outstanding;
        if due >= self.cq_cap {
            return Err(CommError::CompletionQueueFull(due));
        }
        Ok(())
    }

    /// Queues a tagged send of `data` (copied into `buf`) to `dest`.
    ///
    /// Errors: [`CommError::CompletionQueueFull`] (when it makes a
    /// completion), and those of [`State::isend`].
    pub fn tagged_send(
        &mut self,
        dest: usize,
        tag: u64,
        cq_data: Option<u64>,
        data: &[u8],
        buf: Vec<u8>,
        op: TaggedOp,
    ) -> Result<(), CommError> {
        self.tagged_send_body(dest, tag, cq_data, Body::Parts(&[data], buf), op)
    }

    /// As [`State::tagged_send`], of a message built already: `buf` holds
    /// [`HEADER_LEN`](crate::wire::HEADER_LEN) bytes of room for the
    /// header, then the payload (the caller copies a large message outside
    /// the engine lock).
    pub fn tagged_send_built(
        &mut self,
        dest: usize,
        tag: u64,
        cq_data: Option<u64>,
        buf: Vec<u8>,
        op: TaggedOp,
    ) -> Result<(), CommError> {
        self.tagged_send_body(dest, tag, cq_data, Body::Built(buf), op)
    }

    /// As [`State::tagged_send`], of the caller's own buffer (kept until
    /// the send completes; not copied when the message goes by
    /// rendezvous: the send then completes when the receiver has it).
    ///
    /// Errors: as [`State::tagged_send`].
    pub fn tagged_send_buf(
        &mut self,
        dest: usize,
        tag: u64,
        cq_data: Option<u64>,
        buf: Box<dyn ctp::SendBuf>,
        op: TaggedOp,
    ) -> Result<(), CommError> {
        self.tagged_send_body(dest, tag, cq_data, Body::Buf(buf), op)
    }

    fn tagged_send_body(
        &mut self,
        dest: usize,
        tag: u64,
        cq_data: Option<u64>,
        body: Body<'_>,
        op: TaggedOp,
    ) -> Result<(), CommError> {
        if op.completion {
            self.cq_room()?;
            self.tagged_outstanding += 1;
        }
        match self.send_msg(dest, tag, cq_data, body, false, Some(op)) {
            Ok(_) => Ok(()),
            Err(e) => {
                if op.completion {
                    self.tagged_outstanding -= 1;
                }
                Err(e)
            }
        }
    }

    /// Posts a tagged receive into `buf` for `sel` with `context`.
    ///
    /// Errors: [`CommError::CompletionQueueFull`], [`CommError::UnknownPeer`],
    /// [`CommError::TooManyRequests`], [`CommError::Post`].
    pub fn tagged_recv(
        &mut self,
        sel: Selector,
        context: u64,
        buf: Box<dyn RecvBuf>,
    ) -> Result<(), CommError> {
        self.cq_room()?;
        if let Some(s) = sel.source {
            self.check_rank(s)?;
        }
        let id = self.new_request(ReqState::TaggedRecv {
            context,
            source: sel.source,
            buf: Sink(buf),
        })?;
        self.tagged_outstanding += 1;
        self.post_recv(id, sel, false)
    }

    /// A peek (`FI_PEEK`, with `FI_CLAIM` or `FI_DISCARD` per `mode`): one
    /// completion now, with the first matching message's tag, length, CQ
    /// data and source, or [`OpError::NoMessage`].
    ///
    /// Errors: [`CommError::CompletionQueueFull`].
    pub fn tagged_peek(
        &mut self,
        sel: Selector,
        context: u64,
        mode: PeekMode,
    ) -> Result<(), CommError> {
        self.cq_room()?;
        self.pump_held();
        let found = match mode {
            PeekMode::Peek => self.p2p.peek(&sel),
            PeekMode::Claim => self.p2p.claim(&sel, context),
            PeekMode::Discard => self.p2p.discard(&sel).map(|(env, msg)| {
                let len = msg.msg_len();
                if let Msg::Offer(o) = msg {
                    self.discard_offer(env, o);
                }
                (env, len)
            }),
        };
        let c = match found {
            Some((env, len)) => Self::message_completion(context, env, len as u64, None, None),
            None => TaggedCompletion {
                context,
                kind: OpKind::Recv,
                len: 0,
                tag: sel.tag,
                data: None,
                source: sel.source,
                error: Some(OpError::NoMessage),
                buf: None,
            },
        };
        self.push_completion(c);
        Ok(())
    }

    /// Receives the message claimed under `context` into `buf`
    /// (`FI_CLAIM`), or drops it (`buf` `None`: `FI_CLAIM | FI_DISCARD`).
    ///
    /// Errors: [`CommError::CompletionQueueFull`];
    /// [`CommError::UnknownRequest`] when no message is claimed under
    /// `context`.
    pub fn tagged_claimed(
        &mut self,
        context: u64,
        buf: Option<Box<dyn RecvBuf>>,
    ) -> Result<(), CommError> {
        self.cq_room()?;
        let c = match buf {
            Some(buf) => {
                let (env, msg) = self
                    .p2p
                    .take_claimed(context)
                    .ok_or(CommError::UnknownRequest(context))?;
                match msg {
                    Msg::Eager(data) => {
                        self.stats.messages_received += 1;
                        self.stats.bytes_received += data.len() as u64;
                        Self::copy_completion(context, env, &data, buf)
                    }
                    Msg::Offer(o) => {
                        // Completes when the pull ends.
                        let id = self.new_request(ReqState::TaggedRecv {
                            context,
                            source: Some(env.source),
                            buf: Sink(buf),
                        })?;
                        self.tagged_outstanding += 1;
                        self.begin_pull(id, env, o);
                        return Ok(());
                    }
                }
            }
            None => {
                let (env, msg) = self
                    .p2p
                    .discard_claimed(context)
                    .ok_or(CommError::UnknownRequest(context))?;
                if let Msg::Offer(o) = msg {
                    self.discard_offer(env, o);
                }
                Self::message_completion(context, env, 0, None, None)
            }
        };
        self.push_completion(c);
        Ok(())
    }

    /// Cancels the posted receive with `context` (`fi_cancel(3)`): it
    /// completes with [`OpError::Canceled`]. False if none is posted (it
    /// completed, or never was).
    pub fn tagged_cancel(&mut self, context: u64) -> bool {
        let Some(id) = self.requests.iter().find_map(|(id, r)| match r {
            ReqState::TaggedRecv { context: c, .. } if *c == context => Some(*id),
            _ => None,
        }) else {
            return false;
        };
        if !self.p2p.cancel(&id) {
            return false;
        }
        let Some(ReqState::TaggedRecv { source, buf, .. }) = self.requests.remove(&id) else {
            return false;
        };
        self.tagged_outstanding -= 1;
        self.push_completion(TaggedCompletion {
            context,
            kind: OpKind::Recv,
            len: 0,
            tag: 0,
            data: None,
            source,
            error: Some(OpError::Canceled),
            buf: Some(buf.0),
        });
        true
    }

    /// Moves up to `max` completions into `out`, oldest first; returns how
    /// many.
    pub fn take_completions(&mut self, out: &mut Vec<TaggedCompletion>, max: usize) -> usize {
        let n = max.min(self.cq.len());
        out.extend(self.cq.drain(..n));
        n
    }

    /// Whether a completion is queued.
    pub fn has_completion(&self) -> bool {
        !self.cq.is_empty()
    }

    /// Completions queued and due, and the capacity.
    pub fn completion_counts(&self) -> (usize, usize, usize) {
        (self.cq.len(), self.tagged_outstanding, self.cq_cap)
    }

    fn push_completion(&mut self, c: TaggedCompletion) {
        self.cq.push_back(c);
        self.news = true;
    }

    fn message_completion(
        context: u64,
        env: TagEnvelope,
        len: u64,
        error: Option<OpError>,
        buf: Option<Box<dyn RecvBuf>>,
    ) -> TaggedCompletion {
        TaggedCompletion {
            context,
            kind: OpKind::Recv,
            len,
            tag: env.tag,
            data: env.data,
            source: Some(env.source),
            error,
            buf,
        }
    }

    /// Copies `data` into `buf` (as much as fits; the rest is reported as
    /// truncation with the message's length).
    fn copy_completion(
        context: u64,
        env: TagEnvelope,
        data: &[u8],
        mut buf: Box<dyn RecvBuf>,
    ) -> TaggedCompletion {
        let dst = buf.bytes_mut();
        let n = data.len().min(dst.len());
        dst[..n].copy_from_slice(&data[..n]);
        let error = (data.len() > n).then_some(OpError::Truncated {
            olen: data.len() as u64,
        });
        Self::message_completion(context, env, n as u64, error, Some(buf))
    }

    /// Tagged receive `id` matched a message: copied, completed.
    pub(super) fn complete_tagged_recv(&mut self, id: u64, env: TagEnvelope, data: &[u8]) {
        let Some(ReqState::TaggedRecv { context, buf, .. }) = self.requests.remove(&id) else {
            return;
        };
        self.tagged_outstanding -= 1;
        let c = Self::copy_completion(context, env, data, buf.0);
        self.push_completion(c);
    }

    /// Tagged receive `id` cannot complete (`e`).
    pub(super) fn fail_tagged_recv(&mut self, id: u64, e: CommError) {
        let Some(ReqState::TaggedRecv {
            context,
            source,
            buf,
        }) = self.requests.remove(&id)
        else {
            return;
        };
        self.tagged_outstanding -= 1;
        self.push_completion(TaggedCompletion {
            context,
            kind: OpKind::Recv,
            len: 0,
            tag: 0,
            data: None,
            source,
            error: Some(op_error(e)),
            buf: Some(buf.0),
        });
    }

    /// A tagged send that is complete (handed to CTP, or failed) leaves
    /// the requests; its completion, if it makes one, is queued.
    pub(crate) fn finish_tagged(&mut self, id: u64) {
        match self.requests.get(&id) {
            Some(r @ ReqState::Send { op: Some(_), .. }) if r.is_complete() => {}
            _ => return,
        }
        let Some(ReqState::Send {
            op: Some(op),
            failed,
            tag,
            len,
            ..
        }) = self.requests.remove(&id)
        else {
            return;
        };
        if op.completion {
            self.tagged_outstanding -= 1;
            self.push_completion(TaggedCompletion {
                context: op.context,
                kind: OpKind::Send,
                len: len as u64,
                tag,
                data: None,
                source: None,
                error: failed.map(op_error),
                buf: None,
            });
        }
    }

    /// Removes request `id` whose operation failed before it was posted.
    pub(super) fn forget_tagged(&mut self, id: u64) {
        match self.requests.remove(&id) {
            Some(ReqState::TaggedRecv { .. })
            | Some(ReqState::Send {
                op: Some(TaggedOp {
                    completion: true, ..
                }),
                ..
            }) => self.tagged_outstanding -= 1,
            _ => {}
        }
    }
}
