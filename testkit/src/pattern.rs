//! Deterministic payloads and their check: one byte generator for every test
//! stream and message, and a length + hash digest that two ends compare
//! without keeping the data.
//!
//! - [`byte_at`] / [`fill`] / [`pattern`]: byte `offset` of stream `seed`.
//!   Any window of a stream can be made or checked on its own.
//! - [`tagged`] / [`stamp`] / [`tag_of`]: a message whose first (up to) 8
//!   bytes carry its tag (index, sequence number) little-endian, so that a
//!   stale, duplicated or reordered message shows.
//! - [`check`]: the first differing byte of a received window.
//! - [`Digest`]: FNV-1a over 8-byte words plus the length; independent of
//!   how the data was cut into reads and writes.

use std::fmt;

/// Byte `offset` of the stream `seed`: a 64-bit multiplicative hash
/// (golden-ratio constant) of offset and seed, xor the offset's low byte so
/// that shifted windows differ.
pub fn byte_at(offset: u64, seed: u64) -> u8 {
    let x = (offset ^ seed.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x >> 56) as u8) ^ (offset as u8)
}

/// Fills `buf` with bytes `from..from + buf.len()` of stream `seed`.
pub fn fill(buf: &mut [u8], from: u64, seed: u64) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = byte_at(from + k as u64, seed);
    }
}

/// The first `len` bytes of stream `seed`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; len];
    fill(&mut v, 0, seed);
    v
}

/// Bytes of a message that hold its tag.
pub const TAG_LEN: usize = 8;

/// A message of `len` bytes tagged `tag`: the tag little-endian in the first
/// `min(len, 8)` bytes, then bytes 8.. of stream `tag`.
pub fn tagged(tag: u64, len: usize) -> Vec<u8> {
    let mut v = pattern(len, tag);
    stamp(&mut v, tag);
    v
}

/// Writes `tag` little-endian into the first `min(len, 8)` bytes of `buf`.
pub fn stamp(buf: &mut [u8], tag: u64) {
    let k = buf.len().min(TAG_LEN);
    buf[..k].copy_from_slice(&tag.to_le_bytes()[..k]);
}

/// The tag of a message of at least 8 bytes.
pub fn tag_of(buf: &[u8]) -> Option<u64> {
    buf.get(..TAG_LEN)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// The first byte of a window that differs from its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Stream offset of the byte.
    pub offset: u64,
    /// The byte received.
    pub got: u8,
    /// The byte the pattern has at that offset.
    pub expected: u8,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "corrupt data at stream offset {}: {:#04x}, expected {:#04x}",
            self.offset, self.got, self.expected
        )
    }
}

impl std::error::Error for Mismatch {}

/// Checks that `buf` is bytes `from..` of stream `seed`.
///
/// Errors: the first [`Mismatch`].
pub fn check(buf: &[u8], from: u64, seed: u64) -> Result<(), Mismatch> {
    for (k, &got) in buf.iter().enumerate() {
        let offset = from + k as u64;
        let expected = byte_at(offset, seed);
        if got != expected {
            return Err(Mismatch {
                offset,
                got,
                expected,
            });
        }
    }
    Ok(())
}

/// Length and FNV-1a hash (64-bit, over little-endian 8-byte words; the
/// last partial word zero-padded, then the length mixed in) of a byte
/// stream fed in pieces of any size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    len: u64,
    hash: u64,
    word: [u8; 8],
    /// Bytes in `word` not hashed yet.
    partial: usize,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x100_0000_01b3;

impl Default for Digest {
    fn default() -> Self {
        Digest::new()
    }
}

impl Digest {
    /// The digest of nothing.
    pub fn new() -> Digest {
        Digest {
            len: 0,
            hash: FNV_OFFSET,
            word: [0; 8],
            partial: 0,
        }
    }

    /// The digest of `data` alone.
    pub fn of(data: &[u8]) -> Digest {
        let mut d = Digest::new();
        d.update(data);
        d
    }

    fn mix(&mut self, w: u64) {
        self.hash ^= w;
        self.hash = self.hash.wrapping_mul(FNV_PRIME);
    }

    /// Adds the next bytes of the stream.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.partial > 0 {
            let k = (8 - self.partial).min(data.len());
            self.word[self.partial..self.partial + k].copy_from_slice(&data[..k]);
            self.partial += k;
            data = &data[k..];
            if self.partial < 8 {
                return;
            }
            self.mix(u64::from_le_bytes(self.word));
            self.partial = 0;
        }
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            self.mix(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        self.word[..rest.len()].copy_from_slice(rest);
        self.partial = rest.len();
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was fed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hash of everything fed so far.
    pub fn hash(&self) -> u64 {
        let mut d = *self;
        if d.partial > 0 {
            d.word[d.partial..].fill(0);
            d.mix(u64::from_le_bytes(d.word));
        }
        d.mix(d.len);
        d.hash
    }

    /// The 16-byte report one end sends the other: length then hash, both
    /// big-endian.
    pub fn report(&self) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[..8].copy_from_slice(&self.len.to_be_bytes());
        r[8..].copy_from_slice(&self.hash().to_be_bytes());
        r
    }

    /// (length, hash) from a [`Digest::report`].
    pub fn parse_report(r: &[u8; 16]) -> (u64, u64) {
        let len = u64::from_be_bytes(r[..8].try_into().expect("8 bytes"));
        let hash = u64::from_be_bytes(r[8..].try_into().expect("8 bytes"));
        (len, hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_agree_with_the_whole_stream() {
        let whole = pattern(1000, 42);
        let mut part = vec![0; 100];
        fill(&mut part, 333, 42);
        assert_eq!(part, whole[333..433]);
        check(&whole[500..], 500, 42).unwrap();
        assert_ne!(pattern(64, 1), pattern(64, 2), "seeds give other streams");
        assert_ne!(whole[..64], whole[1..65], "shifted windows differ");
        // every byte value occurs: no stuck bits
        let mut seen = [false; 256];
        pattern(1 << 16, 42)
            .iter()
            .for_each(|&b| seen[b as usize] = true);
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn check_names_the_first_bad_byte() {
        let mut v = pattern(100, 7);
        v[61] ^= 0x40;
        v[80] ^= 1;
        let e = check(&v[10..], 10, 7).unwrap_err();
        assert_eq!(e.offset, 61);
        assert_eq!(e.got ^ e.expected, 0x40);
        assert!(e.to_string().contains("offset 61"), "{e}");
        assert!(check(&v[..61], 0, 8).is_err(), "other seed");
    }

    #[test]
    fn tags_lead_the_message() {
        let m = tagged(0x0102_0304_0506_0708, 20);
        assert_eq!(tag_of(&m), Some(0x0102_0304_0506_0708));
        assert_eq!(m[8..], pattern(20, 0x0102_0304_0506_0708)[8..]);
        assert_eq!(tagged(5, 3), vec![5, 0, 0]);
        assert_eq!(tag_of(&[1, 2, 3]), None);
    }

    #[test]
    fn digest_ignores_how_the_stream_was_cut() {
        let data = pattern(10_007, 3);
        let whole = Digest::of(&data);
        for cut in [1usize, 3, 7, 8, 9, 1000, 4096] {
            let mut d = Digest::new();
            data.chunks(cut).for_each(|c| d.update(c));
            assert_eq!(
                (d.len(), d.hash()),
                (whole.len(), whole.hash()),
                "cut {cut}"
            );
        }
        let mut bad = data.clone();
        bad[5000] ^= 1;
        assert_ne!(Digest::of(&bad).hash(), whole.hash());
        // trailing zeros change the length, and the hash
        assert_ne!(Digest::of(&[1, 0]).hash(), Digest::of(&[1]).hash());
        assert_eq!(
            Digest::parse_report(&whole.report()),
            (10_007, whole.hash())
        );
    }
}
