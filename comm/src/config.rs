//! [`CommConfig`]: the communicator's tunables, each with its default and
//! the reason for it.

use std::time::Duration;

use crate::matching::MatchLimits;

/// Tunables of a [`Communicator`](crate::Communicator).
#[derive(Debug, Clone)]
pub struct CommConfig {
    /// Context id of the communicator's point-to-point traffic; its
    /// collectives use `context | 0x8000` (MPI 4.0 section 6.1.2: separate
    /// contexts keep the two apart). All ranks must use the same. Default 1.
    pub context: u16,
    /// Largest fragment a message is sent in, bytes (without the 24-byte
    /// header). A message longer than this is split into consecutive
    /// fragments and joined by the receiver, so messages of any size up to
    /// `max_message_bytes` pass while CTP's per-message reassembly memory
    /// (`ctp::Config::max_reassembly_bytes_per_peer`, 512 MiB) holds only
    /// one fragment per message. Default 1 MiB.
    pub fragment_bytes: usize,
    /// The eager limit, bytes (Open MPI's `btl_eager_limit`): a message to
    /// another rank up to this long is sent at once, in fragments; a longer
    /// one by rendezvous: one announcement takes the message's place in
    /// the peer's order, and the receiver pulls the bytes into the matched
    /// receive's buffer (ctp's PROTOCOL.md "Pulled messages"), paced by its
    /// own receive window, asking again for what it misses; an unexpected
    /// one waits as a handle, without its bytes. Default `usize::MAX`:
    /// every message eagerly, as before the rendezvous existed. Pulling
    /// pays where receives are posted ahead (MPI's pattern: the libfabric
    /// provider sets 8 KiB, `FI_CLUSTERNET_EAGER_LIMIT`); where they are
    /// not, each message waits for its receive and then a round trip.
    /// Measured with netgauge's stream pattern (blocking 1 MiB sends, the
    /// receive posted when the previous one completed; `scripts/ab-netgauge.sh
    /// -r 2 ... -- --local --mtu M -x stream -s 1048576 -c 200 -m comm-edp`,
    /// docs/measurements/issue39-wire.txt): eager 6674 / 14016 Mbit/s,
    /// pulled above 64 KiB 5549 / 9707 Mbit/s at MTU 1500 / 9000.
    pub eager_limit: usize,
    /// The send window per peer, fragments, as a span of sequence numbers:
    /// a fragment goes to CTP only while its sequence number is below the
    /// oldest unconfirmed one's plus this. CTP confirms a message once its
    /// receiver has it, so the receiver can never see a fragment this far
    /// ahead of the next one it expects, and its reorder buffer for the peer
    /// holds at most this many; a fragment beyond is counted and dropped
    /// (`CommStats::refused_fragments`). All ranks must use the same value
    /// (a receiver's must be at least its senders'). Default 64. The bytes
    /// unconfirmed toward a peer are bounded as well, by the window the
    /// peer grants (`recv_budget_bytes`, ULFC): a fragment is cut when it
    /// goes, at most `fragment_bytes` and at most what that window allows.
    pub window_fragments: usize,
    /// This rank's receive budget, bytes: the sum of the windows it grants
    /// its peers never exceeds it (ULFC, the paper's `SO_RCVBUF`; `flow.rs`).
    /// Default 2 MiB: half the `SO_RCVBUF` CTP's UDP transport asks for
    /// (`ctp::socket::UDP_SOCKET_BUFFER`, 4 MiB; the kernel may cap it at
    /// `net.core.rmem_max`) and a quarter of the EDP runtime's receive ring
    /// (`runtime::DEFAULT_RX_RING`, 8 MiB, about 5100 frame slots at
    /// MTU 1500). Departure from the paper's `Σ w <= SO_RCVBUF`: the
    /// headroom is for CTP's resends of unconfirmed packets, which take a
    /// second place in the receiver's buffer when the first copy was only
    /// queued, not lost (on a loaded receiver the queueing outgrows the
    /// resend timeout). Measured with `examples/ulfc_priority.rs`, 7 senders
    /// flat out into one receiver on 2 vCPUs: a 4 MiB budget gave 971–1510
    /// kernel drops per 3 s run, 2 MiB and 1 MiB none.
    /// Each peer starts with `recv_budget_bytes / (size - 1)`, which must be
    /// at least `flow::MIN_WINDOW_BYTES` (4096). All ranks must use the same.
    pub recv_budget_bytes: u64,
    /// The window a peer gets after it asked for response priority
    /// (`rapid`), bytes (at least `flow::MIN_WINDOW_BYTES`). Default 64 KiB.
    pub rapid_window_bytes: u64,
    /// Largest message sent or accepted, bytes. A larger send fails with
    /// [`CommError::TooLarge`](crate::CommError::TooLarge); a received
    /// header announcing more is counted and dropped. Default 4 GiB.
    pub max_message_bytes: u64,
    /// Most fragments waiting in the sender for the window, over all peers;
    /// a nonblocking send beyond it fails with
    /// [`CommError::SendQueueFull`](crate::CommError::SendQueueFull).
    /// Default 65536.
    pub max_pending_fragments: usize,
    /// Most unfinished requests (posted receives and pending sends not yet
    /// completed by `wait`); beyond it `isend`/`irecv` fail with
    /// [`CommError::TooManyRequests`](crate::CommError::TooManyRequests).
    /// Default 65536.
    pub max_requests: usize,
    /// Bounds of the matching queues (per context).
    pub limits: MatchLimits,
    /// How long a blocking call (`wait`, `send`, `recv`, collectives) waits
    /// before failing with [`CommError::TimedOut`](crate::CommError::TimedOut);
    /// `None` waits without limit. Default `None` (MPI semantics; a dead
    /// peer is reported by CTP's "not confirmed" error to whoever sends to
    /// it).
    pub wait_timeout: Option<Duration>,
    /// How long [`Communicator::finalize`](crate::Communicator::finalize)
    /// keeps the endpoint answering after the last exchange, so a peer whose
    /// last message's confirmation was lost gets it on its resend (as TCP's
    /// TIME-WAIT, RFC 9293 3.6.1, for the last ACK). Default 200 ms: many
    /// resend timeouts on a LAN (CTP's floor is 1 ms).
    pub linger: Duration,
    /// Failure detection bound, the rank's *user timeout* (RFC 5482's
    /// idea, as ESP's and CTP's; `liveness.rs`): a peer this rank waits on
    /// (data toward it, a receive naming it, a receive from any source)
    /// that answers nothing for this long while the rank is inside a call
    /// is declared failed: the calls waiting on it fail with
    /// [`CommError::PeerFailed`](crate::CommError::PeerFailed) and its
    /// state becomes [`PeerState::Failed`](crate::PeerState::Failed) until
    /// a restarted process at its address announces itself. `None` (or
    /// zero) turns detection off (a dead peer is then only reported to
    /// those sending to it, by CTP's "not confirmed" error). Default 60 s,
    /// the default of `ctp::Config::user_timeout` and
    /// `esp::TransportConfig::user_timeout` (docs/DECISIONS.md, "Suspect
    /// is not dead": a classic-STP bridge reconverges in 30 s; Open MPI's
    /// InfiniBand defaults give up after about 30 s), so that a link flap
    /// or a blackhole of seconds ends no job; the application learns of a
    /// silent peer after `suspect_timeout`. Set it to `suspect_timeout`
    /// for the rule before suspicion (failed at 3 s of silence).
    pub failure_timeout: Option<Duration>,
    /// Suspicion bound (LAM's short echo timeout, `liveness.rs`): a peer
    /// this rank waits on that answers nothing for this long is
    /// *suspected*: [`Communicator::unresponsive`](crate::Communicator::unresponsive)
    /// returns its silence, a `warn` event and `CommStats::suspicions`
    /// count it, nothing fails, and it is probed (once per quarter of this)
    /// until it answers or `failure_timeout` passes. Capped at
    /// `failure_timeout`; `None`: `failure_timeout`. Default 3 s: three
    /// times CTP's error floor (`min_error_delay`, 1 s, chosen so that a
    /// loaded host's half-second stall is not an error; ctp/PROTOCOL.md
    /// "Error floor").
    pub suspect_timeout: Option<Duration>,
}

impl Default for CommConfig {
    fn default() -> Self {
        Self {
            context: 1,
            fragment_bytes: 1 << 20,
            eager_limit: usize::MAX,
            window_fragments: 64,
            recv_budget_bytes: ctp::socket::UDP_SOCKET_BUFFER as u64 / 2,
            rapid_window_bytes: 64 << 10,
            max_message_bytes: 4 << 30,
            max_pending_fragments: 1 << 16,
            max_requests: 1 << 16,
            limits: MatchLimits::default(),
            wait_timeout: None,
            linger: Duration::from_millis(200),
            failure_timeout: Some(Duration::from_secs(60)),
            suspect_timeout: Some(Duration::from_secs(3)),
        }
    }
}
