//! The communicator's protocol state over CTP endpoints on simulated links
//! (`testkit::sim`: virtual clock, seeded loss, duplication and
//! reordering), deterministic: N ranks on one switch exchange tagged
//! messages through receives posted before and after the traffic, with
//! wildcards; every message arrives once, byte-exact, in send order per
//! (source, tag).

use std::collections::HashMap;
use std::time::Duration;

use ctp::EthAddr;
use testkit::sim::{self as ts, FaultConfig, Link};

use super::{Node, PORT};
use crate::matching::{SourceSel, Tag, TagSel};
use crate::request::{Completion, ReqState};
use crate::CommConfig;

fn body(src: usize, dst: usize, tag: Tag, i: usize) -> Vec<u8> {
    let len = match (src + dst + i) % 5 {
        0 => 0,
        1 => 10,
        2 => 1400,
        3 => 4000 + i,
        _ => 9000 + 13 * src,
    };
    let seed = ((src as u64) << 40) | ((dst as u64) << 24) | ((tag as u64) << 8) | i as u64;
    (0..len)
        .map(|k| (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (k % 56)) as u8 ^ k as u8)
        .collect()
}

#[test]
fn four_ranks_on_a_lossy_reordering_switch_keep_mpi_order() {
    const N: usize = 4;
    const PER: usize = 10;
    const TAGS: Tag = 3;
    let f = FaultConfig::seeded(11)
        .with_loss(0.05)
        .with_duplicate(0.03)
        .with_reorder(0.2, Duration::from_micros(300))
        .with_delay(Duration::from_micros(20), Duration::from_micros(10));
    let mut sim = ts::Sim::new((0..N).map(|r| format!("rank{r}")));
    let ports = sim.switch(ts::mtu(1500), vec![f; N]);
    let hosts: Vec<EthAddr> = ports
        .iter()
        .map(|p| runtime::EthAddr::new(p.mac(), PORT))
        .collect();
    let cfg = CommConfig {
        fragment_bytes: 3000,
        window_fragments: 8,
        ..CommConfig::default()
    };
    let t0 = sim.now();
    let mut sim = sim.populate(ports, |r, p| Node::new(p, r, &hosts, cfg.clone(), t0));
    // Receives posted before any traffic: for each source its tag 0 by
    // (source, 0), and N * PER wildcards (ANY_SOURCE, 1). Tag 2 is received
    // afterwards with (ANY_SOURCE, ANY_TAG) from the unexpected queue.
    let mut recvs: Vec<Vec<u64>> = vec![Vec::new(); N];
    for (r, n) in sim.iter_mut().enumerate() {
        for src in 0..N {
            for _ in 0..PER {
                recvs[r].push(
                    n.st.irecv(SourceSel::Rank(src), TagSel::Tag(0), false)
                        .unwrap(),
                );
            }
        }
        for _ in 0..N * PER {
            recvs[r].push(n.st.irecv(SourceSel::Any, TagSel::Tag(1), false).unwrap());
        }
    }
    for (r, n) in sim.iter_mut().enumerate() {
        for i in 0..PER {
            for tag in 0..TAGS {
                for dst in 0..N {
                    n.st.isend(dst, tag, &[&body(r, dst, tag, i)], false)
                        .unwrap();
                }
            }
        }
    }
    // Run until every rank holds all its tag-2 messages as unexpected and
    // its posted receives are complete.
    let done = |nodes: &mut [Node], recvs: &[Vec<u64>]| {
        nodes.iter().zip(recvs).all(|(n, rs)| {
            rs.iter().all(|id| n.st.is_complete(*id).unwrap())
                && n.st.snapshot().unexpected == N * PER
        })
    };
    sim.run(Duration::from_secs(3600), |s| done(s, &recvs));
    let mut early = 0;
    for (r, n) in sim.iter_mut().enumerate() {
        let mut next: HashMap<(usize, Tag), usize> = HashMap::new();
        let mut check = |src: usize, tag: Tag, data: &[u8]| {
            let i = next.entry((src, tag)).or_default();
            assert!(
                data == body(src, r, tag, *i),
                "rank {r}: message from {src} tag {tag} is not #{i}"
            );
            *i += 1;
        };
        for id in &recvs[r] {
            match n.st.take_complete(*id).unwrap().finish().unwrap() {
                Completion::Received(s, d) => check(s.source, s.tag, &d),
                c => panic!("{c:?}"),
            }
        }
        for _ in 0..N * PER {
            let id = n.st.irecv(SourceSel::Any, TagSel::Any, false).unwrap();
            match n.st.take_complete(id).map(ReqState::finish) {
                Some(Ok(Completion::Received(s, d))) => {
                    assert_eq!(s.tag, 2);
                    check(s.source, s.tag, &d)
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
        assert_eq!(next.values().sum::<usize>(), N * PER * TAGS as usize);
        let s = n.st.snapshot();
        assert_eq!(
            (
                s.unexpected,
                s.posted,
                s.held,
                s.malformed,
                s.refused_fragments
            ),
            (0, 0, 0, 0, 0),
            "rank {r}: {s:?}"
        );
        early += s.out_of_order_fragments;
    }
    // Seeded faults on the virtual clock: the same run every time, and
    // one that exercises the reorder buffers.
    assert!(early > 0, "no fragment arrived ahead of sequence");
    eprintln!(
        "sim: {early} fragments ahead of sequence; virtual time {:?}",
        sim.now() - t0
    );
}
