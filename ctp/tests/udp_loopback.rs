//! L2: CTP over real UDP sockets on loopback: in one process, and between
//! two processes (this test binary re-run as the echo child).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctp::{CtpConfig, CtpSocket, Delivery, ErrorType, Options, UdpTransport};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));
const QUIT: u16 = 999;

fn bind() -> CtpSocket<UdpTransport> {
    CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default()).expect("bind UDP on loopback")
}

/// A socket that progresses while no thread waits on it (the default
/// `Progress::WhenIdle`: the spec's server thread), for tests where one
/// thread waits on another socket of the same process.
fn bind_served() -> CtpSocket<UdpTransport> {
    bind()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn data(d: Delivery<SocketAddr>) -> ctp::ReceivedData<SocketAddr> {
    match d {
        Delivery::Data(d) => d,
        Delivery::Error(e) => panic!("unexpected error delivery: {e}"),
    }
}

#[test]
fn send_receive_sizes_in_one_process() {
    let a = bind_served();
    let b = bind_served();
    let pa = a.local_addr().unwrap();
    let pb = b.local_addr().unwrap();
    for (i, len) in [0usize, 1, 64, 65400, 65401, 200_000, 10 << 20]
        .into_iter()
        .enumerate()
    {
        let msg = pattern(i as u8, len);
        a.send(10 + i as u16, pb, &msg, Options::NONE).unwrap();
        let d = data(b.recv_delivery(WAIT).unwrap());
        assert_eq!((d.command, d.from, d.size), (10 + i as u16, pa, len as u64));
        assert!(d.data == msg, "{len}-byte message differs");
        assert!(a.flush(WAIT).unwrap(), "sender storage empties");
    }
    assert_eq!(a.status().awaiting_confirmation, 0);
    assert_eq!(b.status().large_in_progress, 0);
    assert_eq!(a.status().sessions, 1);
    let s = b.stats();
    assert_eq!(s.messages_delivered, 7);
    assert!(s.confirmations_sent >= s.data_packets_received - s.duplicates_received);
    // the peer's timeout adapted from the 100 ms default
    assert!(a.with_endpoint(|e| e.peer_srtt(pb)).is_some());
}

#[test]
fn ping_and_unreachable_peer() {
    // The spec's rule: "not confirmed" at the deadline (no user timeout).
    let mut cfg = CtpConfig::default();
    cfg.protocol.user_timeout = None;
    let a = CtpSocket::bind_udp("127.0.0.1:0", cfg).expect("bind UDP on loopback");
    let b = bind_served();
    let pb = b.local_addr().unwrap();
    let m = a.ping(1, pb).unwrap();
    assert!(a.wait_confirmed(m, WAIT).unwrap());
    b.recv_delivery(WAIT).unwrap();
    // A closed port: nobody confirms. Short fixed timeout: 511 x 200 us.
    let dead: SocketAddr = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    a.set_peer_timeout(dead, Duration::from_micros(200));
    let m = a
        .send(2, dead, b"hello?", Options::DEL_AFTER_ERROR)
        .unwrap();
    match a.recv_delivery(WAIT).unwrap() {
        Delivery::Error(e) => {
            assert_eq!(e.kind, ErrorType::NotConfirmed);
            assert_eq!((e.msg, e.peer, e.command), (Some(m), Some(dead), Some(2)));
        }
        d => panic!("{d:?}"),
    }
    assert_eq!(a.status().awaiting_confirmation, 0);
}

#[test]
fn subscribers_run_on_deliverers_and_reply() {
    let server = bind();
    let client = bind_served();
    let ps = server.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let s2 = served.clone();
    // command 5: echo back as command 6, from a deliverer thread
    server.subscribe(5, move |sock, d| {
        let d = data(d);
        s2.fetch_add(1, Ordering::SeqCst);
        sock.send(6, d.from, &d.data, Options::NONE).unwrap();
    });
    let defaults = Arc::new(Mutex::new(Vec::new()));
    let d2 = defaults.clone();
    server.set_default_handler(move |_, d| d2.lock().unwrap().push(data(d).command));
    for i in 0..50u8 {
        client.send(5, ps, &[i; 100], Options::NONE).unwrap();
    }
    client
        .send(7, ps, b"to the default receiver", Options::NONE)
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 50 {
        let d = data(client.recv_delivery(WAIT).unwrap());
        assert_eq!(d.command, 6);
        got.push(d.data[0]);
    }
    got.sort();
    assert_eq!(got, (0..50).collect::<Vec<u8>>());
    assert_eq!(served.load(Ordering::SeqCst), 50);
    assert!(client.flush(WAIT).unwrap());
    for _ in 0..3000 {
        if !defaults.lock().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(*defaults.lock().unwrap(), vec![7]);
    let st = server.status();
    assert!(st.deliverers >= 1 && st.deliverers <= 50, "{st:?}");
}

/// The echo child: binds, prints its address, echoes every command back
/// until QUIT. Does nothing unless run by `two_processes_over_udp`.
#[test]
fn udp_echo_child() {
    if std::env::var_os("CTP_UDP_ECHO_CHILD").is_none() {
        return;
    }
    let s = bind();
    println!("ADDR {}", s.local_addr().unwrap());
    loop {
        let d = data(s.recv_delivery(Some(Duration::from_secs(60))).unwrap());
        if d.command == QUIT {
            break;
        }
        s.send_vec(d.command, d.from, d.data, Options::NONE)
            .unwrap();
    }
    s.flush(Some(Duration::from_secs(10))).unwrap();
    println!("CHILD DONE");
}

#[test]
fn two_processes_over_udp() {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "udp_echo_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CTP_UDP_ECHO_CHILD", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let peer: SocketAddr = loop {
        let l = lines.next().expect("child exited early").unwrap();
        // libtest prints "test udp_echo_child ... " before the child's output
        if let Some(pos) = l.find("ADDR ") {
            break l[pos + 5..].trim().parse().unwrap();
        }
    };
    let me = bind();
    let sizes = [1usize, 25, 1000, 65400, 65401, 3 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        let msg = pattern(100 + i as u8, len);
        me.send(i as u16, peer, &msg, Options::NONE).unwrap();
        let d = data(me.recv_delivery(WAIT).unwrap());
        assert_eq!((d.command, d.from), (i as u16, peer));
        assert!(d.data == msg, "echo of {len} bytes differs");
    }
    me.send(QUIT, peer, b"", Options::NONE).unwrap();
    assert!(me.flush(WAIT).unwrap());
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
    assert!(lines.any(|l| l.unwrap().contains("CHILD DONE")));
}

/// A sender faster than confirmations: `send` waits for room in a 1 MiB
/// storage instead of growing without bound; everything arrives once.
#[test]
fn send_blocks_on_full_storage() {
    let cfg = CtpConfig {
        protocol: ctp::Config {
            max_stored_bytes: 1 << 20,
            ..ctp::Config::default()
        },
        ..CtpConfig::default()
    };
    let a = CtpSocket::bind_udp("127.0.0.1:0", cfg).unwrap();
    let b = bind_served();
    let pb = b.local_addr().unwrap();
    let n = 400u32;
    let recv = std::thread::spawn(move || {
        let mut seen = vec![0u8; n as usize];
        for _ in 0..n {
            let d = data(b.recv_delivery(WAIT).unwrap());
            let i = u32::from_le_bytes(d.data[..4].try_into().unwrap());
            assert_eq!(d.data.len(), 100_000);
            seen[i as usize] += 1;
        }
        seen
    });
    for i in 0..n {
        let mut m = pattern(i as u8, 100_000);
        m[..4].copy_from_slice(&i.to_le_bytes());
        a.send_vec(3, pb, m, Options::NONE).unwrap();
        assert!(a.with_endpoint(|e| e.stored_bytes()) <= 1 << 20);
    }
    assert!(a.flush(WAIT).unwrap());
    let seen = recv.join().unwrap();
    assert!(seen.iter().all(|&c| c == 1));
}

/// `poll` waits (it is not a spin): an idle socket's poll of 50 ms returns
/// no sooner than the deadline, and the server thread sleeps between events.
#[test]
fn poll_waits_for_its_timeout_when_idle() {
    let s = bind();
    let t = std::time::Instant::now();
    s.poll(Duration::from_millis(50)).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(50),
        "{:?}",
        t.elapsed()
    );
}

/// Soak: exactly-once delivery over real UDP on loopback, busy-poll
/// ping-pong with up to 4 commands outstanding. Both directions use a fixed
/// 20 us timeout, below the loopback round trip on a loaded host, so spurious
/// resends (and with them duplicate packets at both receivers) happen all
/// the time: each command and each echo must still be delivered exactly once
/// and byte-exact, and nothing may arrive after the last echo. Sizes 8 B to
/// 2 KiB, every 500th a 2-packet 70 000-byte command. `CTP_SOAK_COUNT` sets
/// the number of commands (default 20 000).
#[test]
fn soak_exactly_once_busy_poll_ping_pong() {
    let n: u64 = std::env::var("CTP_SOAK_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let cfg = CtpConfig {
        wait: runtime::WaitPolicy::BusyPoll,
        ..CtpConfig::default()
    };
    let a = CtpSocket::bind_udp("127.0.0.1:0", cfg.clone()).unwrap();
    let b = CtpSocket::bind_udp("127.0.0.1:0", cfg).unwrap();
    let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let timeout = Duration::from_micros(20);
    a.set_peer_timeout(pb, timeout);
    b.set_peer_timeout(pa, timeout);
    let len_of = |i: u64| {
        if i % 500 == 499 {
            70_000
        } else {
            8 + (i.wrapping_mul(0x9E37_79B9) % 2041) as usize
        }
    };
    let msg = move |i: u64| {
        let mut m = pattern(i as u8, len_of(i));
        m[..8].copy_from_slice(&i.to_le_bytes());
        m
    };
    // B: echo every command back as command 2 until QUIT, checking that
    // each arrives once
    let echo = std::thread::spawn(move || {
        let mut seen = vec![false; n as usize];
        loop {
            let d = match b.recv_delivery(WAIT).unwrap() {
                Delivery::Data(d) => d,
                // a NotConfirmed error (a 1 s stall of this loaded host): the
                // echo stays stored and is resent, still exactly once
                Delivery::Error(e) if e.kind == ErrorType::NotConfirmed => continue,
                Delivery::Error(e) => panic!("B: {e}"),
            };
            if d.command == QUIT {
                break;
            }
            let i = u64::from_le_bytes(d.data[..8].try_into().unwrap());
            assert!(!seen[i as usize], "B: command {i} delivered twice");
            seen[i as usize] = true;
            assert!(d.data == msg(i), "B: command {i} bytes differ");
            b.send_vec(2, d.from, d.data, Options::NONE).unwrap();
        }
        assert!(b.flush(WAIT).unwrap());
        assert!(seen.iter().all(|&s| s), "B: every command arrived");
        (b.stats(), seen.len())
    });
    let mut seen = vec![false; n as usize];
    let (mut next, mut done, mut errors) = (0u64, 0u64, 0u64);
    while done < n {
        while next < n && next - done < 4 {
            a.send_vec(1, pb, msg(next), Options::NONE).unwrap();
            next += 1;
        }
        let d = match a.recv_delivery(WAIT).unwrap() {
            Delivery::Data(d) => d,
            Delivery::Error(e) if e.kind == ErrorType::NotConfirmed => {
                errors += 1;
                continue;
            }
            Delivery::Error(e) => panic!("A: {e}"),
        };
        assert_eq!((d.command, d.from), (2, pb));
        let i = u64::from_le_bytes(d.data[..8].try_into().unwrap());
        assert!(!seen[i as usize], "A: echo {i} delivered twice");
        seen[i as usize] = true;
        assert!(d.data == msg(i), "A: echo {i} bytes differ");
        done += 1;
    }
    a.send(QUIT, pb, b"", Options::NONE).unwrap();
    assert!(a.flush(WAIT).unwrap());
    let (sb, b_seen) = echo.join().unwrap();
    assert_eq!(b_seen as u64, n);
    // late copies still in flight must not produce a second delivery
    match a.recv_delivery(Some(Duration::from_millis(200))) {
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
        other => panic!("A: unexpected delivery after the last echo: {other:?}"),
    }
    let sa = a.stats();
    eprintln!("soak {n}: A {sa:?}\n B {sb:?}\n A NotConfirmed errors: {errors}");
    assert_eq!(sa.messages_delivered, n);
    assert_eq!(sb.messages_delivered, n + 1);
    assert!(
        sa.duplicates_received + sb.duplicates_received > 0,
        "the short timeout produced duplicate packets to filter"
    );
}

/// A `CtpSocket` is a `mio::event::Source` whose readiness is its delivery
/// queue: a delivery queued before registration is reported at once.
#[test]
fn mio_readiness_is_the_delivery_queue() {
    use runtime::mio::{Events, Interest, Poll, Token};
    let mut a = bind_served();
    let b = bind_served();
    let pa = a.local_addr().unwrap();
    let id = b.send(3, pa, b"for mio", Options::NONE).unwrap();
    assert!(b.wait_confirmed(id, WAIT).unwrap(), "not confirmed");
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut a, Token(9), Interest::READABLE)
        .unwrap();
    let mut events = Events::with_capacity(4);
    let until = std::time::Instant::now() + WAIT.unwrap();
    let mut seen = false;
    while !seen && std::time::Instant::now() < until {
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        seen = events.iter().any(|e| e.token() == Token(9));
    }
    assert!(seen, "a queued delivery was not reported");
    let d = data(a.try_recv_delivery().expect("delivery queued"));
    assert_eq!((d.command, &d.data[..]), (3, &b"for mio"[..]));
    assert!(a.try_recv_delivery().is_none());
}

/// Regression: a receiver confirmed only inside calls into its
/// socket, so one that computed for a second after taking a delivery made
/// the sender report "not confirmed" for messages that had arrived. Now
/// the runtime's service thread (the spec's "server thread", which always
/// runs) confirms while the receiver computes: the sender sees every
/// message confirmed long before the receiver calls again.
#[test]
fn receiver_computing_between_calls_still_confirms() {
    let a = bind();
    let b = bind();
    let pb = b.local_addr().unwrap();
    a.send(1, pb, b"first", Options::NONE).unwrap();
    assert_eq!(data(b.recv_delivery(WAIT).unwrap()).data, b"first");
    // b now "computes" for 5 s: no call into b until then.
    let computing = std::time::Instant::now();
    let ids: Vec<_> = (0..20u8)
        .map(|i| a.send(2, pb, &pattern(i, 3000), Options::NONE).unwrap())
        .collect();
    for id in ids {
        assert!(
            a.wait_confirmed(id, Some(Duration::from_secs(4))).unwrap(),
            "not confirmed while the receiver computes"
        );
    }
    let confirmed_after = computing.elapsed();
    std::thread::sleep(Duration::from_secs(5).saturating_sub(confirmed_after));
    for i in 0..20u8 {
        assert_eq!(data(b.recv_delivery(WAIT).unwrap()).data, pattern(i, 3000));
    }
    assert_eq!(a.stats().not_confirmed_errors, 0);
}

/// The effective and permitted capability masks of the calling thread.
fn thread_caps() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
    };
    (field("CapEff:"), field("CapPrm:"))
}

/// Regression: capabilities belong to threads, and a thread started
/// before the program dropped its capabilities kept them (the ESP alarm
/// thread then; CTP's deliverers, started by whichever thread drives the
/// socket, now). Deliverers drop theirs when they start: a handler never
/// runs with CAP_NET_RAW, even on a deliverer the privileged main thread
/// started before its drop. Needs a thread with capabilities (root);
/// otherwise it checks only that handlers run without them.
#[test]
fn handlers_run_without_capabilities_after_the_program_drops_them() {
    let started_privileged = thread_caps().0 != 0;
    let a = bind();
    let mut cfg = CtpConfig::default();
    // This thread drives b (and so starts its deliverer) while privileged.
    cfg.runtime.progress = runtime::Progress::Callers;
    let b = CtpSocket::bind_udp("127.0.0.1:0", cfg).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    b.subscribe(5, move |_, _| s.lock().unwrap().push(thread_caps()));
    let pb = b.local_addr().unwrap();
    let deliver = |n: usize| {
        a.send(5, pb, b"x", Options::NONE).unwrap();
        while seen.lock().unwrap().len() < n {
            b.poll(Duration::from_millis(20)).unwrap();
        }
    };
    deliver(1);
    link::drop_capabilities().unwrap();
    assert_eq!(thread_caps(), (0, 0));
    deliver(2);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![(0, 0), (0, 0)],
        "privileged: {started_privileged}"
    );
}
