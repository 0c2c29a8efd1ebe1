//! Reliable multicast, pattern 1toN (`-m mak,mak-ack,mak-nak,mak-iter,norm,
//! raw,esp -x 1toN --hosts N`), on a virtual cluster (`vcluster`: N hosts
//! on a Linux bridge). Host 0 sends, hosts 1..N receive; every member is a
//! thread inside its host's namespace, on one monotonic clock, so the
//! latency "until the last receiver has it" is measured directly.
//!
//! Reports per message latency (latency measure: one message at a time) or
//! time per message and throughput (stream measure) per number of
//! receivers, for the MAK paper's four algorithms (`mak` crate), NORM (RFC
//! 5740, libnorm), unreliable multicast (the machine's floor) and a 1 -> 1
//! ESP stream, with the counts of NAKs sent and suppressed, ACKs and
//! retransmissions, and loss injected on every receiver's link.

mod config;
mod floor;
mod member;
mod norm;
mod outcome;

use std::net::Ipv4Addr;

use vcluster::Cluster;

pub use config::{
    Carrier, McastConfig, McastMode, Measure, Pace, Run, MAX_LOSS_PERCENT, MAX_RECEIVERS, MIN_COUNT,
};
use outcome::{print_counters, print_table, Outcome};

use crate::output::progress::{self, Progress};

/// The IPv4 multicast group of the UDP carrier, raw UDP and NORM.
pub const GROUP_IP: Ipv4Addr = Ipv4Addr::new(239, 77, 65, 75);

/// Whether a run of `mode` on `via` with `measure` is measured: esp only
/// as a lossless stream, raw only without loss.
fn measured(mode: McastMode, measure: Measure, loss: f64) -> bool {
    !((mode == McastMode::Esp && (measure != Measure::Stream || loss > 0.0))
        || (mode == McastMode::Raw && loss > 0.0))
}

/// The carriers `mode` runs on.
fn carriers(o: &McastConfig, mode: McastMode) -> Vec<Carrier> {
    match mode {
        McastMode::Esp => vec![Carrier::Edp],
        McastMode::Norm => vec![Carrier::Udp],
        _ => o.carriers.clone(),
    }
}

/// Runs every mode, carrier, size and measure for each number of
/// receivers, then prints the tables (or JSON lines) and writes `--csv` and
/// `--plot`. Returns whether every reliable run completed. Errors: the
/// cluster, building NORM's driver, writing the outputs.
pub fn run(o: &McastConfig) -> std::io::Result<bool> {
    vcluster::install_signal_cleanup();
    let mut runs: Vec<Outcome> = Vec::new();
    let mut run_id: u16 = 1;
    let norm_bin = if o.modes.contains(&McastMode::Norm) {
        Some(norm::build()?)
    } else {
        None
    };
    let per_cluster: usize = o
        .measure
        .iter()
        .map(|&measure| {
            o.modes
                .iter()
                .filter(|&&m| measured(m, measure, o.loss))
                .map(|&m| carriers(o, m).len())
                .sum::<usize>()
        })
        .sum::<usize>()
        * o.sizes.len();
    let progress = Progress::new(
        progress::wanted(o.json),
        (per_cluster * o.receivers.len()) as u64,
    );
    let loss = o.loss;
    let mut failed = 0usize;
    for &n in &o.receivers {
        let net = Cluster::builder("mcast")
            .hosts(n + 1)
            .mtu(o.mtu)
            .build()
            .map_err(|e| {
                std::io::Error::other(format!("virtual cluster of {} hosts: {e}", n + 1))
            })?;
        progress.eprintln(&format!("netgauge: {} receivers, MTU {}", n, o.mtu));
        for &measure in &o.measure {
            for &size in &o.sizes {
                for &mode in &o.modes {
                    if !measured(mode, measure, loss) {
                        continue;
                    }
                    for via in carriers(o, mode) {
                        run_id += 1;
                        let run = Run {
                            n,
                            size,
                            count: o.count,
                            measure,
                            loss,
                            run_id,
                        };
                        progress.running(&format!("{} {n} rx {size} B", mode.name()));
                        let r = match mode.strategy() {
                            Some(s) => member::run(&net, o, via, s, &run),
                            None => match mode {
                                McastMode::Raw => floor::raw(&net, o, via, &run),
                                McastMode::Esp => floor::esp(&net, o, &run),
                                McastMode::Norm => {
                                    norm::run(&net, o, norm_bin.as_deref().expect("built"), &run)
                                }
                                _ => unreachable!("the mak modes have a strategy"),
                            },
                        };
                        match r {
                            Ok(out) => {
                                let line = format!(
                                    "  {:<8} {:?} {:>2} rx {:>6} B loss {:>4.1}% {:?}: {:>9.1} us{}",
                                    out.mode,
                                    via,
                                    n,
                                    size,
                                    loss * 100.0,
                                    measure,
                                    out.value_us(),
                                    if measure == Measure::Stream {
                                        format!("  {:.1} MB/s", out.mbytes_per_s())
                                    } else {
                                        String::new()
                                    }
                                );
                                progress.tick(&line);
                                if !progress.shown() {
                                    progress.eprintln(&line);
                                }
                                if o.json {
                                    progress.println(&out.json())?;
                                }
                                runs.push(out);
                            }
                            Err(e) => {
                                failed += 1;
                                progress.tick("");
                                progress.eprintln(&format!(
                                    "  {} {:?} {n} rx {size} B: FAILED: {e}",
                                    mode.name(),
                                    via
                                ));
                            }
                        }
                    }
                }
            }
        }
        drop(net);
    }
    progress.finish();
    if !o.json {
        report(o, &runs);
    }
    if let Some(path) = &o.csv {
        outcome::write_csv(path, &runs)?;
    }
    if let Some(path) = &o.plot {
        crate::output::plot::plot(&outcome::records(&runs), path)?;
    }
    Ok(failed == 0 && runs.iter().all(|r| r.complete || r.mode == "raw"))
}

fn report(o: &McastConfig, runs: &[Outcome]) {
    let mut modes: Vec<&'static str> = Vec::new();
    for r in runs {
        if !modes.contains(&r.mode) {
            modes.push(r.mode);
        }
    }
    let mut carriers: Vec<Carrier> = Vec::new();
    // NORM always runs on UDP and ESP on EDP: they join every carrier's
    // table and do not open one of their own.
    for r in runs.iter().filter(|r| r.mode != "norm" && r.mode != "esp") {
        if !carriers.contains(&r.carrier) {
            carriers.push(r.carrier);
        }
    }
    let loss = o.loss;
    for &measure in &o.measure {
        for &size in &o.sizes {
            for &via in &carriers {
                let pick = |m: &str, n: usize| {
                    runs.iter().find(|r| {
                        r.mode == m
                            && r.receivers == n
                            && r.size == size
                            && r.measure == measure
                            && (r.carrier == via || r.mode == "esp" || r.mode == "norm")
                    })
                };
                let rows = |f: &dyn Fn(&Outcome) -> f64| -> Vec<(String, Vec<Option<f64>>)> {
                    modes
                        .iter()
                        .map(|m| {
                            (
                                m.to_string(),
                                o.receivers
                                    .iter()
                                    .map(|&n| pick(m, n).map(f))
                                    .collect::<Vec<Option<f64>>>(),
                            )
                        })
                        .filter(|(_, v)| v.iter().any(Option::is_some))
                        .collect()
                };
                let what = format!(
                    "{size}-byte messages, {:?} carrier (norm: UDP), MTU {}, loss {:.0} % per receiver link",
                    via,
                    o.mtu,
                    loss * 100.0
                );
                match measure {
                    Measure::Latency => {
                        print_table(
                            &format!(
                                "latency until the last receiver has the message, p50 us: {what}"
                            ),
                            &o.receivers,
                            &rows(&|r: &Outcome| r.value_us()),
                            "us",
                        );
                        print_table(
                            &format!("latency p99 us: {what}"),
                            &o.receivers,
                            &rows(&|r: &Outcome| r.p99_us()),
                            "us",
                        );
                    }
                    Measure::Stream => {
                        print_table(
                            &format!("stream of {} messages: time per message until the last receiver has it, us: {what}", o.count),
                            &o.receivers,
                            &rows(&|r: &Outcome| r.value_us()),
                            "us",
                        );
                        print_table(
                            &format!("stream throughput to every receiver, MB/s: {what}"),
                            &o.receivers,
                            &rows(&|r: &Outcome| r.mbytes_per_s()),
                            "MB/s",
                        );
                    }
                }
            }
        }
    }
    print_counters(runs);
    println!(
        "\ncolumns: data = first transmissions; lost = first transmissions lost on receiver links (sum), \
         lostd = distinct packets lost by at least one receiver; naks = NAKs sent, supp = NAK timer expiries \
         suppressed by an overheard NAK; retx = retransmissions asked by NAKs, rtx/to = on the ACK timer Tw \
         (or NAK-baseline tail repeats); rtx/lost = retx / lostd; bad = messages out of order, duplicated or \
         not byte-exact"
    );
}
