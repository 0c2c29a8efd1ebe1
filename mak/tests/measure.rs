//! The paper's measurement (§4, fig. 8-10) on the simulated switch with a
//! fixed per-frame cost model: per-message completion time for 1, 2, 4 and
//! 6 receivers, per strategy, for 512-byte and 1-KiB messages (one packet
//! each). Virtual time, so the numbers are the cost model's, not a
//! machine's: compare shapes (iterative about linear, ACK growing more than
//! MAK, MAK and NAK nearly flat), not values. Printed, not asserted as
//! timings; the run asserts that everything was delivered. The real
//! measurement on veth comes with the carriers.
//!
//! `cargo test -p mak --test measure -- --nocapture`

mod sim;

use std::time::Duration;

use mak::{Config, Strategy};
use sim::{CostModel, Faults, Sim, SimSpec};

const RECEIVERS: [usize; 4] = [1, 2, 4, 6];
const STREAM: usize = 200;

fn cfg(strategy: Strategy) -> Config {
    Config {
        strategy,
        // The paper's NAK needs a large buffer (§3.1): give it one, so that
        // its linger (which bounds it to W packets per linger) does not
        // stall this lossless run.
        window: if strategy == Strategy::Nak { 1024 } else { 64 },
        ..Config::default()
    }
}

/// (stream: per-message time, single message: latency to the last
/// receiver, single message: until the sender is done).
fn measure(strategy: Strategy, n: usize, size: usize) -> (Duration, Duration, Option<Duration>) {
    let run = |count: usize| {
        let msgs = vec![vec![0xa5u8; size]; count];
        let mut spec = SimSpec::new(cfg(strategy), n, Faults::default(), 1);
        spec.cost = CostModel::gige();
        let out = Sim::run(spec, &msgs);
        out.assert_all_delivered(&msgs, &[]);
        let last = out
            .delivered
            .iter()
            .map(|d| d.last().expect("delivered").0)
            .max()
            .unwrap();
        let done = (strategy != Strategy::Nak).then(|| out.sender_done_at.unwrap());
        (last, done)
    };
    let (stream, _) = run(STREAM);
    let (single, done) = run(1);
    (stream / STREAM as u32, single, done)
}

#[test]
fn per_message_completion_time_by_receivers_and_strategy() {
    let c = CostModel::gige();
    println!(
        "cost model: {:?} one way, {} ns/byte, {:?} CPU per frame sent, {:?} per frame received; \
         MAK/ACK/iterative W = 64 (ACK, iterative: stop-and-wait), NAK W = 1024",
        c.propagation, c.ns_per_byte, c.tx_cost, c.rx_cost
    );
    for size in [512, 1024] {
        println!("\n{size}-byte messages: stream of {STREAM}, time per message (us); single message: to the last receiver / sender done (us)");
        print!("{:<10}", "strategy");
        for n in RECEIVERS {
            print!(" | {:>6} rx {:>5}", n, "");
        }
        println!(" | growth 1->6");
        for strategy in [
            Strategy::Iterative,
            Strategy::Ack,
            Strategy::Nak,
            Strategy::Mak,
        ] {
            print!("{:<10}", format!("{strategy:?}"));
            let mut first = None;
            let mut last = Duration::ZERO;
            for n in RECEIVERS {
                let (per, single, done) = measure(strategy, n, size);
                first.get_or_insert(per);
                last = per;
                let done = done.map_or("-".to_string(), |d| format!("{}", d.as_micros()));
                print!(
                    " | {:>6.1} {:>4}/{:<4}",
                    per.as_secs_f64() * 1e6,
                    single.as_micros(),
                    done
                );
            }
            let g = last.as_secs_f64() / first.unwrap().as_secs_f64();
            println!(" | x{g:.2}");
        }
    }
}
