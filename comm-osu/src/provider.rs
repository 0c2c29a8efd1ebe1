//! `--provider DIR`: the Open MPI program (benches/osu/osu-ompi.c) under
//! Open MPI twice on the same hosts, side by side: over Open MPI's TCP BTL
//! (`pml ob1`, `btl self,tcp`) and over the libfabric provider `clusternet`
//! (`pml cm`, `mtl ofi`, libfabric loading `DIR/libclusternet-fi.so`, which
//! scripts/build-provider.sh puts there), alternating TCP, provider, TCP,
//! ... `--repeat` times, with the ratio provider / TCP per size and run
//! (ratios within one run: absolute times on a shared machine swing).
//!
//! The hosts are those of `--local N` (`launch.rs`): loopback with `--link
//! udp` (the provider's UDP link, `FI_CLUSTERNET_LINK=udp` on `lo`,
//! unprivileged) or a virtual cluster with `--link edp` (the provider on
//! raw Ethernet; root).

use std::process::Command;
use std::time::Duration;

use vcluster::LaunchCluster;

use crate::{compare, launch, Args, Link};

/// Runs `prog` over the TCP BTL and over the provider in `fi_dir`,
/// alternating `a.repeat` times on `n` ranks; prints each output and then
/// the table.
pub fn compare(a: &Args, n: usize, prog: &str, fi_dir: &str) -> Result<(), String> {
    let limit = Duration::from_secs(a.timeout.saturating_mul(20));
    let fi_dir = std::fs::canonicalize(fi_dir)
        .ok()
        .filter(|d| d.join("libclusternet-fi.so").exists())
        .ok_or_else(|| {
            format!(
                "--provider {fi_dir}: no libclusternet-fi.so there \
                 (scripts/build-provider.sh builds it into target/fi)"
            )
        })?;
    let fi_dir = fi_dir.to_string_lossy();
    let job = match a.link {
        Link::Edp => Some(
            LaunchCluster::build("osufi", n, a.mtu, false)
                .map_err(|e| format!("virtual cluster of {n} hosts (needs root): {e}"))?,
        ),
        Link::Udp => None,
    };
    let args = if a.osu {
        launch::omb_args(a)
    } else {
        launch::ompi_args(a)
    };
    let mpirun = || match &job {
        Some(j) => j.mpirun(n, prog, &args),
        None => {
            let mut m = vcluster::mpirun_base(n);
            m.args(["--mca", "btl_tcp_if_include", "lo"])
                .arg(prog)
                .args(&args);
            m
        }
    };
    let mut runs = Vec::new();
    for run in 0..a.repeat.max(1) {
        let mut tcp = mpirun();
        tcp.env("OMPI_MCA_pml", "ob1");
        let cpu = children_cpu();
        let tcp = launch::run_ranks(vec![tcp], limit)
            .map_err(|e| format!("Open MPI over TCP, run {run}: {e}"))?;
        let tcp_cpu = children_cpu() - cpu;
        println!("# run {run}, Open MPI TCP BTL:\n{}", tcp.trim_end());
        let mut ours = mpirun();
        over_provider(&mut ours, &fi_dir, a);
        let cpu = children_cpu();
        let ours = launch::run_ranks(vec![ours], limit)
            .map_err(|e| format!("Open MPI over the provider, run {run}: {e}"))?;
        let ours_cpu = children_cpu() - cpu;
        println!("# run {run}, provider {}:\n{}", label(a), ours.trim_end());
        for (who, out, cpu) in [("TCP BTL", &tcp, tcp_cpu), ("provider", &ours, ours_cpu)] {
            if let Some(line) = cpu_per_mib(a, out, n, cpu) {
                println!("# run {run}, {who}: CPU per MiB moved: {line}");
            }
        }
        runs.push((compare::parse_rows(&tcp), compare::parse_rows(&ours)));
    }
    let link = match a.link {
        Link::Edp => format!("EDP, virtual cluster, MTU {}", a.mtu),
        Link::Udp => "UDP link, loopback".into(),
    };
    print!("{}", table(a, &link, &runs));
    Ok(())
}

/// The provider's name in the output: the FI_PROVIDER given, or the
/// provider's own FI_EP_RDM.
fn label(a: &Args) -> &str {
    a.fi_provider.as_deref().unwrap_or("clusternet")
}

/// Open MPI's settings for the provider path.
fn over_provider(c: &mut Command, fi_dir: &str, a: &Args) {
    c.env("OMPI_MCA_pml", "cm")
        .env("OMPI_MCA_mtl", "ofi")
        .env("OMPI_MCA_mtl_ofi_provider_include", "clusternet")
        .env("FI_PROVIDER_PATH", fi_dir);
    if let Some(p) = &a.fi_provider {
        c.env("FI_PROVIDER", p);
    }
    if a.link == Link::Udp {
        c.env("FI_CLUSTERNET_LINK", "udp")
            .env("FI_CLUSTERNET_IFACE", "lo");
    }
    if a.counters {
        // Only the data path's subsystem, where the provider logs its
        // counters at close (libfabric's FI_LOG_SUBSYS).
        c.env("FI_LOG_LEVEL", "info")
            .env("FI_LOG_PROV", "clusternet")
            .env("FI_LOG_SUBSYS", "ep_data");
    }
}

/// User + system CPU time, seconds, of this process's children that have
/// ended and been waited for, theirs included (getrusage(2),
/// RUSAGE_CHILDREN): around one mpirun, the whole job (mpirun and every
/// rank, their threads included).
fn children_cpu() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 * 1e-6;
        t(u.user_time()) + t(u.system_time())
    })
}

/// Bytes a bandwidth run moves, all directions: per size, (iterations +
/// warm-up) x window x size, times 2 for bibw and times the pairs (`n /
/// 2`) for OSU's osu_mbw_mr. osu-ompi (benches/osu/osu-ompi.c) runs a
/// tenth of the iterations above 8192 bytes; OMB's -i and -x apply to
/// every size (OMB 7.4 `set_num_iterations`). `None` for latency kinds.
fn bytes_moved(a: &Args, n: usize) -> Option<f64> {
    let both = match a.bench {
        crate::bench::Bench::Bw if a.osu => (n / 2).max(1) as f64,
        crate::bench::Bench::Bw => 1.0,
        crate::bench::Bench::Bibw => 2.0,
        _ => return None,
    };
    let mut total = 0.0;
    let mut len = a.sizes.0.max(1);
    while len <= a.sizes.1 {
        let (it, wu) = if len > 8192 && !a.osu {
            ((a.iterations / 10).max(1), a.warmup / 10)
        } else {
            (a.iterations, a.warmup)
        };
        total += ((it + wu) * a.window.max(1) * len) as f64;
        len *= 2;
    }
    Some(both * total)
}

/// The CPU time per MiB moved, for a bandwidth run (`None` otherwise): of
/// each rank from osu-ompi's `# cpu rank` lines (user + system time of the
/// whole process, its threads included, over the measured sizes), or for
/// an OSU binary (`a.osu`) of the whole job, `job_cpu` seconds (every rank
/// and mpirun, all sizes and warm-ups, start-up included: to compare at
/// one large size, run that size alone).
fn cpu_per_mib(a: &Args, out: &str, n: usize, job_cpu: f64) -> Option<String> {
    let mib = bytes_moved(a, n)? / f64::from(1 << 20);
    if a.osu {
        return Some(format!(
            "job (all {n} ranks and mpirun) {:.3} ms over {mib:.0} MiB",
            job_cpu * 1e3 / mib
        ));
    }
    let ranks: Vec<String> = out
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("# cpu rank ")?;
            let (rank, rest) = rest.split_once(':')?;
            let mut w = rest.split_whitespace();
            let (_, user, _, sys) = (w.next()?, w.next()?, w.next()?, w.next()?);
            let cpu: f64 = user.parse::<f64>().ok()? + sys.parse::<f64>().ok()?;
            Some(format!("rank {rank} {:.3} ms", cpu * 1e3 / mib))
        })
        .collect();
    (!ranks.is_empty()).then(|| ranks.join(", "))
}

type Rows = Vec<(usize, f64)>;

/// One line per size: per run, TCP's value, ours, and ours / TCP.
fn table(a: &Args, link: &str, runs: &[(Rows, Rows)]) -> String {
    let better = if a.bench.higher_is_better() {
        "higher is better"
    } else {
        "lower is better"
    };
    let mut s = format!(
        "\n# {} on {} ranks, {link}: provider ({}) / Open MPI TCP BTL per run, {} ({better})\n{:<10}",
        a.bench.title(),
        a.local.unwrap_or(2),
        label(a),
        a.bench.column(),
        "# size"
    );
    for r in 0..runs.len() {
        s.push_str(&format!(
            "{:>12}{:>12}{:>8}",
            format!("tcp#{r}"),
            format!("ours#{r}"),
            "ratio"
        ));
    }
    s.push('\n');
    let sizes = runs.first().map(|(t, _)| t.clone()).unwrap_or_default();
    for (size, _) in sizes {
        s.push_str(&format!("{size:<10}"));
        for (tcp, ours) in runs {
            let t = tcp.iter().find(|(z, _)| *z == size).map(|x| x.1);
            let o = ours.iter().find(|(z, _)| *z == size).map(|x| x.1);
            match (t, o) {
                (Some(t), Some(o)) => {
                    let ratio = if t > 0.0 { o / t } else { f64::NAN };
                    s.push_str(&format!("{t:>12.2}{o:>12.2}{ratio:>8.2}"));
                }
                _ => s.push_str(&format!("{:>12}{:>12}{:>8}", "-", "-", "-")),
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_table_pairs_each_run_by_size() {
        let a = Args::parse_from(["comm-osu", "latency-p50", "--local", "2"]);
        let runs = vec![
            (vec![(8, 4.0), (16, 5.0)], vec![(8, 2.0), (16, 10.0)]),
            (vec![(8, 8.0), (16, 5.0)], vec![(8, 2.0)]),
        ];
        let t = table(&a, "UDP link, loopback", &runs);
        let lines: Vec<&str> = t.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].contains("lower is better"), "{t}");
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["8", "4.00", "2.00", "0.50", "8.00", "2.00", "0.25"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["16", "5.00", "10.00", "2.00", "-", "-", "-"]
        );
    }
}
