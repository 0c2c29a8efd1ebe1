//! The large-commands storage (CTP spec v1.2, "Storages"): parts of a large
//! message are placed in one buffer by their number; the message is delivered
//! only when every part has arrived.
//!
//! Memory: the buffer's capacity (the announced message size) is reserved
//! with a fallible allocation when the first part arrives, so an impossible
//! size is an error, not an abort; its pages are written only as parts
//! arrive. Each part is copied once, from the received datagram straight
//! into its place in the buffer (in-order parts extend it; a part beyond a
//! gap zero-fills the gap first, and the gap's parts later overwrite it).

use std::time::Instant;

use crate::wire::Repr;

/// Why a part could not be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartError {
    /// The part's length or number contradicts the message's other parts.
    Inconsistent(&'static str),
}

/// Bytes a reassembly costs besides its message bytes: the struct, its map
/// entry and key, allocator slack (an estimate, for the memory budget).
pub const REASSEMBLY_OVERHEAD: u64 = 256;

/// A large message being reassembled.
#[derive(Debug)]
pub struct Reassembly {
    pub command: u16,
    pub size: u64,
    pub amount: u32,
    /// Part size in bytes, learned from the first part seen.
    pub part_size: Option<u64>,
    /// Capacity `size` (reserved up front); length: the end of the furthest
    /// part stored so far (gaps before it zero-filled).
    buf: Vec<u8>,
    got: Vec<u64>,
    pub remaining: u32,
    pub last_activity: Instant,
}

impl Reassembly {
    /// An empty reassembly for the message described by `r` (a part of it),
    /// in `spare` if given (a spent buffer of the pool, `pool.rs`; emptied
    /// here). The caller has checked the memory limits; the buffer's
    /// capacity is reserved here.
    ///
    /// Errors: `None` if `r.message_size` bytes (or the part bitmap) cannot
    /// be allocated (`try_reserve_exact`: no abort).
    pub fn new(r: &Repr, now: Instant, spare: Option<Vec<u8>>) -> Option<Self> {
        let size = usize::try_from(r.message_size).ok()?;
        let mut buf = spare.unwrap_or_default();
        buf.clear();
        buf.try_reserve_exact(size).ok()?;
        let words = (r.amount as usize).div_ceil(64);
        let mut got = Vec::new();
        got.try_reserve_exact(words).ok()?;
        got.resize(words, 0);
        Some(Self {
            command: r.command,
            size: r.message_size,
            amount: r.amount,
            part_size: None,
            buf,
            got,
            remaining: r.amount,
            last_activity: now,
        })
    }

    /// Bytes a reassembly of a `size`-byte message in `amount` parts counts
    /// against the memory limits: the message size plus
    /// [`REASSEMBLY_OVERHEAD`] plus the part bitmap.
    pub fn budget(size: u64, amount: u32) -> u64 {
        size.saturating_add(REASSEMBLY_OVERHEAD)
            .saturating_add(u64::from(amount).div_ceil(64) * 8)
    }

    /// True if part `n` is already here.
    pub fn has(&self, n: u32) -> bool {
        self.got[(n / 64) as usize] & (1 << (n % 64)) != 0
    }

    /// Checks that part `r` with `len` body bytes fits this message, without
    /// storing it. Returns its byte offset.
    pub fn check(&self, r: &Repr, len: usize) -> Result<u64, PartError> {
        if r.command != self.command || r.message_size != self.size || r.amount != self.amount {
            return Err(PartError::Inconsistent(
                "part disagrees with its message's header",
            ));
        }
        let len = len as u64;
        let last = r.number + 1 == self.amount;
        // Part size implied by this part.
        let implied = if last {
            let rest = self.size - len; // parse() checked len <= size
            #[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; MSRV is 1.80
            if rest % (self.amount as u64 - 1) != 0 {
                return Err(PartError::Inconsistent(
                    "last part does not end the message",
                ));
            }
            rest / (self.amount as u64 - 1)
        } else {
            len
        };
        if implied == 0 || (last && len > implied) {
            return Err(PartError::Inconsistent("bad part length"));
        }
        if let Some(p) = self.part_size {
            if p != implied {
                return Err(PartError::Inconsistent("parts of different sizes"));
            }
        } else if implied * (self.amount as u64 - 1) >= self.size
            || implied.saturating_mul(self.amount as u64) < self.size
        {
            return Err(PartError::Inconsistent(
                "part size does not match message size",
            ));
        }
        Ok(implied * r.number as u64)
    }

    /// Stores part `r` (already [`check`](Self::check)ed, not a duplicate):
    /// one copy from `body` into the message buffer. Returns true when the
    /// message is complete.
    pub fn store(&mut self, r: &Repr, body: &[u8], now: Instant) -> bool {
        let Ok(off) = self.check(r, body.len()) else {
            return false;
        };
        if self.part_size.is_none() {
            let last = r.number + 1 == self.amount;
            self.part_size = Some(if last {
                (self.size - body.len() as u64) / (self.amount as u64 - 1)
            } else {
                body.len() as u64
            });
        }
        if !self.has(r.number) {
            // check() bounds off + len by the message size, the reserved
            // capacity: neither branch reallocates.
            let off = off as usize;
            if off >= self.buf.len() {
                self.buf.resize(off, 0);
                self.buf.extend_from_slice(body);
            } else {
                // A part inside a zero-filled gap (parts are disjoint and
                // the length is always the end of a stored part).
                self.buf[off..off + body.len()].copy_from_slice(body);
            }
            self.got[(r.number / 64) as usize] |= 1 << (r.number % 64);
            self.remaining -= 1;
        }
        self.last_activity = now;
        self.remaining == 0
    }

    /// The complete message (after [`store`](Self::store) returned true).
    pub fn into_data(self) -> Vec<u8> {
        debug_assert_eq!(self.buf.len() as u64, self.size);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Options;

    fn part(number: u32, amount: u32, size: u64, len: u16) -> Repr {
        Repr {
            command: 1,
            confirm: false,
            number,
            amount,
            id: number,
            message_size: size,
            options: Options::NONE,
            payload_len: len,
        }
    }

    #[test]
    fn parts_in_any_order_land_in_place_without_reallocation() {
        let t = Instant::now();
        // 10 bytes in parts of 4: 0..4, 4..8, 8..10
        let mut ra = Reassembly::new(&part(0, 3, 10, 4), t, None).unwrap();
        let cap = ra.buf.capacity();
        assert!(cap >= 10);
        assert!(!ra.store(&part(2, 3, 10, 2), b"89", t));
        assert_eq!(ra.buf.len(), 10, "gap before the last part zero-filled");
        assert!(!ra.store(&part(0, 3, 10, 4), b"0123", t));
        assert!(ra.store(&part(1, 3, 10, 4), b"4567", t));
        assert_eq!(ra.buf.capacity(), cap);
        assert_eq!(ra.into_data(), b"0123456789");
    }

    #[test]
    fn impossible_size_is_an_error_not_an_abort() {
        let t = Instant::now();
        // 2^48 - 1 bytes: more than any machine here has
        assert!(Reassembly::new(&part(0, 2, (1 << 48) - 1, 4), t, None).is_none());
    }
}
