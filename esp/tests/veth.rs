//! ESP on real links: AF_PACKET sockets between network namespaces joined by
//! veth pairs (the `vcluster` harness, through `testkit`). Needs root;
//! without it (or without `ip netns`) each test prints why and returns,
//! except under CI=true where it fails.

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::sync::mpsc;
use std::time::Duration;

use esp::{EspConfig, EspListener, EspStream, FaultConfig};
use runtime::WaitPolicy;
use testkit::pattern::{check, fill, Digest};
use testkit::setup;

/// Generous liveness bound (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);

/// Writes `len` pattern bytes, shuts down writing, reads the peer's 16-byte
/// report (length, hash).
fn send_and_report(s: &mut EspStream, len: usize, seed: u64) -> (u64, u64, u64) {
    let mut chunk = vec![0u8; 256 * 1024];
    let mut sent = 0usize;
    let mut h = Digest::new();
    while sent < len {
        let n = (len - sent).min(chunk.len());
        fill(&mut chunk[..n], sent as u64, seed);
        h.update(&chunk[..n]);
        s.write_all(&chunk[..n]).expect("write");
        sent += n;
    }
    s.shutdown(Shutdown::Write).unwrap();
    let mut report = [0u8; 16];
    s.read_exact(&mut report).expect("report");
    let (got_len, got_hash) = Digest::parse_report(&report);
    (h.hash(), got_len, got_hash)
}

/// Reads to EOF, checks every byte against the pattern, answers (len, hash).
fn receive_and_report(s: &mut EspStream, seed: u64) -> u64 {
    let mut buf = vec![0u8; 256 * 1024];
    let mut h = Digest::new();
    loop {
        let n = s.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        if let Err(e) = check(&buf[..n], h.len(), seed) {
            panic!("{e}");
        }
        h.update(&buf[..n]);
    }
    s.write_all(&h.report()).unwrap();
    h.len()
}

fn bulk(test: &str, len: usize, cfg: EspConfig) {
    let Some(net) = setup(test, 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let (tx, rx) = mpsc::channel();
    let (bi, cfg_b) = (b.clone(), cfg.clone());
    let server = b.spawn(move || {
        let l = EspListener::bind_with(&bi.iface, 7000, cfg_b).unwrap();
        tx.send(()).unwrap();
        let (mut s, _peer) = l.accept_timeout(Some(PATIENCE)).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let total = receive_and_report(&mut s, 42);
        let st = s.stats();
        (total, st)
    });
    rx.recv().unwrap();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let (h, got_len, got_hash, st) = a.run(move || {
        let mut s = EspStream::connect_timeout_with(&ai, bmac, 7000, cfg, PATIENCE).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.set_write_timeout(Some(PATIENCE)).unwrap();
        let (h, l, gh) = send_and_report(&mut s, len, 42);
        (h, l, gh, s.stats())
    });
    let (total, st_b) = server.join().unwrap();
    eprintln!("{test}: sender {st:?}\nreceiver {st_b:?}");
    assert_eq!(got_len, len as u64);
    assert_eq!(total, len as u64);
    assert_eq!(got_hash, h, "hash of the received stream differs");
}

#[test]
fn stream_100mb_byte_exact() {
    bulk("esp_100mb", 100 << 20, EspConfig::default());
}

#[test]
fn stream_100mb_byte_exact_with_1_percent_loss() {
    let cfg = EspConfig::default().with_fault(FaultConfig::seeded(7).with_loss(0.01));
    bulk("esp_100mb_loss", 100 << 20, cfg);
}

#[test]
fn connect_to_a_closed_port_is_refused() {
    let Some(net) = setup("esp_refused", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    // Host B runs the RST responder as soon as any ESP socket exists there.
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let bi = b.clone();
    let keeper = b.spawn(move || {
        let _l = EspListener::bind((bi.iface.as_str(), 7100)).unwrap();
        tx.send(()).unwrap();
        let _ = done_rx.recv_timeout(PATIENCE);
    });
    rx.recv().unwrap();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    let err = a.run(move || {
        // The responder may take up to its lease retry to become the holder.
        let mut last = None;
        for _ in 0..20 {
            match EspStream::connect_timeout_with(
                &ai,
                bmac,
                7199,
                EspConfig::default(),
                Duration::from_secs(3),
            ) {
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => return e,
                Err(e) => last = Some(e),
                Ok(_) => panic!("connected to a port nobody listens on"),
            }
        }
        panic!("never refused: {last:?}");
    });
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    done_tx.send(()).unwrap();
    keeper.join().unwrap();
}

#[test]
fn sixty_four_concurrent_connections() {
    let Some(net) = setup("esp_64conn", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    const N: usize = 64;
    const LEN: usize = 256 * 1024;
    let (tx, rx) = mpsc::channel();
    let bi = b.clone();
    let server = b.spawn(move || {
        let l = EspListener::bind((bi.iface.as_str(), 7200)).unwrap();
        tx.send(()).unwrap();
        let mut workers = Vec::new();
        for _ in 0..N {
            let (mut s, _) = l.accept_timeout(Some(PATIENCE)).unwrap();
            workers.push(std::thread::spawn(move || {
                s.set_read_timeout(Some(PATIENCE)).unwrap();
                // Echo until EOF.
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    s.write_all(&buf[..n]).unwrap();
                }
                s.shutdown(Shutdown::Write).unwrap();
            }));
        }
        for w in workers {
            w.join().unwrap();
        }
    });
    rx.recv().unwrap();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    a.run(move || {
        let clients: Vec<_> = (0..N)
            .map(|i| {
                let ai = ai.clone();
                std::thread::spawn(move || {
                    let mut s = EspStream::connect_timeout_with(
                        &ai,
                        bmac,
                        7200,
                        EspConfig::default(),
                        PATIENCE,
                    )
                    .unwrap();
                    s.set_read_timeout(Some(PATIENCE)).unwrap();
                    let mut data = vec![0u8; LEN];
                    fill(&mut data, 0, i as u64);
                    // Write and read concurrently, nonblocking: while this
                    // thread sleeps the runtime's service thread keeps both
                    // directions moving (the echo would otherwise fill both
                    // windows).
                    let mut back = Vec::with_capacity(LEN);
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut sent = 0;
                    s.set_nonblocking(true).unwrap();
                    while back.len() < LEN {
                        if sent < LEN {
                            match s.write(&data[sent..]) {
                                Ok(n) => sent += n,
                                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                                Err(e) => panic!("client {i}: write: {e}"),
                            }
                        }
                        match s.read(&mut buf) {
                            Ok(0) => panic!("client {i}: early EOF"),
                            Ok(n) => back.extend_from_slice(&buf[..n]),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                                std::thread::sleep(Duration::from_micros(200))
                            }
                            Err(e) => panic!("client {i}: read: {e}"),
                        }
                    }
                    assert!(back == data, "client {i}: echo differs");
                    s.set_nonblocking(false).unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                    assert_eq!(s.read(&mut buf).unwrap(), 0);
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
    });
    server.join().unwrap();
}

#[test]
fn accept_and_close_under_load() {
    let Some(net) = setup("esp_churn", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    const ROUNDS: usize = 100;
    let (tx, rx) = mpsc::channel();
    let bi = b.clone();
    let server = b.spawn(move || {
        let bulk_l = EspListener::bind((bi.iface.as_str(), 7300)).unwrap();
        let l = EspListener::bind((bi.iface.as_str(), 7301)).unwrap();
        tx.send(()).unwrap();
        let bulk = std::thread::spawn(move || {
            let (mut s, _) = bulk_l.accept_timeout(Some(PATIENCE)).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            receive_and_report(&mut s, 9)
        });
        for i in 0..ROUNDS {
            let (mut s, _) = l.accept_timeout(Some(PATIENCE)).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut b = [0u8; 8];
            s.read_exact(&mut b).unwrap();
            assert_eq!(u64::from_be_bytes(b), i as u64);
            s.write_all(&b).unwrap();
        }
        bulk.join().unwrap()
    });
    rx.recv().unwrap();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    a.run(move || {
        let ai2 = ai.clone();
        let bulk = std::thread::spawn(move || {
            let mut s =
                EspStream::connect_timeout_with(&ai2, bmac, 7300, EspConfig::default(), PATIENCE)
                    .unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            send_and_report(&mut s, 20 << 20, 9)
        });
        for i in 0..ROUNDS {
            let mut s =
                EspStream::connect_timeout_with(&ai, bmac, 7301, EspConfig::default(), PATIENCE)
                    .unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            s.write_all(&(i as u64).to_be_bytes()).unwrap();
            let mut b = [0u8; 8];
            s.read_exact(&mut b).unwrap();
            assert_eq!(u64::from_be_bytes(b), i as u64);
            // Dropped here: graceful close.
        }
        let (h, len, got) = bulk.join().unwrap();
        assert_eq!(len, 20 << 20);
        assert_eq!(got, h);
    });
    assert_eq!(server.join().unwrap(), 20 << 20);
}

#[test]
fn ping_pong_in_every_wait_policy() {
    let Some(net) = setup("esp_pingpong", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    const ROUNDS: usize = 2000;
    let sizes = [1usize, 64, 1480, 1481, 4096, 65536];
    for mode in ["block", "busy_poll", "adaptive"] {
        let wait = match mode {
            "block" => WaitPolicy::Block,
            "busy_poll" => WaitPolicy::BusyPoll,
            _ => WaitPolicy::DEFAULT,
        };
        let (tx, rx) = mpsc::channel();
        let bi = b.clone();
        let server = b.spawn(move || {
            let cfg = EspConfig {
                wait,
                ..EspConfig::default()
            };
            let l = EspListener::bind_with(&bi.iface, 7400, cfg).unwrap();
            tx.send(()).unwrap();
            let (mut s, _) = l.accept_timeout(Some(PATIENCE)).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut buf = vec![0u8; 65536];
            for &n in &sizes {
                for _ in 0..ROUNDS / sizes.len() {
                    s.read_exact(&mut buf[..n]).unwrap();
                    s.write_all(&buf[..n]).unwrap();
                }
            }
        });
        rx.recv().unwrap();
        let (ai, bmac) = (a.iface.clone(), b.mac);
        a.run(move || {
            let cfg = EspConfig {
                wait,
                ..EspConfig::default()
            };
            let mut s = EspStream::connect_timeout_with(&ai, bmac, 7400, cfg, PATIENCE).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut out = vec![0u8; 65536];
            let mut back = vec![0u8; 65536];
            for (k, &n) in sizes.iter().enumerate() {
                for r in 0..ROUNDS / sizes.len() {
                    fill(&mut out[..n], r as u64, k as u64);
                    s.write_all(&out[..n]).unwrap();
                    s.read_exact(&mut back[..n]).unwrap();
                    assert!(out[..n] == back[..n], "{mode}: round {r} size {n} differs");
                }
            }
            let st = s.stats();
            eprintln!("{mode}: {st:?}");
        });
        server.join().unwrap();
    }
}

/// Not a test: prints ESP bulk throughput and 64-byte half round trip on a
/// veth pair next to kernel TCP (TCP_NODELAY) on the same pair. Run with
/// `cargo test --release -p esp --test veth report -- --ignored --nocapture`.
#[test]
#[ignore]
fn report_throughput_and_latency() {
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;
    let Some(net) = setup("esp_report", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    // TCP runs to b's address (the harness gives every host one).
    let tcp_addr = std::net::SocketAddr::from((b.ip, 7500));
    const BULK: usize = 1 << 30;
    const RT: usize = 20_000;
    let only = std::env::var("ESP_REPORT_ONLY").ok();
    for proto in ["esp", "tcp"] {
        for busy in [false, true] {
            if only
                .as_deref()
                .is_some_and(|o| o != format!("{proto}{busy}"))
            {
                continue;
            }
            let (tx, rx) = mpsc::channel();
            let bi = b.clone();
            let server = b.spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let cfg = EspConfig {
                    wait: if busy {
                        WaitPolicy::BusyPoll
                    } else {
                        WaitPolicy::DEFAULT
                    },
                    ..EspConfig::default()
                };
                let mut conn: Handler = if proto == "esp" {
                    let l = EspListener::bind_with(&bi.iface, 7500, cfg).unwrap();
                    tx.send(()).unwrap();
                    let (mut s, _) = l.accept().unwrap();
                    Box::new(move |b: &mut [u8]| {
                        let n = s.read(b).unwrap();
                        if n == 1 {
                            s.write_all(&b[..1]).unwrap();
                        }
                        n
                    })
                } else {
                    let l = TcpListener::bind(tcp_addr).unwrap();
                    tx.send(()).unwrap();
                    let (mut s, _) = l.accept().unwrap();
                    s.set_nodelay(true).unwrap();
                    Box::new(move |b: &mut [u8]| {
                        let n = s.read(b).unwrap();
                        if n == 1 {
                            s.write_all(&b[..1]).unwrap();
                        }
                        n
                    })
                };
                // Ping-pong phase (1-byte messages), then bulk until EOF.
                for _ in 0..RT {
                    conn(&mut buf[..1]);
                }
                let mut total = 0;
                loop {
                    let n = conn(&mut buf[..]);
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                total
            });
            rx.recv().unwrap();
            let (ai, bmac) = (a.iface.clone(), b.mac);
            let (lat, gbps) = a.run(move || {
                let cfg = EspConfig {
                    wait: if busy {
                        WaitPolicy::BusyPoll
                    } else {
                        WaitPolicy::DEFAULT
                    },
                    ..EspConfig::default()
                };
                let mut s: Box<dyn ReadWrite> = if proto == "esp" {
                    Box::new(EspStream::connect_with(&ai, bmac, 7500, cfg).unwrap())
                } else {
                    let t = TcpStream::connect(tcp_addr).unwrap();
                    t.set_nodelay(true).unwrap();
                    Box::new(t)
                };
                let mut one = [0u8; 1];
                let t0 = Instant::now();
                for _ in 0..RT {
                    s.write_all(&one).unwrap();
                    s.read_exact(&mut one).unwrap();
                }
                let lat = t0.elapsed() / (2 * RT as u32);
                let data = vec![0x5au8; 1 << 20];
                let t0 = Instant::now();
                for _ in 0..BULK / data.len() {
                    s.write_all(&data).unwrap();
                }
                s.close_write();
                let mut b = [0u8; 1];
                let _ = s.read(&mut b);
                s.report();
                let secs = t0.elapsed().as_secs_f64();
                (lat, BULK as f64 * 8.0 / secs / 1e9)
            });
            assert_eq!(server.join().unwrap(), BULK);
            println!(
                "{proto} busy_poll={busy}: 1-byte half round trip (mean) {:?}, bulk {gbps:.2} Gbit/s",
                lat
            );
        }
    }
}

/// Reads into the buffer, echoes 1-byte messages; returns the count.
type Handler = Box<dyn FnMut(&mut [u8]) -> usize>;

trait ReadWrite: Read + Write {
    fn close_write(&mut self);
    fn report(&mut self) {}
}

impl ReadWrite for EspStream {
    fn close_write(&mut self) {
        self.shutdown(Shutdown::Write).unwrap();
    }
    fn report(&mut self) {
        println!("sender stats: {:?}", self.stats());
    }
}

impl ReadWrite for std::net::TcpStream {
    fn close_write(&mut self) {
        std::net::TcpStream::shutdown(self, Shutdown::Write).unwrap();
    }
}

/// Runs `n` ESP streams from host A to host B for `secs` seconds, each
/// sending as fast as its window allows, driven by one mio loop per side
/// (nonblocking streams, readiness from protocol state); returns the bytes
/// each stream delivered.
fn concurrent_streams(
    a: &testkit::Host,
    b: &testkit::Host,
    port: u16,
    n: usize,
    secs: f64,
    cfg: EspConfig,
) -> Vec<u64> {
    use runtime::mio::{Events, Interest, Poll, Token};
    let (tx, rx) = mpsc::channel();
    let (bi, cfg_b) = (b.clone(), cfg.clone());
    let server = b.spawn(move || {
        let l = EspListener::bind_with(&bi.iface, port, cfg_b).unwrap();
        tx.send(()).unwrap();
        let mut poll = Poll::new().unwrap();
        let mut streams = Vec::with_capacity(n);
        for i in 0..n {
            let (mut s, _) = l.accept_timeout(Some(PATIENCE)).unwrap();
            s.set_nonblocking(true).unwrap();
            poll.registry()
                .register(&mut s, Token(i), Interest::READABLE)
                .unwrap();
            streams.push(s);
        }
        let mut got = vec![0u64; n];
        let mut done = vec![false; n];
        let mut open = n;
        let mut events = Events::with_capacity(1024);
        let mut buf = vec![0u8; 256 << 10];
        let give_up = std::time::Instant::now() + PATIENCE;
        while open > 0 {
            assert!(std::time::Instant::now() < give_up, "receivers stuck");
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            for e in events.iter() {
                let i = e.token().0;
                // EOF stays readable: count each stream's end once.
                while !done[i] {
                    match streams[i].read(&mut buf) {
                        Ok(0) => {
                            done[i] = true;
                            open -= 1;
                        }
                        Ok(k) => got[i] += k as u64,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("stream {i}: {e}"),
                    }
                }
            }
        }
        eprintln!(
            "receiver: kernel {:?} engine tx_lost {}",
            l.runtime().kernel_stats(),
            l.runtime().stats().tx_lost
        );
        got
    });
    rx.recv().unwrap();
    let (ai, bmac) = (a.iface.clone(), b.mac);
    a.run(move || {
        let mut poll = Poll::new().unwrap();
        let mut streams: Vec<EspStream> = (0..n)
            .map(|i| {
                let mut s = EspStream::connect_timeout_with(&ai, bmac, port, cfg.clone(), PATIENCE)
                    .unwrap();
                s.set_nonblocking(true).unwrap();
                poll.registry()
                    .register(&mut s, Token(i), Interest::WRITABLE)
                    .unwrap();
                s
            })
            .collect();
        let chunk = vec![0x5au8; 64 << 10];
        let mut events = Events::with_capacity(1024);
        // Round robin, one chunk per writable stream per pass (a stream
        // written until it blocks can keep the sender forever once its own
        // ACKs free its buffer as fast as it writes).
        let mut ready: std::collections::VecDeque<usize> = (0..n).collect();
        let mut queued = vec![true; n];
        let start = std::time::Instant::now();
        while start.elapsed().as_secs_f64() < secs {
            let timeout = if ready.is_empty() {
                Some(Duration::from_millis(10))
            } else {
                Some(Duration::ZERO)
            };
            poll.poll(&mut events, timeout).unwrap();
            for e in events.iter() {
                let i = e.token().0;
                if !queued[i] {
                    queued[i] = true;
                    ready.push_back(i);
                }
            }
            for _ in 0..ready.len() {
                let i = ready.pop_front().unwrap();
                match streams[i].write(&chunk) {
                    Ok(_) => ready.push_back(i),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => queued[i] = false,
                    Err(e) => panic!("write: {e}"),
                }
            }
        }
        for s in &mut streams {
            s.set_nonblocking(false).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
        }
        eprintln!(
            "sender: kernel {:?} engine tx_lost {} retrans {}",
            streams[0].runtime().kernel_stats(),
            streams[0].runtime().stats().tx_lost,
            streams
                .iter_mut()
                .map(|s| s.stats().retransmitted)
                .sum::<u64>()
        );
        for s in &mut streams {
            let _ = s.close(Some(PATIENCE));
        }
    });
    server.join().unwrap()
}

/// Not a test: aggregate goodput and Jain's fairness index of 256
/// concurrent ESP streams against one stream alone, on one veth pair.
/// `cargo test --release -p esp --test veth report_concurrent -- --ignored --nocapture`
#[test]
#[ignore]
fn report_concurrent_streams() {
    let Some(net) = setup("esp_concurrent", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    let secs = 3.0;
    for (k, n) in [1usize, 256].into_iter().enumerate() {
        let got = concurrent_streams(&a, &b, 7600 + k as u16, n, secs, EspConfig::default());
        let total: u64 = got.iter().sum();
        let sum: f64 = got.iter().map(|&x| x as f64).sum();
        let sq: f64 = got.iter().map(|&x| (x as f64) * (x as f64)).sum();
        let jain = sum * sum / (n as f64 * sq);
        let min = got.iter().min().unwrap();
        let max = got.iter().max().unwrap();
        println!(
            "{n:4} streams: aggregate {:8.1} Mbit/s, Jain {jain:.3}, per stream min {min} max {max} bytes",
            total as f64 * 8.0 / secs / 1e6
        );
    }
}

#[test]
fn thirty_two_streams_through_one_mio_loop_each_side() {
    let Some(net) = setup("esp_mio_streams", 2, 1500) else {
        return;
    };
    let (a, b) = (net.host(0).clone(), net.host(1).clone());
    // Small send buffers: what is queued when the clock stops must drain
    // quickly in a debug build.
    let cfg = EspConfig {
        transport: esp::TransportConfig {
            send_buffer: 128 << 10,
            ..Default::default()
        },
        ..EspConfig::default()
    };
    let got = concurrent_streams(&a, &b, 7650, 32, 0.3, cfg);
    assert_eq!(got.len(), 32);
    assert!(
        got.iter().all(|&x| x > 0),
        "a stream delivered nothing: {got:?}"
    );
}
