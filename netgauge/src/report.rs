//! Output: netgauge's per-size line, an OSU-style table, JSON records, and
//! netgauge's long form (`-o FILE`) with its host block.

use std::fmt::Write as _;
use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::stats::Summary;

/// The result of one mode and size: one JSON object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Transport: edp, udp, tcp, esp, ctp-udp, ctp-edp.
    pub mode: String,
    /// one_one or stream.
    pub pattern: String,
    /// Message size, bytes.
    pub size: usize,
    /// Measured iterations (round trips, or stream messages).
    pub iterations: usize,
    pub busy_poll: bool,
    /// Half round-trip latency, us (one_one only).
    pub lat_us: Option<Summary>,
    /// Throughput, Mbit/s (10^6 bit/s): size / p50 half round-trip for
    /// one_one (netgauge's median bandwidth), bytes intact / time for stream.
    pub mbit_s: f64,
    /// Throughput, MB/s (10^6 bytes/s).
    pub mb_s: f64,
    /// Fraction of datagrams lost (stream over edp/udp), 0..1.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub loss: Option<f64>,
    /// Send blocking time, us (one_one; netgauge's long form columns B-G).
    #[serde(skip)]
    pub send_us: Option<Summary>,
    /// The transport's own statistics (-v), e.g. ESP's retransmissions.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub transport_stats: Option<String>,
}

/// netgauge's short line: `N bytes -> X us == Y Mbit/s` (min half
/// round-trip; median throughput), or for stream the throughput.
pub fn short_line(r: &Record) -> String {
    match &r.lat_us {
        Some(l) => format!(
            "{} bytes \t -> {:.2} us \t == {:.2} Mbit/s",
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

/// An OSU-style table: size, p50, min, p99, avg half-RTT (us), MB/s.
pub fn table(records: &[Record]) -> String {
    let mut out = String::new();
    let with_mode = records.iter().any(|r| r.mode != records[0].mode);
    if with_mode {
        let _ = write!(out, "{:<8} ", "# mode");
    }
    let _ = writeln!(
        out,
        "{:<10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        if with_mode { "size" } else { "# size" },
        "p50(us)",
        "min(us)",
        "p99(us)",
        "avg(us)",
        "MB/s"
    );
    for r in records {
        if with_mode {
            let _ = write!(out, "{:<8} ", r.mode);
        }
        match &r.lat_us {
            Some(l) => {
                let _ = writeln!(
                    out,
                    "{:<10} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>12.2}",
                    r.size, l.p50, l.min, l.p99, l.avg, r.mb_s
                );
            }
            None => {
                let _ = write!(
                    out,
                    "{:<10} {:>10} {:>10} {:>10} {:>10} {:>12.2}",
                    r.size, "-", "-", "-", "-", r.mb_s
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

/// The comparison table of `--local`: each mode's p50, p99 and throughput
/// per size, with ratios to TCP (latency ratio < 1 and throughput ratio > 1
/// mean better than TCP).
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
        "{:<9} {:<8} {:>8} {:>10} {:>10} {:>12} {:>10} {:>10} {:>8}",
        "# pattern", "mode", "size", "p50(us)", "p99(us)", "Mbit/s", "p50/tcp", "tput/tcp", "loss%"
    );
    for (pattern, size) in &sizes {
        let rows: Vec<&Record> = records
            .iter()
            .filter(|r| &r.pattern == pattern && r.size == *size)
            .collect();
        let tcp = rows.iter().find(|r| r.mode == "tcp");
        for r in &rows {
            let (p50, p99) = r
                .lat_us
                .map(|l| (format!("{:.2}", l.p50), format!("{:.2}", l.p99)))
                .unwrap_or(("-".into(), "-".into()));
            let lat_ratio = match (r.lat_us, tcp.and_then(|t| t.lat_us)) {
                (Some(a), Some(b)) if b.p50 > 0.0 => format!("{:.2}x", a.p50 / b.p50),
                _ => "-".into(),
            };
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
                "{:<9} {:<8} {:>8} {:>10} {:>10} {:>12.1} {:>10} {:>10} {:>8}",
                pattern, r.mode, size, p50, p99, r.mbit_s, lat_ratio, tput_ratio, loss
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
/// legend, then per size `A - B C D E (F G) - H I J K (L M) - N O P Q`
/// (send blocking time, half round-trip, throughput in Mbit/s).
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
## A  -  B  C  D  E  (F G) - H  I  J  K  (L M)  -  N  O  P  Q\n",
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
                    "{} - {:.2} {:.2} {:.2} {:.2} ({:.2} {}) - {:.2} {:.2} {:.2} {:.2} ({:.2} {}) - {:.2} {:.2} {:.2} {:.2}",
                    r.size, b.min, b.avg, b.p50, b.max, b.stddev, b.outliers,
                    l.min, l.avg, l.p50, l.max, l.stddev, l.outliers,
                    bw(l.max), bw(l.avg), bw(l.p50), bw(l.min)
                )?;
            }
            _ => writeln!(w, "{} - stream - {:.2} Mbit/s", r.size, r.mbit_s)?,
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
            lat_us: Some(s),
            mbit_s: mbit,
            mb_s: mbit / 8.0,
            loss: None,
            send_us: Some(s),
            transport_stats: None,
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
        assert_eq!(short_line(&r), "64 bytes \t -> 1.80 us \t == 256.00 Mbit/s");
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
}
