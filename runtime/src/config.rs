//! Configuration of a runtime: the link it opens and how its callers wait.

use std::time::Duration;

use crate::auth::AuthSetting;
use link::fault::FaultConfig;

/// Ethertype of EDP (IEEE 802 Local Experimental Ethertype 1).
pub const ETHERTYPE_EDP: u16 = link::eth::ETHERTYPE_EXPERIMENTAL_1;
/// Ethertype of ESP (IEEE 802 Local Experimental Ethertype 2).
pub const ETHERTYPE_ESP: u16 = link::eth::ETHERTYPE_EXPERIMENTAL_2;

/// Default kernel socket buffer of a runtime's packet socket, bytes. One
/// socket now carries every stream of the process, so it is larger than the
/// per-socket buffers of the first design.
pub const DEFAULT_LINK_BUFFER: usize = 8 << 20;

/// Default TPACKET_V2 receive ring, bytes (about 5 200 slots at MTU 1500).
pub const DEFAULT_RX_RING: usize = 8 << 20;

/// The one link configuration EDP, ESP and CTP-over-EDP share (they used to
/// carry three copies of these options): what the runtime's packet socket
/// looks like. Runtimes are shared per (interface, `LinkConfig`): sockets
/// asking for the same configuration share one packet socket.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Ethertype of EDP frames (default 0x88B5).
    pub edp_ethertype: u16,
    /// Ethertype of ESP frames (default 0x88B6).
    pub esp_ethertype: u16,
    /// SO_RCVBUF / SO_SNDBUF of the packet socket, bytes (capped by the
    /// kernel's rmem_max/wmem_max unless the process may force them).
    pub socket_buffer: usize,
    /// TPACKET_V2 receive ring in bytes (frames read from shared memory, no
    /// system call per frame); `None` = recvmmsg(2) batches. Falls back to
    /// recvmmsg when the kernel refuses the ring.
    pub rx_ring: Option<usize>,
    /// Send with `PACKET_QDISC_BYPASS` (frames skip the interface's queueing
    /// discipline: lower latency, but a full driver queue drops).
    pub qdisc_bypass: bool,
    /// Faults injected on every frame the runtime sends (this kernel has no
    /// netem): netgauge's `--loss/--dup/--reorder` on real links. The
    /// fault-injecting link forwards batching, gather and the ring, so a
    /// lossy run measures the same I/O path as a clean one.
    pub fault: Option<FaultConfig>,
    /// Frame authentication ([`crate::auth`]): by default from the
    /// environment (`CLUSTERNET_KEY` / `CLUSTERNET_KEY_FILE`), off when
    /// neither is set. With a key, the MTU sockets see is 24 bytes smaller.
    pub auth: AuthSetting,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            edp_ethertype: ETHERTYPE_EDP,
            esp_ethertype: ETHERTYPE_ESP,
            socket_buffer: DEFAULT_LINK_BUFFER,
            rx_ring: Some(DEFAULT_RX_RING),
            qdisc_bypass: false,
            fault: None,
            auth: AuthSetting::FromEnv,
        }
    }
}

impl LinkConfig {
    /// This configuration with `fault` injected on every sent frame.
    pub fn with_fault(mut self, fault: FaultConfig) -> Self {
        self.fault = Some(fault);
        self
    }
}

/// How a thread waits for its socket inside a runtime.
///
/// Measured on the project's 2-vCPU VM (64-byte ping-pong between two veth
/// namespaces, see README): a wakeup from the kernel costs 5-50 us, a spin
/// that finds the frame costs nothing beyond the CPU it burns. netgauge
/// reports the CPU time per iteration beside every latency, so spinning is
/// never free in the numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Spin until the frame arrives (lowest latency, one core busy while
    /// waiting). The spinning thread also keeps the protocol deadlines.
    BusyPoll,
    /// Sleep in the kernel at once (ppoll on the link): no CPU while
    /// waiting, a wakeup per message.
    Block,
    /// Spin up to `spin`, then sleep (the idea of Linux `SO_BUSY_POLL` and
    /// of MPI progress engines): a reply that comes within the budget costs
    /// no wakeup; a long wait costs at most `spin` of CPU.
    Adaptive {
        /// Longest spin before sleeping.
        spin: Duration,
    },
}

impl WaitPolicy {
    /// The default: adaptive with a 50 us spin budget (see `DEFAULT_SPIN`).
    pub const DEFAULT: WaitPolicy = WaitPolicy::Adaptive { spin: DEFAULT_SPIN };

    /// The spin budget of this policy (`None` = spin without limit).
    pub(crate) fn spin_budget(self) -> Option<Duration> {
        match self {
            WaitPolicy::BusyPoll => None,
            WaitPolicy::Block => Some(Duration::ZERO),
            WaitPolicy::Adaptive { spin } => Some(spin),
        }
    }
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy::DEFAULT
    }
}

/// Spin budget of the default [`WaitPolicy::Adaptive`]: a round trip on a
/// LAN or between namespaces takes 5-40 us, so most replies arrive inside
/// it, while a thread waiting for something slower gives its core back
/// after 50 us.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// When the runtime's service thread polls the link for a caller that is
/// away (computing, not inside a blocking call): ACKs, confirmations,
/// retransmissions and echo replies then continue without it (MPI's
/// asynchronous progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Only callers drive the link; the service thread keeps deadlines
    /// (retransmissions, delayed ACKs, lingering closes) but reads nothing.
    /// Frames wait in the kernel until a caller comes back.
    Callers,
    /// When no caller has waited inside the runtime for `after`, the service
    /// thread polls the link itself until one comes back.
    WhenIdle {
        /// Absence after which the service thread takes over.
        after: Duration,
    },
}

/// Default of [`Progress::WhenIdle`]: 1 ms, the smallest ESP RTO (a peer
/// whose segments wait longer for our ACK retransmits them), and far above
/// a ping-pong's gaps, so a thread that keeps calling in never hands the
/// link over. While callers are away, deadlines that came up during their
/// last call (a delayed ACK) are also taken care of within this time.
pub const DEFAULT_IDLE_PROGRESS: Duration = Duration::from_millis(1);

impl Default for Progress {
    fn default() -> Self {
        Progress::WhenIdle {
            after: DEFAULT_IDLE_PROGRESS,
        }
    }
}

/// Configuration of a runtime.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeConfig {
    /// The packet socket.
    pub link: LinkConfig,
    /// Progress while no caller waits.
    pub progress: Progress,
}
