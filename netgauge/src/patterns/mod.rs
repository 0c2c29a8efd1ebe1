//! Communication patterns (netgauge's `-x`): `one_one` ping-pong and
//! `stream` one-way bulk transfer, with the verified payload they carry.

pub mod one_one;
pub mod resend;
pub mod stream;

use std::io;

/// A communication pattern (`-x`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Ping-pong: half round-trip latency and throughput per size.
    #[value(name = "one_one")]
    OneOne,
    /// One-way bulk transfer per size: throughput; the receiver verifies
    /// every byte (datagram modes report loss).
    #[value(name = "stream")]
    Stream,
    /// Multi-host (`--local --hosts N`): rank 0 against every other rank
    /// at once, rank 0 sending (ping-pong with each peer; netgauge's 1toN);
    /// with the multicast modes, host 0 multicasting to every other host.
    #[value(name = "1toN")]
    OneToN,
    /// Multi-host: every other rank against rank 0 at once, the peers
    /// sending (netgauge's Nto1).
    #[value(name = "Nto1")]
    NToOne,
    /// Multi-host: ping-pong between ranks 0 and 1 in both directions at
    /// once (each one client of the other).
    #[value(name = "one_one_bidir")]
    OneOneBidir,
    /// Multi-host: effective bisection bandwidth, random pairings of the
    /// ranks, all pairs at once (netgauge's ebb).
    #[value(name = "ebb")]
    Ebb,
    /// Multi-host: message rate, ranks 0..N/2 stream small messages to
    /// ranks N/2..N at once (OSU osu_mbw_mr).
    #[value(name = "msgrate")]
    MsgRate,
    /// Multi-host: streams between ranks 0 and 1 in both directions at
    /// once (each the sender of one; OSU osu_bibw's pattern, its floor).
    #[value(name = "stream_bidir")]
    StreamBidir,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::OneOne => "one_one",
            Pattern::Stream => "stream",
            Pattern::OneToN => "1toN",
            Pattern::NToOne => "Nto1",
            Pattern::OneOneBidir => "one_one_bidir",
            Pattern::Ebb => "ebb",
            Pattern::MsgRate => "msgrate",
            Pattern::StreamBidir => "stream_bidir",
        }
    }

    /// The two-host pattern each pair of a multi-host pattern runs (the
    /// pattern itself for one_one and stream).
    pub fn session(self) -> Pattern {
        match self {
            Pattern::Stream | Pattern::MsgRate | Pattern::StreamBidir => Pattern::Stream,
            _ => Pattern::OneOne,
        }
    }

    /// Whether the pattern involves more than one pair of hosts.
    pub fn is_multi_host(self) -> bool {
        self.session() != self
    }
}

/// The payload of a step: a fixed byte pattern per size whose first (up to)
/// 8 bytes are replaced by the message's sequence number, little-endian, so
/// that a stale, duplicated or reordered message is detected, and the rest is
/// checked with one `memcmp`.
pub struct Payload {
    base: Vec<u8>,
}

/// Bytes of a message holding its sequence number.
pub(crate) const STAMP: usize = testkit::pattern::TAG_LEN;

impl Payload {
    /// A pattern for messages of up to `max` bytes (the project's one
    /// payload generator, `testkit::pattern`, stream 0).
    pub fn new(max: usize) -> Self {
        Payload {
            base: testkit::pattern::pattern(max, 0),
        }
    }

    /// Largest message size this pattern covers, bytes.
    pub fn capacity(&self) -> usize {
        self.base.len()
    }

    /// Writes message `seq` of `buf.len()` bytes into `buf`.
    pub fn fill(&self, buf: &mut [u8], seq: u64) {
        let n = buf.len();
        buf.copy_from_slice(&self.base[..n]);
        self.stamp(buf, seq);
    }

    /// Replaces the sequence number of a message already filled.
    pub fn stamp(&self, buf: &mut [u8], seq: u64) {
        testkit::pattern::stamp(buf, seq);
    }

    /// Checks that `buf` is message `seq`. Errors: `InvalidData` naming the
    /// first differing byte.
    pub fn verify(&self, buf: &[u8], seq: u64) -> io::Result<()> {
        let k = buf.len().min(STAMP);
        let stamp = &seq.to_le_bytes()[..k];
        if buf[..k] != *stamp {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "payload mismatch: message {seq} of {} bytes carries sequence bytes {:02x?}, expected {:02x?} (lost, duplicated or reordered data)",
                    buf.len(),
                    &buf[..k],
                    stamp
                ),
            ));
        }
        if buf[k..] != self.base[k..buf.len()] {
            let at = k + buf[k..]
                .iter()
                .zip(&self.base[k..])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "payload mismatch: message {seq} of {} bytes differs at byte {at} ({:#04x}, expected {:#04x})",
                    buf.len(),
                    buf[at],
                    self.base[at]
                ),
            ));
        }
        Ok(())
    }

    /// Whether `d` is the unstamped part of a message from byte `off` on
    /// (`off` >= the stamp): a datagram of a train lands where it belongs.
    pub fn matches_at(&self, off: usize, d: &[u8]) -> bool {
        off >= STAMP && self.base.get(off..off + d.len()) == Some(d)
    }

    /// The sequence number a message of `buf.len()` >= 8 bytes carries.
    pub fn seq_of(buf: &[u8]) -> Option<u64> {
        testkit::pattern::tag_of(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_detects_every_kind_of_damage() {
        let p = Payload::new(2000);
        for size in [1, 3, 8, 9, 100, 2000] {
            let mut m = vec![0; size];
            p.fill(&mut m, 42);
            p.verify(&m, 42).unwrap();
            assert!(
                p.verify(&m, 43).is_err(),
                "stale message accepted at {size}"
            );
            let last = size - 1;
            m[last] ^= 0x10;
            assert!(p.verify(&m, 42).is_err(), "corruption accepted at {size}");
        }
    }
}
