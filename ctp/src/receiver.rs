//! The large-commands storage (CTP spec v1.2, "Storages"): parts of a large
//! message are placed in one buffer by their number; the message is delivered
//! only when every part has arrived.

use std::time::Instant;

use crate::wire::Repr;

/// Why a part could not be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartError {
    /// The part's length or number contradicts the message's other parts.
    Inconsistent(&'static str),
}

/// A zero-filled buffer of `n` bytes from `alloc_zeroed` (fresh pages from
/// the OS are zero already, so a 100 MiB buffer costs no memset up front).
/// `None` if the allocation fails.
fn zeroed(n: usize) -> Option<Vec<u8>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(n).ok()?;
    // SAFETY: layout has non-zero size; the result is checked for null.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: p was allocated by the global allocator with the layout of
    // [u8; n] (align 1, size n = capacity), and all n bytes are initialised.
    Some(unsafe { Vec::from_raw_parts(p, n, n) })
}

/// A large message being reassembled.
#[derive(Debug)]
pub struct Reassembly {
    pub command: u16,
    pub size: u64,
    pub amount: u32,
    /// Part size in bytes, learned from the first part seen.
    pub part_size: Option<u64>,
    pub buf: Vec<u8>,
    got: Vec<u64>,
    pub remaining: u32,
    pub last_activity: Instant,
}

impl Reassembly {
    /// An empty reassembly for the message described by `r` (a part of it).
    /// The caller has checked the memory limit; the buffer is allocated here.
    ///
    /// Errors: `None` if the allocation of `r.message_size` bytes failed.
    pub fn new(r: &Repr, now: Instant) -> Option<Self> {
        let size = usize::try_from(r.message_size).ok()?;
        let buf = zeroed(size)?;
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

    /// Stores part `r` (already [`check`](Self::check)ed, not a duplicate).
    /// Returns true when the message is complete.
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
            let off = off as usize;
            self.buf[off..off + body.len()].copy_from_slice(body);
            self.got[(r.number / 64) as usize] |= 1 << (r.number % 64);
            self.remaining -= 1;
        }
        self.last_activity = now;
        self.remaining == 0
    }
}
