//! Simulations of one sender and N receivers on the simulated switch (see
//! `sim/mod.rs`, on `testkit::sim`): every strategy delivers every message
//! exactly once, in order, byte-exact, under loss, burst loss, duplication
//! and reordering; runs are deterministic per seed; a dead receiver is
//! reported by id and the others complete; MAK's NAK suppression keeps
//! retransmissions near one per lost packet; the NAK baseline shows the
//! paper's two flaws.

mod sim;

use std::time::Duration;

use mak::{Config, Member, MemberId, ReceiverEvent, SenderEvent, Strategy};
use sim::{messages, Faults, Outcome, Sim, SimSpec};

const ALL: [Strategy; 4] = [
    Strategy::Mak,
    Strategy::Ack,
    Strategy::Nak,
    Strategy::Iterative,
];

fn cfg(strategy: Strategy) -> Config {
    Config {
        strategy,
        window: 16,
        ..Config::default()
    }
}

fn run(strategy: Strategy, n: usize, faults: Faults, seed: u64, msgs: &[Vec<u8>]) -> Outcome {
    Sim::run(SimSpec::new(cfg(strategy), n, faults, seed), msgs)
}

#[test]
fn every_strategy_delivers_exactly_once_in_order_under_faults() {
    let msgs = messages(1, 40, 6000);
    for strategy in ALL {
        for (n, faults) in [
            (1, Faults::loss(0.05)),
            (3, Faults::nasty(0.02)),
            (8, Faults::nasty(0.05)),
        ] {
            let seed = 100 + n as u64;
            let out = run(strategy, n, faults, seed, &msgs);
            out.assert_all_delivered(&msgs, &[]);
            assert!(out.sender_idle, "{strategy:?} n={n}: sender not idle");
            let dups: u64 = out.receivers.iter().map(|r| r.duplicates).sum();
            let lost = out.hub.copies_lost;
            assert!(lost > 0, "{strategy:?} n={n}: the faults did something");
            if faults.dup > 0.0 {
                assert!(out.hub.copies_duplicated > 0 && dups > 0);
            }
            if strategy != Strategy::Nak {
                let done = out
                    .sender_events
                    .iter()
                    .filter(|(_, e)| {
                        matches!(
                            e,
                            SenderEvent::MessageDone {
                                confirmed: true,
                                ..
                            }
                        )
                    })
                    .count();
                assert_eq!(
                    done,
                    msgs.len(),
                    "{strategy:?} n={n}: every message confirmed"
                );
            }
            println!(
                "{strategy:?} n={n}: {:?} virtual, {} frames, {} copies lost, retx nak/timeout/tail {}/{}/{}, dups {dups}",
                out.end,
                out.hub.frames,
                lost,
                out.sender.retx_nak,
                out.sender.retx_timeout,
                out.sender.retx_tail
            );
        }
    }
}

#[test]
fn runs_are_deterministic_per_seed() {
    let msgs = messages(2, 20, 4000);
    for strategy in ALL {
        let a = run(strategy, 5, Faults::nasty(0.05), 7, &msgs);
        let b = run(strategy, 5, Faults::nasty(0.05), 7, &msgs);
        let c = run(strategy, 5, Faults::nasty(0.05), 8, &msgs);
        assert_eq!(a.trace_hash, b.trace_hash, "{strategy:?}");
        assert_eq!((a.sender, a.end), (b.sender, b.end), "{strategy:?}");
        assert_eq!(a.receivers, b.receivers, "{strategy:?}");
        assert_ne!(a.trace_hash, c.trace_hash, "{strategy:?}: the seed matters");
    }
}

#[test]
fn a_killed_receiver_is_reported_by_id_and_the_others_complete() {
    let msgs = messages(3, 100, 3000);
    let kill_at = Duration::from_micros(50);
    for strategy in [Strategy::Mak, Strategy::Ack, Strategy::Iterative] {
        let mut c = cfg(strategy);
        c.min_silence = Duration::ZERO;
        let (k, tw) = (c.max_expiries, c.ack_timeout);
        let mut spec = SimSpec::new(c, 7, Faults::loss(0.01), 11);
        spec.kill = vec![(3, kill_at)]; // member 4
        let out = Sim::run(spec, &msgs);
        out.assert_all_delivered(&msgs, &[3]);
        assert!(out.sender_idle, "{strategy:?}");
        let silent: Vec<_> = out
            .sender_events
            .iter()
            .filter_map(|(t, e)| match e {
                SenderEvent::MemberSilent { member, .. } => Some((*t, *member)),
                _ => None,
            })
            .collect();
        assert_eq!(silent.len(), 1, "{strategy:?}: {silent:?}");
        let (t, member) = silent[0];
        assert_eq!(member, Member::new(4, 4), "{strategy:?}: reported by id");
        // Bound: the next ACK request after the death is at most one Tw
        // round away (requests come every window), then K expiries.
        let bound = kill_at + tw * (k + 2);
        assert!(
            t <= bound,
            "{strategy:?}: reported at {t:?}, bound {bound:?}"
        );
        // The request that went unanswered may predate the death by < Tw.
        assert!(
            t >= kill_at + tw * (k - 1),
            "{strategy:?}: not before (K - 1) x Tw"
        );
        println!(
            "{strategy:?}: member 4 killed at {kill_at:?}, reported at {t:?} (bound {bound:?})"
        );
    }
}

/// Retransmissions per packet lost at its first transmission (by at least
/// one receiver), for 7 receivers under independent loss.
fn retx_per_lost(strategy: Strategy, loss: f64, seed: u64) -> (f64, Outcome) {
    let msgs = messages(seed, 150, 12_000);
    let mut c = cfg(strategy);
    c.window = 64;
    let out = Sim::run(SimSpec::new(c, 7, Faults::loss(loss), seed), &msgs);
    out.assert_all_delivered(&msgs, &[]);
    let retx = out.sender.retx_nak + out.sender.retx_timeout;
    let lost = out.hub.first_tx_lost.len() as f64;
    assert!(lost > 0.0);
    (retx as f64 / lost, out)
}

#[test]
fn mak_suppression_keeps_retransmissions_per_lost_packet_low() {
    for loss in [0.01, 0.05] {
        let (ratio, out) = retx_per_lost(Strategy::Mak, loss, 21);
        let sum =
            |o: &Outcome, f: fn(&mak::ReceiverStats) -> u64| o.receivers.iter().map(f).sum::<u64>();
        let sent = sum(&out, |r| r.naks_sent);
        let (_, nak_out) = retx_per_lost(Strategy::Nak, loss, 21);
        let nak_sent = sum(&nak_out, |r| r.naks_sent);
        let nak_ratio = nak_out.sender.retx_nak as f64 / nak_out.hub.first_tx_lost.len() as f64;
        let mak_nak_ratio = out.sender.retx_nak as f64 / out.hub.first_tx_lost.len() as f64;
        println!(
            "loss {:.0} %, 7 receivers, W = 64: {} packets, {} lost at first transmission\n  \
             MAK: {} NAKs sent ({} entries), {} suppressed whole, {} entries suppressed, \
             {} entries ignored by the sender (δ); retransmissions: {} by NAK + {} by Tw = \
             {:.3} per lost packet ({:.3} by NAK alone)\n  \
             NAK baseline: {} NAKs sent; {} retransmissions by NAK = {:.3} per lost packet \
             (+ {} tail repeats)",
            loss * 100.0,
            out.sender.data_sent,
            out.hub.first_tx_lost.len(),
            sent,
            sum(&out, |r| r.nak_entries_sent),
            sum(&out, |r| r.naks_suppressed),
            sum(&out, |r| r.nak_entries_suppressed),
            out.sender.nak_entries_dedup,
            out.sender.retx_nak,
            out.sender.retx_timeout,
            ratio,
            mak_nak_ratio,
            nak_sent,
            nak_out.sender.retx_nak,
            nak_ratio,
            nak_out.sender.retx_tail,
        );
        assert!(
            ratio <= 1.5,
            "loss {loss}: {ratio:.3} retransmissions per lost packet"
        );
        if loss >= 0.05 {
            // Losses overlap often enough for suppression to matter (at 1 %
            // two of 7 receivers rarely lose the same packet): entries are
            // suppressed, and MAK needs fewer NAKs and fewer retransmissions
            // per lost packet than the NAK baseline, which resends per NAK
            // (paper §3.1, third flaw: "连续重发了两次数据包4"). (Measured
            // with this harness at 10 % / 20 % loss: 1.155 vs 1.240 and
            // 1.364 vs 1.565.)
            assert!(sum(&out, |r| r.nak_entries_suppressed) > 0);
            assert!(
                sent * 2 < nak_sent,
                "MAK sent {sent} NAKs, the NAK baseline {nak_sent}"
            );
            assert!(
                mak_nak_ratio < nak_ratio,
                "by NAK: MAK {mak_nak_ratio:.3}, NAK baseline {nak_ratio:.3}"
            );
        }
    }
}

#[test]
fn nak_baseline_never_frees_its_window_without_linger() {
    // The paper's first NAK flaw (§3.1): no ACKs, so the sender can never
    // know a packet is safe; with a finite buffer it stops. MAK, same run,
    // completes.
    let msgs = messages(4, 30, 3000);
    let mut c = cfg(Strategy::Nak);
    c.nak_linger = None;
    let out = Sim::run(SimSpec::new(c, 3, Faults::default(), 1), &msgs);
    assert!(!out.sender_idle);
    assert_eq!(out.sender.data_sent, 16, "stuck after one window of W = 16");
    for d in &out.delivered {
        assert!(d.len() < msgs.len());
    }
    let ok = run(Strategy::Mak, 3, Faults::default(), 1, &msgs);
    ok.assert_all_delivered(&msgs, &[]);
}

#[test]
fn nak_baseline_misses_a_lost_last_packet_without_tail_repeats() {
    // The paper's second NAK flaw (§3.1): a receiver learns of a loss only
    // from a later packet, so a lost last packet is never naked. Find a
    // seed where the one packet is lost somewhere; that receiver never
    // delivers, and nobody naks. MAK (Tw resend of LAST) delivers.
    let msgs = vec![vec![9u8; 700]];
    let mut c = cfg(Strategy::Nak);
    c.nak_tail_repeats = 0;
    let seed = (0..200)
        .find(|&s| {
            let o = Sim::run(SimSpec::new(c.clone(), 8, Faults::loss(0.2), s), &msgs);
            !o.hub.first_tx_lost.is_empty()
        })
        .expect("a loss in 200 seeds");
    let out = Sim::run(SimSpec::new(c, 8, Faults::loss(0.2), seed), &msgs);
    let missed = out.delivered.iter().filter(|d| d.is_empty()).count();
    assert!(missed > 0);
    assert_eq!(out.sender.naks_received, 0, "no NAK can name it");
    let ok = run(Strategy::Mak, 8, Faults::loss(0.2), seed, &msgs);
    ok.assert_all_delivered(&msgs, &[]);
    assert!(ok.sender.retx_timeout > 0, "MAK found it by Tw");
}

#[test]
fn a_receiver_left_behind_reports_abandonment() {
    // Receiver 1 dies, is declared silent, the stream goes on without it;
    // when it comes back, the packets it lacks are freed: it reports
    // abandonment instead of stalling or delivering out of order.
    let msgs = messages(5, 600, 3000);
    let mut c = cfg(Strategy::Mak);
    c.min_silence = Duration::ZERO;
    let mut spec = SimSpec::new(c, 2, Faults::default(), 3);
    spec.cost = sim::CostModel::gige();
    spec.kill = vec![(0, Duration::from_micros(300))];
    spec.revive = vec![(0, Duration::from_millis(15))];
    let out = Sim::run(spec, &msgs);
    out.assert_all_delivered(&msgs, &[0]);
    let silent_at = out
        .sender_events
        .iter()
        .find_map(|(t, e)| match e {
            SenderEvent::MemberSilent { member, .. } if member.id == MemberId(1) => Some(*t),
            _ => None,
        })
        .expect("member 1 declared silent");
    assert!(silent_at < Duration::from_millis(15));
    let last_delivery = out.delivered[1].last().unwrap().0;
    assert!(
        last_delivery > Duration::from_millis(15),
        "the stream outlived the revival"
    );
    let abandoned: Vec<_> = out.receiver_events[0]
        .iter()
        .filter(|(_, e)| matches!(e, ReceiverEvent::Abandoned { .. }))
        .collect();
    assert_eq!(abandoned.len(), 1, "{:?}", out.receiver_events[0]);
    assert!(abandoned[0].0 >= Duration::from_millis(15));
    let got = &out.delivered[0];
    assert!(got.len() < msgs.len());
    for (k, (_, m)) in got.iter().enumerate() {
        assert_eq!((m.msg, &m.data), (k as u32, &msgs[k]), "a prefix, in order");
    }
}
