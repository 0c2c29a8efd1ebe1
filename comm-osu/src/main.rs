//! `comm-osu`: OSU-style micro-benchmarks of the `comm` communicator:
//! latency, bw, bibw, bcast, allreduce, in the OSU
//! micro-benchmarks' output format, and beside Open MPI over TCP with
//! `--ompi` (scripts/osu-compare).
//!
//! One rank per process:
//!   comm-osu latency --hosts 127.0.0.1:5000,127.0.0.1:5001 --rank 0 &
//!   comm-osu latency --hosts 127.0.0.1:5000,127.0.0.1:5001 --rank 1
//!   (over EDP: --link edp --iface IF --hosts MAC,MAC,... --port P)
//! or all ranks started here:
//!   comm-osu bcast --local 4                 (UDP loopback, unprivileged)
//!   comm-osu bcast --local 4 --link edp      (EDP on a virtual cluster; root)
//!   comm-osu bw --local 2 --link edp --ompi target/osu-ompi
//!     (then the Open MPI program on the same hosts over its TCP BTL, and a
//!     table of both with the ratio)
//!   comm-osu bw --local 2 --link edp --mtu 9000 --ompi target/osu-ompi
//!     (the same on jumbo frames)
//!   comm-osu latency-p50 --local 2 --link edp --ompi target/osu-ompi \
//!     --provider target/fi --repeat 3
//!     (the Open MPI program over the libfabric provider and over Open
//!     MPI's TCP BTL, alternating, side by side: `provider.rs`)
#![forbid(unsafe_code)]

mod bench;
mod compare;
mod launch;
mod provider;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use comm::{CommConfig, Communicator};
use ctp::CtpConfig;
use edp::MacAddr;
use runtime::WaitPolicy;

use bench::{Bench, Params};

/// The link the ranks talk over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Link {
    /// CTP over kernel UDP (`--hosts host:port,...`).
    Udp,
    /// CTP over raw-Ethernet EDP (`--hosts MAC,...`, `--iface`, `--port`; CAP_NET_RAW).
    Edp,
}

/// How a rank waits for the network (the EDP runtime's `WaitPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wait {
    /// Spin up to 50 us, then sleep (the runtime's default).
    Adaptive,
    /// Spin without sleeping (one core per rank; as MPI libraries poll).
    Busy,
    /// Sleep in the kernel at once.
    Block,
}

impl Wait {
    fn name(self) -> &'static str {
        match self {
            Wait::Adaptive => "adaptive",
            Wait::Busy => "busy",
            Wait::Block => "block",
        }
    }

    fn policy(self) -> WaitPolicy {
        match self {
            Wait::Adaptive => WaitPolicy::DEFAULT,
            Wait::Busy => WaitPolicy::BusyPoll,
            Wait::Block => WaitPolicy::Block,
        }
    }
}

/// OSU-style benchmarks of the comm communicator.
#[derive(Debug, Clone, Parser)]
#[command(version, about)]
pub struct Args {
    /// The benchmark.
    #[arg(value_enum)]
    pub bench: Bench,
    /// Message sizes MIN:MAX, bytes, doubling (OMB's -m).
    #[arg(short = 'm', long = "message-size", default_value = "0:1048576", value_parser = parse_range)]
    pub sizes: (usize, usize),
    /// Iterations per size up to 8192 bytes; a tenth above (OMB's -i).
    #[arg(short = 'i', long, default_value_t = 1000)]
    pub iterations: usize,
    /// Warm-up iterations per size up to 8192 bytes; a tenth above (OMB's -x).
    #[arg(short = 'x', long, default_value_t = 100)]
    pub warmup: usize,
    /// Messages in flight per round of bw and bibw (OMB's -W).
    #[arg(short = 'W', long, default_value_t = 64)]
    pub window: usize,
    /// The link.
    #[arg(long, value_enum, default_value = "udp")]
    pub link: Link,
    /// The ranks' addresses, rank i at the i-th: host:port (udp) or MAC (edp).
    #[arg(long, value_delimiter = ',', conflicts_with = "local")]
    pub hosts: Vec<String>,
    /// This process's rank in --hosts.
    #[arg(long, requires = "hosts")]
    pub rank: Option<usize>,
    /// Interface of this rank (edp).
    #[arg(long)]
    pub iface: Option<String>,
    /// EDP port of every rank (edp).
    #[arg(long, default_value_t = 4200)]
    pub port: u16,
    /// Start N ranks here: processes on UDP loopback, or with --link edp one
    /// in each host of a virtual cluster of N namespaces (root).
    #[arg(long, value_name = "N")]
    pub local: Option<usize>,
    /// With --local --link edp: MTU of the virtual cluster's links, bytes
    /// (68..=65535; 9000 for jumbo frames). Both our ranks (CTP packets of
    /// MTU - 31 data bytes) and Open MPI's TCP use it.
    #[arg(long, default_value_t = 1500, requires = "local")]
    pub mtu: usize,
    /// With --local: then run this Open MPI program (benches/osu/osu-ompi.c)
    /// on the same hosts over Open MPI's TCP BTL and print both side by
    /// side with the ratio.
    #[arg(long, value_name = "PROGRAM", requires = "local")]
    pub ompi: Option<String>,
    /// How ranks wait for the network.
    #[arg(long, value_enum, default_value = "adaptive")]
    pub wait: Wait,
    /// Bound of every blocking call, seconds; a rank waiting longer fails
    /// (and --local stops every rank after 20 times this).
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// With --link edp: broadcasts over MAK reliable multicast
    /// (`Communicator::enable_multicast_bcast`, group MAC
    /// 03:4d:41:4b:00:0c, EDP port --port + 1) instead of a binomial tree.
    #[arg(long)]
    pub mcast: bool,
    /// With --local and --ompi: instead of comm's ranks, run the Open MPI
    /// program over the libfabric provider `clusternet` in this folder
    /// (FI_PROVIDER_PATH; scripts/build-provider.sh prints it) and over
    /// Open MPI's TCP BTL, alternating, side by side with the ratio.
    #[arg(long, value_name = "DIR", requires = "ompi")]
    pub provider: Option<String>,
    /// With --provider: an FI_PROVIDER value for the provider path (e.g.
    /// `clusternet;ofi_rxd`); default: the provider's own FI_EP_RDM.
    #[arg(long, value_name = "NAME", requires = "provider")]
    pub fi_provider: Option<String>,
    /// With --provider: runs, each TCP then the provider.
    #[arg(long, default_value_t = 1, requires = "provider")]
    pub repeat: usize,
}

fn parse_range(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(':').unwrap_or(("0", s));
    let p = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|e| format!("{x:?}: {e} (expected MIN:MAX bytes)"))
    };
    let (a, b) = (p(a)?, p(b)?);
    if a > b {
        return Err(format!("MIN {a} above MAX {b}"));
    }
    Ok((a, b))
}

impl Args {
    fn params(&self) -> Params {
        Params {
            bench: self.bench,
            min: self.sizes.0,
            max: self.sizes.1,
            iters: self.iterations,
            warmup: self.warmup,
            window: self.window.max(1),
        }
    }

    /// The arguments that give a rank the same measurement.
    fn bench_args(&self) -> Vec<String> {
        let mut v = vec![
            self.bench.name().into(),
            "-m".into(),
            format!("{}:{}", self.sizes.0, self.sizes.1),
            "-i".into(),
            self.iterations.to_string(),
            "-x".into(),
            self.warmup.to_string(),
            "-W".into(),
            self.window.to_string(),
            "--timeout".into(),
            self.timeout.to_string(),
            "--wait".into(),
            self.wait.name().into(),
        ];
        if self.mcast {
            v.push("--mcast".into());
        }
        v
    }
}

fn run_rank(a: &Args, rank: usize) -> Result<(), String> {
    let cfg = CommConfig {
        wait_timeout: Some(Duration::from_secs(a.timeout)),
        ..CommConfig::default()
    };
    let limit = Duration::from_secs(a.timeout);
    let p = a.params();
    let ctp = CtpConfig {
        wait: a.wait.policy(),
        ..CtpConfig::default()
    };
    match a.link {
        Link::Udp => {
            let hosts = a
                .hosts
                .iter()
                .map(|h| {
                    h.parse::<SocketAddr>()
                        .map_err(|e| format!("--hosts {h:?}: {e} (expected ip:port)"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let c = Communicator::bind_udp(rank, hosts, cfg, ctp)
                .map_err(|e| format!("rank {rank}: joining over UDP: {e}"))?;
            bench::run(&c, &p).map_err(|e| format!("rank {rank}: {e}"))?;
            c.finalize(limit)
                .map_err(|e| format!("rank {rank}: finalize: {e}"))
        }
        Link::Edp => {
            let iface = a
                .iface
                .as_deref()
                .ok_or("--link edp needs --iface (this rank's interface)")?;
            let hosts = a
                .hosts
                .iter()
                .map(|h| {
                    h.parse::<MacAddr>()
                        .map(|m| runtime::EthAddr::new(m, a.port))
                        .map_err(|e| format!("--hosts: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let c = Communicator::bind_edp(iface, rank, hosts, cfg, ctp)
                .map_err(|e| format!("rank {rank}: joining over EDP on {iface}: {e}"))?;
            if a.mcast {
                c.enable_multicast_bcast(0x000c, a.port + 1)
                    .map_err(|e| format!("rank {rank}: joining the MAK group: {e}"))?;
            }
            bench::run(&c, &p).map_err(|e| format!("rank {rank}: {e}"))?;
            c.finalize(limit)
                .map_err(|e| format!("rank {rank}: finalize: {e}"))
        }
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    if a.mcast && a.link != Link::Edp {
        eprintln!("comm-osu: --mcast needs --link edp (MAK multicast over EDP group MACs)");
        return ExitCode::FAILURE;
    }
    let r = match (a.local, a.rank) {
        (Some(n), _) => match (&a.provider, &a.ompi) {
            (Some(dir), Some(prog)) => provider::compare(&a, n, prog, dir),
            _ => launch::local(&a, n),
        },
        (None, Some(rank)) => run_rank(&a, rank),
        (None, None) => {
            Err("give --hosts LIST --rank R (one rank) or --local N (all ranks)".into())
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("comm-osu: {e}");
            ExitCode::FAILURE
        }
    }
}
