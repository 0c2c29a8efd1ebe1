//! The sans-IO ESP connection state machine.
//!
//! A [`Connection`] does no syscalls and reads no clock: time comes in as
//! `now`, segments come in through [`Connection::handle_segment`] (or
//! [`Connection::handle_segment_into`], which can place in-order payload
//! straight into a waiting reader's buffer; a driver offers each segment's
//! bytes to [`Connection::handle_predicted`] first, the fast path of the
//! expected segment, which takes it without a full parse), timers fire through
//! [`Connection::handle_timeout`], and frames to send come out of
//! [`Connection::poll_transmit`] (quinn-proto's shape). The next deadline is
//! [`Connection::poll_timeout`].
//!
//! Protocol (thesis ch. 5, with TCP's later fixes; `esp/PROTOCOL.md`):
//! - states as TCP without TIME_WAIT (thesis fig. 5.2.1, [`State`]);
//!   initial sequence numbers from a keyed hash plus a clock
//!   ([`IsnGenerator`], RFC 6528);
//! - sequence numbers count segments: SYN, FIN and every segment with payload
//!   consume one; FIN never carries payload;
//! - cumulative ACK of the next expected segment on every segment after the
//!   SYN, delayed up to `delayed_ack_segments` segments or `delayed_ack_time`,
//!   immediate for out-of-order segments and gap fills (RFC 5681 sec. 4.2);
//! - SACK blocks (in segments) on pure ACKs while segments are out of order,
//!   most recent first (RFC 2018); receivers never discard an out-of-order
//!   segment they stored, so the sender trusts SACK (no reneging);
//! - RTO per RFC 6298 ([`netcore::rtt::Rto`]) with Karn's rule; fast
//!   retransmit on 3 duplicate ACKs or 3 SACKed segments above a hole (RFC
//!   6675 DupThresh), DSACK undo (RFC 2883) — `recovery.rs`;
//! - flow control: the receiver advertises `free receive buffer / MSS`
//!   segments beyond the ACK; the right edge never moves left; the sender
//!   probes a zero window with the persist timer (`probe.rs`);
//! - congestion control behind [`netcore::congestion::Controller`]: NewReno
//!   (RFC 5681/6582) in segments, or none;
//! - RST and SYN checks per RFC 5961 with rate-limited challenge ACKs
//!   (`acceptance.rs`).
//!
//! Files: `state.rs`, `error.rs`, `stats.rs`, `isn.rs`, `timer.rs` (the
//! public small types), `acceptance.rs` (arrival checks), `send_buffer.rs`
//! (send data and the peer's window), `recovery.rs` (retransmission queue,
//! SACK scoreboard, loss episodes), `prediction.rs` (the receive fast path
//! for the expected segment), `receive.rs` (receive buffer,
//! reassembly, window, ACKs), `probe.rs` (persist and keepalive), `emit.rs`
//! (frame building), this file (the connection, its user calls and state
//! transitions).
//!
//! Tracing: each connection carries a `tracing` span (`esp_conn`: local and
//! remote port, peer MAC) entered by the public entry points; events at
//! state changes (debug), losses (fast retransmit, RTO expiry with backoff),
//! DSACK undo, challenge ACKs (debug), window changes and every segment in
//! and out (trace). Without a subscriber they cost a level check; the span
//! is made when the connection is (a subscriber installed later sees the
//! events without the span).

mod acceptance;
mod emit;
mod error;
mod handshake;
mod isn;
mod liveness;
mod prediction;
mod probe;
mod receive;
mod recovery;
mod send_buffer;
mod state;
mod stats;
mod timer;

use std::fmt;
use std::time::Instant;

use netcore::congestion::{AnyController, Controller, NewReno, NoControl};
use netcore::rtt::Rto;
use tracing::Span;

pub use emit::{reset_frame, GatherFrame};
pub use error::{ConnectionError, Error};
pub use isn::IsnGenerator;
pub use liveness::Liveness;
pub(crate) use receive::window_segments;
pub use recovery::{DUP_THRESH, MAX_DUP_THRESH};
pub use state::State;
pub use stats::Stats;

use crate::auth::{AuthMethod, MethodList, TagStatus};
use crate::config::{CongestionControl, TransportConfig};
use crate::wire::{EspRepr, Flags, MacAddr, Seq, ESP_HEADER_LEN};
use acceptance::AckLimits;
use emit::Gather;
use probe::Probes;
use receive::{AckState, ReceiveBuffer};
use recovery::{Recovery, SegmentKind};
use send_buffer::{SendBuffer, SendWindow};
use timer::{Timer, Timers};

/// Largest window expressible on the wire, in segments.
pub const MAX_WINDOW: u32 = u16::MAX as u32;

/// One ESP connection (sans-IO).
pub struct Connection {
    cfg: TransportConfig,
    /// Local (MAC, port).
    local: (MacAddr, u16),
    /// Remote (MAC, port).
    remote: (MacAddr, u16),
    /// Largest payload per segment in bytes (link MTU - 20).
    mss: usize,
    /// The receive window of an empty receive buffer, in segments:
    /// floor(recv_buffer / MSS), at most `MAX_WINDOW` (both fixed at
    /// construction, so the division is made once: a 64-bit division costs
    /// 10-40 cycles, and every segment sent and every read would pay it).
    full_window: u32,
    state: State,
    error: Option<ConnectionError>,
    /// The handshake completed once.
    established_once: bool,
    timers: Timers,
    stats: Stats,
    /// The connection's trace span (local and remote port, peer MAC).
    span: Span,
    /// Authentication methods this end accepts, in order (offered in the
    /// SYN; `crate::auth`).
    auth_offer: MethodList,
    /// The method negotiated (binding from the handshake on); `None` in
    /// SYN_SENT.
    auth: Option<AuthMethod>,

    // ---- send side
    /// ISS: the initial send sequence number.
    iss: Seq,
    /// The peer's receive window.
    snd_wnd: SendWindow,
    /// Bytes accepted by `send` and not yet acknowledged.
    send: SendBuffer,
    /// SND.UNA..SND.NXT: retransmission queue, SACK scoreboard, loss
    /// episodes.
    recovery: Recovery,
    cc: AnyController,
    rtt: Rto,
    probes: Probes,
    /// Stall, suspicion and death (`liveness.rs`).
    liveness: liveness::Tracker,
    gather: Gather,

    // ---- receive side
    recv: ReceiveBuffer,
    ack: AckState,
    /// An RST to send next.
    rst_pending: Option<EspRepr>,
    limits: AckLimits,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("state", &self.state)
            .field("snd_una", &self.recovery.una())
            .field("snd_nxt", &self.recovery.nxt())
            .field("rcv_nxt", &self.recv.nxt)
            .field("in_flight", &self.recovery.len())
            .field("unsent", &self.send.unsent())
            .field("lost", &self.recovery.lost_len())
            .field("sacked", &self.recovery.sacked_count())
            .field("lost_unsent", &self.recovery.lost_count())
            .field("snd_wnd_edge", &self.snd_wnd.edge)
            .field("cwnd", &self.cc.window())
            .field("recovery", &self.recovery.recovery_point())
            .field("unread", &self.recv.len())
            .field("ooo", &self.recv.out_of_order())
            .field("ack_pending", &self.ack.pending)
            .field("timers", &self.timers.armed().collect::<Vec<_>>())
            .field("error", &self.error)
            .finish()
    }
}

impl Connection {
    fn new(
        cfg: &TransportConfig,
        mtu: usize,
        local: (MacAddr, u16),
        remote: (MacAddr, u16),
        iss: Seq,
    ) -> Self {
        let mss = mtu
            .saturating_sub(ESP_HEADER_LEN)
            .clamp(1, u16::MAX as usize);
        let cc = match cfg.congestion {
            CongestionControl::NewReno => {
                AnyController::NewReno(NewReno::new(cfg.initial_cwnd, 2 * MAX_WINDOW))
            }
            CongestionControl::None => AnyController::NoControl(NoControl),
        };
        let span = tracing::debug_span!(
            "esp_conn",
            local_port = local.1,
            remote_port = remote.1,
            peer = %remote.0
        );
        Self {
            rtt: Rto::new(cfg.rto),
            cc,
            cfg: cfg.clone(),
            local,
            remote,
            mss,
            full_window: receive::window_segments(cfg.recv_buffer, mss),
            state: State::Closed,
            error: None,
            established_once: false,
            timers: Timers::default(),
            stats: Stats::default(),
            span,
            auth_offer: cfg.auth.resolve(false),
            auth: None,
            iss,
            snd_wnd: SendWindow {
                edge: iss.add(1),
                wnd: 1,
                wl1: Seq(0),
                wl2: iss,
            },
            send: SendBuffer::default(),
            recovery: Recovery::new(iss),
            probes: Probes::default(),
            liveness: liveness::Tracker::default(),
            gather: Gather::default(),
            recv: ReceiveBuffer::default(),
            ack: AckState::default(),
            rst_pending: None,
            limits: AckLimits::default(),
        }
    }

    /// Opens a connection actively: state SYN_SENT, the SYN is ready for
    /// `poll_transmit`. `mtu` is the link MTU in bytes (MSS = MTU - 20);
    /// `iss` comes from [`IsnGenerator::isn`].
    pub fn connect(
        cfg: &TransportConfig,
        mtu: usize,
        local: (MacAddr, u16),
        remote: (MacAddr, u16),
        iss: Seq,
        now: Instant,
    ) -> Self {
        let mut c = Self::new(cfg, mtu, local, remote, iss);
        netcore::in_span!(c, {
            c.set_state(State::SynSent);
            c.recovery.push_control(SegmentKind::Syn, 0, now);
        });
        c
    }

    /// Opens a connection passively in answer to `syn` (a SYN without ACK
    /// addressed to `local`): state SYN_RCVD, the SYN-ACK is ready for
    /// `poll_transmit`. Returns `None` if `syn` is not such a segment.
    pub fn accept(
        cfg: &TransportConfig,
        mtu: usize,
        local: (MacAddr, u16),
        remote_mac: MacAddr,
        syn: &EspRepr,
        iss: Seq,
        now: Instant,
    ) -> Option<Self> {
        if !syn.flags.syn() || syn.flags.ack() || syn.flags.rst() || syn.dst_port != local.1 {
            return None;
        }
        let mut c = Self::new(cfg, mtu, local, (remote_mac, syn.src_port), iss);
        netcore::in_span!(c, c.set_state(State::SynRcvd));
        c.recv.irs = syn.seq;
        c.recv.nxt = syn.seq.add(1);
        c.recv.adv = c.recv.nxt;
        c.snd_wnd.wl1 = syn.seq;
        c.snd_wnd.edge = iss.add(1);
        c.snd_wnd.wnd = u32::from(syn.window);
        c.recovery.push_control(SegmentKind::Syn, 0, now);
        Some(c)
    }

    /// Opens a connection passively from the client's final handshake ACK
    /// (or first data segment) `ack`, after its SYN was answered with the
    /// SYN cookie `iss` and no state was kept (RFC 4987 sec. 3.6; the
    /// listener checked the cookie): state ESTABLISHED, the peer's initial
    /// sequence number is `ack.seq - 1`, its window the one `ack` carries.
    /// Feed `ack` itself to [`Connection::handle_segment`] next (it may
    /// carry data). There is no RTT sample (the SYN-ACK's send time was not
    /// kept): the RTO starts at its initial value.
    ///
    /// Returns `None` unless `ack` is an ACK (no SYN, RST) of `iss + 1` to
    /// `local`.
    pub fn from_cookie(
        cfg: &TransportConfig,
        mtu: usize,
        local: (MacAddr, u16),
        remote_mac: MacAddr,
        ack: &EspRepr,
        iss: Seq,
        _now: Instant,
    ) -> Option<Self> {
        let f = ack.flags;
        if !f.ack() || f.syn() || f.rst() || ack.dst_port != local.1 || ack.ack != iss.add(1) {
            return None;
        }
        let mut c = Self::new(cfg, mtu, local, (remote_mac, ack.src_port), iss);
        netcore::in_span!(c, c.set_state(State::Established));
        c.established_once = true;
        c.recovery = Recovery::new(iss.add(1));
        c.recv.irs = ack.seq.sub(1);
        c.recv.nxt = ack.seq;
        c.recv.adv = c.recv.nxt;
        // The handshake's window: taken from `ack` by the caller's
        // handle_segment (SND.WL1 before its sequence number).
        c.snd_wnd.wl1 = ack.seq.sub(1);
        c.snd_wnd.wl2 = iss.add(1);
        c.snd_wnd.edge = iss.add(1);
        c.snd_wnd.wnd = 0;
        Some(c)
    }

    // ------------------------------------------------------------ accessors

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }
    /// Why the connection died, if it did.
    pub fn error(&self) -> Option<ConnectionError> {
        self.error
    }
    /// Counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.srtt_us = self.rtt.srtt().map_or(0, |d| d.as_micros() as u64);
        s.rto_us = self.rtt.rto().as_micros() as u64;
        s.cwnd = self.cc.window();
        s.peer_window = self.snd_wnd.wnd;
        s.reordering = self.recovery.dup_thresh();
        s.fast_retransmits = self.recovery.fast_retransmits;
        s.spurious = self.recovery.spurious;
        s.unresponsive_us = self.liveness.suspected_us;
        s
    }
    /// Records that the link failed to send a frame from `poll_transmit`
    /// (the segment is recovered by retransmission).
    pub fn on_send_error(&mut self) {
        self.stats.send_errors += 1;
    }
    /// Sends a delayed ACK now instead of at its timer: for a caller about
    /// to sleep, one frame is cheaper than a wakeup 100 us later (and the
    /// peer learns sooner). Returns true if an ACK was pending.
    pub fn flush_delayed_ack(&mut self) -> bool {
        if self.ack.pending > 0 && self.state.is_synchronized() {
            self.ack.now = true;
            true
        } else {
            false
        }
    }
    /// Records a frame for this connection that failed to parse (bad
    /// checksum, truncated): counted as received and dropped.
    pub fn on_malformed(&mut self) {
        self.stats.received += 1;
        self.stats.dropped += 1;
    }
    /// Local (MAC, port).
    pub fn local(&self) -> (MacAddr, u16) {
        self.local
    }
    /// Remote (MAC, port).
    pub fn remote(&self) -> (MacAddr, u16) {
        self.remote
    }
    /// Largest payload per segment, in bytes.
    pub fn mss(&self) -> usize {
        self.mss
    }
    /// The retransmission timeout and its RTT estimate (SRTT, RTTVAR, RTO).
    pub fn rtt(&self) -> &Rto {
        &self.rtt
    }
    /// Next sequence number to send.
    pub fn snd_nxt(&self) -> Seq {
        self.recovery.nxt()
    }
    /// Oldest unacknowledged sequence number.
    pub fn snd_una(&self) -> Seq {
        self.recovery.una()
    }
    /// Next sequence number expected from the peer.
    pub fn rcv_nxt(&self) -> Seq {
        self.recv.nxt
    }
    /// Initial send sequence number.
    pub fn iss(&self) -> Seq {
        self.iss
    }
    /// Congestion window in segments (`u32::MAX` without congestion
    /// control).
    pub fn cwnd(&self) -> u32 {
        self.cc.window()
    }
    /// The configuration.
    pub fn config(&self) -> &TransportConfig {
        &self.cfg
    }
    /// The connection's trace span (for callers that log on its behalf).
    pub fn span(&self) -> &Span {
        &self.span
    }
    /// True once the handshake completed and until the connection closed
    /// (ESTABLISHED, FIN_WAIT_1/2, CLOSING, CLOSE_WAIT, LAST_ACK).
    pub fn is_established(&self) -> bool {
        matches!(
            self.state,
            State::Established
                | State::FinWait1
                | State::FinWait2
                | State::Closing
                | State::CloseWait
                | State::LastAck
        )
    }
    /// True once the handshake completed, whatever happened since.
    pub fn was_established(&self) -> bool {
        self.established_once
    }
    /// Bytes ready for `recv`.
    pub fn recv_available(&self) -> usize {
        self.recv.len()
    }
    /// Bytes `send` accepts now: the free part of the send buffer, at most
    /// what brings the unsent bytes to `notsent_lowat`.
    pub fn send_capacity(&self) -> usize {
        let free = self.cfg.send_buffer.saturating_sub(self.send.len());
        free.min(self.cfg.notsent_lowat.saturating_sub(self.send.unsent()))
    }
    /// Bytes accepted by `send` but not yet acknowledged.
    pub fn send_pending(&self) -> usize {
        self.send.len()
    }
    /// True when `recv` would not return [`Error::Blocked`] (data, EOF or
    /// error).
    pub fn is_readable(&self) -> bool {
        !self.recv.is_empty()
            || self.recv.fin_received
            || self.error.is_some()
            || self.state == State::Closed
    }
    /// True when `send` would not return [`Error::Blocked`].
    pub fn is_writable(&self) -> bool {
        self.error.is_some()
            || self.send.fin_requested
            || (self.send_capacity() > 0
                && matches!(
                    self.state,
                    State::Established | State::CloseWait | State::SynSent | State::SynRcvd
                ))
            || self.state == State::Closed
    }
    /// True when the peer sent FIN and all its data was read.
    pub fn is_eof(&self) -> bool {
        self.recv.fin_received && self.recv.is_empty()
    }
    /// True when the connection has nothing left to do: CLOSED with no
    /// frame waiting to be sent.
    pub fn is_finished(&self) -> bool {
        self.state == State::Closed && self.rst_pending.is_none() && !self.ack.now
    }

    // ----------------------------------------------------------- user calls

    /// Copies bytes from `data` into the send buffer; returns how many (up to
    /// [`Connection::send_capacity`]). Segmentation into MSS-sized
    /// segments happens in `poll_transmit`.
    ///
    /// Errors: [`Error::Blocked`] when the buffer is full;
    /// [`Error::WriteShutdown`] after `close()`;
    /// [`Error::ConnectionLost`] once the connection died;
    /// [`Error::NotConnected`] when CLOSED.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, Error> {
        if let Some(e) = self.error {
            return Err(e.into());
        }
        if self.send.fin_requested {
            return Err(Error::WriteShutdown);
        }
        match self.state {
            State::SynSent | State::SynRcvd | State::Established | State::CloseWait => {}
            State::Closed | State::Listen => return Err(Error::NotConnected),
            _ => return Err(Error::WriteShutdown),
        }
        if data.is_empty() {
            return Ok(0);
        }
        let n = data.len().min(self.send_capacity());
        if n == 0 {
            return Err(Error::Blocked);
        }
        self.send.write(&data[..n]);
        self.stats.bytes_sent += n as u64;
        Ok(n)
    }

    /// Copies received in-order bytes into `buf`; returns how many. `Ok(0)`
    /// means end of stream (the peer's FIN) or an empty `buf`.
    ///
    /// Errors: [`Error::Blocked`] when no data is ready; after the buffer
    /// is drained, [`Error::ConnectionLost`] with why the connection died
    /// ([`ConnectionError::Reset`], [`ConnectionError::TimedOut`], ...) or
    /// [`Error::NotConnected`].
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        if buf.is_empty() {
            return Ok(0);
        }
        if !self.recv.is_empty() {
            let n = self.recv.read(buf);
            netcore::in_span!(self, self.maybe_window_update());
            return Ok(n);
        }
        if self.recv.fin_received {
            return Ok(0);
        }
        if let Some(e) = self.error {
            return Err(e.into());
        }
        match self.state {
            State::Closed | State::Listen => Err(Error::NotConnected),
            _ => Err(Error::Blocked),
        }
    }

    /// Shuts down the sending side: a FIN follows the buffered data
    /// (ESTABLISHED -> FIN_WAIT_1, CLOSE_WAIT -> LAST_ACK). Before the
    /// handshake completed the FIN waits for it (RFC 793 CLOSE call in
    /// SYN-SENT with queued data). Reading stays possible until the peer's
    /// FIN. Use [`Connection::abort`] to give up at once.
    pub fn close(&mut self) {
        if self.send.fin_requested {
            return;
        }
        netcore::in_span!(self, self.shutdown_write());
    }

    fn shutdown_write(&mut self) {
        match self.state {
            State::SynSent | State::SynRcvd => self.send.fin_requested = true,
            State::Established => {
                self.send.fin_requested = true;
                self.set_state(State::FinWait1);
            }
            State::CloseWait => {
                self.send.fin_requested = true;
                self.set_state(State::LastAck);
            }
            _ => {}
        }
    }

    /// Aborts: sends RST (if synchronized), drops all buffered data, CLOSED,
    /// and later calls return [`ConnectionError::Aborted`].
    pub fn abort(&mut self) {
        netcore::in_span!(self, self.abort_now());
    }

    fn abort_now(&mut self) {
        self.queue_reset();
        if self.error.is_none() {
            self.error = Some(ConnectionError::Aborted);
        }
        self.enter_closed();
        self.send.clear();
        self.recv.clear();
    }

    fn set_state(&mut self, state: State) {
        if state != self.state {
            tracing::debug!(from = %self.state, to = %state, "state");
            self.state = state;
        }
    }

    fn enter_closed(&mut self) {
        self.set_state(State::Closed);
        self.timers = Timers::default();
        self.recovery.clear();
        self.probes.now = false;
    }

    fn die(&mut self, e: ConnectionError) {
        if self.error.is_none() {
            tracing::debug!(error = %e, "connection lost");
            self.error = Some(e);
        }
        self.enter_closed();
    }

    /// Queues an RST|ACK at SND.NXT for the peer, if synchronized.
    fn queue_reset(&mut self) {
        if self.state.is_synchronized() {
            self.rst_pending = Some(EspRepr {
                src_port: self.local.1,
                dst_port: self.remote.1,
                flags: Flags::RST | Flags::ACK,
                seq: self.recovery.nxt(),
                ack: self.recv.nxt,
                ..Default::default()
            });
        }
    }

    fn timed_out(&mut self) {
        // Best effort: tell the peer, in case only our direction works.
        self.queue_reset();
        self.die(ConnectionError::TimedOut);
    }

    // ------------------------------------------------------------- receive

    /// Processes one segment from the peer. `repr` and `payload` come from
    /// [`crate::wire::EspRepr::parse`]; the caller has matched the peer MAC.
    /// Segments for other ports or not acceptable in the current state are
    /// counted as dropped (and may draw an ACK or RST, per RFC 793/5961).
    #[inline]
    pub fn handle_segment(&mut self, now: Instant, repr: &EspRepr, payload: &[u8]) {
        self.handle_segment_into(now, repr, payload, &mut []);
    }

    /// [`handle_segment_into`](Self::handle_segment_into) with frame
    /// authentication's verdict on the segment (`cx.tag` of the runtime;
    /// the other entry points pass [`TagStatus::Off`]). Under a negotiated
    /// method with a tag, a segment not [`TagStatus::Verified`] is counted
    /// (`auth_dropped`) and dropped before any state changes
    /// (`crate::auth`).
    #[inline]
    pub fn handle_segment_tagged(
        &mut self,
        now: Instant,
        repr: &EspRepr,
        payload: &[u8],
        tag: TagStatus,
        dst: &mut [u8],
    ) -> usize {
        netcore::in_span!(self, self.segment_in(now, repr, payload, tag, dst))
    }

    /// Like [`handle_segment`](Self::handle_segment), for a caller with a
    /// reader waiting: when the segment is in order and no byte is waiting
    /// in the receive buffer, as much of its payload as fits is placed
    /// straight into `dst` (zero-copy receive: the frame's bytes go to the
    /// reader once) and the count is returned. Those bytes count as read —
    /// window and ACK bookkeeping are exactly as if [`recv`](Self::recv) had
    /// returned them right after `handle_segment`; the rest of the payload
    /// (and any segments the arrival made in order) goes to the receive
    /// buffer as usual. Returns 0 for every other segment (out of order,
    /// duplicate, control, or data already waiting: bytes are read in
    /// order).
    #[inline]
    pub fn handle_segment_into(
        &mut self,
        now: Instant,
        repr: &EspRepr,
        payload: &[u8],
        dst: &mut [u8],
    ) -> usize {
        netcore::in_span!(
            self,
            self.segment_in(now, repr, payload, TagStatus::Off, dst)
        )
    }

    fn segment_in(
        &mut self,
        now: Instant,
        repr: &EspRepr,
        payload: &[u8],
        tag: TagStatus,
        dst: &mut [u8],
    ) -> usize {
        tracing::trace!(
            seq = %repr.seq,
            ack = %repr.ack,
            flags = ?repr.flags,
            len = payload.len(),
            wnd = repr.window,
            sack = ?repr.sack,
            "segment in"
        );
        self.stats.received += 1;
        if repr.dst_port != self.local.1 || repr.src_port != self.remote.1 {
            self.stats.dropped += 1;
            return 0;
        }
        if self.auth.is_some_and(|m| m.requires_tag()) && tag != TagStatus::Verified {
            self.stats.auth_dropped += 1;
            self.stats.dropped += 1;
            return 0;
        }
        let placed = match self.state {
            State::Closed | State::Listen => {
                self.on_closed(repr);
                0
            }
            State::SynSent => {
                self.on_syn_sent(now, repr, tag);
                0
            }
            _ => self.on_synchronized(now, repr, payload, dst),
        };
        if placed > 0 {
            self.maybe_window_update();
        }
        self.update_probe_timers(now);
        placed
    }

    fn on_closed(&mut self, repr: &EspRepr) {
        self.stats.dropped += 1;
        // After a graceful close, answer a retransmitted FIN with its ACK
        // (our last ACK was lost); anything else draws RST.
        if self.error.is_none()
            && self.recv.fin_received
            && repr.flags.fin()
            && repr.seq.add(1) == self.recv.nxt
        {
            self.ack.now = true;
            return;
        }
        if let Some(r) = repr.reset_reply() {
            self.rst_pending = Some(r);
        }
    }

    // ------------------------------------------------------------- timers

    /// The earliest deadline at which `handle_timeout` must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Fires every timer that expired at `now`: delayed ACK, retransmission
    /// (RFC 6298 sec. 5.4-5.6), persist (zero-window probe), keepalive; the
    /// last three also suspect the peer and end the connection at the user
    /// timeout (`liveness.rs`).
    pub fn handle_timeout(&mut self, now: Instant) {
        netcore::in_span!(self, self.fire_timers(now));
    }

    fn fire_timers(&mut self, now: Instant) {
        if self.timers.is_expired(Timer::DelayedAck, now) {
            self.timers.stop(Timer::DelayedAck);
            if self.ack.pending > 0 {
                self.ack.now = true;
            }
        }
        if self.timers.is_expired(Timer::Rto, now) {
            self.timers.stop(Timer::Rto);
            self.on_rto(now);
        }
        if self.timers.is_expired(Timer::Persist, now) {
            self.timers.stop(Timer::Persist);
            self.on_persist_timer(now);
        }
        if self.timers.is_expired(Timer::KeepAlive, now) {
            self.timers.stop(Timer::KeepAlive);
            self.on_keepalive_timer(now);
        }
        self.update_probe_timers(now);
    }
}
