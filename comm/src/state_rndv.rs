//! Rendezvous in the communicator's state: messages longer than the eager
//! limit (`CommConfig::eager_limit`) travel as a CTP offer (ctp's
//! PROTOCOL.md "Pulled messages") that takes its place in the peer's
//! sequence like any fragment; the receiver matches the announcement and
//! pulls the bytes straight into the matched receive's buffer (a posted
//! tagged receive's own, or a `Vec` of the message's length for the
//! communicator's receives). An announcement nobody asked for waits in the
//! unexpected queue as a handle ([`Msg::Offer`]): no byte of it is here
//! yet. Discarding one pulls nothing and tells the sender to drop it. A
//! communicator's receive (which hands the bytes back as a `Vec`) pulls
//! into a spent buffer of CTP's pool (`ctp::Grow`: it grows as the parts
//! land), so a rank that recycles its buffers faults in no fresh pages.
//!
//! Pulls need the CTP endpoint, which matching does not have: a match
//! queues the pull (`to_pull`), and the next pump (inside the same call or
//! engine turn) starts it; its end comes back through
//! `ctp::Endpoint::poll_pulled` in the pump as well.

use std::hash::Hash;
use std::time::Instant;

use ctp::{Endpoint, Grow, Offer, PeerAddr, PullId, Pulled, RecvBuf};

use super::State;
use crate::completion::{OpError, OpKind, TaggedCompletion};
use crate::matching::{Payload, TagEnvelope};
use crate::request::{ReqState, Status};
use crate::CommError;

/// A message as matching holds it: its bytes, or a rendezvous's offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Sent eagerly: the bytes are here.
    Eager(Vec<u8>),
    /// A rendezvous: the bytes are pulled from the sender when a receive
    /// takes it.
    Offer(Offer),
}

impl Payload for Msg {
    fn msg_len(&self) -> usize {
        match self {
            Msg::Eager(d) => d.len(),
            Msg::Offer(o) => usize::try_from(o.size).unwrap_or(usize::MAX),
        }
    }

    fn held_bytes(&self) -> u64 {
        match self {
            Msg::Eager(d) => d.len() as u64,
            Msg::Offer(_) => 0,
        }
    }
}

/// Who waits for a pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A request (`Recv` or `TaggedRecv`).
    Request(u64),
    /// Nobody: a discarded message (the pull only tells the sender).
    Discard,
}

/// A pull in progress, or queued to start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PullOwner {
    pub waiter: Waiter,
    pub env: TagEnvelope,
    /// The message's length, bytes.
    pub len: u64,
}

/// A pull queued for the next pump.
pub(crate) struct PullStart {
    pub owner: PullOwner,
    pub offer: Offer,
    /// The receive's buffer; `None`: a buffer of the message's length from
    /// CTP's pool of spent buffers (a communicator's receive, which hands
    /// the bytes back as a `Vec`).
    pub sink: Option<Box<dyn RecvBuf>>,
}

impl std::fmt::Debug for PullStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullStart")
            .field("owner", &self.owner)
            .field("offer", &self.offer)
            .finish_non_exhaustive()
    }
}

impl<A: Copy + Eq + Hash + std::fmt::Debug> State<A> {
    /// Receive `req` matched the rendezvous `offer` from `env.source`:
    /// queues its pull into the request's buffer.
    pub(super) fn begin_pull(&mut self, req: u64, env: TagEnvelope, offer: Offer) {
        let owner = PullOwner {
            waiter: Waiter::Request(req),
            env,
            len: offer.size,
        };
        let max = self.cfg.max_message_bytes;
        let recv = matches!(self.requests.get(&req), Some(ReqState::Recv { .. }));
        let sink: Option<Box<dyn RecvBuf>> = if recv {
            if offer.size > max || usize::try_from(offer.size).is_err() {
                let e = CommError::TooLarge {
                    len: offer.size,
                    max,
                };
                self.fail_recv(req, e);
                self.discard_offer(env, offer);
                return;
            }
            None
        } else if let Some(ReqState::TaggedRecv { buf, .. }) = self.requests.get_mut(&req) {
            Some(std::mem::replace(&mut buf.0, Box::new(Vec::new())))
        } else {
            // Nobody waits (the request was dropped): the sender may drop
            // the bytes.
            self.discard_offer(env, offer);
            return;
        };
        self.stats.rendezvous_received += 1;
        self.to_pull.push_back(PullStart { owner, offer, sink });
    }

    /// Drops rendezvous `offer` from `env.source` unread: the sender is
    /// told it may drop the bytes (a pull of none).
    pub(super) fn discard_offer(&mut self, env: TagEnvelope, offer: Offer) {
        let owner = PullOwner {
            waiter: Waiter::Discard,
            env,
            len: offer.size,
        };
        self.to_pull.push_back(PullStart {
            owner,
            offer,
            sink: Some(Box::new(Vec::new())),
        });
    }

    /// True if pulls wait to start or to be cancelled, or a pull ended.
    pub(super) fn pulls_due(&self, ep: &Endpoint<A>) -> bool
    where
        A: PeerAddr,
    {
        !self.to_pull.is_empty() || !self.pulls_to_cancel.is_empty() || ep.has_pulled()
    }

    /// Starts the queued pulls, cancels those of failed peers, and takes
    /// the pulls that ended.
    pub(super) fn pump_pulls(&mut self, ep: &mut Endpoint<A>, now: Instant)
    where
        A: PeerAddr,
    {
        for (id, e) in std::mem::take(&mut self.pulls_to_cancel) {
            if let Some(sink) = ep.cancel_pull(now, id) {
                self.pull_ended(id, 0, sink, Some(e));
            }
        }
        while let Some(s) = self.to_pull.pop_front() {
            let src = s.owner.env.source;
            let sink = match s.sink {
                Some(b) => b,
                None => {
                    // A buffer of the pool: no page to fault in, no
                    // length to zero first (it grows as parts land).
                    let want = s.owner.len as usize;
                    match ep.take_buffer(want) {
                        Ok(buf) => Box::new(Grow { buf, want }),
                        Err(e) => {
                            let e = CommError::Bootstrap(format!("rendezvous receive: {e}"));
                            self.settle_pull(s.owner, 0, Box::new(Grow::default()), Some(e));
                            self.discard_offer(s.owner.env, s.offer);
                            continue;
                        }
                    }
                }
            };
            if let Some(e) = self.failure(src) {
                // Its sender failed while the pull waited here.
                self.settle_pull(s.owner, 0, sink, Some(e));
                continue;
            }
            match ep.pull(now, self.addrs[src], &s.offer, sink) {
                Ok(id) => {
                    self.pulling.insert(id, s.owner);
                }
                Err(sink) => {
                    let e = CommError::Bootstrap(format!(
                        "CTP refused a pull of {} bytes from peer {src} ({} pulls in progress)",
                        s.offer.size,
                        ep.pulls()
                    ));
                    self.settle_pull(s.owner, 0, sink, Some(e));
                }
            }
        }
        while let Some(p) = ep.poll_pulled() {
            let Pulled {
                id,
                len,
                sink,
                error,
                ..
            } = p;
            let error = error.map(|kind| {
                let src = self.pulling.get(&id).map_or(usize::MAX, |o| o.env.source);
                CommError::PeerFailed {
                    rank: src,
                    reason: format!("rendezvous pull failed: {kind:?} (the sender is silent)"),
                }
            });
            self.pull_ended(id, len, sink, error);
        }
    }

    /// Pull `id` ended: `len` bytes placed in `sink`, or `error`.
    fn pull_ended(
        &mut self,
        id: PullId,
        len: u64,
        sink: Box<dyn RecvBuf>,
        error: Option<CommError>,
    ) {
        let Some(owner) = self.pulling.remove(&id) else {
            return;
        };
        self.settle_pull(owner, len, sink, error);
    }

    /// Completes what waited for a pull.
    fn settle_pull(
        &mut self,
        owner: PullOwner,
        placed: u64,
        sink: Box<dyn RecvBuf>,
        error: Option<CommError>,
    ) {
        let Waiter::Request(req) = owner.waiter else {
            return;
        };
        self.news = true;
        let env = owner.env;
        if error.is_none() {
            self.heard_from(env.source);
            // A message for the application: the core holds its
            // transmission briefly for the reply (`ctp::UpperLayer`).
            self.app_messages += 1;
            self.stats.messages_received += 1;
            self.stats.bytes_received += placed;
        }
        let tagged = matches!(self.requests.get(&req), Some(ReqState::TaggedRecv { .. }));
        match self.requests.get_mut(&req) {
            Some(ReqState::Recv { done, .. }) => {
                *done = Some(match error {
                    Some(e) => Err(e),
                    None => {
                        let any: Box<dyn std::any::Any> = sink;
                        let mut data = any.downcast::<Grow>().map(|g| g.buf).unwrap_or_default();
                        data.truncate(placed as usize);
                        let status = Status {
                            source: env.source,
                            // MPI's contexts carry tags up to MAX_TAG.
                            tag: env.tag as crate::matching::Tag,
                            len: data.len(),
                        };
                        Ok((status, data))
                    }
                });
            }
            _ if tagged => {
                let Some(ReqState::TaggedRecv {
                    context, source, ..
                }) = self.requests.remove(&req)
                else {
                    return;
                };
                self.tagged_outstanding -= 1;
                let c = match error {
                    Some(e) => TaggedCompletion {
                        context,
                        kind: OpKind::Recv,
                        len: 0,
                        tag: 0,
                        data: None,
                        source,
                        error: Some(super::tagged::op_error(e)),
                        buf: Some(sink),
                    },
                    None => TaggedCompletion {
                        context,
                        kind: OpKind::Recv,
                        len: placed,
                        tag: env.tag,
                        data: env.data,
                        source: Some(env.source),
                        error: (owner.len > placed)
                            .then_some(OpError::Truncated { olen: owner.len }),
                        buf: Some(sink),
                    },
                };
                self.cq.push_back(c);
            }
            _ => {}
        }
    }

    /// Rank `rank` failed for `reason`: its pulls end with that error (at
    /// the next pump, which has the endpoint), and those queued fail now.
    pub(super) fn fail_pulls_from(&mut self, rank: usize, reason: &str) {
        let e = || CommError::PeerFailed {
            rank,
            reason: reason.to_string(),
        };
        let ids: Vec<PullId> = self
            .pulling
            .iter()
            .filter(|(_, o)| o.env.source == rank)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.pulls_to_cancel.push((id, e()));
        }
        let queued: Vec<PullStart> = {
            let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.to_pull)
                .into_iter()
                .partition(|s| s.owner.env.source == rank);
            self.to_pull = rest.into();
            mine
        };
        for s in queued {
            let sink = s.sink.unwrap_or_else(|| Box::new(Grow::default()));
            self.settle_pull(s.owner, 0, sink, Some(e()));
        }
    }

    /// True if a pull from `rank` is in progress or queued (the failure
    /// detector watches the rank).
    pub(super) fn pulls_from(&self, rank: usize) -> bool {
        self.pulling.values().any(|o| o.env.source == rank)
            || self.to_pull.iter().any(|s| s.owner.env.source == rank)
    }
}
