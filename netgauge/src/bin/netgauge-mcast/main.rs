//! netgauge-mcast: reliable multicast, pattern 1toN, on a virtual cluster
//! (`vcluster`: N + 1 network namespaces on a Linux bridge). Host 0 sends,
//! hosts 1..=N receive; every member is a thread inside its host's
//! namespace, on one monotonic clock, so the latency "until the last
//! receiver has it" is measured directly.
//!
//! Reports per message latency (latency mode: one message at a time) or
//! time per message and throughput (stream mode) per number of receivers,
//! for the MAK paper's four algorithms (`mak` crate), NORM (RFC 5740,
//! libnorm), unreliable multicast (the machine's floor) and a 1 -> 1 ESP
//! stream, with the counts of NAKs sent and suppressed, ACKs and
//! retransmissions, and loss injected on every receiver's link.
//!
//! A separate binary so that it can grow beside `netgauge`'s own modes; see
//! `mak/BENCHMARK.md` for the commands behind the published numbers.
#![forbid(unsafe_code)]

mod floor;
mod member;
mod norm;
mod opts;
mod outcome;

use std::net::Ipv4Addr;
use std::process::ExitCode;

use clap::Parser;
use vcluster::Cluster;

use opts::{Measure, Mode, Opts};
use outcome::{print_counters, print_table, Outcome};

/// The IPv4 multicast group of the UDP carrier, raw UDP and NORM.
pub const GROUP_IP: Ipv4Addr = Ipv4Addr::new(239, 77, 65, 75);

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let o = Opts::parse();
    if let Err(m) = o.validate() {
        eprintln!("netgauge-mcast: {m}");
        return ExitCode::from(2);
    }
    vcluster::install_signal_cleanup();
    match run(&o) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("netgauge-mcast: some runs did not complete (see the counters)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("netgauge-mcast: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> std::io::Result<bool> {
    let mut runs: Vec<Outcome> = Vec::new();
    let mut run_id: u16 = 1;
    let norm_bin = if o.modes.contains(&Mode::Norm) {
        Some(norm::build()?)
    } else {
        None
    };
    for &n in &o.receivers {
        let net = Cluster::builder("mcast")
            .hosts(n + 1)
            .mtu(o.mtu)
            .build()
            .map_err(|e| {
                std::io::Error::other(format!("virtual cluster of {} hosts: {e}", n + 1))
            })?;
        eprintln!("netgauge-mcast: {} receivers, MTU {}", n, o.mtu);
        for &measure in &o.measure {
            for &size in &o.sizes {
                for &loss in &o.loss {
                    for &mode in &o.modes {
                        let carriers: Vec<opts::Carrier> = match mode {
                            Mode::Esp => vec![opts::Carrier::Edp],
                            Mode::Norm => vec![opts::Carrier::Udp],
                            _ => o.carrier.clone(),
                        };
                        for via in carriers {
                            if (mode == Mode::Esp && (measure != Measure::Stream || loss > 0.0))
                                || (mode == Mode::Raw && loss > 0.0)
                            {
                                continue;
                            }
                            run_id += 1;
                            let r = match mode.strategy() {
                                Some(s) => member::run(
                                    &net, o, via, s, n, size, o.count, measure, loss, run_id,
                                ),
                                None => match mode {
                                    Mode::Raw => {
                                        floor::raw(&net, o, via, n, size, o.count, measure, run_id)
                                    }
                                    Mode::Esp => floor::esp(&net, o, size, o.count, run_id),
                                    Mode::Norm => norm::run(
                                        &net,
                                        o,
                                        norm_bin.as_deref().expect("built"),
                                        n,
                                        size,
                                        o.count,
                                        measure,
                                        loss,
                                        run_id,
                                    ),
                                    _ => unreachable!(),
                                },
                            };
                            match r {
                                Ok(out) => {
                                    eprintln!(
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
                                    if o.json {
                                        println!("{}", out.json());
                                    }
                                    runs.push(out);
                                }
                                Err(e) => {
                                    eprintln!(
                                        "  {} {:?} {n} rx {size} B: FAILED: {e}",
                                        mode.name(),
                                        via
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        drop(net);
    }
    report(o, &runs);
    Ok(runs.iter().all(|r| r.complete || r.mode == "raw"))
}

fn report(o: &Opts, runs: &[Outcome]) {
    let mut modes: Vec<&'static str> = Vec::new();
    for r in runs {
        if !modes.contains(&r.mode) {
            modes.push(r.mode);
        }
    }
    let mut carriers: Vec<opts::Carrier> = Vec::new();
    // NORM always runs on UDP and ESP on EDP: they join every carrier's
    // table and do not open one of their own.
    for r in runs.iter().filter(|r| r.mode != "norm" && r.mode != "esp") {
        if !carriers.contains(&r.carrier) {
            carriers.push(r.carrier);
        }
    }
    for &measure in &o.measure {
        for &size in &o.sizes {
            for &loss in &o.loss {
                for &via in &carriers {
                    let pick = |m: &str, n: usize| {
                        runs.iter().find(|r| {
                            r.mode == m
                                && r.receivers == n
                                && r.size == size
                                && r.loss == loss
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
                                &format!("latency until the last receiver has the message, p50 us: {what}"),
                                &o.receivers,
                                &rows(&|r: &Outcome| r.value_us()),
                                "us",
                            );
                            print_table(
                                &format!("latency p99 us: {what}"),
                                &o.receivers,
                                &rows(&|r: &Outcome| r.percentile(99.0)),
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
