//! Output: netgauge's per-size line, an OSU-style table, JSON records, and
//! netgauge's long form (`-o FILE`) with its host block.

use std::fmt::Write as _;
use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::stats::Summary;

/// The result of one mode and size: one JSON object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Transport: eth, edp, udp, udp-bp, tcp, tcp-bp, esp, ctp-udp, ctp-edp,
    /// comm-udp, comm-edp.
    pub mode: String,
    /// one_one or stream.
    pub pattern: String,
    /// Message size, bytes.
    pub size: usize,
    /// Measured iterations (round trips, or stream messages).
    pub iterations: usize,
    /// The session busy-polled (`--wait busy`).
    pub busy_poll: bool,
    /// How this mode waited: `busy`, `block`, `adaptive:US` (our modes;
    /// udp and tcp `busy` or `block`), `so_busy_poll:US` (udp-bp, tcp-bp).
    #[serde(default)]
    pub wait: String,
    /// Half round-trip latency, us (one_one only).
    pub lat_us: Option<Summary>,
    /// The client's CPU time (user + system, getrusage, all threads) per
    /// iteration of the step, warm-up included, us.
    #[serde(default)]
    pub cpu_us_per_iter_client: Option<f64>,
    /// The server's CPU time per iteration, us, as the client's.
    #[serde(default)]
    pub cpu_us_per_iter_server: Option<f64>,
    /// Throughput, Mbit/s (10^6 bit/s): size / p50 half round-trip for
    /// one_one (netgauge's median bandwidth), bytes intact / time for stream.
    pub mbit_s: f64,
    /// Throughput, MB/s (10^6 bytes/s).
    pub mb_s: f64,
    /// Fraction of datagrams lost (stream over eth/edp/udp), 0..1.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub loss: Option<f64>,
    /// Idle EDP sockets open in each netgauge process (`--idle-edp`).
    #[serde(default)]
    pub idle_edp_sockets: usize,
    /// Idle ESP listeners open in each netgauge process (`--idle-esp`).
    #[serde(default)]
    pub idle_esp_listeners: usize,
    /// netgauge processes per host, each holding an EDP socket and an ESP
    /// listener (`--idle-procs`; 1 = the measured one alone).
    #[serde(default = "one")]
    pub procs_per_host: usize,
    /// Send blocking time, us (one_one; netgauge's long form columns B-G).
    /// Serialized so that `--local`, which reads its client's JSON, can
    /// write the long form too.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub send_us: Option<Summary>,
    /// The transport's own statistics (-v), e.g. ESP's retransmissions.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub transport_stats: Option<String>,
    /// one_one over datagram modes: pings sent again after their echo did
    /// not arrive within the retransmission timeout
    /// (`patterns::resend`); `loss` is then resends / pings sent.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resends: Option<u64>,
}

/// A size step of a mode that produced no record, and why: a cell of
/// `FAIL` in the tables, a `{"failure": ...}` line in `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub mode: String,
    pub pattern: String,
    /// Message size, bytes.
    pub size: usize,
    /// What went wrong (the failing process's message).
    pub error: String,
}

fn one() -> usize {
    1
}

/// A CPU figure for tables: `-` when unknown.
fn cpu_cell(v: Option<f64>) -> String {
    v.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into())
}

/// netgauge's short line: `N bytes -> X us (min) == Y Mbit/s (p50)`: the
/// minimum half round-trip, as netgauge's short line, and the throughput
/// of the median half round-trip, each labelled with its statistic; for
/// stream the throughput.
pub fn short_line(r: &Record) -> String {
    match &r.lat_us {
        Some(l) => format!(
            "{} bytes \t -> {:.2} us (min) \t == {:.2} Mbit/s (p50)",
            r.size, l.min, r.mbit_s
        ),
        None => {
            let mut s = format!("{} bytes \t -> stream \t == {:.2} Mbit/s", r.size, r.mbit_s);
            if let Some(loss) = r.loss {
                let _ = write!(s, " \t ({:.3} % lost)", loss * 100.0);
            }
            s
        }
    }
}

/// An OSU-style table: size, p50 half round-trip (us), CPU time per
/// iteration of client and server (us), min, p99, avg half-RTT and its
/// standard deviation (us), MB/s.
pub fn table(records: &[Record]) -> String {
    let mut out = String::new();
    let with_mode = records.iter().any(|r| r.mode != records[0].mode);
    if with_mode {
        let _ = write!(out, "{:<8} ", "# mode");
    }
    let _ = writeln!(
        out,
        "{:<10} {:>10} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10} {:>12}",
        if with_mode { "size" } else { "# size" },
        "p50(us)",
        "cpu_cli(us)",
        "cpu_srv(us)",
        "min(us)",
        "p99(us)",
        "avg(us)",
        "stddev(us)",
        "MB/s"
    );
    for r in records {
        if with_mode {
            let _ = write!(out, "{:<8} ", r.mode);
        }
        let (cc, cs) = (
            cpu_cell(r.cpu_us_per_iter_client),
            cpu_cell(r.cpu_us_per_iter_server),
        );
        match &r.lat_us {
            Some(l) => {
                let _ = writeln!(
                    out,
                    "{:<10} {:>10.2} {:>11} {:>11} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>12.2}",
                    r.size, l.p50, cc, cs, l.min, l.p99, l.avg, l.stddev, r.mb_s
                );
            }
            None => {
                let _ = write!(
                    out,
                    "{:<10} {:>10} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10} {:>12.2}",
                    r.size, "-", cc, cs, "-", "-", "-", "-", r.mb_s
                );
                if let Some(loss) = r.loss {
                    let _ = write!(out, "  ({:.3} % lost)", loss * 100.0);
                }
                out.push('\n');
            }
        }
    }
    out
}

/// The comparison table of `--local`: each mode's wait policy, p50, CPU
/// time per iteration of client and server, p99 and throughput per size,
/// with its p50 ratio to the raw floor (eth), to EDP, to kernel UDP and to
/// TCP, and its throughput ratio to TCP (latency ratio < 1 and throughput
/// ratio > 1 mean better than the reference).
pub fn comparison(records: &[Record]) -> String {
    let mut sizes: Vec<(String, usize)> = Vec::new();
    for r in records {
        let k = (r.pattern.clone(), r.size);
        if !sizes.contains(&k) {
            sizes.push(k);
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# cpu_cli, cpu_srv: CPU time (user + system) per iteration of client and server, us"
    );
    let _ = writeln!(
        out,
        "{:<9} {:<8} {:<15} {:>8} {:>10} {:>8} {:>8} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "# pattern",
        "mode",
        "wait",
        "size",
        "p50(us)",
        "cpu_cli",
        "cpu_srv",
        "p99(us)",
        "Mbit/s",
        "p50/eth",
        "p50/edp",
        "p50/udp",
        "p50/tcp",
        "tput/tcp",
        "loss%"
    );
    for (pattern, size) in &sizes {
        let rows: Vec<&Record> = records
            .iter()
            .filter(|r| &r.pattern == pattern && r.size == *size)
            .collect();
        let find = |m: &str| rows.iter().find(|r| r.mode == m);
        let tcp = find("tcp");
        let lat_ratio = |r: &Record, reference: Option<&&Record>| match (
            r.lat_us,
            reference.and_then(|t| t.lat_us),
        ) {
            (Some(a), Some(b)) if b.p50 > 0.0 => format!("{:.2}x", a.p50 / b.p50),
            _ => "-".into(),
        };
        for r in &rows {
            let (p50, p99) = r
                .lat_us
                .map(|l| (format!("{:.2}", l.p50), format!("{:.2}", l.p99)))
                .unwrap_or(("-".into(), "-".into()));
            let tput_ratio = match tcp {
                Some(t) if t.mbit_s > 0.0 => format!("{:.2}x", r.mbit_s / t.mbit_s),
                _ => "-".into(),
            };
            let loss = r
                .loss
                .map(|l| format!("{:.3}", l * 100.0))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "{:<9} {:<8} {:<15} {:>8} {:>10} {:>8} {:>8} {:>10} {:>12.1} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8}",
                pattern,
                r.mode,
                if r.wait.is_empty() { "-" } else { &r.wait },
                size,
                p50,
                cpu_cell(r.cpu_us_per_iter_client),
                cpu_cell(r.cpu_us_per_iter_server),
                p99,
                r.mbit_s,
                lat_ratio(r, find("eth")),
                lat_ratio(r, find("edp")),
                lat_ratio(r, find("udp")),
                lat_ratio(r, tcp),
                tput_ratio,
                loss
            );
        }
    }
    out
}

/// Summarises repeated runs: for each mode (in `modes` order), pattern and
/// size, the record whose p50 half round-trip (one_one) or throughput
/// (stream) is the median over the runs. With an even number of runs the
/// lower-latency (higher-throughput) middle record is taken.
pub fn median_over_runs(runs: &[Vec<Record>], modes: &[&str]) -> Vec<Record> {
    let mut out = Vec::new();
    let Some(first) = runs.first() else {
        return out;
    };
    let mut keys: Vec<(String, usize)> = Vec::new();
    for r in first {
        let k = (r.pattern.clone(), r.size);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (pattern, size) in &keys {
        for mode in modes {
            let mut rs: Vec<&Record> = runs
                .iter()
                .flatten()
                .filter(|r| r.mode == *mode && &r.pattern == pattern && r.size == *size)
                .collect();
            if rs.is_empty() {
                continue;
            }
            // Order best first: lower p50, or higher throughput for stream.
            rs.sort_by(|a, b| match (a.lat_us, b.lat_us) {
                (Some(x), Some(y)) => x.p50.total_cmp(&y.p50),
                _ => b.mbit_s.total_cmp(&a.mbit_s),
            });
            out.push(rs[(rs.len() - 1) / 2].clone());
        }
    }
    out
}

/// netgauge's host block (`write_host_information`): uname fields and the
/// execution time.
pub fn host_block() -> String {
    let mut out = String::new();
    if let Ok(u) = nix::sys::utsname::uname() {
        let f = |s: &std::ffi::OsStr| s.to_string_lossy().into_owned();
        let _ = writeln!(out, "# Sysname : {}", f(u.sysname()));
        let _ = writeln!(out, "# Nodename: {}", f(u.nodename()));
        let _ = writeln!(out, "# Release : {}", f(u.release()));
        let _ = writeln!(out, "# Version : {}", f(u.version()));
        let _ = writeln!(out, "# Machine : {}", f(u.machine()));
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "# Execution time and date (UTC, seconds since the epoch): {secs}"
    );
    out
}

/// Writes netgauge's long form for `records` of one mode: the header
/// legend, then per size `A - B C D E (F G) - H I J K (L M) - N O P Q - R S`
/// (send blocking time, half round-trip, throughput in Mbit/s, and this
/// project's addition: CPU time per iteration of client and server).
pub fn write_long_form(w: &mut dyn Write, records: &[Record]) -> io::Result<()> {
    w.write_all(host_block().as_bytes())?;
    let mode = records.first().map(|r| r.mode.as_str()).unwrap_or("-");
    writeln!(
        w,
        "## Netgauge v{} (Rust) - mode {mode} - 2 processes",
        env!("CARGO_PKG_VERSION")
    )?;
    w.write_all(
        b"##\n## A...message size [byte]\n##\n\
## B...minimum send blocking time\n## C...average send blocking time\n\
## D...median send blocking time\n## E...maximum send blocking time\n\
## F...standard deviation for send blocking time (stddev)\n\
## G...number of send blocking time values, that were bigger than avg + 2 * stddev.\n##\n\
## H...minimum RTT/2\n## I...average RTT/2\n## J...median RTT/2\n## K...maximum RTT/2\n\
## L...standard deviation for RTT/2 (stddev)\n\
## M...number of RTT/2 values, that were bigger than avg + 2 * stddev.\n##\n\
## N...minimum throughput [Mbit/sec]\n## O...average throughput [Mbit/sec]\n\
## P...median throughput [Mbit/sec]\n## Q...maximum throughput [Mbit/sec]\n##\n\
## R...CPU time per iteration, client [usec] (user + system, getrusage)\n\
## S...CPU time per iteration, server [usec]\n##\n\
## A  -  B  C  D  E  (F G) - H  I  J  K  (L M)  -  N  O  P  Q  -  R  S\n",
    )?;
    for r in records {
        match (&r.lat_us, &r.send_us) {
            (Some(l), Some(b)) => {
                let bw = |t: f64| {
                    if t > 0.0 {
                        r.size as f64 / t * 8.0
                    } else {
                        0.0
                    }
                };
                writeln!(
                    w,
                    "{} - {:.2} {:.2} {:.2} {:.2} ({:.2} {}) - {:.2} {:.2} {:.2} {:.2} ({:.2} {}) - {:.2} {:.2} {:.2} {:.2} - {} {}",
                    r.size, b.min, b.avg, b.p50, b.max, b.stddev, b.outliers,
                    l.min, l.avg, l.p50, l.max, l.stddev, l.outliers,
                    bw(l.max), bw(l.avg), bw(l.p50), bw(l.min),
                    cpu_cell(r.cpu_us_per_iter_client), cpu_cell(r.cpu_us_per_iter_server)
                )?;
            }
            _ => writeln!(
                w,
                "{} - stream - {:.2} Mbit/s - {} {}",
                r.size,
                r.mbit_s,
                cpu_cell(r.cpu_us_per_iter_client),
                cpu_cell(r.cpu_us_per_iter_server)
            )?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(mode: &str, p50: f64, mbit: f64) -> Record {
        let s = Summary {
            min: p50 * 0.9,
            p50,
            p90: p50 * 1.1,
            p99: p50 * 1.5,
            max: p50 * 3.0,
            avg: p50,
            stddev: 0.1,
            outliers: 1,
        };
        Record {
            mode: mode.into(),
            pattern: "one_one".into(),
            size: 64,
            iterations: 10,
            busy_poll: true,
            wait: "busy".into(),
            lat_us: Some(s),
            cpu_us_per_iter_client: Some(1.5),
            cpu_us_per_iter_server: Some(2.25),
            mbit_s: mbit,
            mb_s: mbit / 8.0,
            loss: None,
            idle_edp_sockets: 0,
            idle_esp_listeners: 0,
            procs_per_host: 1,
            send_us: Some(s),
            transport_stats: None,
            resends: None,
        }
    }

    #[test]
    fn median_of_runs() {
        let runs: Vec<Vec<Record>> = [3.0, 1.0, 2.0, 5.0, 4.0]
            .iter()
            .map(|&p| vec![rec("edp", p, 1.0), rec("tcp", 10.0 - p, 1.0)])
            .collect();
        let m = median_over_runs(&runs, &["tcp", "edp"]);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mode, "tcp");
        assert_eq!(m[0].lat_us.unwrap().p50, 7.0);
        assert_eq!(m[1].lat_us.unwrap().p50, 3.0);
    }

    #[test]
    fn formats() {
        let r = rec("edp", 2.0, 256.0);
        assert_eq!(
            short_line(&r),
            "64 bytes \t -> 1.80 us (min) \t == 256.00 Mbit/s (p50)"
        );
        let c = comparison(&[r.clone(), rec("tcp", 4.0, 128.0)]);
        assert!(c.contains("0.50x"), "{c}");
        assert!(c.contains("2.00x"), "{c}");
        let mut long = Vec::new();
        write_long_form(&mut long, std::slice::from_ref(&r)).unwrap();
        let long = String::from_utf8(long).unwrap();
        assert!(long.contains("# Sysname : Linux"), "{long}");
        assert!(long
            .lines()
            .last()
            .unwrap()
            .starts_with("64 - 1.80 2.00 2.00 6.00 (0.10 1) - "));
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["lat_us"]["p50"], 2.0);
        assert_eq!(j["mode"], "edp");
        assert!(j.get("loss").is_none());
        assert!(table(&[r]).contains("64"));
    }

    #[test]
    fn cpu_wait_and_floor_ratios_are_reported() {
        let r = rec("edp", 2.0, 256.0);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["cpu_us_per_iter_client"], 1.5);
        assert_eq!(j["cpu_us_per_iter_server"], 2.25);
        assert_eq!(j["wait"], "busy");
        assert_eq!(j["procs_per_host"], 1);
        assert_eq!(j["idle_edp_sockets"], 0);
        // Records of an older client (no new fields) still parse.
        let mut old = j.clone();
        for k in [
            "wait",
            "cpu_us_per_iter_client",
            "cpu_us_per_iter_server",
            "idle_edp_sockets",
            "idle_esp_listeners",
            "procs_per_host",
        ] {
            old.as_object_mut().unwrap().remove(k);
        }
        let back: Record = serde_json::from_value(old).unwrap();
        assert_eq!(back.procs_per_host, 1);
        assert_eq!(back.cpu_us_per_iter_client, None);

        let t = table(std::slice::from_ref(&r));
        let row = t.lines().nth(1).unwrap();
        // p50 first, then the CPU columns beside it.
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cols[..4], &["64", "2.00", "1.50", "2.25"], "{t}");
        // avg, then its standard deviation, then MB/s.
        assert_eq!(&cols[6..], &["2.00", "0.10", "32.00"], "{t}");
        assert!(t.lines().next().unwrap().contains("stddev(us)"), "{t}");
        assert_eq!(j["lat_us"]["stddev"], 0.1);

        let c = comparison(&[rec("eth", 1.6, 320.0), r.clone(), rec("udp", 8.0, 64.0)]);
        let edp_row = c.lines().find(|l| l.contains(" edp ")).unwrap();
        assert!(edp_row.contains("1.25x"), "edp / eth: {c}");
        assert!(edp_row.contains("0.25x"), "edp / udp: {c}");
        assert!(edp_row.contains(" busy "), "{c}");
        let mut long = Vec::new();
        write_long_form(&mut long, std::slice::from_ref(&r)).unwrap();
        let long = String::from_utf8(long).unwrap();
        assert!(
            long.lines().last().unwrap().ends_with(" - 1.50 2.25"),
            "{long}"
        );
    }

    #[test]
    fn long_form_survives_json() {
        // `--local -o` writes the long form from the records its clients
        // printed as JSON: every field of a one_one row must come through.
        let mut r = rec("udp", 2.0, 256.0);
        r.resends = Some(3);
        let mut direct = Vec::new();
        write_long_form(&mut direct, std::slice::from_ref(&r)).unwrap();
        let back: Record = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.resends, Some(3));
        let mut through = Vec::new();
        write_long_form(&mut through, &[back]).unwrap();
        let row = |b: &[u8]| {
            String::from_utf8_lossy(b)
                .lines()
                .last()
                .unwrap()
                .to_string()
        };
        assert_eq!(row(&through), row(&direct));
        assert!(row(&through).contains("(0.10 1)"), "{}", row(&through));
    }
}
