//! The project's one deterministic simulator: N nodes (protocol cores,
//! sockets on a runtime) over in-memory links on a virtual clock, run until
//! idle, until a condition or until a time limit, with each node's
//! `tracing` events recorded under its name and printed when the test fails.
//!
//! Modelled on quinn-proto's `Pair` (`quinn-proto/src/tests/util.rs`: two
//! endpoints, a virtual `time`, `drive()` until idle, a span per endpoint),
//! for N nodes. The links are the project's (`link::sim`: [`SimLink`]
//! pairs and switches, each sending port through its own seeded
//! `FaultInjector`); the clock is [`SimClock`], which moves only when the
//! simulation moves it.
//!
//! - [`Sim`]: the clock, the network, the nodes and their traces. Build it
//!   with [`Sim::new`] (node names), make the network ([`Sim::pair`],
//!   [`Sim::switch`], [`Sim::cabled_switch`]: each returns one [`Port`] per
//!   node), then give it the nodes ([`Sim::populate`], [`Sim::with_nodes`]).
//!   `Sim<T>` dereferences to its nodes `T`, so a test reads `sim[0].ep` or
//!   `sim.a.conn`.
//! - [`Node`]: what a node does in one step at an instant (take the frames
//!   due, fire its timers, send) and when it next needs a step; [`Nodes`]:
//!   a collection of them (`Vec<N>`, arrays, or a struct with named ends).
//! - Running: [`Sim::drive`] (until idle), [`Sim::run_until`] (until a
//!   condition, idle or a limit), [`Sim::run`] (until a condition, else
//!   panic), [`Sim::run_checked`] (a check after every node's step),
//!   [`Sim::settle`] (at the current instant until quiet). [`Pace`] picks
//!   how the clock moves.
//! - Options a test may need: per-direction faults (a pair's two configs,
//!   a [`Cable`] per switch port), pulling a cable ([`Sim::unplug`]),
//!   changing faults mid-run ([`Sim::set_faults`]), nodes that stop
//!   ([`Sim::set_running`]), instants to visit ([`Sim::wake_at`]), a hash of
//!   every port's frames ([`Sim::wire_hash`]).
//! - Tracing ([`Tracer`]): every step of node `i` runs inside a span
//!   `node{node=i name=..}` under a subscriber of this simulation that keeps
//!   the last events of each node (by default events at DEBUG and up, and
//!   no protocol spans, which cost more than the events; `SIM_TRACE` sets
//!   an `EnvFilter` for events and spans instead, e.g. `trace`, and
//!   `SIM_TRACE=off` captures nothing; `SIM_TRACE_LINES` sets the lines
//!   kept per node, default 500). They are printed to stderr, per node and
//!   in virtual time, when the test panics, whether the simulation is still
//!   alive or was the last one this thread dropped, and on drop with
//!   `SIM_TRACE_PRINT=1`. A simulation made while another subscriber is the
//!   thread's default (a test that installs its own) traces into that one.
//! - [`edp_socket`]: an EDP socket on a port, for nodes that run a protocol
//!   over the runtime.
//!
//! ```
//! use std::time::Duration;
//! use testkit::sim::{mtu, FaultConfig, Link, Node, Port, Sim};
//!
//! /// Echoes every frame back to its sender.
//! struct Echo(Port);
//! impl Node for Echo {
//!     fn step(&mut self, _now: std::time::Instant) -> bool {
//!         let mut buf = [0u8; 1514];
//!         let mut moved = false;
//!         while let Ok(n) = self.0.recv(&mut buf) {
//!             buf.copy_within(6..12, 0);
//!             self.0.send(&buf[..n]).unwrap();
//!             moved = true;
//!         }
//!         moved
//!     }
//!     fn poll_at(&mut self) -> Option<std::time::Instant> {
//!         self.0.next_delivery()
//!     }
//! }
//!
//! let mut sim = Sim::new(["a", "b"]);
//! let delay = FaultConfig::seeded(1).with_delay(Duration::from_micros(10), Duration::ZERO);
//! let ports = sim.pair(mtu(1500), delay.clone(), delay);
//! let (a, b) = (ports[0].mac(), ports[1].mac());
//! let mut sim = sim.populate(ports, |_, p| Echo(p));
//! let mut frame = [0u8; 64];
//! frame[..6].copy_from_slice(&b.octets());
//! frame[6..12].copy_from_slice(&a.octets());
//! sim[0].0.send(&frame).unwrap();
//! // A frame bounces between the ends until the time limit.
//! let stop = sim.drive(Duration::from_millis(1));
//! assert_eq!(stop, testkit::sim::Stop::TimeLimit);
//! assert_eq!(sim.link_stats(1).received, 50);
//! ```
//!
//! Files: `net` (ports, cables, the network), `trace` (per-node capture),
//! `socket` (EDP sockets on ports), `tests`.

mod net;
mod socket;
mod trace;

use std::collections::BTreeSet;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

pub use edp::{EdpSocket, MacAddr};
pub use link::fault::{FaultConfig, FaultStats};
pub use link::sim::{sim_mac, SimClock, SimControl, SimLink, SimLinkStats, SimOptions};
pub use link::Link;

pub use self::net::{Cable, Port};
pub use self::socket::{edp_socket, edp_socket_poll_at};
pub use self::trace::Tracer;

use self::net::Net;
use self::trace::TraceGuard;

/// Link options with MTU `bytes` (largest Ethernet payload) and the other
/// [`SimOptions`] at their defaults.
pub fn mtu(bytes: usize) -> SimOptions {
    SimOptions {
        mtu: bytes,
        ..SimOptions::default()
    }
}

/// One node of a simulation: a protocol core and its port, or a socket on a
/// runtime whose link is a [`Port`].
pub trait Node {
    /// One step at virtual instant `now`: takes in the frames due, fires
    /// the timers due, sends what is ready. Returns true when a frame moved
    /// (in or out), which [`Pace::settle`] uses.
    fn step(&mut self, now: Instant) -> bool;

    /// The earliest instant this node needs a step: its protocol's deadline
    /// or the next frame due on its port (due or not); `None` when nothing
    /// is pending. (`&mut`: some cores tidy their timers when asked.)
    fn poll_at(&mut self) -> Option<Instant>;

    /// A short description of the node's state for failure messages
    /// (default: none).
    fn summary(&self) -> String {
        String::new()
    }
}

/// The nodes of a simulation, by index: `Vec<N>`, `[N; K]`, or a struct
/// whose fields are the nodes (implement this for it).
pub trait Nodes {
    /// Number of nodes.
    fn node_count(&self) -> usize;
    /// Node `i` (`i < node_count()`).
    fn node(&self, i: usize) -> &dyn Node;
    /// Node `i`, mutably.
    fn node_mut(&mut self, i: usize) -> &mut dyn Node;
}

impl<N: Node> Nodes for Vec<N> {
    fn node_count(&self) -> usize {
        self.len()
    }
    fn node(&self, i: usize) -> &dyn Node {
        &self[i]
    }
    fn node_mut(&mut self, i: usize) -> &mut dyn Node {
        &mut self[i]
    }
}

impl<N: Node, const K: usize> Nodes for [N; K] {
    fn node_count(&self) -> usize {
        K
    }
    fn node(&self, i: usize) -> &dyn Node {
        &self[i]
    }
    fn node_mut(&mut self, i: usize) -> &mut dyn Node {
        &mut self[i]
    }
}

/// How a run moves through virtual time.
///
/// A run repeats rounds: every running node steps once at the current
/// instant (in index order; cables forward their frames before and after),
/// then the run's condition is checked; then the clock moves to the
/// earliest pending event (a node's deadline, a frame's delivery, a
/// [`Sim::wake_at`] instant), or the round repeats at the same instant when
/// that event is already due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Repeat rounds at one instant while frames move, and one more round
    /// after the condition was checked (the condition may have queued
    /// frames) before the clock moves: quinn's `drive` at one instant.
    pub settle: bool,
    /// Largest move of the clock per round; with it a run never goes idle
    /// (the clock moves by this much when nothing is pending), and a run
    /// waiting for the clock ends near its instant.
    pub max_step: Option<Duration>,
    /// Smallest move of the clock when the next event is already due
    /// (`Duration::ZERO`: repeat the round at the same instant).
    pub min_step: Duration,
    /// Rounds at one instant after which the run panics (a livelock).
    pub max_rounds: u64,
}

impl Default for Pace {
    /// One round per visit of an instant, the clock jumps to the next event,
    /// a million rounds at one instant at most.
    fn default() -> Self {
        Self {
            settle: false,
            max_step: None,
            min_step: Duration::ZERO,
            max_rounds: 1_000_000,
        }
    }
}

/// Why a run returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The condition became true.
    Done,
    /// Nothing is pending: no deadline, no frame in flight, no wake-up.
    Idle,
    /// The next event lies beyond the run's time limit.
    TimeLimit,
}

/// A deterministic simulation: nodes `T`, the network between them, the
/// virtual clock and the nodes' traces (see the module docs).
///
/// Dereferences to `T`. Ports are numbered in the order the network
/// methods made them; port `i` is usually node `i`'s.
pub struct Sim<T = ()> {
    /// The virtual clock every port and node of this simulation reads.
    pub clock: SimClock,
    /// How runs move the clock.
    pub pace: Pace,
    nodes: T,
    names: Vec<String>,
    running: Vec<bool>,
    wakeups: BTreeSet<Instant>,
    net: Net,
    tracer: Tracer,
    _guard: TraceGuard,
}

impl Sim<()> {
    /// A simulation of nodes named `names` (node `i` is `names[i]`) on a
    /// new clock, without network or nodes yet.
    pub fn new<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        Self::on_clock(SimClock::new(), names)
    }

    /// [`Sim::new`] on a given clock (e.g. one a test's own tracing layer
    /// also reads).
    pub fn on_clock<S: Into<String>>(clock: SimClock, names: impl IntoIterator<Item = S>) -> Self {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        let (tracer, guard) = trace::start(&clock, &names);
        Self {
            pace: Pace::default(),
            nodes: (),
            running: vec![true; names.len()],
            names,
            wakeups: BTreeSet::new(),
            net: Net::default(),
            tracer,
            _guard: guard,
            clock,
        }
    }

    /// Gives the simulation its nodes, one per port: node `i` is
    /// `make(i, port i)`, made inside node `i`'s trace span (so spans it
    /// creates, a connection's say, are the node's).
    ///
    /// Panics: unless there is one port per name.
    pub fn populate<P, N: Node>(
        self,
        ports: impl IntoIterator<Item = P>,
        mut make: impl FnMut(usize, P) -> N,
    ) -> Sim<Vec<N>> {
        let tracer = self.tracer.clone();
        let nodes: Vec<N> = ports
            .into_iter()
            .enumerate()
            .map(|(i, p)| tracer.in_node(i, || make(i, p)))
            .collect();
        self.with_nodes(nodes)
    }
}

impl<T> Sim<T> {
    /// The same simulation with nodes `nodes` instead.
    ///
    /// Panics: unless there is one node per name.
    pub fn with_nodes<U: Nodes>(self, nodes: U) -> Sim<U> {
        self.map(|_| nodes)
    }

    /// The same simulation (clock, network, traces) with its nodes turned
    /// into `f(nodes)`: e.g. a listening end replaced by the connection it
    /// accepted.
    ///
    /// Panics: unless the new nodes are one per name.
    pub fn map<U: Nodes>(self, f: impl FnOnce(T) -> U) -> Sim<U> {
        let nodes = f(self.nodes);
        assert_eq!(
            nodes.node_count(),
            self.names.len(),
            "one node per name: {:?}",
            self.names
        );
        Sim {
            clock: self.clock,
            pace: self.pace,
            nodes,
            names: self.names,
            running: self.running,
            wakeups: self.wakeups,
            net: self.net,
            tracer: self.tracer,
            _guard: self._guard,
        }
    }

    /// Two ports joined by a wire: frames port 0 sends go through `a_to_b`,
    /// port 1's through `b_to_a` (seeds are derived per direction). Pulling
    /// either cable partitions both directions.
    pub fn pair(
        &mut self,
        opts: SimOptions,
        a_to_b: FaultConfig,
        b_to_a: FaultConfig,
    ) -> [Port; 2] {
        self.net.pair(&self.clock, opts, a_to_b, b_to_a)
    }

    /// A switch with one port per fault config (frames a port sends go
    /// through its config; seeds derived per port); delivery by
    /// destination MAC, broadcast to all other ports, a multicast group to
    /// the ports that joined it.
    pub fn switch(&mut self, opts: SimOptions, faults: Vec<FaultConfig>) -> Vec<Port> {
        self.net.switch(&self.clock, opts, faults)
    }

    /// A switch whose ports are each reached through their own [`Cable`]:
    /// faults on the frames a node sends (`up`) and, independently per
    /// node, on those it receives (`down`), so the copies of one multicast
    /// frame meet different fates.
    pub fn cabled_switch(&mut self, opts: SimOptions, cables: Vec<Cable>) -> Vec<Port> {
        self.net.cabled_switch(&self.clock, opts, cables)
    }

    /// Runs `f` in node `i`'s trace span under this simulation's
    /// subscriber, and the like (see [`Tracer`]).
    pub fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// The name of node `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Virtual time since the clock's start.
    pub fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    /// Moves the clock forward to `t` (never back).
    pub fn advance_to(&self, t: Instant) {
        self.clock.advance_to(t);
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// Makes runs visit instant `t` (besides the nodes' own events): for a
    /// condition that acts at `t`, e.g. healing a partition.
    pub fn wake_at(&mut self, t: Instant) {
        self.wakeups.insert(t);
    }

    /// Pulls the cable of port `port`: frames it sends and frames sent to
    /// it are lost from now on (frames already in flight still arrive).
    /// On a pair both directions are cut.
    ///
    /// Panics: for a port that does not exist.
    pub fn unplug(&mut self, port: usize) {
        self.tracer
            .in_sim(|| tracing::debug!(target: "testkit::sim", port, "cable pulled"));
        self.net.set_up(port, false);
    }

    /// Plugs the cable of port `port` back in.
    ///
    /// Panics: for a port that does not exist.
    pub fn plug(&mut self, port: usize) {
        self.tracer
            .in_sim(|| tracing::debug!(target: "testkit::sim", port, "cable plugged in"));
        self.net.set_up(port, true);
    }

    /// Replaces the faults of the frames port `port` sends (its cable's
    /// `up` faults for a cabled port), mid-run; the seed is derived as at
    /// creation.
    ///
    /// Panics: for a port that does not exist or an invalid config.
    pub fn set_faults(&mut self, port: usize, cfg: FaultConfig) {
        self.net.set_faults(port, cfg);
    }

    /// Counters of port `port` (frames).
    pub fn link_stats(&self, port: usize) -> SimLinkStats {
        self.net.link_stats(port)
    }

    /// Fault counters of port `port`: of the frames it sends, and of the
    /// frames it receives through its cable (default for a port without
    /// one).
    pub fn fault_stats(&self, port: usize) -> (FaultStats, FaultStats) {
        self.net.fault_stats(port)
    }

    /// A hash of every frame port `port` sent: its virtual send instant,
    /// its length and its first 64 bytes (the headers). Equal for two runs
    /// with the same seeds and inputs.
    pub fn wire_hash(&self, port: usize) -> u64 {
        self.net.wire_hash(port)
    }
}

impl<T: Nodes> Sim<T> {
    /// Steps only the nodes in `live` from now on: the others are stopped
    /// processes (not stepped, their deadlines not waited for; frames still
    /// reach their ports).
    ///
    /// Panics: for a node that does not exist.
    pub fn set_running(&mut self, live: &[usize]) {
        let n = self.nodes.node_count();
        assert!(live.iter().all(|&i| i < n), "nodes {live:?} of {n}");
        for (i, r) in self.running.iter_mut().enumerate() {
            *r = live.contains(&i);
        }
    }

    /// Whether node `i` is stepped.
    pub fn is_running(&self, i: usize) -> bool {
        self.running[i]
    }

    /// The earliest pending event: a running node's deadline or delivery,
    /// a frame on a cable, a wake-up after now.
    pub fn next_event(&mut self) -> Option<Instant> {
        let now = self.clock.now();
        let wake = self.wakeups.range(now..).find(|&&t| t > now).copied();
        let mut next = [self.net.poll_at(), wake].into_iter().flatten().min();
        for i in 0..self.nodes.node_count() {
            if self.running[i] {
                if let Some(t) = self.nodes.node_mut(i).poll_at() {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
        }
        next
    }

    /// One round at the current instant: cables, every running node once,
    /// cables again. Returns whether a frame moved.
    pub fn step(&mut self) -> bool {
        let d = self.tracer.dispatch().clone();
        tracing::dispatcher::with_default(&d, || self.round(&mut |_| {}))
    }

    /// Rounds at the current instant until no frame moves (the clock does
    /// not move). Panics after [`Pace::max_rounds`] rounds.
    pub fn settle(&mut self) {
        let d = self.tracer.dispatch().clone();
        tracing::dispatcher::with_default(&d, || {
            let mut rounds = 0;
            while self.round(&mut |_| {}) {
                rounds += 1;
                self.check_rounds(rounds);
            }
        });
    }

    /// Runs until nothing is pending (or `limit` of virtual time passed):
    /// quinn's `drive`.
    pub fn drive(&mut self, limit: Duration) -> Stop {
        self.run_until(limit, |_| false)
    }

    /// Runs until `until` (checked after every round) returns true,
    /// nothing is pending, or the next event lies more than `limit` of
    /// virtual time after the start of the run.
    pub fn run_until(&mut self, limit: Duration, mut until: impl FnMut(&mut Self) -> bool) -> Stop {
        self.run_inner(limit, &mut |_| {}, &mut until)
    }

    /// [`Sim::run_until`] calling `check` after every node's step (an
    /// invariant that must hold at every point of the run).
    pub fn run_checked(
        &mut self,
        limit: Duration,
        mut check: impl FnMut(&mut Self),
        mut until: impl FnMut(&mut Self) -> bool,
    ) -> Stop {
        self.run_inner(limit, &mut check, &mut until)
    }

    /// Runs until `until` returns true. Panics (naming the nodes' states)
    /// when the simulation goes idle before, or `limit` of virtual time
    /// passes.
    pub fn run(&mut self, limit: Duration, until: impl FnMut(&mut Self) -> bool) {
        match self.run_until(limit, until) {
            Stop::Done => {}
            Stop::Idle => panic!(
                "simulation stalled with nothing pending at {:?}{}",
                self.clock.elapsed(),
                self.summaries()
            ),
            Stop::TimeLimit => panic!(
                "not done within {limit:?} of virtual time (at {:?}){}",
                self.clock.elapsed(),
                self.summaries()
            ),
        }
    }

    fn summaries(&self) -> String {
        (0..self.nodes.node_count())
            .map(|i| (i, self.nodes.node(i).summary()))
            .filter(|(_, s)| !s.is_empty())
            .map(|(i, s)| format!("\n  {}: {s}", self.names[i]))
            .collect()
    }

    fn check_rounds(&self, rounds: u64) {
        assert!(
            rounds < self.pace.max_rounds,
            "livelock at one instant: {rounds} rounds at virtual time {:?}",
            self.clock.elapsed()
        );
    }

    fn run_inner(
        &mut self,
        limit: Duration,
        check: &mut dyn FnMut(&mut Self),
        until: &mut dyn FnMut(&mut Self) -> bool,
    ) -> Stop {
        let d = self.tracer.dispatch().clone();
        tracing::dispatcher::with_default(&d, || self.run_loop(limit, check, until))
    }

    fn run_loop(
        &mut self,
        limit: Duration,
        check: &mut dyn FnMut(&mut Self),
        until: &mut dyn FnMut(&mut Self) -> bool,
    ) -> Stop {
        let end = self.clock.now() + limit;
        let (mut here, mut rounds) = (self.clock.now(), 0u64);
        loop {
            let now = self.clock.now();
            if now != here {
                (here, rounds) = (now, 0);
            }
            loop {
                rounds += 1;
                self.check_rounds(rounds);
                let moved = self.round(check);
                if until(self) {
                    return Stop::Done;
                }
                if !(self.pace.settle && moved) {
                    break;
                }
            }
            // The condition may have queued frames: send them first.
            if self.pace.settle && self.round(check) {
                continue;
            }
            while self.wakeups.first().is_some_and(|&t| t <= now) {
                self.wakeups.pop_first();
            }
            let t = match (self.next_event(), self.pace.max_step) {
                (Some(t), Some(m)) => t.min(now + m),
                (Some(t), None) => t,
                (None, Some(m)) => now + m,
                (None, None) => return Stop::Idle,
            };
            if t >= end {
                return Stop::TimeLimit;
            }
            if t > now {
                self.clock.advance_to(t);
            } else if !self.pace.min_step.is_zero() {
                self.clock.advance_to(now + self.pace.min_step);
            }
        }
    }

    /// Cables, then every running node in its span, then cables again.
    fn round(&mut self, check: &mut dyn FnMut(&mut Self)) -> bool {
        let now = self.clock.now();
        let mut moved = self.net.forward();
        for i in 0..self.nodes.node_count() {
            if !self.running[i] {
                continue;
            }
            let nodes = &mut self.nodes;
            moved |= self.tracer.span(i).in_scope(|| nodes.node_mut(i).step(now));
            check(self);
        }
        moved | self.net.forward()
    }
}

impl<T> Deref for Sim<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.nodes
    }
}

impl<T> DerefMut for Sim<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.nodes
    }
}

#[cfg(test)]
mod tests;
