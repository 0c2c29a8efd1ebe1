//! Two ranks in one process over CTP on UDP loopback: ping-pong latency of
//! small messages and one-way bandwidth of large ones, next to the same
//! ping-pong on the bare CTP socket (the communicator's overhead).
//! Unprivileged. A first look; the OSU-style benchmarks are `comm-osu`.
//!
//! Run: `cargo run --release -p comm --example comm_pingpong [ITERS] [busy]`
//! (`busy`: busy-poll waits instead of the default adaptive spin-then-sleep,
//! which on a loaded host turns many waits into ~60 us wakeups).

use std::time::{Duration, Instant};

use comm::{CommConfig, Communicator};
use ctp::{CtpConfig, CtpSocket, Delivery, Options};

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("ITERS: a number"))
        .unwrap_or(10_000);
    let busy = std::env::args().nth(2).as_deref() == Some("busy");
    let ctp_cfg = CtpConfig {
        wait: if busy {
            runtime::WaitPolicy::BusyPoll
        } else {
            runtime::WaitPolicy::DEFAULT
        },
        ..CtpConfig::default()
    };
    let cfg = CommConfig {
        wait_timeout: Some(Duration::from_secs(30)),
        ..CommConfig::default()
    };

    // Bare CTP ping-pong, 8 bytes.
    let a = CtpSocket::bind_udp("127.0.0.1:0", ctp_cfg.clone())?;
    let b = CtpSocket::bind_udp("127.0.0.1:0", ctp_cfg.clone())?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    let echo = std::thread::spawn(move || {
        for _ in 0..iters {
            match b.recv_delivery(Some(Duration::from_secs(30))).unwrap() {
                Delivery::Data(d) => {
                    b.send_vec(1, d.from, d.data, Options::NONE).unwrap();
                }
                Delivery::Error(e) => panic!("{e}"),
            }
        }
        b.flush(Some(Duration::from_secs(10))).unwrap();
        b.poll(Duration::from_millis(100)).unwrap();
    });
    let mut ctp_rtt = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        a.send(1, ba, &[0u8; 8], Options::NONE)?;
        a.recv_delivery(Some(Duration::from_secs(30)))?;
        ctp_rtt.push(t.elapsed());
    }
    echo.join().unwrap();
    let _ = aa;

    // The same through two communicator ranks.
    let s0 = CtpSocket::bind_udp("127.0.0.1:0", ctp_cfg.clone())?;
    let s1 = CtpSocket::bind_udp("127.0.0.1:0", ctp_cfg.clone())?;
    let hosts = vec![s0.local_addr()?, s1.local_addr()?];
    let c0 = Communicator::new(s0, 0, hosts.clone(), cfg.clone())?;
    let c1 = Communicator::new(s1, 1, hosts, cfg)?;
    let big = 1 << 20;
    let rounds = 200;
    let peer = std::thread::spawn(move || -> Result<(), comm::CommError> {
        for _ in 0..iters {
            let (_, d) = c1.recv(0, 1u32)?;
            c1.send(0, 1, &d)?;
        }
        for i in 0..rounds {
            if let Err(e) = c1.recv(0, 2u32) {
                eprintln!(
                    "rank 1, bulk message {i}: {e}\n  {:?}\n  {:?}\n  {:?}",
                    c1.stats(),
                    c1.socket().stats(),
                    c1.socket().status()
                );
                return Err(e);
            }
        }
        c1.send(0, 3, b"done")?;
        c1.finalize(Duration::from_secs(30))
    });
    let mut comm_rtt = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        c0.send(1, 1, &[0u8; 8])?;
        c0.recv(1, 1u32)?;
        comm_rtt.push(t.elapsed());
    }
    let data = vec![7u8; big];
    let t = Instant::now();
    for _ in 0..rounds {
        c0.send(1, 2, &data)?;
    }
    if let Err(e) = c0.recv(1, 3u32) {
        eprintln!(
            "rank 0: {e}\n  {:?}\n  {:?}\n  {:?}",
            c0.stats(),
            c0.socket().stats(),
            c0.socket().status()
        );
        return Err(e.into());
    }
    let secs = t.elapsed().as_secs_f64();
    c0.finalize(Duration::from_secs(30))?;
    peer.join().unwrap()?;

    let half = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
    let (c50, c99) = (
        percentile(&mut ctp_rtt, 0.5),
        percentile(&mut ctp_rtt, 0.99),
    );
    let (m50, m99) = (
        percentile(&mut comm_rtt, 0.5),
        percentile(&mut comm_rtt, 0.99),
    );
    println!(
        "{iters} ping-pongs of 8 B over CTP/UDP loopback ({} waits), one-way latency (RTT/2):",
        if busy { "busy-poll" } else { "adaptive" }
    );
    println!(
        "  bare CtpSocket: p50 {:.2} us, p99 {:.2} us",
        half(c50),
        half(c99)
    );
    println!(
        "  comm send/recv: p50 {:.2} us, p99 {:.2} us ({:.2}x bare CTP at p50)",
        half(m50),
        half(m99),
        m50.as_secs_f64() / c50.as_secs_f64()
    );
    println!(
        "{rounds} messages of 1 MiB one way: {:.0} MB/s ({:.2} s)",
        (rounds * big) as f64 / secs / 1e6,
        secs
    );
    Ok(())
}
