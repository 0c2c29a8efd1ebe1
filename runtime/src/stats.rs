//! Counters of a runtime: what its one packet socket received and sent and
//! what it dropped, and why.

/// Counters of a runtime's engine (since it was opened).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Frames received from the link.
    pub rx_frames: u64,
    /// Frames handed to the link.
    pub tx_frames: u64,
    /// Frames the link refused (a full queue): reliable protocols
    /// retransmit them; datagram senders got an error.
    pub tx_lost: u64,
    /// Frames not sent because the link was out (down, no carrier, deleted,
    /// MTU lowered; `link::health`): reliable protocols retransmit
    /// them, datagram sends count them here and return as sent.
    pub tx_unsent: u64,
    /// Sends and receives that failed with an outage error, and `POLLERR`s
    /// of the link's descriptor: evidence the link checked.
    pub link_errors: u64,
    /// The link's outage counters (outages, recoveries, re-binds to a
    /// re-created interface, MTU changes, time down).
    pub link: link::OutageStats,
    /// Frames too short for an Ethernet and port header.
    pub malformed: u64,
    /// Frames not for us: another ethertype, or another unicast
    /// destination (leftovers of a promiscuous interface).
    pub foreign: u64,
    /// Frames whose source MAC is our own or a group address (never
    /// answered: a forged or looped frame).
    pub bad_source: u64,
    /// Frames for a port no slot of this runtime holds, not answered.
    pub unclaimed: u64,
    /// Fatal receive errors (neither `WouldBlock` nor an outage's).
    pub recv_errors: u64,
    /// Fatal send errors (neither transient nor an outage's).
    pub send_errors: u64,
    /// Kernel filter installations.
    pub filter_updates: u64,
    /// Kernel filters the kernel refused (the runtime then filters in user
    /// space only).
    pub filter_errors: u64,
    /// Sockets a listener spawned that could not be added (key taken).
    pub spawn_refused: u64,
    /// The host responder's counters (echo replies, RSTs).
    pub responder: ResponderStats,
    /// Frame authentication's counters (all zero when it is off): frames
    /// refused here (bad tag, replayed, stale) never reached a socket.
    pub auth: crate::auth::AuthStats,
    /// Of the frames without a valid tag (counted in `auth`), those handed
    /// to an ESP socket that negotiated for them (a listener, to refuse or
    /// accept by its list; a connection bound to method `none`).
    pub auth_unverified_delivered: u64,
}

/// Counters of the host responder role (echo replies, RSTs for segments to
/// no socket), while this runtime holds the control lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// Echo replies sent.
    pub echo_replies: u64,
    /// RSTs sent for segments to ports nobody owns.
    pub resets: u64,
    /// Control frames not answered on purpose: group-addressed requests,
    /// replies, malformed control payloads, ports owned by another process.
    pub ignored: u64,
    /// Answers that did not fit the transmit batch (dropped).
    pub overflow: u64,
    /// Scans of the ports other processes hold (while holding the ESP
    /// control lease, about one per second).
    pub rescans: u64,
    /// RSTs not sent because more than
    /// [`super::responder::RESETS_PER_SEC`] were due in one second.
    pub rate_limited: u64,
    /// Times the RST role left the kernel filter for the rest of a second
    /// whose RSTs were spent (segments to closed ports are then dropped by
    /// the kernel, uncounted, instead of in user space).
    pub rst_pauses: u64,
}
