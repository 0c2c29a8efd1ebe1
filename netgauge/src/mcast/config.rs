//! What a multicast run measures: the modes, carriers, receivers, sizes and
//! protocol settings, converted from the command line by `cli`.

use std::path::PathBuf;
use std::time::Duration;

use mak::Strategy;
use runtime::WaitPolicy;

/// Most receivers of a multicast run (`--hosts` at most this + 1).
pub const MAX_RECEIVERS: usize = 15;

/// Fewest messages per run: a tenth of them warm up.
pub const MIN_COUNT: usize = 10;

/// Highest loss (`--loss`, percent) the multicast modes take.
pub const MAX_LOSS_PERCENT: f64 = 50.0;

/// A multicast run: pattern 1toN on a virtual cluster of receivers + 1
/// hosts (host 0 sends).
#[derive(Debug, Clone)]
pub struct McastConfig {
    /// Modes, in the order given.
    pub modes: Vec<McastMode>,
    /// Carriers of the MAK modes and of raw (norm runs on UDP, esp on EDP).
    pub carriers: Vec<Carrier>,
    /// Numbers of receivers; a cluster of N + 1 hosts is built for each.
    pub receivers: Vec<usize>,
    /// Message sizes, bytes.
    pub sizes: Vec<usize>,
    /// Messages per run (the first tenth warm up in latency measures).
    pub count: usize,
    /// What each run measures.
    pub measure: Vec<Measure>,
    /// Link MTU of the cluster, bytes.
    pub mtu: usize,
    /// Loss probability on every receiver's link (both directions,
    /// independent seeds), 0..1.
    pub loss: f64,
    /// MAK window W, packets.
    pub window: u16,
    /// Window of the NAK baseline, packets (it frees only by its linger).
    pub nak_window: u16,
    /// How long the NAK baseline keeps a sent packet after its last
    /// transmission (`mak::Config::nak_linger`).
    pub nak_linger: Duration,
    /// Tw (and Ts).
    pub tw: Duration,
    /// Dmax (and delta).
    pub dmax: Duration,
    /// How members wait.
    pub wait: WaitPolicy,
    /// Latency measure: how the sender waits for every receiver.
    pub pace: Pace,
    /// Check every delivered message byte by byte.
    pub verify: bool,
    /// NORM's fixed transmit rate, Mbit/s (0: NORM-CC).
    pub norm_rate_mbps: u64,
    /// Bound of one run's waits.
    pub timeout: Duration,
    /// One JSON line per run instead of the tables.
    pub json: bool,
    /// Write one CSV row per run to this file.
    pub csv: Option<PathBuf>,
    /// Draw latency / throughput against size to this file (.svg, .png).
    pub plot: Option<PathBuf>,
}

/// A reliable-multicast mode, or one of its references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McastMode {
    /// The MAK paper's algorithm (`mak` crate).
    Mak,
    /// MAK's ACK baseline: every receiver acknowledges every packet.
    MakAck,
    /// MAK's NAK baseline: repairs on NAKs only, the window frees by linger.
    MakNak,
    /// MAK's iterative baseline: one unicast copy per receiver.
    MakIter,
    /// NORM (RFC 5740, Debian's libnorm, benches/norm/norm_mcast.cpp).
    Norm,
    /// Unreliable multicast of the same carrier: the machine's floor.
    Raw,
    /// One 1 -> 1 ESP stream: the reliable unicast throughput reference.
    Esp,
}

impl McastMode {
    /// Every multicast mode, in the order `--help` lists them.
    pub const ALL: [McastMode; 7] = [
        McastMode::Mak,
        McastMode::MakAck,
        McastMode::MakNak,
        McastMode::MakIter,
        McastMode::Norm,
        McastMode::Raw,
        McastMode::Esp,
    ];

    /// The MAK strategy of the mak modes.
    pub fn strategy(self) -> Option<Strategy> {
        match self {
            McastMode::Mak => Some(Strategy::Mak),
            McastMode::MakAck => Some(Strategy::Ack),
            McastMode::MakNak => Some(Strategy::Nak),
            McastMode::MakIter => Some(Strategy::Iterative),
            _ => None,
        }
    }

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            McastMode::Mak => "mak",
            McastMode::MakAck => "mak-ack",
            McastMode::MakNak => "mak-nak",
            McastMode::MakIter => "mak-iter",
            McastMode::Norm => "norm",
            McastMode::Raw => "raw",
            McastMode::Esp => "esp",
        }
    }

    /// The mode of a command-line name (`esp` only in a multicast list).
    pub fn from_name(s: &str) -> Option<McastMode> {
        McastMode::ALL.into_iter().find(|m| m.name() == s)
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

/// What carries the MAK modes' and raw's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Carrier {
    /// EDP datagrams to a group MAC.
    Edp,
    /// UDP datagrams to an IPv4 multicast group.
    Udp,
}

/// What a multicast run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    /// One message at a time, each until the last receiver has it.
    Latency,
    /// Messages back to back: time per message and throughput, until the
    /// last receiver has the last one.
    Stream,
}

/// How a latency-measuring sender waits until every receiver has a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pace {
    /// Keeps polling its member, 20 us at a time: ACKs are taken as they
    /// come.
    Drive,
    /// Sleeps; its runtime's service thread takes the ACKs.
    Condvar,
}

/// One measured run of a multicast mode: who, what and how much.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Receivers (hosts 1..=n; host 0 sends).
    pub n: usize,
    /// Message size, bytes.
    pub size: usize,
    /// Messages.
    pub count: usize,
    pub measure: Measure,
    /// Loss probability on every receiver's link, 0..1.
    pub loss: f64,
    /// The run's number: its group and its ports differ from every other
    /// run's (a late frame of one run cannot reach the next).
    pub run_id: u16,
}

impl Run {
    /// The run's first port (EDP or UDP).
    pub fn port(&self) -> u16 {
        7000 + self.run_id
    }
}
