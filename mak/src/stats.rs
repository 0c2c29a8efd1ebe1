//! Counters of the sender and the receiver: what the notes ask to measure
//! (NAKs sent and suppressed, ACKs, ACK requests, retransmissions per cause,
//! duplicates, silent members) and every frame dropped, by reason.

/// Sender counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// First transmissions of DATA (iterative: one per member).
    pub data_sent: u64,
    /// Payload bytes of first transmissions.
    pub bytes_sent: u64,
    /// DATA sent with ACK_REQ for the first time.
    pub ack_requests: u64,
    /// Retransmissions asked for by a NAK.
    pub retx_nak: u64,
    /// Retransmissions on Tw expiry (the window's last packet; ACK and
    /// iterative baselines: the unacknowledged packet).
    pub retx_timeout: u64,
    /// NAK baseline: repeats of the last packet.
    pub retx_tail: u64,
    /// Tw expiries.
    pub ack_timeouts: u64,
    /// ACKs accepted from members.
    pub acks_received: u64,
    /// ACKs that acknowledged nothing new (duplicates, reordered).
    pub acks_stale: u64,
    /// NAKs accepted.
    pub naks_received: u64,
    /// Entries of accepted NAKs.
    pub nak_entries: u64,
    /// NAK entries ignored: retransmitted less than δ ago or already queued.
    pub nak_entries_dedup: u64,
    /// NAK entries for packets already freed (a lagging or removed member).
    pub nak_entries_stale: u64,
    /// Members declared silent.
    pub members_silent: u64,
    /// Messages that left the window.
    pub messages_done: u64,
    /// Frames that failed to parse.
    pub malformed: u64,
    /// Frames of another group or stream, or of another strategy.
    pub foreign: u64,
    /// Frames claiming an unknown member id, an address that is not the
    /// member's, or acknowledging packets never sent (dropped unapplied).
    pub forged: u64,
    /// Frames valid but not expected under the strategy (DATA, ACKs under
    /// NAK, NAKs under ACK and iterative).
    pub unexpected: u64,
}

/// Receiver counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// DATA frames accepted (new or not).
    pub data_received: u64,
    /// DATA frames marked as retransmissions.
    pub retx_received: u64,
    /// DATA already held or consumed.
    pub duplicates: u64,
    /// Gaps opened (a packet beyond the highest one plus one).
    pub gaps: u64,
    /// Missing packets that arrived later (E entries fixed).
    pub fixed: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// NAKs sent.
    pub naks_sent: u64,
    /// Entries of NAKs sent.
    pub nak_entries_sent: u64,
    /// Tr expiries that sent nothing: every missing packet was named by an
    /// overheard NAK less than Ts ago (a NAK suppressed).
    pub naks_suppressed: u64,
    /// NAKs overheard from other members.
    pub naks_overheard: u64,
    /// E entries suppressed by overheard NAKs.
    pub nak_entries_suppressed: u64,
    /// DATA beyond the window (dropped).
    pub beyond_window: u64,
    /// In-order packets held back because the receive buffer was full.
    pub buffer_full: u64,
    /// Messages delivered.
    pub messages_delivered: u64,
    /// Messages dropped (too large, inconsistent).
    pub messages_dropped: u64,
    /// Frames that failed to parse.
    pub malformed: u64,
    /// Frames of another group, source or strategy.
    pub foreign: u64,
    /// DATA claiming our source from another address.
    pub forged: u64,
    /// Frames valid but not for a receiver (ACKs, NAKs under the
    /// baselines, DATA after abandonment).
    pub ignored: u64,
}
