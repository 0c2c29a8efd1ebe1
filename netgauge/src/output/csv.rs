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

fn num(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_default()
}

/// A CSV writer on `w` (the `csv` crate: RFC 4180 quoting, `\n` line
/// ends).
fn writer<W: Write>(w: W) -> csv::Writer<W> {
    csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(w)
}

/// Writes the header row.
fn write_header<W: Write>(w: &mut csv::Writer<W>) -> csv::Result<()> {
    w.write_record(COLUMNS)
}

/// Writes one row for `r`, from run `run` (0 without `--repeat`).
fn write_row<W: Write>(w: &mut csv::Writer<W>, run: usize, r: &Record) -> csv::Result<()> {
    let l = r.lat_us;
    let cells = [
        run.to_string(),
        r.mode.clone(),
        r.pattern.clone(),
        r.size.to_string(),
        r.iterations.to_string(),
        r.wait.clone(),
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
    w.write_record(&cells)
}

/// Creates the CSV file `path`. Errors: naming the file.
fn create(path: &Path) -> io::Result<csv::Writer<io::BufWriter<std::fs::File>>> {
    let f = std::fs::File::create(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot create CSV file {}: {e}", path.display()),
        )
    })?;
    Ok(writer(io::BufWriter::new(f)))
}

/// Writes a whole CSV file: the header and the rows of each run.
/// Errors: creating or writing the file.
pub fn write_runs(path: &Path, runs: &[Vec<Record>]) -> io::Result<()> {
    let mut w = create(path)?;
    write_header(&mut w)?;
    for (i, run) in runs.iter().enumerate() {
        for r in run {
            write_row(&mut w, i, r)?;
        }
    }
    w.flush()
}

/// Writes `rows` to the CSV file `path`, the header from the first row's
/// field names (serde). Errors: creating or writing the file.
pub fn write_serialized<T: serde::Serialize>(
    path: &Path,
    rows: impl IntoIterator<Item = T>,
) -> io::Result<()> {
    let mut w = create(path)?;
    for r in rows {
        w.serialize(r)?;
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
        let mut w = writer(Vec::new());
        write_header(&mut w).unwrap();
        write_row(&mut w, 3, &rec("edp", "busy", true, None)).unwrap();
        write_row(&mut w, 0, &rec("udp", "adaptive:50", false, Some(0.25))).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
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
        let mut w = writer(Vec::new());
        w.write_record(["a,b", "say \"hi\"", "plain"]).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text, "\"a,b\",\"say \"\"hi\"\"\",plain\n");
    }

    #[test]
    fn csv_extension_is_recognised() {
        assert!(is_csv_path(Path::new("out/results.CSV")));
        assert!(is_csv_path(Path::new("r.csv")));
        assert!(!is_csv_path(Path::new("r.txt")));
        assert!(!is_csv_path(Path::new("csv")));
    }
}
