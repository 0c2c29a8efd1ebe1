//! The control messages' format: [`Ctrl`], [`CTRL_LEN`] bytes starting
//! with [`MAGIC`], and its codec. A leaf below the exchange (`control`) and
//! the transports, which must tell a control datagram from data.

use ::edp::wire::{ETH_HEADER_LEN, ETH_MIN_FRAME_LEN};

use crate::patterns::Pattern;

/// First bytes of every control message.
pub const MAGIC: [u8; 4] = *b"NGv1";
/// Size of a control message, bytes.
pub const CTRL_LEN: usize = 40;
/// Smallest Ethernet payload, bytes (IEEE 802.3: the 60-byte minimum frame
/// without FCS less the 14-byte header; eth mode's `MIN_PAYLOAD`): a
/// control message shorter than it arrives padded on real NICs.
const ETH_MIN_PAYLOAD: usize = ETH_MIN_FRAME_LEN - ETH_HEADER_LEN;

/// Kind of a control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Client: the next step's parameters.
    Hello = 1,
    /// Server: ready for the step.
    Ready = 2,
    /// Client (datagram stream): all datagrams of the step were sent.
    End = 3,
    /// Server: what the stream step received.
    Report = 4,
    /// Client: the session is over.
    Bye = 5,
    /// Client: asks for the server's CPU time of step `step`. Server: the
    /// answer: `count` iterations served, `extra` CPU time (user + system,
    /// getrusage) in ns.
    Stats = 6,
}

/// A control message. Fields not used by a kind are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctrl {
    pub kind: Kind,
    /// Step number, from 1; stale messages carry an older one.
    pub step: u32,
    pub pattern: Pattern,
    /// Message size of the step, bytes.
    pub size: u64,
    /// Messages in the step (warm-up included) for HELLO; datagrams or
    /// messages received intact for REPORT.
    pub count: u64,
    /// Warm-up iterations (HELLO); bytes received intact (REPORT).
    pub extra: u64,
}

impl Ctrl {
    pub fn new(kind: Kind, step: u32, pattern: Pattern) -> Self {
        Ctrl {
            kind,
            step,
            pattern,
            size: 0,
            count: 0,
            extra: 0,
        }
    }

    /// Encodes into 40 bytes: magic, kind u8, pattern u8, 2 zero bytes,
    /// step u32, size u64, count u64, extra u64, 4 zero bytes; little-endian.
    pub fn encode(&self) -> [u8; CTRL_LEN] {
        let mut b = [0u8; CTRL_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.kind as u8;
        // Multi-host patterns travel as the session pattern of each pair.
        b[5] = match self.pattern.session() {
            Pattern::Stream => 2,
            _ => 1,
        };
        b[8..12].copy_from_slice(&self.step.to_le_bytes());
        b[12..20].copy_from_slice(&self.size.to_le_bytes());
        b[20..28].copy_from_slice(&self.count.to_le_bytes());
        b[28..36].copy_from_slice(&self.extra.to_le_bytes());
        b
    }

    /// Decodes a control message; None if `b` is not one. Trailing bytes
    /// up to the minimum Ethernet payload ([`ETH_MIN_PAYLOAD`], 46 bytes)
    /// are padding (eth mode carries no length) and ignored.
    pub fn decode(b: &[u8]) -> Option<Ctrl> {
        if !(CTRL_LEN..=CTRL_LEN.max(ETH_MIN_PAYLOAD)).contains(&b.len()) || b[0..4] != MAGIC {
            return None;
        }
        let kind = match b[4] {
            1 => Kind::Hello,
            2 => Kind::Ready,
            3 => Kind::End,
            4 => Kind::Report,
            5 => Kind::Bye,
            6 => Kind::Stats,
            _ => return None,
        };
        let pattern = match b[5] {
            1 => Pattern::OneOne,
            2 => Pattern::Stream,
            _ => return None,
        };
        let u64at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Some(Ctrl {
            kind,
            step: u32::from_le_bytes(b[8..12].try_into().unwrap()),
            pattern,
            size: u64at(12),
            count: u64at(20),
            extra: u64at(28),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let c = Ctrl {
            kind: Kind::Report,
            step: 7,
            pattern: Pattern::Stream,
            size: 1400,
            count: 12345,
            extra: 1 << 40,
        };
        let b = c.encode();
        assert_eq!(Ctrl::decode(&b), Some(c));
        assert_eq!(Ctrl::decode(&b[..CTRL_LEN - 1]), None);
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(Ctrl::decode(&bad), None);
        let mut bad = b;
        bad[4] = 99;
        assert_eq!(Ctrl::decode(&bad), None);
        let stats = Ctrl {
            kind: Kind::Stats,
            count: 1100,
            extra: 5_000_000,
            ..Ctrl::new(Kind::Stats, 3, Pattern::OneOne)
        };
        assert_eq!(Ctrl::decode(&stats.encode()), Some(stats));
    }

    #[test]
    fn ethernet_padding_is_tolerated() {
        let c = Ctrl::new(Kind::Hello, 2, Pattern::OneOne);
        let mut padded = c.encode().to_vec();
        // A 40-byte payload arrives padded to 46 bytes on real Ethernet.
        padded.resize(ETH_MIN_PAYLOAD, 0);
        assert_eq!(Ctrl::decode(&padded), Some(c));
        // Longer than any padding: not a control message.
        padded.resize(ETH_MIN_PAYLOAD + 1, 0);
        assert_eq!(Ctrl::decode(&padded), None);
    }
}
