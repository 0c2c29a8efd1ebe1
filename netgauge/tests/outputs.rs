//! `netgauge --local` outputs end to end: CSV (`--csv`), raw samples
//! (`-f`), the JSON run index under `--repeat`, and the pivoted table.
//! Needs root (network namespaces): elsewhere the test prints why it
//! skips, except under CI=true, where it fails.

use std::process::Command;

use serde_json::Value;

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");

#[test]
fn csv_raw_samples_and_run_index() {
    if !testkit::root_or_skip("netgauge outputs") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("netgauge-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, raw) = (dir.join("r.csv"), dir.join("raw.csv"));
    let out = Command::new(NETGAUGE)
        .args([
            "--local", "--json", "-m", "edp,udp", "-s", "64-128", "-g", "1", "-c", "50",
        ])
        .args(["--warmup", "5", "--repeat", "2", "--csv"])
        .arg(&csv)
        .arg("-f")
        .arg(&raw)
        .output()
        .expect("run netgauge");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines[0].get("metadata").is_some(), "{stdout}");
    // 2 runs x 2 modes x 2 sizes, each with its run index.
    let records = &lines[1..];
    assert_eq!(records.len(), 8, "{stdout}");
    for run in 0..2 {
        assert_eq!(
            records.iter().filter(|r| r["run"] == run).count(),
            4,
            "{stdout}"
        );
    }

    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = csv_text.lines().map(|l| l.split(',').collect()).collect();
    assert!(
        rows[0].starts_with(&["run", "mode", "pattern", "size_bytes"]),
        "{csv_text}"
    );
    assert_eq!(rows.len(), 9, "{csv_text}");
    let p50 = rows[0].iter().position(|c| *c == "p50_us").unwrap();
    for r in &rows[1..] {
        assert_eq!(r.len(), rows[0].len(), "{csv_text}");
        let v: f64 = r[p50].parse().unwrap();
        assert!(v > 0.0, "{csv_text}");
    }

    let raw_text = std::fs::read_to_string(&raw).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let raw_rows: Vec<&str> = raw_text.lines().collect();
    assert_eq!(raw_rows[0], "mode,size_bytes,iteration,half_rtt_ns,send_ns");
    // 2 runs x 50 iterations per mode and size, one header; a round trip
    // whose ping was resent (its echo came after the retransmission
    // timeout, e.g. on a loaded host) is not a latency sample
    // (`patterns::resend`), so each resend may take one sample away.
    for mode in ["edp", "udp"] {
        for size in [64u64, 128] {
            let resends: u64 = records
                .iter()
                .filter(|r| r["mode"] == mode && r["size"] == size)
                .map(|r| r["resends"].as_u64().unwrap_or(0))
                .sum();
            let prefix = format!("{mode},{size},");
            let n = raw_rows.iter().filter(|l| l.starts_with(&prefix)).count() as u64;
            assert!(
                n <= 100 && n + resends >= 100,
                "{mode} {size} B: {n} samples, {resends} resends: {raw_text}"
            );
        }
    }
    assert!(
        raw_rows[1..]
            .iter()
            .all(|l| l.starts_with("edp,") || l.starts_with("udp,")),
        "{raw_text}"
    );
}

#[test]
fn pivoted_table_has_sizes_as_rows_and_modes_as_columns() {
    if !testkit::root_or_skip("netgauge outputs") {
        return;
    }
    for verbose in [false, true] {
        let mut cmd = Command::new(NETGAUGE);
        cmd.args([
            "--local", "-m", "edp,tcp", "-s", "64-256", "-g", "1", "-c", "50", "--warmup", "5",
        ]);
        if verbose {
            cmd.arg("-v");
        }
        let out = cmd.output().expect("run netgauge");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        let start = stdout
            .lines()
            .position(|l| {
                l.starts_with("# one_one: p50 half round-trip (us), each with its ratio to tcp")
            })
            .unwrap_or_else(|| panic!("no pivot table: {stdout}"));
        let table: Vec<Vec<&str>> = stdout
            .lines()
            .skip(start + 1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(table[0], ["#", "size", "edp", "tcp"], "{stdout}");
        for (row, size) in table[1..].iter().zip(["64", "128", "256"]) {
            assert_eq!(row[0], size, "{stdout}");
            // Each mode: its p50 and its ratio to tcp.
            assert_eq!(row.len(), 5, "{stdout}");
            for pair in row[1..].chunks(2) {
                assert!(pair[0].parse::<f64>().is_ok_and(|v| v > 0.0), "{stdout}");
                let ratio = pair[1]
                    .strip_suffix('x')
                    .unwrap_or_else(|| panic!("{stdout}"));
                assert!(ratio.parse::<f64>().is_ok_and(|v| v > 0.0), "{stdout}");
            }
            assert_eq!(row[4], "1.00x", "tcp is the reference: {stdout}");
        }
        // Then CPU, the wait policies, the fastest line: the table ends the output.
        assert_eq!(table[4][..3], ["#", "cpu", "us"], "{stdout}");
        assert_eq!(
            table[5].join(" "),
            "# wait: adaptive:50 (edp); block (tcp)",
            "{stdout}"
        );
        assert!(
            table[6]
                .join(" ")
                .starts_with("# fastest (lowest p50 at the most sizes): "),
            "{stdout}"
        );
        assert_eq!(table.len(), 7, "{stdout}");
        // netgauge's short lines (which say which statistic they show) and
        // the long ratio table only with -v.
        assert_eq!(
            stdout.contains("us (min)") && stdout.contains("Mbit/s (p50)"),
            verbose,
            "{stdout}"
        );
        assert_eq!(stdout.contains("p50/tcp"), verbose, "{stdout}");
    }
}

/// `netgauge plot` reads saved JSON lines (header included) and draws an
/// SVG; a bad extension is refused with a message. Needs no privilege.
#[test]
fn plot_subcommand_draws_saved_json() {
    let dir = std::env::temp_dir().join(format!("netgauge-plotcmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("r.json");
    let mut text = String::from("{\"metadata\":{\"mtu\":1500}}\n");
    for (mode, base) in [("edp", 3.0), ("udp", 9.0)] {
        for size in [64u64, 512, 4096] {
            let p50 = base + size as f64 / 1000.0;
            text += &serde_json::json!({
                "mode": mode, "pattern": "one_one", "size": size, "iterations": 10,
                "busy_poll": false, "mbit_s": size as f64 * 8.0 / p50, "mb_s": size as f64 / p50,
                "lat_us": {"min": p50, "p50": p50, "p90": p50, "p99": 2.0 * p50, "max": 3.0 * p50, "avg": p50}
            })
            .to_string();
            text.push('\n');
        }
    }
    std::fs::write(&json, text).unwrap();
    let svg = dir.join("fig.svg");
    let out = Command::new(NETGAUGE)
        .arg("plot")
        .arg(&json)
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("TrueType") {
        testkit::skip("netgauge plot", "no TrueType font installed");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg"), "{drawn}");
    assert!(drawn.contains("message size, bytes"), "{drawn}");
    let out = Command::new(NETGAUGE)
        .arg("plot")
        .arg(&json)
        .arg("-o")
        .arg(dir.join("fig.gif"))
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(".svg or .png"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `-t SECONDS` cuts the iterations of the later sizes to fit the budget
/// (the first size runs the full count: there is no estimate yet).
#[test]
fn time_limit_cuts_iterations() {
    if !testkit::root_or_skip("netgauge outputs") {
        return;
    }
    let out = Command::new(NETGAUGE)
        .args(["--local", "--json", "-m", "edp", "-s", "1K-64K", "-g", "1"])
        .args(["-c", "20000", "--warmup", "10", "-t", "0.02"])
        .output()
        .expect("run netgauge");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let records: Vec<Value> = stdout
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 7, "{stdout}");
    assert_eq!(records[0]["iterations"], 20000, "{stdout}");
    let last = records[6]["iterations"].as_u64().unwrap();
    assert!((1..20000).contains(&last), "{stdout}");
}
