//! Tunables of ESP with their defaults: [`TransportConfig`] (the protocol,
//! what `esp::conn` and `esp::listener` read) and [`EspConfig`] (the
//! socket layer's options, which embed the protocol's).

use std::time::Duration;

use link::fault::FaultConfig;
pub use netcore::rtt::{RtoConfig, RtoPolicy};
use runtime::{RuntimeConfig, WaitPolicy};

use crate::auth::AuthPolicy;
use crate::wire::ETHERTYPE_ESP;

/// Congestion controller of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionControl {
    /// NewReno in segments (RFC 5681, RFC 6582):
    /// [`netcore::congestion::NewReno`].
    #[default]
    NewReno,
    /// None: the peer's receive window alone limits the sender.
    None,
}

/// When a connection computes the ESP checksum (RFC 1071) on the segments
/// it sends. Received segments are checked whenever their checksum field is
/// not 0, whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checksum {
    /// Compute it unless the link guarantees frame integrity
    /// (`link::Link::frame_integrity`: an Ethernet NIC's FCS, veth's
    /// memory copy, a UDP link's own checksum). This is the thesis's rule
    /// (sec. 4.1: EDP and ESP rely on "the addressing and checksumming of
    /// the underlying Ethernet protocol") and what kernel TCP does on veth,
    /// where checksum offload means no checksum is computed at all. The
    /// socket layer decides when a stream or listener is created on a
    /// runtime; a [`crate::Connection`] used without one computes it.
    #[default]
    Auto,
    /// Always compute it (links whose FCS is not trusted, captures meant
    /// to show verified checksums).
    Always,
    /// Never compute it.
    Never,
}

impl Checksum {
    /// Whether a connection computes the checksum when nothing resolved
    /// `Auto` (a bare [`crate::Connection`]): every mode but `Never`.
    pub fn computed(self) -> bool {
        self != Checksum::Never
    }

    /// `Auto` resolved for a link whose frame integrity is
    /// `link_integrity`; `Always` and `Never` unchanged.
    pub fn resolve(self, link_integrity: bool) -> Checksum {
        match self {
            Checksum::Auto if link_integrity => Checksum::Never,
            Checksum::Auto => Checksum::Always,
            other => other,
        }
    }
}

impl std::fmt::Display for Checksum {
    /// The name [`Checksum::from_str`](std::str::FromStr) reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Checksum::Auto => "auto",
            Checksum::Always => "always",
            Checksum::Never => "never",
        })
    }
}

impl std::str::FromStr for Checksum {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Checksum::Auto),
            "always" | "on" => Ok(Checksum::Always),
            "never" | "off" => Ok(Checksum::Never),
            _ => Err(format!(
                "unknown checksum mode {s:?}: give auto, always or never"
            )),
        }
    }
}

/// The protocol configuration of ESP connections and listeners (pure: no
/// socket, link or test option). Given to [`crate::Connection::connect`],
/// [`crate::Connection::accept`] and [`crate::Listener::new`]; each
/// connection keeps a copy.
///
/// Defaults (the reasons are on `TransportConfig::default`):
/// - `rto`: RFC 6298 (SRTT + 4 RTTVAR) with doubling, within 1 ms..1 s,
///   10 ms before the first sample;
/// - `max_retransmissions` 8 (then the peer is suspected),
///   `user_timeout` 60 s (then it is dead), `max_syn_retransmissions` 10;
/// - delayed ACK every 2 segments or after 100 us;
/// - buffers 4 MiB (send) and 2 MiB (receive), 4096 out-of-order segments;
/// - initial window 10 segments (RFC 6928), NewReno;
/// - keepalive after 1 s idle; 100 challenge ACKs per second;
/// - backlog 128, 64 half-open connections, then SYN cookies; checksum
///   [`Checksum::Auto`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// Retransmission timeout: initial value, bounds, formula (RFC 6298 or
    /// the thesis's 2 x SRTT), doubling (the thesis's `ESP_DOUBLE_RTO`) and
    /// death past the maximum (`ESP_TIMEOUT_CONN`).
    pub rto: RtoConfig,
    /// Retransmissions of a segment (or unanswered probes) after which the
    /// peer is suspected ([`crate::conn::Liveness::Unresponsive`]); with
    /// `user_timeout` `None`, after which the connection is dead (the
    /// thesis's rule, `ESP_MAX_RETRANSMITS`; CTP uses 8).
    pub max_retransmissions: u32,
    /// How long a connection may make no progress (its oldest
    /// unacknowledged segment, or its probes, unanswered) before it is
    /// declared dead ([`crate::ConnectionError::UserTimeout`]): RFC 5482's
    /// user timeout. The peer is suspected long before, after
    /// `max_retransmissions`; meanwhile the connection retransmits and
    /// probes once per maximum RTO. `None`: the thesis's rule, dead at the
    /// suspicion. Default 60 s (see `TransportConfig::default`).
    pub user_timeout: Option<Duration>,
    /// Retransmissions of a SYN or SYN-ACK before the handshake fails
    /// (TCP's `tcp_syn_retries`).
    pub max_syn_retransmissions: u32,
    /// In-order segments received before an ACK is sent at once
    /// (thesis `ESP_MAX_ACK_PENDING`); 1 disables delayed ACK.
    pub delayed_ack_segments: u32,
    /// Longest time an ACK is delayed.
    pub delayed_ack_time: Duration,
    /// Send buffer in bytes (unacknowledged plus unsent data).
    pub send_buffer: usize,
    /// Most unsent bytes in the send buffer (Linux's `TCP_NOTSENT_LOWAT`,
    /// `tcp_notsent_lowat` in ip-sysctl.rst): `send` takes no more than
    /// brings the bytes not yet put in a segment to this, and the stream is
    /// writable only below it, so bytes reach the wire soon after they were
    /// written, while the unacknowledged ones may still fill `send_buffer`.
    /// `usize::MAX` turns the limit off (Linux's default). Departure: Linux
    /// lets one write overshoot the mark by a segment; here it is a cap.
    pub notsent_lowat: usize,
    /// Receive buffer in bytes; bounds in-order unread data (the advertised
    /// window is its free part in segments).
    pub recv_buffer: usize,
    /// Most out-of-order segments kept (thesis ch. 5.2.10); also bounded by
    /// the window.
    pub max_out_of_order: usize,
    /// Initial congestion window in segments (RFC 6928).
    pub initial_cwnd: u32,
    /// Congestion controller.
    pub congestion: CongestionControl,
    /// Idle time after which an established connection sends a keepalive
    /// probe; unanswered probes count as retransmissions, so a silent peer is
    /// detected even by a pure receiver. `None` disables keepalive.
    pub keepalive: Option<Duration>,
    /// Challenge ACKs (RFC 5961 sec. 3.2, 4.2, 5.2) sent per second at most,
    /// per connection.
    pub challenge_ack_limit: u32,
    /// Listen backlog: established connections waiting for `accept`.
    pub backlog: usize,
    /// Half-open (SYN_RCVD) connections a listener keeps at most.
    pub max_half_open: usize,
    /// Beyond `max_half_open`, answer SYNs with SYN cookies (RFC 4987 sec.
    /// 3.6: no state until the final ACK) instead of dropping them. Default
    /// on: a SYN flood then neither fills the table nor keeps legitimate
    /// clients out.
    pub syn_cookies: bool,
    /// When to compute the ESP checksum on sent segments (received ones are
    /// checked by the frame parser whenever their checksum field is not 0).
    pub checksum: Checksum,
    /// Ethertype written into the frames a connection builds (ESP's,
    /// 0x88B6, unless configured otherwise; it must match the link's
    /// demultiplexing).
    pub ethertype: u16,
    /// Authentication methods this end accepts, in its order of preference
    /// (`crate::auth`): what a connecting end offers in its SYN, and the
    /// list that governs on a listener. Default [`AuthPolicy::Cluster`]:
    /// required when the runtime has a cluster key, `none` otherwise.
    pub auth: AuthPolicy,
}

impl Default for TransportConfig {
    /// Defaults and why:
    /// - minimum RTO 1 ms: a LAN round trip is 10-100 us, but a blocking
    ///   peer's wakeup adds 15-50 us and a loaded 2-vCPU VM delays threads by
    ///   milliseconds; TCP's 200 ms (Linux) or 1 s (RFC 6298) would turn one
    ///   loss into a stall (the thesis's throughput problem with 10 ms
    ///   jiffies, ch. 5.3.3).
    /// - maximum RTO 1 s and `max_retransmissions` 8 (as CTP): an
    ///   unresponsive peer is suspected within about 1 + 2 + ... + 256 ms +
    ///   512 ms ~ 1 s after the first timeout at the minimum RTO; while
    ///   suspected, the connection retransmits once a second (a learning
    ///   switch relearns the path within a second of the outage's end).
    /// - `user_timeout` 60 s: the connection is declared dead after a
    ///   minute without progress. Measured on this project's machine
    ///   (docs/DECISIONS.md, "Suspect is not dead"): a bridge with classic
    ///   STP forwards a port again 30 s (2 x forward delay) after it comes
    ///   back; a stream must ride out such a reconvergence with margin,
    ///   while an application that waits is told of the suspicion within
    ///   ~1 s. Kernel TCP waits ~15 minutes (`tcp_retries2`), InfiniBand RC
    ///   under Open MPI's defaults (timeout 20, retry count 7) ~30 s.
    /// - initial RTO 10 ms: the RTO before the first RTT sample (SYN); RFC
    ///   6298 says 1 s for the Internet, which would make one lost SYN cost a
    ///   second.
    /// - `delayed_ack_segments` 2 and `delayed_ack_time` 100 us: RFC 1122's
    ///   "every second full segment" with a timer far under its 500 ms
    ///   (thesis ch. 5.3.2: acknowledging every segment costs throughput).
    /// - `send_buffer` 4 MiB, `recv_buffer` 2 MiB: several bandwidth-delay
    ///   products of a 25 Gbit/s veth link (25 Gbit/s x 100 us = 312 KB); the
    ///   receive window advertised is `free bytes / MSS` segments (1416 at
    ///   MTU 1500). Measured on a loaded 2-vCPU VM the RTT under bulk load
    ///   grows to 1-7 ms (the receiver is descheduled), so a larger window
    ///   keeps the sender busy. The send buffer holds every unacknowledged
    ///   byte, so it must exceed the peer's window or it, not the window,
    ///   limits the flight.
    /// - `notsent_lowat` 256 KiB: what the application writes leaves within
    ///   256 KiB of other data, still in the CPU's cache when the kernel
    ///   copies it into a frame (a 1 MiB L2 here). With 4 MiB of unsent
    ///   data queued behind a window the kernel's copy cost 2.4 us per 64
    ///   KiB instead of 1.1, and ESP's bulk throughput at MTU 9000 fell
    ///   below EDP's (`docs/measurements/issue32-perbyte.txt`).
    /// - `checksum` [`Checksum::Auto`]: off where the link guarantees
    ///   integrity (the thesis's reliance on the Ethernet FCS, sec. 4.1),
    ///   on over the fault injector, which flips bits. It used to be always
    ///   on: ESP's bulk throughput over EDP's at MTU 9000 was 0.67 with it
    ///   and 0.89 without (medians of three alternating runs,
    ///   `docs/measurements/session5.txt` sec. 1).
    /// - `backlog` 128, `max_half_open` 64: what a listener holds before
    ///   `accept`.
    /// - `initial_cwnd` 10 segments (RFC 6928), NewReno: slow start and
    ///   halving on loss (RFC 5681) keep goodput up under random loss.
    fn default() -> Self {
        Self {
            rto: RtoConfig::rfc6298(
                Duration::from_millis(10),
                Duration::from_millis(1),
                Duration::from_secs(1),
            ),
            max_retransmissions: 8,
            user_timeout: Some(Duration::from_secs(60)),
            max_syn_retransmissions: 10,
            delayed_ack_segments: 2,
            delayed_ack_time: Duration::from_micros(100),
            send_buffer: 4 << 20,
            notsent_lowat: 256 << 10,
            recv_buffer: 2 << 20,
            max_out_of_order: 4096,
            initial_cwnd: 10,
            congestion: CongestionControl::NewReno,
            keepalive: Some(Duration::from_secs(1)),
            challenge_ack_limit: 100,
            backlog: 128,
            max_half_open: 64,
            syn_cookies: true,
            checksum: Checksum::Auto,
            ethertype: ETHERTYPE_ESP,
            auth: AuthPolicy::Cluster,
        }
    }
}

/// Configuration of ESP sockets: the protocol, how calls wait, the runtime
/// the socket joins (its packet socket's options and fault injection, in
/// one place), and the linger of a dropped stream.
#[derive(Debug, Clone)]
pub struct EspConfig {
    /// The protocol (RTO, retransmission limits, delayed ACK, buffers,
    /// congestion control, keepalive, listen limits, checksum, ethertype).
    pub transport: TransportConfig,
    /// How blocking calls wait (busy-poll, blocking, adaptive spin then
    /// sleep; see `runtime::WaitPolicy`).
    pub wait: WaitPolicy,
    /// The runtime the socket joins: its packet socket (buffers, receive
    /// ring, qdisc bypass, fault injection) and progress. Streams, listeners
    /// and EDP sockets with equal runtime configurations on one interface
    /// share one packet socket. Its `link.esp_ethertype` is taken from
    /// `transport.ethertype`.
    pub runtime: RuntimeConfig,
    /// How long a dropped stream keeps closing in the background (its
    /// runtime delivers the buffered data and FIN and answers the peer's
    /// FIN, holding the port lease meanwhile); zero = drop at once. `drop`
    /// itself never blocks.
    pub linger: Duration,
}

impl EspConfig {
    /// This configuration with `fault` injected on every frame its
    /// runtime sends (a runtime of its own: faults are per packet socket).
    pub fn with_fault(mut self, fault: FaultConfig) -> Self {
        self.runtime.link.fault = Some(fault);
        self
    }

    /// This configuration with busy polling (spin instead of sleeping).
    pub fn busy_poll(mut self) -> Self {
        self.wait = WaitPolicy::BusyPoll;
        self
    }

    /// The runtime configuration, with ESP's ethertype in place.
    pub fn runtime_config(&self) -> RuntimeConfig {
        let mut r = self.runtime.clone();
        r.link.esp_ethertype = self.transport.ethertype;
        r
    }
}

impl Default for EspConfig {
    fn default() -> Self {
        Self {
            transport: TransportConfig::default(),
            wait: WaitPolicy::DEFAULT,
            runtime: RuntimeConfig::default(),
            linger: Duration::from_secs(10),
        }
    }
}
