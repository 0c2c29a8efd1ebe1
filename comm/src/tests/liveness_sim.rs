//! Failure detection on the virtual clock (`testkit::sim`): a rank that
//! stops is declared failed by every rank waiting on it within the bound,
//! and the receives naming it fail; its restart (a new process at the same
//! address) rejoins and exchanges messages exactly once, with nothing of
//! the old process's traffic leaking into the new one; a stalled process
//! that comes back after it was declared failed is expelled (explicit
//! errors), its late messages counted and dropped.

use std::time::{Duration, Instant};

use testkit::sim::FaultConfig;

use super::{cluster, received, run, until, Node};
use crate::flow::PeerState;
use crate::matching::{SourceSel, TagSel};
use crate::{CommConfig, CommError};

/// The failure bound of these tests.
const T: Duration = Duration::from_secs(1);

fn cfg() -> CommConfig {
    CommConfig {
        failure_timeout: Some(T),
        ..CommConfig::default()
    }
}

/// The error a finished receive request `id` of node `n` ended with.
fn recv_error(n: &mut Node, id: u64) -> CommError {
    let r = n.st.take_complete(id).expect("the receive finished");
    r.finish().expect_err("the receive failed")
}

#[test]
fn a_killed_rank_is_reported_within_the_bound_and_its_restart_rejoins() {
    const N: usize = 4;
    const DEAD: usize = 3;
    let f = FaultConfig::seeded(3).with_loss(0.01);
    let (mut nodes, hosts) = cluster(N, cfg(), f);
    let clock = nodes.clock.clone();
    let all: Vec<usize> = (0..N).collect();
    let survivors: Vec<usize> = (0..DEAD).collect();
    for (s, node) in nodes.iter_mut().enumerate() {
        for d in (0..N).filter(|&d| d != s) {
            let m = format!("{s}->{d}");
            node.st.isend(d, 1, &[m.as_bytes()], false).unwrap();
        }
    }
    let ten = Duration::from_secs(10);
    until(&mut nodes, &all, ten, |n| {
        n.iter().all(|x| x.st.snapshot().unexpected == N - 1)
    });
    for (r, node) in nodes.iter_mut().enumerate() {
        for s in (0..N).filter(|&s| s != r) {
            assert_eq!(received(node, s), vec![format!("{s}->{r}").into_bytes()]);
        }
    }

    // Rank 3 dies (no longer stepped). The others wait on it: a receive
    // naming it, and rank 0 sends to it.
    let t_kill = clock.now();
    let recvs: Vec<u64> = survivors
        .iter()
        .map(|&s| {
            nodes[s]
                .st
                .irecv(SourceSel::Rank(DEAD), TagSel::Any, false)
                .unwrap()
        })
        .collect();
    nodes[0]
        .st
        .isend(DEAD, 1, &[b"to the dead"], false)
        .unwrap();
    let mut seen: Vec<Option<Instant>> = vec![None; N];
    run(
        &mut nodes,
        &survivors,
        ten,
        |n| {
            for &s in &survivors {
                if seen[s].is_none() && n[s].st.peer_state(DEAD).unwrap() == PeerState::Failed {
                    seen[s] = Some(clock.now());
                }
            }
        },
        |n| {
            survivors
                .iter()
                .all(|&s| n[s].st.peer_state(DEAD).unwrap() == PeerState::Failed)
        },
    );
    for &s in &survivors {
        let after = seen[s].unwrap() - t_kill;
        assert!(
            after >= T / 2 && after <= T + T / 32 + Duration::from_millis(20),
            "rank {s} declared rank {DEAD} failed {after:?} after its death (bound {T:?})"
        );
        let e = recv_error(&mut nodes[s], recvs[s]);
        // Rank 0 also sent to it: CTP's "not confirmed" may come first.
        assert!(
            matches!(e, CommError::PeerFailed { rank: DEAD, .. })
                && (s == 0 || e.to_string().contains("no answer")),
            "rank {s}: {e}"
        );
        let e = nodes[s].st.isend(DEAD, 1, &[b"x"], false).unwrap_err();
        assert!(matches!(e, CommError::PeerFailed { rank: DEAD, .. }), "{e}");
        assert_eq!(nodes[s].st.snapshot().detected_failures, 1);
    }

    // A new process at rank 3's address: the survivors' probes reach it,
    // it announces its incarnation, and they take it back.
    nodes[DEAD].restart(DEAD, &hosts, cfg(), clock.now());
    until(&mut nodes, &all, T * 4, |n| {
        survivors
            .iter()
            .all(|&s| n[s].st.peer_state(DEAD).unwrap() != PeerState::Failed)
    });
    for &s in &survivors {
        assert_eq!(nodes[s].st.snapshot().rejoins, 1, "rank {s}");
    }
    for &s in &survivors {
        let m = format!("new {s}");
        nodes[DEAD].st.isend(s, 2, &[m.as_bytes()], false).unwrap();
        let m = format!("back {s}");
        nodes[s].st.isend(DEAD, 2, &[m.as_bytes()], false).unwrap();
    }
    until(&mut nodes, &all, ten, |n| {
        n[DEAD].st.snapshot().unexpected == DEAD
            && survivors
                .iter()
                .all(|&s| n[s].st.snapshot().unexpected == 1)
    });
    // Exactly once, and nothing sent to the old process reaches the new.
    for &s in &survivors {
        assert_eq!(
            received(&mut nodes[s], DEAD),
            vec![format!("new {s}").into_bytes()]
        );
        assert_eq!(
            received(&mut nodes[DEAD], s),
            vec![format!("back {s}").into_bytes()]
        );
    }
}

#[test]
fn a_stalled_process_declared_failed_is_expelled_when_it_comes_back() {
    let (mut nodes, _) = cluster(2, cfg(), FaultConfig::default());
    nodes[1].st.isend(0, 0, &[b"hello"], false).unwrap();
    let ten = Duration::from_secs(10);
    until(&mut nodes, &[0, 1], ten, |n| {
        n[0].st.snapshot().unexpected == 1
    });
    assert_eq!(received(&mut nodes[0], 1), vec![b"hello".to_vec()]);
    // Rank 1 stalls while rank 0 waits on it.
    let r = nodes[0]
        .st
        .irecv(SourceSel::Rank(1), TagSel::Any, false)
        .unwrap();
    until(&mut nodes, &[0], ten, |n| {
        n[0].st.peer_state(1).unwrap() == PeerState::Failed
    });
    assert!(matches!(
        recv_error(&mut nodes[0], r),
        CommError::PeerFailed { rank: 1, .. }
    ));
    // It comes back, the same process, and sends.
    nodes[1].st.isend(0, 0, &[b"late"], false).unwrap();
    run(
        &mut nodes,
        &[0, 1],
        ten,
        |_| {},
        |n| n[1].st.peer_state(0).unwrap() == PeerState::Failed,
    );
    let e = nodes[1].st.isend(0, 0, &[b"again"], false).unwrap_err();
    assert!(
        e.to_string().contains("declared this rank failed"),
        "rank 1 gets told: {e}"
    );
    let st0 = nodes[0].st.snapshot();
    assert!(st0.from_failed >= 1, "{st0:?}");
    assert_eq!(st0.rejoins, 0);
    // Nothing of the stale process was delivered.
    assert_eq!(st0.unexpected, 0, "{st0:?}");
}

#[test]
fn no_failure_is_declared_while_the_peers_last_messages_are_held_back() {
    let cfg = CommConfig {
        limits: crate::matching::MatchLimits {
            max_unexpected_messages: 1,
            ..Default::default()
        },
        ..cfg()
    };
    let (mut nodes, _) = cluster(2, cfg.clone(), FaultConfig::default());
    let clock = nodes.clock.clone();
    // Rank 0 waits on rank 1 through a receive of another tag.
    let waiting = nodes[0]
        .st
        .irecv(SourceSel::Rank(1), TagSel::Tag(99), false)
        .unwrap();
    for i in 0..3u8 {
        nodes[1].st.isend(0, 1, &[&[i]], false).unwrap();
    }
    let ten = Duration::from_secs(10);
    until(&mut nodes, &[0, 1], ten, |n| {
        n[0].st.holding() && !n[1].st.has_work_for_ctp()
    });
    // Rank 1 exits having sent everything; rank 0 holds its messages back
    // (one unexpected, one held, one still in CTP) for five bounds.
    let end = clock.now() + T * 5;
    until(&mut nodes, &[0], ten, |_| clock.now() >= end);
    assert_ne!(nodes[0].st.peer_state(1).unwrap(), PeerState::Failed);
    // The application takes them, all three in order, though rank 1 may
    // be implicitly disconnected by now (CTP's "not confirmed" for our
    // probe): what it sent before is still delivered.
    let mut got = Vec::new();
    for _ in 0..3 {
        let id = nodes[0]
            .st
            .irecv(SourceSel::Rank(1), TagSel::Tag(1), false)
            .unwrap();
        let soon = clock.now() + Duration::from_millis(5);
        until(&mut nodes, &[0], ten, |n| {
            clock.now() >= soon || n[0].st.is_complete(id).unwrap()
        });
        match nodes[0].st.take_complete(id).map(|r| r.finish()) {
            Some(Ok(crate::request::Completion::Received(_, d))) => got.push(d),
            other => panic!("message {} from rank 1: {other:?}", got.len()),
        }
    }
    assert_eq!(got, vec![vec![0], vec![1], vec![2]]);
    // Then the silence counts: rank 1 is declared failed.
    until(&mut nodes, &[0], ten, |n| {
        n[0].st.peer_state(1).unwrap() == PeerState::Failed
    });
    assert!(matches!(
        recv_error(&mut nodes[0], waiting),
        CommError::PeerFailed { rank: 1, .. }
    ));
}

#[test]
fn a_stalled_rank_is_suspected_at_once_and_failed_only_at_the_failure_timeout() {
    // The defaults: suspected after 3 s of silence, failed after 60 s.
    let cfg = CommConfig::default();
    let (s, t) = (cfg.suspect_timeout.unwrap(), cfg.failure_timeout.unwrap());
    let check = s / 32 + Duration::from_millis(20);
    let (mut nodes, _) = cluster(2, cfg, FaultConfig::default());
    let clock = nodes.clock.clone();
    nodes[1].st.isend(0, 0, &[b"hello"], false).unwrap();
    let ten = Duration::from_secs(10);
    until(&mut nodes, &[0, 1], ten, |n| {
        n[0].st.snapshot().unexpected == 1
    });
    assert_eq!(received(&mut nodes[0], 1), vec![b"hello".to_vec()]);

    // Rank 1 stalls for 20 s while rank 0 waits on it and sends to it.
    let waiting = nodes[0]
        .st
        .irecv(SourceSel::Rank(1), TagSel::Any, false)
        .unwrap();
    nodes[0].st.isend(1, 0, &[b"during"], false).unwrap();
    let stall = clock.now();
    until(&mut nodes, &[0], ten, |n| {
        n[0].st.unresponsive(1).unwrap().is_some()
    });
    let suspected = clock.now() - stall;
    assert!(
        suspected <= s + check,
        "suspected {suspected:?} after the stall (bound {s:?})"
    );
    let end = stall + Duration::from_secs(20);
    until(&mut nodes, &[0], Duration::from_secs(30), |_| {
        clock.now() >= end
    });
    let silence = nodes[0]
        .st
        .unresponsive(1)
        .unwrap()
        .expect("still suspected");
    assert!(silence >= Duration::from_secs(19), "{silence:?}");
    let state = nodes[0].st.peer_state(1).unwrap();
    assert!(
        matches!(state, PeerState::Connected | PeerState::Connecting),
        "{state:?}"
    );
    assert!(!nodes[0].st.is_complete(waiting).unwrap(), "nothing fails");
    nodes[0]
        .st
        .isend(1, 0, &[b"while suspected"], false)
        .unwrap();

    // It comes back: the suspicion ends, everything arrives once.
    nodes[1].st.isend(0, 0, &[b"back"], false).unwrap();
    let mut got = Vec::new();
    until(&mut nodes, &[0, 1], ten, |n| {
        got.extend(received(&mut n[1], 0));
        n[0].st.is_complete(waiting).unwrap() && got.len() == 2
    });
    assert_eq!(got, vec![b"during".to_vec(), b"while suspected".to_vec()]);
    match nodes[0].st.take_complete(waiting).map(|r| r.finish()) {
        Some(Ok(crate::request::Completion::Received(_, d))) => assert_eq!(d, b"back"),
        other => panic!("{other:?}"),
    }
    assert_eq!(nodes[0].st.unresponsive(1).unwrap(), None);
    let st0 = nodes[0].st.snapshot();
    assert!(
        st0.suspicions >= 1 && st0.suspicion_recoveries >= 1,
        "{st0:?}"
    );
    assert_eq!(st0.detected_failures, 0);

    // It stalls for good: suspected again at once, failed at the timeout.
    let waiting = nodes[0]
        .st
        .irecv(SourceSel::Rank(1), TagSel::Any, false)
        .unwrap();
    let stall = clock.now();
    let mut suspected = None;
    run(
        &mut nodes,
        &[0],
        t * 2,
        |n| {
            if suspected.is_none() && n[0].st.unresponsive(1).unwrap().is_some() {
                suspected = Some(clock.now() - stall);
            }
        },
        |n| n[0].st.peer_state(1).unwrap() == PeerState::Failed,
    );
    let failed = clock.now() - stall;
    let suspected = suspected.expect("suspected before it failed");
    assert!(suspected <= s + check, "suspected after {suspected:?}");
    assert!(
        failed + Duration::from_millis(100) >= t && failed <= t + check,
        "failed {failed:?} after the stall (failure_timeout {t:?})"
    );
    assert!(matches!(
        recv_error(&mut nodes[0], waiting),
        CommError::PeerFailed { rank: 1, .. }
    ));
    assert_eq!(nodes[0].st.unresponsive(1).unwrap(), None);
}
