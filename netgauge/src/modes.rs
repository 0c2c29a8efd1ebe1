//! The transports netgauge measures (`-m`) and how they wait (`--wait`).

use std::str::FromStr;
use std::time::Duration;

use runtime::WaitPolicy;

/// A transport netgauge can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Raw Ethernet frames with no protocol header over a TPACKET_V2 ring
    /// (busy) or recv(2): the floor under every other mode.
    Eth,
    /// EDP datagrams over AF_PACKET.
    Edp,
    /// Kernel UDP.
    Udp,
    /// Kernel UDP with `SO_BUSY_POLL` and blocking receives.
    UdpBp,
    /// Kernel TCP with TCP_NODELAY.
    Tcp,
    /// Kernel TCP with TCP_NODELAY, `SO_BUSY_POLL` and blocking receives.
    TcpBp,
    /// ESP streams over AF_PACKET.
    Esp,
    /// CTP over kernel UDP (`-R IP`).
    CtpUdp,
    /// CTP over EDP (`-R MAC`).
    CtpEdp,
    /// The `comm` crate's 2-rank communicator (tag-matched send/recv) over
    /// CTP over kernel UDP (`-R IP`).
    CommUdp,
    /// The `comm` crate's 2-rank communicator over CTP over EDP (`-R MAC`).
    CommEdp,
}

impl Mode {
    /// Every mode, in the order `--local` runs them: the raw floor first.
    pub const ALL: [Mode; 11] = [
        Mode::Eth,
        Mode::Edp,
        Mode::Udp,
        Mode::UdpBp,
        Mode::Tcp,
        Mode::TcpBp,
        Mode::Esp,
        Mode::CtpUdp,
        Mode::CtpEdp,
        Mode::CommUdp,
        Mode::CommEdp,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Eth => "eth",
            Mode::Edp => "edp",
            Mode::Udp => "udp",
            Mode::UdpBp => "udp-bp",
            Mode::Tcp => "tcp",
            Mode::TcpBp => "tcp-bp",
            Mode::Esp => "esp",
            Mode::CtpUdp => "ctp-udp",
            Mode::CtpEdp => "ctp-edp",
            Mode::CommUdp => "comm-udp",
            Mode::CommEdp => "comm-edp",
        }
    }

    /// True for modes addressed by MAC (`-R` is a MAC address).
    pub fn is_ethernet(self) -> bool {
        matches!(
            self,
            Mode::Eth | Mode::Edp | Mode::Esp | Mode::CtpEdp | Mode::CommEdp
        )
    }

    /// True for modes that may lose data (datagram modes): the stream
    /// pattern reports loss instead of failing.
    pub fn is_lossy(self) -> bool {
        matches!(self, Mode::Eth | Mode::Edp | Mode::Udp | Mode::UdpBp)
    }

    /// True for the kernel modes with `SO_BUSY_POLL` (udp-bp, tcp-bp).
    pub fn is_kernel_busy_poll(self) -> bool {
        matches!(self, Mode::UdpBp | Mode::TcpBp)
    }

    /// True for kernel sockets (udp, tcp and their busy-poll variants):
    /// they keep their own waiting (see [`wait_label`]).
    pub fn is_kernel(self) -> bool {
        matches!(self, Mode::Udp | Mode::Tcp | Mode::UdpBp | Mode::TcpBp)
    }
}

/// Kernel busy-poll budget of udp-bp and tcp-bp (`SO_BUSY_POLL`), us: the
/// runtime's adaptive spin ([`runtime::DEFAULT_SPIN`]), so both sides
/// spin alike before sleeping.
pub const KERNEL_BUSY_POLL_US: u32 = 50;

/// How our modes wait (`--wait`): a [`WaitPolicy`] with its command-line
/// syntax `busy`, `block`, `adaptive` or `adaptive:US`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait(pub WaitPolicy);

impl Wait {
    /// The label of reports and the argument that parses back to it:
    /// `busy`, `block`, `adaptive:50`.
    pub fn label(self) -> String {
        match self.0 {
            WaitPolicy::BusyPoll => "busy".into(),
            WaitPolicy::Block => "block".into(),
            WaitPolicy::Adaptive { spin } => format!("adaptive:{}", spin.as_micros()),
        }
    }

    /// Whether our side spins at all (busy, or adaptive with a budget).
    pub fn spins(self) -> bool {
        match self.0 {
            WaitPolicy::BusyPoll => true,
            WaitPolicy::Block => false,
            WaitPolicy::Adaptive { spin } => !spin.is_zero(),
        }
    }
}

impl FromStr for Wait {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        let policy = match lower.split_once(':') {
            None if lower == "busy" => WaitPolicy::BusyPoll,
            None if lower == "block" => WaitPolicy::Block,
            None if lower == "adaptive" => WaitPolicy::DEFAULT,
            Some(("adaptive", us)) => {
                let us: u64 = us.trim_end_matches("us").parse().map_err(|_| {
                    format!(
                        "--wait {s:?}: the spin budget of adaptive:US is a number of microseconds"
                    )
                })?;
                if us > 1_000_000 {
                    return Err(format!(
                        "--wait {s:?}: a spin budget over 1 s is a busy poll: use --wait busy"
                    ));
                }
                WaitPolicy::Adaptive {
                    spin: Duration::from_micros(us),
                }
            }
            _ => {
                return Err(format!(
                    "unknown wait policy {s:?}: expected busy, block, adaptive or adaptive:US"
                ))
            }
        };
        Ok(Wait(policy))
    }
}

/// How `mode` waits under `wait`, for reports: our modes' policy (`busy`,
/// `block`, `adaptive:50`); udp and tcp `busy` (user-space spin on a
/// nonblocking socket, with --wait busy) or `block`; udp-bp and tcp-bp
/// `so_busy_poll:50` (blocking receives, the kernel spins).
pub fn wait_label(wait: Wait, mode: Mode) -> String {
    if mode.is_kernel_busy_poll() {
        format!("so_busy_poll:{KERNEL_BUSY_POLL_US}")
    } else if mode.is_kernel() {
        if wait.0 == WaitPolicy::BusyPoll {
            "busy".into()
        } else {
            "block".into()
        }
    } else {
        wait.label()
    }
}
