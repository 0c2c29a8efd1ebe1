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
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use vcluster::{Cluster, Process, Topology};

use crate::cli::Args;
use crate::cluster::StepRecord;

/// The shell wrapper that puts rank r into host r's namespace: `$0` is the
/// namespace prefix.
const ENTER_RANK_NS: &str =
    r#"exec ip netns exec "$0${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-$SLURM_PROCID}}" "$@""#;

/// The launch: cluster, the launcher's port on it, mpirun's arguments.
struct Job {
    /// Held for its drop (the namespaces go with it).
    _vc: Cluster,
    root_link: String,
    subnet: String,
    ns_prefix: String,
}

impl Drop for Job {
    fn drop(&mut self) {
        // Also removed with the switch namespace; explicit for clarity.
        let _ = Command::new("ip")
            .args(["link", "del", &self.root_link])
            .stderr(Stdio::null())
            .status();
    }
}

impl Job {
    fn build(args: &Args) -> io::Result<Job> {
        let pid = std::process::id();
        // A /24 of 198.19.0.0/16 per run: concurrent runs do not share the
        // launcher's routes.
        let third = (pid % 250 + 1) as u8;
        let subnet = Ipv4Addr::new(198, 19, third, 0);
        let vc = Cluster::builder("ngmpi")
            .hosts(args.hosts)
            .mtu(args.mtu)
            .topology(Topology::Bridge)
            .subnet(subnet, 24)
            .keep(args.keep)
            .build()?;
        let sw = vc
            .switch_ns()
            .ok_or_else(|| io::Error::other("bridged cluster without a switch"))?
            .to_string();
        let root_link = format!("ngm{}", pid % 1_000_000);
        let peer = format!("ngp{}", pid % 1_000_000);
        let job = Job {
            ns_prefix: vc
                .host(0)
                .ns
                .strip_suffix('0')
                .ok_or_else(|| io::Error::other("unexpected namespace name"))?
                .to_string(),
            _vc: vc,
            root_link: root_link.clone(),
            subnet: format!("{subnet}/24"),
        };
        let mtu = args.mtu.to_string();
        ip(&[
            "link", "add", &root_link, "mtu", &mtu, "type", "veth", "peer", "name", &peer, "netns",
            &sw, "mtu", &mtu,
        ])?;
        ip(&["-n", &sw, "link", "set", &peer, "master", "br0", "up"])?;
        ip(&[
            "addr",
            "add",
            &format!("198.19.{third}.254/24"),
            "dev",
            &root_link,
        ])?;
        ip(&["link", "set", &root_link, "up"])?;
        Ok(job)
    }

    /// `mpirun` for `np` ranks running `program args` in the hosts.
    fn mpirun(&self, np: usize, program: &str, args: &[String]) -> Command {
        let mut c = Command::new("mpirun");
        c.env("PMIX_MCA_ptl_tcp_remote_connections", "1")
            .env("PMIX_MCA_ptl_tcp_if_include", &self.subnet)
            .args([
                "--allow-run-as-root",
                "--oversubscribe",
                "-np",
                &np.to_string(),
            ])
            .args(["--mca", "btl", "self,tcp"])
            // Idle ranks yield the CPU instead of polling at full speed.
            .args(["--mca", "mpi_yield_when_idle", "1"])
            .args(["--mca", "btl_tcp_if_include", &self.subnet])
            .args(["--mca", "oob_tcp_if_include", &self.subnet])
            .args(["-x", "PMIX_MCA_ptl_tcp_remote_connections"])
            .args(["-x", "PMIX_MCA_ptl_tcp_if_include"])
            .args(if std::env::var_os("RUST_LOG").is_some() {
                &["-x", "RUST_LOG"][..]
            } else {
                &[]
            })
            .args(["sh", "-c", ENTER_RANK_NS, &self.ns_prefix, program])
            .args(args)
            .stdin(Stdio::null());
        c
    }
}

impl Job {
    /// `srun` for `np` ranks of netgauge: each rank initializes MPI in this
    /// namespace (PMIx to slurmstepd over loopback), then enters its host
    /// (`--rank-netns`); ranks talk MPI over shared memory (vader).
    fn srun(&self, np: usize, exe: &str, args: &[String]) -> Command {
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
            .args(["--rank-netns", &self.ns_prefix])
            .stdin(Stdio::null());
        c
    }
}

fn ip(a: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(a).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            a.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The rank arguments: everything of the run but the launch options.
fn rank_args(args: &Args, json: bool) -> Vec<String> {
    let modes: Vec<&str> = args.resolve_modes().iter().map(|m| m.name()).collect();
    let mut v: Vec<String> = vec![
        "--mpi".into(),
        "-m".into(),
        modes.join(","),
        "-x".into(),
        args.pattern.name().into(),
        "-s".into(),
        format!("{}-{}", args.size.min, args.size.max),
        "-g".into(),
        args.grade.to_string(),
        "-c".into(),
        args.count.to_string(),
        "--warmup".into(),
        args.warmup.to_string(),
        "-P".into(),
        args.port.to_string(),
        "--timeout".into(),
        args.timeout_s.to_string(),
        "--seed".into(),
        args.seed.to_string(),
        "--wait".into(),
        args.wait().label(),
        "--echo-attempts".into(),
        args.echo_attempts.to_string(),
        "--echo-timeout-ms".into(),
        args.echo_timeout_ms.to_string(),
    ];
    if let Some(i) = &args.iface {
        v.extend(["-I".into(), i.clone()]);
    }
    if json {
        v.push("--json".into());
    }
    for (flag, p) in [
        ("--loss", args.loss),
        ("--dup", args.dup),
        ("--reorder", args.reorder),
    ] {
        if p > 0.0 {
            v.extend([flag.into(), p.to_string()]);
        }
    }
    v
}

/// Runs the launch: netgauge's ranks, then the anchor if asked.
pub fn run(args: &Args) -> io::Result<()> {
    let job = Job::build(args)?;
    let exe = std::env::current_exe()?;
    let exe = exe
        .to_str()
        .ok_or_else(|| io::Error::other("netgauge's path is not UTF-8"))?
        .to_string();
    if !args.json {
        println!(
            "# netgauge --local --hosts {} --{}: namespaces {}0..{}, subnet {}, launcher port {}",
            args.hosts,
            if args.srun { "srun" } else { "mpirun" },
            job.ns_prefix,
            args.hosts - 1,
            job.subnet,
            job.root_link
        );
    }
    // With an anchor the records are needed for the side-by-side table.
    let capture = args.anchor.is_some();
    let rank_args = rank_args(args, args.json || capture);
    let mut cmd = if args.srun {
        let found = Command::new("srun").arg("--version").output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "--srun: no working srun; start a local Slurm with scripts/slurm-local.sh start",
            ));
        }
        job.srun(args.hosts, &exe, &rank_args)
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
                println!("{line}");
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
            args.size.max.max(8).to_string(),
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
            println!("{t}");
        }
        return Ok(());
    }
    print!("{}", side_by_side(&ours, &theirs));
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
