//! MAK simulations on `testkit::sim`: one sender (node 0, member 0, address
//! 0) and N receivers (node i, member i, address i) on a switch, each node
//! reached through its own cable. A receiver's cable has seeded faults in
//! each direction, independent of every other (loss, Gilbert-Elliott burst
//! loss, duplication, reordering: the fault injector's); every cable has
//! half the propagation delay each way and serialises at the cost model's
//! link rate, and the nodes charge CPU time per frame sent and received.
//! Deterministic per seed: every random choice comes from a seeded ChaCha.
#![allow(dead_code)]

use std::collections::{BTreeSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use mak::wire::{Flags, Repr};
use mak::{
    Config, Dest, GroupId, Member, MemberId, Message, Receiver, ReceiverEvent, ReceiverStats,
    SendError, Sender, SenderEvent, SenderStats, Seq,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use testkit::sim::{self as ts, Cable, FaultConfig, Link, MacAddr, Port};

pub const GROUP: GroupId = GroupId(42);
/// The EtherType of the simulation's frames (IEEE local experimental).
const ETHERTYPE: u16 = 0x88b5;
const ETH_HEADER: usize = 14;

/// Gilbert-Elliott two-state burst loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Per frame, probability of going from the good to the bad state.
    pub p_good_bad: f64,
    /// Per frame, probability of going from the bad to the good state.
    pub p_bad_good: f64,
    /// Loss probability in the bad state (`Faults::loss` applies in both).
    pub loss_bad: f64,
}

/// Faults of one receiver's cable, applied per frame in each direction.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Independent loss probability.
    pub loss: f64,
    pub burst: Option<GilbertElliott>,
    /// Probability a frame is delivered twice.
    pub dup: f64,
    /// Probability a frame is held back by `reorder_delay`.
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

    /// The fault injector's config for one direction of a cable.
    fn config(&self, seed: u64) -> FaultConfig {
        let mut f = FaultConfig::seeded(seed)
            .with_loss(self.loss)
            .with_duplicate(self.dup);
        if self.reorder > 0.0 {
            f = f.with_reorder(self.reorder, self.reorder_delay);
        }
        if let Some(b) = self.burst {
            f = f.with_burst(b.p_good_bad, b.p_bad_good, b.loss_bad);
        }
        f
    }
}

/// Time per frame and per byte.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// One-way propagation delay (half on each cable).
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

    /// Half the propagation delay and the link rate, on `f`.
    fn on(&self, f: FaultConfig) -> FaultConfig {
        let f = f.with_delay(self.propagation / 2, Duration::ZERO);
        if self.ns_per_byte > 0.0 {
            f.with_rate((8e9 / self.ns_per_byte) as u64)
        } else {
            f
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimSpec {
    pub cfg: Config,
    pub receivers: usize,
    /// Faults per receiver cable (cycled if shorter than `receivers`).
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

/// Counters of the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubStats {
    /// Frames the nodes sent.
    pub frames: u64,
    /// Copies lost on the cables (both directions).
    pub copies_lost: u64,
    /// Copies duplicated on the cables.
    pub copies_duplicated: u64,
    /// First transmissions (not RETX) of DATA that a receiver alive when
    /// they were sent never got, by sequence number.
    pub first_tx_lost: BTreeSet<u32>,
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
    /// Instant the simulation ended (nothing pending, or the limit).
    pub end: Duration,
    /// The sender became idle with every message sent and freed.
    pub sender_idle: bool,
    /// When the sender's last `MessageDone` came.
    pub sender_done_at: Option<Duration>,
    /// Hash of every frame sent (instant, sender, bytes) and every event.
    pub trace_hash: u64,
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

enum Role {
    Sender {
        sender: Box<Sender<u16>>,
        /// Messages the application has not handed over yet.
        pending: VecDeque<Vec<u8>>,
        /// First transmissions of DATA: sequence number, when, to whom.
        first_tx: Vec<(u32, Instant, Dest<u16>)>,
    },
    Receiver {
        receiver: Box<Receiver<u16>>,
        /// Sequence numbers of the DATA first transmissions received.
        got_first: BTreeSet<u32>,
    },
}

/// One member on its port, with the cost model's CPU.
pub struct MemberNode {
    role: Role,
    port: Port,
    addr: u16,
    /// The port MAC of every address.
    macs: Vec<MacAddr>,
    cost: CostModel,
    t0: Instant,
    /// When the CPU finishes what it was given.
    cpu_free: Instant,
    /// Frames waiting for the instant the CPU has put them out.
    outbox: VecDeque<(Instant, Vec<u8>)>,
    /// Deaths (true) and revivals, in order; the next to come.
    schedule: Vec<(Instant, bool)>,
    next_change: usize,
    dead: bool,
    delivered: Vec<(Duration, Message)>,
    receiver_events: Vec<(Duration, ReceiverEvent)>,
    sender_events: Vec<(Duration, SenderEvent<u16>)>,
    sender_done_at: Option<Duration>,
    frames: u64,
    hasher: DefaultHasher,
    buf: Vec<u8>,
    frame: Vec<u8>,
    started: bool,
}

impl MemberNode {
    /// Whether the node was dead at `t`.
    fn dead_at(&self, t: Instant) -> bool {
        let past = self.schedule.iter().take_while(|c| c.0 <= t);
        past.last().is_some_and(|c| c.1)
    }

    fn feed_app(&mut self) {
        let Role::Sender {
            sender, pending, ..
        } = &mut self.role
        else {
            return;
        };
        while let Some(m) = pending.front() {
            match sender.send(m.clone()) {
                Ok(_) => {
                    pending.pop_front();
                }
                Err(SendError::Full { .. }) => break,
                Err(SendError::NoMembers) => {
                    pending.clear();
                    break;
                }
                Err(e) => panic!("send: {e}"),
            }
        }
    }

    /// After the node handled something at `now`: collect its events and
    /// put its frames out, on the CPU.
    fn service(&mut self, now: Instant) {
        let mut t = now.max(self.cpu_free);
        let t0 = self.t0;
        if matches!(self.role, Role::Sender { .. }) {
            loop {
                t = self.drain_tx(t);
                let mut done = false;
                let Role::Sender {
                    sender, pending, ..
                } = &mut self.role
                else {
                    unreachable!()
                };
                while let Some(ev) = sender.poll_event() {
                    if matches!(ev, SenderEvent::MessageDone { .. }) {
                        self.sender_done_at = Some(t - t0);
                        done = true;
                    }
                    format!("{ev:?}").hash(&mut self.hasher);
                    self.sender_events.push((t - t0, ev));
                }
                if !done || pending.is_empty() {
                    break;
                }
                self.feed_app();
            }
        } else {
            // Reading first: it may free buffer, consume held packets and
            // make an ACK due.
            let Role::Receiver { receiver, .. } = &mut self.role else {
                unreachable!()
            };
            while let Some(ev) = receiver.poll_event() {
                match ev {
                    ReceiverEvent::Message(m) => {
                        (m.msg, m.data.len()).hash(&mut self.hasher);
                        self.delivered.push((t - t0, m))
                    }
                    other => {
                        format!("{other:?}").hash(&mut self.hasher);
                        self.receiver_events.push((t - t0, other))
                    }
                }
            }
            t = self.drain_tx(t);
        }
        self.cpu_free = t;
    }

    /// Takes every frame the member has, from `t` on, one CPU cost apart;
    /// returns when the CPU is free again.
    fn drain_tx(&mut self, mut t: Instant) -> Instant {
        loop {
            let tx = match &mut self.role {
                Role::Sender { sender, .. } => sender.poll_transmit(t, &mut self.buf),
                Role::Receiver { receiver, .. } => receiver.poll_transmit(t, &mut self.buf),
            };
            let Some(tx) = tx else {
                break;
            };
            t += self.cost.tx_cost;
            let bytes = &self.buf[..tx.len];
            if let Role::Sender { first_tx, .. } = &mut self.role {
                if let Ok(Repr::Data { flags, seq, .. }) = Repr::parse(bytes) {
                    if !flags.contains(Flags::RETX) {
                        first_tx.push((seq.0, t, tx.dest));
                    }
                }
            }
            (t - self.t0).hash(&mut self.hasher);
            self.addr.hash(&mut self.hasher);
            bytes.hash(&mut self.hasher);
            let dst = match tx.dest {
                Dest::Group => mak::socket::group_mac(GROUP.0),
                Dest::Member(a) => self.macs[usize::from(a)],
            };
            let mut frame = Vec::with_capacity(ETH_HEADER + tx.len);
            frame.extend_from_slice(&dst.octets());
            frame.extend_from_slice(&self.port.mac().octets());
            frame.extend_from_slice(&ETHERTYPE.to_be_bytes());
            frame.extend_from_slice(bytes);
            self.outbox.push_back((t, frame));
        }
        t
    }
}

impl ts::Node for MemberNode {
    fn step(&mut self, now: Instant) -> bool {
        let mut moved = false;
        let mut revived = false;
        while let Some(&(_, dead)) = self.schedule.get(self.next_change).filter(|c| c.0 <= now) {
            self.next_change += 1;
            revived |= self.dead && !dead;
            self.dead = dead;
        }
        if !self.started {
            self.started = true;
            self.feed_app();
            self.service(now);
        }
        if revived {
            // Its timers were lost while dead: they fire now if due.
            self.service(now);
        }
        while let Ok(n) = self.port.recv(&mut self.frame) {
            moved = true;
            if self.dead || n < ETH_HEADER {
                continue;
            }
            let src = MacAddr(self.frame[6..12].try_into().expect("6 bytes"));
            let from = self
                .macs
                .iter()
                .position(|&m| m == src)
                .expect("a member's port") as u16;
            let t = now.max(self.cpu_free);
            self.cpu_free = t + self.cost.rx_cost;
            let bytes = &self.frame[ETH_HEADER..n];
            match &mut self.role {
                Role::Sender { sender, .. } => sender.handle_frame(t, from, bytes),
                Role::Receiver {
                    receiver,
                    got_first,
                } => {
                    if let Ok(Repr::Data { flags, seq, .. }) = Repr::parse(bytes) {
                        if !flags.contains(Flags::RETX) {
                            got_first.insert(seq.0);
                        }
                    }
                    receiver.handle_frame(t, from, bytes);
                }
            }
            self.service(self.cpu_free);
        }
        let timeout = match &self.role {
            Role::Sender { sender, .. } => sender.poll_timeout(),
            Role::Receiver { receiver, .. } => receiver.poll_timeout(),
        };
        if let Some(at) = timeout.filter(|&at| at <= now && !self.dead) {
            let t = now.max(self.cpu_free);
            (at - self.t0).hash(&mut self.hasher);
            self.addr.hash(&mut self.hasher);
            match &mut self.role {
                Role::Sender { sender, .. } => sender.handle_timeout(t),
                Role::Receiver { receiver, .. } => receiver.handle_timeout(t),
            }
            self.service(t);
        }
        // Frames the CPU put out before a death still leave.
        while self.outbox.front().is_some_and(|(t, _)| *t <= now) {
            let (_, frame) = self.outbox.pop_front().expect("a frame");
            let _ = self.port.send(&frame);
            self.frames += 1;
            moved = true;
        }
        moved
    }

    fn poll_at(&mut self) -> Option<Instant> {
        let timer = match &self.role {
            Role::Sender { sender, .. } => sender.poll_timeout(),
            Role::Receiver { receiver, .. } => receiver.poll_timeout(),
        };
        let start = (!self.started).then_some(self.t0);
        [
            start,
            timer.filter(|_| !self.dead),
            self.outbox.front().map(|f| f.0),
            self.schedule.get(self.next_change).map(|c| c.0),
            self.port.next_delivery(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// The simulation of one spec.
pub struct Sim;

impl Sim {
    /// Runs `msgs` through the group: queued at start as far as the send
    /// buffer allows, the rest as messages complete; until nothing is
    /// pending or the spec's time limit.
    pub fn run(spec: SimSpec, msgs: &[Vec<u8>]) -> Outcome {
        let n = spec.receivers;
        let names =
            std::iter::once("sender".to_string()).chain((1..=n).map(|i| format!("receiver{i}")));
        let mut sim = ts::Sim::new(names);
        let t0 = sim.now();
        let mut seeder = ChaCha8Rng::seed_from_u64(spec.seed);
        let seeds: Vec<u64> = (1..=n).map(|_| seeder.random()).collect();
        let cost = spec.cost;
        let cables = (0..=n)
            .map(|i| {
                if i == 0 {
                    let f = cost.on(FaultConfig::default());
                    return Cable {
                        up: f.clone(),
                        down: f,
                    };
                }
                let f = spec.faults[(i - 1) % spec.faults.len()];
                Cable {
                    up: cost.on(f.config(seeder.random())),
                    down: cost.on(f.config(seeder.random())),
                }
            })
            .collect();
        let mut ports = sim.cabled_switch(ts::mtu(1500), cables);
        let macs: Vec<MacAddr> = ports.iter().map(Port::mac).collect();
        let group = mak::socket::group_mac(GROUP.0);
        for p in &mut ports {
            p.join_group(group).expect("a group address");
        }
        let mut schedule = vec![Vec::new(); n + 1];
        for (list, dead) in [(&spec.kill, true), (&spec.revive, false)] {
            for &(r, at) in list {
                schedule[r + 1].push((t0 + at, dead));
            }
        }
        for s in &mut schedule {
            s.sort_by_key(|c| c.0);
        }
        let members: Vec<Member<u16>> = (1..=n as u16).map(|i| Member::new(i, i)).collect();
        let mut sim = sim.populate(ports, |i, port| {
            let role = if i == 0 {
                Role::Sender {
                    sender: Box::new(
                        Sender::new(
                            spec.cfg.clone(),
                            GROUP,
                            MemberId(0),
                            members.clone(),
                            Seq(0),
                        )
                        .unwrap(),
                    ),
                    pending: msgs.iter().cloned().collect(),
                    first_tx: Vec::new(),
                }
            } else {
                Role::Receiver {
                    receiver: Box::new(
                        Receiver::new(
                            spec.cfg.clone(),
                            GROUP,
                            MemberId(i as u16),
                            Member::new(0, 0),
                            Seq(0),
                            seeds[i - 1],
                        )
                        .unwrap(),
                    ),
                    got_first: BTreeSet::new(),
                }
            };
            MemberNode {
                role,
                port,
                addr: i as u16,
                macs: macs.clone(),
                cost,
                t0,
                cpu_free: t0,
                outbox: VecDeque::new(),
                schedule: std::mem::take(&mut schedule[i]),
                next_change: 0,
                dead: false,
                delivered: Vec::new(),
                receiver_events: Vec::new(),
                sender_events: Vec::new(),
                sender_done_at: None,
                frames: 0,
                hasher: DefaultHasher::new(),
                buf: vec![0u8; spec.cfg.mtu],
                frame: vec![0u8; 1500 + ETH_HEADER],
                // The sender starts at t0; receivers wait for frames.
                started: i != 0,
            }
        });
        sim.drive(spec.limit);
        finish(&mut sim)
    }
}

fn finish(sim: &mut ts::Sim<Vec<MemberNode>>) -> Outcome {
    let mut hub = HubStats::default();
    for i in 0..sim.len() {
        let (up, down) = sim.fault_stats(i);
        hub.copies_lost += up.lost + down.lost;
        hub.copies_duplicated += up.duplicated + down.duplicated;
        hub.frames += sim[i].frames;
    }
    let Role::Sender {
        sender,
        pending,
        first_tx,
    } = &sim[0].role
    else {
        unreachable!("node 0 sends")
    };
    for &(seq, at, dest) in first_tx {
        let targets: Vec<usize> = match dest {
            Dest::Group => (1..sim.len()).collect(),
            Dest::Member(a) => vec![usize::from(a)],
        };
        for r in targets {
            let Role::Receiver { got_first, .. } = &sim[r].role else {
                continue;
            };
            if !got_first.contains(&seq) && !sim[r].dead_at(at) {
                hub.first_tx_lost.insert(seq);
            }
        }
    }
    let (sender, sender_idle) = (sender.stats(), sender.is_idle() && pending.is_empty());
    let mut hasher = DefaultHasher::new();
    for n in sim.iter() {
        n.hasher.finish().hash(&mut hasher);
    }
    let end = sim.elapsed();
    let receivers = &mut sim[1..];
    Outcome {
        delivered: receivers
            .iter_mut()
            .map(|r| std::mem::take(&mut r.delivered))
            .collect(),
        receiver_events: receivers
            .iter_mut()
            .map(|r| std::mem::take(&mut r.receiver_events))
            .collect(),
        receivers: receivers
            .iter()
            .map(|r| match &r.role {
                Role::Receiver { receiver, .. } => receiver.stats(),
                Role::Sender { .. } => unreachable!("nodes 1.. receive"),
            })
            .collect(),
        sender_events: std::mem::take(&mut sim[0].sender_events),
        sender,
        hub,
        end,
        sender_idle,
        sender_done_at: sim[0].sender_done_at,
        trace_hash: hasher.finish(),
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
