//! The communicator's protocol state over CTP endpoints on simulated links
//! (`link::sim`: virtual clock, seeded loss, duplication and
//! reordering), deterministic: N ranks on one switch exchange tagged
//! messages through receives posted before and after the traffic, with
//! wildcards; every message arrives once, byte-exact, in send order per
//! (source, tag).

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant, SystemTime};

use ctp::{Config, EdpAddr, Endpoint};
use edp::{EdpConfig, EdpSocket};
use link::fault::FaultConfig;
use link::sim::{SimClock, SimLink, SimSwitch};
use runtime::{Progress, RuntimeConfig};

use crate::matching::{SourceSel, Tag, TagSel};
use crate::request::{Completion, ReqState};
use crate::state::State;
use crate::CommConfig;

pub(crate) const PORT: u16 = 1600;

pub(crate) struct Node {
    pub ep: Endpoint<EdpAddr>,
    tr: EdpSocket,
    pub st: State<EdpAddr>,
    buf: Vec<u8>,
}

impl Node {
    pub fn new(
        link: SimLink,
        rank: usize,
        hosts: &[EdpAddr],
        cfg: CommConfig,
        t0: Instant,
    ) -> Node {
        let ecfg = EdpConfig {
            runtime: RuntimeConfig {
                progress: Progress::Callers,
                ..RuntimeConfig::default()
            },
            ..EdpConfig::default()
        };
        let mut tr = EdpSocket::from_link_with(Box::new(link), PORT, &ecfg).unwrap();
        tr.set_nonblocking(true).unwrap();
        let ep = Endpoint::new(
            Config::for_edp_mtu(1500),
            t0,
            SystemTime::UNIX_EPOCH,
            rank as u64 + 1,
            None,
        );
        let buf = vec![0; tr.mtu().max(ep.config().max_packet_len())];
        Node {
            ep,
            tr,
            st: State::new(rank, hosts, cfg).unwrap(),
            buf,
        }
    }

    /// One step at `now`: receive, timers, deliveries into the state, the
    /// state's fragments into the endpoint, transmit.
    pub fn step(&mut self, now: Instant, hosts: &[EdpAddr]) {
        loop {
            match self.tr.recv_from(&mut self.buf) {
                Ok((n, mac, port)) => self.ep.handle_datagram(now, (mac, port), &self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("recv: {e}"),
            }
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        while !self.st.holding() {
            match self.ep.poll_delivery() {
                Some(d) => self.st.on_delivery(d),
                None => break,
            }
        }
        self.st.pump_held();
        self.st.liveness_tick(now);
        self.st.pump_sends(&mut self.ep, now);
        let _ = hosts;
        while let Some(t) = self.ep.poll_transmit(&mut self.buf) {
            match self.tr.send_to(&self.buf[..t.len], t.dest) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("send: {e}"),
            }
        }
    }

    /// The process restarts at `now` on the same interface: a new CTP
    /// endpoint and communicator state (a new incarnation); frames that
    /// reached the dead process are gone.
    pub fn restart(&mut self, rank: usize, hosts: &[EdpAddr], cfg: CommConfig, now: Instant) {
        while self.tr.recv_from(&mut self.buf).is_ok() {}
        self.ep = Endpoint::new(
            Config::for_edp_mtu(1500),
            now,
            SystemTime::UNIX_EPOCH,
            rank as u64 + 1001,
            None,
        );
        self.st = State::new(rank, hosts, cfg).unwrap();
    }

    pub fn next_event(&mut self) -> Option<Instant> {
        let link_at = self
            .tr
            .runtime()
            .with_engine_untimed(|e| e.link().poll_at());
        match (self.ep.poll_timeout(), link_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

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
    let clock = SimClock::new();
    let t0 = clock.now();
    let f = FaultConfig::seeded(11)
        .with_loss(0.05)
        .with_duplicate(0.03)
        .with_reorder(0.2, Duration::from_micros(300))
        .with_delay(Duration::from_micros(20), Duration::from_micros(10));
    let links = SimSwitch::new(&clock, N, 1500, f);
    let macs: Vec<_> = links.iter().map(link::Link::mac).collect();
    let hosts: Vec<EdpAddr> = macs.iter().map(|m| (*m, PORT)).collect();
    let cfg = CommConfig {
        fragment_bytes: 3000,
        window_fragments: 8,
        ..CommConfig::default()
    };
    let mut nodes: Vec<Node> = links
        .into_iter()
        .enumerate()
        .map(|(r, l)| Node::new(l, r, &hosts, cfg.clone(), t0))
        .collect();
    // Receives posted before any traffic: for each source its tag 0 by
    // (source, 0), and N * PER wildcards (ANY_SOURCE, 1). Tag 2 is received
    // afterwards with (ANY_SOURCE, ANY_TAG) from the unexpected queue.
    let mut recvs: Vec<Vec<u64>> = vec![Vec::new(); N];
    for (r, n) in nodes.iter_mut().enumerate() {
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
    for (r, n) in nodes.iter_mut().enumerate() {
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
    let limit = t0 + Duration::from_secs(3600);
    let done = |nodes: &mut [Node], recvs: &[Vec<u64>]| {
        nodes.iter().zip(recvs).all(|(n, rs)| {
            rs.iter().all(|id| n.st.is_complete(*id).unwrap())
                && n.st.snapshot().unexpected == N * PER
        })
    };
    loop {
        let now = clock.now();
        for n in nodes.iter_mut() {
            n.step(now, &hosts);
        }
        if done(&mut nodes, &recvs) {
            break;
        }
        let next = nodes.iter_mut().filter_map(|n| n.next_event()).min();
        let t = next.expect("events pending while messages are missing");
        assert!(t < limit, "no progress within an hour of virtual time");
        if t > now {
            clock.advance_to(t);
        }
    }
    let mut early = 0;
    for (r, n) in nodes.iter_mut().enumerate() {
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
        clock.now() - t0
    );
}
