//! The send side of the communicator's state: messages waiting for the
//! window, fragments cut and handed to CTP, confirmations reaped (ULFC's
//! byte window, `flow.rs`, and the span of sequence numbers; the
//! introduction and sequence-reset gates, `state_liveness.rs`).

use std::collections::VecDeque;
use std::hash::Hash;
use std::time::Instant;

use ctp::{Endpoint, MsgId, Options, PeerAddr};

use super::State;
use crate::control::{Control, CONTROL_COMMAND, CONTROL_LEN};
use crate::flow::SendWindow;
use crate::request::ReqState;
use crate::wire::{Header, COMM_COMMAND, FLAG_LAST, FLAG_RNDV, HEADER_LEN};

/// A rendezvous message's bytes, offered to the receiver (`state_rndv.rs`).
pub(crate) struct OfferBody {
    pub body: Box<dyn ctp::SendBuf>,
    /// The caller's own buffer: the send completes when the receiver has
    /// pulled it, not when CTP has it.
    pub zero_copy: bool,
}

impl std::fmt::Debug for OfferBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OfferBody({} bytes, zero_copy: {})",
            self.body.bytes().len(),
            self.zero_copy
        )
    }
}

/// A message waiting for the window: its bytes behind `HEADER_LEN` bytes
/// of room for the header (so a message sent in one fragment is not
/// copied again), how much of it is cut into fragments already, and the
/// request to credit when its last fragment is handed to CTP.
#[derive(Debug)]
pub(super) struct OutMessage {
    pub(super) context: u16,
    pub(super) tag: u64,
    pub(super) cq_data: Option<u64>,
    pub(super) buf: Vec<u8>,
    pub(super) off: usize,
    pub(super) req: u64,
    /// Fragment slots counted in `State::pending_fragments` (at the
    /// configured fragment size).
    pub(super) slots: usize,
    /// A rendezvous: its bytes (`buf` is the header's room only).
    pub(super) offer: Option<OfferBody>,
}

impl OutMessage {
    /// Bytes still to cut into fragments: none for a rendezvous (its one
    /// fragment is the announcement).
    pub(super) fn len(&self) -> usize {
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
pub(super) struct PeerTx {
    pub(super) next_seq: u64,
    pub(super) pending: VecDeque<OutMessage>,
    /// (sequence number, CTP message, bytes), in sequence order.
    pub(super) in_flight: VecDeque<(u64, MsgId, u64)>,
    /// Control messages handed to CTP and unconfirmed.
    pub(super) ctl_in_flight: Vec<MsgId>,
    /// Rendezvous announcements handed to CTP whose receiver has not yet
    /// pulled the bytes (CTP keeps them until then), with the send request
    /// that completes then (the caller's own buffer).
    pub(super) offered: Vec<(MsgId, Option<u64>)>,
    pub(super) win: SendWindow,
    /// A sequence reset is queued or unconfirmed (its CTP message once
    /// handed): no fragment goes until the peer's endpoint has it, so the
    /// peer sees it before the first renumbered fragment.
    pub(super) reset: Option<Option<MsgId>>,
    /// Whether the peer has our incarnation (`liveness.rs`).
    pub(super) intro: Intro,
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
    pub(super) fn new(share: u64) -> Self {
        PeerTx {
            next_seq: 0,
            pending: VecDeque::new(),
            in_flight: VecDeque::new(),
            ctl_in_flight: Vec::new(),
            offered: Vec::new(),
            win: SendWindow::new(share),
            reset: None,
            intro: Intro::None,
        }
    }

    /// Nothing but the introduction may go yet.
    pub(super) fn gated(&self) -> bool {
        matches!(self.intro, Intro::Queued | Intro::InFlight(_))
    }
}

impl PeerTx {
    /// The payload length of the next fragment if both windows let it go.
    #[inline]
    pub(super) fn next_chunk(&self, frag: usize, span: usize) -> Option<usize> {
        let m = self.pending.front()?;
        if self.reset.is_some() || self.intro != Intro::Done {
            return None;
        }
        if let Some(&(oldest, _, _)) = self.in_flight.front() {
            if self.next_seq >= oldest + span as u64 {
                return None;
            }
        }
        if m.offer.is_some() {
            // The announcement: the header's bytes only.
            return self.win.fits(HEADER_LEN as u64).then_some(0);
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
    /// A rendezvous: the bytes to offer (`bytes` is the announcement).
    pub offer: Option<OfferBody>,
    /// A rendezvous's announcement (`offer` may have moved to CTP).
    pub rndv: bool,
    /// Its bytes are the caller's: the send completes at the pull's end.
    pub zero_copy: bool,
}

impl<A: Copy + Eq + Hash + std::fmt::Debug> State<A> {
    /// Forgets the in-flight fragments CTP no longer holds (confirmed).
    /// Each confirmation frees window bytes and shows that the peer
    /// answers (ending an implicit disconnect).
    #[cfg(test)]
    pub fn reap(&mut self, is_pending: impl Fn(MsgId) -> bool) {
        self.reap_with(&is_pending, &is_pending);
    }

    /// [`State::reap`] with CTP's two answers: whether a message has
    /// packets unconfirmed (a fragment, or a rendezvous announcement, is
    /// confirmed when it has not), and whether CTP still holds it (a
    /// rendezvous's bytes until the receiver pulled them).
    pub fn reap_with(
        &mut self,
        is_unconfirmed: &impl Fn(MsgId) -> bool,
        is_pending: &impl Fn(MsgId) -> bool,
    ) {
        for rank in 0..self.size {
            let tx = &mut self.tx[rank];
            let (mut freed, mut confirmed) = (0, false);
            tx.in_flight.retain(|&(_, m, len)| {
                let keep = is_unconfirmed(m);
                if !keep {
                    freed += len;
                }
                keep
            });
            let offers = tx.offered.len();
            let mut pulled = Vec::new();
            if offers > 0 {
                tx.offered.retain(|&(m, req)| {
                    let keep = is_pending(m);
                    if !keep {
                        pulled.extend(req);
                    }
                    keep
                });
                confirmed |= tx.offered.len() < offers;
            }
            for req in pulled {
                // The receiver has the caller's bytes: the send is done.
                if let Some(ReqState::Send { left, .. }) = self.requests.get_mut(&req) {
                    *left = 0;
                    self.news = true;
                    self.finish_tagged(req);
                }
            }
            let tx = &mut self.tx[rank];
            let before = tx.ctl_in_flight.len();
            tx.ctl_in_flight.retain(|m| is_pending(*m));
            if let Some(Some(m)) = tx.reset {
                if !is_pending(m) {
                    tx.reset = None;
                    confirmed = true;
                }
            }
            if let Intro::InFlight(m) = tx.intro {
                if !is_pending(m) {
                    tx.intro = Intro::Done;
                    confirmed = true;
                }
            }
            confirmed |= freed > 0 || tx.ctl_in_flight.len() < before;
            // A waiter may wait for these (a flush, a blocked sender).
            self.news |= confirmed;
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
    pub fn pump_sends(&mut self, ep: &mut Endpoint<A>, now: Instant)
    where
        A: PeerAddr,
    {
        self.pump_sends_inner(ep, now);
        if self.pulls_due(ep) {
            self.pump_pulls(ep, now);
        }
        self.last_settled = ep.settled();
    }

    fn pump_sends_inner(&mut self, ep: &mut Endpoint<A>, now: Instant)
    where
        A: PeerAddr,
    {
        for m in self.to_cancel.drain(..) {
            ep.cancel(now, m);
        }
        for req in std::mem::take(&mut self.after_cancel) {
            self.finish_tagged(req);
        }
        if self.any_in_flight().is_some() || self.tx.iter().any(|t| !t.offered.is_empty()) {
            self.reap_with(&|m| ep.is_unconfirmed(m), &|m| ep.is_pending(m));
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
            match ep.send_vec(now, CONTROL_COMMAND, self.addrs[dest], bytes, Options::NONE) {
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
        // `pending_fragments` is one load; the peers' windows are looked
        // at only when something waits for them.
        while self.pending_fragments > 0 {
            let Some((dest, len)) = self.peek_sendable() else {
                return;
            };
            if !ep.has_room(len as u64) {
                return;
            }
            let mut s = self.take_sendable(dest).expect("peeked");
            let bytes = std::mem::take(&mut s.bytes);
            let sent = match s.offer.take() {
                Some(o) => ep.send_offer(now, COMM_COMMAND, self.addrs[dest], &bytes, o.body),
                None => ep.send_vec(now, COMM_COMMAND, self.addrs[dest], bytes, Options::NONE),
            };
            match sent {
                Ok(msg) => self.handed(&s, msg),
                // The peer's sequence now has a gap: nothing more can be
                // delivered to it in order.
                Err(e) => self.fail_peer(dest, format!("CTP refused a fragment: {e}")),
            }
        }
    }

    /// True if `pump_sends` may have work now: something waits to be
    /// handed to CTP, a rendezvous pull waits to start or may have ended,
    /// or a message of CTP's sent-commands storage settled since the last
    /// pump (a confirmation to reap: `Endpoint::settled` is one load,
    /// where reaping looks up every message in flight).
    pub fn pump_due(&self, ep: &Endpoint<A>) -> bool
    where
        A: PeerAddr,
    {
        self.pending_fragments > 0
            || !self.ctl_out.is_empty()
            || !self.to_cancel.is_empty()
            || !self.after_cancel.is_empty()
            || self.grants.has_grants()
            || self.pulls_due(ep)
            || ep.settled() != self.last_settled
    }

    /// True if fragments wait or are in flight.
    #[cfg(test)]
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

    /// The length of the next fragment that the window lets go, and its
    /// peer (round robin over peers).
    pub fn peek_sendable(&mut self) -> Option<(usize, usize)> {
        let (frag, span) = (
            self.cfg.fragment_bytes.max(1),
            self.cfg.window_fragments.max(1),
        );
        for k in 0..self.size {
            let dest = (self.rr + k) % self.size;
            let tx = &self.tx[dest];
            if tx.pending.is_empty() {
                continue;
            }
            if let Some(chunk) = tx.next_chunk(frag, span) {
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
        let offer = m.offer.take();
        let h = Header {
            flags: match (&offer, last) {
                (Some(_), _) => FLAG_LAST | FLAG_RNDV,
                (None, true) => FLAG_LAST,
                (None, false) => 0,
            },
            context: m.context,
            tag: m.tag,
            seq: tx.next_seq,
            len: offer.as_ref().map_or(m.len(), |o| o.body.bytes().len()) as u64,
            cq_data: m.cq_data,
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
            rndv: offer.is_some(),
            zero_copy: offer.as_ref().is_some_and(|o| o.zero_copy),
            offer,
        })
    }

    /// A fragment was handed to CTP as `msg`.
    pub fn handed(&mut self, s: &Sendable, msg: MsgId) {
        self.stats.fragments_sent += 1;
        let tx = &mut self.tx[s.dest];
        tx.in_flight.push_back((s.seq, msg, s.len));
        if s.rndv {
            // CTP keeps a rendezvous's bytes until the receiver pulled
            // them; the caller's own buffer until then too.
            tx.offered.push((msg, s.zero_copy.then_some(s.req)));
        }
        tx.win.sent(s.len);
        if s.last && !s.zero_copy {
            if let Some(ReqState::Send { left, .. }) = self.requests.get_mut(&s.req) {
                *left = 0;
                self.news = true;
                self.finish_tagged(s.req);
            }
        }
    }
}
