//! Tunables of ESP with their defaults: [`TransportConfig`] (the protocol,
//! what `esp::conn` and `esp::listener` read) and [`EspConfig`] (the
//! socket layer's options, which include the protocol's).

use std::time::Duration;

use edp::link::fault::FaultConfig;
pub use netcore::rtt::{RtoConfig, RtoPolicy};

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

/// The protocol configuration of ESP connections and listeners (pure: no
/// socket, link or test option). Given to [`crate::Connection::connect`],
/// [`crate::Connection::accept`] and [`crate::Listener::new`]; each
/// connection keeps a copy.
///
/// Defaults and why (measured on the cluster links ESP targets; see
/// [`EspConfig`] for the reasoning):
/// - `rto`: RFC 6298 (SRTT + 4 RTTVAR) with doubling, within 1 ms..1 s,
///   10 ms before the first sample;
/// - `max_retransmissions` 8, `max_syn_retransmissions` 10;
/// - delayed ACK every 2 segments or after 100 us;
/// - buffers 4 MiB (send) and 2 MiB (receive), 4096 out-of-order segments;
/// - initial window 10 segments (RFC 6928), NewReno;
/// - keepalive after 1 s idle; 100 challenge ACKs per second;
/// - backlog 128, 64 half-open connections; checksum on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// Retransmission timeout: initial value, bounds, formula (RFC 6298 or
    /// the thesis's 2 x SRTT), doubling (the thesis's `ESP_DOUBLE_RTO`) and
    /// death past the maximum (`ESP_TIMEOUT_CONN`).
    pub rto: RtoConfig,
    /// Retransmissions of a segment (or unanswered probes) after which the
    /// connection is dead (thesis `ESP_MAX_RETRANSMITS`; CTP uses 8).
    pub max_retransmissions: u32,
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
    /// Compute the ESP checksum on sent segments (received ones are checked
    /// by the frame parser whenever their checksum field is not 0).
    pub checksum: bool,
    /// Ethertype written into the frames a connection builds (ESP's,
    /// 0x88B6, unless configured otherwise; it must match the link's
    /// demultiplexing).
    pub ethertype: u16,
}

impl Default for TransportConfig {
    fn default() -> Self {
        EspConfig::default().transport()
    }
}

/// Configuration of ESP sockets and connections.
///
/// Defaults and why:
/// - `min_rto` 1 ms: a LAN round trip is 10-100 us, but a blocking peer's
///   wakeup adds 15-50 us and a loaded 2-vCPU VM delays threads by
///   milliseconds; TCP's 200 ms (Linux) or 1 s (RFC 6298) would turn one
///   loss into a stall (the thesis's throughput problem with 10 ms jiffies,
///   ch. 5.3.3).
/// - `max_rto` 1 s and `max_retransmissions` 8 (as CTP): a dead peer is
///   detected within about 1 + 2 + ... + 256 ms + 512 ms ~ 1 s after the
///   first timeout at the minimum RTO.
/// - `initial_rto` 10 ms: RTO before the first RTT sample (SYN); RFC 6298
///   says 1 s for the Internet, which would make one lost SYN cost a second.
/// - `delayed_ack_segments` 2 and `delayed_ack_time` 100 us: RFC 1122's "every
///   second full segment" with a timer far under its 500 ms (thesis ch. 5.3.2:
///   acknowledging every segment costs throughput).
/// - `send_buffer` 4 MiB, `recv_buffer` 2 MiB: several bandwidth-delay
///   products of a 25 Gbit/s veth link (25 Gbit/s x 100 us = 312 KB); the
///   receive window advertised is `free bytes / MSS` segments (1416 at MTU
///   1500). Measured on a loaded 2-vCPU VM the RTT under bulk load grows to
///   1-7 ms (the receiver is descheduled), so a larger window keeps the
///   sender busy. The send buffer holds every unacknowledged byte, so it
///   must exceed the peer's window or it, not the window, limits the flight.
/// - `rx_ring` 4 MiB (TPACKET_V2, about 2600 frame slots at MTU 1500): at
///   least the receive window, so a burst of a full window fits while the
///   reader sleeps; falls back to recv(2) if the kernel refuses the ring.
/// - `checksum` on: veth has no FCS and the fault injector flips bits; the
///   RFC 1071 sum costs one pass over the payload.
/// - `backlog` 128, `max_half_open` 64: each connection the listener holds
///   already has its own packet socket and receive ring (4 MiB of kernel
///   memory), so the half-open bound also bounds what a SYN flood can pin
///   (64 x 4 MiB).
/// - `initial_cwnd` 10 segments (RFC 6928), congestion control on: slow start
///   and halving on loss (RFC 5681) keep goodput up under random loss.
#[derive(Debug, Clone)]
pub struct EspConfig {
    /// Lower bound of the retransmission timeout.
    pub min_rto: Duration,
    /// Upper bound of the retransmission timeout (backoff stops there).
    pub max_rto: Duration,
    /// RTO before the first RTT sample.
    pub initial_rto: Duration,
    /// Retransmissions of a segment (or unanswered probes) after which the
    /// connection is dead (thesis `ESP_MAX_RETRANSMITS`; CTP uses 8).
    pub max_retransmissions: u32,
    /// Retransmissions of a SYN or SYN-ACK before the handshake fails
    /// (TCP's `tcp_syn_retries`); with the default initial RTO of 10 ms,
    /// doubling up to 1 s, 10 retransmissions give up after about 5.3 s.
    pub max_syn_retransmissions: u32,
    /// In-order segments received before an ACK is sent at once
    /// (thesis `ESP_MAX_ACK_PENDING`); 1 disables delayed ACK.
    pub delayed_ack_segments: u32,
    /// Longest time an ACK is delayed.
    pub delayed_ack_time: Duration,
    /// Send buffer in bytes (unacknowledged plus unsent data).
    pub send_buffer: usize,
    /// Receive buffer in bytes; bounds in-order unread data plus
    /// out-of-order segments (the advertised window).
    pub recv_buffer: usize,
    /// Most out-of-order segments kept (thesis ch. 5.2.10); also bounded by
    /// the window.
    pub max_out_of_order: usize,
    /// Initial congestion window in segments (RFC 6928).
    pub initial_cwnd: u32,
    /// Slow start and AIMD on loss (RFC 5681); off = the peer's window only.
    pub congestion_control: bool,
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
    /// Compute the ESP checksum on sent segments (received ones are checked
    /// whenever their checksum field is not 0). Off saves one pass over the
    /// payload where the link's FCS is trusted.
    pub checksum: bool,
    /// After a blocking call saw frames arrive, poll this long before
    /// sleeping in ppoll(2) (adaptive polling: a wakeup costs 5-50 us);
    /// zero = sleep at once.
    pub spin_before_sleep: Duration,
    /// Start a progress thread for every stream (see
    /// `EspStream::spawn_progress`): ACKs and retransmissions continue while
    /// the application computes, at the price of a mutex on each call.
    pub progress_thread: bool,
    /// Spin on the link instead of sleeping in blocking calls.
    pub busy_poll: bool,
    /// Ethertype of ESP frames (default 0x88B6).
    pub ethertype: u16,
    /// Kernel socket buffer (SO_RCVBUF / SO_SNDBUF) of each stream's packet
    /// socket, in bytes.
    pub socket_buffer: usize,
    /// TPACKET_V2 receive ring of each stream's packet socket, in bytes
    /// (frames read from shared memory, no syscall per frame); `None` =
    /// plain recv(2).
    pub rx_ring: Option<usize>,
    /// Send with `PACKET_QDISC_BYPASS`: frames go straight to the driver,
    /// skipping the kernel's queueing layer (about 0.1-0.3 us per frame on
    /// veth). Off by default, as for EDP sockets: on a NIC with a real qdisc
    /// a full device queue then drops frames (ESP retransmits them) instead
    /// of queueing them.
    pub qdisc_bypass: bool,
    /// How long a dropped stream keeps closing in the background (the
    /// process's closer thread delivers its buffered data and FIN and
    /// answers the peer's FIN, holding the port lease meanwhile); zero =
    /// drop at once. `drop` itself never blocks.
    pub linger: Duration,
    /// Faults injected on each stream's link (`edp::link::fault::FaultLink`):
    /// netgauge's --loss/--dup/--reorder on real links. `None` = none.
    pub fault: Option<FaultConfig>,
}

impl EspConfig {
    /// This configuration with `fault` injected on every stream's link.
    pub fn with_fault(mut self, fault: FaultConfig) -> Self {
        self.fault = Some(fault);
        self
    }

    /// The protocol part (RFC 6298 RTO within `[min_rto, max_rto]` from
    /// `initial_rto`, doubling; NewReno when `congestion_control`).
    pub fn transport(&self) -> TransportConfig {
        TransportConfig {
            rto: RtoConfig::rfc6298(self.initial_rto, self.min_rto, self.max_rto),
            max_retransmissions: self.max_retransmissions,
            max_syn_retransmissions: self.max_syn_retransmissions,
            delayed_ack_segments: self.delayed_ack_segments,
            delayed_ack_time: self.delayed_ack_time,
            send_buffer: self.send_buffer,
            recv_buffer: self.recv_buffer,
            max_out_of_order: self.max_out_of_order,
            initial_cwnd: self.initial_cwnd,
            congestion: if self.congestion_control {
                CongestionControl::NewReno
            } else {
                CongestionControl::None
            },
            keepalive: self.keepalive,
            challenge_ack_limit: self.challenge_ack_limit,
            backlog: self.backlog,
            max_half_open: self.max_half_open,
            checksum: self.checksum,
            ethertype: self.ethertype,
        }
    }
}

impl Default for EspConfig {
    fn default() -> Self {
        Self {
            min_rto: Duration::from_millis(1),
            max_rto: Duration::from_secs(1),
            initial_rto: Duration::from_millis(10),
            max_retransmissions: 8,
            max_syn_retransmissions: 10,
            delayed_ack_segments: 2,
            delayed_ack_time: Duration::from_micros(100),
            send_buffer: 4 << 20,
            recv_buffer: 2 << 20,
            max_out_of_order: 4096,
            initial_cwnd: 10,
            congestion_control: true,
            keepalive: Some(Duration::from_secs(1)),
            challenge_ack_limit: 100,
            backlog: 128,
            max_half_open: 64,
            checksum: true,
            spin_before_sleep: Duration::ZERO,
            progress_thread: false,
            busy_poll: false,
            ethertype: ETHERTYPE_ESP,
            socket_buffer: 4 << 20,
            rx_ring: Some(4 << 20),
            qdisc_bypass: false,
            linger: Duration::from_secs(10),
            fault: None,
        }
    }
}
