//! Per-connection counters.

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
    /// Payload bytes delivered in order (to the receive buffer or straight
    /// to a reader by `handle_segment_into`).
    pub bytes_received: u64,
    /// Fast retransmit episodes.
    pub fast_retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// Segments that failed the sequence acceptability test and were not
    /// plausible duplicates (RFC 9293 sec. 3.10.7.4): a blind attacker's
    /// guesses land here (also counted in `dropped`).
    pub out_of_window: u64,
    /// ACKs not sent because of a rate limit: answers to out-of-window or
    /// old segments beyond one per `min_rto / 2`, challenge ACKs beyond
    /// `challenge_ack_limit` per second (RFC 5961 sec. 7).
    pub rate_limited: u64,
    /// Segments dropped because they carried no valid frame tag under the
    /// negotiated authentication method (`crate::auth`; also counted in
    /// `dropped`).
    pub auth_dropped: u64,
    /// Zero-window and keepalive probes sent.
    pub probes: u64,
    /// Times the peer became unresponsive: `max_retransmissions`
    /// retransmissions or probes unanswered (`Connection::liveness`).
    pub unresponsive: u64,
    /// Time the peer was unresponsive in episodes that ended, us.
    pub unresponsive_us: u64,
    /// Loss episodes undone because a DSACK showed the retransmission was
    /// unnecessary (spurious timeout or reordering).
    pub spurious: u64,
    /// Smoothed RTT in us (0 before the first sample).
    pub srtt_us: u64,
    /// Current RTO in us.
    pub rto_us: u64,
    /// Congestion window in segments (`u32::MAX` without congestion
    /// control).
    pub cwnd: u32,
    /// Duplicate-ACK threshold in force, segments: [`super::DUP_THRESH`]
    /// raised to the reordering degree observed (at most
    /// [`super::MAX_DUP_THRESH`]).
    pub reordering: u32,
    /// Peer's last advertised window in segments.
    pub peer_window: u32,
}
