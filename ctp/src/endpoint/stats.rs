//! Counters and storage sizes of an [`Endpoint`](super::Endpoint).

/// Storage sizes (the `Get...Count` of spec `CCTPNet`), plus the sizes the
/// limits of [`Config`](super::Config) bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageSizes {
    /// Commands in the sent-commands storage (awaiting confirmation).
    pub awaiting_confirmation: usize,
    /// Sessions: peers with send or receive state (the broadcast session counts as one).
    pub sessions: usize,
    /// Large messages being reassembled.
    pub large_in_progress: usize,
    /// Deliveries waiting to be consumed (data and errors).
    pub deliveries_queued: usize,
    /// Deliverer threads busy running handlers (filled by the driver).
    pub busy_deliverers: usize,
    /// Deliverer threads alive (filled by the driver).
    pub deliverers: usize,
    /// Receiving sessions (received-id lists), at most `Config::max_sessions`.
    pub receiving_sessions: usize,
    /// Ids held beyond the in-sequence one over all received-id lists, at
    /// most `Config::max_out_of_order_ids_total`.
    pub out_of_order_ids: usize,
    /// Bytes reserved by messages being reassembled, at most
    /// `Config::max_reassembly_bytes`.
    pub reassembly_bytes: u64,
    /// Message bytes in queued data deliveries (`Config::max_queued_delivery_bytes`).
    pub delivery_bytes_queued: u64,
    /// Error deliveries queued (`Config::max_queued_errors`, plus "not
    /// confirmed" errors and one `Suppressed`).
    pub errors_queued: usize,
    /// Confirmations waiting to be sent (`Config::max_queued_confirmations`).
    pub confirmations_queued: usize,
}

/// Event counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Data packets sent for the first time.
    pub data_packets_sent: u64,
    /// Data packets sent again (timer, early resend, tail probe).
    pub data_packets_resent: u64,
    /// Confirmations queued for sending.
    pub confirmations_sent: u64,
    /// Confirmations received.
    pub confirmations_received: u64,
    /// Data packets received (valid header).
    pub data_packets_received: u64,
    /// Data packets received again (confirmed again, not delivered).
    pub duplicates_received: u64,
    /// Datagrams that failed to parse or contradicted state (dropped).
    pub malformed: u64,
    /// Confirmations for nothing in the storage (late or duplicate).
    pub stale_confirmations: u64,
    /// Data packets refused for a full list, queue or memory limit
    /// (unconfirmed); the sum of the `refused_*` counters.
    pub refused: u64,
    /// Messages all of whose packets were confirmed.
    pub messages_confirmed: u64,
    /// Messages delivered to the application.
    pub messages_delivered: u64,
    /// "Not confirmed" errors (one per message).
    pub not_confirmed_errors: u64,
    /// Destinations suspected: silent at a packet's spec error deadline
    /// (`Config::user_timeout`; one `ErrorType::Unresponsive` delivery each).
    pub unresponsive: u64,
    /// Suspected destinations that confirmed again.
    pub recovered: u64,
    /// Resends made before the timer because packets sent later were
    /// confirmed (also counted in `data_packets_resent`).
    pub early_resends: u64,
    /// Packets presumed lost (RACK, RFC 8985 6.2): a packet sent after them
    /// was confirmed first, so their resend was brought forward to the
    /// reorder window; `early_resends` counts those whose confirmation did
    /// not come within it.
    pub presumed_lost: u64,
    /// Tail probes sent (also counted in `data_packets_resent`).
    pub tail_probes: u64,
    /// Resent packets every copy of which was confirmed: the resends were
    /// not needed (one per packet, however many copies; their extra
    /// confirmations are in `stale_confirmations`). Each proves a stall of
    /// its destination (`Config::stall_window`).
    pub spurious_resends: u64,
    /// Receiving sessions created.
    pub sessions_created: u64,
    /// Receiving sessions evicted, least recently active first, to make room
    /// for a new source (`Config::max_sessions`).
    pub sessions_evicted: u64,
    /// Receiving sessions dropped after `Config::session_idle_timeout`.
    pub sessions_expired: u64,
    /// Data packets refused: their id did not fit the source's received-id
    /// list or the budget of all lists (`Config::max_out_of_order_ids`,
    /// `max_out_of_order_ids_total`).
    pub refused_ids: u64,
    /// Parts refused: their message did not fit the reassembly limits
    /// (`Config::max_reassembly_bytes`, `max_reassembly_bytes_per_peer`) or
    /// could not be allocated.
    pub refused_reassembly: u64,
    /// Data packets refused: the delivery queue was full
    /// (`Config::max_queued_deliveries`, `max_queued_delivery_bytes`) or the
    /// message could not be allocated.
    pub refused_deliveries: u64,
    /// Error deliveries dropped beyond `Config::max_queued_errors`
    /// (reported in one `ErrorType::Suppressed` delivery).
    pub errors_suppressed: u64,
    /// Confirmations not queued beyond `Config::max_queued_confirmations`.
    pub confirmations_dropped: u64,
    /// Messages offered for pulling (`Endpoint::send_offer`).
    pub offers_sent: u64,
    /// Offered messages whose receiver said it is done.
    pub offers_done: u64,
    /// Offers received (deliveries carrying one).
    pub offers_received: u64,
    /// Pulls that placed every byte wanted.
    pub pulls_completed: u64,
    /// Pulls that failed (the sender silent for the user timeout).
    pub pulls_failed: u64,
    /// Requests sent by pulls (first asks and retries).
    pub pull_requests_sent: u64,
    /// Requests that asked again for parts asked before (`pull_requests_sent`
    /// counts them too): the receiver's report of what is missing.
    pub pull_retries: u64,
    /// Pulls that heard nothing for the destination's timeout and asked
    /// again for everything outstanding.
    pub pull_timeouts: u64,
    /// Parts of pulled messages received.
    pub pulled_parts_received: u64,
    /// Parts received that were placed already, or for no pull in progress.
    pub pulled_duplicates: u64,
    /// Requests received for bodies offered here.
    pub pull_requests_received: u64,
    /// Parts sent answering requests (`pulled_parts_resent` included).
    pub pulled_parts_sent: u64,
    /// Parts sent that were sent before: the sender's resends of pulled
    /// data, all asked for by the receiver.
    pub pulled_parts_resent: u64,
    /// Parts a retry asked for that were not sent again: they left less
    /// than half a round trip before (the retry crossed them).
    pub pull_resends_skipped: u64,
    /// Parts asked for beyond `Config::max_queued_parts` (or one request's
    /// 4096), not queued.
    pub pulled_parts_dropped: u64,
    /// Requests and dones for no offer stored here (late or duplicate),
    /// and requests not newer than the last one served.
    pub stale_pull_packets: u64,
}
