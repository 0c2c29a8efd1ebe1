//! Multi-host patterns on `--local --hosts N`: 1toN, Nto1, one_one_bidir,
//! ebb and msgrate over a virtual cluster of N hosts on a Linux bridge
//! (`vcluster`, the harness the tests use; removed on exit, error and
//! Ctrl-C).
//!
//! A pattern is a set of pairs (server rank, client rank) that run at the
//! same time, each pair one netgauge session (a `netgauge -a` in the
//! server's host, a client in the client's host) of the pattern's two-host
//! pattern (`one_one`, or `stream` for msgrate). For every mode and size
//! the sessions of all pairs start together, one size per launch, so that
//! the steps overlap; the client records are the per-rank figures, and
//! their sums, means and maxima the aggregate ones.
//!
//! Semantics (spcl/netgauge `ptrn_1toN.c`, `ptrn_Nto1.c`, `ptrn_ebb.c`;
//! OSU `osu_mbw_mr`):
//! - `1toN`: rank 0 is the client of every other rank: it sends to all
//!   N-1 peers at once and each echoes.
//! - `Nto1`: every other rank is a client of rank 0 (incast).
//! - `one_one_bidir`: ranks 0 and 1 are each the client of the other.
//! - `ebb`: each size step draws a random perfect matching of the ranks
//!   (seeded by `--seed` and the step; with N odd one rank sits out); all
//!   pairs ping-pong at once; the aggregate is the mean per-pair bandwidth
//!   (netgauge's effective bisection bandwidth) besides the sum.
//! - `msgrate`: ranks 0..N/2 stream to ranks N/2..N at once (osu_mbw_mr
//!   pairs); messages per second per pair and summed.
//!
//! Departure from netgauge: the "1" side of 1toN/Nto1 is one netgauge
//! process per peer in rank 0's host (each with its own socket, sharing
//! the host's interface), not one MPI process multiplexing all peers.

use std::io::{self, Read};
use std::process::Stdio;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use vcluster::{Cluster, Host, Process, Topology};

use crate::modes::{Mode, Wait};
use crate::output as out;
use crate::patterns::Pattern;
use crate::report::{Failure, Record};
use crate::sizes::size_steps;
use crate::sweep::Sweep;

/// Most hosts of `--hosts`.
pub const MAX_HOSTS: usize = 64;

/// A `--local --hosts N` run of a multi-host pattern, converted from the
/// command line by `cli`.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Hosts of the virtual cluster (2..=[`MAX_HOSTS`]).
    pub hosts: usize,
    /// The modes (in order), the multi-host pattern, the sizes (`-s`,
    /// `-g`) and the iterations per size and pair.
    pub sweep: Sweep,
    /// Seed of ebb's pairings.
    pub seed: u64,
    /// First port; each step's pairs take ports after it.
    pub port: u16,
    /// The ethertype of eth sessions (a second one for reverse pairs).
    pub eth_type: u16,
    /// The cluster's MTU, bytes; keep the namespaces after the run.
    pub mtu: usize,
    pub keep: bool,
    /// Join two hosts by a bridge instead of a veth pair (`--bridge`;
    /// more hosts always have one).
    pub bridge: bool,
    /// Print JSON records instead of text; `verbose` > 0 adds a row per pair.
    pub json: bool,
    pub verbose: u8,
    /// Print the participants' host names first.
    pub hostnames: bool,
    /// How our modes wait (for the header line).
    pub wait: Wait,
    /// The options both ends of a session get after `-m -P -x` (see
    /// [`crate::local::session_args`]).
    pub child_args: Vec<String>,
}

/// How `--local` joins its hosts: a bridge with `--bridge`, else a veth
/// pair for two hosts and a bridge for more.
pub(crate) fn topology(bridge: bool) -> Topology {
    if bridge {
        Topology::Bridge
    } else {
        Topology::Auto
    }
}

/// The pairs (server rank, client rank) of `pattern` on `n` ranks at size
/// step `step` (ebb draws its pairing from `seed` and `step`).
pub fn pairs(pattern: Pattern, n: usize, seed: u64, step: usize) -> Vec<(usize, usize)> {
    match pattern {
        Pattern::OneToN => (1..n).map(|i| (i, 0)).collect(),
        Pattern::NToOne => (1..n).map(|i| (0, i)).collect(),
        Pattern::OneOneBidir | Pattern::StreamBidir => vec![(1, 0), (0, 1)],
        Pattern::Ebb => {
            let mut ranks: Vec<usize> = (0..n).collect();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                seed ^ (step as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            );
            ranks.shuffle(&mut rng);
            ranks.chunks_exact(2).map(|c| (c[0], c[1])).collect()
        }
        Pattern::MsgRate => (0..n / 2).map(|i| (i + n / 2, i)).collect(),
        Pattern::OneOne | Pattern::Stream => vec![(0, 1)],
    }
}

/// One pair's result: the client's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairRecord {
    /// Rank of the client (the sender of pings, or of the stream).
    pub client: usize,
    /// Rank of the server (the echoing or receiving side).
    pub server: usize,
    /// Messages per second of this pair: round trips per second (one_one:
    /// 1 / (2 x p50 half round-trip)) or messages received per second
    /// (stream).
    pub msgs_per_s: f64,
    pub record: Record,
}

/// Aggregate figures of a step over all its pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub pairs: usize,
    /// Largest p50 half round-trip of the pairs, us (one_one).
    pub p50_max_us: Option<f64>,
    /// Mean p50 half round-trip of the pairs, us (one_one).
    pub p50_mean_us: Option<f64>,
    /// Sum of the pairs' throughput, Mbit/s (10^6 bit/s).
    pub mbit_s_sum: f64,
    /// Mean throughput per pair, Mbit/s (netgauge's ebb figure).
    pub mbit_s_mean: f64,
    /// Sum of the pairs' messages per second.
    pub msgs_per_s_sum: f64,
    /// Mean loss fraction of the pairs (datagram modes), 0..1.
    pub loss_mean: Option<f64>,
    /// Pings resent, all pairs (datagram one_one).
    pub resends: Option<u64>,
}

/// The result of one mode and size of a multi-host pattern: one JSON
/// object (`--json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub pattern: String,
    pub mode: String,
    /// Message size, bytes.
    pub size: usize,
    /// Hosts of the cluster.
    pub hosts: usize,
    pub pairs: Vec<PairRecord>,
    pub aggregate: Aggregate,
    /// Why the step has no result (a pair's client or server failed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

/// Messages per second of one record (see [`PairRecord::msgs_per_s`]).
pub(crate) fn msgs_per_s(r: &Record) -> f64 {
    match r.lat_us {
        Some(l) if l.p50 > 0.0 => 1e6 / (2.0 * l.p50),
        Some(_) => 0.0,
        None if r.size > 0 => r.mb_s * 1e6 / r.size as f64,
        None => 0.0,
    }
}

/// The aggregate of `pairs`.
pub fn aggregate(pairs: &[PairRecord]) -> Aggregate {
    let n = pairs.len();
    if n == 0 {
        return Aggregate::default();
    }
    let p50s: Vec<f64> = pairs
        .iter()
        .filter_map(|p| p.record.lat_us.map(|l| l.p50))
        .collect();
    let losses: Vec<f64> = pairs.iter().filter_map(|p| p.record.loss).collect();
    let resends: Vec<u64> = pairs.iter().filter_map(|p| p.record.resends).collect();
    let mbit_s_sum: f64 = pairs.iter().map(|p| p.record.mbit_s).sum();
    Aggregate {
        pairs: n,
        p50_max_us: (!p50s.is_empty()).then(|| p50s.iter().copied().fold(0.0, f64::max)),
        p50_mean_us: (!p50s.is_empty()).then(|| p50s.iter().sum::<f64>() / p50s.len() as f64),
        mbit_s_sum,
        mbit_s_mean: mbit_s_sum / n as f64,
        msgs_per_s_sum: pairs.iter().map(|p| p.msgs_per_s).sum(),
        loss_mean: (!losses.is_empty()).then(|| losses.iter().sum::<f64>() / losses.len() as f64),
        resends: (!resends.is_empty()).then(|| resends.iter().sum()),
    }
}

/// Runs `--local --hosts N -x <multi-host pattern>`: builds the cluster,
/// runs every mode and size, prints the per-pair figures (-v, --json) and
/// the table of the aggregates.
///
/// A step that fails is reported in its cell and the run goes on. Errors:
/// a message naming the failed steps once everything was printed;
/// `Interrupted` after Ctrl-C (what was measured is printed first);
/// `BrokenPipe` when stdout closed; building the cluster.
pub fn run(args: &ClusterConfig) -> io::Result<Vec<StepRecord>> {
    let n = args.hosts;
    let vc = Cluster::builder("netgauge")
        .hosts(n)
        .mtu(args.mtu)
        .topology(topology(args.bridge))
        .keep(args.keep)
        .build()?;
    let exe = std::env::current_exe()?;
    let exe = exe
        .to_str()
        .ok_or_else(|| io::Error::other("netgauge's path is not UTF-8"))?;
    let modes = args.sweep.modes.clone();
    let sizes = size_steps(args.sweep.size, args.sweep.grade);
    if args.hostnames {
        let me = crate::output::hostname();
        for (i, h) in vc.hosts().iter().enumerate() {
            out::println(&format!(
                "# rank {i}: host {me}, namespace {}, {} {} {}",
                h.ns, h.iface, h.mac, h.ip
            ))?;
        }
    }
    if !args.json {
        out::println(&format!(
            "# netgauge --local --hosts {n}: pattern {}, {} on a {}, MTU {}, {} iterations per size, wait {}",
            args.sweep.pattern.name(),
            vc.hosts()
                .iter()
                .enumerate()
                .map(|(i, h)| format!("rank {i} {} {}", h.mac, h.ip))
                .collect::<Vec<_>>()
                .join(", "),
            if n > 2 || args.bridge {
                "bridge"
            } else {
                "veth pair"
            },
            vc.mtu(),
            args.sweep.count,
            args.wait.label()
        ))?;
        if args.verbose > 0 {
            out::println(&format!(
                "# {:<8} {:>8} {:>7} {:>10} {:>10} {:>12} {:>12} {:>8}",
                "mode", "size", "pair", "p50(us)", "p99(us)", "Mbit/s", "msg/s", "resent%"
            ))?;
        }
    }
    let progress = crate::output::progress::Progress::new(
        crate::output::progress::wanted(args.json),
        (modes.len() * sizes.len()) as u64,
    );
    let mut steps = Vec::new();
    'modes: for (mi, &mode) in modes.iter().enumerate() {
        let started = std::time::Instant::now();
        let mut failed = 0;
        for (si, &size) in sizes.iter().enumerate() {
            if crate::interrupt::requested() {
                break 'modes;
            }
            progress.running(&format!("{} {size} B", mode.name()));
            let pairs = pairs(args.sweep.pattern, n, args.seed, si);
            let base = ((mi * sizes.len() + si) * pairs.len()) % 20_000;
            let (recs, error) = match run_step(args, &vc, exe, mode, size, &pairs, base as u16) {
                Ok(recs) => (recs, None),
                Err(_) if crate::interrupt::requested() => break 'modes,
                Err(e) => {
                    failed += 1;
                    (Vec::new(), Some(e.to_string()))
                }
            };
            let step = StepRecord {
                pattern: args.sweep.pattern.name().into(),
                mode: mode.name().into(),
                size,
                hosts: n,
                aggregate: aggregate(&recs),
                pairs: recs,
                error,
            };
            progress.tick(&format!("{} {size} B", mode.name()));
            print_step(args.json, args.verbose, &step, &progress)?;
            steps.push(step);
        }
        if !args.json && !progress.shown() {
            progress.eprintln(&format!(
                "netgauge: {}: {} of {} sizes measured in {:.1} s{}",
                mode.name(),
                sizes.len() - failed,
                sizes.len(),
                started.elapsed().as_secs_f64(),
                if failed > 0 {
                    format!(", {failed} failed")
                } else {
                    String::new()
                }
            ));
        }
    }
    progress.finish();
    let failures: Vec<Failure> = steps
        .iter()
        .filter_map(|s| {
            s.error.as_ref().map(|e| Failure {
                mode: s.mode.clone(),
                pattern: s.pattern.clone(),
                size: s.size,
                error: e.clone(),
            })
        })
        .collect();
    if !args.json {
        out::println("")?;
        if args.verbose > 0 {
            out::print(&summary(&steps))?;
            out::println("")?;
        }
        out::print(&table(args.sweep.pattern, &steps, &failures))?;
        if crate::interrupt::requested() {
            out::println("# interrupted (Ctrl-C): the sizes and modes after the last result were not measured")?;
        }
    }
    if crate::interrupt::requested() {
        return Err(crate::interrupt::error());
    }
    if !failures.is_empty() {
        return Err(io::Error::other(crate::local::failure_summary(
            &failures,
            modes.len() * sizes.len(),
        )));
    }
    Ok(steps)
}

/// The table the run ends with (see [`crate::output::pivot::table`]): per
/// size and mode the pattern's headline aggregate with its ratio to the
/// kernel reference: the slowest pair's p50 (1toN, Nto1, one_one_bidir),
/// the mean Mbit/s per pair (ebb, netgauge's effective bisection
/// bandwidth), the messages per second of all pairs (msgrate), or the
/// Mbit/s of both directions together (stream_bidir, OSU osu_bibw's
/// figure).
pub(crate) fn table(pattern: Pattern, steps: &[StepRecord], failures: &[Failure]) -> String {
    use crate::output::pivot::{Entry, Shape};
    let (what, short, higher): (&str, &str, bool) = match pattern {
        Pattern::Ebb => ("mean throughput per pair (Mbit/s)", "Mbit/s per pair", true),
        Pattern::MsgRate => ("messages per second, all pairs", "msg/s", true),
        Pattern::StreamBidir => ("throughput, both directions (Mbit/s)", "Mbit/s", true),
        _ => ("p50 half round-trip of the slowest pair (us)", "p50", false),
    };
    let entries: Vec<Entry> = steps
        .iter()
        .filter(|s| s.error.is_none() && !s.pairs.is_empty())
        .map(|s| {
            let a = &s.aggregate;
            let value = match pattern {
                Pattern::Ebb => a.mbit_s_mean,
                Pattern::MsgRate => a.msgs_per_s_sum,
                Pattern::StreamBidir => a.mbit_s_sum,
                _ => a.p50_max_us.unwrap_or(0.0),
            };
            let cpu: Vec<f64> = s
                .pairs
                .iter()
                .filter_map(|p| {
                    Some(p.record.cpu_us_per_iter_client? + p.record.cpu_us_per_iter_server?)
                })
                .collect();
            Entry {
                mode: s.mode.clone(),
                size: s.size,
                value,
                cpu_us: (!cpu.is_empty()).then(|| cpu.iter().sum::<f64>() / cpu.len() as f64),
            }
        })
        .collect();
    let mut waits: Vec<(String, String)> = Vec::new();
    for s in steps {
        if let Some(p) = s.pairs.first() {
            if !waits.iter().any(|(m, _)| *m == s.mode) && !p.record.wait.is_empty() {
                waits.push((s.mode.clone(), p.record.wait.clone()));
            }
        }
    }
    let shape = Shape {
        pattern: pattern.name(),
        what,
        short,
        higher_is_better: higher,
        waits,
    };
    crate::output::pivot::table(&shape, &entries, failures)
}

/// Prints one step: a JSON line, or with -v a row per pair and the
/// aggregate row (a failed step: its error).
pub(crate) fn print_step(
    json: bool,
    verbose: u8,
    s: &StepRecord,
    progress: &crate::output::progress::Progress,
) -> io::Result<()> {
    if json {
        return progress.println(&serde_json::to_string(s).map_err(io::Error::other)?);
    }
    if verbose == 0 {
        return Ok(());
    }
    if let Some(e) = &s.error {
        return progress.println(&format!("  {:<8} {:>8}   FAILED: {e}", s.mode, s.size));
    }
    let cell = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
    for p in &s.pairs {
        let r = &p.record;
        progress.println(&format!(
            "  {:<8} {:>8} {:>7} {:>10} {:>10} {:>12.1} {:>12.0} {:>8}",
            s.mode,
            s.size,
            format!("{}->{}", p.client, p.server),
            cell(r.lat_us.map(|l| l.p50)),
            cell(r.lat_us.map(|l| l.p99)),
            r.mbit_s,
            p.msgs_per_s,
            cell(r.loss.map(|l| l * 100.0)),
        ))?;
    }
    let a = &s.aggregate;
    progress.println(&format!(
        "  {:<8} {:>8} {:>7} {:>10} {:>10} {:>12.1} {:>12.0} {:>8}   (p50 max; Mbit/s and msg/s summed)",
        s.mode,
        s.size,
        format!("all{}", a.pairs),
        cell(a.p50_max_us),
        "-",
        a.mbit_s_sum,
        a.msgs_per_s_sum,
        cell(a.loss_mean.map(|l| l * 100.0)),
    ))
}

/// The long table of -v: per mode and size, the aggregate figures.
pub fn summary(steps: &[StepRecord]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# aggregate: {:<8} {:>8} {:>6} {:>13} {:>13} {:>12} {:>14} {:>12}",
        "mode",
        "size",
        "pairs",
        "p50 mean(us)",
        "p50 max(us)",
        "Mbit/s sum",
        "Mbit/s /pair",
        "msg/s sum"
    );
    for st in steps {
        let a = &st.aggregate;
        if st.error.is_some() {
            let _ = writeln!(s, "  {:<19} {:>8}  FAILED", st.mode, st.size);
            continue;
        }
        let c = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "  {:<19} {:>8} {:>6} {:>13} {:>13} {:>12.1} {:>14.1} {:>12.0}",
            st.mode,
            st.size,
            a.pairs,
            c(a.p50_mean_us),
            c(a.p50_max_us),
            a.mbit_s_sum,
            a.mbit_s_mean,
            a.msgs_per_s_sum
        );
    }
    s
}

/// How long after spawning the first client of a step all clients start,
/// ms (plus 10 ms per pair): enough to start the processes and connect.
const START_DELAY_MS: u64 = 300;

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Sleeps until `ms` since the Unix epoch (`--start-at`); returns at once
/// when that time has passed.
pub fn sleep_until_unix_ms(ms: u64) {
    let now = unix_ms();
    if ms > now {
        std::thread::sleep(Duration::from_millis(ms - now));
    }
}

/// The address a client of `mode` gives with -R for a server on `h`.
fn remote_of(mode: Mode, h: &Host) -> String {
    if mode.is_ethernet() {
        h.mac.to_string()
    } else {
        h.ip.to_string()
    }
}

/// The arguments both ends of a pair's session share: `--local`'s, with
/// the pattern's two-host pattern.
fn session_args(args: &ClusterConfig, mode: Mode, port: u16) -> Vec<String> {
    crate::local::session_args(&args.child_args, mode, args.sweep.pattern.session(), port)
}

/// The ethertype of each pair's eth session: `base`, except for a pair
/// between the same two hosts as an earlier pair (one_one_bidir's reverse
/// pair), which takes [`crate::transport::eth::SECOND_ETHERTYPE`] (or
/// `base`'s successor when `base` is that one), so that the sessions'
/// frames stay apart (eth frames carry no port).
pub(crate) fn eth_types(base: u16, pairs: &[(usize, usize)]) -> Vec<u16> {
    use crate::transport::eth::SECOND_ETHERTYPE;
    let second = if base == SECOND_ETHERTYPE {
        base.wrapping_add(1)
    } else {
        SECOND_ETHERTYPE
    };
    let same = |a: (usize, usize), b: (usize, usize)| a == b || a == (b.1, b.0);
    pairs
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            if pairs[..k].iter().any(|&q| same(p, q)) {
                second
            } else {
                base
            }
        })
        .collect()
}

/// Runs one size of one mode on every pair at once. `base` offsets the
/// ports (pair k uses `-P port + base + k`) so that consecutive steps do
/// not meet a previous step's socket.
fn run_step(
    args: &ClusterConfig,
    vc: &Cluster,
    exe: &str,
    mode: Mode,
    size: usize,
    pairs: &[(usize, usize)],
    base: u16,
) -> io::Result<Vec<PairRecord>> {
    let mut servers = Vec::new();
    // Known to Ctrl-C's handler while the step runs.
    let mut tracked = Vec::new();
    let eth_types = eth_types(args.eth_type, pairs);
    let eth_args = |k: usize, client: usize| -> Vec<String> {
        if mode != Mode::Eth {
            return Vec::new();
        }
        // Both ends: the pair's ethertype; the server: its one client.
        let mut v = vec!["--eth-type".into(), format!("{:#06x}", eth_types[k])];
        if client != usize::MAX {
            v.extend(["-R".into(), vc.host(client).mac.to_string()]);
        }
        v
    };
    for (k, &(srv, cli)) in pairs.iter().enumerate() {
        let port = args.port.wrapping_add(base).wrapping_add(k as u16);
        let h = vc.host(srv);
        let mut c = h.command(exe);
        c.args(["-a", "--once"])
            .args(session_args(args, mode, port))
            .args(eth_args(k, cli))
            .args(["-I", &h.iface])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let p = Process::spawn(&mut c)?;
        tracked.push(crate::interrupt::Tracked::new(p.id()));
        servers.push(p);
    }
    // Every client connects, then waits for the common start.
    let start = unix_ms() + START_DELAY_MS + 10 * pairs.len() as u64;
    let mut clients = Vec::new();
    for (k, &(srv, cli)) in pairs.iter().enumerate() {
        let port = args.port.wrapping_add(base).wrapping_add(k as u16);
        let h = vc.host(cli);
        let mut c = h.command(exe);
        c.args(session_args(args, mode, port))
            .args(eth_args(k, usize::MAX))
            .args(["-I", &h.iface])
            .args(["-R", &remote_of(mode, vc.host(srv)), "--json"])
            .args(["-s", &size.to_string(), "-c", &args.sweep.count.to_string()])
            .args(["--warmup", &args.sweep.warmup.to_string()])
            .args(["--start-at", &start.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let p = Process::spawn(&mut c)?;
        tracked.push(crate::interrupt::Tracked::new(p.id()));
        clients.push(p);
    }
    let mut out = Vec::new();
    let mut failures = Vec::new();
    for (k, client) in clients.iter_mut().enumerate() {
        let (srv, cli) = pairs[k];
        let mut text = String::new();
        if let Some(mut o) = client.take_stdout() {
            o.read_to_string(&mut text)?;
        }
        let status = client.wait()?;
        if !status.success() {
            failures.push(format!(
                "client rank {cli} -> rank {srv} failed ({status}): {}",
                client.read_stderr().trim()
            ));
            continue;
        }
        let rec = text
            .lines()
            .filter(|l| l.trim_start().starts_with('{') && !l.contains("\"metadata\""))
            .map(serde_json::from_str::<Record>)
            .next()
            .ok_or_else(|| {
                io::Error::other(format!("client rank {cli} -> rank {srv} printed no record"))
            })?
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad JSON: {e}")))?;
        out.push(PairRecord {
            client: cli,
            server: srv,
            msgs_per_s: msgs_per_s(&rec),
            record: rec,
        });
    }
    for (k, server) in servers.iter_mut().enumerate() {
        let (srv, cli) = pairs[k];
        let failed_client = !failures.is_empty();
        let limit = if failed_client {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(5)
        };
        match server.wait_timeout(limit)? {
            Some(st) if st.success() => {}
            Some(st) => failures.push(format!(
                "server rank {srv} (client rank {cli}) failed ({st}): {}",
                server.read_stderr().trim()
            )),
            None => {
                server.kill();
                if !failed_client {
                    tracing::warn!(
                        "{} server on rank {srv} did not exit after BYE; stopped it",
                        mode.name()
                    );
                }
            }
        }
    }
    if !failures.is_empty() {
        return Err(io::Error::other(failures.join("; ")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairings_follow_netgauge() {
        assert_eq!(pairs(Pattern::OneToN, 4, 1, 0), [(1, 0), (2, 0), (3, 0)]);
        assert_eq!(pairs(Pattern::NToOne, 3, 1, 0), [(0, 1), (0, 2)]);
        assert_eq!(pairs(Pattern::OneOneBidir, 2, 1, 0), [(1, 0), (0, 1)]);
        assert_eq!(pairs(Pattern::StreamBidir, 2, 1, 0), [(1, 0), (0, 1)]);
        assert_eq!(Pattern::StreamBidir.session(), Pattern::Stream);
        assert_eq!(pairs(Pattern::MsgRate, 6, 1, 0), [(3, 0), (4, 1), (5, 2)]);
        // ebb: a perfect matching, different per step, same per seed.
        for n in [2, 5, 8] {
            let p = pairs(Pattern::Ebb, n, 7, 3);
            assert_eq!(p.len(), n / 2);
            let mut seen: Vec<usize> = p.iter().flat_map(|&(a, b)| [a, b]).collect();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), 2 * (n / 2), "{p:?}");
            assert_eq!(p, pairs(Pattern::Ebb, n, 7, 3));
        }
        let draws: Vec<_> = (0..8).map(|s| pairs(Pattern::Ebb, 8, 7, s)).collect();
        assert!(draws.iter().any(|d| d != &draws[0]), "{draws:?}");
    }

    #[test]
    fn eth_sessions_between_the_same_hosts_get_their_own_ethertype() {
        use crate::transport::eth::{ETHERTYPE, SECOND_ETHERTYPE};
        let bidir = pairs(Pattern::OneOneBidir, 2, 1, 0);
        assert_eq!(eth_types(ETHERTYPE, &bidir), [ETHERTYPE, SECOND_ETHERTYPE]);
        let one_to_n = pairs(Pattern::OneToN, 5, 1, 0);
        assert_eq!(eth_types(ETHERTYPE, &one_to_n), [ETHERTYPE; 4]);
        assert_eq!(
            eth_types(SECOND_ETHERTYPE, &bidir),
            [SECOND_ETHERTYPE, SECOND_ETHERTYPE + 1]
        );
    }

    #[test]
    fn aggregates_sum_rates_and_take_the_slowest_latency() {
        let rec = |p50: f64, mbit: f64, loss: Option<f64>| {
            let s = crate::stats::Summary {
                min: p50,
                p50,
                p90: p50,
                p99: p50,
                max: p50,
                avg: p50,
                stddev: 0.0,
                outliers: 0,
            };
            let r = Record {
                mode: "edp".into(),
                pattern: "one_one".into(),
                size: 100,
                iterations: 10,
                busy_poll: false,
                wait: "block".into(),
                lat_us: Some(s),
                cpu_us_per_iter_client: None,
                cpu_us_per_iter_server: None,
                mbit_s: mbit,
                mb_s: mbit / 8.0,
                loss,
                idle_edp_sockets: 0,
                idle_esp_listeners: 0,
                procs_per_host: 1,
                send_us: None,
                transport_stats: None,
                resends: loss.map(|_| 2),
            };
            PairRecord {
                client: 0,
                server: 1,
                msgs_per_s: msgs_per_s(&r),
                record: r,
            }
        };
        let ps = [rec(10.0, 80.0, Some(0.1)), rec(30.0, 20.0, Some(0.3))];
        let a = aggregate(&ps);
        assert_eq!(a.pairs, 2);
        assert_eq!(a.p50_max_us, Some(30.0));
        assert_eq!(a.p50_mean_us, Some(20.0));
        assert_eq!(a.mbit_s_sum, 100.0);
        assert_eq!(a.mbit_s_mean, 50.0);
        // 1 / (2 x 10 us) + 1 / (2 x 30 us) round trips per second.
        assert!((a.msgs_per_s_sum - (50_000.0 + 50_000.0 / 3.0)).abs() < 1e-6);
        assert!((a.loss_mean.unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(a.resends, Some(4));
        let j = serde_json::to_value(StepRecord {
            pattern: "1toN".into(),
            mode: "edp".into(),
            size: 100,
            hosts: 3,
            pairs: ps.to_vec(),
            aggregate: a,
            error: None,
        })
        .unwrap();
        assert_eq!(j["pairs"][1]["record"]["lat_us"]["p50"], 30.0);
        assert_eq!(j["aggregate"]["mbit_s_sum"], 100.0);
    }
}
