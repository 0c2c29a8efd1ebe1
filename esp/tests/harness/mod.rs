//! The simulation harness shared by the `sim`, `liveness` and
//! `trace_events` test binaries: two ESP endpoints over a sim pair on the
//! virtual clock (`testkit::sim`), with seeded faults, and byte-exact
//! transfers.
#![allow(dead_code)]

use std::io;
use std::time::{Duration, Instant};

use esp::conn::{Connection, Error, IsnGenerator, State};
use esp::listener::{Listener, SynOutcome};
use esp::wire::{EspFrame, ETHERTYPE_ESP};
use esp::TransportConfig;
use testkit::sim::{self, FaultConfig, Link, Node, Nodes, Port, SimClock};

pub const MTU: usize = 1500;
pub const MB: usize = 1 << 20;
/// Payload bytes per segment at MTU 1500.
pub const MSS_1500: usize = MTU - 20;

/// One connection and its port, driven on the virtual clock: every ready
/// frame in, expired timers, every ready segment out (the steps of the
/// runtime's engine for one connection, without threads or a real clock).
pub struct ConnDriver {
    pub conn: Connection,
    pub link: Port,
    pub buf: Vec<u8>,
}

impl ConnDriver {
    pub fn new(conn: Connection, link: Port) -> Self {
        let buf = vec![0u8; link.mtu() + 14];
        Self { conn, link, buf }
    }

    /// Receives, fires timers, transmits; true when any frame moved.
    pub fn poll(&mut self, now: Instant) -> io::Result<bool> {
        let mut moved = false;
        loop {
            match self.link.recv(&mut self.buf) {
                Ok(n) => {
                    moved = true;
                    match EspFrame::parse(&self.buf[..n], ETHERTYPE_ESP, MTU + 14) {
                        Ok(f) => self.conn.handle_segment(now, &f.header, f.payload),
                        Err(_) => self.conn.on_malformed(),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        while let Some(n) = self.conn.poll_transmit(now, &mut self.buf) {
            moved = true;
            if self.link.send(&self.buf[..n]).is_err() {
                self.conn.on_send_error();
            }
        }
        Ok(moved)
    }

    /// The connection's timer or a frame the link holds back.
    pub fn poll_at(&self) -> Option<Instant> {
        [self.conn.poll_timeout(), self.link.poll_at()]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Node for ConnDriver {
    fn step(&mut self, now: Instant) -> bool {
        self.poll(now).expect("a sim port does not fail")
    }
    fn poll_at(&mut self) -> Option<Instant> {
        ConnDriver::poll_at(self)
    }
    fn summary(&self) -> String {
        format!("{:?} {:?}", self.conn, self.conn.stats())
    }
}

/// The two ends of an established connection: A (client, port 0) and B
/// (the accepted end, port 1).
pub struct Ends {
    pub a: ConnDriver,
    pub b: ConnDriver,
}

impl Nodes for Ends {
    fn node_count(&self) -> usize {
        2
    }
    fn node(&self, i: usize) -> &dyn Node {
        [&self.a, &self.b][i]
    }
    fn node_mut(&mut self, i: usize) -> &mut dyn Node {
        match i {
            0 => &mut self.a,
            _ => &mut self.b,
        }
    }
}

/// The simulation of an established connection.
pub type Sim = sim::Sim<Ends>;

/// B before the connection: a listener on port 1 that takes the first
/// connection it accepts and then reads no further.
struct Accepting {
    listener: Listener<()>,
    link: Port,
    buf: Vec<u8>,
    conn: Option<Connection>,
}

impl Node for Accepting {
    fn step(&mut self, now: Instant) -> bool {
        let mut moved = false;
        while self.conn.is_none() {
            let Ok(n) = self.link.recv(&mut self.buf) else {
                break;
            };
            moved = true;
            let Ok(f) = EspFrame::parse(&self.buf[..n], ETHERTYPE_ESP, MTU + 14) else {
                continue;
            };
            if let SynOutcome::Accept(c) =
                self.listener
                    .on_segment(now, 0, f.eth.src, &f.header, |_| false)
            {
                self.conn = Some(*c);
            }
        }
        moved
    }
    fn poll_at(&mut self) -> Option<Instant> {
        self.link.poll_at()
    }
}

/// A connecting to B's listener.
struct Handshake {
    a: ConnDriver,
    b: Accepting,
}

impl Nodes for Handshake {
    fn node_count(&self) -> usize {
        2
    }
    fn node(&self, i: usize) -> &dyn Node {
        [&self.a as &dyn Node, &self.b][i]
    }
    fn node_mut(&mut self, i: usize) -> &mut dyn Node {
        match i {
            0 => &mut self.a,
            _ => &mut self.b,
        }
    }
}

pub fn faults(seed: u64) -> FaultConfig {
    FaultConfig::seeded(seed).with_delay(Duration::from_micros(20), Duration::ZERO)
}

/// Connects A (client) to B (listener) over a pair with the given faults.
pub fn connect(cfg: &TransportConfig, ab: FaultConfig, ba: FaultConfig) -> Sim {
    connect_on(SimClock::new(), cfg, ab, ba)
}

/// [`connect`] on a given clock.
pub fn connect_on(clock: SimClock, cfg: &TransportConfig, ab: FaultConfig, ba: FaultConfig) -> Sim {
    let mut sim = sim::Sim::on_clock(clock, ["a", "b"]);
    sim.pace.settle = true;
    let [la, lb] = sim.pair(sim::mtu(MTU), ab, ba);
    let (ma, mb) = (la.mac(), lb.mac());
    let isn = IsnGenerator::with_key([9; 16]);
    let now = sim.now();
    let tracer = sim.tracer().clone();
    let conn = tracer.in_node(0, || {
        Connection::connect(
            cfg,
            MTU,
            (ma, 40000),
            (mb, 80),
            isn.isn((ma, 40000), (mb, 80), 0),
            now,
        )
    });
    let listener = tracer.in_node(1, || Listener::new(cfg.clone(), MTU, (mb, 80), isn));
    let mut sim = sim.with_nodes(Handshake {
        a: ConnDriver::new(conn, la),
        b: Accepting {
            listener,
            link: lb,
            buf: vec![0u8; MTU + 14],
            conn: None,
        },
    });
    sim.run(Duration::from_secs(60), |s| s.b.conn.is_some());
    let mut sim = sim.map(|h| Ends {
        a: h.a,
        b: ConnDriver::new(h.b.conn.expect("accepted"), h.b.link),
    });
    sim.run(Duration::from_secs(60), |s| {
        s.a.conn.is_established() && s.b.conn.is_established()
    });
    sim
}

/// Byte `i` of the test stream.
pub fn byte_at(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x >> 56) as u8) ^ (i as u8)
}

pub fn fill(buf: &mut [u8], from: u64) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = byte_at(from + k as u64);
    }
}

/// Outcome of a one-way transfer.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Outcome {
    pub received: usize,
    pub elapsed: Duration,
    pub a: esp::Stats,
    pub b: esp::Stats,
    /// Hashes of every frame each end sent, with its virtual send time.
    pub trace: (u64, u64),
}

/// Sends `len` bytes A -> B, closes, reads to EOF, checks every byte.
pub fn transfer(cfg: &TransportConfig, ab: FaultConfig, ba: FaultConfig, len: usize) -> Outcome {
    transfer_on(SimClock::new(), cfg, ab, ba, len)
}

/// [`transfer`] on a given clock.
pub fn transfer_on(
    clock: SimClock,
    cfg: &TransportConfig,
    ab: FaultConfig,
    ba: FaultConfig,
    len: usize,
) -> Outcome {
    let mut sim = connect_on(clock, cfg, ab, ba);
    let mut written = 0usize;
    let mut read = 0usize;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut rbuf = vec![0u8; 64 * 1024];
    let mut expect = vec![0u8; 64 * 1024];
    let mut eof = false;
    sim.run(Duration::from_secs(600), |s| {
        while written < len && s.a.conn.send_capacity() > 0 {
            let n = (len - written)
                .min(chunk.len())
                .min(s.a.conn.send_capacity());
            fill(&mut chunk[..n], written as u64);
            match s.a.conn.send(&chunk[..n]) {
                Ok(k) => written += k,
                Err(Error::Blocked) => break,
                Err(e) => panic!("writer failed: {e} ({:?})", s.a.conn.stats()),
            }
        }
        if written == len {
            s.a.conn.close();
        }
        loop {
            match s.b.conn.recv(&mut rbuf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    fill(&mut expect[..n], read as u64);
                    assert!(rbuf[..n] == expect[..n], "corrupt data at offset {read}");
                    read += n;
                }
                Err(Error::Blocked) => break,
                Err(e) => panic!("reader failed: {e}"),
            }
        }
        if eof && s.b.conn.state() == State::CloseWait {
            s.b.conn.close();
        }
        eof && s.a.conn.state() == State::Closed && s.b.conn.state() == State::Closed
    });
    assert_eq!(read, len, "length differs");
    assert_eq!(sim.a.conn.error(), None);
    assert_eq!(sim.b.conn.error(), None);
    Outcome {
        received: read,
        elapsed: sim.clock.elapsed(),
        a: sim.a.conn.stats(),
        b: sim.b.conn.stats(),
        trace: (sim.wire_hash(0), sim.wire_hash(1)),
    }
}

pub fn lossy(p: f64, seed: u64) -> FaultConfig {
    faults(seed).with_loss(p)
}
