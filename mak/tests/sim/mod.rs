//! An in-memory hub on a virtual clock for MAK simulations: one sender
//! (node 0, member 0, address 0) and N receivers (node i, member i, address
//! i), a store-and-forward switch with one port per node, seeded faults per
//! receiver link (independent loss, Gilbert-Elliott burst loss,
//! duplication, reordering), and an optional per-frame cost model (CPU time
//! per frame sent and received, serialisation per byte, propagation).
//! Everything is deterministic per seed: events are ordered by (instant,
//! insertion number), every random choice comes from a seeded ChaCha.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use mak::wire::{Flags, Repr};
use mak::{
    Config, Dest, GroupId, Member, MemberId, Message, Receiver, ReceiverEvent, ReceiverStats,
    SendError, Sender, SenderEvent, SenderStats, Seq,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const GROUP: GroupId = GroupId(42);

/// Gilbert-Elliott two-state burst loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Per frame, probability of going from the good to the bad state.
    pub p_good_bad: f64,
    /// Per frame, probability of going from the bad to the good state.
    pub p_bad_good: f64,
    /// Loss probability in the bad state (in the good one: `Faults::loss`).
    pub loss_bad: f64,
}

/// Faults of one receiver's link, applied per frame in each direction.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Independent loss probability (the good state's, with `burst`).
    pub loss: f64,
    pub burst: Option<GilbertElliott>,
    /// Probability a frame is delivered twice.
    pub dup: f64,
    /// Probability a frame is held back by up to `reorder_delay`.
    pub reorder: f64,
    pub reorder_delay: Duration,
}

impl Faults {
    pub fn loss(p: f64) -> Self {
        Self {
            loss: p,
            ..Self::default()
        }
    }
    /// Everything at once: loss, bursts, duplication, reordering.
    pub fn nasty(p: f64) -> Self {
        Self {
            loss: p,
            burst: Some(GilbertElliott {
                p_good_bad: 0.01,
                p_bad_good: 0.3,
                loss_bad: 0.5,
            }),
            dup: 0.02,
            reorder: 0.05,
            reorder_delay: Duration::from_micros(60),
        }
    }
}

/// Time per frame and per byte.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// One-way propagation delay (half before, half after the switch).
    pub propagation: Duration,
    /// Serialisation time per byte, ns (8 = 1 Gbit/s; 0 = infinitely fast).
    pub ns_per_byte: f64,
    /// CPU time of a node per frame it sends.
    pub tx_cost: Duration,
    /// CPU time of a node per frame it receives.
    pub rx_cost: Duration,
}

impl CostModel {
    /// Delays only: 10 us one way, no CPU or serialisation cost.
    pub fn delay_only() -> Self {
        Self {
            propagation: Duration::from_micros(10),
            ns_per_byte: 0.0,
            tx_cost: Duration::ZERO,
            rx_cost: Duration::ZERO,
        }
    }
    /// A GigE-like LAN with per-frame host costs (for the measurement).
    pub fn gige() -> Self {
        Self {
            propagation: Duration::from_micros(5),
            ns_per_byte: 8.0,
            tx_cost: Duration::from_micros(4),
            rx_cost: Duration::from_micros(4),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimSpec {
    pub cfg: Config,
    pub receivers: usize,
    /// Faults per receiver link (cycled if shorter than `receivers`).
    pub faults: Vec<Faults>,
    pub cost: CostModel,
    pub seed: u64,
    /// Virtual time limit.
    pub limit: Duration,
    /// Receivers that die (stop receiving and sending) at an instant.
    pub kill: Vec<(usize, Duration)>,
    /// Receivers that come back to life at an instant (with the state they
    /// died with).
    pub revive: Vec<(usize, Duration)>,
}

impl SimSpec {
    pub fn new(cfg: Config, receivers: usize, faults: Faults, seed: u64) -> Self {
        Self {
            cfg,
            receivers,
            faults: vec![faults],
            cost: CostModel::delay_only(),
            seed,
            limit: Duration::from_secs(60),
            kill: Vec::new(),
            revive: Vec::new(),
        }
    }
}

/// Hub counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubStats {
    pub frames: u64,
    pub copies_lost: u64,
    pub copies_duplicated: u64,
    pub copies_delayed: u64,
    /// First transmissions (not RETX) of DATA lost on the way to at least
    /// one live receiver, by sequence number.
    pub first_tx_lost: BTreeSet<u32>,
    /// Retransmissions (RETX) of DATA by sequence number.
    pub retx_by_seq: BTreeMap<u32, u32>,
}

#[derive(Debug)]
pub struct Outcome {
    /// Messages each receiver delivered, with the instant (since start).
    pub delivered: Vec<Vec<(Duration, Message)>>,
    /// Non-message events of each receiver.
    pub receiver_events: Vec<Vec<(Duration, ReceiverEvent)>>,
    pub sender_events: Vec<(Duration, SenderEvent<u16>)>,
    pub sender: SenderStats,
    pub receivers: Vec<ReceiverStats>,
    pub hub: HubStats,
    /// Instant of the last event processed.
    pub end: Duration,
    /// The sender became idle with every message sent and freed.
    pub sender_idle: bool,
    /// When the sender's last `MessageDone` came.
    pub sender_done_at: Option<Duration>,
    /// Hash of every frame moved (instant, endpoints, bytes) and event.
    pub trace_hash: u64,
    pub events_processed: u64,
}

impl Outcome {
    /// Asserts that every receiver not killed delivered exactly `msgs`, in
    /// order, byte-exact, each once.
    pub fn assert_all_delivered(&self, msgs: &[Vec<u8>], killed: &[usize]) {
        for (i, got) in self.delivered.iter().enumerate() {
            if killed.contains(&i) {
                continue;
            }
            assert_eq!(
                got.len(),
                msgs.len(),
                "receiver {i} delivered {} of {} messages; its events {:?}; stats {:?}",
                got.len(),
                msgs.len(),
                self.receiver_events[i],
                self.receivers[i]
            );
            for (k, ((_, m), want)) in got.iter().zip(msgs).enumerate() {
                assert_eq!(m.msg, k as u32, "receiver {i}: message {k} out of order");
                assert!(m.data == *want, "receiver {i}: message {k} differs");
            }
        }
    }
}

enum Ev {
    Frame {
        to: usize,
        from: u16,
        bytes: Vec<u8>,
    },
    Timer {
        node: usize,
    },
    Kill {
        node: usize,
        dead: bool,
    },
}

struct Link {
    faults: Faults,
    bad: bool,
    rng: ChaCha8Rng,
}

impl Link {
    /// Extra delays of the copies that get through (empty = lost).
    fn pass(&mut self, stats: &mut HubStats) -> Vec<Duration> {
        let f = self.faults;
        let mut loss = f.loss;
        if let Some(ge) = f.burst {
            let flip = if self.bad {
                ge.p_bad_good
            } else {
                ge.p_good_bad
            };
            if self.rng.random_bool(flip) {
                self.bad = !self.bad;
            }
            if self.bad {
                loss = ge.loss_bad;
            }
        }
        if self.rng.random_bool(loss) {
            stats.copies_lost += 1;
            return Vec::new();
        }
        let copies = if self.rng.random_bool(f.dup) {
            stats.copies_duplicated += 1;
            2
        } else {
            1
        };
        (0..copies)
            .map(|_| {
                if f.reorder > 0.0 && self.rng.random_bool(f.reorder) {
                    stats.copies_delayed += 1;
                    let max = f.reorder_delay.as_nanos() as u64;
                    Duration::from_nanos(self.rng.random_range(0..=max))
                } else {
                    Duration::ZERO
                }
            })
            .collect()
    }
}

pub struct Sim {
    spec: SimSpec,
    t0: Instant,
    sender: Sender<u16>,
    receivers: Vec<Receiver<u16>>,
    dead: Vec<bool>,
    /// Per receiver: (uplink to the switch, downlink from it).
    links: Vec<(Link, Link)>,
    queue: BTreeMap<(Instant, u64), Ev>,
    order: u64,
    /// Per node: CPU busy until, switch port to it busy until, its own
    /// port busy until, timer scheduled at.
    cpu_free: Vec<Instant>,
    in_free: Vec<Instant>,
    out_free: Vec<Instant>,
    timer_at: Vec<Option<Instant>>,
    pending: std::collections::VecDeque<Vec<u8>>,
    out: Outcome,
    hasher: DefaultHasher,
    buf: Vec<u8>,
}

impl Sim {
    pub fn new(spec: SimSpec) -> Self {
        let t0 = Instant::now();
        let n = spec.receivers;
        let members = (1..=n as u16).map(|i| Member::new(i, i)).collect();
        let sender = Sender::new(spec.cfg.clone(), GROUP, MemberId(0), members, Seq(0)).unwrap();
        let mut seeder = ChaCha8Rng::seed_from_u64(spec.seed);
        let receivers = (1..=n as u16)
            .map(|i| {
                Receiver::new(
                    spec.cfg.clone(),
                    GROUP,
                    MemberId(i),
                    Member::new(0, 0),
                    Seq(0),
                    seeder.random(),
                )
                .unwrap()
            })
            .collect();
        let links = (0..n)
            .map(|i| {
                let f = spec.faults[i % spec.faults.len()];
                let mk = |rng: &mut ChaCha8Rng| Link {
                    faults: f,
                    bad: false,
                    rng: ChaCha8Rng::seed_from_u64(rng.random()),
                };
                (mk(&mut seeder), mk(&mut seeder))
            })
            .collect();
        let mut queue = BTreeMap::new();
        let mut order = 0;
        for (list, dead) in [(&spec.kill, true), (&spec.revive, false)] {
            for &(node, at) in list {
                queue.insert(
                    (t0 + at, order),
                    Ev::Kill {
                        node: node + 1,
                        dead,
                    },
                );
                order += 1;
            }
        }
        Self {
            t0,
            sender,
            receivers,
            dead: vec![false; n + 1],
            links,
            queue,
            order,
            cpu_free: vec![t0; n + 1],
            in_free: vec![t0; n + 1],
            out_free: vec![t0; n + 1],
            timer_at: vec![None; n + 1],
            pending: Default::default(),
            out: Outcome {
                delivered: vec![Vec::new(); n],
                receiver_events: vec![Vec::new(); n],
                sender_events: Vec::new(),
                sender: SenderStats::default(),
                receivers: Vec::new(),
                hub: HubStats::default(),
                end: Duration::ZERO,
                sender_idle: false,
                sender_done_at: None,
                trace_hash: 0,
                events_processed: 0,
            },
            hasher: DefaultHasher::new(),
            buf: vec![0u8; spec.cfg.mtu],
            spec,
        }
    }

    /// Runs `msgs` through the group: queued at start as far as the send
    /// buffer allows, the rest as messages complete.
    pub fn run(spec: SimSpec, msgs: &[Vec<u8>]) -> Outcome {
        let mut sim = Sim::new(spec);
        sim.pending = msgs.iter().cloned().collect();
        let t0 = sim.t0;
        sim.feed_app();
        sim.service(0, t0);
        sim.run_loop();
        sim.finish()
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.queue.insert((at, self.order), ev);
        self.order += 1;
    }

    fn feed_app(&mut self) {
        while let Some(m) = self.pending.front() {
            match self.sender.send(m.clone()) {
                Ok(_) => {
                    self.pending.pop_front();
                }
                Err(SendError::Full { .. }) => break,
                Err(SendError::NoMembers) => {
                    self.pending.clear();
                    break;
                }
                Err(e) => panic!("send: {e}"),
            }
        }
    }

    fn run_loop(&mut self) {
        let limit = self.t0 + self.spec.limit;
        while let Some(((at, _), ev)) = self.queue.pop_first() {
            if at > limit {
                break;
            }
            self.out.events_processed += 1;
            self.out.end = at - self.t0;
            match ev {
                Ev::Kill { node, dead } => {
                    self.dead[node] = dead;
                    if !dead {
                        // Its timers were lost while dead: re-arm.
                        self.timer_at[node] = None;
                        self.service(node, at);
                    }
                }
                Ev::Timer { node } => {
                    if self.timer_at[node] != Some(at) || self.dead[node] {
                        continue;
                    }
                    self.timer_at[node] = None;
                    let now = at.max(self.cpu_free[node]);
                    (at - self.t0).hash(&mut self.hasher);
                    node.hash(&mut self.hasher);
                    if node == 0 {
                        self.sender.handle_timeout(now);
                    } else {
                        self.receivers[node - 1].handle_timeout(now);
                    }
                    self.service(node, now);
                }
                Ev::Frame { to, from, bytes } => {
                    if self.dead[to] {
                        continue;
                    }
                    let now = at.max(self.cpu_free[to]);
                    self.cpu_free[to] = now + self.spec.cost.rx_cost;
                    if to == 0 {
                        self.sender.handle_frame(now, from, &bytes);
                    } else {
                        self.receivers[to - 1].handle_frame(now, from, &bytes);
                    }
                    self.service(to, self.cpu_free[to]);
                }
            }
        }
    }

    /// After a node handled something at `now`: collect its events, send
    /// its frames, schedule its timer.
    fn service(&mut self, node: usize, now: Instant) {
        let mut t = now.max(self.cpu_free[node]);
        if node == 0 {
            loop {
                t = self.drain_tx(0, t);
                let mut done = false;
                while let Some(ev) = self.sender.poll_event() {
                    if matches!(ev, SenderEvent::MessageDone { .. }) {
                        self.out.sender_done_at = Some(t - self.t0);
                        done = true;
                    }
                    format!("{ev:?}").hash(&mut self.hasher);
                    self.out.sender_events.push((t - self.t0, ev));
                }
                if !done || self.pending.is_empty() {
                    break;
                }
                self.feed_app();
            }
        } else {
            // Reading first: it may free buffer, consume held packets and
            // make an ACK due.
            let r = &mut self.receivers[node - 1];
            while let Some(ev) = r.poll_event() {
                match ev {
                    ReceiverEvent::Message(m) => {
                        (m.msg, m.data.len()).hash(&mut self.hasher);
                        self.out.delivered[node - 1].push((t - self.t0, m))
                    }
                    other => {
                        format!("{other:?}").hash(&mut self.hasher);
                        self.out.receiver_events[node - 1].push((t - self.t0, other))
                    }
                }
            }
            t = self.drain_tx(node, t);
        }
        self.cpu_free[node] = t;
        let next = if node == 0 {
            self.sender.poll_timeout()
        } else {
            self.receivers[node - 1].poll_timeout()
        };
        if next != self.timer_at[node] {
            self.timer_at[node] = next;
            if let Some(at) = next {
                self.push(at, Ev::Timer { node });
            }
        }
    }

    /// Sends every frame `node` has, from `t` on; returns when its CPU is
    /// free again.
    fn drain_tx(&mut self, node: usize, mut t: Instant) -> Instant {
        let mut buf = std::mem::take(&mut self.buf);
        loop {
            let tx = if node == 0 {
                self.sender.poll_transmit(t, &mut buf)
            } else {
                self.receivers[node - 1].poll_transmit(t, &mut buf)
            };
            let Some(tx) = tx else {
                break;
            };
            t += self.spec.cost.tx_cost;
            self.transmit(node, t, tx.dest, buf[..tx.len].to_vec());
        }
        self.buf = buf;
        t
    }

    fn ser(&self, len: usize) -> Duration {
        Duration::from_nanos((len as f64 * self.spec.cost.ns_per_byte) as u64)
    }

    /// A frame leaves `node` at `t`: through its port, its uplink faults,
    /// the switch, each destination's downlink faults and port.
    fn transmit(&mut self, node: usize, t: Instant, dest: Dest<u16>, bytes: Vec<u8>) {
        self.out.hub.frames += 1;
        (t - self.t0).hash(&mut self.hasher);
        node.hash(&mut self.hasher);
        bytes.hash(&mut self.hasher);
        let ser = self.ser(bytes.len());
        let depart = t.max(self.out_free[node]) + ser;
        self.out_free[node] = depart;
        let half = self.spec.cost.propagation / 2;
        let ups = if node == 0 {
            vec![Duration::ZERO]
        } else {
            self.links[node - 1].0.pass(&mut self.out.hub)
        };
        let first_tx_seq = match Repr::parse(&bytes) {
            Ok(Repr::Data { flags, seq, .. }) if node == 0 => {
                if flags.contains(Flags::RETX) {
                    *self.out.hub.retx_by_seq.entry(seq.0).or_default() += 1;
                    None
                } else {
                    Some(seq.0)
                }
            }
            _ => None,
        };
        let targets: Vec<usize> = match dest {
            Dest::Group => (0..=self.receivers.len()).filter(|&b| b != node).collect(),
            Dest::Member(a) => vec![a as usize],
        };
        for up in ups {
            let at_switch = depart + half + up;
            for &b in &targets {
                let downs = if b == 0 {
                    vec![Duration::ZERO]
                } else {
                    self.links[b - 1].1.pass(&mut self.out.hub)
                };
                if downs.is_empty() && b != 0 && !self.dead[b] {
                    if let Some(s) = first_tx_seq {
                        self.out.hub.first_tx_lost.insert(s);
                    }
                }
                for down in downs {
                    let start = at_switch.max(self.in_free[b]);
                    let done = start + ser;
                    self.in_free[b] = done;
                    let arrive = done + half + down;
                    self.push(
                        arrive,
                        Ev::Frame {
                            to: b,
                            from: node as u16,
                            bytes: bytes.clone(),
                        },
                    );
                }
            }
        }
    }

    fn finish(mut self) -> Outcome {
        self.out.sender = self.sender.stats();
        self.out.receivers = self.receivers.iter().map(|r| r.stats()).collect();
        self.out.sender_idle = self.sender.is_idle() && self.pending.is_empty();
        self.out.trace_hash = self.hasher.finish();
        self.out
    }
}

/// `n` messages of pseudo-random sizes in `0..=max` and contents.
pub fn messages(seed: u64, n: usize, max: usize) -> Vec<Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    (0..n)
        .map(|_| {
            let len = rng.random_range(0..=max);
            (0..len).map(|_| rng.random()).collect()
        })
        .collect()
}
