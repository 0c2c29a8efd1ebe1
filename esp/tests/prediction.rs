//! Header prediction (`Connection::handle_predicted`, `conn/prediction.rs`)
//! against the general path: two worlds run the same randomized exchange
//! (writes both ways, reads into a waiting reader's buffer or later, lost,
//! duplicated and reordered frames, timers), one offering every frame to the
//! fast path first (as the runtime's `ConnSocket` does), the other parsing
//! every frame. Every frame sent, every byte read, every counter, deadline
//! and sequence variable must be identical in both, step by step; and the
//! fast path must refuse, without changing anything, every segment it does
//! not predict.

use std::time::{Duration, Instant};

use esp::auth::TagStatus;
use esp::conn::{Connection, IsnGenerator, State};
use esp::listener::{Listener, SynOutcome};
use esp::wire::{EspFrame, EspRepr, Flags, MacAddr, Seq, ETHERTYPE_ESP};
use esp::{Checksum, TransportConfig};
use rand::{Rng, SeedableRng};

const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xa]);
const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xb]);
const PA: u16 = 40000;
const PB: u16 = 80;
const MTU: usize = 1500;
const ETH: usize = 14;

/// The runtime's configuration on a link that guarantees frame integrity
/// (`Checksum::Auto` resolved): segments carry no checksum, so the fast path
/// can take them. (With a checksum to verify, every segment goes the general
/// way.)
fn cfg() -> TransportConfig {
    TransportConfig {
        checksum: Checksum::Never,
        ..TransportConfig::default()
    }
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// Every frame `c` sends at `now`, as bytes.
fn out(c: &mut Connection, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = [0u8; MTU + ETH];
    let mut v = Vec::new();
    while let Some(n) = c.poll_transmit(now, &mut buf) {
        v.push(buf[..n].to_vec());
        assert!(v.len() < 100_000, "poll_transmit never returns None");
    }
    v
}

fn parse(frame: &[u8]) -> (EspRepr, &[u8]) {
    let f = EspFrame::parse(frame, ETHERTYPE_ESP, MTU + ETH).expect("own frame parses");
    (f.header, f.payload)
}

/// Client `a` and server `b` after a clean handshake at t0 .. t0 + 15 us
/// (deterministic: fixed initial sequence numbers and ISN key).
fn established(cfg: &TransportConfig, t0: Instant) -> (Connection, Connection) {
    let mut a = Connection::connect(cfg, MTU, (A, PA), (B, PB), Seq(1000), t0);
    let syn = out(&mut a, t0);
    let mut l: Listener<()> =
        Listener::new(cfg.clone(), MTU, (B, PB), IsnGenerator::with_key([7; 16]));
    let mut b = match l.on_segment(t0 + us(5), 0, A, &parse(&syn[0]).0, |_| false) {
        SynOutcome::Accept(c) => *c,
        o => panic!("listener refused the SYN: {o:?}"),
    };
    for f in out(&mut b, t0 + us(5)) {
        let (r, p) = parse(&f);
        a.handle_segment(t0 + us(10), &r, p);
    }
    for f in out(&mut a, t0 + us(10)) {
        let (r, p) = parse(&f);
        b.handle_segment(t0 + us(15), &r, p);
    }
    assert_eq!(
        (a.state(), b.state()),
        (State::Established, State::Established)
    );
    (a, b)
}

/// Delivers `frame` to `c` with a reader's buffer `dst` (empty: no reader
/// waiting). `predict`: offer it to the fast path first. Returns (bytes
/// placed in `dst`, whether the fast path took it).
fn deliver(
    c: &mut Connection,
    now: Instant,
    frame: &[u8],
    dst: &mut [u8],
    predict: bool,
) -> (usize, bool) {
    if predict {
        if let Some(n) = c.handle_predicted(now, &frame[ETH..], TagStatus::Off, dst) {
            return (n, true);
        }
    }
    let (r, p) = parse(frame);
    (c.handle_segment_into(now, &r, p, dst), false)
}

/// Everything observable of a connection.
fn snapshot(c: &Connection) -> String {
    format!(
        "{:?} {:?} una {:?} nxt {:?} rcv {:?} cwnd {} srtt {:?} rto {:?} timeout {:?} readable {} writable {}",
        c.state(),
        c.stats(),
        c.snd_una(),
        c.snd_nxt(),
        c.rcv_nxt(),
        c.cwnd(),
        c.rtt().srtt(),
        c.rtt().rto(),
        c.poll_timeout(),
        c.is_readable(),
        c.is_writable(),
    )
}

/// One world: a pair, the frames in flight each way, the bytes read.
struct World {
    predict: bool,
    a: Connection,
    b: Connection,
    to_b: Vec<Vec<u8>>,
    to_a: Vec<Vec<u8>>,
    read_a: Vec<u8>,
    read_b: Vec<u8>,
    predicted: u64,
    general: u64,
}

/// One step of the script, drawn once and applied to both worlds.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `a` (true) or `b` writes this many bytes.
    Write(bool, usize),
    /// Every frame in flight towards `a` (true) or `b` is delivered, in
    /// order or reversed, the first one lost or duplicated, with a reader
    /// waiting (buffer of this size) or not (0).
    Deliver(bool, Order, usize),
    /// `a` (true) or `b` reads up to this many bytes.
    Read(bool, usize),
    /// Time passes; due timers fire.
    Wait(u64),
}

#[derive(Debug, Clone, Copy)]
enum Order {
    Straight,
    Reversed,
    LoseFirst,
    DuplicateFirst,
}

impl World {
    fn new(predict: bool, t0: Instant, cfg: &TransportConfig) -> World {
        let (a, b) = established(cfg, t0);
        World {
            predict,
            a,
            b,
            to_b: Vec::new(),
            to_a: Vec::new(),
            read_a: Vec::new(),
            read_b: Vec::new(),
            predicted: 0,
            general: 0,
        }
    }

    fn apply(&mut self, now: Instant, step: Step, data: &[u8]) {
        match step {
            Step::Write(at_a, n) => {
                let c = if at_a { &mut self.a } else { &mut self.b };
                let _ = c.send(&data[..n]);
            }
            Step::Deliver(to_a, order, reader) => {
                let mut frames = std::mem::take(if to_a { &mut self.to_a } else { &mut self.to_b });
                match order {
                    Order::Straight => {}
                    Order::Reversed => frames.reverse(),
                    Order::LoseFirst => {
                        if !frames.is_empty() {
                            frames.remove(0);
                        }
                    }
                    Order::DuplicateFirst => {
                        if let Some(f) = frames.first().cloned() {
                            frames.insert(1, f);
                        }
                    }
                }
                let (c, read) = if to_a {
                    (&mut self.a, &mut self.read_a)
                } else {
                    (&mut self.b, &mut self.read_b)
                };
                for f in frames {
                    let mut dst = vec![0u8; reader];
                    let (n, fast) = deliver(c, now, &f, &mut dst, self.predict);
                    read.extend_from_slice(&dst[..n]);
                    if fast {
                        self.predicted += 1;
                    } else {
                        self.general += 1;
                    }
                }
            }
            Step::Read(at_a, n) => {
                let (c, read) = if at_a {
                    (&mut self.a, &mut self.read_a)
                } else {
                    (&mut self.b, &mut self.read_b)
                };
                let mut buf = vec![0u8; n];
                if let Ok(k) = c.recv(&mut buf) {
                    read.extend_from_slice(&buf[..k]);
                }
            }
            Step::Wait(_) => {
                for c in [&mut self.a, &mut self.b] {
                    if c.poll_timeout().is_some_and(|t| t <= now) {
                        c.handle_timeout(now);
                    }
                }
            }
        }
        // As the runtime: a transmit turn only when something is due.
        if self.a.transmit_due() {
            self.to_b.extend(out(&mut self.a, now));
        }
        if self.b.transmit_due() {
            self.to_a.extend(out(&mut self.b, now));
        }
    }
}

fn draw(rng: &mut impl Rng) -> Step {
    let side = rng.random_bool(0.5);
    match rng.random_range(0..100) {
        0..25 => Step::Write(side, rng.random_range(1..4000)),
        25..70 => {
            let order = match rng.random_range(0..20) {
                0 => Order::Reversed,
                1 => Order::LoseFirst,
                2 => Order::DuplicateFirst,
                _ => Order::Straight,
            };
            let reader = if rng.random_bool(0.5) {
                rng.random_range(1..3000)
            } else {
                0
            };
            Step::Deliver(side, order, reader)
        }
        70..90 => Step::Read(side, rng.random_range(1..20_000)),
        _ => Step::Wait(rng.random_range(1..30_000)),
    }
}

#[test]
fn predicted_segments_change_state_as_the_general_path_does() {
    let t0 = Instant::now();
    let data: Vec<u8> = (0..4000u32).map(|i| (i * 7 + 3) as u8).collect();
    for seed in 0..9u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        // Seeds 1, 4, 7 and 2, 5: small buffers, so windows close and
        // reopen (window updates, zero-window probes), with ACKs held for up
        // to 8 segments or sent for every segment.
        let small = |delayed_ack_segments| TransportConfig {
            recv_buffer: 4 * 1480,
            send_buffer: 6 * 1480,
            delayed_ack_segments,
            ..cfg()
        };
        let cfg = match seed % 3 {
            0 => cfg(),
            1 => small(8),
            _ => small(1),
        };
        let mut fast = World::new(true, t0, &cfg);
        let mut slow = World::new(false, t0, &cfg);
        let mut now = t0 + us(20);
        for i in 0..3000 {
            let step = draw(&mut rng);
            now += match step {
                Step::Wait(d) => us(d),
                _ => us(rng.random_range(0..20)),
            };
            fast.apply(now, step, &data);
            slow.apply(now, step, &data);
            let ctx = || format!("seed {seed}, step {i} ({step:?})");
            assert_eq!(fast.to_a, slow.to_a, "frames towards a differ: {}", ctx());
            assert_eq!(fast.to_b, slow.to_b, "frames towards b differ: {}", ctx());
            assert_eq!(
                fast.read_a,
                slow.read_a,
                "bytes read by a differ: {}",
                ctx()
            );
            assert_eq!(
                fast.read_b,
                slow.read_b,
                "bytes read by b differ: {}",
                ctx()
            );
            assert_eq!(snapshot(&fast.a), snapshot(&slow.a), "a differs: {}", ctx());
            assert_eq!(snapshot(&fast.b), snapshot(&slow.b), "b differs: {}", ctx());
        }
        // Both paths were exercised: most segments of a clean exchange are
        // predicted, losses and reordering send the rest the general way.
        assert!(
            fast.predicted > 1000,
            "seed {seed}: only {} predicted",
            fast.predicted
        );
        assert!(
            fast.general > 50,
            "seed {seed}: only {} general",
            fast.general
        );
        assert_eq!(slow.predicted, 0);
    }
}

/// A data segment from `b` to `a` that `a` would predict, as bytes.
fn predicted_frame(t0: Instant) -> (Connection, Vec<u8>) {
    let (mut a, mut b) = established(&cfg(), t0);
    b.send(b"hello").unwrap();
    let frames = out(&mut b, t0 + us(20));
    assert_eq!(frames.len(), 1);
    let mut twin = established(&cfg(), t0).0;
    assert!(
        twin.handle_predicted(t0 + us(30), &frames[0][ETH..], TagStatus::Off, &mut [])
            .is_some(),
        "the plain data segment is predicted"
    );
    a.send(b"x").unwrap(); // SND.NXT > SND.UNA, so ACK fields can be too new
    let _ = out(&mut a, t0 + us(25));
    (a, frames[0].clone())
}

#[test]
fn unpredicted_segments_are_refused_untouched() {
    let t0 = Instant::now();
    let (mut a, frame) = predicted_frame(t0);
    let now = t0 + us(30);
    let set_u16 = |f: &mut Vec<u8>, at: usize, v: u16| {
        f[ETH + at..ETH + at + 2].copy_from_slice(&v.to_be_bytes())
    };
    let set_u32 = |f: &mut Vec<u8>, at: usize, v: u32| {
        f[ETH + at..ETH + at + 4].copy_from_slice(&v.to_be_bytes())
    };
    let seq = u32::from_be_bytes(frame[ETH + 8..ETH + 12].try_into().unwrap());
    let ack = u32::from_be_bytes(frame[ETH + 12..ETH + 16].try_into().unwrap());
    let edited = |what, edit: &dyn Fn(&mut Vec<u8>)| {
        let mut f = frame.clone();
        edit(&mut f);
        (what, f)
    };
    let cases = [
        edited("FIN", &|f| f[ETH + 6] = (Flags::ACK | Flags::FIN).bits()),
        edited("RST", &|f| f[ETH + 6] = (Flags::ACK | Flags::RST).bits()),
        edited("SYN", &|f| f[ETH + 6] = (Flags::ACK | Flags::SYN).bits()),
        edited("no ACK", &|f| f[ETH + 6] = 0),
        edited("options", &|f| f[ETH + 7] = 24),
        edited("checksum to verify", &|f| set_u16(f, 18, 0x1234)),
        edited("payload beyond the frame", &|f| set_u16(f, 4, 2000)),
        edited("other source port", &|f| set_u16(f, 0, PB + 1)),
        edited("other destination port", &|f| set_u16(f, 2, PA + 1)),
        edited("SEG.SEQ after RCV.NXT", &|f| {
            set_u32(f, 8, seq.wrapping_add(1))
        }),
        edited("SEG.SEQ before RCV.NXT", &|f| {
            set_u32(f, 8, seq.wrapping_sub(1))
        }),
        edited("ACK of unsent data", &|f| {
            set_u32(f, 12, ack.wrapping_add(2))
        }),
        edited("ACK below SND.UNA", &|f| {
            set_u32(f, 12, ack.wrapping_sub(1))
        }),
        edited("truncated header", &|f| f.truncate(ETH + 12)),
    ];
    for (what, f) in &cases {
        let before = format!("{a:?} {}", snapshot(&a));
        let mut dst = [0u8; 64];
        assert_eq!(
            a.handle_predicted(now, &f[ETH..], TagStatus::Off, &mut dst),
            None,
            "{what}: predicted"
        );
        assert_eq!(
            format!("{a:?} {}", snapshot(&a)),
            before,
            "{what}: state changed"
        );
    }
    // The unmodified frame is predicted and delivered.
    let mut dst = [0u8; 64];
    assert_eq!(
        a.handle_predicted(now, &frame[ETH..], TagStatus::Off, &mut dst),
        Some(5)
    );
    assert_eq!(&dst[..5], b"hello");
}

#[test]
fn only_established_connections_predict() {
    let t0 = Instant::now();
    let (mut a, frame) = predicted_frame(t0);
    a.close();
    assert_eq!(a.state(), State::FinWait1);
    let before = snapshot(&a);
    assert_eq!(
        a.handle_predicted(t0 + us(30), &frame[ETH..], TagStatus::Off, &mut []),
        None
    );
    assert_eq!(snapshot(&a), before);
    // The general path still takes it.
    let (r, p) = parse(&frame);
    let mut dst = [0u8; 8];
    assert_eq!(a.handle_segment_into(t0 + us(30), &r, p, &mut dst), 5);
}

/// A segment `a` would predict: ACK alone, no option, no checksum, at
/// RCV.NXT, acknowledging SND.NXT, with `payload`.
fn plausible(a: &Connection, payload: &[u8]) -> Vec<u8> {
    let mut s = vec![0u8; 20];
    s[0..2].copy_from_slice(&PB.to_be_bytes());
    s[2..4].copy_from_slice(&PA.to_be_bytes());
    s[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    s[6] = Flags::ACK.bits();
    s[7] = 20;
    s[8..12].copy_from_slice(&a.rcv_nxt().0.to_be_bytes());
    s[12..16].copy_from_slice(&a.snd_nxt().0.to_be_bytes());
    s[16..18].copy_from_slice(&40u16.to_be_bytes());
    s.extend_from_slice(payload);
    s
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, .. Default::default() })]
    /// Arbitrary bytes (a plausible segment with random bytes overwritten,
    /// or cut, or lengthened): the fast path either refuses them without a
    /// change or does exactly what the general path does with them.
    #[test]
    fn arbitrary_segments_are_refused_or_handled_as_the_general_path_would(
        payload_len in 0usize..64,
        edits in proptest::collection::vec((0usize..84, proptest::prelude::any::<u8>()), 0..4),
        cut in 0usize..90,
        reader in 0usize..80,
    ) {
        let t0 = Instant::now();
        let now = t0 + us(30);
        let setup = || {
            let (mut a, _) = established(&cfg(), t0);
            a.send(b"x").unwrap();
            let _ = out(&mut a, t0 + us(20));
            a
        };
        let (mut fast, mut slow) = (setup(), setup());
        let mut seg = plausible(&fast, &vec![0x5a; payload_len]);
        for &(at, v) in &edits {
            if at < seg.len() {
                seg[at] = v;
            }
        }
        seg.truncate(cut.max(1));
        let before = format!("{fast:?} {}", snapshot(&fast));
        let (mut d1, mut d2) = (vec![0u8; reader], vec![0u8; reader]);
        match fast.handle_predicted(now, &seg, TagStatus::Off, &mut d1) {
            None => proptest::prop_assert_eq!(format!("{fast:?} {}", snapshot(&fast)), before),
            Some(n1) => {
                let (r, p) = EspRepr::parse(&seg).expect("a predicted segment parses");
                let n2 = slow.handle_segment_into(now, &r, p, &mut d2);
                proptest::prop_assert_eq!(n1, n2);
                proptest::prop_assert_eq!(&d1[..n1], &d2[..n2]);
                proptest::prop_assert_eq!(snapshot(&fast), snapshot(&slow));
                proptest::prop_assert_eq!(out(&mut fast, now), out(&mut slow, now));
            }
        }
    }
}
