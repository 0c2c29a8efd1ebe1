//! Command line of netgauge-mcast.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use edp::runtime::WaitPolicy;
use mak::Strategy;

/// Reliable multicast benchmark, pattern 1toN on a virtual cluster: host 0
/// sends, hosts 1..=N receive (network namespaces on a Linux bridge).
///
/// Modes: mak, mak-ack, mak-nak, mak-iter (the MAK paper's algorithm and its
/// three baselines, `mak` crate), norm (NORM, RFC 5740, Debian's libnorm,
/// through benches/norm/norm_mcast.cpp), raw (unreliable multicast of the
/// same carrier: the machine's floor), esp (one 1 -> 1 ESP stream: the
/// throughput reference).
#[derive(Parser, Debug, Clone)]
#[command(name = "netgauge-mcast", version)]
pub struct Opts {
    /// Modes, comma-separated.
    #[arg(
        short = 'm',
        long,
        value_delimiter = ',',
        default_value = "mak-iter,mak-ack,mak-nak,mak"
    )]
    pub modes: Vec<Mode>,
    /// Carriers of the MAK modes (and of raw): edp (group MAC), udp (IPv4
    /// multicast).
    #[arg(long, value_delimiter = ',', default_value = "edp")]
    pub carrier: Vec<Carrier>,
    /// Pattern (only 1toN).
    #[arg(short = 'x', long, default_value = "1toN")]
    pub pattern: String,
    /// Numbers of receivers, comma-separated (a cluster of N + 1 hosts is
    /// built for each).
    #[arg(long = "receivers", value_delimiter = ',', default_value = "1,2,4,6")]
    pub receivers: Vec<usize>,
    /// Message sizes in bytes, comma-separated.
    #[arg(short = 's', long, value_delimiter = ',', default_value = "1024")]
    pub sizes: Vec<usize>,
    /// Messages per run.
    #[arg(short = 'c', long, default_value_t = 2000)]
    pub count: usize,
    /// latency: one message at a time, each until the last receiver has
    /// it; stream: messages back to back (time per message and
    /// throughput, until the last receiver has the last one).
    #[arg(long, value_delimiter = ',', default_value = "latency")]
    pub measure: Vec<Measure>,
    /// Link MTU of the cluster, bytes.
    #[arg(long, default_value_t = 1500)]
    pub mtu: usize,
    /// Loss probabilities on every receiver's link (both directions,
    /// independent seeds), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub loss: Vec<f64>,
    /// MAK window W, packets.
    #[arg(long, default_value_t = 64)]
    pub window: u16,
    /// Window of the NAK baseline, packets (it frees only by its linger).
    #[arg(long, default_value_t = 4096)]
    pub nak_window: u16,
    /// Tw (and Ts), microseconds.
    #[arg(long, default_value_t = 1000)]
    pub tw_us: u64,
    /// Dmax (and delta), microseconds.
    #[arg(long, default_value_t = 100)]
    pub dmax_us: u64,
    /// How members wait: adaptive (spin 50 us, then sleep), block, busy.
    #[arg(long, default_value = "adaptive")]
    pub wait: Wait,
    /// Latency mode: how the sender waits until every receiver has a
    /// message before sending the next: drive (keeps polling its member,
    /// 20 us at a time: ACKs are taken as they come) or condvar (sleeps;
    /// its runtime's service thread takes the ACKs).
    #[arg(long, default_value = "drive")]
    pub pace: Pace,
    /// Check every delivered message byte by byte.
    #[arg(long)]
    pub verify: bool,
    /// NORM's fixed transmit rate, Mbit/s (0: NORM's own congestion
    /// control, NORM-CC). Default: the best of 400, 800 and 2000 for a
    /// stream of 300 x 64 KiB to one receiver on this project's 2-core
    /// test machine (32, 52 and 10 MB/s; NORM-CC 4 MB/s): faster rates
    /// overrun the receiver and the repairs cost more than they save.
    #[arg(long, default_value_t = 800)]
    pub norm_rate_mbps: u64,
    /// Bound of one run, seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
    /// Also print every run as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Mak,
    MakAck,
    MakNak,
    MakIter,
    Norm,
    Raw,
    Esp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Carrier {
    Edp,
    Udp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Measure {
    Latency,
    Stream,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pace {
    Drive,
    Condvar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Wait {
    Adaptive,
    Block,
    Busy,
}

impl Wait {
    pub fn policy(self) -> WaitPolicy {
        match self {
            Wait::Adaptive => WaitPolicy::DEFAULT,
            Wait::Block => WaitPolicy::Block,
            Wait::Busy => WaitPolicy::BusyPoll,
        }
    }
}

impl Mode {
    pub fn strategy(self) -> Option<Strategy> {
        match self {
            Mode::Mak => Some(Strategy::Mak),
            Mode::MakAck => Some(Strategy::Ack),
            Mode::MakNak => Some(Strategy::Nak),
            Mode::MakIter => Some(Strategy::Iterative),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Mak => "mak",
            Mode::MakAck => "mak-ack",
            Mode::MakNak => "mak-nak",
            Mode::MakIter => "mak-iter",
            Mode::Norm => "norm",
            Mode::Raw => "raw",
            Mode::Esp => "esp",
        }
    }
}

/// The mode name of a MAK strategy.
pub fn mode_name(s: Strategy) -> &'static str {
    match s {
        Strategy::Mak => "mak",
        Strategy::Ack => "mak-ack",
        Strategy::Nak => "mak-nak",
        Strategy::Iterative => "mak-iter",
    }
}

impl Opts {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_s)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !self.pattern.eq_ignore_ascii_case("1toN") {
            return Err(format!(
                "pattern {:?}: only 1toN is implemented",
                self.pattern
            ));
        }
        if self.receivers.iter().any(|&n| n == 0 || n > 15) {
            return Err("receivers must be 1..=15".into());
        }
        if self.count < 10 {
            return Err("count must be at least 10".into());
        }
        if self.loss.iter().any(|&l| !(0.0..0.5).contains(&l)) {
            return Err("loss must be in [0, 0.5)".into());
        }
        Ok(())
    }
}
