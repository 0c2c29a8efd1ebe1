//! The OSU-style benchmark `benches/osu/osu-ompi.c` under Open MPI twice on
//! the same hosts, side by side: over Open MPI's TCP BTL (`pml ob1`, `btl
//! tcp,self`) and over the provider (`pml cm`, `mtl ofi`, libfabric loading
//! libclusternet-fi.so), alternating, with the ratio provider / TCP per size
//! and run (ratios within one run; this machine's absolute times swing).
//!
//! ```sh
//! eval "$(scripts/build-provider.sh)"
//! sudo -E cargo run --release -p clusternet-fi --example osu_compare -- \
//!     latency-p50 0 65536 --repeat 3
//! cargo run --release -p clusternet-fi --example osu_compare -- \
//!     --link udp bw 1 1048576
//! ```
//!
//! Options: `--link edp` (default as root: a bridged virtual cluster, one
//! rank per host, vcluster's mpirun launch) or `udp` (loopback, the UDP
//! link, no privilege); `--ranks N` (2); `--mtu M` (1500, EDP only);
//! `--repeat R` (1: runs alternate TCP, provider, TCP, ...); `--iters I`
//! (1000), `--warmup W` (100), `--window K` (64); `--provider P` (an
//! FI_PROVIDER value, e.g. `clusternet;ofi_rxd`; default none: the
//! provider's own FI_EP_RDM). BENCH MIN MAX as
//! osu-ompi takes them. Needs FI_PROVIDER_PATH (scripts/build-provider.sh)
//! and Open MPI (scripts/install-deps.sh).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use vcluster::LaunchCluster;

struct Args {
    link_edp: bool,
    ranks: usize,
    mtu: usize,
    repeat: usize,
    iters: String,
    warmup: String,
    window: String,
    provider: String,
    bench: String,
    min: String,
    max: String,
}

impl Args {
    /// The provider path's name in the output.
    fn label(&self) -> &str {
        if self.provider.is_empty() {
            "clusternet"
        } else {
            &self.provider
        }
    }
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        link_edp: nix::unistd::geteuid().is_root(),
        ranks: 2,
        mtu: 1500,
        repeat: 1,
        iters: "1000".into(),
        warmup: "100".into(),
        window: "64".into(),
        provider: String::new(),
        bench: String::new(),
        min: String::new(),
        max: String::new(),
    };
    let mut pos = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().ok_or(format!("{x} needs a value"));
        match x.as_str() {
            "--link" => a.link_edp = val()? == "edp",
            "--ranks" => a.ranks = val()?.parse().map_err(|e| format!("--ranks: {e}"))?,
            "--mtu" => a.mtu = val()?.parse().map_err(|e| format!("--mtu: {e}"))?,
            "--repeat" => a.repeat = val()?.parse().map_err(|e| format!("--repeat: {e}"))?,
            "--iters" => a.iters = val()?,
            "--warmup" => a.warmup = val()?,
            "--window" => a.window = val()?,
            "--provider" => a.provider = val()?,
            _ => pos.push(x),
        }
    }
    let [bench, min, max] = <[String; 3]>::try_from(pos)
        .map_err(|_| "give BENCH MIN MAX (e.g. latency-p50 0 65536)".to_string())?;
    (a.bench, a.min, a.max) = (bench, min, max);
    Ok(a)
}

/// Size -> value of an osu-ompi output.
fn rows(out: &str) -> BTreeMap<u64, f64> {
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

fn main() {
    let a = parse().unwrap_or_else(|e| {
        eprintln!("osu_compare: {e}");
        std::process::exit(2)
    });
    let fi = std::env::var("FI_PROVIDER_PATH").unwrap_or_else(|_| {
        eprintln!("osu_compare: set FI_PROVIDER_PATH: eval \"$(scripts/build-provider.sh)\"");
        std::process::exit(2)
    });
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = std::env::temp_dir().join(format!("osu-ompi-{}", std::process::id()));
    let st = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(manifest.join("../benches/osu/osu-ompi.c"))
        .status()
        .expect("run mpicc (scripts/install-deps.sh)");
    assert!(st.success(), "mpicc benches/osu/osu-ompi.c failed");
    let job = a.link_edp.then(|| {
        LaunchCluster::build("osucmp", a.ranks, a.mtu, false)
            .expect("build the virtual cluster (root)")
    });
    let bench_args: Vec<String> = vec![
        a.bench.clone(),
        a.min.clone(),
        a.max.clone(),
        a.iters.clone(),
        a.warmup.clone(),
        a.window.clone(),
    ];
    let mut results: Vec<(BTreeMap<u64, f64>, BTreeMap<u64, f64>)> = Vec::new();
    for run in 0..a.repeat {
        let mut pair = [BTreeMap::new(), BTreeMap::new()];
        for (k, ours) in [false, true].into_iter().enumerate() {
            let mut c = match &job {
                Some(j) => j.mpirun(a.ranks, bin.to_str().unwrap(), &bench_args),
                None => {
                    let mut c = vcluster::mpirun_base(a.ranks);
                    c.arg(&bin).args(&bench_args);
                    c
                }
            };
            if ours {
                c.env("OMPI_MCA_pml", "cm")
                    .env("OMPI_MCA_mtl", "ofi")
                    .env("OMPI_MCA_mtl_ofi_provider_include", "clusternet")
                    .env("FI_PROVIDER_PATH", &fi);
                if !a.provider.is_empty() {
                    c.env("FI_PROVIDER", &a.provider);
                }
                if !a.link_edp {
                    c.env("FI_CLUSTERNET_LINK", "udp")
                        .env("FI_CLUSTERNET_IFACE", "lo");
                }
            } else {
                c.env("OMPI_MCA_pml", "ob1");
            }
            let out = c.stderr(Stdio::inherit()).output().expect("run mpirun");
            let text = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                eprintln!(
                    "osu_compare: mpirun ({}) failed: {}\n{text}",
                    if ours { "provider" } else { "TCP" },
                    out.status
                );
                std::process::exit(1);
            }
            println!(
                "# run {run}, {}:\n{}",
                if ours { a.label() } else { "Open MPI TCP BTL" },
                text.trim_end()
            );
            pair[k] = rows(&text);
        }
        let [tcp, ours] = pair;
        results.push((tcp, ours));
    }
    let _ = std::fs::remove_file(&bin);
    println!(
        "\n# {} on {} rank(s), {}: provider ({}) / Open MPI TCP BTL, per run",
        a.bench,
        a.ranks,
        if a.link_edp {
            format!("EDP, virtual cluster, MTU {}", a.mtu)
        } else {
            "UDP link, loopback".into()
        },
        a.label()
    );
    print!("{:<10}", "# size");
    for r in 0..a.repeat {
        print!(
            "{:>12}{:>12}{:>8}",
            format!("tcp#{r}"),
            format!("ours#{r}"),
            "ratio"
        );
    }
    println!();
    for size in results[0].0.keys() {
        print!("{size:<10}");
        for (tcp, ours) in &results {
            let (t, o) = (tcp.get(size).copied(), ours.get(size).copied());
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
            let ratio = match (t, o) {
                (Some(t), Some(o)) if t > 0.0 => format!("{:.2}", o / t),
                _ => "-".into(),
            };
            print!("{:>12}{:>12}{:>8}", f(t), f(o), ratio);
        }
        println!();
    }
}
