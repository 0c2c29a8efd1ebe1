//! ULFC on the virtual clock (`testkit::sim`): the grant invariant under
//! load from N senders with `through` and `rapid` requests mid-run,
//! explicit disconnect and reconnect delivering exactly once, and implicit
//! disconnect of a silent peer recovering by itself when it answers.

use std::time::Duration;

use testkit::sim::FaultConfig;

use super::{cluster, received, run, until, Node};
use crate::control::Mode;
use crate::flow::{PeerState, MIN_WINDOW_BYTES};
use crate::{CommConfig, CommError};

fn body(src: usize, i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (src * 31 + i * 7 + k) as u8).collect()
}

#[test]
fn grant_invariant_holds_under_load_with_through_and_rapid() {
    const N: usize = 5;
    const PER: usize = 40;
    const LEN: usize = 9000;
    let budget = 4 * 32 * 1024;
    let cfg = CommConfig {
        recv_budget_bytes: budget,
        rapid_window_bytes: 8 * 1024,
        fragment_bytes: 6000,
        ..CommConfig::default()
    };
    let f = FaultConfig::seeded(5)
        .with_loss(0.02)
        .with_reorder(0.1, Duration::from_micros(200))
        .with_delay(Duration::from_micros(20), Duration::from_micros(10));
    let (mut nodes, _) = cluster(N, cfg, f);
    let share = budget / (N as u64 - 1);
    for (s, n) in nodes.iter_mut().enumerate().skip(1) {
        for i in 0..PER {
            n.st.isend(0, 0, &[&body(s, i, LEN)], false).unwrap();
        }
    }
    nodes[1].st.request_mode(0, Mode::Through).unwrap();
    nodes[2].st.request_mode(0, Mode::Rapid).unwrap();
    let mut steps = 0u64;
    let mut max_in_flight_total = 0;
    let check = |nodes: &mut [Node]| {
        let g = nodes[0].st.grants();
        assert!(g.reserved_total() <= budget, "grants {g:?}");
        let mut total = 0;
        for (s, n) in nodes.iter().enumerate().skip(1) {
            let f = n.st.in_flight_bytes(0);
            assert!(
                f <= g.reserved(s),
                "sender {s}: {f} bytes unconfirmed, {} reserved",
                g.reserved(s)
            );
            assert!(f <= n.st.dest_buf(0).unwrap() || n.st.dest_buf(0).unwrap() < share);
            total += f;
        }
        assert!(total <= budget);
        max_in_flight_total = max_in_flight_total.max(total);
        steps += 1;
    };
    let mut got = [0usize; N];
    run(
        &mut nodes,
        &[0, 1, 2, 3, 4],
        Duration::from_secs(3600),
        check,
        |nodes| {
            for (s, g) in got.iter_mut().enumerate().skip(1) {
                for d in received(&mut nodes[0], s) {
                    assert_eq!(d, body(s, *g, LEN), "from {s} #{g}");
                    *g += 1;
                }
            }
            got.iter().skip(1).all(|&g| g == PER)
        },
    );
    // rapid gave 2 the small window and, while it lasts, capped the
    // others' (through's too) at it; through lowered the normal ones'.
    let w: Vec<u64> = (1..N).map(|s| nodes[s].st.dest_buf(0).unwrap()).collect();
    assert_eq!(w[1], 8 * 1024, "{w:?}");
    assert_eq!(w[2], MIN_WINDOW_BYTES, "{w:?}");
    assert_eq!(w[3], MIN_WINDOW_BYTES, "{w:?}");
    assert_eq!(w[0], 8 * 1024, "{w:?}");
    // 2 back to normal: through raises 1's window above the default share.
    nodes[2].st.request_mode(0, Mode::Normal).unwrap();
    until(
        &mut nodes,
        &[0, 1, 2, 3, 4],
        Duration::from_secs(60),
        |nodes| {
            nodes[1].st.dest_buf(0).unwrap() == budget - 3 * MIN_WINDOW_BYTES
                && nodes[2].st.dest_buf(0).unwrap() == MIN_WINDOW_BYTES
        },
    );
    let w: Vec<u64> = (1..N).map(|s| nodes[s].st.dest_buf(0).unwrap()).collect();
    assert!(w[0] > share, "{w:?}");
    for n in &nodes[1..] {
        assert_eq!(n.st.peer_state(0).unwrap(), PeerState::Connected);
    }
    assert!(
        max_in_flight_total > share,
        "the load never filled more than one share"
    );
    eprintln!("ulfc sim: {steps} checks, most in flight toward rank 0: {max_in_flight_total} of {budget} bytes");
}

#[test]
fn disconnect_fails_writes_and_reconnect_delivers_the_rest_exactly_once() {
    const MSGS: usize = 30;
    const LEN: usize = 3000;
    let cfg = CommConfig {
        recv_budget_bytes: 8192,
        ..CommConfig::default()
    };
    let (mut nodes, _) = cluster(2, cfg, FaultConfig::seeded(3).with_loss(0.05));
    let clock = nodes.clock.clone();
    for i in 0..MSGS {
        nodes[0].st.isend(1, 3, &[&body(0, i, LEN)], false).unwrap();
    }
    nodes[0].st.disconnect(1).unwrap();
    assert_eq!(
        nodes[0].st.peer_state(1).unwrap(),
        PeerState::ExplicitDisconnect
    );
    let e = nodes[0].st.isend(1, 3, &[b"late"], false).unwrap_err();
    assert!(matches!(e, CommError::Disconnected { rank: 1 }), "{e}");
    assert!(e.to_string().contains("reconnect"), "{e}");
    // A second of virtual time: nothing new goes.
    let mut got = Vec::new();
    let t = clock.now() + Duration::from_secs(1);
    until(&mut nodes, &[0, 1], Duration::from_secs(10), |nodes| {
        got.extend(received(&mut nodes[1], 0));
        clock.now() >= t
    });
    assert!(
        got.len() < MSGS / 2,
        "{} delivered while disconnected",
        got.len()
    );
    assert_eq!(nodes[0].st.in_flight_bytes(1), 0);
    nodes[0].st.reconnect(1).unwrap();
    until(&mut nodes, &[0, 1], Duration::from_secs(600), |nodes| {
        got.extend(received(&mut nodes[1], 0));
        got.len() >= MSGS && nodes[0].st.in_flight_bytes(1) == 0
    });
    // A little longer: no duplicate follows.
    let t = clock.now() + Duration::from_secs(1);
    until(&mut nodes, &[0, 1], Duration::from_secs(10), |nodes| {
        got.extend(received(&mut nodes[1], 0));
        clock.now() >= t
    });
    assert_eq!(got.len(), MSGS);
    for (i, d) in got.iter().enumerate() {
        assert_eq!(d, &body(0, i, LEN), "message #{i}");
    }
    assert_eq!(nodes[0].st.peer_state(1).unwrap(), PeerState::Connected);
    nodes[0].st.isend(1, 3, &[b"after"], false).unwrap();
}

#[test]
fn a_silent_peer_is_implicitly_disconnected_and_recovers_when_it_answers() {
    // The failure detector off: only CTP speaks (suspected at its spec
    // deadline, "not confirmed" at its user timeout).
    let cfg = CommConfig {
        failure_timeout: None,
        ..CommConfig::default()
    };
    let (mut nodes, _) = cluster(2, cfg, FaultConfig::default());
    // Connect first.
    nodes[0].st.isend(1, 0, &[b"hello"], false).unwrap();
    until(&mut nodes, &[0, 1], Duration::from_secs(10), |n| {
        n[0].st.peer_state(1).unwrap() == PeerState::Connected
    });
    assert_eq!(received(&mut nodes[1], 0), vec![b"hello".to_vec()]);
    // Rank 1 goes silent (not stepped): CTP suspects it first (nothing
    // fails), then its "not confirmed" comes.
    nodes[0].st.isend(1, 0, &[b"while silent"], false).unwrap();
    until(&mut nodes, &[0], Duration::from_secs(10), |n| {
        n[0].st.unresponsive(1).unwrap().is_some()
    });
    assert_eq!(nodes[0].st.peer_state(1).unwrap(), PeerState::Connected);
    until(&mut nodes, &[0], Duration::from_secs(600), |n| {
        n[0].st.peer_state(1).unwrap() == PeerState::ImplicitDisconnect
    });
    let e = nodes[0].st.isend(1, 0, &[b"refused"], false).unwrap_err();
    assert!(matches!(e, CommError::PeerFailed { rank: 1, .. }), "{e}");
    // Explicit wins over implicit until reconnect.
    nodes[0].st.disconnect(1).unwrap();
    assert_eq!(
        nodes[0].st.peer_state(1).unwrap(),
        PeerState::ExplicitDisconnect
    );
    nodes[0].st.reconnect(1).unwrap();
    assert_eq!(
        nodes[0].st.peer_state(1).unwrap(),
        PeerState::ImplicitDisconnect
    );
    // Rank 1 answers again: CTP's resend is confirmed, the state recovers
    // by itself and the message kept is delivered once.
    let mut got = Vec::new();
    until(&mut nodes, &[0, 1], Duration::from_secs(600), |n| {
        got.extend(received(&mut n[1], 0));
        n[0].st.peer_state(1).unwrap() == PeerState::Connected && !got.is_empty()
    });
    assert_eq!(got, vec![b"while silent".to_vec()]);
    assert_eq!(nodes[0].st.stats.implicit_recoveries, 1);
    nodes[0].st.isend(1, 0, &[b"after"], false).unwrap();
}

#[test]
fn sequence_reset_renumbers_and_the_peer_follows() {
    let (mut nodes, _) = cluster(
        2,
        CommConfig::default(),
        FaultConfig::seeded(9).with_loss(0.05),
    );
    let mut got = Vec::new();
    for i in 0..3 {
        nodes[0]
            .st
            .isend(1, 0, &[&body(0, i, 2000)], false)
            .unwrap();
    }
    let e = nodes[0].st.reset_seq(1).unwrap_err();
    assert!(matches!(e, CommError::ResetBusy { rank: 1, .. }), "{e}");
    until(&mut nodes, &[0, 1], Duration::from_secs(600), |n| {
        got.extend(received(&mut n[1], 0));
        got.len() == 3 && n[0].st.in_flight_bytes(1) == 0
    });
    nodes[0].st.reset_seq(1).unwrap();
    for i in 3..6 {
        nodes[0]
            .st
            .isend(1, 0, &[&body(0, i, 2000)], false)
            .unwrap();
    }
    until(&mut nodes, &[0, 1], Duration::from_secs(600), |n| {
        got.extend(received(&mut n[1], 0));
        got.len() >= 6 && n[0].st.in_flight_bytes(1) == 0
    });
    let want: Vec<Vec<u8>> = (0..6).map(|i| body(0, i, 2000)).collect();
    assert_eq!(got, want);
    assert_eq!(nodes[1].st.stats.refused_fragments, 0);
}
