//! What a run measured, and the tables.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::opts::{Carrier, Measure};

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

impl Outcome {
    /// Latency median (us), or time per message in a stream (us).
    pub fn value_us(&self) -> f64 {
        match self.measure {
            Measure::Latency => self.percentile(50.0),
            Measure::Stream => self.elapsed.as_secs_f64() * 1e6 / self.count as f64,
        }
    }

    pub fn percentile(&self, q: f64) -> f64 {
        let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000_000_000, 3).expect("bounds");
        for &v in &self.latency_ns {
            h.saturating_record(v.max(1));
        }
        if h.is_empty() {
            return f64::NAN;
        }
        h.value_at_quantile(q / 100.0) as f64 / 1000.0
    }

    /// Payload delivered to each receiver per second, MB/s (10^6 bytes).
    pub fn mbytes_per_s(&self) -> f64 {
        (self.count * self.size) as f64 / self.elapsed.as_secs_f64() / 1e6
    }

    pub fn json(&self) -> String {
        let mut v = serde_json::to_value(self).expect("serializable");
        v["value_us"] = serde_json::json!(self.value_us());
        v["p99_us"] = serde_json::json!(self.percentile(99.0));
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
