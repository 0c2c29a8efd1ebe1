//! `netgauge --local --hosts N --mpirun`: Open MPI's `mpirun` starts the N
//! ranks (`netgauge --mpi`), one in each host of a virtual cluster, which
//! find each other over MPI and EDP echo ([`crate::mpi`]). Feature `mpi`.
//!
//! How the job reaches the namespaces:
//! - the cluster's hosts are on a bridge; the launching namespace gets a
//!   veth port on that bridge with an address of the cluster's subnet, so
//!   that `mpirun` and its PMIx server are reachable from every host (PMIx
//!   over TCP: `PMIX_MCA_ptl_tcp_remote_connections=1`, restricted to the
//!   subnet; Open MPI's out-of-band and TCP BTL also restricted to it);
//! - each rank is started through `ip netns exec <host of rank r>`, the
//!   rank taken from `OMPI_COMM_WORLD_RANK`.
//!
//! With `--anchor PROGRAM` the Open MPI ping-pong (scripts/ompi-pingpong.c)
//! runs next on ranks 0 and 1 of the same cluster over Open MPI's TCP BTL,
//! and a table puts its p50 beside ours. Needs root (`ip netns`).

use std::io::{self, BufRead, BufReader};
use std::process::{Command, Stdio};

use vcluster::{LaunchCluster, Process};

use crate::cluster::StepRecord;

/// `srun` for `np` ranks of netgauge: each rank initializes MPI in this
/// namespace (PMIx to slurmstepd over loopback), then enters its host
/// (`--rank-netns`); ranks talk MPI over shared memory (vader).
fn srun(job: &LaunchCluster, np: usize, exe: &str, args: &[String]) -> Command {
    let mut c = Command::new("srun");
    c.env("OMPI_MCA_btl", "self,vader")
        .args([
            "-n",
            &np.to_string(),
            "--overcommit",
            "--mpi=pmix",
            "--kill-on-bad-exit=1",
        ])
        .arg(exe)
        .args(args)
        .args(["--rank-netns", job.ns_prefix()])
        .stdin(Stdio::null());
    c
}

/// A launch of netgauge's ranks by `mpirun` or `srun` on a virtual
/// cluster (`--local --hosts N --mpirun|--srun`), converted from the
/// command line by `cli`.
#[derive(Debug, Clone)]
pub struct LaunchConfig {
    /// Ranks, one per host of the cluster; the cluster's MTU; keep its
    /// namespaces after the run.
    pub hosts: usize,
    pub mtu: usize,
    pub keep: bool,
    /// Launch with Slurm's srun instead of mpirun.
    pub srun: bool,
    /// Print the ranks' JSON records instead of their tables.
    pub json: bool,
    /// Open MPI's ping-pong to run beside ours (`--anchor`), with the
    /// count and the largest size it measures.
    pub anchor: Option<std::path::PathBuf>,
    pub count: usize,
    pub max_size: usize,
    /// Every rank's arguments (`--mpi` and the run's options) but `--json`.
    pub rank_args: Vec<String>,
}

/// Runs the launch: netgauge's ranks, then the anchor if asked.
pub fn run(args: &LaunchConfig) -> io::Result<()> {
    let job = LaunchCluster::build("ngmpi", args.hosts, args.mtu, args.keep)?;
    let exe = std::env::current_exe()?;
    let exe = exe
        .to_str()
        .ok_or_else(|| io::Error::other("netgauge's path is not UTF-8"))?
        .to_string();
    if !args.json {
        crate::output::println(&format!(
            "# netgauge --local --hosts {} --{}: namespaces {}0..{}, subnet {}, launcher port {}",
            args.hosts,
            if args.srun { "srun" } else { "mpirun" },
            job.ns_prefix(),
            args.hosts - 1,
            job.subnet(),
            job.launcher_link()
        ))?;
    }
    // With an anchor the records are needed for the side-by-side table.
    let capture = args.anchor.is_some();
    let mut rank_args = args.rank_args.clone();
    if args.json || capture {
        rank_args.push("--json".into());
    }
    let mut cmd = if args.srun {
        let found = Command::new("srun").arg("--version").output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "--srun: no working srun; start a local Slurm with scripts/slurm-local.sh start",
            ));
        }
        srun(&job, args.hosts, &exe, &rank_args)
    } else {
        job.mpirun(args.hosts, &exe, &rank_args)
    };
    cmd.stdout(if capture {
        Stdio::piped()
    } else {
        Stdio::inherit()
    })
    .stderr(Stdio::inherit());
    let mut p = Process::spawn(&mut cmd)?;
    let mut ours: Vec<StepRecord> = Vec::new();
    if capture {
        let out = p.take_stdout().expect("piped");
        for line in BufReader::new(out).lines() {
            let line = line?;
            if args.json {
                crate::output::println(&line)?;
            }
            if let Ok(s) = serde_json::from_str::<StepRecord>(&line) {
                ours.push(s);
            }
        }
    }
    let st = p.wait()?;
    if !st.success() {
        return Err(io::Error::other(format!(
            "mpirun of the netgauge ranks failed ({st})"
        )));
    }
    let Some(anchor) = &args.anchor else {
        return Ok(());
    };
    let anchor = anchor
        .to_str()
        .ok_or_else(|| io::Error::other("--anchor path is not UTF-8"))?;
    let mut cmd = job.mpirun(
        2,
        anchor,
        &[
            "--json".into(),
            args.count.to_string(),
            args.max_size.max(8).to_string(),
        ],
    );
    let out = cmd.stderr(Stdio::inherit()).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "mpirun of the anchor {anchor} failed ({})",
            out.status
        )));
    }
    let theirs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if args.json {
        for t in &theirs {
            crate::output::println(&t.to_string())?;
        }
        return Ok(());
    }
    crate::output::print(&side_by_side(&ours, &theirs))?;
    Ok(())
}

/// The anchor table: per size, each mode's p50 half round-trip (pair
/// 1 -> 0, one_one) and Open MPI TCP's, and each mode's ratio to it.
pub fn side_by_side(ours: &[StepRecord], ompi: &[serde_json::Value]) -> String {
    use std::fmt::Write as _;
    let mut modes: Vec<&str> = Vec::new();
    for s in ours {
        if !modes.contains(&s.mode.as_str()) {
            modes.push(&s.mode);
        }
    }
    let mut out = String::new();
    let _ = write!(
        out,
        "# p50 half round-trip, us: ours vs Open MPI TCP BTL\n# {:>8}",
        "size"
    );
    for m in &modes {
        let _ = write!(out, " {:>10} {:>9}", m, format!("{m}/ompi"));
    }
    let _ = writeln!(out, " {:>10}", "ompi-tcp");
    for o in ompi {
        let (Some(size), Some(p50)) = (o["size"].as_u64(), o["p50_us"].as_f64()) else {
            continue;
        };
        let _ = write!(out, "  {size:>8}");
        for m in &modes {
            let ours = ours
                .iter()
                .find(|s| s.mode == *m && s.size as u64 == size)
                .and_then(|s| s.aggregate.p50_max_us);
            match ours {
                Some(v) => {
                    let _ = write!(out, " {v:>10.2} {:>8.2}x", v / p50);
                }
                None => {
                    let _ = write!(out, " {:>10} {:>9}", "-", "-");
                }
            }
        }
        let _ = writeln!(out, " {p50:>10.2}");
    }
    out
}
