//! CSV output (RFC 4180): one header row, then one row per record (mode,
//! pattern and size), with the run index under `--repeat`. Latency columns
//! are half round-trip times in us; empty cells where a value does not
//! apply (no latency for stream, no loss for one_one).

use std::io::{self, Write};
use std::path::Path;

use crate::report::Record;

/// The header row's columns, in order.
pub const COLUMNS: [&str; 20] = [
    "run",
    "mode",
    "pattern",
    "size_bytes",
    "iterations",
    "wait",
    "min_us",
    "p50_us",
    "p90_us",
    "p99_us",
    "max_us",
    "avg_us",
    "stddev_us",
    "outliers",
    "cpu_client_us_per_iter",
    "cpu_server_us_per_iter",
    "mbit_s",
    "mb_s",
    "loss_fraction",
    "resends",
];

/// Whether `-o PATH` asks for CSV rather than netgauge's long form: a
/// `.csv` extension (any case).
pub fn is_csv_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

/// Quotes a field when it holds a comma, quote or line break (RFC 4180
/// section 2, rules 6 and 7).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn num(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_default()
}

/// Writes the header row.
pub fn write_header(w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, "{}", COLUMNS.join(","))
}

/// Writes one row for `r`, from run `run` (0 without `--repeat`).
pub fn write_row(w: &mut dyn Write, run: usize, r: &Record) -> io::Result<()> {
    let l = r.lat_us;
    let cells = [
        run.to_string(),
        field(&r.mode),
        field(&r.pattern),
        r.size.to_string(),
        r.iterations.to_string(),
        field(&r.wait),
        num(l.map(|l| l.min)),
        num(l.map(|l| l.p50)),
        num(l.map(|l| l.p90)),
        num(l.map(|l| l.p99)),
        num(l.map(|l| l.max)),
        num(l.map(|l| l.avg)),
        num(l.map(|l| l.stddev)),
        l.map(|l| l.outliers.to_string()).unwrap_or_default(),
        num(r.cpu_us_per_iter_client),
        num(r.cpu_us_per_iter_server),
        format!("{:.3}", r.mbit_s),
        format!("{:.3}", r.mb_s),
        r.loss.map(|x| format!("{x:.6}")).unwrap_or_default(),
        r.resends.map(|x| x.to_string()).unwrap_or_default(),
    ];
    debug_assert_eq!(cells.len(), COLUMNS.len());
    writeln!(w, "{}", cells.join(","))
}

/// Writes a whole CSV file: the header and the rows of each run.
pub fn write_runs(path: &Path, runs: &[Vec<Record>]) -> io::Result<()> {
    let f = std::fs::File::create(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot create CSV file {}: {e}", path.display()),
        )
    })?;
    let mut w = io::BufWriter::new(f);
    write_header(&mut w)?;
    for (i, run) in runs.iter().enumerate() {
        for r in run {
            write_row(&mut w, i, r)?;
        }
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;

    fn rec(mode: &str, wait: &str, lat: bool, loss: Option<f64>) -> Record {
        let s = Summary {
            min: 1.0,
            p50: 2.0,
            p90: 2.5,
            p99: 3.25,
            max: 9.0,
            avg: 2.125,
            stddev: 0.5,
            outliers: 7,
        };
        Record {
            mode: mode.into(),
            pattern: if lat { "one_one" } else { "stream" }.into(),
            size: 1024,
            iterations: 100,
            busy_poll: false,
            wait: wait.into(),
            lat_us: lat.then_some(s),
            cpu_us_per_iter_client: Some(1.5),
            cpu_us_per_iter_server: None,
            mbit_s: 4096.0,
            mb_s: 512.0,
            loss,
            idle_edp_sockets: 0,
            idle_esp_listeners: 0,
            procs_per_host: 1,
            send_us: None,
            transport_stats: None,
            resends: None,
        }
    }

    #[test]
    fn rows_line_up_with_the_header() {
        let mut out = Vec::new();
        write_header(&mut out).unwrap();
        write_row(&mut out, 3, &rec("edp", "busy", true, None)).unwrap();
        write_row(&mut out, 0, &rec("udp", "adaptive:50", false, Some(0.25))).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.len() == COLUMNS.len()), "{text}");
        let col = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
        let edp = &lines[1];
        assert_eq!(edp[col("run")], "3");
        assert_eq!(edp[col("mode")], "edp");
        assert_eq!(edp[col("size_bytes")], "1024");
        assert_eq!(edp[col("p50_us")], "2.000");
        assert_eq!(edp[col("p99_us")], "3.250");
        assert_eq!(edp[col("stddev_us")], "0.500");
        assert_eq!(edp[col("outliers")], "7");
        assert_eq!(edp[col("cpu_server_us_per_iter")], "");
        assert_eq!(edp[col("loss_fraction")], "");
        let udp = &lines[2];
        assert_eq!(udp[col("p50_us")], "");
        assert_eq!(udp[col("loss_fraction")], "0.250000");
        assert_eq!(udp[col("mb_s")], "512.000");
    }

    #[test]
    fn fields_with_separators_are_quoted() {
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("plain"), "plain");
    }

    #[test]
    fn csv_extension_is_recognised() {
        assert!(is_csv_path(Path::new("out/results.CSV")));
        assert!(is_csv_path(Path::new("r.csv")));
        assert!(!is_csv_path(Path::new("r.txt")));
        assert!(!is_csv_path(Path::new("csv")));
    }
}
