//! Fuzzes the fault injector and the in-memory link: the input chooses a
//! fault config and a sequence of operations (send frames of any length,
//! advance the clock, receive). Checks: no panic, no frame delivered early,
//! every frame accounted for (delivered, lost, tail-dropped or duplicated),
//! lengths preserved, oversize and runt frames rejected. Receives use
//! `recv` or `recv_with` (borrowed frames, up to 4 per call).
#![no_main]

use std::io::ErrorKind;
use std::time::Duration;

use link::fault::FaultConfig;
use link::sim::{SimClock, SimLink};
use link::Link;
use libfuzzer_sys::fuzz_target;
use testkit::fuzz::{fault_config, FaultSpace, FAULT_BYTES};

fuzz_target!(|data: &[u8]| {
    if data.len() < 1 + FAULT_BYTES {
        return;
    }
    // The seed, then every fault at full scale (testkit::fuzz layout).
    let (h, ops) = data.split_at(1 + FAULT_BYTES);
    let cfg = fault_config(&h[1..], u64::from(h[0]), &FaultSpace::ALL);
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
