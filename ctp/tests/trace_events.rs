//! The CTP core reports to `tracing` inside its endpoint's span. A test
//! binary of its own: `tracing` caches per call site whether anybody
//! listens, and call sites first hit by parallel tests without a subscriber
//! would stay silent here.

use std::time::{Duration, Instant, SystemTime};

use ctp::wire::Options;
use ctp::{Config, Endpoint};

const A: u8 = 1;
const B: u8 = 2;

fn ep(cfg: Config, seed: u64, t0: Instant) -> Endpoint<u8> {
    Endpoint::new(cfg, t0, SystemTime::UNIX_EPOCH, seed, None)
}

fn pair(cfg: Config, t0: Instant) -> (Endpoint<u8>, Endpoint<u8>) {
    (ep(cfg.clone(), 10, t0), ep(cfg, 20, t0))
}

fn drain(e: &mut Endpoint<u8>) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; e.config().max_packet_len()];
    while let Some(t) = e.poll_transmit(&mut buf) {
        out.push((t.dest, buf[..t.len].to_vec()));
    }
    out
}

fn exchange(a: &mut Endpoint<u8>, b: &mut Endpoint<u8>, t: Instant, rtt: Duration) {
    a.send(t, 1, B, b"hello", Options::NONE).unwrap();
    for (_, p) in drain(a) {
        b.handle_datagram(t + rtt / 2, A, &p);
    }
    for (_, c) in drain(b) {
        a.handle_datagram(t + rtt, B, &c);
    }
}

fn run_timers(a: &mut Endpoint<u8>, from: Instant, span: Duration) {
    let end = from + span;
    while let Some(t) = a.poll_timeout() {
        if t > end {
            break;
        }
        a.handle_timeout(t);
        let _ = drain(a);
    }
}

/// Records the `tracing` events of the current thread with the name of the
/// span they happened in (a minimal subscriber: no extra dependency).
mod trace_recorder {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    #[derive(Default, Clone)]
    pub struct Recorder {
        pub events: Arc<Mutex<Vec<(String, String)>>>,
        names: Arc<Mutex<Vec<(u64, &'static str)>>>,
        stack: Arc<Mutex<Vec<u64>>>,
        next: Arc<AtomicU64>,
    }

    struct Message(String);
    impl Visit for Message {
        fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
            if f.name() == "message" {
                self.0 = format!("{v:?}");
            }
        }
    }

    impl Subscriber for Recorder {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, a: &Attributes<'_>) -> Id {
            let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
            self.names.lock().unwrap().push((id, a.metadata().name()));
            Id::from_u64(id)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            let mut m = Message(String::new());
            e.record(&mut m);
            let top = self.stack.lock().unwrap().last().copied();
            let span = self
                .names
                .lock()
                .unwrap()
                .iter()
                .find(|(id, _)| Some(*id) == top)
                .map_or("", |(_, n)| n)
                .to_string();
            self.events.lock().unwrap().push((span, m.0));
        }
        fn enter(&self, id: &Id) {
            self.stack.lock().unwrap().push(id.into_u64());
        }
        fn exit(&self, _: &Id) {
            self.stack.lock().unwrap().pop();
        }
    }
}

/// The core reports to `tracing`, inside its endpoint's span: session
/// creation and eviction, tail probes, resends, error deadlines.
#[test]
fn tracing_events_in_the_endpoint_span() {
    let rec = trace_recorder::Recorder::default();
    tracing::subscriber::with_default(rec.clone(), || {
        // Callsites first hit by a parallel test without a subscriber have
        // cached "never": ask again now that this thread has one.
        tracing::callsite::rebuild_interest_cache();
        let t0 = Instant::now();
        let cfg = Config {
            data_size: 4,
            max_sessions: 1,
            // the spec's rule: the error deadline reports "not confirmed"
            user_timeout: None,
            ..Config::default()
        };
        let (mut a, mut b) = pair(cfg, t0);
        let us = Duration::from_micros;
        exchange(&mut a, &mut b, t0, us(100));
        // the last part is lost: tail probe, resends, error deadline
        let t1 = t0 + us(1000);
        a.send(t1, 2, B, b"0123456789", Options::DEL_AFTER_ERROR)
            .unwrap();
        let out = drain(&mut a);
        b.handle_datagram(t1, A, &out[0].1);
        b.handle_datagram(t1, A, &out[1].1);
        for (_, c) in drain(&mut b) {
            a.handle_datagram(t1 + us(100), B, &c);
        }
        run_timers(&mut a, t1, Duration::from_secs(2));
        // a second source evicts A's session at B (max_sessions 1)
        let mut c = ep(Config::default(), 3, t0);
        c.send(t1, 1, B, b"x", Options::NONE).unwrap();
        for (_, p) in drain(&mut c) {
            b.handle_datagram(t1 + us(5), 3, &p);
        }
    });
    let events = rec.events.lock().unwrap().clone();
    for wanted in [
        "receiving session created",
        "receiving session evicted (least recently active; table full)",
        "tail probe",
        "resend",
        "not confirmed: error deadline passed",
    ] {
        assert!(
            events
                .iter()
                .any(|(span, m)| m == wanted && span == "ctp_endpoint"),
            "no {wanted:?} event in the endpoint span: {events:?}"
        );
    }
}
