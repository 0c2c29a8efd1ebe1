//! L1: pulled messages (PROTOCOL.md "Pulled messages") between CTP
//! endpoints over EDP sockets on SimLinks (virtual clock, seeded faults),
//! driven by `testkit::sim`: a body offered by one endpoint is pulled by
//! the other into a buffer of its own, byte-exact, exactly once; resends
//! happen only when the receiver asks for what it misses (never while it
//! sleeps), and a silent sender fails the pull.

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant, SystemTime};

use ctp::{Config, Delivery, Endpoint, ErrorType, EthAddr, MsgId, Offer, PullId, Pulled, Stats};
use testkit::sim::{self, edp_socket, edp_socket_poll_at, EdpSocket, FaultConfig, Link, Port, Sim};

const PORT: u16 = 1717;

/// What a node does with an offer it receives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// Pull the whole body into a buffer of its size.
    PullAll,
    /// Keep it (the test pulls).
    Keep,
}

struct Node {
    ep: Endpoint<EthAddr>,
    tr: EdpSocket,
    addr: EthAddr,
    buf: Vec<u8>,
    policy: Policy,
    /// Offers received: (sender, head, offer).
    offers: Vec<(EthAddr, Vec<u8>, Offer)>,
    /// Pulls started here, by id: the head of their offer.
    pulls: HashMap<PullId, Vec<u8>>,
    /// Pulls ended: (head of the offer, the end).
    pulled: Vec<(Vec<u8>, Pulled<EthAddr>)>,
    /// Peers suspected (`ErrorType::Unresponsive` deliveries): a notice,
    /// not a failure; every other error delivery fails the test.
    suspected: u64,
}

impl Node {
    fn new(port: Port, cfg: Config, seed: u64, t0: Instant) -> Node {
        let mac = port.mac();
        let tr = edp_socket(port, PORT);
        let ep = Endpoint::new(cfg, t0, SystemTime::UNIX_EPOCH, seed, None);
        let n = tr.mtu().max(ep.config().max_packet_len());
        Node {
            ep,
            tr,
            addr: runtime::EthAddr::new(mac, PORT),
            buf: vec![0; n],
            policy: Policy::PullAll,
            offers: Vec::new(),
            pulls: HashMap::new(),
            pulled: Vec::new(),
            suspected: 0,
        }
    }

    fn pull(&mut self, now: Instant, from: EthAddr, head: Vec<u8>, o: &Offer, len: usize) {
        let id = self
            .ep
            .pull(now, from, o, Box::new(vec![0u8; len]))
            .unwrap_or_else(|_| panic!("pull refused"));
        self.pulls.insert(id, head);
    }
}

impl sim::Node for Node {
    fn step(&mut self, now: Instant) -> bool {
        let mut moved = false;
        loop {
            match self.tr.recv_from(&mut self.buf) {
                Ok((n, mac, port)) => {
                    self.ep
                        .handle_datagram(now, runtime::EthAddr::new(mac, port), &self.buf[..n]);
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("recv: {e}"),
            }
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        while let Some(d) = self.ep.poll_delivery() {
            match d {
                Delivery::Data(d) => {
                    let o = d.offer.expect("only offers are sent in these tests");
                    match self.policy {
                        Policy::PullAll => {
                            self.pull(now, d.from, d.data, &o, o.size as usize);
                        }
                        Policy::Keep => self.offers.push((d.from, d.data, o)),
                    }
                }
                Delivery::Error(e) if e.kind == ErrorType::Unresponsive => self.suspected += 1,
                Delivery::Error(e) => panic!("error delivery: {e}"),
            }
        }
        while let Some(p) = self.ep.poll_pulled() {
            let head = self.pulls.remove(&p.id).expect("a pull of ours");
            self.pulled.push((head, p));
        }
        while let Some(t) = self.ep.poll_transmit(&mut self.buf) {
            moved = true;
            match self.tr.send_to(&self.buf[..t.len], t.dest) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("send: {e}"),
            }
        }
        moved
    }

    fn poll_at(&mut self) -> Option<Instant> {
        [self.ep.poll_timeout(), edp_socket_poll_at(&self.tr)]
            .into_iter()
            .flatten()
            .min()
    }
}

/// Nodes `a` (0) and `b` (1) on a pair with MTU `mtu`, 20 us one way
/// (plus the faults `ab`, `ba` of each direction).
fn pair(mtu: usize, ab: FaultConfig, ba: FaultConfig, cfg: Config) -> Sim<Vec<Node>> {
    let wire = |f: FaultConfig| FaultConfig {
        delay: Duration::from_micros(20),
        ..f
    };
    let mut sim = Sim::new(["a", "b"]);
    let ports = sim.pair(sim::mtu(mtu), wire(ab), wire(ba));
    let t0 = sim.now();
    sim.populate(ports, |i, p| Node::new(p, cfg.clone(), 11 + i as u64, t0))
}

/// Deterministic body of message `i`, `len` bytes.
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

/// Offers message `i` of `len` bytes from node 0 to node 1; the head is
/// the message number.
fn offer(sim: &mut Sim<Vec<Node>>, i: u64, len: usize) -> MsgId {
    let now = sim.now();
    let to = sim[1].addr;
    sim[0]
        .ep
        .send_offer(now, 9, to, &i.to_le_bytes(), Box::new(body(i, len)))
        .unwrap()
}

/// Every pull of node 1 ended without error, byte-exact, each message
/// once.
fn check_pulled(n: &Node, want: &[(u64, usize)]) {
    let mut seen = HashMap::new();
    for (head, p) in &n.pulled {
        assert_eq!(p.error, None, "pull of message {head:?} failed");
        let i = u64::from_le_bytes(head[..8].try_into().unwrap());
        let len = want
            .iter()
            .find(|w| w.0 == i)
            .unwrap_or_else(|| panic!("message {i} not sent"))
            .1;
        assert_eq!(p.len, len as u64, "message {i}: length");
        assert!(sink(p)[..len] == body(i, len)[..], "message {i} differs");
        assert!(seen.insert(i, ()).is_none(), "message {i} pulled twice");
    }
    assert_eq!(seen.len(), want.len(), "messages pulled");
}

/// The bytes of an ended pull's buffer (a `Vec` here).
fn sink(p: &Pulled<EthAddr>) -> &[u8] {
    let any: &dyn std::any::Any = &*p.sink;
    any.downcast_ref::<Vec<u8>>().expect("a Vec sink")
}

fn counters(s: &Stats) -> String {
    format!(
        "offers {} done {} | parts sent {} resent {} skipped {} | requests {} retries {} timeouts {} | parts received {} duplicates {} | timer resends {}",
        s.offers_sent,
        s.offers_done,
        s.pulled_parts_sent,
        s.pulled_parts_resent,
        s.pull_resends_skipped,
        s.pull_requests_sent,
        s.pull_retries,
        s.pull_timeouts,
        s.pulled_parts_received,
        s.pulled_duplicates,
        s.data_packets_resent,
    )
}

/// A body pulled over a clean link: every part once, no request asked
/// again, no resend of any kind; the sender keeps the body until the
/// receiver's done, then drops it.
#[test]
fn a_pulled_body_arrives_byte_exact_each_part_once() {
    let mut sim = pair(1500, FaultConfig::default(), FaultConfig::default(), {
        Config::for_edp_mtu(1500)
    });
    let len = (1 << 20) + 123;
    let id = offer(&mut sim, 1, len);
    sim.run(Duration::from_secs(10), |s| {
        s[1].pulled.len() == 1 && !s[0].ep.is_pending(id)
    });
    check_pulled(&sim[1], &[(1, len)]);
    let (a, b) = (sim[0].ep.stats(), sim[1].ep.stats());
    let parts = len.div_ceil(1500 - 6 - 25) as u64;
    assert_eq!(a.pulled_parts_sent, parts, "{}", counters(&a));
    assert_eq!(a.pulled_parts_resent, 0);
    assert_eq!(a.data_packets_resent + b.data_packets_resent, 0);
    assert_eq!(b.pull_retries, 0, "{}", counters(&b));
    assert_eq!(b.pulled_duplicates, 0);
    assert_eq!((a.offers_done, b.pulls_completed), (1, 1));
    assert_eq!(sim[0].ep.stored_bytes(), 0);
    assert_eq!(sim[1].ep.pulls(), 0);
}

/// The case: a 64 MiB message and 64 messages of 1 MiB offered at
/// once, 1 % of the frames lost in each direction (and some duplicated and
/// reordered): every byte arrives exactly once; what is resent is what
/// the receiver asked for again.
#[test]
fn sixty_four_mib_and_sixty_four_one_mib_under_one_percent_loss() {
    let faults = |seed| FaultConfig {
        loss: 0.01,
        duplicate: 0.002,
        reorder: 0.002,
        seed,
        ..FaultConfig::default()
    };
    let mut sim = pair(1500, faults(1), faults(2), Config::for_edp_mtu(1500));
    let mut want = vec![(0u64, 64 << 20)];
    want.extend((1..=64).map(|i| (i, 1 << 20)));
    let ids: Vec<MsgId> = want
        .iter()
        .map(|&(i, len)| offer(&mut sim, i, len))
        .collect();
    sim.run(Duration::from_secs(600), |s| {
        s[1].pulled.len() == want.len() && ids.iter().all(|&m| !s[0].ep.is_pending(m))
    });
    check_pulled(&sim[1], &want);
    let (a, b) = (sim[0].ep.stats(), sim[1].ep.stats());
    let (fa, _) = sim.fault_stats(0);
    let (fb, _) = sim.fault_stats(1);
    println!("sender   {}", counters(&a));
    println!("receiver {}", counters(&b));
    println!("faults a->b {fa:?}\nfaults b->a {fb:?}");
    let parts: u64 = want.iter().map(|w| (w.1 as u64).div_ceil(1469)).sum();
    // Every part was sent once; the resends are the receiver's asks: a
    // lost part (or a lost request) costs a few, not a window's worth.
    assert_eq!(a.pulled_parts_sent - a.pulled_parts_resent, parts);
    assert!(b.pull_retries > 0, "1 % loss and no retry?");
    assert!(
        a.pulled_parts_resent < parts / 20,
        "resent {} of {parts} parts at 1 % loss",
        a.pulled_parts_resent
    );
    assert_eq!(a.offers_done, want.len() as u64);
}

/// The receiver's process stops (off its CPU for two seconds) in the
/// middle of a pull: nothing is resent meanwhile, since only the receiver
/// asks; after it resumes the pull completes. A body sent by the spec's
/// way (the sender's timers) is resent while the receiver sleeps.
#[test]
fn a_sleeping_receiver_draws_no_resend() {
    let mut sim = pair(
        1500,
        FaultConfig::default(),
        FaultConfig::default(),
        Config::for_edp_mtu(1500),
    );
    let len = 8 << 20;
    let id = offer(&mut sim, 7, len);
    // Until a quarter of the body is in.
    sim.run(Duration::from_secs(10), |s| {
        s[1].ep.stats().pulled_parts_received > (len as u64 / 1469) / 4
    });
    sim.set_running(&[0]);
    let t = sim.now() + Duration::from_secs(2);
    let stop = sim.run_until(Duration::from_secs(2), |_| false);
    assert_ne!(stop, sim::Stop::Done);
    // The sender has no timer to wake it: the two seconds pass anyway.
    if sim.now() < t {
        sim.advance_to(t);
    }
    let a = sim[0].ep.stats();
    assert_eq!(
        (a.pulled_parts_resent, a.data_packets_resent),
        (0, 0),
        "{}",
        counters(&a)
    );
    sim.set_running(&[0, 1]);
    sim.run(Duration::from_secs(10), |s| {
        s[1].pulled.len() == 1 && !s[0].ep.is_pending(id)
    });
    check_pulled(&sim[1], &[(7, len)]);
    let a = sim[0].ep.stats();
    assert_eq!(a.pulled_parts_resent, 0, "{}", counters(&a));
    assert_eq!(sim[0].suspected, 0, "a pulling receiver is never suspected");

    // The same stop with the body sent the spec's way.
    let mut sim = pair(
        1500,
        FaultConfig::default(),
        FaultConfig::default(),
        Config::for_edp_mtu(1500),
    );
    let now = sim.now();
    let to = sim[1].addr;
    sim[0]
        .ep
        .send(now, 9, to, &body(7, len), ctp::Options::NONE)
        .unwrap();
    sim.run(Duration::from_secs(10), |s| {
        s[1].ep.stats().data_packets_received > 100
    });
    sim.set_running(&[0]);
    sim.run_until(Duration::from_secs(2), |_| false);
    assert!(
        sim[0].ep.stats().data_packets_resent > 0,
        "the sender's timers resend while the receiver sleeps"
    );
    assert_eq!(sim[0].suspected, 1, "and suspect it, once");
}

/// A sender that stops for good: the pull asks again with a doubling
/// period and fails at the user timeout, giving its buffer back.
#[test]
fn a_silent_sender_fails_the_pull_at_the_user_timeout() {
    let cfg = Config {
        user_timeout: Some(Duration::from_secs(3)),
        ..Config::for_edp_mtu(1500)
    };
    let mut sim = pair(1500, FaultConfig::default(), FaultConfig::default(), cfg);
    let len = 4 << 20;
    offer(&mut sim, 3, len);
    sim.run(Duration::from_secs(10), |s| {
        s[1].ep.stats().pulled_parts_received > 10
    });
    sim.set_running(&[1]);
    let t0 = sim.now();
    sim.run(Duration::from_secs(60), |s| !s[1].pulled.is_empty());
    let waited = sim.now() - t0;
    let (_, p) = &sim[1].pulled[0];
    assert_eq!(p.error, Some(ctp::ErrorType::NotConfirmed));
    assert!(
        waited >= Duration::from_millis(2900) && waited < Duration::from_secs(6),
        "failed after {waited:?}"
    );
    let b = sim[1].ep.stats();
    assert!(b.pull_timeouts >= 3, "{}", counters(&b));
    assert!(
        b.pull_timeouts < 20,
        "asked again {} times in 3 s: no backoff",
        b.pull_timeouts
    );
    assert_eq!(sim[1].ep.pulls(), 0);
}

/// A buffer shorter than the body takes its front; a buffer of no bytes
/// takes nothing and ends at once (a discard). Either way the sender is
/// told, and drops the body.
#[test]
fn a_short_buffer_takes_the_front_and_an_empty_one_discards() {
    let mut sim = pair(
        1500,
        FaultConfig::default(),
        FaultConfig::default(),
        Config::for_edp_mtu(1500),
    );
    sim[1].policy = Policy::Keep;
    let a = offer(&mut sim, 1, 100_000);
    let b = offer(&mut sim, 2, 50_000);
    sim.run(Duration::from_secs(10), |s| s[1].offers.len() == 2);
    let now = sim.now();
    let offers = std::mem::take(&mut sim[1].offers);
    let (from, head, o) = offers[0].clone();
    sim[1].pull(now, from, head, &o, 3000);
    let (from, head, o) = offers[1].clone();
    sim[1].pull(now, from, head, &o, 0);
    sim.run(Duration::from_secs(10), |s| {
        s[1].pulled.len() == 2 && !s[0].ep.is_pending(a) && !s[0].ep.is_pending(b)
    });
    let n = &sim[1];
    let (_, short) = n.pulled.iter().find(|(h, _)| h[0] == 1).unwrap();
    assert_eq!((short.len, short.error), (3000, None));
    assert_eq!(sink(short), &body(1, 100_000)[..3000]);
    let (_, none) = n.pulled.iter().find(|(h, _)| h[0] == 2).unwrap();
    assert_eq!((none.len, none.error), (0, None));
    let s = sim[0].ep.stats();
    assert_eq!(s.pulled_parts_sent, 3, "{}", counters(&s));
    assert_eq!(s.offers_done, 2);
}

/// Requests duplicated on the way are served once: a request not newer
/// than the last one served is stale.
#[test]
fn duplicated_requests_are_served_once() {
    let dup = FaultConfig {
        duplicate: 0.5,
        seed: 5,
        ..FaultConfig::default()
    };
    let mut sim = pair(1500, FaultConfig::default(), dup, Config::for_edp_mtu(1500));
    let len = 2 << 20;
    let id = offer(&mut sim, 4, len);
    sim.run(Duration::from_secs(10), |s| {
        s[1].pulled.len() == 1 && !s[0].ep.is_pending(id)
    });
    check_pulled(&sim[1], &[(4, len)]);
    let a = sim[0].ep.stats();
    assert_eq!(a.pulled_parts_resent, 0, "{}", counters(&a));
    assert!(a.stale_pull_packets > 0, "no request was duplicated?");
}
