//! Fuzzes an ESP connection end to end (DESIGN.md L3 "fuzzing of an
//! established connection"): two sans-IO `esp::Connection`s over a
//! `SimLink` pair whose faults (loss, duplication, reordering, corruption,
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

use std::time::Duration;

use link::sim::{SimClock, SimLink, next_event};
use link::ETH_HEADER_LEN;
use link::eth::EthernetRepr;
use link::Link;
use esp::auth::TagStatus;
use esp::wire::{emit_esp_frame, EspFrame, EspRepr, Flags, Seq, ETHERTYPE_ESP};
use esp::{Checksum, Connection, TransportConfig};
use libfuzzer_sys::fuzz_target;
use testkit::fuzz::{fault_config, FaultSpace};

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

struct Sim {
    clock: SimClock,
    la: SimLink,
    lb: SimLink,
    a: Connection,
    b: Option<Connection>,
    cfg: TransportConfig,
    written: usize,
    read: usize,
    injected_into_b: bool,
    buf: Vec<u8>,
    /// B's reader buffer for `handle_segment_into` (empty: none waits).
    rx: Vec<u8>,
}

/// Checks that `bytes`, read by B after `*read` bytes, continue A's stream.
fn check_stream(read: &mut usize, written: usize, bytes: &[u8]) {
    for (k, &x) in bytes.iter().enumerate() {
        assert!(*read + k < written, "B read more than A wrote");
        assert_eq!(x, byte_at(*read + k), "stream byte {} differs", *read + k);
    }
    *read += bytes.len();
}

impl Sim {
    /// Runs both ends at the current instant until quiet.
    fn pump(&mut self) {
        for spin in 0.. {
            assert!(spin < 100_000, "livelock at one instant");
            let now = self.clock.now();
            let mut moved = false;
            if self.a.poll_timeout().is_some_and(|t| t <= now) {
                self.a.handle_timeout(now);
            }
            if let Some(b) = self.b.as_mut() {
                if b.poll_timeout().is_some_and(|t| t <= now) {
                    b.handle_timeout(now);
                }
            }
            while let Some(n) = self.a.poll_transmit(now, &mut self.buf) {
                let _ = self.la.send(&self.buf[..n]);
                moved = true;
            }
            if let Some(b) = self.b.as_mut() {
                while let Some(n) = b.poll_transmit(now, &mut self.buf) {
                    let _ = self.lb.send(&self.buf[..n]);
                    moved = true;
                }
            }
            while let Ok(n) = self.lb.recv(&mut self.buf) {
                moved = true;
                if let (Some(b), Some(seg)) = (self.b.as_mut(), self.buf[..n].get(ETH_HEADER_LEN..))
                {
                    if let Some(placed) = b.handle_predicted(now, seg, TagStatus::Off, &mut self.rx)
                    {
                        check_stream(&mut self.read, self.written, &self.rx[..placed]);
                        continue;
                    }
                }
                let Ok(f) = EspFrame::parse(&self.buf[..n], ETHERTYPE_ESP, MTU + 14) else {
                    continue;
                };
                match self.b.as_mut() {
                    Some(b) => {
                        let placed = b.handle_segment_into(now, &f.header, f.payload, &mut self.rx);
                        check_stream(&mut self.read, self.written, &self.rx[..placed]);
                    }
                    None => {
                        self.b = Connection::accept(
                            &self.cfg,
                            MTU,
                            (self.lb.mac(), B_PORT),
                            f.eth.src,
                            &f.header,
                            Seq(0x8000_0000),
                            now,
                        );
                    }
                }
            }
            while let Ok(n) = self.la.recv(&mut self.buf) {
                moved = true;
                if let Ok(f) = EspFrame::parse(&self.buf[..n], ETHERTYPE_ESP, MTU + 14) {
                    self.a.handle_segment(now, &f.header, f.payload);
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn read_b(&mut self) {
        let Some(b) = self.b.as_mut() else {
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

    /// The earliest instant anything is due.
    fn next(&self) -> Option<std::time::Instant> {
        [
            next_event(&[&self.la, &self.lb]),
            self.a.poll_timeout(),
            self.b.as_ref().and_then(|b| b.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Builds a segment from `src` to `dst` out of input bytes, relative to
    /// the receiver's sequence state, and hands it over if it parses.
    fn inject(&mut self, into_b: bool, x: &[u8]) {
        let now = self.clock.now();
        let (src, dst) = if into_b {
            ((self.la.mac(), A_PORT), (self.lb.mac(), B_PORT))
        } else {
            ((self.lb.mac(), B_PORT), (self.la.mac(), A_PORT))
        };
        let Some(target) = (if into_b {
            self.b.as_mut()
        } else {
            Some(&mut self.a)
        }) else {
            return;
        };
        let get = |i: usize| x.get(i).copied().unwrap_or(0);
        let mut esp = EspRepr {
            src_port: if get(0) & 0x80 != 0 { src.1 ^ 1 } else { src.1 },
            dst_port: dst.1,
            flags: Flags(get(0) & (Flags::FIN.0 | Flags::SYN.0 | Flags::RST.0 | Flags::ACK.0)),
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
    let clock = SimClock::new();
    let (fa, fb) = (
        fault_config(&h[0..5], seed, &FAULTS),
        fault_config(&h[5..10], seed, &FAULTS),
    );
    let clean = fa.corrupt == 0.0 && fb.corrupt == 0.0;
    let (la, lb) = SimLink::pair(&clock, MTU, fa, fb);
    let cfg = TransportConfig {
        checksum: if clean {
            Checksum::Never
        } else {
            Checksum::Always
        },
        ..TransportConfig::default()
    };
    let a = Connection::connect(
        &cfg,
        MTU,
        (la.mac(), A_PORT),
        (lb.mac(), B_PORT),
        Seq(u32::from_be_bytes([h[0], h[3], h[6], h[9]])),
        clock.now(),
    );
    let mut sim = Sim {
        clock,
        la,
        lb,
        a,
        b: None,
        cfg,
        written: 0,
        read: 0,
        injected_into_b: false,
        buf: vec![0u8; MTU + 14],
        rx: vec![0u8; usize::from(h[10] % 4) * 700],
    };
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
                    let chunk: Vec<u8> = (sim.written..sim.written + len).map(byte_at).collect();
                    if let Ok(n) = sim.a.send(&chunk) {
                        sim.written += n;
                    }
                }
            }
            2 => sim.read_b(),
            3 => sim
                .clock
                .advance(Duration::from_micros(u64::from(arg) * 10)),
            4 => {
                if let Some(t) = sim.next() {
                    sim.clock.advance_to(t);
                }
            }
            5 => {
                let take = (arg as usize % 16).min(ops.len());
                let (x, rest) = ops.split_at(take);
                ops = rest;
                if !no_inject {
                    sim.inject(arg & 0x80 != 0, x);
                }
            }
            6 => {
                sim.a.close();
                a_closed = true;
            }
            _ => {
                if let Some(b) = sim.b.as_mut() {
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
        sim.pump();
    }

    // Let the ends finish: close A, then run until nothing is pending or
    // 60 s of virtual time have passed (the RTO gives up well before).
    sim.a.close();
    let start = sim.clock.now();
    loop {
        sim.pump();
        sim.read_b();
        match sim.next() {
            Some(t) if t - start < Duration::from_secs(60) => {
                sim.clock.advance_to(t.max(sim.clock.now()))
            }
            _ => break,
        }
    }
    sim.read_b();
    if let Some(b) = &sim.b {
        if !sim.injected_into_b && b.is_eof() && b.error().is_none() && sim.a.error().is_none() {
            assert_eq!(
                sim.read, sim.written,
                "B saw EOF before the end of A's stream"
            );
        }
    }
});
