//! Command line, following spcl/netgauge's conventions (`-m MODE -x PATTERN
//! -s MIN-MAX -c COUNT -g GRADE -o FILE -v -a`) plus the options of this
//! project (`--local`, `--busy-poll`, `--json`, fault injection).

mod check;
mod convert;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::str::FromStr;

use clap::Parser;

use crate::mcast::{self, McastMode};
use crate::modes::{Mode, Wait};
use crate::patterns::Pattern;
use crate::sizes::SizeRange;
use crate::transport::LinkKind;

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

/// Smallest `--mtu`: IPv4's minimum datagram (RFC 791), also the smallest
/// MTU a veth takes; EDP, ESP, CTP and comm work down to it (kernel TCP
/// needs more, see [`Args::validate`]).
pub const MIN_MTU: usize = 68;

/// Environment variable capping -c and --warmup (see
/// [`Args::apply_max_count`]).
pub const MAX_COUNT_ENV: &str = "NETGAUGE_MAX_COUNT";

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
    /// one_one_bidir, ebb, msgrate, stream_bidir). The multicast modes take a
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
    /// in UDP datagrams, `link::UdpLink`: no privilege, crosses
    /// routers). With udp, -R is the server's UDP address HOST\[:PORT\] (port
    /// default -P) and each end's MAC is derived from its UDP address
    /// (`link::derived_mac`).
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

    /// Inject loss with probability P (percent) on both ends of EDP/ESP/CTP-EDP runs;
    /// with the multicast modes, on every receiver's link (0 <= P < 50).
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

    /// Seconds without progress before a run is abandoned with an error
    /// (default 10; for the multicast modes 60, a bound of each run: NORM's
    /// whole run must end within it).
    #[arg(long = "timeout", value_name = "SECONDS")]
    pub timeout_s: Option<f64>,

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

    /// With --local and two hosts: join them by a Linux bridge instead of
    /// a veth pair, the topology of mpirun's and srun's virtual clusters
    /// (comm-osu --provider, --mpirun): the floor of a run over such a
    /// cluster, measured on the same links. A bridge costs every frame a
    /// second veth crossing and the bridge's forwarding.
    #[arg(long = "bridge")]
    pub bridge: bool,

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

    /// How long mak-nak keeps a sent packet after its last transmission,
    /// ms (MAK's default 16: the paper's NAK frees only by this linger, so
    /// a NAK that comes later, e.g. from a receiver descheduled on a loaded
    /// host, finds the packet gone and the receiver reports the source
    /// silent).
    #[arg(
        long = "nak-linger-ms",
        default_value_t = 16,
        value_parser = clap::value_parser!(u64).range(1..),
        help_heading = "Multicast modes"
    )]
    pub nak_linger_ms: u64,

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
