//! What an exchange costs against a ping-pong, two ranks over CTP over EDP
//! on a 2-host virtual cluster (root), busy-poll waits: the half round trip
//! of a ping-pong, an exchange (both send, then both receive: the step of
//! a recursive-doubling allreduce), the allreduce itself, the barrier, and
//! the exchange with the receive posted first. Each in us per iteration,
//! 20000 iterations.
//!
//! An exchange does the work of a whole round trip on each rank: its own
//! data frame and the peer's, and a CTP confirmation frame for each (CTP
//! confirms every packet with a frame of its own, spec "Confirmations"),
//! where TCP's ACK rides on the reply; on a host whose CPUs are the limit,
//! that is the allreduce's cost (issue 12, docs/measurements).
//!
//! Run: `cargo run --release -p comm --example exchange_cost`

use comm::{CommConfig, Communicator};
use ctp::{CtpConfig, EdpAddr};
use std::time::{Duration, Instant};
fn main() {
    let net = vcluster::Cluster::new("xchg", 2, 1500).unwrap();
    let hosts: Vec<EdpAddr> = net.hosts().iter().map(|h| (h.mac, 4500)).collect();
    let th: Vec<_> = net
        .hosts()
        .iter()
        .map(|h| {
            let (iface, rank, hosts) = (h.iface.clone(), h.index, hosts.clone());
            h.spawn(move || {
                let ctp = CtpConfig {
                    wait: edp::runtime::WaitPolicy::BusyPoll,
                    ..CtpConfig::default()
                };
                let c = Communicator::bind_edp(
                    &iface,
                    rank,
                    hosts,
                    CommConfig {
                        wait_timeout: Some(Duration::from_secs(30)),
                        ..CommConfig::default()
                    },
                    ctp,
                )
                .unwrap();
                let peer = 1 - rank;
                let n = 20000;
                let mut out = Vec::new();
                let rt = c.socket().runtime().clone();
                let frames = |rt: &edp::runtime::Runtime| {
                    let s = rt.stats();
                    (s.tx_frames, s.rx_frames)
                };
                let mut f0;
                // ping-pong
                c.barrier().unwrap();
                f0 = frames(&rt);
                let t = Instant::now();
                for _ in 0..n {
                    if rank == 0 {
                        c.send(peer, 1, &[0u8; 8]).unwrap();
                        c.recv(peer, 1u32).unwrap();
                    } else {
                        c.recv(peer, 1u32).unwrap();
                        c.send(peer, 1, &[0u8; 8]).unwrap();
                    }
                }
                let f1 = frames(&rt);
                out.push((
                    "pingpong half rtt",
                    t.elapsed().as_secs_f64() * 1e6 / (2.0 * n as f64),
                    (f1.0 - f0.0) as f64 / n as f64,
                    (f1.1 - f0.1) as f64 / n as f64,
                ));
                c.barrier().unwrap();
                f0 = frames(&rt);
                let t = Instant::now();
                for _ in 0..n {
                    c.send(peer, 2, &[0u8; 8]).unwrap();
                    c.recv(peer, 2u32).unwrap();
                }
                let f1 = frames(&rt);
                out.push((
                    "exchange send+recv",
                    t.elapsed().as_secs_f64() * 1e6 / n as f64,
                    (f1.0 - f0.0) as f64 / n as f64,
                    (f1.1 - f0.1) as f64 / n as f64,
                ));
                c.barrier().unwrap();
                f0 = frames(&rt);
                let t = Instant::now();
                for _ in 0..n {
                    let mut v = [1.0f64];
                    c.allreduce_sum(&mut v).unwrap();
                }
                let f1 = frames(&rt);
                out.push((
                    "allreduce back to back",
                    t.elapsed().as_secs_f64() * 1e6 / n as f64,
                    (f1.0 - f0.0) as f64 / n as f64,
                    (f1.1 - f0.1) as f64 / n as f64,
                ));
                c.barrier().unwrap();
                f0 = frames(&rt);
                let t = Instant::now();
                for _ in 0..n {
                    c.barrier().unwrap();
                }
                let f1 = frames(&rt);
                out.push((
                    "barrier",
                    t.elapsed().as_secs_f64() * 1e6 / n as f64,
                    (f1.0 - f0.0) as f64 / n as f64,
                    (f1.1 - f0.1) as f64 / n as f64,
                ));
                c.barrier().unwrap();
                f0 = frames(&rt);
                let t = Instant::now();
                for _ in 0..n {
                    let r = c.irecv(peer, 3u32).unwrap();
                    c.send(peer, 3, &[0u8; 8]).unwrap();
                    c.wait(r).unwrap();
                }
                let f1 = frames(&rt);
                out.push((
                    "exchange irecv first",
                    t.elapsed().as_secs_f64() * 1e6 / n as f64,
                    (f1.0 - f0.0) as f64 / n as f64,
                    (f1.1 - f0.1) as f64 / n as f64,
                ));
                c.finalize(Duration::from_secs(10)).unwrap();
                (rank, out)
            })
        })
        .collect();
    for t in th {
        let (r, o) = t.join().unwrap();
        for (name, us, tx, rx) in o {
            println!("rank {r}: {name:<24} {us:8.2} us/iter  tx {tx:5.2} rx {rx:5.2} frames/iter");
        }
    }
}
