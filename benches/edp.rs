//! EDP benchmarks (criterion):
//!
//! - `edp_codec/encode_decode/{64,1400}`: build one EDP frame and parse it
//!   back (ns per frame);
//! - `edp_veth_send/{send,send_batch}/64`: the send path of an
//!   [`EdpSocket`] on a veth pair between two network namespaces (frames per
//!   second: one `send` per frame, or `send_batch` of 64 frames per
//!   `sendmmsg`). Needs root; otherwise prints why and skips this group;
//! - `edp_veth_rtt/{blocking,busy_poll,rx_ring+busy_poll}/64`: round trip
//!   of a 64-byte datagram to an echo thread in the other namespace (half
//!   of it is the half round-trip netgauge reports). Needs root.
//!
//! - `link_rx/{ring_recv,ring_recv_with,mmsg_recv_batch,mmsg_recv_with}/{64,1514}`:
//!   the receive path of a `PacketLink` on a veth pair: 256 frames are sent
//!   and left to arrive (not timed), then drained (timed) with `recv`
//!   (copy out of the ring, one frame per call), `recv_with` on the ring
//!   (borrowed in the slot), `recv_batch` (recvmmsg into the caller's
//!   buffers) or `recv_with` without ring (recvmmsg into the link's own
//!   buffers). Throughput in frames. Needs root;
//!
//! - `runtime_sim/pingpong/64`: the user-space cost of the runtime per
//!   message: two `EdpSocket`s on their own runtimes over a zero-delay
//!   `SimLink` pair, one thread sending and receiving in turn (send_to on
//!   A, recv_from on B, back): no kernel, so the time is the stack's own
//!   (demultiplexing, locking, wait bookkeeping, header build and parse);
//!   the raw `SimLink` send + recv of the same frames is measured beside
//!   it (`simlink_raw`). `ctp_pingpong` and `esp_pingpong` do the same
//!   with CTP-over-EDP sockets (each reply carries the confirmation of
//!   its request) and an established ESP stream: their difference to
//!   `pingpong` is what each protocol's user-space work costs per
//!   message;
//!
//! - after them (unfiltered runs only): min / p50 / p99 of the half
//!   round-trip for blocking, RX ring, busy poll and ring + busy poll.
//!
//! Run: `cargo bench --bench edp` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};

use ctp::{CtpConfig, CtpSocket, Options};
use edp::wire::{emit_edp_frame, EdpFrame};
use edp::{EdpConfig, EdpSocket, MacAddr, ETHERTYPE_EDP};
use link::eth::EthernetRepr;
use runtime::{LinkConfig, RuntimeConfig, WaitPolicy, DEFAULT_RX_RING};

/// A socket configuration: `wait` policy, RX ring or recvmmsg.
fn variant(wait: WaitPolicy, ring: bool) -> EdpConfig {
    EdpConfig {
        runtime: RuntimeConfig {
            link: LinkConfig {
                rx_ring: ring.then_some(DEFAULT_RX_RING),
                ..LinkConfig::default()
            },
            ..RuntimeConfig::default()
        },
        wait,
        ..EdpConfig::default()
    }
}

fn codec(c: &mut Criterion) {
    let eth = EthernetRepr {
        dst: MacAddr([2, 0, 0, 0, 0, 2]),
        src: MacAddr([2, 0, 0, 0, 0, 1]),
        ethertype: ETHERTYPE_EDP,
    };
    let mut g = c.benchmark_group("edp_codec");
    g.throughput(Throughput::Elements(1));
    for size in [64usize, 1400] {
        let payload = vec![0xABu8; size];
        let mut buf = vec![0u8; 1514];
        g.bench_with_input(BenchmarkId::new("encode_decode", size), &size, |b, _| {
            b.iter(|| {
                let n = emit_edp_frame(&mut buf, &eth, 49152, 7000, black_box(&payload)).unwrap();
                let f = EdpFrame::parse(black_box(&buf[..n]), ETHERTYPE_EDP, 1514).unwrap();
                black_box(f.payload.len())
            })
        });
    }
    g.finish();
}

/// Two namespaces joined by a veth pair (MTU 1500) for the benchmark
/// `what`, or `None` after printing why it is skipped (not root, or the
/// namespaces could not be made).
fn bench_net(tag: &str, what: &str) -> Option<testkit::Cluster> {
    if !testkit::vcluster::userns::can_build_directly() {
        eprintln!("SKIPPED {what}: needs root to create network namespaces");
        return None;
    }
    match testkit::Cluster::new(tag, 2, 1500) {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("SKIPPED {what}: {e}");
            None
        }
    }
}

fn veth_send(c: &mut Criterion) {
    let Some(net) = bench_net("bench_send", "edp_veth_send") else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let cfg = variant(WaitPolicy::Block, false);
    // The socket stays in namespace a after the thread that made it ends.
    let mut s = a.run(|| EdpSocket::bind_with((a.iface.as_str(), 0), &cfg).unwrap());
    // Nobody listens on b: frames are dropped by b's stack after delivery,
    // so this measures the sender's path (syscall, qdisc, veth transfer).
    s.connect(b.mac, 7000).unwrap();
    let payload = vec![0x5Au8; 64];
    let batch: Vec<&[u8]> = (0..edp::socket::SEND_BATCH)
        .map(|_| payload.as_slice())
        .collect();

    let mut g = c.benchmark_group("edp_veth_send");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("send", 64), |bch| {
        bch.iter(|| s.send(black_box(&payload)).unwrap())
    });
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.bench_function(BenchmarkId::new("send_batch", 64), |bch| {
        bch.iter(|| {
            let mut k = 0;
            while k < batch.len() {
                k += s.send_batch(&batch[k..]).unwrap();
            }
        })
    });
    g.finish();
    let st = s.stats();
    eprintln!(
        "edp_veth_send: sent={} send_errors={}",
        st.sent, st.send_errors
    );
    drop(s);
    drop(net);
}

fn veth_rtt(c: &mut Criterion) {
    let Some(net) = bench_net("bench_rtt", "edp_veth_rtt") else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let variants = [
        ("blocking", variant(WaitPolicy::Block, false)),
        ("busy_poll", variant(WaitPolicy::BusyPoll, false)),
        ("rx_ring+busy_poll", variant(WaitPolicy::BusyPoll, true)),
    ];
    let mut g = c.benchmark_group("edp_veth_rtt");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for (i, (name, cfg)) in variants.into_iter().enumerate() {
        let port = 7600 + i as u16;
        let (mut s, server) = echo_pair(&a, &b, port, &cfg);
        let payload = [0x33u8; 64];
        let mut buf = [0u8; 1500];
        g.bench_function(BenchmarkId::new(name, 64), |bch| {
            bch.iter(|| {
                s.send(&payload).unwrap();
                s.recv(&mut buf).unwrap()
            })
        });
        s.send(&[0xFF]).unwrap();
        server.join().unwrap();
    }
    g.finish();
    drop(net);
}

/// An echo thread on `b` port `port` (it answers until it receives the
/// 1-byte stop datagram) and a socket on `a` connected to it, both with
/// `cfg`.
fn echo_pair(
    a: &testkit::Host,
    b: &testkit::Host,
    port: u16,
    cfg: &EdpConfig,
) -> (EdpSocket, std::thread::JoinHandle<()>) {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (bi, scfg) = (b.clone(), cfg.clone());
    let server = b.spawn(move || {
        let mut s = EdpSocket::bind_with((bi.iface.as_str(), port), &scfg).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 1500];
        loop {
            let (n, mac, p) = s.recv_from(&mut buf).unwrap();
            if n == 1 {
                break;
            }
            s.send_to(&buf[..n], (mac, p)).unwrap();
        }
    });
    ready_rx.recv().unwrap();
    let mut s = a.run(|| EdpSocket::bind_with((a.iface.as_str(), 0), cfg).unwrap());
    s.connect(b.mac, port).unwrap();
    (s, server)
}

/// Half round-trip percentiles (netgauge's convention: RTT / 2), printed
/// after the criterion groups. Criterion reports means, which on a shared
/// 2-core machine are dominated by preemption of the busy-polling threads;
/// p50 is the robust comparison.
fn rtt_percentiles() {
    let Some(net) = bench_net("bench_pct", "edp half-RTT percentiles") else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let variants = [
        ("blocking", variant(WaitPolicy::Block, false)),
        ("rx_ring", variant(WaitPolicy::Block, true)),
        ("adaptive+rx_ring", variant(WaitPolicy::DEFAULT, true)),
        ("busy_poll", variant(WaitPolicy::BusyPoll, false)),
        ("rx_ring+busy_poll", variant(WaitPolicy::BusyPoll, true)),
    ];
    let rounds = 3000;
    println!("edp half-RTT, 64 B, veth, {rounds} round trips each:");
    for (i, (name, cfg)) in variants.into_iter().enumerate() {
        let port = 7700 + i as u16;
        let (mut s, server) = echo_pair(&a, &b, port, &cfg);
        let payload = [0x33u8; 64];
        let mut buf = [0u8; 1500];
        let mut half = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let t = std::time::Instant::now();
            s.send(&payload).unwrap();
            s.recv(&mut buf).unwrap();
            half.push(t.elapsed().as_nanos() as f64 / 2000.0);
        }
        s.send(&[0xFF]).unwrap();
        server.join().unwrap();
        half.sort_by(f64::total_cmp);
        println!(
            "  {name:18} min {:6.2} us  p50 {:6.2} us  p99 {:8.2} us",
            half[0],
            half[rounds / 2],
            half[rounds * 99 / 100]
        );
    }
    drop(net);
}

/// Frames per drained burst in `link_rx`.
const RX_BURST: usize = 256;

fn link_rx(c: &mut Criterion) {
    use link::Link;
    use link::{PacketConfig, PacketLink};
    use netcore::bpf::FrameFilter;
    use std::time::Instant;

    let Some(net) = bench_net("bench_link_rx", "link_rx") else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let mut filter = FrameFilter::new();
    filter.port(ETHERTYPE_EDP, 7800);
    let open = |ring: Option<usize>| {
        b.run(|| {
            PacketLink::open(
                &b.iface,
                &PacketConfig {
                    program: Some(filter.compile().unwrap()),
                    rx_ring: ring,
                    ..PacketConfig::default()
                },
            )
            .unwrap()
        })
    };
    let mut tx = a.run(|| PacketLink::new(&a.iface, ETHERTYPE_EDP).unwrap());
    let mut g = c.benchmark_group("link_rx");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(RX_BURST as u64));
    for size in [64usize, 1514] {
        let mut f = vec![0x5Au8; size];
        f[..6].copy_from_slice(&b.mac.0);
        f[6..12].copy_from_slice(&a.mac.0);
        f[12..14].copy_from_slice(&ETHERTYPE_EDP.to_be_bytes());
        f[16..18].copy_from_slice(&7800u16.to_be_bytes());
        let burst: Vec<&[u8]> = (0..RX_BURST).map(|_| f.as_slice()).collect();
        let send_burst = |tx: &mut PacketLink| {
            let mut k = 0;
            while k < burst.len() {
                match tx.send_batch(&burst[k..]) {
                    Ok(n) => k += n,
                    Err(_) => std::thread::yield_now(),
                }
            }
            // Let the burst arrive before the timed drain.
            std::thread::sleep(Duration::from_millis(2));
        };
        type Drain = fn(&mut PacketLink, &mut Vec<u8>, &mut [&mut [u8]]) -> usize;
        let variants: [(&str, bool, Drain); 4] = [
            ("ring_recv", true, |l, buf, _| match l.recv(buf) {
                Ok(n) => {
                    black_box(buf[n - 1]);
                    1
                }
                Err(_) => 0,
            }),
            ("ring_recv_with", true, |l, _, _| {
                l.recv_with(64, &mut |f| {
                    black_box(f[f.len() - 1]);
                })
                .unwrap_or(0)
            }),
            ("mmsg_recv_batch", false, |l, _, bufs| {
                let mut lens = [0usize; 64];
                match l.recv_batch(bufs, &mut lens) {
                    Ok(n) => {
                        black_box(bufs[n - 1][lens[n - 1] - 1]);
                        n
                    }
                    Err(_) => 0,
                }
            }),
            ("mmsg_recv_with", false, |l, _, _| {
                l.recv_with(64, &mut |f| {
                    black_box(f[f.len() - 1]);
                })
                .unwrap_or(0)
            }),
        ];
        for (name, ring, drain) in variants {
            let mut rx = open(ring.then_some(4 << 20));
            let mut buf = vec![0u8; 1514];
            let mut flat = vec![0u8; 64 * 1514];
            let mut store: Vec<&mut [u8]> = flat.chunks_mut(1514).collect();
            g.bench_function(BenchmarkId::new(name, size), |bch| {
                bch.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        send_burst(&mut tx);
                        let t = Instant::now();
                        let mut got = 0;
                        while got < RX_BURST {
                            let n = drain(&mut rx, &mut buf, &mut store);
                            if n == 0 && t.elapsed() > Duration::from_secs(1) {
                                break; // lost frames: do not spin forever
                            }
                            got += n;
                        }
                        total += t.elapsed();
                    }
                    total
                })
            });
            let ks = rx.kernel_stats().unwrap_or_default();
            eprintln!("link_rx/{name}/{size}: kernel drops {}", ks.drops);
        }
    }
    g.finish();
    drop(net);
}

fn runtime_sim(c: &mut Criterion) {
    use link::fault::FaultConfig;
    use link::sim::{SimClock, SimLink};
    use link::Link;
    use runtime::Runtime;
    let clock = SimClock::new();
    let mut g = c.benchmark_group("runtime_sim");
    g.throughput(Throughput::Elements(2));
    {
        let (mut a, mut b) =
            SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        let frame = vec![0u8; 64 + 14 + 8];
        let mut buf = vec![0u8; 2048];
        g.bench_function(BenchmarkId::new("simlink_raw", 64), |bch| {
            bch.iter(|| {
                a.send(&frame).unwrap();
                black_box(b.recv(&mut buf).unwrap());
                b.send(&frame).unwrap();
                black_box(a.recv(&mut buf).unwrap());
            })
        });
    }
    let (la, lb) = SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    let (ma, mb) = (la.mac(), lb.mac());
    let cfg = variant(WaitPolicy::BusyPoll, false);
    let mut a = EdpSocket::from_link_with(Box::new(la), 7001, &cfg).unwrap();
    let mut b = EdpSocket::from_link_with(Box::new(lb), 7002, &cfg).unwrap();
    let msg = [7u8; 64];
    let mut buf = [0u8; 2048];
    g.bench_function(BenchmarkId::new("pingpong", 64), |bch| {
        bch.iter(|| {
            a.send_to(&msg, (mb, 7002)).unwrap();
            black_box(b.recv_from(&mut buf).unwrap());
            b.send_to(&msg, (ma, 7001)).unwrap();
            black_box(a.recv_from(&mut buf).unwrap());
        })
    });
    // CTP over EDP, same shape: each reply carries the confirmation of its
    // request, so one frame per message as on a veth link.
    let (la, lb) = SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
    let (ma, mb) = (la.mac(), lb.mac());
    let ra = Runtime::with_link(Box::new(la), RuntimeConfig::default()).unwrap();
    let rb = Runtime::with_link(Box::new(lb), RuntimeConfig::default()).unwrap();
    let ctp_cfg = CtpConfig {
        wait: WaitPolicy::BusyPoll,
        ..CtpConfig::default()
    };
    let ca = CtpSocket::bind_on(&ra, 7, ctp_cfg.clone()).unwrap();
    let cb = CtpSocket::bind_on(&rb, 8, ctp_cfg).unwrap();
    let patience = Some(Duration::from_secs(10));
    g.bench_function(BenchmarkId::new("ctp_pingpong", 64), |bch| {
        bch.iter(|| {
            ca.send(1, runtime::EthAddr::new(mb, 8), &msg, Options::NONE)
                .unwrap();
            black_box(cb.recv_delivery(patience).unwrap());
            cb.send(2, runtime::EthAddr::new(ma, 7), &msg, Options::NONE)
                .unwrap();
            black_box(ca.recv_delivery(patience).unwrap());
        })
    });
    // ESP, same shape: a 64-byte write each way on an established stream
    // (the server accepts on its own thread; both ends are driven from
    // this one after that).
    {
        use std::io::{Read, Write};
        let (la, lb) = SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        let mb = lb.mac();
        let esp_cfg = esp::EspConfig::default().busy_poll();
        let server_cfg = esp_cfg.clone();
        let server = std::thread::spawn(move || {
            esp::EspStream::accept_link(Box::new(lb), 80, server_cfg, patience).unwrap()
        });
        let mut c =
            esp::EspStream::connect_link(Box::new(la), 40000, (mb, 80), esp_cfg, patience).unwrap();
        let mut s = server.join().unwrap();
        g.bench_function(BenchmarkId::new("esp_pingpong", 64), |bch| {
            bch.iter(|| {
                c.write_all(&msg).unwrap();
                s.read_exact(&mut buf[..64]).unwrap();
                s.write_all(&msg).unwrap();
                c.read_exact(&mut buf[..64]).unwrap();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, codec, veth_send, veth_rtt, link_rx, runtime_sim);

fn main() {
    benches();
    // Only on a full run, not when criterion lists benchmarks or is filtered.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filtered = args.iter().any(|a| !a.starts_with('-'));
    if !filtered && !args.iter().any(|a| a == "--list") {
        rtt_percentiles();
    }
    Criterion::default().configure_from_args().final_summary();
}
