//! The death policy of CTP endpoints on a virtual clock (`Config::user_timeout`,
//! `endpoint/liveness.rs`): two endpoints joined by a path the test cuts
//! (a link flap or a blackhole). A destination silent at a packet's spec
//! deadline is suspected (one `Unresponsive` delivery) and its messages are
//! resent once per `max_probe_period`; an outage shorter than the user
//! timeout loses nothing and duplicates nothing; a longer one fails the
//! messages with `NotConfirmed` at the user timeout; a live peer that keeps
//! refusing a packet still fails it at the spec deadline. The spec's rule
//! (`user_timeout: None`) is tested in `core.rs` and `sim.rs`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use ctp::{Config, Delivery, Endpoint, ErrorType, MsgId, Options};

const A: u8 = 1;
const B: u8 = 2;
/// One-way delay of the path.
const DELAY: Duration = Duration::from_micros(20);

/// Two endpoints and the datagrams between them, on a virtual clock.
struct Net {
    now: Instant,
    a: Endpoint<u8>,
    b: Endpoint<u8>,
    /// Datagrams in flight: (arrival, sequence) -> (to, from, bytes).
    wire: BTreeMap<(Instant, u64), (u8, u8, Vec<u8>)>,
    seq: u64,
    /// Frames are lost while true.
    cut: bool,
    /// Datagrams A sent (first sends and resends) while B was suspected.
    sent_while_suspected: u64,
    got_a: Vec<(Instant, Delivery<u8>)>,
    got_b: Vec<(Instant, Delivery<u8>)>,
}

impl Net {
    fn new(cfg_a: Config, cfg_b: Config) -> Net {
        let now = Instant::now();
        Net {
            now,
            a: Endpoint::new(cfg_a, now, SystemTime::UNIX_EPOCH, 11, None),
            b: Endpoint::new(cfg_b, now, SystemTime::UNIX_EPOCH, 12, None),
            wire: BTreeMap::new(),
            seq: 0,
            cut: false,
            sent_while_suspected: 0,
            got_a: Vec::new(),
            got_b: Vec::new(),
        }
    }

    /// Every endpoint's output onto the wire (or lost), deliveries taken.
    fn flush(&mut self) {
        let mut buf = vec![0u8; 70_000];
        for from in [A, B] {
            let (ep, to) = if from == A {
                (&mut self.a, B)
            } else {
                (&mut self.b, A)
            };
            while let Some(t) = ep.poll_transmit(&mut buf) {
                if from == A && ep.unresponsive_since(B).is_some() {
                    self.sent_while_suspected += 1;
                }
                if !self.cut {
                    self.seq += 1;
                    self.wire.insert(
                        (self.now + DELAY, self.seq),
                        (to, from, buf[..t.len].to_vec()),
                    );
                }
            }
        }
        let now = self.now;
        self.got_a
            .extend(std::iter::from_fn(|| self.a.poll_delivery()).map(|d| (now, d)));
        self.got_b
            .extend(std::iter::from_fn(|| self.b.poll_delivery()).map(|d| (now, d)));
    }

    /// Runs until `app` returns true (called after each step, may send and
    /// return an instant it wants to run at), at most `limit` of virtual
    /// time.
    fn run(&mut self, limit: Duration, mut app: impl FnMut(&mut Net) -> (bool, Option<Instant>)) {
        let end = self.now + limit;
        loop {
            // Arrivals and timers due now.
            while let Some((&(at, k), _)) = self.wire.first_key_value() {
                if at > self.now {
                    break;
                }
                let (to, from, d) = self.wire.remove(&(at, k)).expect("present");
                let ep = if to == A { &mut self.a } else { &mut self.b };
                ep.handle_datagram(self.now, from, &d);
            }
            for ep in [&mut self.a, &mut self.b] {
                if ep.poll_timeout().is_some_and(|t| t <= self.now) {
                    ep.handle_timeout(self.now);
                }
            }
            self.flush();
            let (done, wake) = app(self);
            self.flush();
            if done {
                return;
            }
            let next = [
                self.wire.first_key_value().map(|(k, _)| k.0),
                self.a.poll_timeout(),
                self.b.poll_timeout(),
                wake.filter(|&w| w > self.now),
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("something is pending");
            assert!(next <= end, "not done within {limit:?} of virtual time");
            self.now = next.max(self.now);
        }
    }
}

fn errors(got: &[(Instant, Delivery<u8>)], kind: ErrorType) -> Vec<(Instant, MsgId)> {
    got.iter()
        .filter_map(|(t, d)| match d {
            Delivery::Error(e) if e.kind == kind => Some((*t, e.msg.unwrap_or(0))),
            _ => None,
        })
        .collect()
}

fn cfg(user_timeout: Duration) -> Config {
    Config {
        data_size: 1000,
        user_timeout: Some(user_timeout),
        ..Config::default()
    }
}

/// Message `i`: 3000 bytes (three packets) that name their index.
fn body(i: u64) -> Vec<u8> {
    let mut v = i.to_le_bytes().to_vec();
    v.extend((0..2992u32).map(|k| (k as u8).wrapping_mul(7).wrapping_add(i as u8)));
    v
}

/// Streams `count` messages A -> B (at most 16 unconfirmed), cutting the
/// path after message `cut_after` was delivered for `outage` (`None`: for
/// good). Returns the instant of the cut and the messages sent.
fn stream(
    net: &mut Net,
    count: u64,
    cut_after: u64,
    outage: Option<Duration>,
) -> (Instant, HashMap<MsgId, u64>) {
    let mut sent: HashMap<MsgId, u64> = HashMap::new();
    let mut next = 0u64;
    let mut cut_at = None;
    net.run(Duration::from_secs(600), |n| {
        let delivered = n.got_b.len() as u64;
        let failed = errors(&n.got_a, ErrorType::NotConfirmed).len() as u64;
        while failed == 0 && next < count && next - delivered < 16 {
            let m =
                n.a.send(n.now, 1, B, &body(next), Options::DEL_AFTER_ERROR)
                    .unwrap();
            sent.insert(m, next);
            next += 1;
        }
        if cut_at.is_none() && delivered > cut_after {
            n.cut = true;
            cut_at = Some(n.now);
        }
        let heal = cut_at.zip(outage).map(|(c, o)| c + o);
        if heal.is_some_and(|h| n.now >= h) {
            n.cut = false;
        }
        let done = n.a.storage_sizes().awaiting_confirmation == 0 && next == count;
        (
            done || failed > 0 && n.a.storage_sizes().awaiting_confirmation == 0,
            heal,
        )
    });
    (cut_at.expect("cut"), sent)
}

#[test]
fn an_outage_shorter_than_the_user_timeout_loses_and_duplicates_nothing() {
    for outage in [Duration::from_secs(3), Duration::from_secs(10)] {
        let mut net = Net::new(cfg(Duration::from_secs(20)), cfg(Duration::from_secs(20)));
        let (cut, sent) = stream(&mut net, 400, 100, Some(outage));
        assert!(errors(&net.got_a, ErrorType::NotConfirmed).is_empty());
        let sus = errors(&net.got_a, ErrorType::Unresponsive);
        assert_eq!(sus.len(), 1, "one suspicion: {sus:?}");
        // Suspected at the spec deadline of the first lost packet: T is
        // at its 1 ms floor, so max(511 x 1 ms, 1 s) after it was sent.
        let after = sus[0].0 - cut;
        assert!(
            after >= Duration::from_millis(900) && after <= Duration::from_millis(1100),
            "{after:?}"
        );
        assert_eq!(net.a.stats().unresponsive, 1);
        assert_eq!(net.a.stats().recovered, 1);
        assert!(net.a.unresponsive_since(B).is_none());
        // Every message exactly once, byte-exact.
        let mut seen = HashSet::new();
        for (_, d) in &net.got_b {
            let Delivery::Data(d) = d else {
                panic!("{d:?}")
            };
            let i = u64::from_le_bytes(d.data[..8].try_into().unwrap());
            assert!(d.data == body(i), "message {i} differs");
            assert!(seen.insert(i), "message {i} twice");
        }
        assert_eq!(seen.len(), sent.len());
        // Resends while suspected: about one per packet in flight per
        // second (the probe period), not the spec's doubling.
        let span = (cut + outage - sus[0].0).as_secs_f64();
        eprintln!(
            "outage {outage:?}: suspected {after:?} after the cut, {} datagrams in {span:.1} s while suspected, done {:?} after the heal",
            net.sent_while_suspected,
            net.now - (cut + outage)
        );
        assert!(net.sent_while_suspected as f64 >= span * 16.0 * 3.0 * 0.8);
        assert!(net.now - (cut + outage) <= Duration::from_millis(1100));
    }
}

#[test]
fn a_silent_peer_fails_its_messages_at_the_user_timeout() {
    let ut = Duration::from_secs(20);
    let mut net = Net::new(cfg(ut), cfg(ut));
    let (cut, sent) = stream(&mut net, 400, 50, None);
    let sus = errors(&net.got_a, ErrorType::Unresponsive);
    let dead = errors(&net.got_a, ErrorType::NotConfirmed);
    assert_eq!(sus.len(), 1);
    assert!(!dead.is_empty());
    // Every stored message fails, at the user timeout after the last
    // confirmation (within one probe period).
    let first = dead.iter().map(|(t, _)| *t).min().unwrap() - cut;
    let last = dead.iter().map(|(t, _)| *t).max().unwrap() - cut;
    eprintln!(
        "suspected {:?}, not confirmed {first:?}..{last:?} after the cut",
        sus[0].0 - cut
    );
    assert!(first >= ut - Duration::from_millis(10), "{first:?}");
    assert!(last <= ut + Duration::from_secs(1), "{last:?}");
    // Each message is delivered or reported, never both.
    let failed: HashSet<MsgId> = dead.iter().map(|(_, m)| *m).collect();
    let delivered: HashSet<u64> = net
        .got_b
        .iter()
        .map(|(_, d)| match d {
            Delivery::Data(d) => u64::from_le_bytes(d.data[..8].try_into().unwrap()),
            other => panic!("{other:?}"),
        })
        .collect();
    for (m, i) in &sent {
        assert!(delivered.contains(i) != failed.contains(m), "message {i}");
    }
}

#[test]
fn a_live_peer_refusing_a_packet_still_fails_it_at_the_spec_deadline() {
    // B accepts no large message (reassembly limit) but confirms the small
    // ones A keeps sending: B is alive, so the refused message fails at
    // the spec's deadline, not at the user timeout.
    let ut = Duration::from_secs(60);
    let b_cfg = Config {
        max_reassembly_bytes: 1000,
        ..cfg(ut)
    };
    let mut net = Net::new(cfg(ut), b_cfg);
    let big = net
        .a
        .send(net.now, 2, B, &[7u8; 5000], Options::NONE)
        .unwrap();
    let start = net.now;
    let mut last_small = start;
    net.run(Duration::from_secs(30), |n| {
        if n.now >= last_small + Duration::from_millis(50) {
            n.a.send(n.now, 1, B, b"ping", Options::NONE).unwrap();
            last_small = n.now;
        }
        let done = !errors(&n.got_a, ErrorType::NotConfirmed).is_empty();
        (done, Some(last_small + Duration::from_millis(50)))
    });
    let dead = errors(&net.got_a, ErrorType::NotConfirmed);
    assert_eq!(dead[0].1, big);
    assert!(
        dead[0].0 - start < Duration::from_secs(2),
        "{:?}",
        dead[0].0 - start
    );
    assert!(errors(&net.got_a, ErrorType::Unresponsive).is_empty());
}

#[test]
fn messages_sent_to_a_suspected_peer_do_not_restart_its_clock() {
    // A sender that keeps sending to a silent peer: every message fails
    // by the peer's user timeout (plus one spec span, 1 s at T's floor, and
    // a probe period), not a user timeout after its own first send.
    let ut = Duration::from_secs(20);
    let mut net = Net::new(cfg(ut), cfg(ut));
    // Connect: a few messages confirmed, then the path is cut for good.
    let mut warm = Vec::new();
    net.run(Duration::from_secs(10), |n| {
        if warm.is_empty() {
            for i in 0..5 {
                warm.push(n.a.send(n.now, 1, B, &body(i), Options::NONE).unwrap());
            }
        }
        (n.a.storage_sizes().awaiting_confirmation == 0, None)
    });
    net.cut = true;
    let cut = net.now;
    let mut next_send = net.now;
    let mut sent = Vec::new();
    net.run(Duration::from_secs(120), |n| {
        if n.now >= next_send && n.now < cut + Duration::from_secs(40) {
            let m =
                n.a.send(n.now, 1, B, b"still there?", Options::DEL_AFTER_ERROR)
                    .unwrap();
            sent.push((m, n.now));
            next_send = n.now + Duration::from_secs(2);
        }
        let failed = errors(&n.got_a, ErrorType::NotConfirmed).len();
        let end = cut + Duration::from_secs(40);
        (
            failed == sent.len() && n.now >= end,
            Some(if n.now < end { next_send.min(end) } else { end }),
        )
    });
    let dead = errors(&net.got_a, ErrorType::NotConfirmed);
    assert_eq!(dead.len(), sent.len());
    let sent_at: HashMap<MsgId, Instant> = sent.into_iter().collect();
    for (t, m) in &dead {
        // By the peer's user timeout (its clock started at the cut), or,
        // sent after it, min_error_delay (1 s) after its send; within one
        // probe period of that.
        let due = (cut + ut).max(sent_at[m] + Duration::from_secs(1));
        assert!(
            *t <= due + Duration::from_millis(1100),
            "message {m} failed {:?} after the cut, due {:?}",
            *t - cut,
            due - cut
        );
    }
    assert_eq!(errors(&net.got_a, ErrorType::Unresponsive).len(), 1);
}
