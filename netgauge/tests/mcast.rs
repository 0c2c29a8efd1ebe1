//! End to end: netgauge's multicast modes (`-x 1toN --hosts 3`: a bridge
//! of 3 namespaces, host 0 sending to 2 receivers) with a few messages,
//! every strategy, without and with loss on the receiver links; JSON
//! records, CSV rows and the tables checked; namespaces removed after the
//! run. Needs root: elsewhere the tests print why they skip, except under
//! CI=true, where they fail.

use std::collections::HashMap;
use std::process::Command;

use serde_json::Value;

const NETGAUGE: &str = env!("CARGO_BIN_EXE_netgauge");

const MODES: [&str; 4] = ["mak-iter", "mak-ack", "mak-nak", "mak"];

/// Runs netgauge with `args` plus `-x 1toN --hosts 3 --verify`; returns
/// stdout.
fn run(args: &[&str]) -> String {
    testkit::run_clean(
        Command::new(NETGAUGE)
            .args(["-x", "1toN", "--hosts", "3", "--verify", "--timeout", "30"])
            .args(args),
    )
}

/// The rows of a CSV file, each a map from the header's column names.
fn csv_rows(path: &std::path::Path) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).expect("the CSV file");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn u(r: &Value, k: &str) -> u64 {
    r["counters"][k]
        .as_u64()
        .unwrap_or_else(|| panic!("{k} in {r}"))
}

#[test]
fn latency_two_receivers_every_strategy() {
    if !testkit::root_or_skip("netgauge multicast latency") {
        return;
    }
    let count = 30u64;
    let text = run(&[
        "--json",
        "-c",
        &count.to_string(),
        "-s",
        "1024",
        "-m",
        &MODES.join(","),
    ]);
    let recs = testkit::json_lines(&text);
    assert_eq!(recs.len(), MODES.len(), "{text}");
    for (r, mode) in recs.iter().zip(MODES) {
        assert_eq!(r["mode"], mode, "{r}");
        assert_eq!(r["receivers"], 2);
        assert_eq!(r["size"], 1024);
        assert_eq!(r["complete"], true, "{r}");
        assert_eq!(u(r, "bad"), 0, "{r}");
        let p50 = r["value_us"].as_f64().unwrap();
        assert!(p50 > 0.0 && p50.is_finite(), "{r}");
        assert!(r["p99_us"].as_f64().unwrap() >= p50, "{r}");
        // One 1 KiB message is one packet: iterative sends it once per
        // receiver, the others once to the group.
        let per_msg = if mode == "mak-iter" { 2 } else { 1 };
        assert_eq!(u(r, "data"), count * per_msg, "{r}");
        assert_eq!(u(r, "lost_frames"), 0, "{r}");
        match mode {
            // Every receiver acknowledges every packet, and again each
            // copy the ACK timer Tw sent (a loaded host's late ACK).
            "mak-ack" | "mak-iter" => {
                let acks = u(r, "acks_sent");
                let extra = 2 * u(r, "retx_timeout");
                assert!(acks >= 2 * count && acks <= 2 * count + extra, "{r}");
            }
            "mak-nak" => assert_eq!(u(r, "acks_sent"), 0, "{r}"),
            // Latency mode: every message is a last packet, with an ACK request.
            _ => assert!(u(r, "acks_sent") >= 2 * count, "{r}"),
        }
    }
    // --json prints records only.
    assert!(!text.contains("latency until the last receiver"), "{text}");
}

#[test]
fn stream_under_loss_two_receivers() {
    if !testkit::root_or_skip("netgauge multicast stream under loss") {
        return;
    }
    let count = 400u64;
    let csv = std::env::temp_dir().join(format!("netgauge-mcast-{}.csv", std::process::id()));
    let csv_arg = csv.display().to_string();
    let text = run(&[
        "--csv",
        &csv_arg,
        "-c",
        &count.to_string(),
        "-s",
        "512",
        "-m",
        "mak,mak-nak",
        "--measure",
        "stream",
        "--loss",
        "5",
        // The NAK baseline frees a packet 16 ms after its last
        // transmission (the paper's rule); a NAK from a receiver that a
        // loaded CI host descheduled longer than that finds it gone, and
        // the run ends with the source reported silent (the baseline's
        // documented flaw, seen in CI at load 11). This test checks
        // repair under loss, so the linger outlasts any scheduling delay;
        // with 400 messages inside the 4096-packet window it never
        // throttles the stream.
        "--nak-linger-ms",
        "5000",
    ]);
    let rows = csv_rows(&csv);
    let _ = std::fs::remove_file(&csv);
    assert_eq!(rows.len(), 2, "{text}");
    let n = |r: &HashMap<String, String>, k: &str| -> f64 {
        r[k].parse().unwrap_or_else(|_| panic!("{k} in {r:?}"))
    };
    for (r, mode) in rows.iter().zip(["mak", "mak-nak"]) {
        assert_eq!(r["mode"], mode, "{r:?}");
        assert_eq!(r["receivers"], "2", "{r:?}");
        assert_eq!(r["measure"], "stream", "{r:?}");
        assert_eq!(n(r, "loss_percent"), 5.0, "{r:?}");
        assert_eq!(r["complete"], "true", "{r:?}");
        assert_eq!(n(r, "bad"), 0.0, "{r:?}");
        assert!(n(r, "mbytes_per_s") > 0.0, "{r:?}");
        // 5 % of 2 x 400 first transmissions: losing none has p < 1e-17.
        assert!(n(r, "lost_frames") > 0.0, "{r:?}");
        // Every loss was repaired: by a NAK-asked retransmission or a
        // timer one.
        assert!(n(r, "naks_sent") > 0.0, "{r:?}");
        assert!(
            n(r, "retx_nak") + n(r, "retx_timeout") + n(r, "retx_tail") > 0.0,
            "{r:?}"
        );
    }
    assert!(
        text.contains("stream throughput to every receiver, MB/s"),
        "{text}"
    );
    for m in ["mak", "mak-nak"] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{m} "))),
            "{m}: {text}"
        );
    }
}
