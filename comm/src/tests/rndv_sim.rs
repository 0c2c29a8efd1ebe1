//! Rendezvous (`state_rndv.rs`) on simulated links: messages longer than
//! the eager limit are announced, matched, and pulled by the receiver into
//! the receive's buffer; under loss, duplication and reordering every
//! message arrives once, byte-exact, in MPI's order, and what is resent is
//! what the receiver asked for again.

use std::time::Duration;

use testkit::sim::FaultConfig;

use super::{cluster, until, Node};
use crate::matching::{SourceSel, Tag, TagSel};
use crate::request::Completion;
use crate::CommConfig;

/// Deterministic body `i`, `len` bytes.
fn body(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// CTP's and comm's counters of the pulls, one line.
fn counters(n: &Node) -> String {
    let c = n.ep.stats();
    let s = n.st.snapshot();
    format!(
        "rendezvous sent {} received {} | parts sent {} resent {} skipped {} | requests {} retries {} timeouts {} | parts received {} duplicates {} | CTP data resent {} duplicates {}",
        s.rendezvous_sent,
        s.rendezvous_received,
        c.pulled_parts_sent,
        c.pulled_parts_resent,
        c.pull_resends_skipped,
        c.pull_requests_sent,
        c.pull_retries,
        c.pull_timeouts,
        c.pulled_parts_received,
        c.pulled_duplicates,
        c.data_packets_resent,
        c.duplicates_received,
    )
}

/// The case, through the communicator: rank 0 sends one 64 MiB
/// message and 64 of 1 MiB (nonblocking, all at once) to rank 1, which
/// posted 65 receives first; 1 % of the frames are lost each way. Every
/// message arrives once, byte-exact, in order; the parts resent are few
/// and all asked for by the receiver.
#[test]
fn sixty_four_mib_and_sixty_four_posted_one_mib_under_one_percent_loss() {
    let f = FaultConfig::seeded(39)
        .with_loss(0.01)
        .with_delay(Duration::from_micros(20), Duration::from_micros(5));
    let cfg = CommConfig {
        eager_limit: 64 << 10,
        ..CommConfig::default()
    };
    let (mut sim, _) = cluster(2, cfg, f);
    let mut want: Vec<(u64, usize)> = vec![(0, 64 << 20)];
    want.extend((1..=64).map(|i| (i, 1 << 20)));
    let recvs: Vec<u64> = want
        .iter()
        .map(|_| {
            sim[1]
                .st
                .irecv(SourceSel::Rank(0), TagSel::Tag(5), false)
                .unwrap()
        })
        .collect();
    let sends: Vec<u64> = want
        .iter()
        .map(|&(i, len)| sim[0].st.isend(1, 5, &[&body(i, len)], false).unwrap())
        .collect();
    until(&mut sim, &[0, 1], Duration::from_secs(600), |n| {
        recvs.iter().all(|id| n[1].st.is_complete(*id).unwrap())
            && sends.iter().all(|id| n[0].st.is_complete(*id).unwrap())
            && n[0].ep.storage_sizes().awaiting_confirmation == 0
    });
    for (id, &(i, len)) in recvs.iter().zip(&want) {
        match sim[1].st.take_complete(*id).unwrap().finish().unwrap() {
            Completion::Received(s, d) => {
                assert_eq!((s.source, s.tag, s.len), (0, 5, len));
                assert!(d == body(i, len), "message {i} differs");
            }
            c => panic!("{c:?}"),
        }
    }
    println!("rank 0: {}", counters(&sim[0]));
    println!("rank 1: {}", counters(&sim[1]));
    let (a, b) = (sim[0].ep.stats(), sim[1].ep.stats());
    let parts: u64 = want.iter().map(|w| (w.1 as u64).div_ceil(1469)).sum();
    assert_eq!(sim[0].st.snapshot().rendezvous_sent, 65);
    assert_eq!(a.pulled_parts_sent - a.pulled_parts_resent, parts);
    assert!(b.pull_retries > 0, "1 % loss and no retry?");
    assert!(
        a.pulled_parts_resent < parts / 20,
        "resent {} of {parts} parts",
        a.pulled_parts_resent
    );
    // The timers resent only announcements, dones and control messages.
    assert!(a.data_packets_resent + b.data_packets_resent < 200);
}

/// Eager and rendezvous messages of one tag, interleaved, arrive before
/// any receive is posted: the announcements wait in the unexpected queue
/// as handles (no byte of them is here), and the receives posted later
/// take the messages in send order (MPI's non-overtaking rule), each
/// rendezvous pulled then.
#[test]
fn unexpected_rendezvous_are_handles_and_keep_mpi_order() {
    let f = FaultConfig::seeded(7)
        .with_loss(0.02)
        .with_duplicate(0.01)
        .with_reorder(0.05, Duration::from_micros(200));
    let cfg = CommConfig {
        eager_limit: 4096,
        ..CommConfig::default()
    };
    let (mut sim, _) = cluster(2, cfg, f);
    let lens = [10usize, 100_000, 20, 2 << 20, 4096, 4097, 0, 300_000];
    for (i, &len) in lens.iter().enumerate() {
        sim[0]
            .st
            .isend(1, 3, &[&body(i as u64, len)], false)
            .unwrap();
    }
    until(&mut sim, &[0, 1], Duration::from_secs(60), |n| {
        n[1].st.snapshot().unexpected == lens.len()
    });
    let s = sim[1].st.snapshot();
    let eager: u64 = lens.iter().filter(|&&l| l <= 4096).map(|&l| l as u64).sum();
    assert_eq!(
        s.unexpected_bytes, eager,
        "rendezvous messages are held as handles"
    );
    assert_eq!(sim[1].ep.stats().pulled_parts_received, 0);
    let recvs: Vec<u64> = lens
        .iter()
        .map(|_| {
            sim[1]
                .st
                .irecv(SourceSel::Rank(0), TagSel::Tag(3 as Tag), false)
                .unwrap()
        })
        .collect();
    until(&mut sim, &[0, 1], Duration::from_secs(60), |n| {
        recvs.iter().all(|id| n[1].st.is_complete(*id).unwrap())
            && n[0].ep.storage_sizes().awaiting_confirmation == 0
    });
    for (i, id) in recvs.iter().enumerate() {
        match sim[1].st.take_complete(*id).unwrap().finish().unwrap() {
            Completion::Received(s, d) => {
                assert_eq!(s.len, lens[i], "receive {i}");
                assert!(
                    d == body(i as u64, lens[i]),
                    "receive {i} took another message"
                );
            }
            c => panic!("{c:?}"),
        }
    }
    let s = sim[0].st.snapshot();
    assert_eq!(s.rendezvous_sent, 4);
    println!("rank 0: {}", counters(&sim[0]));
    println!("rank 1: {}", counters(&sim[1]));
}

/// A rank whose peer dies in the middle of a pull: the receive fails
/// (at the failure timeout) instead of waiting forever.
#[test]
fn a_pull_from_a_dead_peer_fails_the_receive() {
    let cfg = CommConfig {
        failure_timeout: Some(Duration::from_secs(2)),
        suspect_timeout: Some(Duration::from_millis(500)),
        eager_limit: 64 << 10,
        ..CommConfig::default()
    };
    let (mut sim, _) = cluster(2, cfg, FaultConfig::default());
    let len = 32 << 20;
    let r = sim[1]
        .st
        .irecv(SourceSel::Rank(0), TagSel::Any, false)
        .unwrap();
    sim[0].st.isend(1, 1, &[&body(1, len)], false).unwrap();
    until(&mut sim, &[0, 1], Duration::from_secs(10), |n| {
        n[1].ep.stats().pulled_parts_received > 1000
    });
    // Rank 0 stops for good; rank 1's failure detector watches the rank
    // it pulls from.
    until(&mut sim, &[1], Duration::from_secs(30), |n| {
        n[1].st.is_complete(r).unwrap()
    });
    let e = sim[1].st.take_complete(r).unwrap().finish().unwrap_err();
    assert!(
        matches!(e, crate::CommError::PeerFailed { rank: 0, .. }),
        "{e}"
    );
    assert_eq!(sim[1].ep.pulls(), 0, "the pull was cancelled");
}
