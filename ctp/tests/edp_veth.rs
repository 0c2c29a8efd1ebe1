//! L2: CTP over EDP between network namespaces (veth pair, or a bridge for
//! broadcast). Needs root: runs under CI=true, otherwise may skip with a
//! printed reason. Namespaces are removed by the harness's Drop guard.

use std::collections::HashMap;
use std::time::Duration;

use ctp::EthAddr;
use ctp::{CtpConfig, CtpSocket, Delivery, EdpTransport, Options};
use link::fault::FaultConfig;
use runtime::WaitPolicy;

const PORT: u16 = 1515;
const QUIT: u16 = 999;
const WAIT: Option<Duration> = Some(Duration::from_secs(60));

/// Message `seed` of `len` bytes: the seed in the first 8 bytes, then a
/// pattern.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    testkit::pattern::tagged(seed, len)
}

fn data(d: Delivery<EthAddr>) -> ctp::ReceivedData<EthAddr> {
    match d {
        Delivery::Data(d) => d,
        Delivery::Error(e) => panic!("unexpected error delivery: {e}"),
    }
}

/// Echo server: every command is sent back unchanged until QUIT.
/// `cfg` with `faults` injected on the runtime's link (a runtime of its own).
fn with_faults(mut cfg: CtpConfig, faults: FaultConfig) -> CtpConfig {
    cfg.runtime.link.fault = Some(faults);
    cfg
}

fn echo_server(sock: CtpSocket<EdpTransport>) {
    loop {
        let d = data(sock.recv_delivery(Some(Duration::from_secs(120))).unwrap());
        if d.command == QUIT {
            break;
        }
        sock.send_vec(d.command, d.from, d.data, Options::NONE)
            .unwrap();
    }
    assert!(sock.flush(Some(Duration::from_secs(30))).unwrap());
    // Linger: if our confirmation of QUIT was lost, the client resends it.
    let end = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < end {
        sock.poll(Duration::from_millis(50)).unwrap();
    }
    eprintln!("server stats {:?} {:?}", sock.stats(), sock.driver_stats());
}

fn run_echo(test: &str, mtu: usize, faults: Option<FaultConfig>, sizes: &[usize]) {
    let Some(net) = testkit::setup(test, 2, mtu) else {
        return;
    };
    let (h0, h1) = (net.host(0).clone(), net.host(1).clone());
    let server_addr = runtime::EthAddr::new(h0.mac, PORT);
    let f0 = faults.clone();
    let if0 = h0.iface.clone();
    let if1 = h1.iface.clone();
    let server = h0.spawn(move || {
        let s = match f0 {
            Some(f) => CtpSocket::bind_edp(&if0, PORT, with_faults(CtpConfig::default(), f)),
            None => CtpSocket::bind_edp(&if0, PORT, CtpConfig::default()),
        }
        .expect("bind CTP over EDP in namespace 0");
        echo_server(s);
    });
    let sizes = sizes.to_vec();
    let stats = h1.run(move || {
        let cfg = CtpConfig::default();
        let s = match faults {
            Some(f) => CtpSocket::bind_edp(&if1, PORT, with_faults(cfg, f.with_seed(99))),
            None => CtpSocket::bind_edp(&if1, PORT, cfg),
        }
        .expect("bind CTP over EDP in namespace 1");
        // The server may still be binding: retry the first command until confirmed.
        let mut up = false;
        for _ in 0..100 {
            // each ping replaces the previous one (UniqueCommand); the server
            // echoes it back once it is up
            s.ping(1, server_addr).unwrap();
            if let Ok(Delivery::Data(d)) = s.recv_delivery(Some(Duration::from_millis(200))) {
                assert_eq!(d.command, 1);
                up = true;
                break;
            }
        }
        assert!(up, "server never answered");
        for (i, &len) in sizes.iter().enumerate() {
            let msg = pattern(i as u64, len);
            let cmd = 10 + i as u16;
            s.send(cmd, server_addr, &msg, Options::NONE).unwrap();
            // error deliveries from dead pings are possible; skip them
            let d = loop {
                match s.recv_delivery(WAIT).unwrap() {
                    Delivery::Data(d) if d.command == 1 => {} // a late echo of a start-up ping
                    Delivery::Data(d) => break d,
                    Delivery::Error(e) => assert_eq!(
                        e.command,
                        Some(1),
                        "{e}; client {:?} {:?} {:?} timeout {:?}",
                        s.stats(),
                        s.driver_stats(),
                        s.status(),
                        s.with_endpoint(|ep| (
                            ep.peer_timeout(server_addr),
                            ep.peer_srtt(server_addr)
                        ))
                    ),
                }
            };
            assert_eq!((d.command, d.from, d.data.len()), (cmd, server_addr, len));
            assert!(d.data == msg, "echo of {len} bytes differs");
        }
        s.send(QUIT, server_addr, b"", Options::NONE).unwrap();
        assert!(s.flush(WAIT).unwrap());
        // Linger: if our confirmation of the last echo was lost, the server
        // resends it and must hear a confirmation before it can flush.
        let end = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < end {
            s.poll(Duration::from_millis(50)).unwrap();
        }
        s.stats()
    });
    server.join().expect("server thread");
    eprintln!("{test}: client stats {stats:?}");
    drop(net);
}

#[test]
fn ctp_over_edp_between_namespaces() {
    run_echo(
        "ctp_edp_echo",
        1500,
        None,
        &[0, 1, 64, 1469, 1470, 100_000, 4 << 20],
    );
}

/// A 100 MiB message over EDP at MTU 9000 arrives byte-exact (and back).
#[test]
fn hundred_mib_over_edp_mtu_9000() {
    run_echo("ctp_edp_100m", 9000, None, &[100 << 20]);
}

/// With 5 % loss injected on both sides (FaultLink), every command of mixed
/// size is echoed exactly once.
#[test]
fn ctp_over_edp_with_injected_loss() {
    let sizes: Vec<usize> = (0..60)
        .map(|i| [1, 100, 1500, 20_000, 300_000][i % 5])
        .collect();
    run_echo(
        "ctp_edp_loss",
        1500,
        Some(FaultConfig::seeded(5).with_loss(0.05)),
        &sizes,
    );
}

/// Broadcast to the broadcast MAC on a bridge of three hosts; the sender's
/// group is the two receivers, each must confirm; each delivers once.
#[test]
fn broadcast_over_edp_on_a_bridge() {
    let Some(net) = testkit::setup("ctp_edp_bcast", 3, 1500) else {
        return;
    };
    let receivers: Vec<_> = (1..3)
        .map(|i| {
            let h = net.host(i).clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let ifname = h.iface.clone();
            let j = h.spawn(move || {
                let s = CtpSocket::bind_edp(&ifname, PORT, CtpConfig::default()).unwrap();
                tx.send(()).unwrap();
                let mut got = HashMap::new();
                while got.len() < 10 {
                    let d = data(s.recv_delivery(WAIT).unwrap());
                    assert!(d.broadcast);
                    *got.entry(u64::from_le_bytes(d.data[..8].try_into().unwrap()))
                        .or_insert(0) += 1;
                }
                // linger so late duplicates would show up
                std::thread::sleep(Duration::from_millis(200));
                while let Ok(d) = s.recv_delivery(Some(Duration::from_millis(1))) {
                    let d = data(d);
                    *got.entry(u64::from_le_bytes(d.data[..8].try_into().unwrap()))
                        .or_insert(0) += 1;
                }
                got
            });
            rx.recv().unwrap();
            j
        })
        .collect();
    let group: Vec<EthAddr> = (1..3)
        .map(|i| runtime::EthAddr::new(net.host(i).mac, PORT))
        .collect();
    let h0 = net.host(0).clone();
    let if0 = h0.iface.clone();
    h0.run(move || {
        let s = CtpSocket::bind_edp(&if0, PORT, CtpConfig::default()).unwrap();
        s.set_broadcast_group(group).unwrap();
        for i in 0..10u64 {
            let len = if i % 2 == 0 { 200 } else { 5000 };
            s.broadcast(7, &pattern(i, len), Options::NONE).unwrap();
        }
        assert!(
            s.flush(WAIT).unwrap(),
            "every receiver confirmed every packet"
        );
        assert_eq!(s.try_recv_delivery(), None, "no error delivery");
    });
    for r in receivers {
        let got = r.join().expect("receiver");
        assert_eq!(got.len(), 10);
        assert!(got.values().all(|&n| n == 1), "each exactly once: {got:?}");
    }
}

/// Not a check: prints p50/p99 half round-trip of 64-byte commands, CTP over
/// EDP and CTP over UDP on the same veth pair (netgauge owns the real
/// measurement). Run: `cargo test --release -p ctp --test edp_veth
/// latency_report -- --ignored --nocapture`.
#[test]
#[ignore]
fn latency_report() {
    let mtu: usize = std::env::var("CTP_REPORT_MTU")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let Some(net) = testkit::setup("ctp_edp_lat", 2, mtu) else {
        return;
    };
    let (h0, h1) = (net.host(0).clone(), net.host(1).clone());
    // IPv4 on the veth pair for the UDP run (the harness's addresses)
    let (udp0, udp1) = (
        std::net::SocketAddr::from((h0.ip, PORT)),
        std::net::SocketAddr::from((h1.ip, PORT)),
    );
    const N: usize = 20_000;
    let spin: u64 = std::env::var("CTP_REPORT_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for busy in [false, true] {
        let cfg = CtpConfig {
            wait: if busy {
                WaitPolicy::BusyPoll
            } else if spin > 0 {
                WaitPolicy::Adaptive {
                    spin: Duration::from_micros(spin),
                }
            } else {
                WaitPolicy::Block
            },
            ..CtpConfig::default()
        };
        // EDP
        let (if0, if1) = (h0.iface.clone(), h1.iface.clone());
        let c0 = cfg.clone();
        let srv = h0.spawn(move || {
            let s = CtpSocket::bind_edp(&if0, PORT, c0).unwrap();
            echo_server(s)
        });
        let c1 = cfg.clone();
        let peer = runtime::EthAddr::new(h0.mac, PORT);
        let edp = h1.run(move || {
            let s = CtpSocket::bind_edp(&if1, PORT, c1).unwrap();
            let r = pingpong(&s, peer, N);
            let g = bulk(&s, peer, 100 << 20);
            eprintln!(
                "busy_poll={busy} mtu={mtu}: CTP over EDP, 100 MiB echo: {g:.2} Gbit/s; {:?} {:?} timeout {:?}",
                s.stats(),
                s.driver_stats(),
                s.with_endpoint(|e| (e.peer_timeout(peer), e.peer_srtt(peer)))
            );
            s.send(QUIT, peer, b"", Options::NONE).unwrap();
            s.flush(WAIT).unwrap();
            r
        });
        srv.join().unwrap();
        // UDP
        let c0 = cfg.clone();
        let srv = h0.spawn(move || {
            let s = CtpSocket::bind_udp(udp0, c0).unwrap();
            loop {
                let d = s.recv_delivery(Some(Duration::from_secs(60))).unwrap();
                let Delivery::Data(d) = d else { continue };
                if d.command == QUIT {
                    break;
                }
                s.send_vec(d.command, d.from, d.data, Options::NONE)
                    .unwrap();
            }
            s.flush(WAIT).unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        let c1 = cfg.clone();
        let udp = h1.run(move || {
            let s = CtpSocket::bind_udp(udp1, c1).unwrap();
            let peer = udp0;
            let r = pingpong(&s, peer, N);
            let g = bulk(&s, peer, 100 << 20);
            eprintln!("busy_poll={busy} mtu={mtu}: CTP over UDP, 100 MiB echo: {g:.2} Gbit/s");
            s.send(QUIT, peer, b"", Options::NONE).unwrap();
            s.flush(WAIT).unwrap();
            r
        });
        srv.join().unwrap();
        eprintln!(
            "busy_poll={busy}: 64 B half round-trip p50/p99 (us): EDP {:.2}/{:.2}, UDP {:.2}/{:.2}, p50 ratio EDP/UDP {:.2}",
            edp.0, edp.1, udp.0, udp.1, edp.0 / udp.0
        );
    }
}

/// Sends one `len`-byte message and waits for its echo; returns Gbit/s of
/// the round trip (2 x len bytes).
fn bulk<T: ctp::Transport>(s: &CtpSocket<T>, peer: T::Addr, len: usize) -> f64 {
    let msg = vec![3u8; len];
    let t = std::time::Instant::now();
    s.send_vec(6, peer, msg, Options::NONE).unwrap();
    loop {
        if let Delivery::Data(d) = s.recv_delivery(WAIT).unwrap() {
            assert_eq!(d.data.len(), len);
            break;
        }
    }
    (2 * len) as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9
}

fn pingpong<T: ctp::Transport>(s: &CtpSocket<T>, peer: T::Addr, n: usize) -> (f64, f64) {
    let msg = [7u8; 64];
    let mut v = Vec::with_capacity(n);
    for i in 0..n + 1000 {
        let t = std::time::Instant::now();
        s.send(5, peer, &msg, Options::NONE).unwrap();
        loop {
            if let Delivery::Data(d) = s.recv_delivery(WAIT).unwrap() {
                assert_eq!(d.data.len(), 64);
                break;
            }
        }
        if i >= 1000 {
            v.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[n / 2], v[n * 99 / 100])
}

/// Child role of `two_processes_over_edp`: an echo server in its namespace.
#[test]
#[ignore]
fn edp_echo_child() {
    let Ok(iface) = std::env::var("CTP_EDP_CHILD_IFACE") else {
        return;
    };
    let s = CtpSocket::bind_edp(&iface, PORT, CtpConfig::default()).unwrap();
    let (_, mac, port) = s.local_addr().unwrap();
    println!("READY {mac} {port}");
    echo_server(s);
    println!("CHILD DONE");
}

/// Two processes, one per namespace: the child echoes, the parent checks.
#[test]
fn two_processes_over_edp() {
    use testkit::TestHost;
    let Some(net) = testkit::setup("ctp_edp_2proc", 2, 1500) else {
        return;
    };
    let (h0, h1) = (net.host(0).clone(), net.host(1).clone());
    let mut child = h0.spawn_test_child(
        "edp_echo_child",
        &[("CTP_EDP_CHILD_IFACE", h0.iface.clone())],
    );
    let ready = child.expect_line("READY");
    let mut it = ready.split_whitespace();
    let mac: edp::MacAddr = it.next().unwrap().parse().unwrap();
    let port: u16 = it.next().unwrap().parse().unwrap();
    assert_eq!((mac, port), (h0.mac, PORT));
    let if1 = h1.iface.clone();
    h1.run(move || {
        let s = CtpSocket::bind_edp(&if1, PORT, CtpConfig::default()).unwrap();
        for (i, len) in [1usize, 1469, 1470, 1 << 20].into_iter().enumerate() {
            let msg = pattern(i as u64 + 50, len);
            s.send(
                20 + i as u16,
                runtime::EthAddr::new(mac, port),
                &msg,
                Options::NONE,
            )
            .unwrap();
            let d = data(s.recv_delivery(WAIT).unwrap());
            assert_eq!(
                (d.command, d.from),
                (20 + i as u16, runtime::EthAddr::new(mac, port))
            );
            assert!(d.data == msg, "echo of {len} bytes differs");
        }
        s.send(QUIT, runtime::EthAddr::new(mac, port), b"", Options::NONE)
            .unwrap();
        assert!(s.flush(WAIT).unwrap());
        // stay a while: the child may resend the last echo if our
        // confirmation was lost
        let end = std::time::Instant::now() + Duration::from_secs(1);
        while std::time::Instant::now() < end {
            s.poll(Duration::from_millis(50)).unwrap();
        }
    });
    child.expect_line("CHILD DONE");
    child.wait_success();
}
