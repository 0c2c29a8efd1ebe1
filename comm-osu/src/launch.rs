//! `--local N`: every rank started here, each in its own process, and with
//! `--ompi` the Open MPI program after them on the same hosts.
//!
//! - `--link udp`: the ranks on loopback ports that were free a moment
//!   before (unprivileged); Open MPI over its TCP BTL on `lo`;
//! - `--link edp`: a virtual cluster of N namespaces on a bridge
//!   (`vcluster`), rank r in host r (`ip netns exec`), on its interface;
//!   Open MPI started by `mpirun` in the namespaces over its TCP BTL on the
//!   same bridge (`vcluster::LaunchCluster`, as `netgauge --mpirun`: a veth
//!   from here into the bridge, PMIx over TCP on the cluster's subnet,
//!   rank r entering host r).
//!
//! Every process is stopped on drop, SIGINT and SIGTERM (`vcluster::Process`),
//! and the namespaces are removed with the cluster.

use std::io::Read;
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vcluster::{LaunchCluster, Process};

use crate::{compare, Args, Link};

/// Runs every rank of `a`'s benchmark, then Open MPI's with `--ompi`.
pub fn local(a: &Args, n: usize) -> Result<(), String> {
    if n < a.bench.min_ranks() {
        return Err(format!(
            "{} needs at least {} ranks",
            a.bench.name(),
            a.bench.min_ranks()
        ));
    }
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let limit = Duration::from_secs(a.timeout.saturating_mul(20));
    match a.link {
        Link::Udp => {
            let addrs = free_loopback(n)?.join(",");
            let cmds = (0..n)
                .map(|r| {
                    let mut c = Command::new(&exe);
                    c.args(a.bench_args())
                        .args(["--link", "udp", "--hosts", &addrs, "--rank"])
                        .arg(r.to_string());
                    c
                })
                .collect();
            let ours = run_ranks(cmds, limit)?;
            print!("{ours}");
            if let Some(prog) = &a.ompi {
                let mut m = vcluster::mpirun_base(n);
                m.args(["--mca", "btl_tcp_if_include", "lo"])
                    .arg(prog)
                    .args(ompi_args(a));
                finish_ompi(a, "comm over UDP", &ours, m, limit)?;
            }
        }
        Link::Edp => {
            let job = LaunchCluster::build("osu", n, a.mtu, false)
                .map_err(|e| format!("virtual cluster of {n} hosts (needs root): {e}"))?;
            let macs: Vec<String> = job
                .cluster()
                .hosts()
                .iter()
                .map(|h| h.mac.to_string())
                .collect();
            let macs = macs.join(",");
            let cmds = job
                .cluster()
                .hosts()
                .iter()
                .map(|h| {
                    let mut c = h.command(&exe);
                    c.args(a.bench_args())
                        .args(["--link", "edp", "--iface", &h.iface, "--hosts", &macs])
                        .args(["--port", &a.port.to_string(), "--rank"])
                        .arg(h.index.to_string());
                    c
                })
                .collect();
            let ours = run_ranks(cmds, limit)?;
            print!("{ours}");
            if let Some(prog) = &a.ompi {
                let m = job.mpirun(n, prog, &ompi_args(a));
                finish_ompi(a, "comm over EDP", &ours, m, limit)?;
            }
        }
    }
    Ok(())
}

fn finish_ompi(
    a: &Args,
    label: &str,
    ours: &str,
    m: Command,
    limit: Duration,
) -> Result<(), String> {
    let theirs = run_ranks(vec![m], limit).map_err(|e| format!("Open MPI: {e}"))?;
    print!("{theirs}");
    print!("{}", compare::table(a.bench, label, ours, &theirs));
    Ok(())
}

/// The Open MPI program's arguments: BENCH MIN MAX ITERS WARMUP WINDOW.
pub(crate) fn ompi_args(a: &Args) -> Vec<String> {
    vec![
        a.bench.name().into(),
        a.sizes.0.to_string(),
        a.sizes.1.to_string(),
        a.iterations.to_string(),
        a.warmup.to_string(),
        a.window.to_string(),
    ]
}

/// An OSU micro-benchmark binary's arguments (OMB's options): sizes,
/// iterations and warm-up (OMB applies its own large-message rule), and the
/// window of the bandwidth tests.
pub(crate) fn omb_args(a: &Args) -> Vec<String> {
    let mut v = vec![
        "-m".into(),
        format!("{}:{}", a.sizes.0, a.sizes.1),
        "-i".into(),
        a.iterations.to_string(),
        "-x".into(),
        a.warmup.to_string(),
    ];
    let prog = a.ompi.as_deref().unwrap_or_default();
    if ["osu_bw", "osu_bibw", "osu_mbw_mr"]
        .iter()
        .any(|b| prog.ends_with(b))
    {
        v.extend(["-W".into(), a.window.to_string()]);
    }
    v
}

/// `n` loopback `ip:port`s whose ports were free a moment ago.
fn free_loopback(n: usize) -> Result<Vec<String>, String> {
    let socks = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("finding free UDP ports: {e}"))?;
    socks
        .iter()
        .map(|s| s.local_addr().map(|a| a.to_string()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())
}

/// Starts `cmds` (the first one's stdout is captured, the others'
/// discarded, stderr passed through) and waits for all; returns the first
/// one's output. A rank that fails or a run longer than `limit` stops
/// every rank and gives an error.
pub(crate) fn run_ranks(cmds: Vec<Command>, limit: Duration) -> Result<String, String> {
    let mut procs = Vec::new();
    let mut reader = None;
    for (r, mut c) in cmds.into_iter().enumerate() {
        c.stdin(Stdio::null())
            .stdout(if r == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::inherit());
        let mut p = Process::spawn(&mut c).map_err(|e| e.to_string())?;
        if r == 0 {
            let mut out = p.take_stdout().expect("piped");
            reader = Some(std::thread::spawn(move || {
                let mut s = String::new();
                let _ = out.read_to_string(&mut s);
                s
            }));
        }
        procs.push(p);
    }
    let start = Instant::now();
    let mut done = vec![false; procs.len()];
    while done.iter().any(|d| !d) {
        for (r, p) in procs.iter_mut().enumerate() {
            if done[r] {
                continue;
            }
            if let Some(st) = p.try_wait().map_err(|e| e.to_string())? {
                if !st.success() {
                    // Dropping `procs` stops the others.
                    return Err(format!("rank {r} failed ({st})"));
                }
                done[r] = true;
            }
        }
        if start.elapsed() > limit {
            return Err(format!("ranks still running after {limit:?}: stopped"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(reader
        .map(|t| t.join().unwrap_or_default())
        .unwrap_or_default())
}
