//! What a run measured, and the tables.

use std::time::Duration;

use super::config::{Carrier, Measure};
use crate::report::Record;
use crate::stats::{Samples, Summary};

/// Protocol counters of one run, summed over the members.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Counters {
    /// First transmissions of DATA.
    pub data: u64,
    pub retx_nak: u64,
    pub retx_timeout: u64,
    pub retx_tail: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    pub naks_sent: u64,
    /// Tr expiries that sent nothing: every missing packet was already
    /// named by another receiver's NAK.
    pub naks_suppressed: u64,
    /// Missing-packet entries taken out of a pending NAK by an overheard one.
    pub nak_entries_suppressed: u64,
    /// First transmissions of DATA lost by the injected faults, summed
    /// over the receivers.
    pub lost_frames: u64,
    /// The same, distinct packets (lost by at least one receiver).
    pub lost_distinct: u64,
    /// Retransmissions lost.
    pub lost_retx: u64,
    /// Messages out of order, duplicated or not byte-exact.
    pub bad: u64,
}

/// One run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub mode: &'static str,
    pub carrier: Carrier,
    pub receivers: usize,
    pub size: usize,
    pub count: usize,
    pub measure: Measure,
    /// Loss injected on every receiver's link, 0..1 (JSON: percent).
    #[serde(rename = "loss_percent", serialize_with = "percent")]
    pub loss: f64,
    /// First send until the last receiver had the last message.
    pub elapsed: Duration,
    /// Latency mode: per message, send until the last receiver had it (ns).
    #[serde(skip)]
    pub latency_ns: Vec<u64>,
    /// Every message reached every receiver once, in order, byte-exact
    /// (when checked), and the sender completed.
    pub complete: bool,
    /// Members the sender declared silent.
    pub silent: Vec<String>,
    pub counters: Counters,
}

fn percent<S: serde::Serializer>(fraction: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(fraction * 100.0)
}

impl Outcome {
    /// Latency median (us), or time per message in a stream (us).
    pub fn value_us(&self) -> f64 {
        match self.measure {
            Measure::Latency => self.summary().map_or(f64::NAN, |l| l.p50),
            Measure::Stream => self.elapsed.as_secs_f64() * 1e6 / self.count as f64,
        }
    }

    /// The latency samples' statistics, us; None without samples.
    pub fn summary(&self) -> Option<Summary> {
        let mut h = Samples::new();
        for &v in &self.latency_ns {
            h.record_ns(v);
        }
        h.summary()
    }

    /// Latency p99, us (NaN without samples).
    pub fn p99_us(&self) -> f64 {
        self.summary().map_or(f64::NAN, |l| l.p99)
    }

    /// Payload delivered to each receiver per second, MB/s (10^6 bytes).
    pub fn mbytes_per_s(&self) -> f64 {
        (self.count * self.size) as f64 / self.elapsed.as_secs_f64() / 1e6
    }

    pub fn json(&self) -> String {
        let mut v = serde_json::to_value(self).expect("serializable");
        v["value_us"] = serde_json::json!(self.value_us());
        v["p99_us"] = serde_json::json!(self.p99_us());
        v["mbytes_per_s"] = serde_json::json!(self.mbytes_per_s());
        v.to_string()
    }
}

/// Least-squares slope of `ys` over `xs`.
pub fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let num: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// One table: a row per mode, a column per number of receivers, the
/// growth from the first to the last column and the slope per receiver.
pub fn print_table(
    title: &str,
    receivers: &[usize],
    rows: &[(String, Vec<Option<f64>>)],
    unit: &str,
) {
    println!("\n{title}");
    print!("{:<12}", "mode");
    for n in receivers {
        print!(" | {:>9}", format!("{n} rx"));
    }
    println!(" | {:>8} | {:>12}", "growth", format!("slope {unit}/rx"));
    for (name, vals) in rows {
        print!("{name:<12}");
        for v in vals {
            match v {
                Some(v) => print!(" | {v:>9.1}"),
                None => print!(" | {:>9}", "-"),
            }
        }
        let pts: Vec<(f64, f64)> = receivers
            .iter()
            .zip(vals)
            .filter_map(|(n, v)| v.map(|v| (*n as f64, v)))
            .collect();
        if pts.len() >= 2 {
            let (x0, y0) = pts[0];
            let (x1, y1) = pts[pts.len() - 1];
            let xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
            let ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
            let _ = (x0, x1);
            println!(
                " | {:>7.1}% | {:>12.2}",
                (y1 / y0 - 1.0) * 100.0,
                slope(&xs, &ys)
            );
        } else {
            println!(" | {:>8} | {:>12}", "-", "-");
        }
    }
}

/// The counters of a set of runs, one line each.
pub fn print_counters(runs: &[Outcome]) {
    println!(
        "\n{:<9} {:<4} {:>3} {:>6} {:>5} | {:>8} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>6} | complete",
        "mode", "via", "rx", "size", "loss", "data", "lost", "lostd", "naks", "supp", "acks", "retx", "rtx/to", "rtx/lost", "bad"
    );
    for o in runs {
        let c = &o.counters;
        let per_lost = if c.lost_distinct > 0 {
            format!("{:.2}", c.retx_nak as f64 / c.lost_distinct as f64)
        } else {
            "-".into()
        };
        println!(
            "{:<9} {:<4} {:>3} {:>6} {:>4.1}% | {:>8} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>6} | {}{}",
            o.mode,
            format!("{:?}", o.carrier).to_lowercase(),
            o.receivers,
            o.size,
            o.loss * 100.0,
            c.data,
            c.lost_frames,
            c.lost_distinct,
            c.naks_sent,
            c.naks_suppressed,
            c.acks_sent,
            c.retx_nak,
            c.retx_timeout + c.retx_tail,
            per_lost,
            c.bad,
            if o.complete { "yes" } else { "NO" },
            if o.silent.is_empty() {
                String::new()
            } else {
                format!(" (silent: {})", o.silent.join(", "))
            }
        );
    }
}

/// One CSV row: a run with its counters.
#[derive(serde::Serialize)]
struct Row<'a> {
    mode: &'a str,
    carrier: Carrier,
    receivers: usize,
    size_bytes: usize,
    count: usize,
    measure: Measure,
    loss_percent: f64,
    /// Latency p50, or time per message of a stream, us.
    value_us: f64,
    p99_us: Option<f64>,
    mbytes_per_s: f64,
    elapsed_s: f64,
    complete: bool,
    silent: String,
    data: u64,
    retx_nak: u64,
    retx_timeout: u64,
    retx_tail: u64,
    acks_sent: u64,
    acks_received: u64,
    naks_sent: u64,
    naks_suppressed: u64,
    nak_entries_suppressed: u64,
    lost_frames: u64,
    lost_distinct: u64,
    lost_retx: u64,
    bad: u64,
}

/// Writes `runs` as CSV to `path`: a header, then one row per run.
/// Errors: creating or writing the file.
pub fn write_csv(path: &std::path::Path, runs: &[Outcome]) -> std::io::Result<()> {
    let rows = runs.iter().map(|o| Row {
        mode: o.mode,
        carrier: o.carrier,
        receivers: o.receivers,
        size_bytes: o.size,
        count: o.count,
        measure: o.measure,
        loss_percent: o.loss * 100.0,
        value_us: o.value_us(),
        p99_us: o.summary().map(|l| l.p99),
        mbytes_per_s: o.mbytes_per_s(),
        elapsed_s: o.elapsed.as_secs_f64(),
        complete: o.complete,
        silent: o.silent.join(" "),
        data: o.counters.data,
        retx_nak: o.counters.retx_nak,
        retx_timeout: o.counters.retx_timeout,
        retx_tail: o.counters.retx_tail,
        acks_sent: o.counters.acks_sent,
        acks_received: o.counters.acks_received,
        naks_sent: o.counters.naks_sent,
        naks_suppressed: o.counters.naks_suppressed,
        nak_entries_suppressed: o.counters.nak_entries_suppressed,
        lost_frames: o.counters.lost_frames,
        lost_distinct: o.counters.lost_distinct,
        lost_retx: o.counters.lost_retx,
        bad: o.counters.bad,
    });
    crate::output::csv::write_serialized(path, rows)
}

/// The runs as netgauge records, for `--plot`: one series per mode,
/// carrier and number of receivers; latency p50/p99 (latency measure) or
/// throughput (stream measure) against size.
pub fn records(runs: &[Outcome]) -> Vec<Record> {
    runs.iter()
        .map(|o| {
            let mb_s = o.mbytes_per_s();
            Record {
                mode: format!(
                    "{} {} {}rx",
                    o.mode,
                    format!("{:?}", o.carrier).to_lowercase(),
                    o.receivers
                ),
                pattern: "1toN".into(),
                size: o.size,
                iterations: o.count,
                busy_poll: false,
                wait: String::new(),
                lat_us: match o.measure {
                    Measure::Latency => o.summary(),
                    Measure::Stream => None,
                },
                cpu_us_per_iter_client: None,
                cpu_us_per_iter_server: None,
                mbit_s: mb_s * 8.0,
                mb_s,
                loss: None,
                idle_edp_sockets: 0,
                idle_esp_listeners: 0,
                procs_per_host: 1,
                send_us: None,
                transport_stats: None,
                resends: None,
            }
        })
        .collect()
}
