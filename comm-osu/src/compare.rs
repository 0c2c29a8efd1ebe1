//! The side-by-side table of `--ompi`: our rows and Open MPI's for the
//! same sizes, with their ratio.

use crate::bench::Bench;

/// The rows (size, value) of an OMB-format output: every line that is not
/// a `#` comment and has a size and a number.
pub fn parse_rows(out: &str) -> Vec<(usize, f64)> {
    out.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// The table: one line per size both measured, ratio = ours / theirs.
pub fn table(bench: Bench, ours_label: &str, ours: &str, theirs: &str) -> String {
    let theirs = parse_rows(theirs);
    let better = if bench.higher_is_better() {
        "higher is better"
    } else {
        "lower is better"
    };
    let mut s = format!(
        "# {}: {ours_label} vs Open MPI over TCP, {} ({better}); ratio = comm / Open MPI\n{:<10}{:>18}{:>18}{:>10}\n",
        bench.title(),
        bench.column(),
        "# Size",
        "comm",
        "Open MPI",
        "ratio"
    );
    for (size, v) in parse_rows(ours) {
        if let Some(&(_, t)) = theirs.iter().find(|(ts, _)| *ts == size) {
            let ratio = if t > 0.0 { v / t } else { f64::NAN };
            s.push_str(&format!("{size:<10}{v:>18.2}{t:>18.2}{ratio:>10.2}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_matched_by_size() {
        let ours =
            "# OSU MPI Latency Test\n# Size          Latency (us)\n0    1.00\n8   2.00\n16  4.00\n";
        let theirs = "# OSU MPI Latency Test v7\n# Size  Latency (us)\n8  4.00\n16 2.00\n32 1.0\n";
        let t = table(Bench::Latency, "comm over EDP", ours, theirs);
        let lines: Vec<_> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].contains("lower is better"));
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["8", "2.00", "4.00", "0.50"]
        );
        assert_eq!(lines[3].split_whitespace().last(), Some("2.00"));
    }
}
