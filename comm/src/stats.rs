//! [`CommStats`]: the communicator's counters and queue sizes.

/// Counters (since creation) and current queue sizes of a communicator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommStats {
    /// Messages sent (accepted by `isend`/`send`), including to ourselves.
    pub messages_sent: u64,
    /// Bytes in them.
    pub bytes_sent: u64,
    /// Messages sent by rendezvous (longer than `CommConfig::eager_limit`:
    /// offered, and pulled by the receiver).
    pub rendezvous_sent: u64,
    /// Rendezvous messages whose pull began here (a receive matched one).
    pub rendezvous_received: u64,
    /// Fragments handed to CTP.
    pub fragments_sent: u64,
    /// Messages received (matched with a receive).
    pub messages_received: u64,
    /// Bytes in them.
    pub bytes_received: u64,
    /// Peers sent to at least once (lazy connections made, thesis ch. 6).
    pub connections: u64,
    /// CTP messages whose comm header failed to decode (counted, dropped).
    pub malformed: u64,
    /// CTP messages from addresses not in the host list (counted, dropped):
    /// a communicator's strangers, a removed peer's late messages, first
    /// contacts beyond a tagged endpoint's peer table.
    pub unknown_source: u64,
    /// Peers a tagged endpoint learned on first contact (a message from an
    /// address not inserted): their messages are received like any peer's.
    pub first_contacts: u64,
    /// First contacts refused because the peer table was full
    /// (`TaggedConfig::max_peers`): their messages are dropped.
    pub first_contacts_refused: u64,
    /// Messages of another communicator context (counted, dropped).
    pub foreign_context: u64,
    /// CTP messages of another command than `wire::COMM_COMMAND`.
    pub foreign_command: u64,
    /// Fragments the reorder buffer refused: duplicates, out of window,
    /// inconsistent, too long (counted, dropped).
    pub refused_fragments: u64,
    /// Times an in-order message found the unexpected queue full and was
    /// held (not dropped; CTP deliveries then wait).
    pub unexpected_overflows: u64,
    /// CTP error deliveries.
    pub ctp_errors: u64,
    /// Peers marked failed or implicitly disconnected.
    pub peer_failures: u64,
    /// Implicit disconnects that ended because the peer answered again.
    pub implicit_recoveries: u64,
    /// Times a peer became suspected (silent for
    /// `CommConfig::suspect_timeout`, or CTP's `Unresponsive`).
    pub suspicions: u64,
    /// Suspicions that ended because the peer answered again.
    pub suspicion_recoveries: u64,
    /// Peers the failure detector declared failed (no answer to probes
    /// within `CommConfig::failure_timeout`).
    pub detected_failures: u64,
    /// Failed ranks that came back as a new process (new incarnation).
    pub rejoins: u64,
    /// Messages from a process declared failed (counted, dropped; the
    /// first answered with `EXPEL`).
    pub from_failed: u64,
    /// Now: unexpected messages queued (both contexts).
    pub unexpected: usize,
    /// Now: bytes in them.
    pub unexpected_bytes: u64,
    /// Now: posted receives.
    pub posted: usize,
    /// Now: messages held for room in the unexpected queue.
    pub held: usize,
    /// Now: fragments waiting for the send window.
    pub pending_fragments: usize,
    /// Fragments that arrived ahead of their per-peer sequence (CTP
    /// delivered out of order) and waited in a reorder buffer.
    pub out_of_order_fragments: u64,
    /// Now: fragments in the reorder buffers.
    pub reorder_buffered: usize,
    /// Now: bytes in them.
    pub reorder_buffered_bytes: u64,
}
