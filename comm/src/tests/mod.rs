//! Simulations of the communicator's core (`state.rs`, crate-private) over
//! CTP endpoints on simulated links, driven by `testkit::sim` (virtual
//! clock, seeded loss, duplication and reordering): `sim` (tag matching
//! and order), `ulfc_sim` (flow and connection control), `liveness_sim`
//! (failure detection). Unit tests of the crate root: they reach into
//! `State`, which the public API hides.

mod liveness_sim;
mod sim;
mod ulfc_sim;

use std::io;
use std::time::{Duration, Instant, SystemTime};

use ctp::{Config, Endpoint, EthAddr};
use testkit::sim::{
    self as ts, edp_socket, edp_socket_poll_at, EdpSocket, FaultConfig, Link, Port,
};

use crate::matching::{SourceSel, TagSel};
use crate::request::Completion;
use crate::state::State;
use crate::CommConfig;

pub(crate) const PORT: u16 = 1600;

/// A simulation of ranks.
pub(crate) type Sim = ts::Sim<Vec<Node>>;

/// One rank: a CTP endpoint on an EDP socket on its sim port, and the
/// communicator's state above it.
pub(crate) struct Node {
    pub ep: Endpoint<EthAddr>,
    tr: EdpSocket,
    pub st: State<EthAddr>,
    buf: Vec<u8>,
}

impl Node {
    pub fn new(port: Port, rank: usize, hosts: &[EthAddr], cfg: CommConfig, t0: Instant) -> Node {
        let tr = edp_socket(port, PORT);
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

    /// The process restarts at `now` on the same interface: a new CTP
    /// endpoint and communicator state (a new incarnation); frames that
    /// reached the dead process are gone.
    pub fn restart(&mut self, rank: usize, hosts: &[EthAddr], cfg: CommConfig, now: Instant) {
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
}

impl ts::Node for Node {
    /// One step at `now`: receive, timers, deliveries into the state, the
    /// state's fragments into the endpoint, transmit.
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
        while !self.st.holding() {
            match self.ep.poll_delivery() {
                Some(d) => self.st.on_delivery(d),
                None => break,
            }
        }
        self.st.pump_held();
        self.st.liveness_tick(now);
        self.st.pump_sends(&mut self.ep, now);
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

/// `n` ranks (`rank0`, ...) on one switch whose ports all send through
/// `f`; the clock moves at most 10 ms per round (so a run that waits for
/// the clock ends near its time: CTP's far timers, e.g. session expiry,
/// would jump) and at least 1 us. Returns the simulation and the ranks'
/// addresses.
pub(crate) fn cluster(n: usize, cfg: CommConfig, f: FaultConfig) -> (Sim, Vec<EthAddr>) {
    let mut sim = ts::Sim::new((0..n).map(|r| format!("rank{r}")));
    sim.pace.max_step = Some(Duration::from_millis(10));
    sim.pace.min_step = Duration::from_micros(1);
    let ports = sim.switch(ts::mtu(1500), vec![f; n]);
    let hosts: Vec<EthAddr> = ports
        .iter()
        .map(|p| runtime::EthAddr::new(p.mac(), PORT))
        .collect();
    let t0 = sim.now();
    let sim = sim.populate(ports, |r, p| Node::new(p, r, &hosts, cfg.clone(), t0));
    (sim, hosts)
}

/// Steps the nodes in `live` until `done`, calling `check` after every
/// step; panics unless done within `limit` of virtual time.
pub(crate) fn run(
    sim: &mut Sim,
    live: &[usize],
    limit: Duration,
    mut check: impl FnMut(&mut [Node]),
    mut done: impl FnMut(&mut [Node]) -> bool,
) {
    sim.set_running(live);
    let stop = sim.run_checked(limit, |s| check(s), |s| done(s));
    assert_eq!(
        stop,
        ts::Stop::Done,
        "not done within {limit:?} of virtual time"
    );
}

/// `run` without a check after each step.
pub(crate) fn until(
    sim: &mut Sim,
    live: &[usize],
    limit: Duration,
    done: impl FnMut(&mut [Node]) -> bool,
) {
    run(sim, live, limit, |_| {}, done)
}

/// Every message node `n` holds from rank `from`, taken.
pub(crate) fn received(n: &mut Node, from: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    loop {
        let id =
            n.st.irecv(SourceSel::Rank(from), TagSel::Any, false)
                .unwrap();
        match n.st.take_complete(id) {
            Some(r) => match r.finish().unwrap() {
                Completion::Received(_, d) => got.push(d),
                c => panic!("{c:?}"),
            },
            None => {
                assert!(n.st.cancel_recv(id));
                return got;
            }
        }
    }
}
