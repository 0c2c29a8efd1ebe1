//! Command line, following spcl/netgauge's conventions (`-m MODE -x PATTERN
//! -s MIN-MAX -c COUNT -g GRADE -o FILE -v -a`) plus the options of this
//! project (`--local`, `--busy-poll`, `--json`, fault injection).

use std::path::PathBuf;
use std::str::FromStr;

use clap::Parser;

/// A transport netgauge can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// EDP datagrams over AF_PACKET.
    Edp,
    /// Kernel UDP.
    Udp,
    /// Kernel TCP with TCP_NODELAY.
    Tcp,
    /// ESP streams over AF_PACKET.
    Esp,
    /// CTP over kernel UDP (`-R IP`).
    CtpUdp,
    /// CTP over EDP (`-R MAC`).
    CtpEdp,
}

impl Mode {
    /// Every mode, in the order `--local` runs them.
    pub const ALL: [Mode; 6] = [
        Mode::Edp,
        Mode::Udp,
        Mode::Tcp,
        Mode::Esp,
        Mode::CtpUdp,
        Mode::CtpEdp,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Edp => "edp",
            Mode::Udp => "udp",
            Mode::Tcp => "tcp",
            Mode::Esp => "esp",
            Mode::CtpUdp => "ctp-udp",
            Mode::CtpEdp => "ctp-edp",
        }
    }

    /// True for modes addressed by MAC (`-R` is a MAC address).
    pub fn is_ethernet(self) -> bool {
        matches!(self, Mode::Edp | Mode::Esp | Mode::CtpEdp)
    }

    /// True for modes that may lose data (datagram modes): the stream
    /// pattern reports loss instead of failing.
    pub fn is_lossy(self) -> bool {
        matches!(self, Mode::Edp | Mode::Udp)
    }
}

/// Parses a comma-separated list of modes; `ctp` picks its carrier from
/// `-R` later (see [`Args::resolve_modes`]), `all` is every mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeArg {
    One(Mode),
    /// `ctp` without a carrier: over EDP if `-R` is a MAC, else over UDP.
    Ctp,
    All,
}

impl FromStr for ModeArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "edp" => ModeArg::One(Mode::Edp),
            "udp" => ModeArg::One(Mode::Udp),
            "tcp" => ModeArg::One(Mode::Tcp),
            "esp" => ModeArg::One(Mode::Esp),
            "ctp" => ModeArg::Ctp,
            "ctp-udp" => ModeArg::One(Mode::CtpUdp),
            "ctp-edp" => ModeArg::One(Mode::CtpEdp),
            "all" => ModeArg::All,
            other => {
                return Err(format!(
                "unknown mode {other:?}: expected edp, udp, tcp, esp, ctp, ctp-udp, ctp-edp or all"
            ))
            }
        })
    }
}

/// A communication pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Ping-pong: half round-trip latency and throughput per size.
    #[value(name = "one_one")]
    OneOne,
    /// One-way bulk transfer per size: throughput; the receiver verifies
    /// every byte (datagram modes report loss).
    #[value(name = "stream")]
    Stream,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::OneOne => "one_one",
            Pattern::Stream => "stream",
        }
    }
}

/// An inclusive size range in bytes, netgauge's `-s MIN-MAX` (also `-s N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRange {
    pub min: usize,
    pub max: usize,
}

impl FromStr for SizeRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |t: &str| -> Result<usize, String> {
            let t = t.trim();
            let (digits, mult) = match t.chars().last() {
                Some('k' | 'K') => (&t[..t.len() - 1], 1024),
                Some('m' | 'M') => (&t[..t.len() - 1], 1024 * 1024),
                _ => (t, 1),
            };
            digits.parse::<usize>().map(|v| v * mult).map_err(|_| {
                format!("invalid size {t:?} in -s {s:?}: expected bytes, e.g. 1-65536")
            })
        };
        let (min, max) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let v = num(s)?;
                (v, v)
            }
        };
        if min == 0 || max < min {
            return Err(format!(
                "invalid size range {s:?}: need 1 <= MIN <= MAX (bytes)"
            ));
        }
        Ok(SizeRange { min, max })
    }
}

/// netgauge: latency and throughput of EDP, ESP, CTP, kernel UDP and TCP on
/// one Ethernet link.
///
/// Server: `netgauge -m edp -a -I eth0`.
/// Client: `netgauge -m edp -I eth0 -R <server MAC> -s 1-65536`.
/// Both ends on a two-host virtual cluster built for the run (root):
/// `netgauge --local`.
#[derive(Debug, Clone, Parser)]
#[command(name = "netgauge", version, about, long_about = None)]
pub struct Args {
    /// Transport(s): edp, udp, tcp, esp, ctp (over EDP with a MAC -R, over
    /// UDP with an IP -R), ctp-udp, ctp-edp, all. Comma-separated; default
    /// all with --local.
    #[arg(short = 'm', long = "mode", value_delimiter = ',')]
    pub modes: Vec<ModeArg>,

    /// Communication pattern.
    #[arg(
        short = 'x',
        long = "comm_pattern",
        value_enum,
        default_value = "one_one"
    )]
    pub pattern: Pattern,

    /// Message size range in bytes, MIN-MAX (k/M suffixes allowed).
    #[arg(short = 's', long = "size", default_value = "1-65536")]
    pub size: SizeRange,

    /// Measured iterations per size (one_one round trips; stream messages).
    #[arg(short = 'c', long = "testcount", default_value_t = 1000)]
    pub count: usize,

    /// Warm-up iterations per size, excluded from the statistics.
    #[arg(long = "warmup", default_value_t = 100)]
    pub warmup: usize,

    /// Grade of the size steps: 1 doubles the size each step, higher
    /// grades add intermediate sizes (netgauge's -g).
    #[arg(short = 'g', long = "grade", default_value_t = 1)]
    pub grade: u32,

    /// Write netgauge's long-form results, with its host block, to FILE.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,

    /// Verbose: progress, and the transports' statistics after each run.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,

    /// Act as the server (echoes one_one messages, sinks streams).
    #[arg(short = 'a', long = "server")]
    pub server: bool,

    /// Network interface (edp, esp, ctp-edp).
    #[arg(short = 'I', long = "interface")]
    pub iface: Option<String>,

    /// Remote: a MAC address for edp/esp/ctp-edp, an IP address for
    /// udp/tcp/ctp-udp. `--remote-ip` gives the IP when both kinds run.
    #[arg(short = 'R', long = "remote")]
    pub remote: Option<String>,

    /// The remote's IP address when -R is a MAC and IP modes also run.
    #[arg(long = "remote-ip")]
    pub remote_ip: Option<String>,

    /// Port (EDP/ESP port, or UDP/TCP port).
    #[arg(short = 'P', long = "port", default_value_t = 5201)]
    pub port: u16,

    /// Spin instead of blocking, on both ends and for every mode.
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,

    /// Print one JSON object per mode and size instead of text.
    #[arg(long = "json")]
    pub json: bool,

    /// Build a two-host virtual cluster (two network namespaces joined by a
    /// veth pair), run server and client for each mode, print a comparison
    /// table, and remove the namespaces afterwards.
    #[arg(long = "local")]
    pub local: bool,

    /// MTU of the virtual cluster's veth pair (with --local), bytes.
    #[arg(long = "mtu", default_value_t = 1500)]
    pub mtu: usize,

    /// Inject loss with probability P (percent) on both ends of EDP/ESP/CTP-EDP runs.
    #[arg(long = "loss", value_name = "P", default_value_t = 0.0)]
    pub loss: f64,

    /// Inject duplication with probability P (percent).
    #[arg(long = "dup", value_name = "P", default_value_t = 0.0)]
    pub dup: f64,

    /// Inject reordering with probability P (percent).
    #[arg(long = "reorder", value_name = "P", default_value_t = 0.0)]
    pub reorder: f64,

    /// Seed of the fault injection.
    #[arg(long = "seed", default_value_t = 1)]
    pub seed: u64,

    /// Seconds without progress before a run is abandoned with an error.
    #[arg(long = "timeout", default_value_t = 10.0)]
    pub timeout_s: f64,

    /// With --local: repeat the whole comparison N times, alternating the
    /// order of the modes, and summarise each mode by the median over the
    /// runs (blocking-mode latency swings from run to run).
    #[arg(long = "repeat", default_value_t = 1)]
    pub repeat: usize,

    /// Keep the virtual cluster's namespaces after the run (debugging).
    #[arg(long = "keep", hide = true)]
    pub keep: bool,
}

impl Args {
    /// The concrete modes to run, in `--local` order, without duplicates.
    ///
    /// `ctp` resolves to ctp-edp when `-R` parses as a MAC, else ctp-udp;
    /// with `--local` it means both.
    pub fn resolve_modes(&self) -> Vec<Mode> {
        let remote_is_mac = self
            .remote
            .as_deref()
            .is_some_and(|r| r.parse::<edp::MacAddr>().is_ok());
        let mut out: Vec<Mode> = Vec::new();
        let mut push = |m: Mode| {
            if !out.contains(&m) {
                out.push(m)
            }
        };
        if self.modes.is_empty() {
            if self.local {
                Mode::ALL.into_iter().for_each(&mut push);
            } else {
                push(Mode::Edp);
            }
        }
        for m in &self.modes {
            match m {
                ModeArg::One(m) => push(*m),
                ModeArg::All => Mode::ALL.into_iter().for_each(&mut push),
                ModeArg::Ctp if self.local => {
                    push(Mode::CtpUdp);
                    push(Mode::CtpEdp)
                }
                ModeArg::Ctp if remote_is_mac => push(Mode::CtpEdp),
                ModeArg::Ctp => push(Mode::CtpUdp),
            }
        }
        out
    }

    /// The fault injection configured by --loss/--dup/--reorder (percent),
    /// or None if no fault is asked for.
    pub fn fault(&self) -> Option<edp::link::fault::FaultConfig> {
        if self.loss <= 0.0 && self.dup <= 0.0 && self.reorder <= 0.0 {
            return None;
        }
        Some(edp::link::fault::FaultConfig {
            loss: self.loss / 100.0,
            duplicate: self.dup / 100.0,
            reorder: self.reorder / 100.0,
            reorder_delay: std::time::Duration::from_micros(50),
            seed: self.seed,
            ..Default::default()
        })
    }

    /// Checks combinations clap cannot express. Returns a message for the user.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("--loss", self.loss),
            ("--dup", self.dup),
            ("--reorder", self.reorder),
        ] {
            if !(0.0..=100.0).contains(&p) {
                return Err(format!(
                    "{name} {p}: expected a percentage between 0 and 100"
                ));
            }
        }
        if self.count == 0 {
            return Err("-c 0: need at least one iteration per size".into());
        }
        if self.grade == 0 {
            return Err("-g 0: the grade is at least 1".into());
        }
        if !(68..=65535).contains(&self.mtu) {
            return Err(format!("--mtu {}: expected 68..65535 bytes", self.mtu));
        }
        if self.repeat == 0 || (self.repeat > 1 && !self.local) {
            return Err("--repeat N needs N >= 1 and --local".into());
        }
        if self.local && self.server {
            return Err("--local runs both ends itself: drop -a".into());
        }
        if !self.local && !self.server && self.remote.is_none() {
            return Err(
                "the client needs -R: the server's MAC (edp, esp, ctp-edp) or IP (udp, tcp, ctp-udp); \
                 start the server with -a, or use --local"
                    .into(),
            );
        }
        Ok(())
    }
}

/// The sizes of a sweep from `range.min` to `range.max`, netgauge's
/// `get_next_testparams`: each step adds the largest power of two not above
/// `size / 2^(grade-1)` (grade 1 doubles the size).
pub fn size_steps(range: SizeRange, grade: u32) -> Vec<usize> {
    let mut sizes = vec![range.min];
    let mut s = range.min;
    while s < range.max {
        let scaled = (s >> (grade - 1).min(63)).max(1);
        let inc = 1usize << (usize::BITS - 1 - scaled.leading_zeros());
        s += inc.clamp(1, range.max - s);
        sizes.push(s);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_steps_follow_netgauge() {
        let r = |a, b| SizeRange { min: a, max: b };
        assert_eq!(size_steps(r(1, 16), 1), vec![1, 2, 4, 8, 16]);
        assert_eq!(size_steps(r(1, 20), 1), vec![1, 2, 4, 8, 16, 20]);
        assert_eq!(size_steps(r(64, 64), 1), vec![64]);
        assert_eq!(size_steps(r(1, 16), 2), vec![1, 2, 3, 4, 6, 8, 12, 16]);
        assert_eq!(size_steps(r(3, 10), 1), vec![3, 5, 9, 10]);
    }

    #[test]
    fn size_range_parsing() {
        assert_eq!(
            "1-65536".parse::<SizeRange>().unwrap(),
            SizeRange { min: 1, max: 65536 }
        );
        assert_eq!(
            "64".parse::<SizeRange>().unwrap(),
            SizeRange { min: 64, max: 64 }
        );
        assert_eq!(
            "1k-1M".parse::<SizeRange>().unwrap(),
            SizeRange {
                min: 1024,
                max: 1 << 20
            }
        );
        assert!("0-10".parse::<SizeRange>().is_err());
        assert!("10-1".parse::<SizeRange>().is_err());
        assert!("x".parse::<SizeRange>().is_err());
    }

    #[test]
    fn ctp_resolves_by_remote() {
        let parse =
            |v: &[&str]| Args::parse_from(std::iter::once("netgauge").chain(v.iter().copied()));
        assert_eq!(
            parse(&["-m", "ctp", "-R", "02:00:00:00:00:01"]).resolve_modes(),
            vec![Mode::CtpEdp]
        );
        assert_eq!(
            parse(&["-m", "ctp", "-R", "198.18.0.1"]).resolve_modes(),
            vec![Mode::CtpUdp]
        );
        assert_eq!(parse(&["--local"]).resolve_modes(), Mode::ALL.to_vec());
        assert_eq!(
            parse(&["--local", "-m", "edp,udp,edp"]).resolve_modes(),
            vec![Mode::Edp, Mode::Udp]
        );
        assert!("foo".parse::<ModeArg>().is_err());
    }
}
