//! NORM beside MAK: `benches/norm/norm_mcast.cpp` over Debian's libnorm,
//! one process per host (`vcluster::Host::command`), UDP to the same IPv4
//! group and bridge as the MAK UDP carrier. The processes print
//! CLOCK_MONOTONIC stamps (the clock every namespace shares); this module
//! turns them into the same [`Outcome`] as the MAK modes.
//!
//! NORM settings: no FEC parity (repair by retransmission, as MAK), a fixed
//! transmit rate (`--norm-rate-mbps`; 0 = NORM's congestion control), every
//! receiver an acking node (latency mode: the next message after every
//! receiver acknowledged the previous one; stream mode: a watermark on the
//! last), loss injected by NORM itself on every receiver (NormSetRxLoss and
//! NormSetTxLoss, the same percentage as the MAK runs' link faults).

use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use vcluster::{Cluster, Process};

use super::config::{Carrier, McastConfig, Measure, Run};
use super::outcome::{Counters, Outcome};

const SOURCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../benches/norm/norm_mcast.cpp"
);

/// Compiles `norm_mcast` next to this executable (once, or again when the
/// source is newer); returns its path.
///
/// Errors: `NotFound` naming libnorm-dev and scripts/install-deps.sh when
/// the compiler or the library is missing; the compiler's output.
pub fn build() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let out = exe
        .parent()
        .map_or_else(|| PathBuf::from("norm_mcast"), |d| d.join("norm_mcast"));
    let newer = |a: &Path, b: &Path| -> bool {
        match (
            a.metadata().and_then(|m| m.modified()),
            b.metadata().and_then(|m| m.modified()),
        ) {
            (Ok(x), Ok(y)) => x > y,
            _ => true,
        }
    };
    if out.exists() && !newer(Path::new(SOURCE), &out) {
        return Ok(out);
    }
    if !Path::new("/usr/include/normApi.h").exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "NORM mode needs libnorm-dev (/usr/include/normApi.h): run scripts/build-norm.sh (it installs libnorm-dev)",
        ));
    }
    let r = Command::new("c++")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(SOURCE)
        .arg("-lnorm")
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("c++ (to build {SOURCE}): {e}")))?;
    if !r.status.success() {
        return Err(io::Error::other(format!(
            "building {SOURCE} failed: {}",
            String::from_utf8_lossy(&r.stderr)
        )));
    }
    Ok(out)
}

/// A child whose stdout lines arrive on a channel.
struct Child {
    proc: Process,
    lines: mpsc::Receiver<String>,
}

impl Child {
    fn start(mut cmd: Command) -> io::Result<Child> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut proc = Process::spawn(&mut cmd)?;
        let out = proc
            .take_stdout()
            .ok_or_else(|| io::Error::other("norm_mcast: no stdout"))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Ok(Child { proc, lines })
    }

    /// Lines until one starting with `last` (included), within `limit`.
    fn until(&self, last: &str, limit: Duration) -> io::Result<Vec<String>> {
        let end = Instant::now() + limit;
        let mut v = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let stop = l.starts_with(last);
                    v.push(l);
                    if stop {
                        return Ok(v);
                    }
                }
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "norm_mcast (pid {}) did not print {last:?} within {limit:?}",
                            self.proc.id()
                        ),
                    ))
                }
            }
        }
    }
}

fn stamps(lines: &[String], tag: &str, count: usize) -> Vec<u64> {
    let mut v = vec![0u64; count];
    for l in lines {
        let mut it = l.split_whitespace();
        if it.next() != Some(tag) {
            continue;
        }
        let (Some(k), Some(t)) = (it.next(), it.next()) else {
            continue;
        };
        if let (Ok(k), Ok(t)) = (k.parse::<usize>(), t.parse::<u64>()) {
            if k < count {
                v[k] = t;
            }
        }
    }
    v
}

/// NORM from host 0 to hosts 1..=n.
pub fn run(net: &Cluster, o: &McastConfig, bin: &Path, r: &Run) -> io::Result<Outcome> {
    let Run {
        n,
        size,
        count,
        measure,
        loss,
        ..
    } = *r;
    let port = r.port().to_string();
    let group = super::GROUP_IP.to_string();
    let limit = o.timeout;
    let mut rx = Vec::new();
    for i in 1..=n {
        let h = net.host(i);
        let mut c = h.command(bin);
        c.args(["recv", &group, &port, &h.iface])
            .arg((i + 1).to_string())
            .arg(count.to_string())
            .arg(size.to_string())
            .arg(format!("{}", loss * 100.0));
        let child = Child::start(c)?;
        child.until("READY", limit)?;
        rx.push(child);
    }
    let h0 = net.host(0);
    let segment = o.mtu - 28 - 48;
    let mut c = h0.command(bin);
    c.args(["send", &group, &port, &h0.iface, "1"])
        .arg(count.to_string())
        .arg(size.to_string())
        .arg(match measure {
            Measure::Latency => "latency",
            Measure::Stream => "stream",
        })
        .arg(o.norm_rate_mbps.to_string())
        .arg(segment.to_string());
    for i in 1..=n {
        c.arg((i + 1).to_string());
    }
    let tx = Child::start(c)?;
    tx.until("READY", limit)?;
    let sent = tx.until("END", limit)?;
    let acked = sent
        .last()
        .is_some_and(|l| l.ends_with("acked") && !l.contains("NOT"));
    let send_at = stamps(&sent, "S", count);
    let mut recv_at = Vec::new();
    let mut bad = 0;
    for r in &rx {
        let lines = r.until("DONE", limit)?;
        bad += lines
            .last()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|b| b.parse::<u64>().ok())
            .unwrap_or(0);
        recv_at.push(stamps(&lines, "R", count));
    }
    drop(rx);
    drop(tx);
    let last = |k: usize| recv_at.iter().map(|r| r[k]).max().unwrap_or(0);
    let complete = acked && recv_at.iter().all(|r| r.iter().all(|&t| t != 0));
    let mut latency_ns = Vec::new();
    if measure == Measure::Latency {
        for (k, &sent) in send_at.iter().enumerate().take(count).skip(count / 10) {
            latency_ns.push(last(k).saturating_sub(sent));
        }
    }
    let end = (0..count).map(last).max().unwrap_or(0);
    Ok(Outcome {
        mode: "norm",
        carrier: Carrier::Udp,
        receivers: n,
        size,
        count,
        measure,
        loss,
        elapsed: Duration::from_nanos(end.saturating_sub(send_at[0])),
        latency_ns,
        complete,
        silent: Vec::new(),
        counters: Counters {
            data: count as u64,
            bad,
            ..Counters::default()
        },
    })
}
