//! The protocol trace of a lossy transfer, in its own test binary: tracing
//! caches each callsite's interest process-wide, and a callsite first hit
//! by a concurrently running test (no subscriber) can miss the scoped
//! subscriber installed here.

mod harness;

use esp::TransportConfig;
use harness::*;
use std::sync::{Arc, Mutex};
use testkit::sim::SimClock;

/// Trace timestamps in virtual time since the start of the simulation.
struct VirtualTime(SimClock);

impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{:>10.1}us", self.0.elapsed().as_nanos() as f64 / 1000.0)
    }
}

/// A tracing layer that keeps the message of every event (DEBUG and up).
struct Capture(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    *self.0 = format!("{v:?}");
                }
            }
        }
        let mut m = String::new();
        event.record(&mut Message(&mut m));
        self.0.lock().unwrap().push(m);
    }
}

/// A transfer over a link that loses data segments, traced: run
/// `RUST_LOG=trace cargo test -p esp --test trace_events -- --nocapture`
/// to read the protocol trace (segments in and out per connection span,
/// the loss detection, the retransmission, the state changes).
#[test]
fn trace_of_lost_segments_and_their_retransmission() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let clock = SimClock::new();
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_ansi(false)
                .with_timer(VirtualTime(clock.clone()))
                .with_filter(tracing_subscriber::EnvFilter::from_default_env()),
        )
        .with(Capture(seen.clone()).with_filter(tracing::level_filters::LevelFilter::DEBUG));
    let o = tracing::subscriber::with_default(subscriber, || {
        transfer_on(
            clock,
            &TransportConfig::default(),
            lossy(0.05, 41),
            faults(42),
            32 * MSS_1500,
        )
    });
    assert!(o.a.retransmitted > 0, "no segment was lost: {:?}", o.a);
    let seen = seen.lock().unwrap();
    let count = |what: &str| seen.iter().filter(|m| m.starts_with(what)).count();
    assert_eq!(count("retransmit") as u64, o.a.retransmitted);
    assert!(
        count("fast retransmit") + count("RTO expired") > 0,
        "{seen:?}"
    );
    // Both ends went through the whole lifecycle: A CLOSED, SYN_SENT,
    // ESTABLISHED, FIN_WAIT_1, FIN_WAIT_2, CLOSED; B CLOSED, SYN_RCVD,
    // ESTABLISHED, CLOSE_WAIT, LAST_ACK, CLOSED.
    assert_eq!(count("state"), 5 + 5, "{seen:?}");
}
