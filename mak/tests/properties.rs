//! Properties over random message sizes and loss patterns on the
//! simulated switch (`sim/mod.rs`, on `testkit::sim`): every strategy
//! delivers every message exactly once, in order, byte-exact; the sender
//! ends idle; nothing is malformed on the wire.
//! proptest runs with a fixed seed, so the cases are the same every run.

mod sim;

use std::time::Duration;

use mak::{Config, Strategy};
use proptest::prelude::{any, prop_assert, prop_oneof, proptest, Just, ProptestConfig};
use proptest::test_runner::RngSeed;
use sim::{Faults, GilbertElliott, Sim, SimSpec};

fn strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
    prop_oneof![
        Just(Strategy::Mak),
        Just(Strategy::Ack),
        Just(Strategy::Nak),
        Just(Strategy::Iterative)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: RngSeed::Fixed(0x6d616b),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn delivered_exactly_once_in_order_byte_exact(
        strategy in strategy(),
        receivers in 1usize..=8,
        sizes in proptest::collection::vec(0usize..7000, 1..12),
        loss in 0.0f64..0.12,
        burst in any::<bool>(),
        dup in 0.0f64..0.05,
        reorder in 0.0f64..0.1,
        window in 1u16..40,
        mtu in 100usize..1500,
        seed in any::<u64>(),
    ) {
        let msgs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|k| (k * 31 + i * 7) as u8).collect())
            .collect();
        let faults = Faults {
            loss,
            burst: burst.then_some(GilbertElliott {
                p_good_bad: 0.02,
                p_bad_good: 0.3,
                loss_bad: 0.4,
            }),
            dup,
            reorder,
            reorder_delay: Duration::from_micros(50),
        };
        let cfg = Config { strategy, window, mtu, ..Config::default() };
        let out = Sim::run(SimSpec::new(cfg, receivers, faults, seed), &msgs);
        out.assert_all_delivered(&msgs, &[]);
        prop_assert!(out.sender_idle);
        prop_assert!(out.receivers.iter().all(|r| r.malformed == 0 && r.forged == 0));
        prop_assert!(out.sender.malformed == 0 && out.sender.forged == 0);
        prop_assert!(out.receiver_events.iter().all(|e| e.is_empty()), "{:?}", out.receiver_events);
    }
}
