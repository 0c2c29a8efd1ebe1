//! The simulation harness shared by the `sim` and `trace_events` test
//! binaries: two ESP endpoints over a `SimLink` pair on a virtual clock,
//! with seeded faults, and byte-exact transfers.
#![allow(dead_code)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use esp::conn::{Connection, Error, IsnGenerator, State};
use esp::listener::{Listener, SynOutcome};
use esp::wire::{EspFrame, MacAddr, ETHERTYPE_ESP};
use esp::TransportConfig;
use link::fault::FaultConfig;
use link::sim::{SimClock, SimLink};
use link::Link;

pub const MTU: usize = 1500;
pub const MB: usize = 1 << 20;
/// Payload bytes per segment at MTU 1500.
pub const MSS_1500: usize = MTU - 20;

/// A SimLink behind a switch that the test can open (partition); it also
/// folds every frame it sends, with its virtual send time, into a trace hash.
pub struct Cut {
    pub inner: SimLink,
    pub cut: Arc<AtomicBool>,
    pub trace: u64,
}

impl Cut {
    pub fn new(inner: SimLink, cut: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            cut,
            trace: 0xcbf2_9ce4_8422_2325,
        }
    }
}

impl Link for Cut {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let t = self.inner.clock().elapsed().as_nanos() as u64;
        for &b in t.to_le_bytes().iter().chain(frame) {
            self.trace = (self.trace ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        if self.cut.load(Ordering::Relaxed) {
            return Ok(()); // lost on the wire
        }
        self.inner.send(frame)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.inner.recv(buf)?;
            if !self.cut.load(Ordering::Relaxed) {
                return Ok(n);
            }
        }
    }
    fn mac(&self) -> MacAddr {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn poll_at(&self) -> Option<Instant> {
        self.inner.poll_at()
    }
}

/// One connection and its link, driven on the virtual clock: every ready
/// frame in, expired timers, every ready segment out (the steps of the
/// runtime's engine for one connection, without threads or a real clock).
pub struct ConnDriver<L: Link> {
    pub conn: Connection,
    pub link: L,
    pub buf: Vec<u8>,
}

impl<L: Link> ConnDriver<L> {
    pub fn new(conn: Connection, link: L, _ethertype: u16) -> Self {
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

pub struct Sim {
    pub clock: SimClock,
    pub a: ConnDriver<Cut>,
    pub b: ConnDriver<Cut>,
    pub cut: Arc<AtomicBool>,
    /// An instant the application wants to run at (e.g. to heal a cut),
    /// besides the ends' own deadlines.
    pub wake: Option<Instant>,
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
    let (la, lb) = SimLink::pair(&clock, MTU, ab, ba);
    let cut = Arc::new(AtomicBool::new(false));
    let (ma, mb) = (la.mac(), lb.mac());
    let isn = IsnGenerator::with_key([9; 16]);
    let conn = Connection::connect(
        cfg,
        MTU,
        (ma, 40000),
        (mb, 80),
        isn.isn((ma, 40000), (mb, 80), 0),
        clock.now(),
    );
    let mut a = ConnDriver::new(conn, Cut::new(la, cut.clone()), ETHERTYPE_ESP);
    let mut lb = Cut::new(lb, cut.clone());
    let mut listener: Listener<()> = Listener::new(cfg.clone(), MTU, (mb, 80), isn);
    let mut buf = vec![0u8; MTU + 14];
    let b_conn = loop {
        let now = clock.now();
        a.poll(now).unwrap();
        let mut found = None;
        while let Ok(n) = lb.recv(&mut buf) {
            let Ok(f) = EspFrame::parse(&buf[..n], ETHERTYPE_ESP, MTU + 14) else {
                continue;
            };
            if let SynOutcome::Accept(c) =
                listener.on_segment(now, 0, f.eth.src, &f.header, |_| false)
            {
                found = Some(c);
                break;
            }
        }
        if let Some(c) = found {
            break c;
        }
        let next = [a.poll_at(), lb.poll_at()]
            .into_iter()
            .flatten()
            .min()
            .expect("the client waits for its SYN");
        clock.advance_to(next);
        assert!(
            clock.elapsed() < Duration::from_secs(60),
            "no SYN got through"
        );
    };
    let b = ConnDriver::new(*b_conn, lb, ETHERTYPE_ESP);
    let mut sim = Sim {
        clock,
        a,
        b,
        cut,
        wake: None,
    };
    sim.run(Duration::from_secs(60), |s| {
        s.a.conn.is_established() && s.b.conn.is_established()
    });
    sim
}

impl Sim {
    /// Runs both ends until `app` returns true; `app` is called whenever
    /// the ends are quiet at the current instant. Panics past `limit` of
    /// virtual time.
    pub fn run(&mut self, limit: Duration, mut app: impl FnMut(&mut Sim) -> bool) {
        loop {
            let mut spins = 0;
            loop {
                let now = self.clock.now();
                let moved_a = self.a.poll(now).unwrap();
                let moved_b = self.b.poll(now).unwrap();
                if app(self) {
                    return;
                }
                if !(moved_a || moved_b) {
                    break;
                }
                spins += 1;
                assert!(spins < 1_000_000, "livelock at one instant");
            }
            // Application calls may have queued frames: flush them.
            let now = self.clock.now();
            let moved = self.a.poll(now).unwrap() | self.b.poll(now).unwrap();
            if moved {
                continue;
            }
            let next = [
                self.a.poll_at(),
                self.b.poll_at(),
                self.wake.filter(|&w| w > now),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) => self.clock.advance_to(t.max(now)),
                None => panic!("simulation stalled with nothing pending"),
            }
            assert!(
                self.clock.elapsed() < limit,
                "not done after {limit:?} of virtual time: a={:?} {:?} b={:?} {:?}",
                self.a.conn,
                self.a.conn.stats(),
                self.b.conn,
                self.b.conn.stats()
            );
        }
    }
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
        trace: (sim.a.link.trace, sim.b.link.trace),
    }
}

pub fn lossy(p: f64, seed: u64) -> FaultConfig {
    faults(seed).with_loss(p)
}
