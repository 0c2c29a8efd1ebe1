//! Sans-IO hot path (criterion): two ESP connections exchange 64-byte
//! segments in memory, one round trip per iteration (ns per round trip):
//!
//! - `esp_sansio/pingpong_64B_round_trip`: send, poll_transmit (headers,
//!   payload copy, checksum), frame parse with checksum verification,
//!   handle_segment, recv, and back;
//! - `esp_sansio/pingpong_64B_round_trip_into`: the same with
//!   handle_segment_into placing the payload straight into the reader's
//!   buffer (the zero-copy receive of the I/O runtime).
//!
//! No I/O and no tracing subscriber: this is the protocol core's share of
//! a ping-pong. Run: `cargo bench -p esp --bench pingpong`.
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use esp::conn::{Connection, IsnGenerator};
use esp::listener::{Listener, SynOutcome};
use esp::wire::{EspFrame, MacAddr, Seq, ETHERTYPE_ESP};
use esp::TransportConfig;

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);
const MTU: usize = 1500;

/// Moves every frame `from` has to `to`; returns how many. With `dst`, the
/// zero-copy entry point (returns the bytes placed in the last frame).
fn hop(from: &mut Connection, to: &mut Connection, now: Instant, buf: &mut [u8]) -> usize {
    let mut k = 0;
    while let Some(n) = from.poll_transmit(now, buf) {
        let f = EspFrame::parse(&buf[..n], ETHERTYPE_ESP, MTU + 14).unwrap();
        to.handle_segment(now, &f.header, f.payload);
        k += 1;
    }
    k
}

fn pair(t0: Instant) -> (Connection, Connection) {
    let cfg = TransportConfig::default();
    let mut a = Connection::connect(&cfg, MTU, (A, 40000), (B, 80), Seq(1000), t0);
    let mut buf = [0u8; MTU + 14];
    let n = a.poll_transmit(t0, &mut buf).unwrap();
    let f = EspFrame::parse(&buf[..n], ETHERTYPE_ESP, MTU + 14).unwrap();
    let mut l: Listener<()> = Listener::new(cfg, MTU, (B, 80), IsnGenerator::with_key([7; 16]));
    let mut b = match l.on_segment(t0, 0, A, &f.header, |_| false) {
        SynOutcome::Accept(c) => *c,
        o => panic!("{o:?}"),
    };
    hop(&mut b, &mut a, t0, &mut buf);
    hop(&mut a, &mut b, t0, &mut buf);
    assert!(a.is_established() && b.is_established());
    (a, b)
}

fn hop_into(
    from: &mut Connection,
    to: &mut Connection,
    now: Instant,
    buf: &mut [u8],
    dst: &mut [u8],
) -> usize {
    let mut placed = 0;
    while let Some(n) = from.poll_transmit(now, buf) {
        let f = EspFrame::parse(&buf[..n], ETHERTYPE_ESP, MTU + 14).unwrap();
        placed += to.handle_segment_into(now, &f.header, f.payload, dst);
    }
    placed
}

fn pingpong(c: &mut Criterion) {
    let mut g = c.benchmark_group("esp_sansio");
    g.throughput(Throughput::Elements(1));
    g.bench_function("pingpong_64B_round_trip", |bch| {
        let t0 = Instant::now();
        let (mut a, mut b) = pair(t0);
        let mut now = t0;
        let msg = [0x5au8; 64];
        let mut rx = [0u8; 64];
        let mut buf = [0u8; MTU + 14];
        bch.iter(|| {
            now += Duration::from_micros(1);
            a.send(black_box(&msg)).unwrap();
            hop(&mut a, &mut b, now, &mut buf);
            assert_eq!(b.recv(&mut rx), Ok(64));
            b.send(black_box(&rx)).unwrap();
            now += Duration::from_micros(1);
            hop(&mut b, &mut a, now, &mut buf);
            assert_eq!(a.recv(&mut rx), Ok(64));
            for c in [&mut a, &mut b] {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
            black_box(rx[0])
        })
    });
    g.bench_function("pingpong_64B_round_trip_into", |bch| {
        let t0 = Instant::now();
        let (mut a, mut b) = pair(t0);
        let mut now = t0;
        let msg = [0x5au8; 64];
        let mut rx = [0u8; 64];
        let mut buf = [0u8; MTU + 14];
        bch.iter(|| {
            now += Duration::from_micros(1);
            a.send(black_box(&msg)).unwrap();
            assert_eq!(hop_into(&mut a, &mut b, now, &mut buf, &mut rx), 64);
            b.send(black_box(&rx)).unwrap();
            now += Duration::from_micros(1);
            assert_eq!(hop_into(&mut b, &mut a, now, &mut buf, &mut rx), 64);
            for c in [&mut a, &mut b] {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
            black_box(rx[0])
        })
    });
    g.finish();
}

criterion_group!(benches, pingpong);
criterion_main!(benches);
