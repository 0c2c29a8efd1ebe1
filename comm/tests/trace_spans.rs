//! The communicator's span, in its own test binary: the subscriber is the
//! process's global one (the runtime's service thread runs the CTP
//! upper-layer callbacks too), and tracing caches each callsite's interest
//! process-wide.

mod common;

use std::time::{Duration, Instant};

use comm::{CommConfig, ANY_SOURCE, ANY_TAG};
use common::{ranks, LIMIT};

use testkit::Lines;

/// Rank 0 sends to rank 1, which answers: the lazy connection's CONNECT,
/// rank 1's grant and rank 0's first grant are each in the span of the
/// rank that logs it, whether the communicator's call or the CTP
/// upper-layer callback ran it. Run `cargo test -p comm --test
/// trace_spans -- --nocapture` to see the trace.
#[test]
fn events_carry_the_span_of_their_communicator() {
    let lines = Lines::default();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(lines.clone())
            .finish(),
    )
    .unwrap();
    let cfg = CommConfig {
        wait_timeout: Some(LIMIT),
        ..CommConfig::default()
    };
    let mut comms = ranks(2, cfg);
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let (r0, r1) = ("comm{rank=0 size=2}", "comm{rank=1 size=2}");
    c0.send(1, 7, b"ping").unwrap();
    let (st, _) = c1.recv(ANY_SOURCE, ANY_TAG).unwrap();
    assert_eq!(st.source, 0);
    c1.send(0, 8, b"pong").unwrap();
    c0.recv(1, 8).unwrap();
    // The grant may still be on its way (CTP does not order messages).
    let until = Instant::now() + Duration::from_secs(10);
    while !lines.has(r0, "comm: peer connected (first grant)") && Instant::now() < until {
        c0.progress().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    print!("{}", lines.text());
    assert!(lines.has(r0, "comm: joined"), "{}", lines.text());
    assert!(lines.has(r0, "CONNECT"), "{}", lines.text());
    assert!(lines.has(r1, "comm: control message"), "{}", lines.text());
    assert!(lines.has(r1, "comm: grant"), "{}", lines.text());
    assert!(
        lines.has(r0, "comm: peer connected (first grant)"),
        "{}",
        lines.text()
    );
    let (f0, f1) = (
        std::thread::spawn(move || c0.finalize(LIMIT)),
        std::thread::spawn(move || c1.finalize(LIMIT)),
    );
    f0.join().unwrap().unwrap();
    f1.join().unwrap().unwrap();
}
