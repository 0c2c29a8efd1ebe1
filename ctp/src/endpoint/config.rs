//! [`Config`]: the tunables of an [`Endpoint`](super::Endpoint). Defaults
//! follow the CTP spec where it gives a value (`Times` of `CCTPNet`); the
//! others are this implementation's limits, each documented with its default
//! and the reason for it (PROTOCOL.md, "Limits").

use std::time::Duration;

use crate::wire::{CTP_HEADER_LEN, DEFAULT_UDP_DATA_SIZE, MAX_MESSAGE_SIZE};

/// Tunables of an [`Endpoint`](super::Endpoint).
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest data part per packet, bytes (spec default 65400 over UDP; over
    /// EDP the link MTU minus the EDP and CTP headers). At most 65510.
    pub data_size: usize,
    /// Resend timeout before the first exchange with a peer (spec `uDefTimeout`,
    /// 100 ms). Zero disables resending and "not confirmed" errors (spec).
    pub default_timeout: Duration,
    /// After an exchange the timeout is the measured time times this (spec
    /// `uMultiplier`, 3): `T = max(multiplier x SRTT, SRTT + 4 x RTTVAR)`
    /// (RFC 6298 2.3 for the second term; both equal 3 x the first sample).
    pub timeout_multiplier: u32,
    /// Adapt the timeout to measured times (spec v1.2 "adaptive timeouts").
    pub adaptive_timeout: bool,
    /// Floor of the adapted timeout (not in the spec: keeps scheduler jitter on
    /// a fast LAN from causing spurious resends; the same role as RFC 6298's
    /// 1 s minimum RTO, scaled to a cluster). Default 1 ms.
    pub min_timeout: Duration,
    /// Ceiling of the adapted timeout, also of its Karn backoff. Default 10 s.
    pub max_timeout: Duration,
    /// Resends before a "not confirmed" error (spec: 8). For a dead peer the
    /// resends are at `(2^k - 1) x T`, k = 1..8, and the error one doubled
    /// period after the last, at `(2^(max_resends + 1) - 1) x T` = 511 x T
    /// after the first send. The error deadline is kept on a live link too,
    /// where more resends may fit before it (`max_resend_period`).
    pub max_resends: u32,
    /// How long a destination may confirm nothing before its messages fail
    /// with "not confirmed" (a user timeout, RFC 5482's idea; not in the
    /// spec, wire-compatible). A packet that reaches the spec's error
    /// deadline while its destination is silent only makes the destination
    /// suspected (one `ErrorType::Unresponsive` delivery); its error comes
    /// once the destination was silent this long, and its resends meanwhile
    /// at most `max_probe_period` apart (`liveness.rs`). `None`: the spec's
    /// rule ("not confirmed" at the deadline, however the destination
    /// behaves). Default 60 s, as ESP's (docs/DECISIONS.md, "Suspect is not
    /// dead").
    pub user_timeout: Option<Duration>,
    /// Longest period between resends of a packet to a suspected
    /// destination: the probe that finds the path again (and teaches a
    /// learning switch where the sender is) once an outage ends. Default
    /// 1 s, ESP's maximum RTO.
    pub max_probe_period: Duration,
    /// A packet is not declared "not confirmed" earlier than this after its
    /// first transmission, however short the measured timeout (not in the
    /// spec: with LAN timeouts of about 1 ms the 8 resends would otherwise
    /// span only half a second, shorter than a loaded host's stalls).
    /// Resending goes on meanwhile. Default 1 s.
    pub min_error_delay: Duration,
    /// Cap of the resend period multiplier (spec `IncResend`: 16384).
    pub max_resend_multiplier: u32,
    /// Live-link cap of a packet's resend period (not in the spec;
    /// wire-compatible). While the destination has confirmed some packet
    /// after this one was first sent, and within the last `live_window`, the
    /// period stops growing at `max(max_resend_period, T)` (`T`: the
    /// destination's current timeout): the link works, so a packet lost
    /// several times in a row is unlucky (independent loss), and doubling
    /// its period further would only stall its message. A destination that
    /// confirms nothing (dead or unreachable) keeps the spec's doubling
    /// schedule exactly. The error deadline is the same either way. Zero
    /// disables the cap. Default 20 ms: 20x the 1 ms timeout floor, so the
    /// cap only acts after the 5th consecutive loss of a packet at that
    /// floor (PROTOCOL.md, "Live-link cap").
    pub max_resend_period: Duration,
    /// How recent a destination's last confirmation must be for the
    /// live-link cap (`max_resend_period`). Bounds what a peer that stalls
    /// or dies with packets in flight costs: capped resends for at most this
    /// long after its last confirmation, then the spec's doubling resumes
    /// from the capped period. Default 100 ms: five capped periods
    /// (PROTOCOL.md records the measurement that ruled out 1 s).
    pub live_window: Duration,
    /// Early resend (not in the spec; wire-compatible; RFC 8985 RACK by send
    /// order): CTP confirms every packet, so when a packet sent after this
    /// one (to the same destination, sent once) is confirmed while this one
    /// is not, this one or its confirmation was lost, or they were
    /// reordered. It is then resent `reorder_window` later instead of at
    /// its timer (no doubling of its period; it still counts as a resend).
    /// Default on.
    pub early_resend: bool,
    /// How long after the evidence an early resend waits for a reordered
    /// confirmation: `max(SRTT / 4, min_reorder_window)` (RFC 8985 6.2: a
    /// quarter of the round trip). Default floor 20 us.
    pub min_reorder_window: Duration,
    /// Tail probe (not in the spec; wire-compatible; RFC 8985 section 7):
    /// the last packet sent to a destination for the first time (nothing new
    /// sent after it), sent once, is resent once if unconfirmed
    /// `max(2 x SRTT, min_probe_timeout)` after it was sent, when that is
    /// earlier than its timer. Early resend cannot see a lost last
    /// packet of a burst (nothing sent after it is confirmed), so without
    /// the probe it waits `T`, at least the 1 ms floor; the probe's
    /// confirmation then also lets early resend find other lost packets.
    pub tail_probe: bool,
    /// Floor of the tail probe timeout. Default 50 us.
    pub min_probe_timeout: Duration,
    /// How long a destination's proven stall is kept after the last
    /// spurious resend that proved one (not in the spec; wire-compatible;
    /// `SendTiming::prove_stall`): meanwhile its timeout is at least twice
    /// the stall and a tail probe waits at least the stall. A stall counts
    /// as at most `max_resend_period` (20 ms; `max_timeout / 2` if that is
    /// zero), so a forged confirmation cannot stretch `T` beyond twice the
    /// live link's resend cap. Default 10 s
    /// (the window of BBR's min_rtt filter). Zero: stalls are counted
    /// (`Stats::spurious_resends`) but change nothing.
    pub stall_window: Duration,
    /// Most packets in flight (sent, unconfirmed) per destination.
    pub window_packets: usize,
    /// Most bytes in flight per destination (at least one packet is always
    /// allowed). Default 256 KiB, a cluster link's bandwidth-delay product
    /// (20 Gbit/s x 100 us). Not in the spec. A larger window only queues
    /// packets at the receiver, whose confirmations then come later than
    /// the adaptive timeout expects: at 1 MiB a 64 KiB-message stream over
    /// EDP at MTU 1500 resent 23-28 % of its packets spuriously, at 256 KiB
    /// 1-4 %; its throughput rose 9 % at MTU 1500 and 15-20 % at MTU 9000
    /// (medians of 3 runs, docs/measurements/session14.txt). That was
    /// before `max_active_large`: with it, the same stream resends 0.03-1.2 %
    /// of its packets at 1 MiB and moves as much at 128 KiB, 256 KiB and
    /// 1 MiB (docs/measurements/session15.txt).
    pub window_bytes: usize,
    /// Most multi-packet messages per destination whose packets are
    /// released at once, taking turns (one packet per turn) with each other
    /// and with every single-packet message; the others wait in send order.
    /// Default 2. Not in the spec (RFC 9218's "non-incremental" streams are
    /// served the same way). A message is delivered only when all its
    /// packets are in, so taking turns among many delays every one of them
    /// and gains nothing. Without the limit (`usize::MAX`, this
    /// implementation before), a 64 KiB-message stream over EDP at MTU 1500
    /// kept about 40 messages in progress at once, the receiver completed
    /// them in bursts, and 2-4 % of the packets were resent spuriously; in
    /// the same alternating runs (docs/measurements/session15.txt) its
    /// throughput was 5862 Mbit/s (median of 3), 6008 with a limit of 2
    /// (0-200 resends per 135 000 packets) and 6170 with 1. A multi-packet
    /// message queued behind this many others waits until one of them is
    /// released in full, so 1 would let one large message hold back a
    /// medium one; single-packet messages never wait.
    pub max_active_large: usize,
    /// Most message bytes kept in the sent-commands storage; `send` refuses
    /// more with [`SendError::Full`](super::SendError::Full) (a single larger
    /// message is accepted when the storage is empty; `CtpSocket::send`
    /// waits for room first). Default 4 MiB, Linux's largest default TCP
    /// send buffer (`tcp_wmem`), four send windows.
    ///
    /// The storage is the sender's backlog. Before `max_active_large`, the
    /// messages waiting for the window were all served round-robin a packet
    /// at a time, so everything stored was in progress at once, and the
    /// receiver reassembled all of it at once. With 256 MiB (the default
    /// before) a stream of 64 KiB messages kept ~3000 messages in progress
    /// and ran at half the speed (`netgauge --local -x stream -s 65536 -c
    /// 3000 -m edp,ctp-edp,ctp`, one run each, MTU 1500: CTP over EDP 2315
    /// -> 4526 Mbit/s, over UDP 3905 -> 6194, sender CPU per message 205 ->
    /// 115 us; 16 MiB gave 3786 and 4014).
    pub max_stored_bytes: u64,
    /// Most bytes of messages to one destination not yet released to the
    /// window (Linux's `TCP_NOTSENT_LOWAT`, `tcp_notsent_lowat` in
    /// ip-sysctl.rst, per destination): `CtpSocket::send` to a destination
    /// with this many unsent bytes waits until its packets go out (at most
    /// `send_timeout`), so a message's bytes reach the wire soon after they
    /// were copied in. Not in the spec; a socket-level pacing of callers,
    /// not a limit of the storage: `Endpoint::send_vec` does not look at
    /// it, and a message of any size is taken when fewer are unsent.
    /// `u64::MAX` turns it off. Default 256 KiB, one window: with 4 MiB of
    /// messages queued behind the window, the kernel's copy of a 64 KiB
    /// message into frames cost 3.3 us instead of 1.4, and CTP over EDP's
    /// bulk throughput at MTU 9000 fell below EDP's
    /// (`docs/measurements/issue32-perbyte.txt`).
    pub notsent_lowat: u64,
    /// Most bytes of spent large buffers kept for reuse (not in the spec;
    /// memory management only): the buffers of confirmed sent messages and
    /// those handed back with `Endpoint::recycle` serve later sends
    /// (`Endpoint::take_buffer`) and reassemblies of about the same size,
    /// instead of fresh allocations whose pages fault in one by one
    /// (`pool.rs`; buffers under 64 KiB are not kept). Default 16 MiB:
    /// four times the sent storage (`max_stored_bytes`, 4 MiB) and eight
    /// times comm's default receive budget (2 MiB), so the buffers of what
    /// a sender stores and of a window of 1 MiB messages being reassembled
    /// are found again; 0 disables the pool.
    pub max_spare_bytes: u64,
    /// Largest message accepted by `send`, bytes (at most 2^48 - 1, spec table 1).
    pub max_message_size: u64,
    /// Memory for large messages being reassembled, bytes, over all peers:
    /// each counts its announced size plus about 256 bytes of bookkeeping,
    /// reserved when its first part arrives (so parts of admitted messages
    /// never wait for each other). A message that does not fit is refused
    /// (its parts stay unconfirmed, so the sender resends them later or
    /// reports "not confirmed") with one
    /// [`ErrorType::ReassemblyLimit`](super::ErrorType::ReassemblyLimit)
    /// delivery per message. Counted in `Stats::refused_reassembly`.
    /// Default 1 GiB.
    pub max_reassembly_bytes: u64,
    /// The same limit per source (address and broadcast flag), so one
    /// sender (or one forged address) cannot take the whole budget.
    /// Default 512 MiB: half the global budget, so at least two sources can
    /// reassemble at once, and a 100 MiB message still fits.
    pub max_reassembly_bytes_per_peer: u64,
    /// A large message with no new part for this long is dropped with an error
    /// delivery.
    pub reassembly_idle_timeout: Duration,
    /// Most receiving sessions (sources we keep a received-id list for, a
    /// source's broadcasts counting separately). Beyond it the session idle
    /// the longest is evicted (counted in `Stats::sessions_evicted`), so a
    /// new peer is always served, however many addresses were seen (forged
    /// ones included). Evicting a session forgets which of its packets were
    /// delivered: a later resend of one of them whose confirmation was lost
    /// would be delivered again. Default 65536 (300-450 bytes each with
    /// `SocketAddr` peers: about 28 MiB at the limit).
    pub max_sessions: usize,
    /// A receiving session with no packet for this long is dropped (counted
    /// in `Stats::sessions_expired`; the source's next packet starts a new
    /// one). Not in the spec, whose sessions live as long as the node.
    /// Default 600 s: far beyond the resend schedule of a live peer (a
    /// packet whose confirmation was lost is resent within `T`, and at the
    /// default timeout the spec's error comes after 51 s), so a duplicate
    /// can follow an expiry only after a link outage of ten minutes. Zero
    /// disables expiry.
    pub session_idle_timeout: Duration,
    /// Most ids remembered beyond the in-sequence one per source (received-id
    /// list); a packet whose id does not fit is dropped unconfirmed (the
    /// sender resends it once the gap before it has filled). Default 2^20.
    pub max_out_of_order_ids: usize,
    /// The same limit over all receiving sessions together (4-9 bytes per
    /// id). Default 2^22 (at most about 40 MiB), four times one source's
    /// limit: out-of-order ids only accumulate behind a lost packet, and
    /// the send window (1024 packets by default) keeps a legitimate source's
    /// far below one source's limit. Counted in `Stats::refused_ids`.
    pub max_out_of_order_ids_total: usize,
    /// Most data deliveries queued for the application; further data
    /// packets are refused unconfirmed (the sender resends them later).
    /// Default 65536. Counted in `Stats::refused_deliveries`.
    pub max_queued_deliveries: usize,
    /// Most message bytes in queued data deliveries, under the same rule (one
    /// delivery larger than this is accepted when no data is queued).
    /// Default 256 MiB (a receiver serves many senders, each with its own
    /// sent storage, `max_stored_bytes`).
    pub max_queued_delivery_bytes: u64,
    /// Most error deliveries queued. "Not confirmed" errors (one per message
    /// the application sent, so bounded by its own sends) always queue;
    /// errors caused by received packets (reassembly limit and abandonment,
    /// allocation failure) and transport errors beyond the limit are dropped
    /// and counted (`Stats::errors_suppressed`), and one
    /// [`ErrorType::Suppressed`](super::ErrorType::Suppressed) delivery
    /// carrying their number follows once the queue has room. Default 1024:
    /// a forged flood (each packet announcing a message that cannot fit)
    /// otherwise queued one error per packet without bound.
    pub max_queued_errors: usize,
    /// Most confirmations waiting to be sent; beyond it a confirmation is
    /// not queued (counted in `Stats::confirmations_dropped`): its packet
    /// was handled, and the sender's resend draws a fresh confirmation.
    /// Default 65536 (about 3 MiB); a driver drains them after every batch
    /// it receives, so only a stalled driver reaches it.
    pub max_queued_confirmations: usize,
    /// The receive window of pulled messages (beyond the spec; PROTOCOL.md
    /// "Pulled messages"), bytes: a receiver asks for parts only while the
    /// bytes it asked for and has not received, over all its pulls, stay
    /// within it (at least one block is always asked). Default 1 MiB: an
    /// eighth of the runtime's receive ring (`runtime::DEFAULT_RX_RING`,
    /// 8 MiB), so the parts asked for always fit the ring, and more than a
    /// round trip of the link's bytes while both sides run.
    pub pull_window_bytes: u64,
    /// Bytes one request of a pull asks for (rounded down to whole parts,
    /// at least one). Default 64 KiB: 44 parts at MTU 1500, 7 at MTU 9000.
    pub pull_block_bytes: u64,
    /// Most pulls in progress; `Endpoint::pull` refuses more. Default 65536.
    pub max_pulls: usize,
    /// Most parts of offered messages waiting in the transmit queue (what
    /// requests asked for); a request's parts beyond it are dropped
    /// (counted in `Stats::pulled_parts_dropped`) and asked again by the
    /// receiver. Default 65536.
    pub max_queued_parts: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_size: DEFAULT_UDP_DATA_SIZE,
            default_timeout: Duration::from_millis(100),
            timeout_multiplier: 3,
            adaptive_timeout: true,
            min_timeout: Duration::from_millis(1),
            max_timeout: Duration::from_secs(10),
            max_resends: 8,
            user_timeout: Some(Duration::from_secs(60)),
            max_probe_period: Duration::from_secs(1),
            min_error_delay: Duration::from_secs(1),
            max_resend_multiplier: 16384,
            max_resend_period: Duration::from_millis(20),
            live_window: Duration::from_millis(100),
            early_resend: true,
            min_reorder_window: Duration::from_micros(20),
            tail_probe: true,
            min_probe_timeout: Duration::from_micros(50),
            stall_window: Duration::from_secs(10),
            window_packets: 1024,
            window_bytes: 256 << 10,
            max_active_large: 2,
            max_stored_bytes: 4 << 20,
            notsent_lowat: 256 << 10,
            max_spare_bytes: 16 << 20,
            max_message_size: MAX_MESSAGE_SIZE,
            max_reassembly_bytes: 1 << 30,
            max_reassembly_bytes_per_peer: 512 << 20,
            reassembly_idle_timeout: Duration::from_secs(120),
            max_sessions: 1 << 16,
            session_idle_timeout: Duration::from_secs(600),
            max_out_of_order_ids: 1 << 20,
            max_out_of_order_ids_total: 1 << 22,
            max_queued_deliveries: 1 << 16,
            max_queued_delivery_bytes: 256 << 20,
            max_queued_errors: 1024,
            max_queued_confirmations: 1 << 16,
            pull_window_bytes: 1 << 20,
            pull_block_bytes: 64 << 10,
            max_pulls: 1 << 16,
            max_queued_parts: 1 << 16,
        }
    }
}

impl Config {
    /// Defaults for CTP carried in EDP datagrams on a link of `mtu` bytes:
    /// data size = mtu - 6 (EDP header) - 25 (CTP header).
    pub fn for_edp_mtu(mtu: usize) -> Self {
        Self {
            data_size: mtu
                .saturating_sub(edp::wire::EDP_HEADER_LEN + CTP_HEADER_LEN)
                .max(1),
            ..Self::default()
        }
    }

    /// Largest datagram this configuration produces, bytes (header + data part).
    pub fn max_packet_len(&self) -> usize {
        CTP_HEADER_LEN + self.data_size
    }

    /// When a packet first sent with timeout `t` is "not confirmed", after
    /// its first transmission: `max((2^(max_resends + 1) - 1) x t,
    /// min_error_delay)` (spec: 8 resends at `(2^k - 1) x t`, the error one
    /// doubled period later, at 511 x t).
    pub(crate) fn error_after(&self, t: Duration) -> Duration {
        let span = (1u32 << (self.max_resends.min(30) + 1)) - 1;
        t.saturating_mul(span).max(self.min_error_delay)
    }
}
