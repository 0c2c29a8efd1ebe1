//! Command line, following spcl/netgauge's conventions (`-m MODE -x PATTERN
//! -s MIN-MAX -c COUNT -g GRADE -o FILE -v -a`) plus the options of this
//! project (`--local`, `--busy-poll`, `--json`, fault injection).

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use edp::runtime::WaitPolicy;

use crate::mcast::{self, McastConfig, McastMode};

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
    /// they keep their own waiting (see [`Args::wait_label`]).
    pub fn is_kernel(self) -> bool {
        matches!(self, Mode::Udp | Mode::Tcp | Mode::UdpBp | Mode::TcpBp)
    }
}

/// Kernel busy-poll budget of udp-bp and tcp-bp (`SO_BUSY_POLL`), us: the
/// runtime's adaptive spin ([`edp::runtime::DEFAULT_SPIN`]), so both sides
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

/// Parses a comma-separated list of modes; `ctp` and `comm` pick their
/// carrier from `-R` later (see [`Args::resolve_modes`]), `all` is every
/// mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeArg {
    One(Mode),
    /// `ctp` without a carrier: over EDP if `-R` is a MAC, else over UDP.
    Ctp,
    /// `comm` without a carrier: over EDP if `-R` is a MAC, else over UDP.
    Comm,
    All,
    /// A reliable-multicast mode (pattern 1toN on a virtual cluster).
    Mcast(McastMode),
}

impl FromStr for ModeArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "eth" => ModeArg::One(Mode::Eth),
            "edp" => ModeArg::One(Mode::Edp),
            "udp" => ModeArg::One(Mode::Udp),
            "udp-bp" => ModeArg::One(Mode::UdpBp),
            "tcp" => ModeArg::One(Mode::Tcp),
            "tcp-bp" => ModeArg::One(Mode::TcpBp),
            "esp" => ModeArg::One(Mode::Esp),
            "ctp" => ModeArg::Ctp,
            "ctp-udp" => ModeArg::One(Mode::CtpUdp),
            "ctp-edp" => ModeArg::One(Mode::CtpEdp),
            "comm" => ModeArg::Comm,
            "comm-udp" => ModeArg::One(Mode::CommUdp),
            "comm-edp" => ModeArg::One(Mode::CommEdp),
            "all" => ModeArg::All,
            other => match McastMode::from_name(other) {
                Some(m) => ModeArg::Mcast(m),
                None => {
                    return Err(format!(
                        "unknown mode {other:?}: expected eth, edp, udp, udp-bp, tcp, tcp-bp, esp, ctp, ctp-udp, \
                         ctp-edp, comm, comm-udp, comm-edp, all, or a multicast mode: mak, mak-ack, mak-nak, \
                         mak-iter, norm, raw"
                    ))
                }
            },
        })
    }
}

/// A communication pattern.
/// The link under edp, esp, ctp-edp and comm-edp (`--link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// AF_PACKET on an interface (CAP_NET_RAW).
    Packet,
    /// Ethernet frames inside UDP datagrams (no privilege).
    Udp,
}

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
    /// Multi-host (`--local --hosts N`): rank 0 against every other rank
    /// at once, rank 0 sending (ping-pong with each peer; netgauge's 1toN);
    /// with the multicast modes, host 0 multicasting to every other host.
    #[value(name = "1toN")]
    OneToN,
    /// Multi-host: every other rank against rank 0 at once, the peers
    /// sending (netgauge's Nto1).
    #[value(name = "Nto1")]
    NToOne,
    /// Multi-host: ping-pong between ranks 0 and 1 in both directions at
    /// once (each one client of the other).
    #[value(name = "one_one_bidir")]
    OneOneBidir,
    /// Multi-host: effective bisection bandwidth, random pairings of the
    /// ranks, all pairs at once (netgauge's ebb).
    #[value(name = "ebb")]
    Ebb,
    /// Multi-host: message rate, ranks 0..N/2 stream small messages to
    /// ranks N/2..N at once (OSU osu_mbw_mr).
    #[value(name = "msgrate")]
    MsgRate,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::OneOne => "one_one",
            Pattern::Stream => "stream",
            Pattern::OneToN => "1toN",
            Pattern::NToOne => "Nto1",
            Pattern::OneOneBidir => "one_one_bidir",
            Pattern::Ebb => "ebb",
            Pattern::MsgRate => "msgrate",
        }
    }

    /// The two-host pattern each pair of a multi-host pattern runs (the
    /// pattern itself for one_one and stream).
    pub fn session(self) -> Pattern {
        match self {
            Pattern::Stream | Pattern::MsgRate => Pattern::Stream,
            _ => Pattern::OneOne,
        }
    }

    /// Whether the pattern involves more than one pair of hosts.
    pub fn is_multi_host(self) -> bool {
        self.session() != self
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

/// Smallest `--mtu`: IPv4's minimum datagram (RFC 791), also the smallest
/// MTU a veth takes; EDP, ESP, CTP and comm work down to it (kernel TCP
/// needs more, see [`Args::validate`]).
pub const MIN_MTU: usize = 68;

/// Environment variable capping -c and --warmup (see
/// [`Args::apply_max_count`]).
pub const MAX_COUNT_ENV: &str = "NETGAUGE_MAX_COUNT";

/// Environment variable that makes a client fail on purpose at one size of
/// one mode, `MODE:SIZE` (e.g. `edp:1024`), to see how a run reports a
/// failed measurement (tests, and the README check).
pub const INJECT_FAILURE_ENV: &str = "NETGAUGE_INJECT_FAILURE";

/// The examples at the end of `--help`.
const EXAMPLES: &str = "\
Examples:
  # both ends on this machine, in a two-host virtual cluster (root)
  netgauge --local -s 1-64K -c 1000
  # server on node A, client on node B (EDP by default)
  nodeA$ netgauge -a -I eth0
  nodeB$ netgauge -I eth0 -R 02:00:00:00:00:0a -s 64-1M -c 1000
  # ESP against kernel UDP and TCP, results as CSV
  nodeB$ netgauge -I eth0 -R 02:00:00:00:00:0a --remote-ip 10.0.0.10 -m esp,udp,tcp --csv out.csv
  # 1 % injected loss on the Ethernet modes
  netgauge --local -m edp,esp --loss 1
  # without privileges: our frames in UDP datagrams (loopback, or two hosts)
  netgauge --local --link udp -m edp,esp,ctp-edp,udp
  nodeA$ netgauge -a --link udp -m esp --link-peer nodeB:19471
  nodeB$ netgauge --link udp -m esp -R nodeA
  # reliable multicast from host 0 to 2, 4 and 6 receivers (root)
  netgauge -m mak,mak-ack,mak-nak,mak-iter,norm,raw -x 1toN --hosts 3,5,7";

/// `--user-timeout`: seconds, or `none` for the thesis's and the CTP
/// spec's rule (no user timeout).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UserTimeout(pub Option<std::time::Duration>);

impl std::str::FromStr for UserTimeout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(UserTimeout(None));
        }
        match s.parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => {
                Ok(UserTimeout(Some(std::time::Duration::from_secs_f64(v))))
            }
            _ => Err(format!(
                "user timeout {s:?}: give a number of seconds > 0, or none"
            )),
        }
    }
}

impl std::fmt::Display for UserTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => f.write_str("none"),
            Some(d) => write!(f, "{}", d.as_secs_f64()),
        }
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
#[command(name = "netgauge", version, about, long_about = None, after_help = EXAMPLES)]
pub struct Args {
    /// Transport(s): eth (raw frames, the floor), edp, udp, udp-bp, tcp,
    /// tcp-bp (kernel sockets with SO_BUSY_POLL), esp, ctp (over EDP with a
    /// MAC -R, over UDP with an IP -R), ctp-udp, ctp-edp, comm (the comm
    /// crate's communicator over CTP: over EDP with a MAC -R, over UDP with
    /// an IP -R), comm-udp, comm-edp, all.
    /// Comma-separated; default with --local: all, without udp-bp and
    /// tcp-bp when our side does not spin (--wait block).
    ///
    /// Reliable multicast, -x 1toN on a virtual cluster of --hosts N built
    /// for the run (host 0 sends to the N-1 others): mak (the MAK paper's
    /// algorithm), mak-ack, mak-nak, mak-iter (its ACK, NAK and iterative
    /// baselines), norm (NORM, RFC 5740, libnorm), raw (unreliable
    /// multicast: the floor), and esp beside them (one 1 -> 1 ESP stream,
    /// the unicast reference of --measure stream). They run on their own
    /// (not mixed with the two-host modes).
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

    /// Message size range in bytes, MIN-MAX (k/M suffixes allowed; default
    /// 1-65536, for the multicast modes 1024).
    #[arg(short = 's', long = "size")]
    pub size: Option<SizeRange>,

    /// Measured iterations per size (one_one round trips; stream messages).
    #[arg(short = 'c', long = "testcount", default_value_t = 1000)]
    pub count: usize,

    /// Warm-up iterations per size, excluded from the statistics.
    #[arg(long = "warmup", default_value_t = 100)]
    pub warmup: usize,

    /// Grade of the size steps (netgauge's -g/--grad, default 2): each
    /// step adds the largest power of two not above size / 2^(grad-1), so 1
    /// doubles the size and 2 adds one size between powers of two (1, 2,
    /// 3, 4, 6, 8, 12, ...). `--grade` is accepted as an alias.
    #[arg(short = 'g', long = "grad", alias = "grade", default_value_t = 2)]
    pub grade: u32,

    /// Write netgauge's long-form results, with its host block, to FILE
    /// (CSV instead when FILE ends in `.csv`).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,

    /// Verbose: the transports' statistics after each run and info events
    /// (-v); debug events (-vv); trace events (-vvv). RUST_LOG, when set,
    /// overrides the event filter.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Write the results as CSV (one row per mode, size and run) to FILE;
    /// `-o FILE.csv` does the same.
    #[arg(long = "csv", value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Write every measured sample (one_one: half round-trip and send-call
    /// time per iteration, ns) as CSV to FILE (netgauge's -f, sockperf's
    /// --full-log).
    #[arg(short = 'f', long = "full-log", value_name = "FILE")]
    pub full_log: Option<PathBuf>,

    /// Draw the results as charts to FILE (.svg or .png): latency (p50
    /// with a band to p99) and throughput against size, one line per mode,
    /// log-log axes. Saved JSON: `netgauge plot results.json -o FILE`.
    #[arg(long = "plot", value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Time limit per size, seconds (netgauge's -t): a size runs fewer
    /// than -c iterations when they would not fit. The cut is made before
    /// each size from the previous size's time per iteration scaled by the
    /// size ratio (the server must know the count in advance), not midway
    /// as netgauge does; the records give the iterations that ran.
    #[arg(short = 't', long = "time", value_name = "SECONDS")]
    pub time_limit_s: Option<f64>,

    /// Print netgauge's man page (roff, from this help) on stdout and exit:
    /// `netgauge -w > netgauge.1; man ./netgauge.1`.
    #[arg(short = 'w', long = "man-page")]
    pub man_page: bool,

    /// With -f: append to FILE without a header (the clients of --local).
    #[arg(long = "full-log-append", hide = true, requires = "full_log")]
    pub full_log_append: bool,

    /// Act as the server (echoes one_one messages, sinks streams).
    #[arg(short = 'a', long = "server")]
    pub server: bool,

    /// With --local: hosts of the virtual cluster (2..=64; on a bridge
    /// when more than 2), for the multi-host patterns (-x 1toN, Nto1,
    /// one_one_bidir, ebb, msgrate). The multicast modes take a
    /// comma-separated list (2..=16 each), one cluster per entry, and
    /// report the growth with the number of receivers.
    #[arg(
        long = "hosts",
        value_name = "N",
        value_delimiter = ',',
        default_value = "2"
    )]
    pub hosts_list: Vec<usize>,

    /// Server: serve one client session, then exit (default: serve client
    /// after client until stopped).
    #[arg(long = "once")]
    pub once: bool,

    /// Run as one rank of an MPI job (`mpirun -np N netgauge --mpi -x 1toN
    /// -m edp,esp`): peers found over MPI, no -R (needs the `mpi` feature).
    #[arg(long = "mpi")]
    pub mpi: bool,

    /// With --local --hosts N: launch the ranks with Open MPI's mpirun, one
    /// per host of the virtual cluster (needs the `mpi` feature).
    #[arg(long = "mpirun")]
    pub mpirun: bool,

    /// With --mpirun: also run this Open MPI ping-pong program (built by
    /// scripts/ompi-pingpong) over Open MPI's TCP BTL on the same cluster
    /// and print its p50 beside ours.
    #[arg(long = "anchor", value_name = "PROGRAM")]
    pub anchor: Option<PathBuf>,

    /// With --local --hosts N: launch the ranks with Slurm's srun (a local
    /// Slurm: scripts/slurm-local.sh; needs the `mpi` feature).
    #[arg(long = "srun")]
    pub srun: bool,

    /// --mpi: after MPI_Init, rank r enters network namespace PREFIXr
    /// (/run/netns), so that the MPI library's own connections stay in the
    /// launching namespace (set by --srun).
    #[arg(long = "rank-netns", value_name = "PREFIX", hide = true)]
    pub rank_netns: Option<String>,

    /// --mpi: EDP echo rounds per peer address when finding the interface
    /// that reaches it (the thesis's btl_eth_echo_attempts).
    #[arg(long = "echo-attempts", default_value_t = 3)]
    pub echo_attempts: u32,

    /// --mpi: wait for an echo reply per round, ms (the thesis's
    /// btl_eth_echo_timeout).
    #[arg(long = "echo-timeout-ms", default_value_t = 100)]
    pub echo_timeout_ms: u64,

    /// Client: once connected, wait until this time (ms since the Unix
    /// epoch) before the first step, so that the pairs of a multi-host
    /// pattern start together (set by --local --hosts).
    #[arg(long = "start-at", value_name = "UNIX_MS", hide = true)]
    pub start_at_ms: Option<u64>,

    /// Network interface (edp, esp, ctp-edp, comm-edp).
    #[arg(short = 'I', long = "interface")]
    pub iface: Option<String>,

    /// Remote: a MAC address for eth/edp/esp/ctp-edp/comm-edp, an IP address
    /// for udp/tcp/ctp-udp/comm-udp. `--remote-ip` gives the IP when both kinds run.
    /// On an eth server (-a -m eth): the one client MAC it serves.
    #[arg(short = 'R', long = "remote")]
    pub remote: Option<String>,

    /// Ethertype of eth-mode frames (hex 0x.... or decimal; default
    /// 0x88B7). Two eth sessions between the same two interfaces at once
    /// need different ones (`--local --hosts 2 -x one_one_bidir` gives its
    /// second pair 0x88B8).
    #[arg(long = "eth-type", value_name = "TYPE",
          default_value_t = crate::transport::eth::ETHERTYPE, hide_default_value = true,
          value_parser = crate::transport::eth::parse_ethertype)]
    pub eth_type: u16,

    /// The remote's IP address when -R is a MAC and IP modes also run.
    #[arg(long = "remote-ip")]
    pub remote_ip: Option<String>,

    /// The link edp, esp, ctp-edp and comm-edp run on: `packet` (AF_PACKET on -I
    /// IFACE; needs CAP_NET_RAW) or `udp` (our Ethernet frames carried whole
    /// in UDP datagrams, `edp::link::UdpLink`: no privilege, crosses
    /// routers). With udp, -R is the server's UDP address HOST\[:PORT\] (port
    /// default -P) and each end's MAC is derived from its UDP address
    /// (`edp::link::udp::derived_mac`).
    #[arg(long = "link", value_enum, default_value = "packet")]
    pub link: LinkKind,

    /// `--link udp`: this end's UDP address. Default 0.0.0.0:P on the
    /// server, 0.0.0.0:(P+1) on the client (P = -P).
    #[arg(long = "link-bind", value_name = "ADDR:PORT")]
    pub link_bind: Option<std::net::SocketAddr>,

    /// `--link udp`, server: the UDP address HOST:PORT of a client allowed
    /// to send (repeatable). A UDP link takes frames only from the peers in
    /// its table; a client binds port P+1 unless given --link-bind.
    #[arg(long = "link-peer", value_name = "HOST:PORT")]
    pub link_peers: Vec<String>,

    /// Print the host name of every participant (rank, host name, address)
    /// before the results, as netgauge's --hostnames does.
    #[arg(short = 'n', long = "hostnames")]
    pub hostnames: bool,

    /// Port (EDP/ESP port, or UDP/TCP port). The default, 19470, is
    /// unassigned by IANA and used by no common benchmark (iperf3 has 5201,
    /// netperf 12865, sockperf 11111, qperf 19765).
    #[arg(short = 'P', long = "port", default_value_t = 19470)]
    pub port: u16,

    /// Spin instead of blocking, on both ends and for every mode: our
    /// modes with --wait busy, udp and tcp on nonblocking sockets.
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,

    /// How our modes (eth, edp, esp, ctp) wait for data, on both ends:
    /// busy (spin), block (sleep in the kernel at once), adaptive\[:US\]
    /// (spin up to US microseconds, then sleep; default adaptive with the
    /// runtime's 50 us). udp and tcp block unless --busy-poll; udp-bp and
    /// tcp-bp block with SO_BUSY_POLL.
    #[arg(long = "wait", value_name = "POLICY")]
    pub wait: Option<Wait>,

    /// When ESP computes its checksum (RFC 1071) on the segments it sends:
    /// `auto` (not where the link guarantees frame integrity, which an
    /// Ethernet FCS, veth and a UDP link do; on through fault injection),
    /// `always` or `never`. Received segments are checked whenever they
    /// carry one.
    #[arg(long = "esp-checksum", value_name = "MODE", default_value = "auto")]
    pub esp_checksum: ::esp::Checksum,

    /// Open N idle EDP sockets (ephemeral ports) in each netgauge process,
    /// on the measured socket's runtime, for the whole session.
    #[arg(long = "idle-edp", value_name = "N", default_value_t = 0)]
    pub idle_edp: usize,

    /// Open M idle ESP listeners (ephemeral ports) in each netgauge
    /// process, on the measured socket's runtime, for the whole session.
    #[arg(long = "idle-esp", value_name = "M", default_value_t = 0)]
    pub idle_esp: usize,

    /// With --local: P processes per host, each holding one EDP socket and
    /// one ESP listener: the measured one and P-1 extra processes.
    #[arg(long = "idle-procs", value_name = "P", default_value_t = 1)]
    pub idle_procs: usize,

    /// Internal (--idle-procs): bind one EDP socket and one ESP listener on
    /// -I, print `ready`, and hold them until stdin closes.
    #[arg(long = "hold", hide = true)]
    pub hold: bool,

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

    /// The user timeout of ESP connections, CTP destinations and comm
    /// ranks (esp, ctp-*, comm-*): seconds without progress before the
    /// peer is declared dead (it is suspected after about a second, a
    /// comm rank after 3 s: `-v` prints it). `none`: the thesis's rule for
    /// ESP (dead after 8 retransmissions), the CTP spec's ("not confirmed"
    /// after 8 resends), and a comm rank failed once suspected. Default:
    /// the protocols' (60 s). Give `--timeout` above it to let an outage
    /// run into it.
    #[arg(long = "user-timeout", value_name = "SECONDS|none")]
    pub user_timeout: Option<UserTimeout>,

    /// With --local: repeat the whole comparison N times, alternating the
    /// order of the modes, and summarise each mode by the median over the
    /// runs (blocking-mode latency swings from run to run).
    #[arg(long = "repeat", default_value_t = 1)]
    pub repeat: usize,

    /// Keep the virtual cluster's namespaces after the run (debugging).
    #[arg(long = "keep", hide = true)]
    pub keep: bool,

    /// Carriers of the multicast modes mak* and raw, comma-separated: edp
    /// (EDP datagrams to a group MAC), udp (IPv4 multicast). norm runs on
    /// UDP, esp on EDP.
    #[arg(
        long = "carrier",
        value_enum,
        value_delimiter = ',',
        default_value = "edp",
        help_heading = "Multicast modes"
    )]
    pub carrier: Vec<mcast::Carrier>,

    /// What the multicast modes measure, comma-separated: latency (one
    /// message at a time, each until the last receiver has it), stream
    /// (messages back to back: time per message and throughput until the
    /// last receiver has the last one).
    #[arg(
        long = "measure",
        value_enum,
        value_delimiter = ',',
        default_value = "latency",
        help_heading = "Multicast modes"
    )]
    pub measure: Vec<mcast::Measure>,

    /// MAK window W, packets.
    #[arg(
        long = "window",
        default_value_t = 64,
        help_heading = "Multicast modes"
    )]
    pub window: u16,

    /// Window of mak-nak, packets (it frees only by its linger).
    #[arg(
        long = "nak-window",
        default_value_t = 4096,
        help_heading = "Multicast modes"
    )]
    pub nak_window: u16,

    /// MAK's Tw (and Ts), microseconds.
    #[arg(
        long = "tw-us",
        default_value_t = 1000,
        help_heading = "Multicast modes"
    )]
    pub tw_us: u64,

    /// MAK's Dmax (and delta), microseconds.
    #[arg(
        long = "dmax-us",
        default_value_t = 100,
        help_heading = "Multicast modes"
    )]
    pub dmax_us: u64,

    /// --measure latency: how the sender waits until every receiver has a
    /// message: drive (keeps polling its member, 20 us at a time) or
    /// condvar (sleeps; its runtime's service thread takes the ACKs).
    #[arg(
        long = "pace",
        value_enum,
        default_value = "drive",
        help_heading = "Multicast modes"
    )]
    pub pace: mcast::Pace,

    /// Check every delivered multicast message byte by byte.
    #[arg(long = "verify", help_heading = "Multicast modes")]
    pub verify: bool,

    /// NORM's fixed transmit rate, Mbit/s (0: NORM's own congestion
    /// control, NORM-CC). Default: the best of 400, 800 and 2000 for a
    /// stream of 300 x 64 KiB to one receiver on this project's 2-core
    /// test machine (32, 52 and 10 MB/s; NORM-CC 4 MB/s): faster rates
    /// overrun the receiver and the repairs cost more than they save.
    #[arg(
        long = "norm-rate-mbps",
        default_value_t = 800,
        help_heading = "Multicast modes"
    )]
    pub norm_rate_mbps: u64,
}

/// Writes the man page (roff) of netgauge's command line to `w` (`-w`).
pub fn write_man_page(w: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(<Args as clap::CommandFactory>::command()).render(w)
}

impl Args {
    /// The size range: `-s`, else 1-65536 (1024 for the multicast modes).
    pub fn size(&self) -> SizeRange {
        self.size.unwrap_or(if self.is_mcast() {
            SizeRange {
                min: 1024,
                max: 1024,
            }
        } else {
            SizeRange { min: 1, max: 65536 }
        })
    }

    /// Hosts of the virtual cluster (`--hosts`; the last of a list).
    pub fn hosts(&self) -> usize {
        self.hosts_list.last().copied().unwrap_or(2)
    }

    /// Whether `-m` names a multicast mode.
    pub fn is_mcast(&self) -> bool {
        self.modes.iter().any(|m| matches!(m, ModeArg::Mcast(_)))
    }

    /// The multicast modes of `-m`, in order, without duplicates; `esp`
    /// among them is the 1 -> 1 ESP reference stream.
    pub fn mcast_modes(&self) -> Vec<McastMode> {
        let mut out = Vec::new();
        for m in &self.modes {
            let m = match m {
                ModeArg::Mcast(m) => *m,
                ModeArg::One(Mode::Esp) => McastMode::Esp,
                _ => continue,
            };
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }

    /// The multicast run of these options (see [`Args::validate`] first).
    pub fn mcast_config(&self) -> McastConfig {
        McastConfig {
            modes: self.mcast_modes(),
            carriers: self.carrier.clone(),
            receivers: self.hosts_list.iter().map(|h| h - 1).collect(),
            sizes: size_steps(self.size(), self.grade),
            count: self.count,
            measure: self.measure.clone(),
            mtu: self.mtu,
            loss: self.loss / 100.0,
            window: self.window,
            nak_window: self.nak_window,
            tw: Duration::from_micros(self.tw_us),
            dmax: Duration::from_micros(self.dmax_us),
            wait: self.wait().0,
            pace: self.pace,
            verify: self.verify,
            norm_rate_mbps: self.norm_rate_mbps,
            timeout: Duration::from_secs_f64(self.timeout_s),
            json: self.json,
            csv: self.csv_path().map(Into::into),
            plot: self.plot.clone(),
        }
    }

    /// Checks the options of a multicast run. Returns a message for the
    /// user.
    fn validate_mcast(&self) -> Result<(), String> {
        let others: Vec<String> = self
            .modes
            .iter()
            .filter_map(|m| match m {
                ModeArg::Mcast(_) | ModeArg::One(Mode::Esp) => None,
                ModeArg::One(m) => Some(m.name().to_string()),
                ModeArg::Ctp => Some("ctp".into()),
                ModeArg::Comm => Some("comm".into()),
                ModeArg::All => Some("all".into()),
            })
            .collect();
        if !others.is_empty() {
            return Err(format!(
                "-m {}: the multicast modes (mak, mak-ack, mak-nak, mak-iter, norm, raw) run on their own; \
                 measure {} in a separate run",
                self.modes_text(),
                others.join(", ")
            ));
        }
        if self.pattern != Pattern::OneToN {
            return Err(format!(
                "-x {}: the multicast modes run pattern 1toN (host 0 sends to every other host): use -x 1toN",
                self.pattern.name()
            ));
        }
        let max = mcast::MAX_RECEIVERS + 1;
        if let Some(h) = self.hosts_list.iter().find(|&&h| !(2..=max).contains(&h)) {
            return Err(format!(
                "--hosts {h}: the multicast modes take 2..={max} hosts (1..={} receivers)",
                mcast::MAX_RECEIVERS
            ));
        }
        if self.count < mcast::MIN_COUNT {
            return Err(format!(
                "-c {}: the multicast modes need at least {} messages (a tenth warm up)",
                self.count,
                mcast::MIN_COUNT
            ));
        }
        if !(0.0..mcast::MAX_LOSS_PERCENT).contains(&self.loss) {
            return Err(format!(
                "--loss {}: the multicast modes take 0 <= P < {} (percent)",
                self.loss,
                mcast::MAX_LOSS_PERCENT
            ));
        }
        if self.dup > 0.0 || self.reorder > 0.0 {
            return Err(
                "--dup and --reorder: the multicast modes inject loss only (--loss)".into(),
            );
        }
        if !(MIN_MTU..=65535).contains(&self.mtu) {
            return Err(format!(
                "--mtu {}: expected {MIN_MTU}..65535 bytes",
                self.mtu
            ));
        }
        if self.server
            || self.remote.is_some()
            || self.iface.is_some()
            || self.mpi
            || self.mpirun
            || self.srun
            || self.link != LinkKind::Packet
        {
            return Err(
                "the multicast modes run on a virtual cluster built for the run: drop -a, -R, -I, \
                 --link udp and --mpi/--mpirun/--srun"
                    .into(),
            );
        }
        if self
            .output
            .as_ref()
            .is_some_and(|p| !crate::output::csv::is_csv_path(p))
            || self.repeat > 1
            || self.full_log.is_some()
        {
            return Err(
                "-o FILE (long form), -f and --repeat are two-host options; the multicast modes write \
                 --json, --csv FILE and --plot FILE"
                    .into(),
            );
        }
        if let Some(p) = &self.plot {
            crate::output::plot::check_target(p)?;
        }
        Ok(())
    }

    /// `-m` as given, comma-separated.
    fn modes_text(&self) -> String {
        self.modes
            .iter()
            .map(|m| match m {
                ModeArg::One(m) => m.name(),
                ModeArg::Ctp => "ctp",
                ModeArg::Comm => "comm",
                ModeArg::All => "all",
                ModeArg::Mcast(m) => m.name(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Where to write CSV: `--csv FILE`, or `-o FILE` ending in `.csv`.
    pub fn csv_path(&self) -> Option<&std::path::Path> {
        self.csv.as_deref().or(self
            .output
            .as_deref()
            .filter(|p| crate::output::csv::is_csv_path(p)))
    }

    /// Where to write netgauge's long form: `-o FILE` not ending in `.csv`.
    pub fn long_form_path(&self) -> Option<&std::path::Path> {
        self.output
            .as_deref()
            .filter(|p| !crate::output::csv::is_csv_path(p))
    }

    /// The tracing filter of `-v` repetitions: warn, info, debug, trace.
    pub fn log_level(&self) -> &'static str {
        match self.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    }

    /// The concrete modes to run, in `--local` order, without duplicates.
    ///
    /// `ctp` resolves to ctp-edp when `-R` parses as a MAC, else ctp-udp;
    /// with `--local` it means both; `comm` likewise.
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
        // udp-bp and tcp-bp are the fair kernel comparison when our side
        // spins; without spinning they are left out of the default list.
        let spins = self.wait().spins();
        let all = Mode::ALL
            .into_iter()
            .filter(move |m| spins || !m.is_kernel_busy_poll());
        if self.modes.is_empty() {
            if self.local {
                all.clone().for_each(&mut push);
            } else {
                push(Mode::Edp);
            }
        }
        for m in &self.modes {
            match m {
                ModeArg::One(m) => push(*m),
                ModeArg::All => all.clone().for_each(&mut push),
                ModeArg::Ctp if self.local => {
                    push(Mode::CtpUdp);
                    push(Mode::CtpEdp)
                }
                ModeArg::Ctp if remote_is_mac => push(Mode::CtpEdp),
                ModeArg::Ctp => push(Mode::CtpUdp),
                ModeArg::Comm if self.local => {
                    push(Mode::CommUdp);
                    push(Mode::CommEdp)
                }
                ModeArg::Comm if remote_is_mac => push(Mode::CommEdp),
                ModeArg::Comm => push(Mode::CommUdp),
                ModeArg::Mcast(_) => {}
            }
        }
        out
    }

    /// How our modes wait: `--wait`, `--busy-poll` (busy), or the
    /// runtime's default (adaptive, 50 us).
    pub fn wait(&self) -> Wait {
        if self.busy_poll {
            return Wait(WaitPolicy::BusyPoll);
        }
        self.wait.unwrap_or(Wait(WaitPolicy::DEFAULT))
    }

    /// How `mode` waits, for reports: our modes' policy (`busy`, `block`,
    /// `adaptive:50`); udp and tcp `busy` (user-space spin on a nonblocking
    /// socket, with --wait busy) or `block`; udp-bp and tcp-bp
    /// `so_busy_poll:50` (blocking receives, the kernel spins).
    pub fn wait_label(&self, mode: Mode) -> String {
        let wait = self.wait();
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

    /// Applies [`MAX_COUNT_ENV`]: caps -c and --warmup at its value, for
    /// runs that must be short (CI runs the README's commands so) without
    /// changing the command. Returns the note to print when it changed
    /// anything. Errors: a value that is not a count of at least 1.
    pub fn apply_max_count(&mut self) -> Result<Option<String>, String> {
        let Ok(v) = std::env::var(MAX_COUNT_ENV) else {
            return Ok(None);
        };
        let max: usize = v
            .trim()
            .parse()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("{MAX_COUNT_ENV}={v:?}: expected a count of at least 1"))?;
        if self.count <= max && self.warmup <= max {
            return Ok(None);
        }
        let note = format!(
            "netgauge: {MAX_COUNT_ENV}={max}: -c {} and --warmup {} capped at {max}",
            self.count, self.warmup
        );
        self.count = self.count.min(max);
        self.warmup = self.warmup.min(max);
        Ok(Some(note))
    }

    /// `Some(smallest MTU)` when `--local` would run kernel TCP on a link
    /// whose `--mtu` is below it: 40 bytes of IPv4 and TCP headers plus
    /// the kernel's smallest MSS (`net.ipv4.tcp_min_snd_mss`, 48 unless
    /// set; tcp(7)). Segments never shrink below that, so over a smaller
    /// MTU they are dropped and the session stalls.
    fn tcp_min_mtu(&self) -> Option<usize> {
        let tcp = self
            .resolve_modes()
            .iter()
            .any(|m| matches!(m, Mode::Tcp | Mode::TcpBp));
        if !self.local || self.link != LinkKind::Packet || !tcp {
            return None;
        }
        let mss = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_min_snd_mss")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(48);
        let min = 40 + mss;
        (self.mtu < min).then_some(min)
    }

    /// Checks combinations clap cannot express. Returns a message for the user.
    pub fn validate(&self) -> Result<(), String> {
        if self.is_mcast() {
            return self.validate_mcast();
        }
        if self.hosts_list.len() != 1 {
            return Err(format!(
                "--hosts {}: one number of hosts (a list sweeps the multicast modes only)",
                self.hosts_list
                    .iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
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
        if self
            .time_limit_s
            .is_some_and(|t| !(t > 0.0 && t.is_finite()))
        {
            return Err("-t SECONDS: expected a time limit per size above 0".into());
        }
        if self.count == 0 {
            return Err("-c 0: need at least one iteration per size".into());
        }
        if self.grade == 0 {
            return Err("-g 0: the grade (--grad) is at least 1".into());
        }
        if self.fault().is_some() {
            // Fault injection wraps our AF_PACKET link (edp::link::FaultLink):
            // kernel sockets never see it.
            let kernel: Vec<&str> = self
                .resolve_modes()
                .into_iter()
                .filter(|m| !m.is_ethernet())
                .map(|m| m.name())
                .collect();
            if !kernel.is_empty() {
                return Err(format!(
                    "--loss/--dup/--reorder inject faults on our Ethernet link and cannot apply to {} \
                     (kernel sockets); pick Ethernet modes, e.g. -m eth,edp,esp,ctp-edp",
                    kernel.join(", ")
                ));
            }
        }
        if !(MIN_MTU..=65535).contains(&self.mtu) {
            return Err(format!(
                "--mtu {}: expected {MIN_MTU}..65535 bytes (IPv4's minimum datagram)",
                self.mtu
            ));
        }
        if let Some(min) = self.tcp_min_mtu() {
            return Err(format!(
                "--mtu {}: kernel TCP sends at least {} data bytes a segment \
                 (net.ipv4.tcp_min_snd_mss) plus 40 of headers, so its segments would not fit \
                 and tcp/tcp-bp would stall: use --mtu {min} or more, or leave tcp and tcp-bp out (-m)",
                self.mtu,
                min - 40
            ));
        }
        if self.local && self.iface.is_some() {
            return Err(format!(
                "-I {}: --local builds its own interfaces (the virtual cluster's{}); drop -I",
                self.iface.as_deref().unwrap_or_default(),
                if self.link == LinkKind::Udp {
                    ", or none with --link udp"
                } else {
                    ""
                }
            ));
        }
        if let Some(p) = &self.plot {
            crate::output::plot::check_target(p)?;
        }
        if self.repeat == 0 || (self.repeat > 1 && !self.local) {
            return Err("--repeat N needs N >= 1 and --local".into());
        }
        if let Some(e) = crate::cluster::validate(self) {
            return Err(e);
        }
        if self.local && self.server {
            return Err("--local runs both ends itself: drop -a".into());
        }
        if self.busy_poll && self.wait.is_some_and(|w| w.0 != WaitPolicy::BusyPoll) {
            return Err(format!(
                "--busy-poll means --wait busy, not --wait {}: give one of them",
                self.wait.unwrap().label()
            ));
        }
        if self.idle_procs == 0 || (self.idle_procs > 1 && !self.local) {
            return Err(
                "--idle-procs P needs P >= 1 and --local (P processes per host of the virtual cluster)"
                    .into(),
            );
        }
        if self.idle_procs > crate::hold::MAX_PROCS {
            return Err(format!(
                "--idle-procs {}: at most {} processes per host",
                self.idle_procs,
                crate::hold::MAX_PROCS
            ));
        }
        for (flag, n, max) in [
            ("--idle-edp", self.idle_edp, crate::idle::MAX_IDLE_EDP),
            ("--idle-esp", self.idle_esp, crate::idle::MAX_IDLE_ESP),
        ] {
            if n > max {
                return Err(format!("{flag} {n}: at most {max}"));
            }
        }
        if self.hold {
            if self.local || self.server || self.iface.is_none() {
                return Err("--hold (internal) needs -I IFACE, without --local or -a".into());
            }
            return Ok(());
        }
        if self.link == LinkKind::Udp {
            if let Some(m) = self.resolve_modes().into_iter().find(|m| *m == Mode::Eth) {
                return Err(format!(
                    "-m {} sends raw frames with no protocol and has no UDP link: drop it with --link udp",
                    m.name()
                ));
            }
            if self.pattern.is_multi_host()
                || self.mpi
                || self.mpirun
                || self.srun
                || self.hosts() > 2
            {
                return Err(
                    "--link udp runs one pair (one_one or stream, client/server or --local); \
                     the multi-host patterns, --hosts and --mpirun/--srun run on AF_PACKET: drop --link udp"
                        .into(),
                );
            }
            if self.idle_edp > 0 || self.idle_esp > 0 || self.idle_procs > 1 {
                return Err(
                    "--idle-edp/--idle-esp/--idle-procs measure the packet socket's demultiplexing \
                     and need --link packet"
                        .into(),
                );
            }
            if self.server && !self.local && self.link_peers.is_empty() {
                return Err(
                    "netgauge -a --link udp needs --link-peer CLIENT_HOST:PORT (the client's UDP \
                     address; a client binds port P+1 unless --link-bind): a UDP link takes frames \
                     only from the peers in its table"
                        .into(),
                );
            }
            for p in &self.link_peers {
                crate::transport::udp_link::resolve(p, self.port.wrapping_add(1), "--link-peer")
                    .map_err(|e| e.to_string())?;
            }
            if let (false, false, Some(r)) = (self.server, self.local, &self.remote) {
                crate::transport::udp_link::resolve(
                    r,
                    self.port,
                    "-R (the server's UDP link address)",
                )
                .map_err(|e| e.to_string())?;
            }
        } else if self.link_bind.is_some() || !self.link_peers.is_empty() {
            return Err("--link-bind and --link-peer apply to --link udp".into());
        }
        if !self.local && !self.server && !self.mpi && self.remote.is_none() {
            return Err(
                "the client needs -R: the server's MAC (edp, esp, ctp-edp, comm-edp) or IP (udp, tcp, ctp-udp, comm-udp); \
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

    #[test]
    fn comm_modes_parse_and_resolve_like_ctp() {
        let parse =
            |v: &[&str]| Args::parse_from(std::iter::once("netgauge").chain(v.iter().copied()));
        assert_eq!(
            parse(&["-m", "comm", "-R", "02:00:00:00:00:01"]).resolve_modes(),
            vec![Mode::CommEdp]
        );
        assert_eq!(
            parse(&["-m", "comm", "-R", "198.18.0.1"]).resolve_modes(),
            vec![Mode::CommUdp]
        );
        assert_eq!(
            parse(&["--local", "-m", "comm"]).resolve_modes(),
            vec![Mode::CommUdp, Mode::CommEdp]
        );
        assert_eq!(
            parse(&["--local", "-m", "comm-edp,ctp-edp,edp"]).resolve_modes(),
            vec![Mode::CommEdp, Mode::CtpEdp, Mode::Edp]
        );
        // Every mode's name parses back to it; "all" holds both.
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<ModeArg>(), Ok(ModeArg::One(m)));
        }
        assert!(Mode::ALL.contains(&Mode::CommUdp) && Mode::ALL.contains(&Mode::CommEdp));
        // comm-edp is addressed by MAC and takes --loss; comm-udp does not.
        assert!(Mode::CommEdp.is_ethernet() && !Mode::CommUdp.is_ethernet());
        assert!(!Mode::CommEdp.is_lossy() && !Mode::CommUdp.is_lossy());
        assert!(parse(&["--local", "-m", "comm-edp", "--loss", "1"])
            .validate()
            .is_ok());
        let e = parse(&["--local", "-m", "comm-udp", "--loss", "1"])
            .validate()
            .unwrap_err();
        assert!(e.contains("comm-udp"), "{e}");
    }

    fn parse(v: &[&str]) -> Args {
        Args::parse_from(std::iter::once("netgauge").chain(v.iter().copied()))
    }

    #[test]
    fn faults_are_refused_for_kernel_modes() {
        let e = parse(&["--local", "-m", "edp,udp,tcp", "--loss", "1"])
            .validate()
            .unwrap_err();
        assert!(e.contains("cannot apply to udp, tcp (kernel"), "{e}");
        let e = parse(&["-R", "10.0.0.1", "-m", "ctp", "--dup", "2"])
            .validate()
            .unwrap_err();
        assert!(e.contains("ctp-udp"), "{e}");
        assert_eq!(
            parse(&["--local", "-m", "eth,edp,esp,ctp-edp", "--loss", "1"]).validate(),
            Ok(())
        );
        // No fault asked for: kernel modes are fine.
        assert_eq!(parse(&["--local", "-m", "udp,tcp"]).validate(), Ok(()));
    }

    #[test]
    fn man_page_documents_the_options() {
        let mut out = Vec::new();
        write_man_page(&mut out).unwrap();
        let man = String::from_utf8(out).unwrap();
        assert!(man.starts_with(".ie"), "{}", &man[..200]);
        assert!(man.contains(".TH netgauge 1"), "{man}");
        for opt in [
            "\\-\\-full\\-log",
            "\\-\\-csv",
            "\\-\\-local",
            "netgauge \\-a \\-I eth0",
        ] {
            assert!(man.contains(opt), "{opt} missing: {man}");
        }
    }

    #[test]
    fn grad_follows_netgauge() {
        assert_eq!(parse(&[]).grade, 2, "netgauge's default --grad");
        assert_eq!(parse(&["--grad", "1"]).grade, 1);
        assert_eq!(parse(&["--grade", "3"]).grade, 3, "the old name");
        assert_eq!(parse(&["-g", "4"]).grade, 4);
        let help = <Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert!(help.contains("--grad <GRADE>"), "{help}");
        assert!(
            !help.contains("--grade <"),
            "the alias stays hidden: {help}"
        );
    }

    #[test]
    fn outputs_verbosity_and_help() {
        let a = parse(&["-o", "r.CSV", "-vv"]);
        assert_eq!(a.csv_path(), Some(std::path::Path::new("r.CSV")));
        assert_eq!(a.long_form_path(), None);
        assert_eq!(a.log_level(), "debug");
        let a = parse(&["-o", "r.txt", "--csv", "x.csv"]);
        assert_eq!(a.csv_path(), Some(std::path::Path::new("x.csv")));
        assert_eq!(a.long_form_path(), Some(std::path::Path::new("r.txt")));
        assert_eq!(a.log_level(), "warn");
        assert_ne!(a.port, 5201, "5201 is iperf3's port");
        let help = <Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert!(help.contains("netgauge -a -I eth0"), "{help}");
        assert!(help.contains("--local"), "{help}");
    }

    #[test]
    fn wait_policies_parse_and_label() {
        let w = |s: &str| s.parse::<Wait>().map(|w| w.0);
        assert_eq!(w("busy"), Ok(WaitPolicy::BusyPoll));
        assert_eq!(w("BLOCK"), Ok(WaitPolicy::Block));
        assert_eq!(w("adaptive"), Ok(WaitPolicy::DEFAULT));
        assert_eq!(
            w("adaptive:20"),
            Ok(WaitPolicy::Adaptive {
                spin: Duration::from_micros(20)
            })
        );
        assert!(w("adaptive:x").is_err());
        assert!(w("adaptive:2000000").is_err());
        assert!(w("spin").is_err());
        for s in ["busy", "block", "adaptive:50", "adaptive:0"] {
            assert_eq!(s.parse::<Wait>().unwrap().label(), s);
        }
        assert!(!"adaptive:0".parse::<Wait>().unwrap().spins());
        assert!("adaptive:1".parse::<Wait>().unwrap().spins());
    }

    #[test]
    fn wait_defaults_busy_poll_synonym_and_labels() {
        let a = parse(&["--local"]);
        assert_eq!(a.wait().0, WaitPolicy::DEFAULT);
        assert_eq!(a.wait_label(Mode::Edp), "adaptive:50");
        assert_eq!(a.wait_label(Mode::Udp), "block");
        assert_eq!(a.wait_label(Mode::TcpBp), "so_busy_poll:50");
        let b = parse(&["--local", "--busy-poll"]);
        assert_eq!(b.wait().0, WaitPolicy::BusyPoll);
        assert_eq!(b.wait_label(Mode::Eth), "busy");
        assert_eq!(b.wait_label(Mode::Tcp), "busy");
        assert!(b.validate().is_ok());
        let c = parse(&["--local", "--busy-poll", "--wait", "busy"]);
        assert!(c.validate().is_ok());
        let d = parse(&["--local", "--busy-poll", "--wait", "block"]);
        assert!(d.validate().unwrap_err().contains("--busy-poll"));
    }

    #[test]
    fn default_local_modes_follow_the_wait_policy() {
        // The raw floor first; the kernel busy-poll modes only when our
        // side spins.
        assert_eq!(parse(&["--local"]).resolve_modes()[0], Mode::Eth);
        let block = parse(&["--local", "--wait", "block"]).resolve_modes();
        assert!(!block.iter().any(|m| m.is_kernel_busy_poll()), "{block:?}");
        assert_eq!(block.len(), Mode::ALL.len() - 2);
        let busy = parse(&["--local", "--busy-poll"]).resolve_modes();
        assert!(busy.contains(&Mode::UdpBp) && busy.contains(&Mode::TcpBp));
        // Asked for by name, they run whatever the policy.
        assert_eq!(
            parse(&["--local", "--wait", "block", "-m", "eth,udp-bp,tcp-bp"]).resolve_modes(),
            vec![Mode::Eth, Mode::UdpBp, Mode::TcpBp]
        );
        assert_eq!(
            parse(&["--local", "--wait", "block", "-m", "all"]).resolve_modes(),
            block
        );
    }

    #[test]
    fn multicast_modes_follow_netgauges_conventions() {
        let a = parse(&[
            "-m",
            "mak,norm,raw,esp",
            "-x",
            "1toN",
            "--hosts",
            "3,7",
            "-s",
            "512-1024",
            "-g",
            "1",
            "--loss",
            "5",
            "-c",
            "50",
        ]);
        assert!(a.is_mcast());
        assert_eq!(a.validate(), Ok(()));
        let c = a.mcast_config();
        assert_eq!(
            c.modes,
            vec![
                McastMode::Mak,
                McastMode::Norm,
                McastMode::Raw,
                McastMode::Esp
            ]
        );
        assert_eq!(c.receivers, vec![2, 6]);
        assert_eq!(c.sizes, vec![512, 1024]);
        assert!((c.loss - 0.05).abs() < 1e-12, "percent on the command line");
        assert_eq!(c.count, 50);
        // Without -s: 1024-byte messages, as before.
        assert_eq!(
            parse(&["-m", "mak", "-x", "1toN"]).mcast_config().sizes,
            vec![1024]
        );
        // Every multicast mode parses by its name.
        for m in McastMode::ALL {
            let want = if m == McastMode::Esp {
                ModeArg::One(Mode::Esp)
            } else {
                ModeArg::Mcast(m)
            };
            assert_eq!(m.name().parse::<ModeArg>(), Ok(want));
        }
    }

    #[test]
    fn multicast_runs_are_checked() {
        let err = |v: &[&str]| parse(v).validate().unwrap_err();
        assert!(err(&["-m", "mak,edp", "-x", "1toN"]).contains("run on their own"));
        assert!(err(&["-m", "mak"]).contains("-x 1toN"));
        assert!(err(&["-m", "mak", "-x", "1toN", "--hosts", "17"]).contains("2..=16"));
        assert!(err(&["-m", "mak", "-x", "1toN", "--loss", "60"]).contains("--loss"));
        assert!(err(&["-m", "mak", "-x", "1toN", "--dup", "1"]).contains("loss only"));
        assert!(err(&["-m", "mak", "-x", "1toN", "-c", "5"]).contains("at least 10"));
        assert!(err(&["-m", "mak", "-x", "1toN", "-R", "10.0.0.1"]).contains("drop -a, -R"));
        // A list of hosts is the multicast modes' sweep only.
        assert!(err(&["--local", "-x", "1toN", "--hosts", "3,4"]).contains("one number"));
    }

    #[test]
    fn help_lists_every_mode() {
        let help = <Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        for m in Mode::ALL
            .iter()
            .map(|m| m.name())
            .chain(McastMode::ALL.iter().map(|m| m.name()))
        {
            assert!(help.contains(&format!(" {m}")), "{m} missing: {help}");
        }
    }

    #[test]
    fn idle_options_are_checked() {
        assert!(parse(&["--local", "--idle-procs", "4"]).validate().is_ok());
        assert!(parse(&["--local", "--idle-procs", "0"]).validate().is_err());
        assert!(parse(&["-R", "198.18.0.1", "--idle-procs", "2"])
            .validate()
            .unwrap_err()
            .contains("--local"));
        assert!(parse(&["--local", "--idle-edp", "100000"])
            .validate()
            .is_err());
        assert!(parse(&["--hold"]).validate().is_err());
        assert!(parse(&["--hold", "-I", "lo"]).validate().is_ok());
    }
}
