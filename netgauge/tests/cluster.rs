//! End to end: `netgauge --local --hosts N` with the multi-host patterns on
//! a bridge of N namespaces; JSON checked; namespaces removed after the run
//! and on Ctrl-C. Needs root: elsewhere the tests print why they skip,
//! except under CI=true, where they fail.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");

/// Runs `netgauge --local --json` with `args`; returns the step records and
/// checks that the run's namespaces are gone.
fn run(args: &[&str]) -> Vec<Value> {
    testkit::json_lines(&testkit::run_clean(
        Command::new(NETGAUGE)
            .args(["--local", "--json", "--timeout", "10"])
            .args(args),
    ))
}

/// (client, server) of every pair of a step.
fn pairs(step: &Value) -> Vec<(u64, u64)> {
    step["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["client"].as_u64().unwrap(), p["server"].as_u64().unwrap()))
        .collect()
}

/// Checks the per-pair records and that the aggregate is their sum / max.
fn check_step(s: &Value, pattern: &str, hosts: u64) {
    assert_eq!(s["pattern"], pattern, "{s}");
    assert_eq!(s["hosts"], hosts);
    let ps = s["pairs"].as_array().unwrap();
    let a = &s["aggregate"];
    assert_eq!(a["pairs"].as_u64().unwrap() as usize, ps.len());
    let mut sum = 0.0;
    let mut max_p50: f64 = 0.0;
    for p in ps {
        let r = &p["record"];
        assert_eq!(r["mode"], s["mode"]);
        assert_eq!(r["size"], s["size"]);
        let mbit = r["mbit_s"].as_f64().unwrap();
        assert!(mbit > 0.0, "{p}");
        assert!(p["msgs_per_s"].as_f64().unwrap() > 0.0, "{p}");
        sum += mbit;
        if let Some(p50) = r["lat_us"]["p50"].as_f64() {
            max_p50 = max_p50.max(p50);
        }
    }
    assert!(
        (a["mbit_s_sum"].as_f64().unwrap() - sum).abs() <= 1e-6 * sum,
        "{s}"
    );
    if pattern != "msgrate" {
        assert_eq!(a["p50_max_us"].as_f64().unwrap(), max_p50, "{s}");
    }
}

#[test]
fn one_to_n_and_n_to_one_on_four_hosts() {
    if !testkit::root_or_skip("one_to_n_and_n_to_one_on_four_hosts") {
        return;
    }
    for pattern in ["1toN", "Nto1"] {
        let steps = run(&[
            "--hosts",
            "4",
            "-x",
            pattern,
            "-m",
            "edp,esp,udp,tcp",
            "-s",
            "64-1024",
            "-g",
            "1",
            "-c",
            "100",
            "--warmup",
            "10",
        ]);
        // 4 modes x 5 sizes.
        assert_eq!(steps.len(), 20, "{steps:?}");
        for s in &steps {
            check_step(s, pattern, 4);
            let want: Vec<(u64, u64)> = if pattern == "1toN" {
                vec![(0, 1), (0, 2), (0, 3)]
            } else {
                vec![(1, 0), (2, 0), (3, 0)]
            };
            assert_eq!(pairs(s), want, "{s}");
        }
        let modes: BTreeSet<&str> = steps.iter().map(|s| s["mode"].as_str().unwrap()).collect();
        assert_eq!(modes.len(), 4);
    }
}

#[test]
fn ebb_bidir_and_msgrate() {
    if !testkit::root_or_skip("ebb_bidir_and_msgrate") {
        return;
    }
    let ebb = run(&[
        "--hosts", "6", "-x", "ebb", "-m", "edp,tcp", "-s", "256-4096", "-g", "1", "-c", "100",
        "--warmup", "10", "--seed", "3",
    ]);
    assert_eq!(ebb.len(), 10);
    let mut pairings = BTreeSet::new();
    for s in &ebb {
        check_step(s, "ebb", 6);
        let p = pairs(s);
        assert_eq!(p.len(), 3, "{s}");
        let ranks: BTreeSet<u64> = p.iter().flat_map(|&(a, b)| [a, b]).collect();
        assert_eq!(ranks.len(), 6, "not a perfect matching: {p:?}");
        pairings.insert(p);
    }
    assert!(pairings.len() > 1, "every step drew the same pairing");

    let bidir = run(&[
        "--hosts",
        "2",
        "-x",
        "one_one_bidir",
        "-m",
        "esp,udp",
        "-s",
        "8-64",
        "-g",
        "1",
        "-c",
        "100",
        "--warmup",
        "10",
    ]);
    assert_eq!(bidir.len(), 8);
    for s in &bidir {
        check_step(s, "one_one_bidir", 2);
        assert_eq!(pairs(s), [(0, 1), (1, 0)]);
    }

    let mr = run(&[
        "--hosts",
        "4",
        "-x",
        "msgrate",
        "-m",
        "edp,esp,tcp",
        "-s",
        "8-64",
        "-g",
        "1",
        "-c",
        "2000",
    ]);
    assert_eq!(mr.len(), 12);
    for s in &mr {
        check_step(s, "msgrate", 4);
        assert_eq!(pairs(s), [(0, 2), (1, 3)]);
        for p in s["pairs"].as_array().unwrap() {
            assert_eq!(p["record"]["pattern"], "stream");
            assert!(p["record"]["lat_us"].is_null());
        }
    }
}

#[test]
fn eight_hosts() {
    if !testkit::root_or_skip("eight_hosts") {
        return;
    }
    let steps = run(&[
        "--hosts", "8", "-x", "1toN", "-m", "edp,udp", "-s", "64", "-c", "50", "--warmup", "5",
    ]);
    assert_eq!(steps.len(), 2);
    for s in &steps {
        check_step(s, "1toN", 8);
        assert_eq!(pairs(s).len(), 7);
    }
}

#[test]
fn ctrl_c_removes_the_n_host_cluster() {
    if !testkit::root_or_skip("ctrl_c_removes_the_n_host_cluster") {
        return;
    }
    let child = Command::new(NETGAUGE)
        .args([
            "--local", "--hosts", "5", "-x", "Nto1", "-m", "udp", "-s", "64",
        ])
        .args(["-c", "100000000", "--warmup", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until the cluster exists and the clients are running.
    let t0 = Instant::now();
    while testkit::namespaces_of(pid).len() < 5 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no cluster built");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(800));
    let st = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", out.status);
    assert!(
        testkit::namespaces_of(pid).is_empty(),
        "{:?}",
        testkit::namespaces_of(pid)
    );
    // What was measured is printed: the table and the note.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("# Nto1: p50 half round-trip"), "{stdout}");
    assert!(stdout.contains("# interrupted (Ctrl-C)"), "{stdout}");
}

#[test]
fn multi_host_options_are_checked() {
    for (args, needle) in [
        (&["--local", "--hosts", "4"][..], "two-host pattern"),
        (&["-x", "1toN", "-R", "1.2.3.4"][..], "--local --hosts N"),
        (&["--local", "--hosts", "1", "-x", "Nto1"][..], "--hosts 1"),
        (
            &["--local", "--hosts", "3", "-x", "ebb", "-o", "/tmp/x"][..],
            "-o",
        ),
    ] {
        let out = Command::new(NETGAUGE).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// The `eth=sent/received` figures of a record's `-v` statistics line.
fn eth_counts(r: &Value) -> (u64, u64, u64, u64) {
    let stats = r["transport_stats"]
        .as_str()
        .unwrap_or_else(|| panic!("no stats: {r}"));
    let field = |name: &str| -> u64 {
        let words: Vec<&str> = stats.split_whitespace().collect();
        let i = words
            .iter()
            .position(|w| *w == name)
            .unwrap_or_else(|| panic!("{name}: {stats}"));
        words[i + 1].parse().unwrap()
    };
    (
        field("sent"),
        field("received"),
        field("foreign"),
        field("kernel_drops"),
    )
}

/// eth frames carry no port: both sessions of one_one_bidir run between
/// the same two interfaces, and each end must see only its own session's
/// frames (a client that receives more frames than it sent took the other
/// session's pings for echoes). Nto1: several eth servers on rank 0, each
/// serving its own client.
#[test]
fn eth_sessions_between_the_same_hosts_stay_apart() {
    if !testkit::root_or_skip("eth_sessions_between_the_same_hosts_stay_apart") {
        return;
    }
    let bidir = run(&[
        "--hosts",
        "2",
        "-x",
        "one_one_bidir",
        "-m",
        "eth",
        "-s",
        "64-4096",
        "-g",
        "1",
        "-c",
        "300",
        "--warmup",
        "20",
        "-v",
    ]);
    assert_eq!(bidir.len(), 7, "{bidir:?}");
    for s in &bidir {
        check_step(s, "one_one_bidir", 2);
        for p in s["pairs"].as_array().unwrap() {
            let (sent, received, foreign, drops) = eth_counts(&p["record"]);
            assert_eq!(sent, received, "a client saw another session's frames: {p}");
            assert_eq!((foreign, drops), (0, 0), "{p}");
        }
    }
    let nto1 = run(&[
        "--hosts", "3", "-x", "Nto1", "-m", "eth", "-s", "64-1500", "-g", "2", "-c", "200",
        "--warmup", "20", "-v",
    ]);
    for s in &nto1 {
        check_step(s, "Nto1", 3);
        for p in s["pairs"].as_array().unwrap() {
            let (sent, received, _, _) = eth_counts(&p["record"]);
            assert_eq!(sent, received, "{p}");
        }
    }
}

/// A step that fails is reported (its JSON line carries the error), the
/// other steps and modes still run, and the exit status says so.
#[test]
fn a_failed_step_is_reported_and_the_run_goes_on() {
    if !testkit::root_or_skip("a_failed_step_is_reported_and_the_run_goes_on") {
        return;
    }
    for json in [true, false] {
        let mut cmd = Command::new(NETGAUGE);
        cmd.args([
            "--local",
            "--hosts",
            "2",
            "-x",
            "one_one_bidir",
            "-m",
            "udp,edp",
        ])
        .args(["-s", "8-32", "-g", "1", "-c", "50", "--warmup", "5"])
        .env("NETGAUGE_INJECT_FAILURE", "udp:16");
        if json {
            cmd.arg("--json");
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}\n{stdout}");
        assert!(
            stderr.contains("1 of 6 measurements failed: udp at 16 B"),
            "{stderr}"
        );
        assert!(testkit::namespaces_of(pid).is_empty());
        if json {
            let steps = testkit::json_lines(&stdout);
            assert_eq!(steps.len(), 6, "{stdout}");
            for s in &steps {
                if s["mode"] == "udp" && s["size"] == 16 {
                    assert!(
                        s["error"].as_str().unwrap().contains("failure injected"),
                        "{s}"
                    );
                } else {
                    assert!(s.get("error").is_none(), "{s}");
                    check_step(s, "one_one_bidir", 2);
                }
            }
        } else {
            let row = stdout
                .lines()
                .find(|l| l.starts_with("16 "))
                .unwrap_or_else(|| panic!("no 16-byte row: {stdout}"));
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cells[1], "FAIL[1]", "{stdout}");
            assert!(stdout.contains("# [1] udp at 16 B: "), "{stdout}");
            assert!(stdout.contains("# fastest"), "{stdout}");
        }
    }
}
