//! Fuzzes an ESP connection end to end (DESIGN.md L3 "fuzzing of an
//! established connection"): two sans-IO `esp::Connection`s over a
//! sim pair (`testkit::sim`) whose faults (loss, duplication, reordering, corruption,
//! delay) the input chooses, driven by an input-chosen sequence of
//! application calls, clock steps and injected segments (off-path junk
//! around the current sequence numbers, emitted and parsed as a receiver
//! would).
//!
//! B receives with `handle_segment_into` into a reader buffer of an
//! input-chosen size (0 = plain `handle_segment`), so the zero-copy path
//! is fuzzed with the rest. As the runtime's `ConnSocket` does, B offers
//! every frame to header prediction (`handle_predicted`) first; segments
//! carry no checksum (so the fast path can take them) when the input
//! chose no corruption, as on a link that guarantees frame integrity.
//!
//! Checks: no panic, no livelock at one instant; the bytes B reads (placed
//! by `handle_segment_into` or returned by `recv`) are always a prefix of
//! the bytes A wrote (segments injected into B carry no
//! data, so no injection can forge stream content); and without injection,
//! once B saw end of stream with neither end in error, B read every byte.
#![no_main]

use std::time::{Duration, Instant};

use link::ETH_HEADER_LEN;

use link::eth::EthernetRepr;
use esp::auth::TagStatus;
use esp::wire::{emit_esp_frame, EspFrame, EspRepr, Flags, Seq, ETHERTYPE_ESP};
use esp::{Checksum, Connection, TransportConfig};
use libfuzzer_sys::fuzz_target;
use testkit::fuzz::{fault_config, FaultSpace};
use testkit::sim::{self as ts, Link, MacAddr, Node, Nodes, Port};

const MTU: usize = 1500;
const A_PORT: u16 = 40000;
const B_PORT: u16 = 80;

/// The input's fault choices (testkit::fuzz layout): half the values of a
/// probability byte mean "no fault", the rest up to 25 %.
const FAULTS: FaultSpace = FaultSpace {
    max_probability: 0.25,
    corrupt: true,
    delay_step: Duration::from_micros(1),
    jitter_step: Duration::from_micros(1),
    rate_step_bps: 0,
    reorder_hold_back: Duration::from_micros(30),
    reorder_step: Duration::ZERO,
    burst: false,
    queue_limit: false,
};

/// Byte `i` of A's stream.
fn byte_at(i: usize) -> u8 {
    (i.wrapping_mul(0x9E37_79B9) >> 13) as u8 ^ i as u8
}

/// Checks that `bytes`, read by B after `*read` bytes, continue A's stream.
fn check_stream(read: &mut usize, written: usize, bytes: &[u8]) {
    for (k, &x) in bytes.iter().enumerate() {
        assert!(*read + k < written, "B read more than A wrote");
        assert_eq!(x, byte_at(*read + k), "stream byte {} differs", *read + k);
    }
    *read += bytes.len();
}

/// A: the client connection on port 0.
struct EndA {
    conn: Connection,
    port: Port,
    buf: Vec<u8>,
}

impl Node for EndA {
    fn step(&mut self, now: Instant) -> bool {
        let mut moved = false;
        while let Ok(n) = self.port.recv(&mut self.buf) {
            moved = true;
            if let Ok(f) = EspFrame::parse(&self.buf[..n], ETHERTYPE_ESP, MTU + 14) {
                self.conn.handle_segment(now, &f.header, f.payload);
            }
        }
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        while let Some(n) = self.conn.poll_transmit(now, &mut self.buf) {
            let _ = self.port.send(&self.buf[..n]);
            moved = true;
        }
        moved
    }
    fn poll_at(&mut self) -> Option<Instant> {
        [self.conn.poll_timeout(), self.port.next_delivery()]
            .into_iter()
            .flatten()
            .min()
    }
}

/// B: accepts the first SYN on port 1, then receives into its reader
/// buffer (header prediction first, as the runtime's `ConnSocket` does)
/// and checks every byte it reads against A's stream.
struct EndB {
    conn: Option<Connection>,
    port: Port,
    cfg: TransportConfig,
    buf: Vec<u8>,
    /// B's reader buffer for `handle_segment_into` (empty: none waits).
    rx: Vec<u8>,
    /// Bytes A wrote, bytes B read.
    written: usize,
    read: usize,
}

impl EndB {
    fn read(&mut self) {
        let Some(b) = self.conn.as_mut() else {
            return;
        };
        let mut rbuf = [0u8; 4096];
        while let Ok(n) = b.recv(&mut rbuf) {
            if n == 0 {
                break;
            }
            check_stream(&mut self.read, self.written, &rbuf[..n]);
        }
    }
}

impl Node for EndB {
    fn step(&mut self, now: Instant) -> bool {
        let mut moved = false;
        while let Ok(n) = self.port.recv(&mut self.buf) {
            moved = true;
            if let (Some(b), Some(seg)) = (self.conn.as_mut(), self.buf[..n].get(ETH_HEADER_LEN..))
            {
                if let Some(placed) = b.handle_predicted(now, seg, TagStatus::Off, &mut self.rx) {
                    check_stream(&mut self.read, self.written, &self.rx[..placed]);
                    continue;
                }
            }
            let Ok(f) = EspFrame::parse(&self.buf[..n], ETHERTYPE_ESP, MTU + 14) else {
                continue;
            };
            match self.conn.as_mut() {
                Some(b) => {
                    let placed = b.handle_segment_into(now, &f.header, f.payload, &mut self.rx);
                    check_stream(&mut self.read, self.written, &self.rx[..placed]);
                }
                None => {
                    self.conn = Connection::accept(
                        &self.cfg,
                        MTU,
                        (self.port.mac(), B_PORT),
                        f.eth.src,
                        &f.header,
                        Seq(0x8000_0000),
                        now,
                    );
                }
            }
        }
        if let Some(b) = self.conn.as_mut() {
            if b.poll_timeout().is_some_and(|t| t <= now) {
                b.handle_timeout(now);
            }
            while let Some(n) = b.poll_transmit(now, &mut self.buf) {
                let _ = self.port.send(&self.buf[..n]);
                moved = true;
            }
        }
        moved
    }
    fn poll_at(&mut self) -> Option<Instant> {
        let timer = self.conn.as_ref().and_then(|b| b.poll_timeout());
        [timer, self.port.next_delivery()]
            .into_iter()
            .flatten()
            .min()
    }
}

struct Ends {
    a: EndA,
    b: EndB,
    /// The ends' MACs (A, B).
    macs: (MacAddr, MacAddr),
    injected_into_b: bool,
}

impl Nodes for Ends {
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

impl Ends {
    /// Builds a segment from `src` to `dst` out of input bytes, relative to
    /// the receiver's sequence state, and hands it over if it parses.
    fn inject(&mut self, now: Instant, into_b: bool, x: &[u8]) {
        let (ma, mb) = self.macs;
        let (src, dst) = if into_b {
            ((ma, A_PORT), (mb, B_PORT))
        } else {
            ((mb, B_PORT), (ma, A_PORT))
        };
        let Some(target) = (if into_b {
            self.b.conn.as_mut()
        } else {
            Some(&mut self.a.conn)
        }) else {
            return;
        };
        let get = |i: usize| x.get(i).copied().unwrap_or(0);
        let mut esp = EspRepr {
            src_port: if get(0) & 0x80 != 0 { src.1 ^ 1 } else { src.1 },
            dst_port: dst.1,
            flags: Flags::from_bits_truncate(get(0))
                & (Flags::FIN | Flags::SYN | Flags::RST | Flags::ACK),
            seq: Seq(target.rcv_nxt().0.wrapping_add(get(1) as i8 as i32 as u32)),
            ack: Seq(target.snd_una().0.wrapping_add(get(2) as i8 as i32 as u32)),
            window: u16::from_be_bytes([get(3), get(4)]),
            ..EspRepr::default()
        };
        if get(5) & 1 == 1 {
            let s = target.rcv_nxt().add(u32::from(get(5) >> 1));
            esp.sack.push(s, s.add(u32::from(get(6)) + 1));
        }
        let payload: &[u8] = if into_b { &[] } else { &x[x.len().min(7)..] };
        let eth = EthernetRepr {
            dst: dst.0,
            src: src.0,
            ethertype: ETHERTYPE_ESP,
        };
        let mut frame = vec![0u8; MTU + 14];
        let Ok(n) = emit_esp_frame(&mut frame, &eth, &esp, payload) else {
            return;
        };
        if let Ok(f) = EspFrame::parse(&frame[..n], ETHERTYPE_ESP, MTU + 14) {
            target.handle_segment(now, &f.header, f.payload);
            if into_b {
                self.injected_into_b = true;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 11 {
        return;
    }
    let (h, mut ops) = data.split_at(11);
    let seed = u64::from(h[10]);
    let (fa, fb) = (
        fault_config(&h[0..5], seed, &FAULTS),
        fault_config(&h[5..10], seed, &FAULTS),
    );
    let clean = fa.corrupt == 0.0 && fb.corrupt == 0.0;
    let mut sim = ts::Sim::new(["a", "b"]);
    // Quiet at one instant, or a livelock.
    sim.pace.settle = true;
    sim.pace.max_rounds = 100_000;
    let [la, lb] = sim.pair(ts::mtu(MTU), fa, fb);
    let cfg = TransportConfig {
        checksum: if clean {
            Checksum::Never
        } else {
            Checksum::Always
        },
        ..TransportConfig::default()
    };
    let macs = (la.mac(), lb.mac());
    let now = sim.now();
    let a = sim.tracer().in_node(0, || {
        Connection::connect(
            &cfg,
            MTU,
            (macs.0, A_PORT),
            (macs.1, B_PORT),
            Seq(u32::from_be_bytes([h[0], h[3], h[6], h[9]])),
            now,
        )
    });
    let mut sim = sim.with_nodes(Ends {
        a: EndA {
            conn: a,
            port: la,
            buf: vec![0u8; MTU + 14],
        },
        b: EndB {
            conn: None,
            port: lb,
            cfg,
            buf: vec![0u8; MTU + 14],
            rx: vec![0u8; usize::from(h[10] % 4) * 700],
            written: 0,
            read: 0,
        },
        macs,
        injected_into_b: false,
    });
    let mut a_closed = false;
    // ESP_FUZZ_NO_INJECT=1: faults and application calls only, to look past
    // findings that need a forged segment.
    let no_inject = std::env::var_os("ESP_FUZZ_NO_INJECT").is_some_and(|v| v == "1");

    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        let arg = ops.first().copied().unwrap_or(0);
        ops = ops.get(1..).unwrap_or(&[]);
        match op % 8 {
            0 | 1 => {
                if !a_closed {
                    let len = usize::from(arg) * 97;
                    let written = sim.b.written;
                    let chunk: Vec<u8> = (written..written + len).map(byte_at).collect();
                    if let Ok(n) = sim.a.conn.send(&chunk) {
                        sim.b.written += n;
                    }
                }
            }
            2 => sim.b.read(),
            3 => sim.advance(Duration::from_micros(u64::from(arg) * 10)),
            4 => {
                if let Some(t) = sim.next_event() {
                    sim.advance_to(t);
                }
            }
            5 => {
                let take = (arg as usize % 16).min(ops.len());
                let (x, rest) = ops.split_at(take);
                ops = rest;
                if !no_inject {
                    let now = sim.now();
                    sim.inject(now, arg & 0x80 != 0, x);
                }
            }
            6 => {
                sim.a.conn.close();
                a_closed = true;
            }
            _ => {
                if let Some(b) = sim.b.conn.as_mut() {
                    if arg == 0xff {
                        b.abort();
                    } else {
                        let _ = b.send(&vec![arg; usize::from(arg)]);
                        if arg & 1 == 1 {
                            b.close();
                        }
                    }
                }
            }
        }
        sim.settle();
    }

    // Let the ends finish: close A, then run until nothing is pending or
    // 60 s of virtual time have passed (the RTO gives up well before).
    sim.a.conn.close();
    sim.run_until(Duration::from_secs(60), |s| {
        s.b.read();
        false
    });
    sim.b.read();
    if let Some(b) = &sim.b.conn {
        if !sim.injected_into_b && b.is_eof() && b.error().is_none() && sim.a.conn.error().is_none()
        {
            assert_eq!(
                sim.b.read, sim.b.written,
                "B saw EOF before the end of A's stream"
            );
        }
    }
});
