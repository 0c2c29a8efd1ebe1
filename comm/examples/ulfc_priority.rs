//! The user-level flow-control API (ULFC, `notes-mak-ulfc.md`) measured on
//! a virtual cluster of 8 hosts (root: network namespaces on a bridge,
//! veth, MTU 1500), one rank per host over CTP over EDP, rank 0 the
//! receiver:
//!
//! - `7to1`: ranks 1..7 send flat out into rank 0 (64 KiB messages, 16 in
//!   flight each): each sender's throughput, Jain's fairness index over
//!   them, and the receiver's kernel drop counter (`PACKET_STATISTICS`
//!   of its packet socket), which the grants must keep at 0;
//! - `probe`: ranks 2..7 send flat out; rank 1 ping-pongs 8 bytes with
//!   rank 0: its round trip p50/p99, with the default window and after
//!   `rapid(0)` (response priority);
//! - `through`: ranks 1..7 send flat out; rank 1's throughput with the
//!   default window and after `through(0)` (throughput priority).
//!
//! Run: `cargo run --release -p comm --example ulfc_priority [SECONDS]`
//! (each of the five runs lasts SECONDS, default 3; `ULFC_BUDGET=BYTES`
//! sets every rank's `CommConfig::recv_budget_bytes`, as used to compare
//! 4, 2 and 1 MiB). Bounded: every
//! blocking call fails after 30 s, and the cluster is removed on exit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use comm::{CommConfig, Communicator, ANY_SOURCE, ANY_TAG};
use ctp::{CtpConfig, CtpSocket, EdpTransport, EthAddr};
use runtime::Runtime;

const HOSTS: usize = 8;
const BULK: usize = 64 << 10;
const IN_FLIGHT: usize = 16;
const TAG_BULK: u32 = 1;
const TAG_PING: u32 = 2;
const TAG_DONE: u32 = 3;

/// What a rank does in a run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    Receiver,
    Bulk,
    Probe,
}

/// A rank's priority request to rank 0 before the run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ask {
    Default,
    Rapid,
    Through,
}

#[derive(Debug, Default)]
struct Outcome {
    /// Receiver: bytes per source and the seconds they took.
    bytes: Vec<u64>,
    secs: Vec<f64>,
    kernel_drops: u64,
    refused: u64,
    /// Probe: round trips, us.
    rtts: Vec<f64>,
    /// CTP packets resent by this rank.
    resent: u64,
}

fn run_rank(
    c: &Communicator<EdpTransport>,
    rt: &Runtime,
    role: Role,
    ask: Ask,
    stop: &AtomicBool,
) -> Result<Outcome, comm::CommError> {
    let mut out = Outcome::default();
    match ask {
        Ask::Default => {}
        Ask::Rapid => c.rapid(0)?,
        Ask::Through => c.through(0)?,
    }
    c.barrier()?;
    match role {
        Role::Receiver => {
            let n = c.size();
            let drops0 = rt.kernel_stats().map_or(0, |k| k.drops);
            let senders = (1..n).count();
            let (mut done, mut bytes, mut last) = (0, vec![0u64; n], vec![None; n]);
            let t0 = Instant::now();
            while done < senders {
                let (st, d) = c.recv(ANY_SOURCE, ANY_TAG)?;
                match st.tag {
                    TAG_BULK => {
                        bytes[st.source] += d.len() as u64;
                        last[st.source] = Some(t0.elapsed().as_secs_f64());
                    }
                    TAG_PING => c.send(st.source, TAG_PING, &d)?,
                    _ => {
                        let sent = u64::from_be_bytes(d[..8].try_into().unwrap());
                        assert_eq!(sent, bytes[st.source], "rank {} lost data", st.source);
                        done += 1;
                    }
                }
            }
            out.kernel_drops = rt.kernel_stats().map_or(0, |k| k.drops) - drops0;
            out.refused = c.stats().refused_fragments;
            out.secs = last.iter().map(|l| l.unwrap_or(0.0)).collect();
            out.bytes = bytes;
        }
        Role::Bulk => {
            let buf = vec![b'b'; BULK];
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let reqs = (0..IN_FLIGHT)
                    .map(|_| c.isend(0, TAG_BULK, &buf))
                    .collect::<Result<Vec<_>, _>>()?;
                c.wait_all(reqs)?;
                sent += (IN_FLIGHT * BULK) as u64;
            }
            c.send(0, TAG_DONE, &sent.to_be_bytes())?;
        }
        Role::Probe => {
            let ping = [7u8; 8];
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                c.send(0, TAG_PING, &ping)?;
                c.recv(0, TAG_PING)?;
                out.rtts.push(t.elapsed().as_secs_f64() * 1e6);
            }
            c.send(0, TAG_DONE, &0u64.to_be_bytes())?;
        }
    }
    c.barrier()?;
    out.resent = c.socket().stats().data_packets_resent;
    Ok(out)
}

/// One run: fresh communicators on `port`, `roles[r]` and `asks[r]` for
/// rank r, for `secs`.
fn run(
    net: &vcluster::Cluster,
    port: u16,
    roles: &[Role],
    asks: &[Ask],
    secs: f64,
) -> Vec<Outcome> {
    let hosts: Vec<EthAddr> = net
        .hosts()
        .iter()
        .map(|h| runtime::EthAddr::new(h.mac, port))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = net
        .hosts()
        .iter()
        .map(|h| {
            let (iface, rank, hosts) = (h.iface.clone(), h.index, hosts.clone());
            let (role, ask, stop) = (roles[rank], asks[rank], stop.clone());
            h.spawn(move || {
                let ctp = CtpConfig::default();
                let rt = Runtime::shared(&iface, &ctp.runtime).expect("runtime");
                let sock = CtpSocket::bind_on(&rt, port, ctp).expect("bind");
                let mut cfg = CommConfig {
                    wait_timeout: Some(Duration::from_secs(30)),
                    ..CommConfig::default()
                };
                if let Ok(b) = std::env::var("ULFC_BUDGET") {
                    cfg.recv_budget_bytes = b.parse().expect("ULFC_BUDGET: bytes");
                }
                let c = Communicator::new(sock, rank, hosts, cfg).expect("join");
                let out = run_rank(&c, &rt, role, ask, &stop)
                    .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                c.finalize(Duration::from_secs(30)).expect("finalize");
                out
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn mbps(o: &Outcome, r: usize) -> f64 {
    if o.secs[r] > 0.0 {
        o.bytes[r] as f64 / o.secs[r] / 1e6
    } else {
        0.0
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("SECONDS: a number"))
        .unwrap_or(3.0);
    let net = vcluster::Cluster::new("ulfc_prio", HOSTS, 1500)
        .expect("a virtual cluster (needs root: network namespaces)");
    println!(
        "# ULFC on {HOSTS} namespaces over EDP (veth + bridge, MTU 1500), comm {}; {secs} s per run",
        env!("CARGO_PKG_VERSION")
    );

    // 7 senders into one receiver.
    let mut roles = vec![Role::Bulk; HOSTS];
    roles[0] = Role::Receiver;
    let asks = vec![Ask::Default; HOSTS];
    let o = run(&net, 4400, &roles, &asks, secs);
    let rates: Vec<f64> = (1..HOSTS).map(|r| mbps(&o[0], r)).collect();
    let (sum, sq): (f64, f64) = (rates.iter().sum(), rates.iter().map(|x| x * x).sum());
    let jain = sum * sum / (rates.len() as f64 * sq);
    println!(
        "7to1: per sender MB/s {:?}; total {:.0} MB/s; Jain {:.3}; receiver kernel drops {}; refused fragments {}; CTP packets resent {}",
        rates.iter().map(|r| r.round()).collect::<Vec<_>>(),
        sum,
        jain,
        o[0].kernel_drops,
        o[0].refused,
        o.iter().map(|x| x.resent).sum::<u64>()
    );

    // Probe latency under bulk load, default and rapid.
    let mut roles = vec![Role::Bulk; HOSTS];
    roles[0] = Role::Receiver;
    roles[1] = Role::Probe;
    for (port, ask) in [(4410, Ask::Default), (4420, Ask::Rapid)] {
        let mut asks = vec![Ask::Default; HOSTS];
        asks[1] = ask;
        let mut o = run(&net, port, &roles, &asks, secs);
        let bulk: f64 = (2..HOSTS).map(|r| mbps(&o[0], r)).sum();
        let kd = o[0].kernel_drops;
        let rtts = &mut o[1].rtts;
        let n = rtts.len();
        println!(
            "probe {ask:?}: rank 1 8-byte round trip p50 {:.1} us, p99 {:.1} us ({n} round trips); bulk from 6 senders {bulk:.0} MB/s; receiver kernel drops {kd}",
            pct(rtts, 0.5),
            pct(rtts, 0.99),
        );
    }

    // Throughput priority.
    let mut roles = vec![Role::Bulk; HOSTS];
    roles[0] = Role::Receiver;
    for (port, ask) in [(4430, Ask::Default), (4440, Ask::Through)] {
        let mut asks = vec![Ask::Default; HOSTS];
        asks[1] = ask;
        let o = run(&net, port, &roles, &asks, secs);
        let others: Vec<f64> = (2..HOSTS).map(|r| mbps(&o[0], r)).collect();
        println!(
            "through {ask:?}: rank 1 {:.0} MB/s; ranks 2..7 mean {:.0} MB/s; receiver kernel drops {}",
            mbps(&o[0], 1),
            others.iter().sum::<f64>() / others.len() as f64,
            o[0].kernel_drops
        );
    }
}
