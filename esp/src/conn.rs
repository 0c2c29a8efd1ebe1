//! The sans-IO ESP connection state machine.
//!
//! A [`Connection`] does no syscalls and reads no clock: time comes in as
//! `now`, segments come in through [`Connection::handle_segment`], timers fire
//! through [`Connection::handle_timeout`], and frames to send come out of
//! [`Connection::poll_transmit`] (quinn-proto's shape). The next deadline is
//! [`Connection::poll_timeout`].
//!
//! Protocol (thesis ch. 5, with TCP's later fixes; `esp/PROTOCOL.md`):
//! - states as TCP without TIME_WAIT (thesis fig. 5.2.1); initial sequence
//!   numbers from a keyed hash plus a clock ([`IsnGenerator`], RFC 6528);
//! - sequence numbers count segments: SYN, FIN and every segment with payload
//!   consume one; FIN never carries payload;
//! - cumulative ACK of the next expected segment on every segment after the
//!   SYN, delayed up to `delayed_ack_segments` segments or `delayed_ack_time`,
//!   immediate for out-of-order segments and gap fills (RFC 5681 sec. 4.2);
//! - SACK blocks (in segments) on pure ACKs while segments are out of order;
//!   receivers never discard an out-of-order segment they stored, so the
//!   sender trusts SACK (no reneging);
//! - RTO per RFC 6298 ([`crate::rtt`]) with Karn's rule; fast retransmit on 3
//!   duplicate ACKs or 3 SACKed segments above a hole (RFC 6675 DupThresh);
//! - flow control: the receiver advertises `free receive buffer / MSS`
//!   segments beyond the ACK; the right edge never moves left; the sender
//!   probes a zero window with the persist timer;
//! - congestion control: slow start and AIMD (RFC 5681), in segments;
//! - RST and SYN checks per RFC 5961 with rate-limited challenge ACKs.

use std::collections::VecDeque;
use std::fmt;
use std::hash::Hasher;
use std::time::{Duration, Instant};

use edp::wire::{EthernetRepr, ETH_HEADER_LEN};
use siphasher::sip::SipHasher24;

use crate::config::EspConfig;
use crate::rtt::RttEstimator;
use crate::wire::{
    fill_checksum, fill_checksum_gather, EspRepr, Flags, MacAddr, SackBlocks, Seq, ESP_HEADER_LEN,
};

/// Largest window expressible on the wire, in segments.
pub const MAX_WINDOW: u32 = u16::MAX as u32;
/// Duplicate ACKs (or SACKed segments above a hole) that trigger fast
/// retransmit (RFC 5681 sec. 3.2, RFC 6675 DupThresh).
pub const DUP_THRESH: u32 = 3;
/// Upper bound of the adaptive duplicate-ACK threshold, segments (Linux's
/// `tcp_max_reordering` is 300). The threshold starts at [`DUP_THRESH`] and
/// rises to the reordering degree observed: a segment sent once that is
/// acknowledged after `d` later segments were SACKed was reordered by `d`,
/// not lost (RFC 4653 spirit; Linux `tcp_check_sack_reordering`). It never
/// exceeds half the segments in flight (but at least [`DUP_THRESH`]), so a
/// short flight still recovers by fast retransmit.
pub const MAX_DUP_THRESH: u32 = 256;

/// Connection states (thesis fig. 5.2.1: TCP's diagram without TIME_WAIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Closed,
    Listen,
    SynSent,
    SynRcvd,
    Established,
    FinWait1,
    FinWait2,
    Closing,
    CloseWait,
    LastAck,
}

impl State {
    /// True in the states where both sequence spaces are synchronized.
    pub fn is_synchronized(self) -> bool {
        !matches!(self, State::Closed | State::Listen | State::SynSent)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN_SENT",
            State::SynRcvd => "SYN_RCVD",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN_WAIT_1",
            State::FinWait2 => "FIN_WAIT_2",
            State::Closing => "CLOSING",
            State::CloseWait => "CLOSE_WAIT",
            State::LastAck => "LAST_ACK",
        };
        f.write_str(s)
    }
}

/// Why a connection operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Nothing to read yet, or no buffer space to write into.
    #[error("operation would block")]
    WouldBlock,
    /// The peer reset the connection (RST with the exact sequence number).
    #[error("connection reset by peer")]
    Reset,
    /// The peer answered the SYN with RST: no socket listens on that port.
    #[error("connection refused: no ESP listener on the peer's port")]
    Refused,
    /// A segment or probe was retransmitted `max_retransmissions` times
    /// without acknowledgement: the peer is unreachable or dead.
    #[error(
        "connection timed out: no acknowledgement after the maximum number of retransmissions"
    )]
    TimedOut,
    /// This end aborted the connection (RST sent).
    #[error("connection aborted locally")]
    Aborted,
    /// Write after `close()` (shutdown of the write side).
    #[error("write after shutdown of the sending side")]
    Closed,
    /// The connection is not (yet or any more) connected.
    #[error("not connected")]
    NotConnected,
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        use std::io::ErrorKind as K;
        let kind = match e {
            Error::WouldBlock => K::WouldBlock,
            Error::Reset => K::ConnectionReset,
            Error::Refused => K::ConnectionRefused,
            Error::TimedOut => K::TimedOut,
            Error::Aborted => K::ConnectionAborted,
            Error::Closed => K::BrokenPipe,
            Error::NotConnected => K::NotConnected,
        };
        std::io::Error::new(kind, e)
    }
}

/// Per-connection counters (the thesis's `esp_stats` plus a few more).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Segments handed out by `poll_transmit` (all kinds).
    pub sent: u64,
    /// Of those, retransmissions (timeout, fast retransmit, SYN/FIN resend).
    pub retransmitted: u64,
    /// Segments the link failed to send (reported by the driver).
    pub send_errors: u64,
    /// Segments given to `handle_segment`.
    pub received: u64,
    /// Data segments received ahead of a gap (kept for reassembly).
    pub out_of_sequence: u64,
    /// Segments discarded: outside the window, wrong ports, invalid.
    pub dropped: u64,
    /// Data segments received twice.
    pub duplicates: u64,
    /// Payload bytes accepted by `send`.
    pub bytes_sent: u64,
    /// Payload bytes delivered in order to the receive buffer.
    pub bytes_received: u64,
    /// Fast retransmit episodes.
    pub fast_retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// Zero-window and keepalive probes sent.
    pub probes: u64,
    /// Loss episodes undone because a DSACK showed the retransmission was
    /// unnecessary (spurious timeout or reordering).
    pub spurious: u64,
    /// Smoothed RTT in us (0 before the first sample).
    pub srtt_us: u64,
    /// Current RTO in us.
    pub rto_us: u64,
    /// Congestion window in segments.
    pub cwnd: u32,
    /// Duplicate-ACK threshold in force, segments: [`DUP_THRESH`] raised to
    /// the reordering degree observed (at most [`MAX_DUP_THRESH`]).
    pub reordering: u32,
    /// Peer's last advertised window in segments.
    pub peer_window: u32,
}

/// Keyed initial-sequence-number generator (RFC 6528):
/// `ISN = M + F(local mac, local port, remote mac, remote port, key)` with F =
/// SipHash-2-4 and M a clock term in 4 us ticks supplied by the caller.
#[derive(Clone)]
pub struct IsnGenerator {
    key: [u8; 16],
}

impl fmt::Debug for IsnGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IsnGenerator { key: <secret> }")
    }
}

impl IsnGenerator {
    /// A generator with a fixed 128-bit key (tests, deterministic runs).
    pub fn with_key(key: [u8; 16]) -> Self {
        Self { key }
    }
    /// A generator with a random key from the operating system's RNG.
    pub fn random() -> Self {
        Self {
            key: rand::random(),
        }
    }
    /// The ISN for a 4-tuple; `clock_us` is a microsecond clock (e.g. time
    /// since the Unix epoch), divided into 4 us ticks as RFC 6528 suggests.
    pub fn isn(&self, local: (MacAddr, u16), remote: (MacAddr, u16), clock_us: u64) -> Seq {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(&local.0 .0);
        h.write(&local.1.to_be_bytes());
        h.write(&remote.0 .0);
        h.write(&remote.1.to_be_bytes());
        let f = h.finish() as u32;
        Seq(f.wrapping_add((clock_us / 4) as u32))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Syn,
    Data,
    Fin,
}

/// A segment sent and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
struct Sent {
    kind: Kind,
    /// Absolute stream offset of the first payload byte.
    off: u64,
    len: u16,
    last_sent: Instant,
    tx_count: u32,
    sacked: bool,
    /// Queued for retransmission and not yet resent.
    lost: bool,
    /// Loss episode in which it was last marked lost.
    episode: u32,
}

/// An out-of-order slot of the reassembly queue.
#[derive(Debug)]
enum Slot {
    Empty,
    Data(Vec<u8>),
    Fin,
}

/// Congestion state saved when a loss episode starts.
#[derive(Debug, Clone, Copy)]
struct Undo {
    cwnd: u32,
    ssthresh: u32,
    /// Sequence range outstanding when the episode started.
    from: Seq,
    to: Seq,
    /// The episode began with a retransmission timeout (its DSACK shows a
    /// slow ACK path, not reordering).
    by_timeout: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    Rto = 0,
    DelayedAck = 1,
    Probe = 2,
}

/// The connection's timers in one small table (quinn's `TimerTable`).
#[derive(Debug, Default, Clone, Copy)]
struct TimerTable {
    at: [Option<Instant>; 3],
}

impl TimerTable {
    fn set(&mut self, t: Timer, at: Instant) {
        self.at[t as usize] = Some(at);
    }
    fn get(&self, t: Timer) -> Option<Instant> {
        self.at[t as usize]
    }
    fn stop(&mut self, t: Timer) {
        self.at[t as usize] = None;
    }
    fn is_expired(&self, t: Timer, now: Instant) -> bool {
        self.at[t as usize].is_some_and(|at| at <= now)
    }
    fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }
}

/// A frame from [`Connection::poll_transmit_gather`]: `header_len` bytes of
/// Ethernet and ESP header in the caller's buffer, followed on the wire by
/// `payload_len` bytes of the send buffer from stream offset `payload_off`
/// ([`Connection::payload`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GatherFrame {
    /// Bytes of header written to the buffer (Ethernet + ESP + options).
    pub header_len: usize,
    /// Stream offset of the first payload byte.
    pub payload_off: u64,
    /// Payload bytes (0 for control segments).
    pub payload_len: usize,
}

/// One ESP connection (sans-IO).
pub struct Connection {
    cfg: EspConfig,
    local_mac: MacAddr,
    remote_mac: MacAddr,
    local_port: u16,
    remote_port: u16,
    /// Largest payload per segment in bytes (link MTU - 20).
    mss: usize,
    state: State,
    error: Option<Error>,
    timers: TimerTable,
    stats: Stats,

    // ---- send side
    iss: Seq,
    snd_una: Seq,
    snd_nxt: Seq,
    /// Right edge of the peer's window: may send seq < snd_right.
    snd_right: Seq,
    snd_wnd: u32,
    snd_wl1: Seq,
    snd_wl2: Seq,
    /// Bytes of the segments snd_una.. followed by unsent bytes.
    send_buf: VecDeque<u8>,
    /// Stream offset of `send_buf[0]`.
    send_base: u64,
    /// Stream offset of the first byte not yet in a segment.
    send_next_off: u64,
    rtx: VecDeque<Sent>,
    to_resend: VecDeque<Seq>,
    /// Set by `poll_transmit_gather`: data segments are emitted as a header
    /// only, their payload left in `send_buf` for the caller to gather.
    gather: bool,
    /// The payload (stream offset, bytes) of the last gathered segment.
    gathered: Option<(u64, usize)>,
    sacked_count: u32,
    lost_count: u32,
    episode: u32,
    fin_requested: bool,
    fin_sent: bool,
    cwnd: u32,
    cwnd_acc: u32,
    ssthresh: u32,
    recovery: Option<Seq>,
    /// The recovery episode was started by a timeout (cwnd grows in slow start).
    recovery_rto: bool,
    /// Congestion state before the current loss episode, restored when a
    /// DSACK shows a retransmission of the episode was spurious (RFC 2883,
    /// RFC 3708 spirit): a stalled receiver, not a loss.
    undo: Option<Undo>,
    /// Segments retransmitted in the current loss episode and not yet
    /// reported back by a DSACK: the episode was spurious only when every
    /// one of them was (RFC 3708 sec. 3; Linux `undo_retrans`). A DSACK for
    /// any other segment reports a duplicate made by the network.
    undo_retrans: Vec<Seq>,
    dup_acks: u32,
    /// Adaptive duplicate-ACK threshold, segments (see [`MAX_DUP_THRESH`]).
    dup_thresh: u32,
    /// One past the highest SACKed segment (meaningful above `snd_una`).
    high_sacked: Seq,
    rtt: RttEstimator,
    probe_now: bool,
    probes_unanswered: u32,
    persist_backoff: u32,

    // ---- receive side
    irs: Seq,
    rcv_nxt: Seq,
    recv_buf: VecDeque<u8>,
    /// ooo[i] holds segment rcv_nxt + 1 + i.
    ooo: VecDeque<Slot>,
    ooo_count: usize,
    pool: Vec<Vec<u8>>,
    fin_received: bool,
    established_once: bool,
    /// Right edge last advertised (rcv_nxt + window).
    rcv_adv: Seq,
    ack_pending: u32,
    ack_now: bool,
    rst_pending: Option<EspRepr>,
    /// A duplicate segment to report as DSACK in the next ACK.
    dsack: Option<Seq>,
    challenge_start: Option<Instant>,
    challenge_count: u32,
    /// When an old zero-length segment (probe or reordered ACK) was last
    /// answered: at most one such ACK per `min_rto / 2` (RFC 5961 sec. 7
    /// throttling; Linux `tcp_invalid_ratelimit`).
    old_ack_answered: Option<Instant>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("local", &(self.local_mac, self.local_port))
            .field("remote", &(self.remote_mac, self.remote_port))
            .field("state", &self.state)
            .field("snd_una", &self.snd_una)
            .field("snd_nxt", &self.snd_nxt)
            .field("rcv_nxt", &self.rcv_nxt)
            .field("in_flight", &self.rtx.len())
            .field(
                "unsent",
                &(self.send_base + self.send_buf.len() as u64 - self.send_next_off),
            )
            .field("to_resend", &self.to_resend.len())
            .field("sacked", &self.sacked_count)
            .field("lost", &self.lost_count)
            .field("snd_right", &self.snd_right)
            .field("cwnd", &self.cwnd)
            .field("recovery", &self.recovery)
            .field("unread", &self.recv_buf.len())
            .field("ooo", &self.ooo_count)
            .field("ack_pending", &self.ack_pending)
            .field("timers", &self.timers.at)
            .field("error", &self.error)
            .finish()
    }
}

impl Connection {
    fn new(
        cfg: &EspConfig,
        mtu: usize,
        local: (MacAddr, u16),
        remote: (MacAddr, u16),
        iss: Seq,
    ) -> Self {
        let mss = mtu
            .saturating_sub(ESP_HEADER_LEN)
            .clamp(1, u16::MAX as usize);
        Self {
            rtt: RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
            cwnd: cfg.initial_cwnd.max(1),
            cfg: cfg.clone(),
            local_mac: local.0,
            local_port: local.1,
            remote_mac: remote.0,
            remote_port: remote.1,
            mss,
            state: State::Closed,
            error: None,
            timers: TimerTable::default(),
            stats: Stats::default(),
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_right: iss.add(1),
            snd_wnd: 1,
            snd_wl1: Seq(0),
            snd_wl2: iss,
            send_buf: VecDeque::new(),
            send_base: 0,
            send_next_off: 0,
            rtx: VecDeque::new(),
            to_resend: VecDeque::new(),
            gather: false,
            gathered: None,
            sacked_count: 0,
            lost_count: 0,
            episode: 0,
            fin_requested: false,
            fin_sent: false,
            cwnd_acc: 0,
            ssthresh: u32::MAX,
            recovery: None,
            recovery_rto: false,
            undo: None,
            undo_retrans: Vec::new(),
            dup_acks: 0,
            dup_thresh: DUP_THRESH,
            high_sacked: iss,
            persist_backoff: 0,
            probe_now: false,
            probes_unanswered: 0,
            irs: Seq(0),
            rcv_nxt: Seq(0),
            recv_buf: VecDeque::new(),
            ooo: VecDeque::new(),
            ooo_count: 0,
            pool: Vec::new(),
            fin_received: false,
            established_once: false,
            rcv_adv: Seq(0),
            ack_pending: 0,
            ack_now: false,
            rst_pending: None,
            dsack: None,
            challenge_start: None,
            challenge_count: 0,
            old_ack_answered: None,
        }
    }

    /// Opens a connection actively: state SYN_SENT, the SYN is ready for
    /// `poll_transmit`. `mtu` is the link MTU in bytes (MSS = MTU - 20);
    /// `iss` comes from [`IsnGenerator::isn`].
    pub fn connect(
        cfg: &EspConfig,
        mtu: usize,
        local: (MacAddr, u16),
        remote: (MacAddr, u16),
        iss: Seq,
        now: Instant,
    ) -> Self {
        let mut c = Self::new(cfg, mtu, local, remote, iss);
        c.state = State::SynSent;
        c.queue_control(Kind::Syn, now);
        c
    }

    /// Opens a connection passively in answer to `syn` (a SYN without ACK
    /// addressed to `local`): state SYN_RCVD, the SYN-ACK is ready for
    /// `poll_transmit`. Returns `None` if `syn` is not such a segment.
    pub fn accept(
        cfg: &EspConfig,
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
        c.state = State::SynRcvd;
        c.irs = syn.seq;
        c.rcv_nxt = syn.seq.add(1);
        c.rcv_adv = c.rcv_nxt;
        c.snd_wl1 = syn.seq;
        c.snd_right = iss.add(1);
        c.snd_wnd = u32::from(syn.window);
        c.queue_control(Kind::Syn, now);
        Some(c)
    }

    fn queue_control(&mut self, kind: Kind, now: Instant) {
        let seq = self.snd_nxt;
        self.rtx.push_back(Sent {
            kind,
            off: self.send_next_off,
            len: 0,
            last_sent: now,
            tx_count: 0,
            sacked: false,
            lost: true,
            episode: self.episode,
        });
        self.lost_count += 1;
        self.to_resend.push_back(seq);
        self.snd_nxt = seq.add(1);
    }

    // ------------------------------------------------------------ accessors

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }
    /// The error that ended the connection, if any.
    pub fn error(&self) -> Option<Error> {
        self.error
    }
    /// Counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.srtt_us = self.rtt.srtt().map_or(0, |d| d.as_micros() as u64);
        s.rto_us = self.rtt.rto().as_micros() as u64;
        s.cwnd = self.cwnd;
        s.peer_window = self.snd_wnd;
        s.reordering = self.dup_thresh;
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
    pub fn ack_pending_now(&mut self) -> bool {
        if self.ack_pending > 0 && self.state.is_synchronized() {
            self.ack_now = true;
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
        (self.local_mac, self.local_port)
    }
    /// Remote (MAC, port).
    pub fn remote(&self) -> (MacAddr, u16) {
        (self.remote_mac, self.remote_port)
    }
    /// Largest payload per segment, in bytes.
    pub fn mss(&self) -> usize {
        self.mss
    }
    /// The RTT estimator (SRTT, RTTVAR, RTO).
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }
    /// Next sequence number to send.
    pub fn snd_nxt(&self) -> Seq {
        self.snd_nxt
    }
    /// Oldest unacknowledged sequence number.
    pub fn snd_una(&self) -> Seq {
        self.snd_una
    }
    /// Next sequence number expected from the peer.
    pub fn rcv_nxt(&self) -> Seq {
        self.rcv_nxt
    }
    /// Initial send sequence number.
    pub fn iss(&self) -> Seq {
        self.iss
    }
    /// Congestion window in segments.
    pub fn cwnd(&self) -> u32 {
        self.cwnd
    }
    /// True once the handshake completed (ESTABLISHED or a later state,
    /// including CLOSED after a graceful close).
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
        self.recv_buf.len()
    }
    /// Free bytes in the send buffer.
    pub fn send_capacity(&self) -> usize {
        self.cfg.send_buffer.saturating_sub(self.send_buf.len())
    }
    /// Bytes accepted by `send` but not yet acknowledged.
    pub fn send_pending(&self) -> usize {
        self.send_buf.len()
    }
    /// True when `recv` would not return `WouldBlock` (data, EOF or error).
    pub fn is_readable(&self) -> bool {
        !self.recv_buf.is_empty()
            || self.fin_received
            || self.error.is_some()
            || self.state == State::Closed
    }
    /// True when `send` would not return `WouldBlock`.
    pub fn is_writable(&self) -> bool {
        self.error.is_some()
            || self.fin_requested
            || (self.send_capacity() > 0
                && matches!(
                    self.state,
                    State::Established | State::CloseWait | State::SynSent | State::SynRcvd
                ))
            || self.state == State::Closed
    }
    /// True when the peer sent FIN and all its data was read.
    pub fn is_eof(&self) -> bool {
        self.fin_received && self.recv_buf.is_empty()
    }
    /// True when the connection has nothing left to do: CLOSED with no
    /// frame waiting to be sent.
    pub fn is_finished(&self) -> bool {
        self.state == State::Closed && self.rst_pending.is_none() && !self.ack_now
    }

    // ----------------------------------------------------------- user calls

    /// Copies bytes from `data` into the send buffer; returns how many (up to
    /// the free space of `send_buffer` bytes). Segmentation into MSS-sized
    /// segments happens in `poll_transmit`.
    ///
    /// Errors: [`Error::WouldBlock`] when the buffer is full; [`Error::Closed`]
    /// after `close()`; the connection's error once it is dead;
    /// [`Error::NotConnected`] when CLOSED.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.fin_requested {
            return Err(Error::Closed);
        }
        match self.state {
            State::SynSent | State::SynRcvd | State::Established | State::CloseWait => {}
            State::Closed | State::Listen => return Err(Error::NotConnected),
            _ => return Err(Error::Closed),
        }
        if data.is_empty() {
            return Ok(0);
        }
        let n = data.len().min(self.send_capacity());
        if n == 0 {
            return Err(Error::WouldBlock);
        }
        self.send_buf.extend(&data[..n]);
        self.stats.bytes_sent += n as u64;
        Ok(n)
    }

    /// Copies received in-order bytes into `buf`; returns how many. `Ok(0)`
    /// means end of stream (the peer's FIN) or an empty `buf`.
    ///
    /// Errors: [`Error::WouldBlock`] when no data is ready; after the buffer
    /// is drained, the connection's error ([`Error::Reset`],
    /// [`Error::TimedOut`], ...) or [`Error::NotConnected`].
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        if buf.is_empty() {
            return Ok(0);
        }
        if !self.recv_buf.is_empty() {
            let n = buf.len().min(self.recv_buf.len());
            let (a, b) = self.recv_buf.as_slices();
            let na = n.min(a.len());
            buf[..na].copy_from_slice(&a[..na]);
            if n > na {
                buf[na..n].copy_from_slice(&b[..n - na]);
            }
            self.recv_buf.drain(..n);
            self.maybe_window_update();
            return Ok(n);
        }
        if self.fin_received {
            return Ok(0);
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        match self.state {
            State::Closed | State::Listen => Err(Error::NotConnected),
            _ => Err(Error::WouldBlock),
        }
    }

    /// Shuts down the sending side: a FIN follows the buffered data
    /// (ESTABLISHED -> FIN_WAIT_1, CLOSE_WAIT -> LAST_ACK). Before the
    /// handshake completed the FIN waits for it (RFC 793 CLOSE call in
    /// SYN-SENT with queued data). Reading stays possible until the peer's
    /// FIN. Use [`Connection::abort`] to give up at once.
    pub fn close(&mut self) {
        if self.fin_requested {
            return;
        }
        match self.state {
            State::SynSent | State::SynRcvd => self.fin_requested = true,
            State::Established => {
                self.fin_requested = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.fin_requested = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// Aborts: sends RST (if synchronized), drops all buffered data, CLOSED,
    /// and later calls return [`Error::Aborted`].
    pub fn abort(&mut self) {
        self.queue_reset();
        if self.error.is_none() {
            self.error = Some(Error::Aborted);
        }
        self.enter_closed();
        self.send_buf.clear();
        self.recv_buf.clear();
    }

    fn enter_closed(&mut self) {
        self.state = State::Closed;
        self.timers = TimerTable::default();
        self.rtx.clear();
        self.to_resend.clear();
        self.probe_now = false;
    }

    fn die(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
        self.enter_closed();
    }

    // ------------------------------------------------------------- receive

    /// Processes one segment from the peer. `repr` and `payload` come from
    /// [`crate::wire::EspRepr::parse`]; the caller has matched the peer MAC.
    /// Segments for other ports or not acceptable in the current state are
    /// counted as dropped (and may draw an ACK or RST, per RFC 793/5961).
    pub fn handle_segment(&mut self, now: Instant, repr: &EspRepr, payload: &[u8]) {
        self.stats.received += 1;
        if repr.dst_port != self.local_port || repr.src_port != self.remote_port {
            self.stats.dropped += 1;
            return;
        }
        match self.state {
            State::Closed | State::Listen => self.on_closed(repr),
            State::SynSent => self.on_syn_sent(now, repr),
            _ => self.on_synchronized(now, repr, payload),
        }
        self.update_probe_timer(now);
    }

    fn on_closed(&mut self, repr: &EspRepr) {
        self.stats.dropped += 1;
        // After a graceful close, answer a retransmitted FIN with its ACK
        // (our last ACK was lost); anything else draws RST.
        if self.error.is_none()
            && self.fin_received
            && repr.flags.fin()
            && repr.seq.add(1) == self.rcv_nxt
        {
            self.ack_now = true;
            return;
        }
        if let Some(r) = repr.reset_reply() {
            self.rst_pending = Some(r);
        }
    }

    fn on_syn_sent(&mut self, now: Instant, repr: &EspRepr) {
        let f = repr.flags;
        if f.ack() && repr.ack != self.iss.add(1) {
            // RFC 793 SYN-SENT: unacceptable ACK draws RST seq = SEG.ACK.
            self.stats.dropped += 1;
            if !f.rst() {
                self.rst_pending = repr.reset_reply();
            }
            return;
        }
        if f.rst() {
            if f.ack() {
                self.die(Error::Refused);
            } else {
                self.stats.dropped += 1;
            }
            return;
        }
        if !f.syn() || !f.ack() {
            // Simultaneous open (SYN without ACK) is not supported: ESP
            // has no cross-connects (thesis ch. 5.2.2).
            self.stats.dropped += 1;
            return;
        }
        self.irs = repr.seq;
        self.rcv_nxt = repr.seq.add(1);
        self.rcv_adv = self.rcv_nxt;
        self.snd_wl1 = repr.seq;
        self.snd_wl2 = repr.ack;
        self.snd_wnd = u32::from(repr.window);
        self.snd_right = repr.ack.add(self.snd_wnd);
        self.on_new_ack(now, repr.ack);
        self.state = State::Established;
        self.established_once = true;
        self.ack_now = true;
        self.probes_unanswered = 0;
        if self.fin_requested {
            self.state = State::FinWait1;
        }
    }

    /// Receive window in segments that can be advertised now:
    /// floor((recv_buffer - unread bytes) / MSS), at least what was promised.
    fn rcv_window(&self) -> u32 {
        let free = self.cfg.recv_buffer.saturating_sub(self.recv_buf.len());
        let w = ((free / self.mss) as u32).min(MAX_WINDOW);
        let promised = self.rcv_adv.diff(self.rcv_nxt).max(0) as u32;
        w.max(promised)
    }

    fn challenge_ack(&mut self, now: Instant) {
        match self.challenge_start {
            Some(t) if now.saturating_duration_since(t) < Duration::from_secs(1) => {}
            _ => {
                self.challenge_start = Some(now);
                self.challenge_count = 0;
            }
        }
        if self.challenge_count < self.cfg.challenge_ack_limit {
            self.challenge_count += 1;
            self.stats.challenge_acks += 1;
            self.ack_now = true;
        }
    }

    fn on_synchronized(&mut self, now: Instant, repr: &EspRepr, payload: &[u8]) {
        let f = repr.flags;
        let wnd = self.rcv_window().max(1);
        let in_window = repr.seq.in_window(self.rcv_nxt, wnd);

        // RFC 5961 sec. 3.2: RST with the exact sequence number resets;
        // in-window RST draws a challenge ACK; anything else is dropped.
        if f.rst() {
            if repr.seq == self.rcv_nxt {
                match self.state {
                    State::LastAck | State::Closing => self.enter_closed(),
                    State::SynRcvd => self.die(Error::Refused),
                    _ => self.die(Error::Reset),
                }
            } else {
                self.stats.dropped += 1;
                if in_window {
                    self.challenge_ack(now);
                }
            }
            return;
        }

        if f.syn() {
            if self.state == State::SynRcvd && !f.ack() && repr.seq == self.irs {
                // The peer retransmitted its SYN: our SYN-ACK was lost.
                self.resend_syn();
                return;
            }
            // RFC 5961 sec. 4.2: any SYN in a synchronized state draws a
            // challenge ACK (this also re-acknowledges a retransmitted
            // SYN-ACK whose final ACK was lost).
            self.stats.dropped += 1;
            self.challenge_ack(now);
            return;
        }
        if !f.ack() {
            self.stats.dropped += 1;
            return;
        }

        // Sequence acceptability (RFC 793 sec. 3.3, in segments).
        let seg_len = repr.seq_len();
        if seg_len == 0 {
            if repr.seq.diff(self.rcv_nxt) < 0 {
                // Old sequence number: a zero-window or keepalive probe, or
                // a reordered ACK. Answer with an ACK (thesis 5.2.10 step 1),
                // throttled: a peer whose SND.NXT is behind our RCV.NXT
                // (after a forged FIN) sends only such segments, and
                // answering each would ping-pong ACKs with its answers to
                // ours (RFC 5961 sec. 7).
                self.answer_old_segment(now);
                self.touch_peer();
                return;
            }
        } else if !(in_window || f.fin() && repr.seq == self.rcv_nxt) {
            if repr.seq.diff(self.rcv_nxt) < 0 {
                self.stats.duplicates += 1;
                self.dsack = Some(repr.seq);
            } else {
                self.stats.dropped += 1;
            }
            self.ack_now = true;
            return;
        }

        // ACK field checks (RFC 5961 sec. 5.2). An ACK of data not yet sent
        // draws an ACK (RFC 793), rate limited as a challenge ACK (RFC 5961
        // sec. 5.2 and 7): two ends that disagree about the sequence numbers
        // would otherwise exchange ACKs forever.
        if repr.ack.diff(self.snd_nxt) > 0 {
            self.stats.dropped += 1;
            self.challenge_ack(now);
            return;
        }
        if repr.ack.diff(self.snd_una) < -(MAX_WINDOW as i32) {
            self.stats.dropped += 1;
            self.challenge_ack(now);
            return;
        }
        if self.state == State::SynRcvd {
            if repr.ack != self.iss.add(1) {
                self.stats.dropped += 1;
                self.rst_pending = repr.reset_reply();
                return;
            }
            self.state = if self.fin_requested {
                State::FinWait1
            } else {
                State::Established
            };
            self.established_once = true;
        }
        self.touch_peer();
        self.process_ack(now, repr);
        if self.state == State::Closed {
            return;
        }

        if self.fin_received {
            // RFC 9293 sec. 3.10.7.4 ("seventh, process the segment text")
            // and the FIN step: in CLOSE-WAIT, CLOSING, LAST-ACK the peer's
            // FIN was received, so text and another FIN at or after it are
            // ignored (nothing beyond the end of the stream is delivered).
            if seg_len > 0 {
                self.stats.dropped += 1;
            }
            return;
        }
        if !payload.is_empty() {
            self.process_data(now, repr.seq, payload);
        } else if f.fin() {
            self.process_fin_at(repr.seq);
        }
    }

    /// Answers an old zero-length segment with an ACK, at most once per
    /// `min_rto / 2` (so every zero-window or keepalive probe, sent at least
    /// one RTO apart, is still answered).
    fn answer_old_segment(&mut self, now: Instant) {
        let interval = (self.cfg.min_rto / 2).max(Duration::from_micros(1));
        if let Some(t) = self.old_ack_answered {
            if now.saturating_duration_since(t) < interval {
                return;
            }
        }
        self.old_ack_answered = Some(now);
        self.ack_now = true;
    }

    fn touch_peer(&mut self) {
        self.probes_unanswered = 0;
        if self.probe_keepalive_armed() {
            self.timers.stop(Timer::Probe);
        }
    }

    fn probe_keepalive_armed(&self) -> bool {
        self.timers.get(Timer::Probe).is_some() && !self.persist_needed()
    }

    fn resend_syn(&mut self) {
        if let Some(s) = self.rtx.front_mut() {
            if s.kind == Kind::Syn && !s.lost {
                s.lost = true;
                self.lost_count += 1;
                self.to_resend.push_back(self.snd_una);
            }
        }
    }

    fn process_ack(&mut self, now: Instant, repr: &EspRepr) {
        let ack = repr.ack;
        let advanced = ack.diff(self.snd_una) > 0;
        // Window update (RFC 793: SND.WL1 < SEG.SEQ or (= and SND.WL2 =< SEG.ACK)).
        let mut window_changed = false;
        if self.snd_wl1.diff(repr.seq) < 0
            || (self.snd_wl1 == repr.seq && self.snd_wl2.diff(ack) <= 0)
        {
            let w = u32::from(repr.window);
            window_changed = w != self.snd_wnd || ack != self.snd_wl2;
            let right = ack.add(w);
            // The usable edge never moves left of what was granted.
            if right.diff(self.snd_right) > 0 {
                self.snd_right = right;
                if self.snd_nxt.diff(self.snd_right) < 0 {
                    self.persist_backoff = 0;
                }
            }
            self.snd_wnd = w;
            self.snd_wl1 = repr.seq;
            self.snd_wl2 = ack;
        }
        self.check_dsack(repr);
        let high_before = self.high_sacked;
        let new_sacks = self.apply_sack(&repr.sack, ack);
        if advanced {
            self.check_reordering(high_before);
            self.on_new_ack(now, ack);
        } else if ack == self.snd_una
            && repr.seq_len() == 0
            && !self.rtx.is_empty()
            && (!window_changed || new_sacks > 0)
        {
            self.dup_acks += 1;
            if self.dup_acks == self.loss_thresh() {
                self.enter_recovery(true);
            }
        }
        if new_sacks > 0 {
            self.mark_lost_by_sack();
        }
    }

    /// Marks SACKed segments; returns how many were newly SACKed.
    fn apply_sack(&mut self, sack: &SackBlocks, ack: Seq) -> u32 {
        let mut n = 0;
        let mut high = self.high_sacked;
        if high.diff(self.snd_una) < 0 {
            high = self.snd_una;
        }
        for &(s, e) in sack.as_slice() {
            let start = s.diff(self.snd_una).max(0) as usize;
            let end = (e.diff(self.snd_una).max(0) as usize).min(self.rtx.len());
            for i in start..end {
                let seg = &mut self.rtx[i];
                if !seg.sacked {
                    seg.sacked = true;
                    if seg.lost {
                        seg.lost = false;
                        self.lost_count -= 1;
                    }
                    n += 1;
                }
            }
            // A DSACK block (at or below the cumulative ACK) says nothing
            // about segments above it.
            if end > start && e.diff(ack) > 0 && self.snd_una.add(end as u32).diff(high) > 0 {
                high = self.snd_una.add(end as u32);
            }
        }
        self.high_sacked = high;
        self.sacked_count += n;
        n
    }

    /// RFC 6675-style loss detection: an unSACKed segment with at least
    /// DupThresh SACKed segments above it is lost (once per episode).
    fn mark_lost_by_sack(&mut self) {
        let thresh = self.loss_thresh();
        if self.sacked_count < thresh {
            return;
        }
        if self.recovery.is_none() {
            self.enter_recovery(false);
        }
        // Forward scan; `sacked_count - seen` = SACKed segments above index i.
        let mut seen = 0u32;
        for i in 0..self.rtx.len() {
            let s = self.rtx[i];
            if s.sacked {
                seen += 1;
                continue;
            }
            if self.sacked_count - seen < thresh {
                break;
            }
            if !s.lost && s.episode != self.episode {
                self.mark_lost(i);
            }
        }
    }

    fn mark_lost(&mut self, i: usize) {
        let seq = self.snd_una.add(i as u32);
        let ep = self.episode;
        let s = &mut self.rtx[i];
        if s.sacked || s.lost {
            return;
        }
        s.lost = true;
        s.episode = ep;
        self.lost_count += 1;
        self.to_resend.push_back(seq);
    }

    fn save_undo(&mut self, by_timeout: bool) {
        self.undo_retrans.clear();
        self.undo = Some(Undo {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            from: self.snd_una,
            to: self.snd_nxt,
            by_timeout,
        });
    }

    /// Segments SACKed above an unSACKed one before it counts as lost: the
    /// adaptive threshold, bounded by half the flight (see [`MAX_DUP_THRESH`]).
    fn loss_thresh(&self) -> u32 {
        self.dup_thresh
            .min((self.rtx.len() as u32 / 2).max(DUP_THRESH))
    }

    /// Called when the cumulative ACK moves past the head segment, with
    /// `high_sacked` as it was before this ACK: if the head was sent once
    /// and never SACKed while earlier ACKs had already SACKed later segments
    /// up to `high_before`, it arrived late — reordered by that distance,
    /// not lost. (Only the head counts: segments above a retransmitted hole
    /// may simply not have fit in the peer's SACK blocks; and SACKs arriving
    /// with this very ACK only show a new hole above segments whose ACK was
    /// delayed.)
    fn check_reordering(&mut self, high_before: Seq) {
        let Some(head) = self.rtx.front() else {
            return;
        };
        let d = high_before.diff(self.snd_una);
        let in_flight = high_before.diff(self.snd_nxt) <= 0;
        if head.tx_count == 1 && !head.sacked && d > 0 && in_flight {
            self.dup_thresh = self.dup_thresh.max((d as u32).min(MAX_DUP_THRESH));
        }
    }

    /// A DSACK (first SACK block at or below the cumulative ACK) reports a
    /// segment the receiver got twice: if it belongs to the current loss
    /// episode, the episode was spurious: restore cwnd and ssthresh and
    /// cancel the pending retransmissions.
    fn check_dsack(&mut self, repr: &EspRepr) {
        let Some(&(s, e)) = repr.sack.as_slice().first() else {
            return;
        };
        if e.diff(repr.ack) > 0 {
            return; // an ordinary SACK block
        }
        let Some(u) = self.undo else {
            return;
        };
        if s.diff(u.from) < 0 || s.diff(u.to) >= 0 {
            return;
        }
        let Some(i) = self.undo_retrans.iter().position(|&r| r == s) else {
            return; // not a retransmission: the network duplicated it
        };
        self.undo_retrans.swap_remove(i);
        if !self.undo_retrans.is_empty() {
            return; // other retransmissions may still have been needed
        }
        self.undo = None;
        self.stats.spurious += 1;
        if !u.by_timeout {
            // A fast retransmission proved unnecessary: the original arrived
            // after DupThresh later segments (RFC 4653 sec. 3.4 spirit).
            self.dup_thresh = (self.dup_thresh * 2).min(MAX_DUP_THRESH);
        }
        if self.cfg.congestion_control {
            self.cwnd = self.cwnd.max(u.cwnd);
            self.ssthresh = u.ssthresh;
        }
        self.recovery = None;
        self.recovery_rto = false;
        self.to_resend.clear();
        for seg in self.rtx.iter_mut() {
            seg.lost = false;
        }
        self.lost_count = 0;
    }

    fn pipe(&self) -> u32 {
        (self.rtx.len() as u32)
            .saturating_sub(self.sacked_count)
            .saturating_sub(self.lost_count)
    }

    fn enter_recovery(&mut self, retransmit_head: bool) {
        if self.recovery.is_none() {
            self.episode = self.episode.wrapping_add(1);
            self.recovery = Some(self.snd_nxt);
            self.recovery_rto = false;
            self.stats.fast_retransmits += 1;
            self.save_undo(false);
            if self.cfg.congestion_control {
                self.ssthresh = (self.pipe() / 2).max(2);
                self.cwnd = self.ssthresh;
            }
        }
        if retransmit_head && !self.rtx.is_empty() {
            let ep = self.episode;
            if self.rtx[0].episode != ep || self.rtx[0].tx_count <= 1 {
                self.mark_lost(0);
            }
        }
    }

    /// Cumulative acknowledgement of everything before `ack`.
    fn on_new_ack(&mut self, now: Instant, ack: Seq) {
        let n = ack.diff(self.snd_una).max(0) as usize;
        let n = n.min(self.rtx.len());
        // Grow cwnd only while it is used (RFC 7661 spirit): an
        // application-limited sender would otherwise inflate it without
        // evidence and burst later.
        let cwnd_used = self.pipe().saturating_mul(2) >= self.cwnd;
        let mut sample = None;
        let mut ambiguous = false;
        let mut bytes = 0usize;
        let mut fin_acked = false;
        for _ in 0..n {
            let s = self.rtx.pop_front().expect("n <= rtx.len()");
            if s.sacked {
                self.sacked_count -= 1;
            }
            if s.lost {
                self.lost_count -= 1;
            }
            bytes += s.len as usize;
            if s.tx_count == 1 && !s.sacked {
                sample = Some(now.saturating_duration_since(s.last_sent));
            } else {
                ambiguous = true;
            }
            if s.kind == Kind::Fin {
                fin_acked = true;
            }
        }
        self.snd_una = self.snd_una.add(n as u32);
        if bytes > 0 {
            self.send_buf.drain(..bytes);
            self.send_base += bytes as u64;
        }
        // Karn's rule, strictly: no sample when this ACK also covers a
        // retransmitted or SACKed segment (it was held back by a hole, so it
        // measures the recovery, not the path).
        if let (Some(rtt), false) = (sample, ambiguous) {
            self.rtt.on_sample(rtt);
        }
        self.rtt.reset_backoff();
        self.dup_acks = 0;
        // Congestion window growth (RFC 5681), not during fast recovery.
        let mut grow = true;
        match self.recovery {
            Some(rp) if self.snd_una.diff(rp) < 0 => {
                // Partial ACK (RFC 6582): the new head is lost too.
                if !self.rtx.is_empty() && !self.rtx[0].sacked {
                    let ep = self.episode;
                    if self.rtx[0].episode != ep {
                        self.mark_lost(0);
                    }
                }
                grow = self.recovery_rto;
            }
            Some(_) => {
                // Episode over; its undo record stays until the next one,
                // since the DSACK of a spurious timeout arrives after the
                // ACK that ended it.
                self.recovery = None;
                self.recovery_rto = false;
            }
            None => {}
        }
        {
            if grow && cwnd_used && self.cfg.congestion_control {
                {
                    let n = n as u32;
                    if self.cwnd < self.ssthresh {
                        self.cwnd = self.cwnd.saturating_add(n);
                    } else {
                        self.cwnd_acc += n;
                        if self.cwnd_acc >= self.cwnd {
                            self.cwnd_acc -= self.cwnd;
                            self.cwnd += 1;
                        }
                    }
                    self.cwnd = self.cwnd.min(2 * MAX_WINDOW);
                }
            }
        }
        if self.rtx.is_empty() {
            self.timers.stop(Timer::Rto);
        } else {
            self.timers.set(Timer::Rto, now + self.rtt.rto());
        }
        if fin_acked {
            match self.state {
                State::FinWait1 => self.state = State::FinWait2,
                State::Closing | State::LastAck => self.enter_closed(),
                _ => {}
            }
        }
    }

    fn process_data(&mut self, now: Instant, seq: Seq, payload: &[u8]) {
        if seq == self.rcv_nxt {
            if self.recv_buf.len() + payload.len() > self.cfg.recv_buffer {
                // The peer overran the advertised window.
                self.stats.dropped += 1;
                self.ack_now = true;
                return;
            }
            self.recv_buf.extend(payload);
            self.stats.bytes_received += payload.len() as u64;
            self.rcv_nxt = self.rcv_nxt.add(1);
            let filled = self.drain_ooo_front();
            if filled || !self.ooo.is_empty() {
                self.ack_now = true;
            } else {
                self.ack_pending += 1;
                if self.ack_pending >= self.cfg.delayed_ack_segments {
                    self.ack_now = true;
                } else if self.timers.get(Timer::DelayedAck).is_none() {
                    self.timers
                        .set(Timer::DelayedAck, now + self.cfg.delayed_ack_time);
                }
            }
            return;
        }
        // Out of order within the window.
        let idx = (seq.diff(self.rcv_nxt) - 1) as usize;
        self.ack_now = true;
        if let Some(Slot::Fin) = self.ooo.back() {
            if idx >= self.ooo.len() - 1 {
                // At or beyond a queued FIN: after the end of the stream.
                self.stats.dropped += 1;
                return;
            }
        }
        if idx < self.ooo.len() && !matches!(self.ooo[idx], Slot::Empty) {
            self.stats.duplicates += 1;
            self.dsack = Some(seq);
            return;
        }
        if self.ooo_count >= self.cfg.max_out_of_order {
            self.stats.dropped += 1;
            return;
        }
        while self.ooo.len() <= idx {
            self.ooo.push_back(Slot::Empty);
        }
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(payload);
        self.ooo[idx] = Slot::Data(v);
        self.ooo_count += 1;
        self.stats.out_of_sequence += 1;
    }

    /// A FIN at `seq` (at or after `rcv_nxt`). The end of the stream never
    /// moves backwards over data already received: a FIN at or below a
    /// stored out-of-order segment (or a second FIN elsewhere) is dropped.
    /// The last slot of `ooo` is always a stored segment, so the FIN is
    /// valid iff it lies beyond `ooo`.
    fn process_fin_at(&mut self, seq: Seq) {
        // Position 0 is rcv_nxt; ooo[i] holds position i + 1.
        let pos = seq.diff(self.rcv_nxt) as usize;
        self.ack_now = true;
        if matches!(self.ooo.back(), Some(Slot::Fin)) {
            if pos != self.ooo.len() {
                self.stats.dropped += 1; // a FIN is queued elsewhere
            }
            return;
        }
        if pos <= self.ooo.len() && !self.ooo.is_empty() {
            self.stats.dropped += 1;
            return;
        }
        if pos == 0 {
            self.rcv_nxt = self.rcv_nxt.add(1);
            self.on_fin();
            return;
        }
        let idx = pos - 1;
        if idx < MAX_WINDOW as usize {
            while self.ooo.len() <= idx {
                self.ooo.push_back(Slot::Empty);
            }
            self.ooo[idx] = Slot::Fin;
            self.ooo_count += 1;
            self.stats.out_of_sequence += 1;
        }
    }

    fn on_fin(&mut self) {
        self.fin_received = true;
        self.ack_now = true;
        // Everything after the FIN is meaningless.
        for s in self.ooo.drain(..) {
            if let Slot::Data(v) = s {
                self.pool.push(v);
            }
        }
        self.ooo_count = 0;
        match self.state {
            State::Established | State::SynRcvd => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_sent && self.rtx.is_empty() {
                    self.enter_closed();
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_closed(),
            _ => {}
        }
    }

    /// Moves in-order segments from the reassembly queue; returns true if a
    /// gap was filled.
    fn drain_ooo_front(&mut self) -> bool {
        let mut filled = false;
        while !self.ooo.is_empty() {
            match self.ooo.pop_front().expect("not empty") {
                Slot::Empty => {
                    // The slot of the new rcv_nxt is a hole; popping it
                    // re-indexes the queue from rcv_nxt + 1.
                    return filled;
                }
                Slot::Data(v) => {
                    filled = true;
                    self.ooo_count -= 1;
                    self.stats.bytes_received += v.len() as u64;
                    self.recv_buf.extend(&v);
                    self.pool.push(v);
                    self.rcv_nxt = self.rcv_nxt.add(1);
                }
                Slot::Fin => {
                    self.ooo_count -= 1;
                    self.rcv_nxt = self.rcv_nxt.add(1);
                    self.on_fin();
                    return true;
                }
            }
        }
        filled
    }

    fn maybe_window_update(&mut self) {
        if !self.state.is_synchronized() || self.fin_received {
            return;
        }
        let free = self.cfg.recv_buffer.saturating_sub(self.recv_buf.len());
        let w = ((free / self.mss) as u32).min(MAX_WINDOW);
        let edge = self.rcv_nxt.add(w);
        let total = ((self.cfg.recv_buffer / self.mss) as u32).clamp(1, MAX_WINDOW);
        let promised = self.rcv_adv.diff(self.rcv_nxt).max(0) as u32;
        // Send an update when the window opens from (nearly) closed or by a
        // quarter of the buffer (receiver-side silly window avoidance).
        if edge.diff(self.rcv_adv) >= (total / 4).max(1) as i32
            || (promised < 2 && w >= 2.min(total)) && edge.diff(self.rcv_adv) > 0
        {
            self.ack_now = true;
        }
    }

    // ------------------------------------------------------------- timers

    /// The earliest deadline at which `handle_timeout` must be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Fires every timer that expired at `now`: retransmission (RFC 6298 sec.
    /// 5.4-5.6), delayed ACK, zero-window or keepalive probe.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timers.is_expired(Timer::DelayedAck, now) {
            self.timers.stop(Timer::DelayedAck);
            if self.ack_pending > 0 {
                self.ack_now = true;
            }
        }
        if self.timers.is_expired(Timer::Rto, now) {
            self.timers.stop(Timer::Rto);
            self.on_rto(now);
        }
        if self.timers.is_expired(Timer::Probe, now) {
            self.timers.stop(Timer::Probe);
            self.on_probe_timer(now);
        }
        self.update_probe_timer(now);
    }

    fn on_rto(&mut self, _now: Instant) {
        if self.rtx.is_empty() {
            return;
        }
        self.stats.timeouts += 1;
        let head_retx = self.rtx[0].tx_count.saturating_sub(1);
        let limit = if self.rtx[0].kind == Kind::Syn {
            self.cfg.max_syn_retransmissions
        } else {
            self.cfg.max_retransmissions
        };
        if head_retx >= limit {
            self.timed_out();
            return;
        }
        self.rtt.back_off();
        if self.undo.is_none() || !self.recovery_rto {
            self.save_undo(true);
        }
        if self.cfg.congestion_control {
            self.ssthresh = (self.pipe() / 2).max(2);
            self.cwnd = 1;
            self.cwnd_acc = 0;
        }
        self.dup_acks = 0;
        self.episode = self.episode.wrapping_add(1);
        self.recovery = Some(self.snd_nxt);
        self.recovery_rto = true;
        // Everything unSACKed is presumed lost (go-back-N over the holes).
        self.to_resend.clear();
        for i in 0..self.rtx.len() {
            let s = &mut self.rtx[i];
            if s.lost {
                s.lost = false;
                self.lost_count -= 1;
            }
            self.mark_lost(i);
        }
    }

    /// Queues an RST|ACK at `snd_nxt` for the peer, if synchronized.
    fn queue_reset(&mut self) {
        if self.state.is_synchronized() {
            self.rst_pending = Some(EspRepr {
                src_port: self.local_port,
                dst_port: self.remote_port,
                flags: Flags::RST | Flags::ACK,
                seq: self.snd_nxt,
                ack: self.rcv_nxt,
                ..Default::default()
            });
        }
    }

    fn timed_out(&mut self) {
        // Best effort: tell the peer, in case only our direction works.
        self.queue_reset();
        self.die(Error::TimedOut);
    }

    fn persist_needed(&self) -> bool {
        self.rtx.is_empty()
            && self.state.is_synchronized()
            && self.snd_nxt.diff(self.snd_right) >= 0
            && self.send_next_off < self.send_base + self.send_buf.len() as u64
    }

    fn keepalive_needed(&self) -> bool {
        self.cfg.keepalive.is_some()
            && self.rtx.is_empty()
            && matches!(
                self.state,
                State::Established | State::CloseWait | State::FinWait2
            )
    }

    fn on_probe_timer(&mut self, _now: Instant) {
        if !(self.persist_needed() || self.keepalive_needed()) {
            return;
        }
        if self.probes_unanswered >= self.cfg.max_retransmissions {
            self.timed_out();
            return;
        }
        self.probes_unanswered += 1;
        if self.persist_needed() {
            self.persist_backoff += 1;
        }
        self.probe_now = true;
    }

    fn update_probe_timer(&mut self, now: Instant) {
        let persist = self.persist_needed();
        if !(persist || self.keepalive_needed()) {
            self.timers.stop(Timer::Probe);
            if !persist {
                self.probe_now = false;
            }
            return;
        }
        if self.timers.get(Timer::Probe).is_some() || self.probe_now {
            return;
        }
        let base = self.rtt.base_rto();
        let interval = if persist {
            let f = 1u32 << self.persist_backoff.max(self.probes_unanswered).min(20);
            base.saturating_mul(f).min(self.cfg.max_rto)
        } else if self.probes_unanswered == 0 {
            self.cfg.keepalive.unwrap_or(self.cfg.max_rto)
        } else {
            let f = 1u32 << self.probes_unanswered.min(20);
            base.saturating_mul(f).min(self.cfg.max_rto)
        };
        self.timers.set(Timer::Probe, now + interval);
    }

    // ------------------------------------------------------------ transmit

    /// Writes the next frame to send (Ethernet header + ESP header + payload)
    /// into `buf` and returns its length in bytes, or `None` when nothing is
    /// due. Call until `None` after every event. `buf` must hold at least
    /// MTU + 14 bytes.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let out = self.next_frame(now, buf);
        if out.is_some() {
            self.stats.sent += 1;
        }
        self.update_probe_timer(now);
        out
    }

    /// Like [`poll_transmit`](Self::poll_transmit), but a data segment's
    /// payload is not copied: `buf` receives the Ethernet and ESP headers
    /// (checksum over header and payload included) and the returned
    /// [`GatherFrame`] says which bytes of the send buffer follow them on the
    /// wire; read them with [`payload`](Self::payload) and send header and
    /// payload as one frame (sendmmsg with an iovec per piece). The payload
    /// stays valid until the next call that takes `&mut self` other than this
    /// one (new data, an ACK, a timeout).
    pub fn poll_transmit_gather(&mut self, now: Instant, buf: &mut [u8]) -> Option<GatherFrame> {
        self.gather = true;
        self.gathered = None;
        let out = self.poll_transmit(now, buf);
        self.gather = false;
        let (payload_off, payload_len) = self.gathered.take().unwrap_or((self.send_base, 0));
        out.map(|n| GatherFrame {
            header_len: n,
            payload_off,
            payload_len,
        })
    }

    /// `len` bytes of the send buffer from stream offset `off`, as one or
    /// two slices (the buffer is a ring). Panics if the range is not in the
    /// send buffer; [`GatherFrame`]s from
    /// [`poll_transmit_gather`](Self::poll_transmit_gather) always are.
    pub fn payload(&self, off: u64, len: usize) -> (&[u8], &[u8]) {
        if len == 0 {
            return (&[], &[]);
        }
        let from = (off - self.send_base) as usize;
        let (a, b) = self.send_buf.as_slices();
        if from + len <= a.len() {
            (&a[from..from + len], &[])
        } else if from >= a.len() {
            let f = from - a.len();
            (&b[f..f + len], &[])
        } else {
            (&a[from..], &b[..len - (a.len() - from)])
        }
    }

    fn next_frame(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(rst) = self.rst_pending.take() {
            return Some(self.emit(buf, rst, &[]));
        }
        if self.state == State::Closed {
            if self.ack_now {
                return Some(self.emit_ack(buf, false));
            }
            return None;
        }
        // An ACK that carries SACK goes first: data segments carry no options.
        if self.ack_now
            && (self.ooo_count > 0 || self.dsack.is_some())
            && self.state.is_synchronized()
        {
            return Some(self.emit_ack(buf, true));
        }
        // Retransmissions.
        while let Some(&seq) = self.to_resend.front() {
            let idx = seq.diff(self.snd_una);
            if idx < 0 || idx as usize >= self.rtx.len() {
                self.to_resend.pop_front();
                continue;
            }
            let idx = idx as usize;
            let s = self.rtx[idx];
            if !s.lost || s.sacked {
                self.to_resend.pop_front();
                continue;
            }
            let first = idx == 0 || s.tx_count == 0;
            if !first && self.cfg.congestion_control && self.pipe() >= self.cwnd {
                break;
            }
            self.to_resend.pop_front();
            return Some(self.emit_queued(now, idx, buf));
        }
        // New data, then FIN.
        let may_send_data = matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        );
        if may_send_data {
            let unsent =
                (self.send_base + self.send_buf.len() as u64 - self.send_next_off) as usize;
            let window_open = self.snd_nxt.diff(self.snd_right) < 0;
            let cwnd_open = !self.cfg.congestion_control || self.pipe() < self.cwnd;
            if unsent > 0 && window_open && cwnd_open {
                let len = unsent.min(self.mss);
                let off = self.send_next_off;
                self.rtx.push_back(Sent {
                    kind: Kind::Data,
                    off,
                    len: len as u16,
                    last_sent: now,
                    tx_count: 0,
                    sacked: false,
                    lost: false,
                    episode: self.episode.wrapping_sub(1),
                });
                self.send_next_off += len as u64;
                self.snd_nxt = self.snd_nxt.add(1);
                let idx = self.rtx.len() - 1;
                return Some(self.emit_queued(now, idx, buf));
            }
            if unsent == 0 && self.fin_requested && !self.fin_sent {
                self.fin_sent = true;
                self.rtx.push_back(Sent {
                    kind: Kind::Fin,
                    off: self.send_next_off,
                    len: 0,
                    last_sent: now,
                    tx_count: 0,
                    sacked: false,
                    lost: false,
                    episode: self.episode.wrapping_sub(1),
                });
                self.snd_nxt = self.snd_nxt.add(1);
                let idx = self.rtx.len() - 1;
                return Some(self.emit_queued(now, idx, buf));
            }
        }
        if self.state.is_synchronized() && self.state != State::SynRcvd {
            if self.ack_now {
                return Some(self.emit_ack(buf, true));
            }
            if self.probe_now {
                self.probe_now = false;
                self.stats.probes += 1;
                let repr = self.header(Flags::ACK, self.snd_nxt.sub(1));
                return Some(self.emit(buf, repr, &[]));
            }
        }
        None
    }

    fn header(&mut self, flags: Flags, seq: Seq) -> EspRepr {
        let mut r = EspRepr {
            src_port: self.local_port,
            dst_port: self.remote_port,
            flags,
            seq,
            ..Default::default()
        };
        if flags.ack() {
            let w = self.rcv_window();
            r.ack = self.rcv_nxt;
            r.window = w as u16;
            self.rcv_adv = self.rcv_nxt.add(w);
            self.ack_pending = 0;
            self.ack_now = false;
            self.timers.stop(Timer::DelayedAck);
        }
        r
    }

    fn emit_ack(&mut self, buf: &mut [u8], with_sack: bool) -> usize {
        let mut repr = self.header(Flags::ACK, self.snd_nxt);
        let dsack = self.dsack.take();
        if with_sack && (self.ooo_count > 0 || dsack.is_some()) {
            let mut sack = SackBlocks::new();
            if let Some(d) = dsack {
                // RFC 2883: the duplicate first.
                sack.push(d, d.add(1));
            }
            let base = self.rcv_nxt.add(1);
            let mut start: Option<usize> = None;
            for (i, s) in self.ooo.iter().enumerate() {
                let full = matches!(s, Slot::Data(_) | Slot::Fin);
                match (full, start) {
                    (true, None) => start = Some(i),
                    (false, Some(st)) => {
                        if !sack.push(base.add(st as u32), base.add(i as u32)) {
                            break;
                        }
                        start = None;
                    }
                    _ => {}
                }
            }
            if let Some(st) = start {
                sack.push(base.add(st as u32), base.add(self.ooo.len() as u32));
            }
            repr.sack = sack;
        }
        self.emit(buf, repr, &[])
    }

    fn emit_queued(&mut self, now: Instant, idx: usize, buf: &mut [u8]) -> usize {
        let s = self.rtx[idx];
        let seq = self.snd_una.add(idx as u32);
        let flags = match s.kind {
            Kind::Syn if self.state == State::SynSent => Flags::SYN,
            Kind::Syn => Flags::SYN | Flags::ACK,
            Kind::Data => Flags::ACK,
            Kind::Fin => Flags::FIN | Flags::ACK,
        };
        let mut repr = self.header(flags, seq);
        if s.kind == Kind::Syn {
            // The SYN advertises the window too (RFC 7323 would not scale it).
            let w = self.rcv_window_initial();
            repr.window = w as u16;
            if flags.ack() {
                self.rcv_adv = self.rcv_nxt.add(w);
            }
        }
        if s.tx_count > 0 {
            self.stats.retransmitted += 1;
            if let Some(u) = self.undo {
                if seq.diff(u.from) >= 0 && seq.diff(u.to) < 0 && !self.undo_retrans.contains(&seq)
                {
                    self.undo_retrans.push(seq);
                }
            }
        }
        {
            let e = &mut self.rtx[idx];
            e.tx_count += 1;
            e.last_sent = now;
            if e.lost {
                e.lost = false;
                self.lost_count -= 1;
            }
        }
        if self.timers.get(Timer::Rto).is_none() {
            self.timers.set(Timer::Rto, now + self.rtt.rto());
        }
        let hlen = repr.header_len();
        let len = s.len as usize;
        let start = ETH_HEADER_LEN + hlen;
        repr.payload_len = len as u16;
        self.write_eth(buf);
        repr.emit(&mut buf[ETH_HEADER_LEN..]);
        let (a, b) = self.payload(s.off, len);
        if self.gather {
            fill_checksum_gather(&mut buf[ETH_HEADER_LEN..start], &[a, b], self.cfg.checksum);
            self.gathered = Some((s.off, len));
            return start;
        }
        buf[start..start + a.len()].copy_from_slice(a);
        buf[start + a.len()..start + len].copy_from_slice(b);
        fill_checksum(&mut buf[ETH_HEADER_LEN..start + len], self.cfg.checksum);
        start + len
    }

    fn rcv_window_initial(&self) -> u32 {
        ((self.cfg.recv_buffer / self.mss) as u32).clamp(1, MAX_WINDOW)
    }

    fn write_eth(&self, buf: &mut [u8]) {
        EthernetRepr {
            dst: self.remote_mac,
            src: self.local_mac,
            ethertype: self.cfg.ethertype,
        }
        .emit(buf);
    }

    fn emit(&mut self, buf: &mut [u8], repr: EspRepr, payload: &[u8]) -> usize {
        self.write_eth(buf);
        let mut repr = repr;
        repr.payload_len = payload.len() as u16;
        let h = repr.emit(&mut buf[ETH_HEADER_LEN..]);
        let start = ETH_HEADER_LEN + h;
        buf[start..start + payload.len()].copy_from_slice(payload);
        fill_checksum(
            &mut buf[ETH_HEADER_LEN..start + payload.len()],
            self.cfg.checksum,
        );
        start + payload.len()
    }
}

/// Builds the frame that answers `repr` (received from `peer_mac`) when no
/// connection or listener wants it (RFC 793 reset generation, thesis ch.
/// 5.2.9): returns its length in `buf`, or `None` for an incoming RST.
pub fn reset_frame(
    buf: &mut [u8],
    local_mac: MacAddr,
    peer_mac: MacAddr,
    ethertype: u16,
    repr: &EspRepr,
) -> Option<usize> {
    let rst = repr.reset_reply()?;
    if peer_mac.is_group() {
        return None;
    }
    let eth = EthernetRepr {
        dst: peer_mac,
        src: local_mac,
        ethertype,
    };
    crate::wire::emit_esp_frame(buf, &eth, &rst, &[]).ok()
}
