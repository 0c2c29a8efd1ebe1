//! What an exchange costs against a ping-pong, two ranks over CTP over EDP
//! on a 2-host virtual cluster (root), busy-poll waits: the half round trip
//! of a ping-pong, an exchange (both send, then both receive: the step of
//! a recursive-doubling allreduce), the allreduce itself, the barrier, and
//! the exchange with the receive posted first. Each in us per iteration,
//! with the frames each rank sent and received per iteration, 20000
//! iterations.
//!
//! On a host whose CPUs are the limit, an exchange costs what its frames
//! cost. CTP confirms every packet (spec "Confirmations"); over EDP the
//! confirmation rides in front of the next data packet to the same peer
//! (ctp/PROTOCOL.md "Confirmations share a frame"), so an exchange is one
//! frame each way, as TCP's ACK rides on the reply. Before that it was two,
//! and an exchange cost a whole round trip (docs/measurements).
//!
//! Run: `cargo run --release -p comm --example exchange_cost`

use comm::{CommConfig, Communicator};
use ctp::{CtpConfig, EthAddr};
use std::time::{Duration, Instant};
fn main() {
    let net = vcluster::Cluster::new("xchg", 2, 1500).unwrap();
    let hosts: Vec<EthAddr> = net
        .hosts()
        .iter()
        .map(|h| runtime::EthAddr::new(h.mac, 4500))
        .collect();
    let th: Vec<_> = net
        .hosts()
        .iter()
        .map(|h| {
            let (iface, rank, hosts) = (h.iface.clone(), h.index, hosts.clone());
            h.spawn(move || {
                let ctp = CtpConfig {
                    wait: runtime::WaitPolicy::BusyPoll,
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
                // Runs `step` n times after a barrier: (name, us per step,
                // frames sent and received per step).
                let mut measure = |name: &'static str, per: f64, step: &mut dyn FnMut()| {
                    c.barrier().unwrap();
                    let s0 = rt.stats();
                    let t = Instant::now();
                    for _ in 0..n {
                        step();
                    }
                    let us = t.elapsed().as_secs_f64() * 1e6 / (per * n as f64);
                    let s1 = rt.stats();
                    let per_step = |a: u64, b: u64| (b - a) as f64 / n as f64;
                    out.push((
                        name,
                        us,
                        per_step(s0.tx_frames, s1.tx_frames),
                        per_step(s0.rx_frames, s1.rx_frames),
                    ));
                };
                measure("pingpong half rtt", 2.0, &mut || {
                    if rank == 0 {
                        c.send(peer, 1, &[0u8; 8]).unwrap();
                        c.recv(peer, 1u32).unwrap();
                    } else {
                        c.recv(peer, 1u32).unwrap();
                        c.send(peer, 1, &[0u8; 8]).unwrap();
                    }
                });
                measure("exchange send+recv", 1.0, &mut || {
                    c.send(peer, 2, &[0u8; 8]).unwrap();
                    c.recv(peer, 2u32).unwrap();
                });
                measure("allreduce back to back", 1.0, &mut || {
                    let mut v = [1.0f64];
                    c.allreduce_sum(&mut v).unwrap();
                });
                measure("barrier", 1.0, &mut || c.barrier().unwrap());
                measure("exchange irecv first", 1.0, &mut || {
                    let r = c.irecv(peer, 3u32).unwrap();
                    c.send(peer, 3, &[0u8; 8]).unwrap();
                    c.wait(r).unwrap();
                });
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
