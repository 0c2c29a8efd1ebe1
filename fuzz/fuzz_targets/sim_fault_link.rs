//! Fuzzes the fault injector and the in-memory link: the input chooses a
//! fault config and a sequence of operations (send frames of any length,
//! advance the clock, receive). Checks: no panic, no frame delivered early,
//! every frame accounted for (delivered, lost, tail-dropped or duplicated),
//! lengths preserved, oversize and runt frames rejected. Receives use
//! `recv` or `recv_with` (borrowed frames, up to 4 per call).
#![no_main]

use std::io::ErrorKind;
use std::time::Duration;

use edp::link::fault::FaultConfig;
use edp::link::sim::{SimClock, SimLink};
use edp::Link;
use libfuzzer_sys::fuzz_target;

fn prob(b: u8) -> f64 {
    // Mostly zero so single faults get exercised alone too.
    if b < 128 {
        0.0
    } else {
        (b - 128) as f64 / 127.0
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let (h, ops) = data.split_at(12);
    let mut cfg = FaultConfig::seeded(u64::from(h[0]))
        .with_loss(prob(h[1]))
        .with_duplicate(prob(h[2]))
        .with_reorder(prob(h[3]), Duration::from_nanos(u64::from(h[4]) * 100))
        .with_corrupt(prob(h[5]))
        .with_delay(
            Duration::from_nanos(u64::from(h[6]) * 1000),
            Duration::from_nanos(u64::from(h[7]) * 100),
        );
    if h[8] & 1 == 1 {
        cfg = cfg.with_burst(prob(h[8] | 0x80), prob(h[9] | 0x80), prob(h[9]));
    }
    if h[10] != 0 {
        cfg = cfg.with_rate(u64::from(h[10]) * 1_000_000);
    }
    if h[11] != 0 {
        cfg = cfg.with_queue_limit(usize::from(h[11]));
    }
    let mtu = 1500;
    let clock = SimClock::new();
    let (mut a, mut b) = SimLink::pair(&clock, mtu, cfg, FaultConfig::default());
    let mut buf = vec![0u8; mtu + 14];
    let mut accepted = 0u64;
    let mut received = 0u64;
    let mut rest = ops;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 4 {
            0 | 1 => {
                // Send a frame of 7 * (next byte) bytes: 0..=1785, so runts and
                // oversize frames occur too.
                let len = rest.first().map_or(0, |&x| x as usize * 7);
                rest = rest.get(1..).unwrap_or(&[]);
                let frame = vec![op; len];
                match a.send(&frame) {
                    Ok(()) => {
                        assert!((14..=mtu + 14).contains(&len));
                        accepted += 1;
                    }
                    Err(e) => assert!(
                        matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::WouldBlock),
                        "{e}"
                    ),
                }
            }
            2 => clock.advance(Duration::from_micros(u64::from(op))),
            _ if op & 4 != 0 => {
                let due = b.next_delivery();
                match b.recv_with(4, &mut |f| assert!((14..=mtu + 14).contains(&f.len()))) {
                    Ok(n) => {
                        assert!(n >= 1 && n <= 4);
                        assert!(due.unwrap() <= clock.now(), "delivered early");
                        received += n as u64;
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::WouldBlock);
                        assert!(!matches!(due, Some(t) if t <= clock.now()));
                    }
                }
            }
            _ => {
                let due = b.next_delivery();
                match b.recv(&mut buf) {
                    Ok(_) => {
                        assert!(due.unwrap() <= clock.now(), "delivered early");
                        received += 1;
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::WouldBlock);
                        assert!(!matches!(due, Some(t) if t <= clock.now()));
                    }
                }
            }
        }
    }
    // Drain: everything not lost arrives.
    while let Some(t) = b.next_delivery() {
        clock.advance_to(t);
        while b.recv(&mut buf).is_ok() {
            received += 1;
        }
    }
    let st = a.fault_stats();
    assert_eq!(st.frames, accepted);
    assert_eq!(
        received,
        accepted - st.lost - st.queue_dropped + st.duplicated
    );
});
