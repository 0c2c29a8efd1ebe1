//! Fuzzes two CTP endpoints (`ctp::Endpoint`, the sans-IO core)
//! talking CTP-over-EDP through a sim pair (`testkit::sim`) whose faults (loss,
//! duplication, reordering, delay, rate) the input chooses, driven by an
//! input-chosen sequence of sends (normal and large messages), clock steps
//! and injected datagrams (arbitrary bytes handed to `handle_datagram`).
//!
//! Checks: no panic, no livelock at one instant; without injection, the CTP
//! guarantee (DESIGN.md): every message is delivered at most once, intact,
//! and once the endpoints are idle each message was delivered or its sender
//! got an error delivery for it. Corruption is not injected: EDP and CTP have
//! no checksum of their own and rely on the Ethernet FCS.
#![no_main]

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use ctp::Options;
use ctp::{Config, Delivery, Endpoint, MsgId};
use edp::wire::{EdpFrame, emit_edp_frame};
use link::eth::EthernetRepr;
use runtime::ETHERTYPE_EDP;
use libfuzzer_sys::fuzz_target;
use testkit::fuzz::{fault_config, FaultSpace};
use testkit::sim::{self as ts, Link, MacAddr, Node, Port};

const MTU: usize = 1500;
const PORT: u16 = 7000;

/// The input's fault choices (testkit::fuzz layout; no corruption: EDP and
/// CTP have no checksum of their own).
const FAULTS: FaultSpace = FaultSpace {
    max_probability: 0.3,
    corrupt: false,
    delay_step: Duration::from_micros(10),
    jitter_step: Duration::from_micros(10),
    rate_step_bps: 10_000_000,
    reorder_hold_back: Duration::from_micros(200),
    reorder_step: Duration::ZERO,
    burst: false,
    queue_limit: false,
};
/// Fault bytes per direction: loss, dup, reorder, (corrupt), delay, rate.
const FAULT_LEN: usize = 6;

/// Payload of message `index` (sent by `from`) of `len` bytes: a 9-byte tag
/// then a pattern, so the receiver can tell which message it got and check
/// every byte.
fn payload(from: u8, index: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(9));
    v.push(from);
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    let mut k = 0u32;
    while v.len() < len.max(9) {
        v.push(
            (index
                .wrapping_mul(31)
                .wrapping_add(k)
                .wrapping_mul(0x9E37_79B9)
                >> 24) as u8,
        );
        k += 1;
    }
    v
}

struct Sent {
    msg: MsgId,
    delivered: u32,
    failed: bool,
}

/// End `me` (0 or 1): a CTP endpoint whose peer is `1 - me`, framed as
/// EDP on its port; it keeps its deliveries for the checks.
struct End {
    me: usize,
    ep: Endpoint<u8>,
    port: Port,
    peer: MacAddr,
    got: Vec<Delivery<u8>>,
    buf: Vec<u8>,
    frame: Vec<u8>,
}

impl Node for End {
    fn step(&mut self, now: Instant) -> bool {
        let mut moved = false;
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        while let Some(t) = self.ep.poll_transmit(&mut self.buf) {
            moved = true;
            assert_eq!(t.dest as usize, 1 - self.me, "datagram to an unknown peer");
            let eth = EthernetRepr {
                dst: self.peer,
                src: self.port.mac(),
                ethertype: ETHERTYPE_EDP,
            };
            let n = emit_edp_frame(&mut self.frame, &eth, PORT, PORT, &self.buf[..t.len])
                .expect("a CTP datagram fits the EDP MTU");
            let _ = self.port.send(&self.frame[..n]);
        }
        while let Ok(n) = self.port.recv(&mut self.frame) {
            moved = true;
            let f = EdpFrame::parse(&self.frame[..n], ETHERTYPE_EDP, MTU + 14)
                .expect("sim frames are well formed");
            self.ep.handle_datagram(now, (1 - self.me) as u8, f.payload);
        }
        self.got
            .extend(std::iter::from_fn(|| self.ep.poll_delivery()));
        moved
    }
    fn poll_at(&mut self) -> Option<Instant> {
        [self.ep.poll_timeout(), self.port.next_delivery()]
            .into_iter()
            .flatten()
            .min()
    }
}

/// What each end sent, for the checks.
struct Book {
    /// Messages sent by end `i`, by index.
    sent: [Vec<Sent>; 2],
    by_msg: [HashMap<MsgId, usize>; 2],
    injected: bool,
}

impl Book {
    /// Checks the deliveries the ends collected since the last call.
    fn check(&mut self, ends: &mut [End; 2]) {
        for (at, end) in ends.iter_mut().enumerate() {
            for d in std::mem::take(&mut end.got) {
                self.on_delivery(at, d);
            }
        }
    }

    fn on_delivery(&mut self, at: usize, d: Delivery<u8>) {
        match d {
            Delivery::Data(r) => {
                if self.injected {
                    return; // forged messages are indistinguishable: no check
                }
                assert_eq!(r.from as usize, 1 - at);
                assert_eq!(r.size, r.data.len() as u64);
                assert!(r.data.len() >= 9, "message shorter than its tag");
                let from = r.data[0];
                assert_eq!(from as usize, 1 - at, "tag names the wrong sender");
                let index = u32::from_le_bytes(r.data[1..5].try_into().unwrap());
                let len = u32::from_le_bytes(r.data[5..9].try_into().unwrap()) as usize;
                assert_eq!(
                    r.data,
                    payload(from, index, len),
                    "message {index} corrupted"
                );
                let s = &mut self.sent[1 - at][index as usize];
                s.delivered += 1;
                assert_eq!(s.delivered, 1, "message {index} delivered twice");
            }
            Delivery::Error(e) => {
                if let Some(&k) = e.msg.and_then(|m| self.by_msg[at].get(&m)) {
                    self.sent[at][k].failed = true;
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 * FAULT_LEN + 1 {
        return;
    }
    let (h, mut ops) = data.split_at(2 * FAULT_LEN + 1);
    let seed = u64::from(h[2 * FAULT_LEN]);
    let mut sim = ts::Sim::new(["a", "b"]);
    // Quiet at one instant, or a livelock.
    sim.pace.settle = true;
    sim.pace.max_rounds = 100_000;
    let ports = sim.pair(
        ts::mtu(MTU),
        fault_config(&h[..FAULT_LEN], seed, &FAULTS),
        fault_config(&h[FAULT_LEN..2 * FAULT_LEN], seed, &FAULTS),
    );
    let macs = [ports[0].mac(), ports[1].mac()];
    let cfg = Config::for_edp_mtu(MTU);
    let now = sim.now();
    let wall = SystemTime::UNIX_EPOCH;
    let mut ports = ports.into_iter();
    let mut sim = sim.with_nodes([0, 1].map(|i| End {
        me: i,
        ep: Endpoint::new(cfg.clone(), now, wall, seed ^ i as u64, None),
        port: ports.next().expect("two ports"),
        peer: macs[1 - i],
        got: Vec::new(),
        buf: vec![0u8; MTU],
        frame: vec![0u8; MTU + 14],
    }));
    let mut book = Book {
        sent: [Vec::new(), Vec::new()],
        by_msg: [HashMap::new(), HashMap::new()],
        injected: false,
    };
    let no_inject = std::env::var_os("CTP_FUZZ_NO_INJECT").is_some_and(|v| v == "1");

    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        let arg = ops.first().copied().unwrap_or(0);
        ops = ops.get(1..).unwrap_or(&[]);
        let from = usize::from(op & 0x10 != 0);
        match op % 8 {
            0..=2 => {
                // Normal (small) or large message; a few options that keep
                // the exactly-once-or-error guarantee.
                let len = if op % 8 == 2 {
                    usize::from(arg) * 733
                } else {
                    usize::from(arg)
                };
                let options = match op >> 6 {
                    1 => Options::DEL_AFTER_ERROR,
                    2 => Options::NO_RESEND,
                    _ => Options::NONE,
                };
                let index = book.sent[from].len() as u32;
                let now = sim.now();
                let command = u16::from(arg) * 97 % 32768;
                if let Ok(msg) = sim[from].ep.send(
                    now,
                    command,
                    (1 - from) as u8,
                    &payload(from as u8, index, len),
                    options,
                ) {
                    book.by_msg[from].insert(msg, index as usize);
                    book.sent[from].push(Sent {
                        msg,
                        delivered: 0,
                        failed: false,
                    });
                }
            }
            3 => sim.advance(Duration::from_micros(u64::from(arg) * 50)),
            4 | 5 => {
                if let Some(t) = sim.next_event() {
                    sim.advance_to(t);
                }
            }
            6 => {
                let take = usize::from(arg % 64).min(ops.len());
                let (x, rest) = ops.split_at(take);
                ops = rest;
                if !no_inject {
                    let now = sim.now();
                    sim[from].ep.handle_datagram(now, (1 - from) as u8, x);
                    book.injected = true;
                }
            }
            _ => {
                // Cancel a message (the sender gives up on it: neither
                // delivery nor error is then owed).
                if let Some(s) = book.sent[from].get_mut(usize::from(arg)) {
                    let now = sim.now();
                    if sim[from].ep.cancel(now, s.msg) {
                        s.failed = true;
                    }
                }
            }
        }
        sim.settle();
        book.check(&mut sim);
    }

    // Run until idle (or a virtual hour: resends back off up to 10 s each).
    sim.run_until(Duration::from_secs(3600), |s| {
        book.check(s);
        false
    });
    book.check(&mut sim);
    if !book.injected {
        for (i, list) in book.sent.iter().enumerate() {
            for (k, s) in list.iter().enumerate() {
                assert!(
                    s.delivered == 1 || s.failed,
                    "message {k} from end {i} ({:?}) neither delivered nor failed",
                    s.msg
                );
            }
        }
    }
});
