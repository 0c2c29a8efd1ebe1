//! End to end: `netgauge-mcast` (pattern 1toN on a bridge of N + 1
//! namespaces) with 2 receivers and a few messages, every strategy, without
//! and with loss on the receiver links; JSON records and the tables checked;
//! namespaces removed after the run. Needs root: elsewhere the tests print
//! why they skip, except under CI=true, where they fail.

use std::process::Command;

use serde_json::Value;

const MCAST: &str = env!("CARGO_BIN_EXE_netgauge-mcast");

const MODES: [&str; 4] = ["mak-iter", "mak-ack", "mak-nak", "mak"];

/// Runs netgauge-mcast with `args` plus `--json --verify`; returns the JSON
/// records and the text of stdout (tables).
fn run(args: &[&str]) -> (Vec<Value>, String) {
    let stdout = testkit::run_clean(
        Command::new(MCAST)
            .args(["--json", "--verify", "--timeout-s", "30"])
            .args(args),
    );
    (testkit::json_lines(&stdout), stdout)
}

fn u(r: &Value, k: &str) -> u64 {
    r["counters"][k]
        .as_u64()
        .unwrap_or_else(|| panic!("{k} in {r}"))
}

#[test]
fn latency_two_receivers_every_strategy() {
    if !testkit::root_or_skip("netgauge-mcast latency") {
        return;
    }
    let count = 30u64;
    let (recs, text) = run(&[
        "--receivers",
        "2",
        "-c",
        &count.to_string(),
        "-s",
        "1024",
        "-m",
        &MODES.join(","),
    ]);
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
    assert!(text.contains("latency until the last receiver has the message, p50 us"));
    for m in MODES {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{m} "))),
            "{m}: {text}"
        );
    }
}

#[test]
fn stream_under_loss_two_receivers() {
    if !testkit::root_or_skip("netgauge-mcast stream under loss") {
        return;
    }
    let count = 400u64;
    let (recs, text) = run(&[
        "--receivers",
        "2",
        "-c",
        &count.to_string(),
        "-s",
        "512",
        "-m",
        "mak,mak-nak",
        "--measure",
        "stream",
        "--loss",
        "0.05",
    ]);
    assert_eq!(recs.len(), 2, "{text}");
    for r in &recs {
        assert_eq!(r["complete"], true, "{r}");
        assert_eq!(u(r, "bad"), 0, "{r}");
        assert!(r["mbytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
        // 5 % of 2 x 400 first transmissions: losing none has p < 1e-17.
        let lost = u(r, "lost_frames");
        assert!(lost > 0, "{r}");
        // Every loss was repaired: by a NAK-asked retransmission or a
        // timer one.
        assert!(u(r, "naks_sent") > 0, "{r}");
        assert!(
            u(r, "retx_nak") + u(r, "retx_timeout") + u(r, "retx_tail") > 0,
            "{r}"
        );
    }
    assert!(
        text.contains("stream throughput to every receiver, MB/s"),
        "{text}"
    );
}
