//! EDP on real links: AF_PACKET sockets between network namespaces joined
//! by veth pairs (the `vcluster` harness, through `testkit`). Needs root;
//! without it (or without `ip netns`) each test prints why and returns,
//! except under CI=true where it fails.

use std::io::{self, IoSlice};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use edp::echo;

use edp::echo::ping;
use edp::wire::{emit_edp_frame, EDP_HEADER_LEN};
use edp::{EdpConfig, EdpSocket, MacAddr, ETHERTYPE_EDP};
use link::eth::EthernetRepr;
use link::fault::FaultConfig;
use link::Link;
use link::ETH_HEADER_LEN;
use link::{FilterSpec, PacketConfig, PacketLink};
use runtime::{LinkConfig, Progress, RuntimeConfig, WaitPolicy};

use testkit::{setup, wait_until, Host, TestHost};

/// Generous bound for a frame that must arrive: a liveness bound, not a
/// timing assertion.
const PATIENCE: Duration = Duration::from_secs(10);

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    testkit::pattern::pattern(len, u64::from(seed))
}

fn quiet() -> EdpConfig {
    EdpConfig::default()
}

/// A configuration whose runtime has `link`'s options.
fn with_link(link: LinkConfig) -> EdpConfig {
    EdpConfig {
        runtime: RuntimeConfig {
            link,
            ..RuntimeConfig::default()
        },
        ..EdpConfig::default()
    }
}

fn variants() -> Vec<(&'static str, EdpConfig)> {
    let ring = LinkConfig {
        rx_ring: Some(1 << 20),
        ..LinkConfig::default()
    };
    let plain = LinkConfig {
        rx_ring: None,
        ..LinkConfig::default()
    };
    vec![
        (
            "plain+block",
            EdpConfig {
                wait: WaitPolicy::Block,
                ..with_link(plain)
            },
        ),
        ("rx_ring+adaptive", with_link(ring.clone())),
        (
            "rx_ring+busy_poll",
            EdpConfig {
                wait: WaitPolicy::BusyPoll,
                ..with_link(ring)
            },
        ),
    ]
}

#[test]
fn datagrams_between_two_hosts() {
    let Some(net) = setup("datagrams_between_two_hosts", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let sizes = [0usize, 1, 59, 1000, 1494];
    for (v, (name, cfg)) in variants().into_iter().enumerate() {
        // A port per variant: a process forked by a concurrent test holds a
        // copy of the previous variant's port lease until it execs.
        let port_b = 7000 + v as u16;
        let (ready_tx, ready_rx) = mpsc::channel();
        let (bi, cfg_b) = (b.clone(), cfg.clone());
        let server = b.spawn(move || {
            let mut s = EdpSocket::bind_with((bi.iface.as_str(), port_b), &cfg_b).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = vec![0u8; s.mtu()];
            let mut got = Vec::new();
            for _ in 0..sizes.len() {
                let (n, mac, port) = s.recv_from(&mut buf).unwrap();
                got.push((buf[..n].to_vec(), mac, port));
            }
            let (_, mac, port) = got[0];
            s.connect(mac, port).unwrap();
            s.send(b"pong").unwrap();
            (got, s.stats())
        });
        ready_rx.recv().unwrap();
        let (port_a, stats_a) = a.run(|| {
            let mut s = EdpSocket::bind_with((a.iface.as_str(), 0), &cfg).unwrap();
            assert_eq!(s.mtu(), 1500 - EDP_HEADER_LEN);
            let (iface, mac, port) = s.local_addr().unwrap();
            assert_eq!((iface.as_str(), mac), (a.iface.as_str(), a.mac));
            assert!(port >= runtime::ports::EPHEMERAL_FIRST);
            // larger than mtu(): refused, never truncated
            let e = s
                .send_to(&vec![0u8; s.mtu() + 1], (b.mac, port_b))
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name}: {e}");
            // port 0 is control
            let e = s.send_to(b"x", (b.mac, 0)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            for (i, &n) in sizes.iter().enumerate() {
                assert_eq!(s.send_to(&pattern(n, i as u8), (b.mac, port_b)).unwrap(), n);
            }
            s.connect(b.mac, port_b).unwrap();
            assert_eq!(s.peer_addr().unwrap(), (b.mac, port_b));
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut buf = [0u8; 64];
            let n = s.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"pong", "{name}");
            (port, s.stats())
        });
        let (got, stats_b) = server.join().unwrap();
        for (i, (payload, mac, port)) in got.iter().enumerate() {
            assert_eq!(payload, &pattern(sizes[i], i as u8), "{name}: datagram {i}");
            assert_eq!((*mac, *port), (a.mac, port_a), "{name}");
        }
        assert_eq!(stats_a.sent, sizes.len() as u64, "{name}");
        assert_eq!(stats_a.send_errors, 0);
        assert_eq!(stats_a.received, 1);
        assert_eq!(stats_b.received, sizes.len() as u64, "{name}");
        assert_eq!(stats_b.sent, 1);
        assert_eq!(stats_b.dropped, 0, "{name}");
    }
}

#[test]
fn jumbo_mtu_is_used_whole() {
    let Some(net) = setup("jumbo_mtu_is_used_whole", 2, 9000) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (ready_tx, ready_rx) = mpsc::channel();
    let bi = b.clone();
    let server = b.spawn(move || {
        let mut s = EdpSocket::bind_with((bi.iface.as_str(), 7001), quiet()).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        ready_tx.send(s.mtu()).unwrap();
        let mut buf = vec![0u8; 9000];
        let n = s.recv(&mut buf).err().map(|e| e.kind());
        // not connected: recv refuses
        assert_eq!(n, Some(io::ErrorKind::NotConnected));
        let (n, _, _) = s.recv_from(&mut buf).unwrap();
        buf.truncate(n);
        buf
    });
    assert_eq!(ready_rx.recv().unwrap(), 8994);
    a.run(|| {
        let mut s = EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap();
        assert_eq!(s.mtu(), 8994);
        s.send_to(&pattern(8994, 9), (b.mac, 7001)).unwrap();
    });
    assert_eq!(server.join().unwrap(), pattern(8994, 9));
}

#[test]
fn small_receive_buffer_is_an_error_not_truncation() {
    let Some(net) = setup("small_receive_buffer", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let mut s = b.run(|| EdpSocket::bind_with((b.iface.as_str(), 7002), quiet()).unwrap());
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    a.run(|| {
        let mut t = EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap();
        t.send_to(&[7u8; 100], (b.mac, 7002)).unwrap();
        t.send_to(&[8u8; 10], (b.mac, 7002)).unwrap();
    });
    let mut small = [0u8; 50];
    let e = s.recv_from(&mut small).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert_eq!(s.stats().dropped, 1);
    let (n, _, _) = s.recv_from(&mut small).unwrap();
    assert_eq!(&small[..n], &[8u8; 10]);
}

#[test]
fn malformed_and_foreign_frames_are_counted_as_dropped() {
    let Some(net) = setup("malformed_frames_dropped", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let mut s = b.run(|| EdpSocket::bind_with((b.iface.as_str(), 7003), quiet()).unwrap());
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    a.run(|| {
        let mut raw = PacketLink::new(&a.iface, ETHERTYPE_EDP).unwrap();
        let mut f = [0u8; 60];
        let eth = EthernetRepr {
            dst: b.mac,
            src: a.mac,
            ethertype: ETHERTYPE_EDP,
        };
        // 1. length field claims more than the frame holds
        let n = emit_edp_frame(&mut f, &eth, 5, 7003, b"short").unwrap();
        f[ETH_HEADER_LEN + 4..ETH_HEADER_LEN + 6].copy_from_slice(&1000u16.to_be_bytes());
        raw.send(&f[..n.max(60)]).unwrap();
        // 2. right port, but for another unicast MAC (veth delivers it anyway)
        let other = EthernetRepr {
            dst: MacAddr([0x02, 0, 0, 0, 0x99, 0x99]),
            ..eth
        };
        let n = emit_edp_frame(&mut f, &other, 5, 7003, b"not for b").unwrap();
        raw.send(&f[..n]).unwrap();
        // 3. a good one, last: frames on a veth arrive in order
        let n = emit_edp_frame(&mut f, &eth, 5, 7003, b"good").unwrap();
        raw.send(&f[..n]).unwrap();
    });
    let mut buf = [0u8; 1500];
    let (n, mac, port) = s.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], mac, port), (&b"good"[..], a.mac, 5));
    // The bad length reached the socket (its port); the frame for another
    // MAC was dropped by the runtime before any socket saw it.
    let st = s.stats();
    assert_eq!(st.dropped, 1, "{st:?}");
    assert_eq!(st.received, 1);
    let rs = s.runtime().stats();
    assert_eq!(rs.foreign, 1, "{rs:?}");
}

#[test]
fn connected_socket_sees_only_its_peer() {
    let Some(net) = setup("connected_sees_only_peer", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (mut x, mut y) = a.run(|| {
        (
            EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap(),
            EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap(),
        )
    });
    let px = x.local_addr().unwrap().2;
    let mut s = b.run(|| EdpSocket::bind_with((b.iface.as_str(), 7004), quiet()).unwrap());
    s.connect(a.mac, px).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    for i in 0..10u8 {
        y.send_to(&[0xEE, i], (b.mac, 7004)).unwrap();
        x.send_to(&[0x11, i], (b.mac, 7004)).unwrap();
    }
    let mut buf = [0u8; 16];
    for i in 0..10u8 {
        let n = s.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[0x11, i]);
    }
    // The runtime's kernel filter passes the port; the socket drops the
    // frames of other senders and counts them.
    assert!(
        wait_until(PATIENCE, || s.stats().dropped == 10),
        "{:?}",
        s.stats()
    );
    s.set_nonblocking(true).unwrap();
    assert_eq!(
        s.recv(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

#[test]
fn nonblocking_and_read_timeout() {
    let Some(net) = setup("nonblocking_and_timeout", 2, 1500) else {
        return;
    };
    let b = net.host(1).clone();
    let mut s = b.run(|| EdpSocket::bind_with((b.iface.as_str(), 7005), quiet()).unwrap());
    let mut buf = [0u8; 1500];
    s.set_nonblocking(true).unwrap();
    assert_eq!(
        s.recv_from(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    s.set_nonblocking(false).unwrap();
    assert_eq!(
        s.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    let t = Duration::from_millis(30);
    s.set_read_timeout(Some(t)).unwrap();
    let start = Instant::now();
    let e = s.recv_from(&mut buf).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    // never returns before the timeout
    assert!(start.elapsed() >= t);
}

#[test]
fn mio_reports_a_readable_socket() {
    let Some(net) = setup("mio_readable", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let mut s = b.run(|| EdpSocket::bind_with((b.iface.as_str(), 7006), quiet()).unwrap());
    s.set_nonblocking(true).unwrap();
    use runtime::mio;
    let mut poll = mio::Poll::new().unwrap();
    let mut events = mio::Events::with_capacity(8);
    poll.registry()
        .register(&mut s, mio::Token(3), mio::Interest::READABLE)
        .unwrap();
    a.run(|| {
        let mut t = EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap();
        t.send_to(b"wake", (b.mac, 7006)).unwrap();
    });
    let deadline = Instant::now() + PATIENCE;
    let mut buf = [0u8; 64];
    loop {
        poll.poll(&mut events, Some(Duration::from_millis(100)))
            .unwrap();
        assert!(Instant::now() < deadline, "no event for a sent frame");
        if events
            .iter()
            .any(|e| e.token() == mio::Token(3) && e.is_readable())
        {
            break;
        }
    }
    let (n, mac, _) = s.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], mac), (&b"wake"[..], a.mac));
}

#[test]
fn packet_link_batches_with_and_without_ring() {
    let Some(net) = setup("packet_link_batches", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    for ring in [None, Some(1 << 20)] {
        let mut rx = b.run(|| {
            PacketLink::open(
                &b.iface,
                &PacketConfig {
                    filter: Some(FilterSpec::port(ETHERTYPE_EDP, 7007)),
                    rx_ring: ring,
                    ..PacketConfig::default()
                },
            )
            .unwrap()
        });
        assert_eq!(rx.has_rx_ring(), ring.is_some());
        let count = 150usize;
        let mut tx = a.run(|| PacketLink::new(&a.iface, ETHERTYPE_EDP).unwrap());
        let frames: Vec<Vec<u8>> = (0..count)
            .map(|i| {
                let mut f = vec![0u8; 1514];
                let eth = EthernetRepr {
                    dst: b.mac,
                    src: a.mac,
                    ethertype: ETHERTYPE_EDP,
                };
                // every third frame is for another port: the filter drops it
                let port = if i % 3 == 2 { 7008 } else { 7007 };
                let n = emit_edp_frame(&mut f, &eth, 1, port, &(i as u32).to_be_bytes()).unwrap();
                f.truncate(n);
                f
            })
            .collect();
        // The first half goes out whole (sendmmsg), the second gathered from
        // three pieces each, cut at odd offsets (sendmmsg with iovecs).
        let half = count / 2;
        let refs: Vec<&[u8]> = frames[..half].iter().map(|f| f.as_slice()).collect();
        let mut sent = 0;
        while sent < half {
            sent += tx.send_batch(&refs[sent..]).unwrap();
        }
        let pieces: Vec<[IoSlice<'_>; 3]> = frames[half..]
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let cut = ETH_HEADER_LEN + 1 + 2 * (i % 5);
                [
                    IoSlice::new(&f[..ETH_HEADER_LEN]),
                    IoSlice::new(&f[ETH_HEADER_LEN..cut]),
                    IoSlice::new(&f[cut..]),
                ]
            })
            .collect();
        let gathered: Vec<&[IoSlice<'_>]> = pieces.iter().map(|p| &p[..]).collect();
        while sent < count {
            sent += tx.send_batch_vectored(&gathered[sent - half..]).unwrap();
        }
        // oversized frames are refused, whole or gathered
        assert_eq!(
            tx.send(&vec![0u8; 1515]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let big = [IoSlice::new(&[0u8; 1000]), IoSlice::new(&[0u8; 515])];
        assert_eq!(
            tx.send_batch_vectored(&[&big]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let expect: Vec<u32> = (0..count as u32).filter(|i| i % 3 != 2).collect();
        let mut got = Vec::new();
        let mut store = vec![[0u8; 1514]; 32];
        let mut lens = [0usize; 32];
        let ok = wait_until(PATIENCE, || {
            let mut bufs: Vec<&mut [u8]> = store.iter_mut().map(|b| &mut b[..]).collect();
            match rx.recv_batch(&mut bufs, &mut lens) {
                Ok(n) => {
                    for i in 0..n {
                        let f = &bufs[i][..lens[i]];
                        let p = &f[ETH_HEADER_LEN + EDP_HEADER_LEN..][..4];
                        let id = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
                        assert_eq!(f, &frames[id as usize][..], "frame {id} byte-exact");
                        got.push(id);
                    }
                }
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
            got.len() >= expect.len()
        });
        assert!(ok, "ring={ring:?}: got {} of {}", got.len(), expect.len());
        assert_eq!(got, expect, "ring={ring:?}");
        let ks = rx.kernel_stats().unwrap();
        assert_eq!(ks.drops, 0);
    }
}

// ---- several processes ------------------------------------------------

const ROLE: &str = "EDP_VETH_ROLE";

/// Not a test by itself: the body of child processes started by the tests
/// below (`Host::spawn_test_child`); does nothing without its env.
#[test]
#[ignore = "helper run as a child process by other tests"]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let iface = std::env::var("EDP_IFACE").unwrap();
    let port: u16 = std::env::var("EDP_PORT").unwrap().parse().unwrap();
    let forever = || loop {
        std::thread::sleep(Duration::from_secs(3600));
    };
    match role.as_str() {
        // bind a port and hold it until killed
        "hold" => {
            let _s = EdpSocket::bind_with((iface.as_str(), port), quiet()).unwrap();
            println!("READY");
            forever();
        }
        // be the echo responder that holds the control lease
        "responder" => {
            let s = EdpSocket::bind_with((iface.as_str(), port), EdpConfig::default()).unwrap();
            assert!(wait_until(PATIENCE, || s.runtime().holds_echo_lease()));
            println!("READY");
            forever();
        }
        // receive COUNT datagrams, each tagged with this port
        "recv" => {
            let count: usize = std::env::var("EDP_COUNT").unwrap().parse().unwrap();
            let mut s = EdpSocket::bind_with((iface.as_str(), port), quiet()).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            println!("READY");
            let mut buf = [0u8; 1500];
            let mut foreign = 0;
            for _ in 0..count {
                let (n, _, _) = s.recv_from(&mut buf).unwrap();
                if buf[..n] != port.to_be_bytes() {
                    foreign += 1;
                }
            }
            let st = s.stats();
            println!(
                "DONE received={} dropped={} foreign={foreign}",
                st.received, st.dropped
            );
        }
        r => panic!("unknown role {r}"),
    }
}

fn env(role: &str, host: &Host, port: u16) -> Vec<(&'static str, String)> {
    vec![
        (ROLE, role.to_string()),
        ("EDP_IFACE", host.iface.clone()),
        ("EDP_PORT", port.to_string()),
    ]
}

#[test]
fn processes_on_one_host_see_only_their_own_frames() {
    let Some(net) = setup("processes_own_frames", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let count = 200;
    let mut children: Vec<_> = [7100u16, 7101]
        .iter()
        .map(|&p| {
            let mut e = env("recv", &b, p);
            e.push(("EDP_COUNT", count.to_string()));
            (p, b.spawn_test_child("child_role", &e))
        })
        .collect();
    for (_, c) in children.iter_mut() {
        c.expect_line("READY");
    }
    a.run(|| {
        let mut s = EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap();
        for _ in 0..count {
            for p in [7100u16, 7101, 7102] {
                s.send_to(&p.to_be_bytes(), (b.mac, p)).unwrap();
            }
        }
    });
    for (p, c) in children.iter_mut() {
        let line = c.expect_line("DONE");
        assert_eq!(
            line,
            format!("received={count} dropped=0 foreign=0"),
            "process on port {p}"
        );
        c.wait_success();
    }
}

#[test]
fn ports_are_exclusive_across_processes_and_freed_by_a_crash() {
    let Some(net) = setup("ports_exclusive", 2, 1500) else {
        return;
    };
    let b = net.host(1).clone();
    b.run(|| {
        let _s = EdpSocket::bind_with((b.iface.as_str(), 7200), quiet()).unwrap();
        let e = EdpSocket::bind_with((b.iface.as_str(), 7200), quiet()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    });
    let mut child = b.spawn_test_child("child_role", &env("hold", &b, 7201));
    child.expect_line("READY");
    b.run(|| {
        let e = EdpSocket::bind_with((b.iface.as_str(), 7201), quiet()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        assert!(e.to_string().contains("7201"), "{e}");
    });
    child.kill(); // SIGKILL: no destructor runs in the child
    b.run(|| {
        let s = EdpSocket::bind_with((b.iface.as_str(), 7201), quiet()).unwrap();
        assert_eq!(s.local_addr().unwrap().2, 7201);
    });
}

#[test]
fn ping_measures_rtt_and_detects_a_dead_host() {
    let Some(net) = setup("ping_and_dead_host", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    // Any EDP socket on b runs the echo responder.
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let bi = b.clone();
    let server = b.spawn(move || {
        let s = EdpSocket::bind((bi.iface.as_str(), 7300)).unwrap();
        let rt = s.runtime().clone();
        ready_tx
            .send(wait_until(PATIENCE, || rt.holds_echo_lease()))
            .unwrap();
        stop_rx.recv().unwrap();
        let replies = rt.stats().responder.echo_replies;
        drop(s);
        replies
    });
    assert!(
        ready_rx.recv().unwrap(),
        "responder never took the control port"
    );
    a.run(|| {
        let rtt = ping(&a.iface, b.mac, PATIENCE).unwrap();
        assert!(rtt > Duration::ZERO && rtt < PATIENCE);
        let mut p = echo::Pinger::new(&a.iface).unwrap();
        for _ in 0..5 {
            p.ping(b.mac, PATIENCE).unwrap();
        }
        // A MAC nobody has: TimedOut after (not before) the timeout.
        let t = Duration::from_millis(200);
        let start = Instant::now();
        let e = ping(&a.iface, MacAddr([0x02, 0xde, 0xad, 0, 0, 1]), t).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        let took = start.elapsed();
        assert!(took >= t, "{took:?}");
        // "about" its timeout: generous slack for a loaded machine
        assert!(took < t + Duration::from_secs(5), "{took:?}");
        assert!(e.to_string().contains("02:de:ad:00:00:01"), "{e}");
        // the interface that reaches b is found; lo does not reach it
        let (found, _) = echo::find_interface(b.mac, &["lo", &a.iface], PATIENCE).unwrap();
        assert_eq!(found, a.iface);
        let e =
            echo::find_interface(MacAddr([0x02, 0xde, 0xad, 0, 0, 2]), &[&a.iface], t).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        // group addresses are never pinged
        assert_eq!(
            ping(&a.iface, MacAddr::BROADCAST, t).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    });
    stop_tx.send(()).unwrap();
    assert!(server.join().unwrap() >= 7);
}

#[test]
fn another_process_takes_over_the_echo_responder_after_a_crash() {
    let Some(net) = setup("responder_takeover", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let mut child = b.spawn_test_child("child_role", &env("responder", &b, 7400));
    child.expect_line("READY");
    // This process's responder on b starts second: it must not hold the lease.
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (st_tx, st_rx) = mpsc::channel();
    let bi = b.clone();
    let local = b.spawn(move || {
        let s = EdpSocket::bind((bi.iface.as_str(), 7401)).unwrap();
        let rt = s.runtime().clone();
        st_tx.send(rt.holds_echo_lease()).unwrap();
        let took = wait_until(PATIENCE, || rt.holds_echo_lease());
        st_tx.send(took).unwrap();
        stop_rx.recv().unwrap();
    });
    assert!(
        !st_rx.recv().unwrap(),
        "two responders hold the control port"
    );
    a.run(|| ping(&a.iface, b.mac, PATIENCE).unwrap());
    child.kill();
    assert!(st_rx.recv().unwrap(), "no responder took over");
    a.run(|| ping(&a.iface, b.mac, PATIENCE).unwrap());
    stop_tx.send(()).unwrap();
    local.join().unwrap();
}

#[test]
fn without_cap_net_raw_the_error_names_setcap() {
    if !testkit::is_root() {
        testkit::skip(
            "without_cap_net_raw_the_error_names_setcap",
            "needs root to show the loss of CAP_NET_RAW",
        );
        return;
    }
    // Capabilities are per thread: drop them on a scratch thread only.
    std::thread::spawn(|| {
        link::drop_capabilities().unwrap();
        let e = PacketLink::new("lo", ETHERTYPE_EDP).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let s = e.to_string();
        assert!(s.contains("CAP_NET_RAW"), "{s}");
        let exe = std::env::current_exe().unwrap();
        assert!(
            s.contains(&format!("setcap cap_net_raw+ep {}", exe.display())),
            "{s}"
        );
        let e = EdpSocket::bind(("lo", 0)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    })
    .join()
    .unwrap();
    // This thread still can.
    PacketLink::new("lo", ETHERTYPE_EDP).unwrap();
}

#[test]
fn unknown_interface_is_named() {
    let e = EdpSocket::bind(("nosuch-if9", 0)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("nosuch-if9"), "{e}");
}

#[test]
fn wrapped_link_delays_are_released_while_waiting() {
    let Some(net) = setup("wrapped_link_delays", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (ready_tx, ready_rx) = mpsc::channel();
    let bi = b.clone();
    let echo_server = b.spawn(move || {
        let mut s = EdpSocket::bind_with((bi.iface.as_str(), 7500), quiet()).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 1500];
        for _ in 0..3 {
            let (n, mac, port) = s.recv_from(&mut buf).unwrap();
            s.send_to(&buf[..n], (mac, port)).unwrap();
        }
    });
    ready_rx.recv().unwrap();
    a.run(|| {
        // Every frame a sends is held 2 ms by the fault wrapper; it is only
        // released by later link calls, here the blocking recv's waits,
        // which must wake at the wrapper's poll_at().
        let faults = FaultConfig::seeded(7).with_delay(Duration::from_millis(2), Duration::ZERO);
        let cfg = with_link(LinkConfig::default().with_fault(faults));
        let mut s = EdpSocket::bind_with((a.iface.as_str(), 0), &cfg).unwrap();
        s.connect(b.mac, 7500).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut buf = [0u8; 64];
        for i in 0..3u8 {
            s.send(&[i; 10]).unwrap();
            let n = s.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 10]);
        }
        let st = s.stats();
        assert_eq!((st.sent, st.received, st.dropped), (3, 3, 0));
    });
    echo_server.join().unwrap();
}

#[test]
fn frames_the_kernel_drops_are_counted() {
    let Some(net) = setup("kernel_drops_counted", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    // A tiny kernel receive buffer that nobody reads while the frames
    // arrive (no idle progress: only callers read the link).
    let small = EdpConfig {
        runtime: RuntimeConfig {
            link: LinkConfig {
                socket_buffer: 4096,
                rx_ring: None,
                ..LinkConfig::default()
            },
            progress: Progress::Callers,
        },
        ..quiet()
    };
    let mut s = b.run(|| EdpSocket::bind_with((b.iface.as_str(), 7700), &small).unwrap());
    let count = 300u64;
    a.run(|| {
        let mut t = EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap();
        for i in 0..count {
            t.send_to(&i.to_be_bytes(), (b.mac, 7700)).unwrap();
        }
    });
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let mut last: Option<u64> = None;
    // Read until every frame is accounted for (delivery may lag behind the
    // sender's last call when softirqs are deferred).
    let give_up = Instant::now() + PATIENCE;
    loop {
        match s.recv_from(&mut buf) {
            Ok((8, _, _)) => {
                let v = u64::from_be_bytes(buf[..8].try_into().unwrap());
                if let Some(l) = last {
                    assert!(v > l, "out of order: {v} after {l}");
                }
                last = Some(v);
            }
            Ok((n, _, _)) => panic!("unexpected {n}-byte datagram"),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let st = s.stats();
                if st.received + st.kernel_drops >= count {
                    break;
                }
                assert!(Instant::now() < give_up, "frames unaccounted for: {st:?}");
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    let st = s.stats();
    assert!(st.kernel_drops > 0, "{st:?}");
    // Every frame was either delivered or counted: none lost silently.
    assert_eq!(st.received + st.kernel_drops, count, "{st:?}");
}

#[test]
fn rx_ring_wraps_around_many_times() {
    let Some(net) = setup("rx_ring_wraps", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    // A small ring (about 160 frame slots) and 10 times as many frames,
    // sent in bursts that fit, each burst read before the next.
    let cfg = with_link(LinkConfig {
        rx_ring: Some(256 << 10),
        ..LinkConfig::default()
    });
    let mut r = b.run(|| EdpSocket::bind_with((b.iface.as_str(), 7800), &cfg).unwrap());
    r.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut t = a.run(|| EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap());
    t.connect(b.mac, 7800).unwrap();
    let mut buf = [0u8; 1500];
    let mut next = 0u32;
    for _burst in 0..16 {
        for k in 0..100u32 {
            let v = next + k;
            let len = 4 + (v as usize * 7) % 1400;
            let mut d = pattern(len, v as u8);
            d[..4].copy_from_slice(&v.to_be_bytes());
            t.send(&d).unwrap();
        }
        for k in 0..100u32 {
            let v = next + k;
            let (n, _, _) = r.recv_from(&mut buf).unwrap();
            let len = 4 + (v as usize * 7) % 1400;
            let mut d = pattern(len, v as u8);
            d[..4].copy_from_slice(&v.to_be_bytes());
            assert_eq!(&buf[..n], &d[..], "datagram {v}");
        }
        next += 100;
    }
    let st = r.stats();
    assert_eq!((st.received, st.dropped, st.kernel_drops), (1600, 0, 0));
}

#[test]
fn broadcast_reaches_every_host_on_a_bridge() {
    let Some(net) = setup("broadcast_on_bridge", 3, 1500) else {
        return;
    };
    let hosts: Vec<Host> = net.hosts().to_vec();
    let mut receivers: Vec<EdpSocket> = hosts[1..]
        .iter()
        .map(|h| {
            h.run(|| {
                let mut s = EdpSocket::bind_with((h.iface.as_str(), 7950), quiet()).unwrap();
                s.set_read_timeout(Some(PATIENCE)).unwrap();
                s
            })
        })
        .collect();
    let h0 = &hosts[0];
    h0.run(|| {
        let mut s = EdpSocket::bind_with((h0.iface.as_str(), 0), quiet()).unwrap();
        s.send_to(b"to all", (MacAddr::BROADCAST, 7950)).unwrap();
        // unicast to host 2 only
        s.send_to(b"to h2", (hosts[2].mac, 7950)).unwrap();
    });
    let mut buf = [0u8; 64];
    for (i, r) in receivers.iter_mut().enumerate() {
        let (n, mac, _) = r.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], mac), (&b"to all"[..], h0.mac), "host {}", i + 1);
    }
    let (n, _, _) = receivers[1].recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"to h2");
    // The bridge learned host 2's MAC: host 1 never sees that frame, or
    // (before learning) drops it as not addressed to it.
    receivers[0].set_nonblocking(true).unwrap();
    assert_eq!(
        receivers[0].recv_from(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

#[test]
fn a_thousand_sockets_in_one_process_share_one_packet_socket() {
    let Some(net) = setup("thousand_sockets", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    const N: u16 = 1000;
    const BASE: u16 = 20000;
    let mut socks: Vec<EdpSocket> = b.run(|| {
        (0..N)
            .map(|i| EdpSocket::bind_with((b.iface.as_str(), BASE + i), quiet()).unwrap())
            .collect()
    });
    // All of them live in one runtime: one packet socket for the process.
    assert!(socks.iter().all(|s| s.runtime().same(socks[0].runtime())));
    a.run(|| {
        let mut t = EdpSocket::bind_with((a.iface.as_str(), 0), quiet()).unwrap();
        for i in 0..N {
            let port = BASE + i;
            t.send_to(&port.to_be_bytes(), (b.mac, port)).unwrap();
        }
    });
    let mut buf = [0u8; 64];
    for (i, s) in socks.iter_mut().enumerate() {
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let (n, mac, _) = s.recv_from(&mut buf).unwrap();
        let port = BASE + i as u16;
        assert_eq!(
            (&buf[..n], mac),
            (&port.to_be_bytes()[..], a.mac),
            "socket {i}"
        );
    }
    let rs = socks[0].runtime().stats();
    assert_eq!((rs.unclaimed, rs.malformed), (0, 0), "{rs:?}");
    // Closing them all empties the table: the port is free again.
    drop(socks);
    b.run(|| EdpSocket::bind_with((b.iface.as_str(), BASE), quiet()).unwrap());
}
