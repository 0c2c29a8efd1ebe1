//! `-m comm-edp` / `-m comm-udp`: the comm crate's 2-rank communicator
//! measured end to end by `netgauge --local` (one_one, stream, 1toN on a
//! virtual cluster; comm-edp on a UDP link without namespaces).
//!
//! The tests with namespaces need root: elsewhere they print why they skip,
//! except under CI=true, where they fail.

use std::process::Command;

use serde_json::Value;

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");

/// Runs `netgauge --local --json --timeout 10 ARGS`; asserts it succeeded
/// and left no namespace behind; returns the JSON lines after the metadata
/// header (records, or multi-host steps).
fn run(args: &[&str]) -> Vec<Value> {
    let stdout = testkit::run_clean(
        Command::new(NETGAUGE)
            .args(["--local", "--json", "--timeout", "10"])
            .args(args),
    );
    testkit::json_lines(&stdout)
        .into_iter()
        .filter(|v| v.get("metadata").is_none())
        .collect()
}

fn f64_at(r: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(r, |v, k| &v[*k])
        .as_f64()
        .unwrap_or_else(|| panic!("{path:?} missing in {r}"))
}

/// A one_one record of `mode` at `size`: every iteration measured, the
/// latency distribution ordered and positive, the throughput derived from
/// the median, both ends' CPU time positive.
fn check_one_one(r: &Value, mode: &str, size: u64, iterations: u64) {
    assert_eq!(r["mode"], mode, "{r}");
    assert_eq!(r["pattern"], "one_one", "{r}");
    assert_eq!(r["size"], size, "{r}");
    assert_eq!(r["iterations"], iterations, "{r}");
    let lat = |k: &str| f64_at(r, &["lat_us", k]);
    let (min, p50, p99, max) = (lat("min"), lat("p50"), lat("p99"), lat("max"));
    assert!(min > 0.0 && min <= p50 && p50 <= p99 && p99 <= max, "{r}");
    let mbit = f64_at(r, &["mbit_s"]);
    assert!((mbit - size as f64 * 8.0 / p50).abs() / mbit < 1e-6, "{r}");
    for k in ["cpu_us_per_iter_client", "cpu_us_per_iter_server"] {
        let v = f64_at(r, &[k]);
        assert!(v > 0.0 && v.is_finite(), "{k} in {r}");
    }
    // Reliable: no loss figure.
    assert!(r.get("loss").is_none(), "{r}");
}

/// A stream record of `mode` at `size`. The server verified every
/// message's bytes and sequence in order (comm is ordered), and the client
/// fails the run unless the server's REPORT counts every byte sent, so a
/// record at all means all bytes arrived intact and in order.
fn check_stream(r: &Value, mode: &str, size: u64, iterations: u64) {
    assert_eq!(r["mode"], mode, "{r}");
    assert_eq!(r["pattern"], "stream", "{r}");
    assert_eq!(r["size"], size, "{r}");
    assert_eq!(r["iterations"], iterations, "{r}");
    assert!(r["lat_us"].is_null(), "{r}");
    let mbit = f64_at(r, &["mbit_s"]);
    assert!(mbit > 0.0 && mbit.is_finite(), "{r}");
    assert!(
        r.get("loss").is_none(),
        "reliable mode reports no loss: {r}"
    );
}

#[test]
fn comm_edp_one_one_local() {
    if !testkit::root_or_skip("comm_edp_one_one_local") {
        return;
    }
    let recs = run(&[
        "-m", "comm-edp", "-x", "one_one", "-s", "1-4096", "-g", "1", "-c", "100", "--warmup", "10",
    ]);
    let sizes = [1u64, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
    assert_eq!(recs.len(), sizes.len(), "{recs:?}");
    for (r, &size) in recs.iter().zip(&sizes) {
        check_one_one(r, "comm-edp", size, 100);
    }
}

/// Messages of 8 B to 1 MiB (one comm fragment at most; 1 MiB is CTP's
/// large-message path over UDP).
#[test]
fn comm_udp_stream_local() {
    if !testkit::root_or_skip("comm_udp_stream_local") {
        return;
    }
    let recs = run(&[
        "-m", "comm-udp", "-x", "stream", "-s", "8-1M", "-g", "1", "-c", "40",
    ]);
    // 8, 16, ..., 1 MiB: 18 sizes.
    assert_eq!(recs.len(), 18, "{recs:?}");
    for (i, r) in recs.iter().enumerate() {
        check_stream(r, "comm-udp", 8 << i, 40);
    }
}

/// Both carriers, both two-host patterns, in one run (the `comm` mode
/// means comm-udp and comm-edp with --local).
#[test]
fn comm_both_carriers_both_patterns() {
    if !testkit::root_or_skip("comm_both_carriers_both_patterns") {
        return;
    }
    for pattern in ["one_one", "stream"] {
        let recs = run(&["-m", "comm", "-x", pattern, "-s", "64K", "-c", "30"]);
        let modes: Vec<&str> = recs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
        assert_eq!(modes, ["comm-udp", "comm-edp"], "{recs:?}");
        for r in &recs {
            let mode = r["mode"].as_str().unwrap();
            if pattern == "one_one" {
                check_one_one(r, mode, 65536, 30);
            } else {
                check_stream(r, mode, 65536, 30);
            }
        }
    }
}

/// `--hosts 3 -x 1toN`: one 2-rank communicator per pair, all pairs at once.
#[test]
fn comm_edp_one_to_n() {
    if !testkit::root_or_skip("comm_edp_one_to_n") {
        return;
    }
    let steps = run(&[
        "--hosts", "3", "-x", "1toN", "-m", "comm-edp", "-s", "64-256", "-g", "1", "-c", "50",
    ]);
    assert_eq!(steps.len(), 3, "{steps:?}");
    for s in &steps {
        assert_eq!(s["mode"], "comm-edp", "{s}");
        let pairs = s["pairs"].as_array().unwrap();
        let ends: Vec<(u64, u64)> = pairs
            .iter()
            .map(|p| (p["client"].as_u64().unwrap(), p["server"].as_u64().unwrap()))
            .collect();
        assert_eq!(ends, [(0, 1), (0, 2)], "{s}");
        for p in pairs {
            check_one_one(&p["record"], "comm-edp", s["size"].as_u64().unwrap(), 50);
        }
    }
}

/// comm-edp on UDP links between two processes on 127.0.0.1 (no namespace,
/// no privilege: runs everywhere), beside comm-udp on loopback.
#[test]
fn comm_over_udp_link_without_namespaces() {
    let port = (31_000 + (std::process::id() % 500) as u16 * 8).to_string();
    let stdout = testkit::run_clean(
        Command::new(NETGAUGE)
            .args(["--local", "--link", "udp", "--json", "--timeout", "10"])
            .args([
                "-m",
                "comm-udp,comm-edp",
                "-s",
                "64",
                "-c",
                "100",
                "-P",
                &port,
            ]),
    );
    let recs: Vec<Value> = testkit::json_lines(&stdout)
        .into_iter()
        .filter(|v| v.get("metadata").is_none())
        .collect();
    let modes: Vec<&str> = recs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["comm-udp", "comm-edp"], "{recs:?}");
    for r in &recs {
        check_one_one(r, r["mode"].as_str().unwrap(), 64, 100);
    }
}

/// `--local -v` over many steps: the server prints a comm and CTP counter
/// line per step to its stderr (~1.3 KB), more than a pipe holds (64 KiB)
/// after ~48 steps. --local read that pipe only after the run, so the server
/// blocked in write(2) at step 49 and the client failed on its timeout
/// ("receive from Rank(1) did not complete within 10s"; ctp-edp -v the same
/// from ~90 steps). 93 steps now pass, and every server line arrives.
#[test]
fn verbose_server_output_does_not_stall_the_run() {
    if !testkit::root_or_skip("verbose_server_output_does_not_stall_the_run") {
        return;
    }
    let out = Command::new(NETGAUGE)
        .args(["--local", "--json", "--timeout", "10", "-v"])
        .args([
            "-m", "comm-edp", "-x", "stream", "-s", "8-100", "-g", "64", "-c", "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "netgauge failed ({}): {stderr}",
        out.status
    );
    let recs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("metadata").is_none())
        .collect();
    // Grade 64 from 8 to 100: every size, 93 steps.
    assert_eq!(recs.len(), 93, "{recs:?}");
    for (i, r) in recs.iter().enumerate() {
        check_stream(r, "comm-edp", 8 + i as u64, 1);
    }
    let server_lines = stderr
        .lines()
        .filter(|l| l.starts_with("# server comm-edp step "))
        .count();
    assert_eq!(server_lines, 93, "{stderr}");
}
