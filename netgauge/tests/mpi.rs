//! `netgauge --local --hosts 4 --mpirun`: Open MPI's mpirun starts four
//! ranks, one per host of a bridged virtual cluster; they find each other
//! over MPI and EDP echo and run one_one, 1toN and Nto1 over EDP and ESP
//! with no address given. Built only with the `mpi` feature
//! (`cargo test -p netgauge --features mpi --test mpi`); needs root and
//! Open MPI's mpirun (scripts/install-deps.sh).
#![cfg(feature = "mpi")]

use std::process::Command;

use serde_json::Value;

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");

fn can_run() -> bool {
    if !testkit::is_root() {
        testkit::skip(
            "netgauge --mpirun",
            "not root (network namespaces need root)",
        );
        return false;
    }
    if Command::new("mpirun").arg("--version").output().is_err() {
        testkit::skip(
            "netgauge --mpirun",
            "no mpirun (install openmpi-bin: scripts/install-deps.sh)",
        );
        return false;
    }
    true
}

fn run(args: &[&str]) -> Vec<Value> {
    run_with("--mpirun", args)
}

fn run_with(launcher: &str, args: &[&str]) -> Vec<Value> {
    testkit::json_lines(&testkit::run_clean(
        Command::new(NETGAUGE)
            .args(["--local", launcher, "--json", "--timeout", "10"])
            .args(args),
    ))
}

#[test]
fn mpirun_four_ranks_find_each_other_and_run_the_patterns() {
    if !can_run() {
        return;
    }
    for (pattern, want) in [
        ("one_one", vec![(1u64, 0u64)]),
        ("1toN", vec![(0, 1), (0, 2), (0, 3)]),
        ("Nto1", vec![(1, 0), (2, 0), (3, 0)]),
    ] {
        let lines = run(&[
            "--hosts", "4", "-x", pattern, "-m", "edp,esp", "-s", "64-256", "-g", "1", "-c", "50",
            "--warmup", "5",
        ]);
        // First the discovery: every rank reaches every other one.
        let d = &lines[0];
        assert_eq!(d["echo_attempts"], 3, "{d}");
        let ranks = d["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), 4);
        for (j, r) in ranks.iter().enumerate() {
            let reaches: Vec<u64> = r["reaches"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            let others: Vec<u64> = (0..4).filter(|&k| k != j as u64).collect();
            assert_eq!(reaches, others, "{d}");
            assert_eq!(r["macs"].as_array().unwrap().len(), 1, "{d}");
        }
        // Then 2 modes x 3 sizes.
        let steps = &lines[1..];
        assert_eq!(steps.len(), 6, "{lines:?}");
        for s in steps {
            assert_eq!(s["pattern"], pattern);
            assert_eq!(s["hosts"], 4);
            let got: Vec<(u64, u64)> = s["pairs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p["client"].as_u64().unwrap(), p["server"].as_u64().unwrap()))
                .collect();
            assert_eq!(got, want, "{s}");
            for p in s["pairs"].as_array().unwrap() {
                assert!(p["record"]["lat_us"]["p50"].as_f64().unwrap() > 0.0, "{p}");
                assert_eq!(p["record"]["mode"], s["mode"]);
            }
        }
    }
}

/// The same with Slurm's srun, when a Slurm answers on this machine
/// (scripts/slurm-local.sh start); skipped otherwise, also under CI (CI
/// starts no Slurm daemons).
#[test]
fn srun_four_ranks() {
    if !can_run() {
        return;
    }
    let slurm_up = Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if !slurm_up {
        eprintln!("skipped srun_four_ranks: no Slurm answers (scripts/slurm-local.sh start)");
        return;
    }
    let lines = run_with(
        "--srun",
        &[
            "--hosts", "4", "-x", "Nto1", "-m", "edp,esp", "-s", "64", "-c", "50", "--warmup", "5",
        ],
    );
    let ranks = lines[0]["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 4, "{lines:?}");
    for r in ranks {
        assert_eq!(r["reaches"].as_array().unwrap().len(), 3, "{r}");
    }
    assert_eq!(lines.len(), 3, "{lines:?}");
    for s in &lines[1..] {
        assert_eq!(s["pairs"].as_array().unwrap().len(), 3, "{s}");
    }
}
