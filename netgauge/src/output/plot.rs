//! Charts of a run (`--plot FILE.svg|png`, `netgauge plot results.json -o
//! FILE`): half round-trip latency against size (p50 line with a p50..p99
//! band) and throughput against size, one line per mode, log-log axes.

use std::io;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::Record;

/// TrueType fonts tried in order for the charts' text (Debian/Ubuntu,
/// Fedora and Arch paths of DejaVu Sans and Liberation Sans).
const FONTS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Mode colours, in order of first appearance.
const COLOURS: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];

fn register_font() -> io::Result<()> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = FONTS
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or_else(|| {
                format!(
                    "no TrueType font for the chart's text (tried {}): install fonts-dejavu-core",
                    FONTS.join(", ")
                )
            })?;
        plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            Box::leak(bytes.into_boxed_slice()),
        )
        .map_err(|_| "the TrueType font could not be parsed".to_string())
    })
    .clone()
    .map_err(io::Error::other)
}

/// One mode's points: (size, p50, p99, Mbit/s).
type Series = (String, Vec<(f64, Option<(f64, f64)>, f64)>);

fn series(records: &[Record]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in records {
        let key = if r.pattern == "one_one" {
            r.mode.clone()
        } else {
            format!("{} {}", r.mode, r.pattern)
        };
        let pt = (r.size as f64, r.lat_us.map(|l| (l.p50, l.p99)), r.mbit_s);
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(pt),
            None => out.push((key, vec![pt])),
        }
    }
    for (_, v) in &mut out {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Checks, before any measurement, that `--plot PATH` can be drawn: an
/// `.svg` or `.png` name and a TrueType font for the text. Errors: a
/// message for the user.
pub fn check_target(path: &Path) -> Result<(), String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if !matches!(ext.as_deref(), Some("svg" | "png")) {
        return Err(format!(
            "--plot {}: expected a file name ending in .svg or .png",
            path.display()
        ));
    }
    register_font().map_err(|e| format!("--plot {}: {e}", path.display()))
}

/// Draws the charts of `records` to `path`: SVG or PNG by its extension.
/// Errors: an unknown extension, no records, no font, or the file.
pub fn plot(records: &[Record], path: &Path) -> io::Result<()> {
    if records.is_empty() {
        return Err(io::Error::other("nothing to plot: no records"));
    }
    register_font()?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let size = (1200, 500);
    let err = |e: String| io::Error::other(format!("plot {}: {e}", path.display()));
    match ext.as_deref() {
        Some("svg") => draw(SVGBackend::new(path, size).into_drawing_area(), records)
            .map_err(|e| err(e.to_string())),
        Some("png") => draw(BitMapBackend::new(path, size).into_drawing_area(), records)
            .map_err(|e| err(e.to_string())),
        _ => Err(err("expected a file name ending in .svg or .png".into())),
    }
}

fn range(vals: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = vals
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return 1.0..10.0;
    }
    // Some room around the data on a log axis.
    (lo / 1.5)..(hi * 1.5)
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    records: &[Record],
) -> Result<(), Box<dyn std::error::Error + 'static>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let all = series(records);
    let (left, right) = root.split_horizontally(600);
    let sizes = range(all.iter().flat_map(|(_, v)| v.iter().map(|p| p.0)));

    // Latency: p50 line, p50..p99 band.
    let lat: Vec<&Series> = all
        .iter()
        .filter(|(_, v)| v.iter().any(|p| p.1.is_some()))
        .collect();
    let lat_range = range(
        lat.iter()
            .flat_map(|(_, v)| v.iter().filter_map(|p| p.1).flat_map(|(a, b)| [a, b])),
    );
    let mut c = ChartBuilder::on(&left)
        .caption(
            "half round-trip latency (p50, band to p99)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(sizes.clone().log_scale(), lat_range.log_scale())?;
    c.configure_mesh()
        .x_desc("message size, bytes")
        .x_label_formatter(&|v| format!("{}", *v as u64))
        .y_desc("latency, us")
        .y_label_formatter(&|v| format!("{v}"))
        .draw()?;
    for (i, (name, v)) in all.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<(f64, f64, f64)> = v
            .iter()
            .filter_map(|p| p.1.map(|(a, b)| (p.0, a, b)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let band: Vec<(f64, f64)> = pts
            .iter()
            .map(|p| (p.0, p.2))
            .chain(pts.iter().rev().map(|p| (p.0, p.1)))
            .collect();
        c.draw_series(std::iter::once(Polygon::new(band, colour.mix(0.15))))?;
        c.draw_series(LineSeries::new(
            pts.iter().map(|p| (p.0, p.1)),
            colour.stroke_width(2),
        ))?
        .label(name.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        c.draw_series(
            pts.iter()
                .map(|p| Circle::new((p.0, p.1), 3, colour.filled())),
        )?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;

    // Throughput.
    let bw_range = range(all.iter().flat_map(|(_, v)| v.iter().map(|p| p.2)));
    let mut c = ChartBuilder::on(&right)
        .caption("throughput", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(sizes.log_scale(), bw_range.log_scale())?;
    c.configure_mesh()
        .x_desc("message size, bytes")
        .x_label_formatter(&|v| format!("{}", *v as u64))
        .y_desc("Mbit/s")
        .y_label_formatter(&|v| format!("{v}"))
        .draw()?;
    for (i, (name, v)) in all.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<(f64, f64)> = v.iter().filter(|p| p.2 > 0.0).map(|p| (p.0, p.2)).collect();
        c.draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        c.draw_series(pts.iter().map(|p| Circle::new(*p, 3, colour.filled())))?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    root.present()?;
    Ok(())
}

/// `netgauge plot RESULTS.json -o FIG.svg|png`: charts of a saved `--json`
/// output.
#[derive(Debug, clap::Parser)]
#[command(
    name = "netgauge plot",
    about = "Charts of a saved netgauge --json output"
)]
pub struct PlotCmd {
    /// The JSON lines written by `netgauge --json` (`-` for stdin).
    pub input: std::path::PathBuf,
    /// The chart: SVG or PNG by its extension.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: std::path::PathBuf,
}

impl PlotCmd {
    /// Reads the input and draws the chart.
    pub fn run(&self) -> io::Result<()> {
        let text = if self.input.as_os_str() == "-" {
            io::read_to_string(io::stdin())?
        } else {
            std::fs::read_to_string(&self.input).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot read {}: {e}", self.input.display()),
                )
            })?
        };
        let records = read_json_lines(&text)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.input.display())))?;
        plot(&records, &self.output)
    }
}

/// Reads the records of a `--json` output (JSON lines; the metadata header
/// and blank lines are skipped).
pub fn read_json_lines(text: &str) -> io::Result<Vec<Record>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |e: serde_json::Error| {
            io::Error::new(io::ErrorKind::InvalidData, format!("line {}: {e}", i + 1))
        };
        let v: serde_json::Value = serde_json::from_str(line).map_err(bad)?;
        if !super::json::is_metadata(&v) {
            out.push(serde_json::from_value(v).map_err(bad)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(mode: &str, size: usize, p50: f64) -> Record {
        serde_json::from_value(serde_json::json!({
            "mode": mode, "pattern": "one_one", "size": size, "iterations": 1,
            "busy_poll": false, "mbit_s": size as f64 * 8.0 / p50, "mb_s": 1.0,
            "lat_us": {"min": p50, "p50": p50, "p90": p50, "p99": p50 * 2.0, "max": p50 * 3.0, "avg": p50}
        }))
        .unwrap()
    }

    #[test]
    fn svg_has_one_line_per_mode_and_both_charts() {
        let rs: Vec<Record> = [("edp", 3.0), ("tcp", 20.0)]
            .iter()
            .flat_map(|&(m, base)| [64, 1024, 65536].map(|s| rec(m, s, base + s as f64 / 1000.0)))
            .collect();
        let dir = std::env::temp_dir().join(format!("netgauge-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("p.svg");
        if let Err(e) = plot(&rs, &svg) {
            // Only a missing system font may stop it.
            assert!(e.to_string().contains("TrueType"), "{e}");
            return;
        }
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("half round-trip latency"), "{text}");
        let texts: Vec<&str> = text
            .split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once("</text>")))
            .map(|(t, _)| t.trim())
            .collect();
        assert!(texts.contains(&"throughput"), "{texts:?}");
        assert!(texts.contains(&"Mbit/s"), "{texts:?}");
        // The legend, in both charts.
        assert_eq!(
            texts.iter().filter(|t| **t == "edp").count(),
            2,
            "{texts:?}"
        );
        assert_eq!(
            texts.iter().filter(|t| **t == "tcp").count(),
            2,
            "{texts:?}"
        );
        // Each mode: a line in each chart (and its legend sample), and a
        // p50..p99 band in its colour.
        for colour in ["#1F77B4", "#FF7F0E"] {
            let lines = text
                .lines()
                .filter(|l| l.starts_with("<polyline") && l.contains(colour))
                .count();
            assert!(lines >= 2, "{colour}: {lines} lines");
            let bands = text
                .lines()
                .filter(|l| l.starts_with("<polygon") && l.contains(colour))
                .count();
            assert_eq!(bands, 1, "{colour}");
        }
        let png = dir.join("p.png");
        plot(&rs, &png).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(plot(&rs, &dir.join("p.jpg")).is_err());
        assert!(plot(&[], &svg).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_lines_skip_the_header() {
        let r = serde_json::to_string(&rec("edp", 64, 3.0)).unwrap();
        let text = format!("{{\"metadata\":{{\"mtu\":1500}}}}\n{r}\n\n{r}\n");
        assert_eq!(read_json_lines(&text).unwrap().len(), 2);
        let e = read_json_lines("{\"mode\": 1}\n").unwrap_err();
        assert!(e.to_string().starts_with("line 1:"), "{e}");
    }
}
