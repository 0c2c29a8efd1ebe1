//! The group member as both carriers hold it: the sans-IO [`Sender`] of
//! this member's stream (if it sends) and one [`Receiver`] per source it
//! follows, the demultiplexing of received frames between them (paper
//! model: frames about our own stream go to the sender, others to the
//! receiver of their source; `PROTOCOL.md` "Demultiplexing"), the reports
//! for the application, and fault injection on the member's own link.
//!
//! No I/O here: the carriers (`over_edp`, `over_udp`) move the frames.

use std::collections::VecDeque;
use std::io;
use std::time::Instant;

use link::fault::{FaultConfig, FaultInjector};
use runtime::protocol::Ready;
use tracing::{debug, warn, Span};

use super::{GroupMessage, GroupSpec, MakEvent, Peer};
use crate::member::{Addr, Member, Transmit};
use crate::wire::{FrameType, Packet, Repr};
use crate::{
    Config, GroupId, MemberId, Receiver, ReceiverEvent, ReceiverStats, SendError, Sender,
    SenderEvent, SenderStats,
};

/// Lost first transmissions of DATA remembered for [`GroupCore::fault_lost`]
/// at most (the rest are only counted).
pub const MAX_LOST_RECORD: usize = 1 << 20;

/// Counters of a member's carrier and of its link's injected faults, in
/// frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CarrierStats {
    /// Frames handed to the member (after receive-side fault injection).
    pub frames_in: u64,
    /// Frames the member queued for sending (before send-side faults).
    pub frames_out: u64,
    /// Frames of the carrier's port or group that are not MAK frames
    /// (failed to parse) or are addressed elsewhere.
    pub malformed: u64,
    /// MAK frames of another group, or about a stream this member neither
    /// sends nor follows.
    pub foreign: u64,
    /// Frames the link refused (errors other than a full queue).
    pub send_errors: u64,
    /// Frames that met a full send queue (UDP: retried; EDP: lost and
    /// recovered by the protocol).
    pub send_blocked: u64,
    /// Receive errors other than `WouldBlock`.
    pub recv_errors: u64,
    /// Injected on receive: frames lost.
    pub fault_rx_lost: u64,
    /// Of `fault_rx_lost`: first transmissions of DATA.
    pub fault_rx_data_lost: u64,
    /// Of `fault_rx_lost`: retransmitted DATA.
    pub fault_rx_retx_lost: u64,
    /// Injected on receive: frames delivered twice.
    pub fault_rx_duplicated: u64,
    /// Injected on send: frames lost.
    pub fault_tx_lost: u64,
}

/// Messages that left the sender's window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DoneStats {
    /// Messages done.
    pub messages: u64,
    /// Of those, acknowledged by every member still in the group.
    pub confirmed: u64,
    /// The id of the last message done.
    pub last: Option<u32>,
}

/// Every counter of a member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MakStats {
    /// The sender's counters (None: this member does not send).
    pub sender: Option<SenderStats>,
    /// Per source followed: its id and the receiver's counters.
    pub receivers: Vec<(MemberId, ReceiverStats)>,
    /// The carrier's counters and injected faults.
    pub carrier: CarrierStats,
    /// Messages that left the sender's window.
    pub done: DoneStats,
}

impl MakStats {
    /// NAKs sent by this member's receivers.
    pub fn naks_sent(&self) -> u64 {
        self.receivers.iter().map(|(_, r)| r.naks_sent).sum()
    }

    /// Tr expiries of this member's receivers that sent nothing (every
    /// missing packet named by another member's NAK).
    pub fn naks_suppressed(&self) -> u64 {
        self.receivers.iter().map(|(_, r)| r.naks_suppressed).sum()
    }

    /// ACKs sent by this member's receivers.
    pub fn acks_sent(&self) -> u64 {
        self.receivers.iter().map(|(_, r)| r.acks_sent).sum()
    }

    /// Retransmissions by this member's sender, every cause.
    pub fn retransmissions(&self) -> u64 {
        self.sender
            .map_or(0, |s| s.retx_nak + s.retx_timeout + s.retx_tail)
    }
}

/// What `recv` found: a message, or a report about the stream it reads.
pub(crate) type Received<A> = Result<GroupMessage, MakEvent<A>>;

/// The member. See the module documentation.
pub struct GroupCore<A: Addr> {
    group: GroupId,
    me: MemberId,
    peers: Vec<Peer<A>>,
    sender: Option<Sender<A>>,
    receivers: Vec<Receiver<A>>,
    /// The receiver `recv` looks at first (round-robin over sources).
    rr: usize,
    /// Sender reports (members declared silent) not read yet: at most one
    /// per member.
    reports: VecDeque<MakEvent<A>>,
    silent: Vec<MemberId>,
    done: DoneStats,
    rx_fault: Option<FaultInjector>,
    tx_fault: Option<FaultInjector>,
    lost: Vec<u32>,
    pub(crate) stats: CarrierStats,
    /// `mak_member`, the parent of its sender's and receivers' spans (see
    /// `span.rs`).
    span: Span,
}

impl<A: Addr> std::fmt::Debug for GroupCore<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCore")
            .field("group", &self.group)
            .field("me", &self.me)
            .field("sends", &self.sender.is_some())
            .field("sources", &self.receivers.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// Refuses link faults a member cannot inject (see [`super::MakConfig::link_fault`]).
fn check_fault(f: &FaultConfig) -> io::Result<()> {
    let bad = |what: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "MAK link fault: {what} is not supported on a member's link (loss, burst loss and \
                 receive-side duplication are; put delay, jitter, reordering and rate limits in \
                 the EDP runtime's LinkConfig::fault)"
            ),
        ))
    };
    if f.corrupt > 0.0 {
        // MAK frames carry no checksum (paper footnote: a frame that fails
        // the Ethernet FCS counts as lost, and that is what loss models).
        return bad("corruption (MAK frames carry no checksum; the Ethernet FCS drops bad frames, which is loss)");
    }
    if f.reorder > 0.0 || !f.delay.is_zero() || !f.jitter.is_zero() {
        return bad("delay, jitter or reordering");
    }
    if f.rate_bps.is_some() || f.queue_limit.is_some() {
        return bad("a rate or queue limit");
    }
    f.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("MAK link fault: {e}")))
}

impl<A: Addr> GroupCore<A> {
    /// A member per `spec` with protocol `cfg` on `carrier` (named in its
    /// span, e.g. "EDP on eth0"); `seed` seeds the receivers' NAK delays;
    /// `fault` is injected on the member's link.
    ///
    /// Errors: `InvalidInput` for an inconsistent spec (see
    /// [`GroupSpec::validate`]), an invalid protocol configuration or an
    /// unsupported fault.
    pub(crate) fn new(
        spec: &GroupSpec<A>,
        cfg: &Config,
        carrier: &str,
        seed: u64,
        fault: Option<&FaultConfig>,
    ) -> io::Result<Self> {
        spec.validate()?;
        let span = tracing::debug_span!(
            "mak_member",
            group = spec.group.0,
            me = spec.me.0,
            name = spec.me_peer().map_or("", |p| p.name.as_str()),
            carrier
        );
        // The sender's and receivers' spans are made inside, as children.
        let _entered = span.enter();
        let invalid = |e: crate::ConfigError| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MAK configuration: {e}"),
            )
        };
        let members: Vec<Member<A>> = spec
            .members
            .iter()
            .filter(|p| p.id != spec.me)
            .map(|p| Member {
                id: p.id,
                addr: p.addr,
            })
            .collect();
        let sender = if spec.sends {
            Some(
                Sender::new(cfg.clone(), spec.group, spec.me, members, spec.start)
                    .map_err(invalid)?,
            )
        } else {
            None
        };
        let mut receivers = Vec::new();
        for (i, src) in spec.sources.iter().enumerate() {
            let p = spec.peer(*src).expect("validated");
            let r = Receiver::new(
                cfg.clone(),
                spec.group,
                spec.me,
                Member {
                    id: p.id,
                    addr: p.addr,
                },
                spec.start,
                seed ^ ((i as u64 + 1) << 48) ^ u64::from(spec.me.0),
            )
            .map_err(invalid)?;
            receivers.push(r);
        }
        let (rx_fault, tx_fault) = match fault {
            Some(f) if !f.is_transparent() => {
                check_fault(f)?;
                // One generator per direction, each from the member's seed.
                let rx = FaultInjector::new(f.clone());
                let tx = FaultConfig {
                    duplicate: 0.0,
                    seed: f.seed ^ 0x5eed_0f7a_u64,
                    ..f.clone()
                };
                (Some(rx), Some(FaultInjector::new(tx)))
            }
            _ => (None, None),
        };
        Ok(Self {
            group: spec.group,
            me: spec.me,
            peers: spec.members.clone(),
            sender,
            receivers,
            rr: 0,
            reports: VecDeque::new(),
            silent: Vec::new(),
            done: DoneStats::default(),
            rx_fault,
            tx_fault,
            lost: Vec::new(),
            stats: CarrierStats::default(),
            span: span.clone(),
        })
    }

    /// The group.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// This member's id.
    pub fn me(&self) -> MemberId {
        self.me
    }

    /// The peer with id `id` (members as configured, names included).
    pub fn peer(&self, id: MemberId) -> Option<&Peer<A>> {
        self.peers.iter().find(|p| p.id == id)
    }

    fn peer_or_unknown(&self, id: MemberId, addr: A) -> Peer<A> {
        self.peer(id).cloned().unwrap_or(Peer {
            id,
            addr,
            name: format!("member {}", id.0),
        })
    }

    /// A frame received from `from` (the emitter's unicast address): the
    /// link's receive-side faults apply, then the frame goes to the sender
    /// (about our own stream) or to the receiver of its source.
    pub fn on_frame(&mut self, now: Instant, from: A, frame: &[u8]) {
        netcore::in_span!(self, self.frame_in(now, from, frame))
    }

    fn frame_in(&mut self, now: Instant, from: A, frame: &[u8]) {
        let copies = match &mut self.rx_fault {
            Some(f) => {
                let fate = f.decide(now, frame.len());
                if fate.copies == 0 {
                    self.stats.fault_rx_lost += 1;
                    if let Ok(p) = Packet::new_checked(frame) {
                        if p.frame_type() == FrameType::Data {
                            if p.flags().contains(crate::wire::Flags::RETX) {
                                self.stats.fault_rx_retx_lost += 1;
                            } else {
                                self.stats.fault_rx_data_lost += 1;
                                if self.lost.len() < MAX_LOST_RECORD {
                                    self.lost.push(p.seq().0);
                                }
                            }
                        }
                    }
                    return;
                }
                if fate.copies > 1 {
                    self.stats.fault_rx_duplicated += 1;
                }
                fate.copies
            }
            None => 1,
        };
        for _ in 0..copies {
            self.dispatch(now, from, frame);
        }
        self.after_event();
    }

    fn dispatch(&mut self, now: Instant, from: A, frame: &[u8]) {
        self.stats.frames_in += 1;
        let repr = match Repr::parse(frame) {
            Ok(r) => r,
            Err(e) => {
                self.stats.malformed += 1;
                debug!(error = %e, "MAK member: malformed frame dropped");
                return;
            }
        };
        let h = *repr.header();
        if h.group != self.group {
            self.stats.foreign += 1;
            return;
        }
        if h.source == self.me {
            match &mut self.sender {
                Some(s) => s.handle_repr(now, from, &repr),
                None => self.stats.foreign += 1,
            }
            return;
        }
        match self
            .receivers
            .iter_mut()
            .find(|r| r.source().id == h.source)
        {
            Some(r) => r.handle_repr(now, from, &repr),
            None => self.stats.foreign += 1,
        }
    }

    /// Takes the sender's events: completions are counted, silent members
    /// become reports (named).
    fn after_event(&mut self) {
        let Some(s) = &mut self.sender else {
            return;
        };
        while let Some(ev) = s.poll_event() {
            match ev {
                SenderEvent::MessageDone { msg, confirmed } => {
                    self.done.messages += 1;
                    self.done.confirmed += u64::from(confirmed);
                    self.done.last = Some(msg);
                }
                SenderEvent::MemberSilent { member, acked } => {
                    let peer = self
                        .peers
                        .iter()
                        .find(|p| p.id == member.id)
                        .cloned()
                        .unwrap_or(Peer {
                            id: member.id,
                            addr: member.addr,
                            name: format!("member {}", member.id.0),
                        });
                    warn!(group = self.group.0, member = peer.id.0, name = %peer.name, addr = ?peer.addr,
                          %acked, "MAK: member silent, the group continues without it");
                    self.silent.push(member.id);
                    self.reports.push_back(MakEvent::MemberSilent {
                        member: peer,
                        acked,
                    });
                }
            }
        }
    }

    /// Fires due timers of the sender and the receivers.
    pub fn handle_timeout(&mut self, now: Instant) {
        netcore::in_span!(self, self.on_timers(now))
    }

    fn on_timers(&mut self, now: Instant) {
        if let Some(s) = &mut self.sender {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        for r in &mut self.receivers {
            if r.poll_timeout().is_some_and(|t| t <= now) {
                r.handle_timeout(now);
            }
        }
        self.after_event();
    }

    /// The earliest deadline of the sender and the receivers.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.sender.as_ref().and_then(Sender::poll_timeout);
        for r in &self.receivers {
            t = netcore::time::earliest(t, r.poll_timeout());
        }
        t
    }

    /// The next frame to send, written to `buf` (at least the protocol's
    /// `mtu` bytes): ACKs and NAKs of the receivers first (small, and
    /// what other members wait for), then the sender's DATA. Frames lost
    /// to the link's send-side faults are counted and skipped.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<A>> {
        netcore::in_span!(self, self.transmit(now, buf))
    }

    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<A>> {
        loop {
            let t = self
                .receivers
                .iter_mut()
                .find_map(|r| r.poll_transmit(now, buf))
                .or_else(|| self.sender.as_mut().and_then(|s| s.poll_transmit(now, buf)))?;
            self.stats.frames_out += 1;
            if let Some(f) = &mut self.tx_fault {
                if f.decide(now, t.len).copies == 0 {
                    self.stats.fault_tx_lost += 1;
                    continue;
                }
            }
            // Sending may complete messages (no member left) or arm timers.
            self.after_event();
            return Some(t);
        }
    }

    /// Whether `poll_transmit` has a frame now.
    pub fn wants_transmit(&self) -> bool {
        self.receivers.iter().any(Receiver::wants_transmit)
            || self.sender.as_ref().is_some_and(Sender::wants_transmit)
    }

    /// Queues a message on this member's stream.
    ///
    /// Errors: [`SendError`]; `None` when this member does not send.
    pub fn send(&mut self, data: Vec<u8>) -> Option<Result<u32, SendError>> {
        let s = self.sender.as_mut()?;
        Some(netcore::in_span!(self, s.send(data)))
    }

    /// Whether the sender's buffer takes `len` more bytes now (false when
    /// this member does not send).
    pub fn has_room(&self, len: usize) -> bool {
        self.sender.as_ref().is_some_and(|s| s.has_room(len))
    }

    /// Whether the sender has nothing queued or unacknowledged (true when
    /// this member does not send).
    pub fn is_idle(&self) -> bool {
        self.sender.as_ref().is_none_or(Sender::is_idle)
    }

    /// Whether this member sends.
    pub fn sends(&self) -> bool {
        self.sender.is_some()
    }

    /// The sender, for diagnostics (`members()`, `window()`, `state()`).
    pub fn sender(&self) -> Option<&Sender<A>> {
        self.sender.as_ref()
    }

    /// The receivers, one per source followed.
    pub fn receivers(&self) -> &[Receiver<A>] {
        &self.receivers
    }

    /// Stops waiting for member `id` (it left); returns it if it was active.
    pub fn remove_member(&mut self, now: Instant, id: MemberId) -> Option<Peer<A>> {
        netcore::in_span!(self, self.remove(now, id))
    }

    fn remove(&mut self, now: Instant, id: MemberId) -> Option<Peer<A>> {
        let m = self.sender.as_mut()?.remove_member(now, id)?;
        self.after_event();
        Some(self.peer_or_unknown(m.id, m.addr))
    }

    /// The members the sender declared silent, in order.
    pub fn silent(&self) -> Vec<Peer<A>> {
        self.silent
            .iter()
            .filter_map(|id| self.peer(*id).cloned())
            .collect()
    }

    /// The next message from any source (round-robin), or a report about a
    /// source's stream (silent, abandoned, a message dropped).
    pub(crate) fn pop_received(&mut self) -> Option<Received<A>> {
        netcore::in_span!(self, self.received())
    }

    fn received(&mut self) -> Option<Received<A>> {
        let n = self.receivers.len();
        for k in 0..n {
            let i = (self.rr + k) % n;
            if let Some(ev) = self.receivers[i].poll_event() {
                self.rr = (i + 1) % n;
                let src = self.receivers[i].source();
                let source = self.peer_or_unknown(src.id, src.addr);
                return Some(match ev {
                    ReceiverEvent::Message(m) => Ok(GroupMessage {
                        source: src.id,
                        msg: m.msg,
                        data: m.data,
                    }),
                    ReceiverEvent::MessageDropped { msg, len, reason } => {
                        Err(MakEvent::MessageDropped {
                            source,
                            msg,
                            len,
                            reason,
                        })
                    }
                    ReceiverEvent::SenderSilent { first_missing } => Err(MakEvent::SourceSilent {
                        source,
                        first_missing,
                    }),
                    ReceiverEvent::Abandoned { first_missing } => Err(MakEvent::Abandoned {
                        source,
                        first_missing,
                    }),
                });
            }
        }
        None
    }

    /// The next event: sender reports first, then what the receivers have.
    pub(crate) fn pop_event(&mut self) -> Option<MakEvent<A>> {
        if let Some(r) = self.reports.pop_front() {
            return Some(r);
        }
        self.pop_received().map(|r| match r {
            Ok(m) => MakEvent::Message(m),
            Err(e) => e,
        })
    }

    /// Readable while a message or report waits; writable while the
    /// sender's buffer takes a small message.
    pub fn readiness(&self) -> Ready {
        let mut r = Ready::NONE;
        if !self.reports.is_empty() || self.receivers.iter().any(Receiver::has_event) {
            r |= Ready::READABLE;
        }
        if self.has_room(0) {
            r |= Ready::WRITABLE;
        }
        r
    }

    /// Sequence numbers of first transmissions of DATA the receive-side
    /// fault dropped (at most [`MAX_LOST_RECORD`], in arrival order).
    pub fn fault_lost(&self) -> &[u32] {
        &self.lost
    }

    /// Every counter.
    pub fn stats(&self) -> MakStats {
        MakStats {
            sender: self.sender.as_ref().map(Sender::stats),
            receivers: self
                .receivers
                .iter()
                .map(|r| (r.source().id, r.stats()))
                .collect(),
            carrier: self.stats,
            done: self.done,
        }
    }
}
