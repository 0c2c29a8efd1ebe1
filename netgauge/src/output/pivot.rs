//! The pivoted `--local` table: one row per size, one column per mode, for
//! each pattern; cells are the p50 half round-trip in us (one_one) or the
//! throughput in Mbit/s (stream).

use std::fmt::Write as _;

use crate::report::Record;

/// Renders `records` (in run order) as size x mode tables, modes in the
/// order they first appear. A cell without a record shows `-`.
pub fn pivot(records: &[Record]) -> String {
    let mut patterns: Vec<&str> = Vec::new();
    for r in records {
        if !patterns.contains(&r.pattern.as_str()) {
            patterns.push(&r.pattern);
        }
    }
    let mut out = String::new();
    for pattern in patterns {
        let rs: Vec<&Record> = records.iter().filter(|r| r.pattern == pattern).collect();
        let mut modes: Vec<&str> = Vec::new();
        let mut sizes: Vec<usize> = Vec::new();
        for r in &rs {
            if !modes.contains(&r.mode.as_str()) {
                modes.push(&r.mode);
            }
            if !sizes.contains(&r.size) {
                sizes.push(r.size);
            }
        }
        sizes.sort_unstable();
        let stream = rs.iter().all(|r| r.lat_us.is_none());
        let _ = writeln!(
            out,
            "# {pattern}: {} by size (rows) and mode (columns)",
            if stream {
                "throughput, Mbit/s,"
            } else {
                "p50 half round-trip, us,"
            }
        );
        let _ = write!(out, "{:<10}", "# size");
        for m in &modes {
            let _ = write!(out, " {m:>10}");
        }
        out.push('\n');
        for size in sizes {
            let _ = write!(out, "{size:<10}");
            for m in &modes {
                let cell = rs
                    .iter()
                    .find(|r| r.mode == *m && r.size == size)
                    .map(|r| match r.lat_us {
                        Some(l) if !stream => format!("{:.2}", l.p50),
                        _ => format!("{:.1}", r.mbit_s),
                    })
                    .unwrap_or_else(|| "-".into());
                let _ = write!(out, " {cell:>10}");
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;

    fn rec(mode: &str, size: usize, p50: Option<f64>, mbit: f64) -> Record {
        let s = p50.map(|p| Summary {
            min: p,
            p50: p,
            p90: p,
            p99: p,
            max: p,
            avg: p,
            stddev: 0.0,
            outliers: 0,
        });
        serde_json::from_value::<Record>(serde_json::json!({
            "mode": mode, "pattern": if s.is_some() { "one_one" } else { "stream" },
            "size": size, "iterations": 1, "busy_poll": false,
            "lat_us": s, "mbit_s": mbit, "mb_s": mbit / 8.0
        }))
        .unwrap()
    }

    #[test]
    fn sizes_are_rows_and_modes_columns() {
        let rs = [
            rec("edp", 64, Some(3.5), 1.0),
            rec("edp", 1024, Some(4.25), 1.0),
            rec("udp", 64, Some(9.0), 1.0),
            rec("udp", 1024, Some(11.0), 1.0),
            rec("tcp", 64, Some(12.5), 1.0),
        ];
        let t = pivot(&rs);
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert!(t.starts_with("# one_one: p50 half round-trip, us,"), "{t}");
        assert_eq!(lines[1], ["#", "size", "edp", "udp", "tcp"], "{t}");
        assert_eq!(lines[2], ["64", "3.50", "9.00", "12.50"], "{t}");
        assert_eq!(lines[3], ["1024", "4.25", "11.00", "-"], "{t}");
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn stream_cells_are_throughput() {
        let t = pivot(&[
            rec("esp", 8000, None, 900.04),
            rec("udp", 8000, None, 1200.0),
        ]);
        assert!(t.contains("throughput, Mbit/s"), "{t}");
        let last: Vec<&str> = t.lines().last().unwrap().split_whitespace().collect();
        assert_eq!(last, ["8000", "900.0", "1200.0"], "{t}");
    }
}
