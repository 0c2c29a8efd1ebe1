//! The table `--local` ends with: one row per size, one column per mode,
//! each cell the mode's headline figure (p50 half round-trip in us, or a
//! rate) and its ratio to the kernel reference; a last row of CPU time per
//! iteration, the modes' wait policies, and a line naming the fastest mode
//! and the reference. A size that failed shows `FAIL[n]`, with reason n
//! listed under the table.

use std::fmt::Write as _;

use crate::report::{Failure, Record};

/// The references, in order of preference: the first that ran is the
/// reference of the ratios (the kernel's TCP, as the README compares).
const REFERENCES: [&str; 4] = ["tcp", "udp", "tcp-bp", "udp-bp"];

/// Modes that are neither references nor the raw floor: this project's
/// protocols.
fn ours(mode: &str) -> bool {
    mode != "eth" && !REFERENCES.contains(&mode)
}

/// A latency or rate with 3-4 significant digits: `2.10`, `42.3`, `1234`.
fn figure(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A ratio: `0.41x`, `12.3x`, `123x`.
fn ratio(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}x")
    } else if v < 100.0 {
        format!("{v:.1}x")
    } else {
        format!("{v:.0}x")
    }
}

/// One cell's figures: the headline value (p50 in us, or a rate) and the
/// CPU time per iteration, client + server, us.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub mode: String,
    pub size: usize,
    pub value: f64,
    pub cpu_us: Option<f64>,
}

/// What a table shows: its pattern, the headline's name with its unit,
/// whether a higher value is better (rates), and how each mode waited
/// (mode, the CLI's label), for the legend.
pub struct Shape<'a> {
    pub pattern: &'a str,
    pub what: &'a str,
    /// The headline's short name for the fastest line: `p50`, `Mbit/s`.
    pub short: &'a str,
    pub higher_is_better: bool,
    pub waits: Vec<(String, String)>,
}

/// Renders `records` and `failures` as one table per pattern (in order of
/// first appearance): p50 half round-trip (one_one) or throughput
/// (stream).
pub fn pivot(records: &[Record], failures: &[Failure]) -> String {
    let mut patterns: Vec<&str> = Vec::new();
    for p in records
        .iter()
        .map(|r| r.pattern.as_str())
        .chain(failures.iter().map(|f| f.pattern.as_str()))
    {
        if !patterns.contains(&p) {
            patterns.push(p);
        }
    }
    let mut out = String::new();
    for pattern in patterns {
        let rs: Vec<&Record> = records.iter().filter(|r| r.pattern == pattern).collect();
        let fs: Vec<Failure> = failures
            .iter()
            .filter(|f| f.pattern == pattern)
            .cloned()
            .collect();
        let stream = !rs.is_empty() && rs.iter().all(|r| r.lat_us.is_none());
        let entries: Vec<Entry> = rs
            .iter()
            .map(|r| Entry {
                mode: r.mode.clone(),
                size: r.size,
                value: r.lat_us.map(|l| l.p50).unwrap_or(r.mbit_s),
                cpu_us: r
                    .cpu_us_per_iter_client
                    .zip(r.cpu_us_per_iter_server)
                    .map(|(c, s)| c + s),
            })
            .collect();
        let mut waits: Vec<(String, String)> = Vec::new();
        for r in &rs {
            if !r.wait.is_empty() && !waits.iter().any(|(m, _)| *m == r.mode) {
                waits.push((r.mode.clone(), r.wait.clone()));
            }
        }
        let shape = Shape {
            pattern,
            what: if stream {
                "throughput (Mbit/s)"
            } else {
                "p50 half round-trip (us)"
            },
            short: if stream { "Mbit/s" } else { "p50" },
            higher_is_better: stream,
            waits,
        };
        out.push_str(&table(&shape, &entries, &fs));
    }
    out
}

/// Renders one table: sizes as rows, modes as columns (in order of first
/// appearance), each cell the value and its ratio to the reference (the
/// first of [`REFERENCES`] that ran, else the first mode), `FAIL[n]` for a
/// failed size, `-` for none; then the CPU time per iteration (median over
/// sizes), the wait policies, the fastest line and the failures' reasons.
pub fn table(shape: &Shape<'_>, entries: &[Entry], fs: &[Failure]) -> String {
    let mut modes: Vec<&str> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    for (m, s) in entries
        .iter()
        .map(|e| (e.mode.as_str(), e.size))
        .chain(fs.iter().map(|f| (f.mode.as_str(), f.size)))
    {
        if !modes.contains(&m) {
            modes.push(m);
        }
        if !sizes.contains(&s) {
            sizes.push(s);
        }
    }
    sizes.sort_unstable();
    let find = |m: &str, s: usize| entries.iter().find(|e| e.mode == m && e.size == s);
    let reference = REFERENCES
        .iter()
        .copied()
        .find(|m| entries.iter().any(|e| e.mode == *m))
        .or_else(|| entries.first().map(|e| e.mode.as_str()));
    // Reasons, numbered in order of first appearance (one per mode and text).
    let mut reasons: Vec<&Failure> = Vec::new();
    // The cells first (numbering the failures' reasons in order), then
    // one width for every column: the widest name or cell, and 2 spaces.
    let mut rows: Vec<(usize, Vec<String>)> = Vec::new();
    for &size in &sizes {
        let base = reference.and_then(|m| find(m, size)).map(|e| e.value);
        let cells = modes
            .iter()
            .map(|m| {
                let failed = fs.iter().find(|f| f.mode == *m && f.size == size);
                match (failed, find(m, size)) {
                    (Some(f), _) => {
                        let n = match reasons
                            .iter()
                            .position(|g| g.mode == f.mode && g.error == f.error)
                        {
                            Some(i) => i + 1,
                            None => {
                                reasons.push(f);
                                reasons.len()
                            }
                        };
                        format!("FAIL[{n}]")
                    }
                    (None, Some(e)) => match base {
                        Some(b) if b > 0.0 => {
                            format!("{} {}", figure(e.value), ratio(e.value / b))
                        }
                        _ => figure(e.value),
                    },
                    (None, None) => "-".into(),
                }
            })
            .collect();
        rows.push((size, cells));
    }
    let width = modes
        .iter()
        .map(|m| m.len())
        .chain(rows.iter().flat_map(|(_, c)| c.iter().map(|c| c.len())))
        .max()
        .unwrap_or(0)
        .max(11)
        + 2;
    let (pattern, what) = (shape.pattern, shape.what);
    let mut out = String::new();
    match reference {
        Some(r) => {
            let _ = writeln!(
                out,
                "# {pattern}: {what}, each with its ratio to {r}, by size (rows) and mode \
                 (columns); last row: CPU time per iteration (us, client + server, median over sizes)"
            );
        }
        None => {
            let _ = writeln!(out, "# {pattern}: {what} by size and mode");
        }
    }
    let _ = write!(out, "{:<8}", "# size");
    for m in &modes {
        let _ = write!(out, "{m:>width$}");
    }
    out.push('\n');
    for (size, cells) in &rows {
        let _ = write!(out, "{size:<8}");
        for cell in cells {
            let _ = write!(out, "{cell:>width$}");
        }
        out.push('\n');
    }
    let _ = write!(out, "{:<8}", "# cpu us");
    for m in &modes {
        let mut cpu: Vec<f64> = entries
            .iter()
            .filter(|e| e.mode == *m)
            .filter_map(|e| e.cpu_us)
            .collect();
        cpu.sort_by(f64::total_cmp);
        let cell = if cpu.is_empty() {
            "-".into()
        } else {
            figure(cpu[(cpu.len() - 1) / 2])
        };
        let _ = write!(out, "{cell:>width$}");
    }
    out.push('\n');
    if !shape.waits.is_empty() {
        // Modes grouped by how they waited, as the CLI names it.
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for (m, w) in &shape.waits {
            match groups.iter_mut().find(|(g, _)| g == w) {
                Some((_, ms)) => ms.push(m),
                None => groups.push((w, vec![m])),
            }
        }
        let list: Vec<String> = groups
            .iter()
            .map(|(w, ms)| format!("{w} ({})", ms.join(", ")))
            .collect();
        let _ = writeln!(out, "# wait: {}", list.join("; "));
    }
    out.push_str(&fastest_line(&modes, &sizes, entries, reference, shape));
    for (i, f) in reasons.iter().enumerate() {
        let _ = writeln!(out, "# [{}] {} at {} B: {}", i + 1, f.mode, f.size, f.error);
    }
    out
}

/// `# fastest ...`: the mode best at the most sizes (lowest p50, or
/// highest rate), the best of this project's protocols when that is
/// another, and the reference.
fn fastest_line(
    modes: &[&str],
    sizes: &[usize],
    entries: &[Entry],
    reference: Option<&str>,
    shape: &Shape<'_>,
) -> String {
    let better = |a: f64, b: f64| {
        if shape.higher_is_better {
            a > b
        } else {
            a < b
        }
    };
    let wins = |pool: &dyn Fn(&str) -> bool| -> Option<(String, usize)> {
        let mut count: Vec<(&str, usize)> = Vec::new();
        for &size in sizes {
            let best = entries
                .iter()
                .filter(|e| e.size == size && pool(&e.mode))
                .fold(None::<&Entry>, |b, e| match b {
                    Some(b) if !better(e.value, b.value) => Some(b),
                    _ => Some(e),
                });
            if let Some(b) = best {
                match count.iter_mut().find(|(m, _)| *m == b.mode) {
                    Some(c) => c.1 += 1,
                    None => count.push((&b.mode, 1)),
                }
            }
        }
        // Ties go to the mode listed first.
        count.sort_by_key(|&(m, n)| (std::cmp::Reverse(n), modes.iter().position(|x| *x == m)));
        count.first().map(|&(m, n)| (m.to_string(), n))
    };
    let n = sizes.len();
    let what = if shape.higher_is_better {
        "highest"
    } else {
        "lowest"
    };
    let mut s = match wins(&|_| true) {
        Some((m, k)) => format!(
            "# fastest ({what} {} at the most sizes): {m}, {k} of {n}{}",
            shape.short,
            if m == "eth" { " (the raw floor)" } else { "" }
        ),
        None => return "# nothing was measured\n".into(),
    };
    if let Some((m, k)) = wins(&|m: &str| ours(m)) {
        if !s.contains(&format!(": {m},")) {
            let _ = write!(s, "; of this project's protocols {m}, {k} of {n}");
        }
    }
    match reference {
        Some(r) if REFERENCES.contains(&r) => {
            let _ = write!(s, "; reference {r} (the kernel's)");
        }
        Some(r) => {
            let _ = write!(s, "; reference {r} (no kernel mode ran)");
        }
        None => {}
    }
    s.push('\n');
    s
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
            "lat_us": s, "mbit_s": mbit, "mb_s": mbit / 8.0,
            "cpu_us_per_iter_client": 1.5, "cpu_us_per_iter_server": 2.0
        }))
        .unwrap()
    }

    fn rows(t: &str) -> Vec<Vec<&str>> {
        t.lines().map(|l| l.split_whitespace().collect()).collect()
    }

    #[test]
    fn sizes_are_rows_modes_columns_with_ratios_to_tcp() {
        let rs = [
            rec("edp", 64, Some(3.5), 1.0),
            rec("edp", 1024, Some(4.25), 1.0),
            rec("udp", 64, Some(9.0), 1.0),
            rec("udp", 1024, Some(11.0), 1.0),
            rec("tcp", 64, Some(14.0), 1.0),
        ];
        let t = pivot(&rs, &[]);
        let r = rows(&t);
        assert!(
            t.starts_with("# one_one: p50 half round-trip (us), each with its ratio to tcp"),
            "{t}"
        );
        assert_eq!(r[1], ["#", "size", "edp", "udp", "tcp"], "{t}");
        assert_eq!(
            r[2],
            ["64", "3.50", "0.25x", "9.00", "0.64x", "14.0", "1.00x"],
            "{t}"
        );
        // No tcp at 1024: no ratio there.
        assert_eq!(r[3], ["1024", "4.25", "11.0", "-"], "{t}");
        assert_eq!(r[4], ["#", "cpu", "us", "3.50", "3.50", "3.50"], "{t}");
        assert_eq!(
            r[5].join(" "),
            "# fastest (lowest p50 at the most sizes): edp, 2 of 2; reference tcp (the kernel's)",
            "{t}"
        );
        assert_eq!(r.len(), 6, "one table and one line: {t}");
    }

    #[test]
    fn failures_show_in_their_cell_with_the_reason_below() {
        let rs = [
            rec("eth", 64, Some(2.0), 1.0),
            rec("tcp", 64, Some(8.0), 1.0),
        ];
        let fail = |mode: &str, size, error: &str| Failure {
            mode: mode.into(),
            pattern: "one_one".into(),
            size,
            error: error.into(),
        };
        let fs = [
            fail("eth", 1024, "no data from the peer for 10.0 s"),
            fail("eth", 2048, "no data from the peer for 10.0 s"),
            fail("tcp", 2048, "connection reset"),
        ];
        let t = pivot(&rs, &fs);
        let r = rows(&t);
        assert_eq!(r[3], ["1024", "FAIL[1]", "-"], "{t}");
        assert_eq!(r[4], ["2048", "FAIL[1]", "FAIL[2]"], "{t}");
        assert!(
            t.contains("# [1] eth at 1024 B: no data from the peer for 10.0 s\n"),
            "{t}"
        );
        assert!(t.contains("# [2] tcp at 2048 B: connection reset\n"), "{t}");
        assert!(
            t.contains("fastest (lowest p50 at the most sizes): eth, 1 of 3 (the raw floor)"),
            "{t}"
        );
    }

    #[test]
    fn stream_cells_are_throughput_and_higher_wins() {
        let t = pivot(
            &[
                rec("esp", 8000, None, 900.04),
                rec("udp", 8000, None, 1800.0),
                rec("edp", 8000, None, 2700.0),
            ],
            &[],
        );
        assert!(
            t.contains("throughput (Mbit/s), each with its ratio to udp"),
            "{t}"
        );
        let r = rows(&t);
        assert_eq!(
            r[2],
            ["8000", "900.0", "0.50x", "1800", "1.00x", "2700", "1.50x"],
            "{t}"
        );
        assert!(
            t.contains("fastest (highest Mbit/s at the most sizes): edp, 1 of 1;"),
            "{t}"
        );
        assert!(t.contains("reference udp (the kernel's)"), "{t}");
    }

    #[test]
    fn wide_cells_widen_every_column() {
        let t = pivot(
            &[
                rec("esp", 8, None, 4_594_681.0),
                rec("tcp", 8, None, 244_162.0),
            ],
            &[],
        );
        let r = rows(&t);
        assert_eq!(r[2], ["8", "4594681", "18.8x", "244162", "1.00x"], "{t}");
    }

    #[test]
    fn the_best_protocol_is_named_beside_the_floor() {
        let t = pivot(
            &[
                rec("eth", 64, Some(2.0), 1.0),
                rec("edp", 64, Some(2.5), 1.0),
                rec("esp", 64, Some(3.0), 1.0),
            ],
            &[],
        );
        assert!(
            t.contains(": eth, 1 of 1 (the raw floor); of this project's protocols edp, 1 of 1; reference eth (no kernel mode ran)"),
            "{t}"
        );
    }
}
