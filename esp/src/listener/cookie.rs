//! SYN cookies (RFC 4987 sec. 3.6): a listener whose half-open table is
//! full answers a SYN with a SYN-ACK whose initial sequence number encodes
//! the connection, and keeps nothing. The final ACK (or the client's first
//! data segment, which carries the same acknowledgement) proves that the
//! client received the SYN-ACK at its address; only then is a connection
//! made.
//!
//! Layout of the 32-bit cookie (ESP negotiates no MSS, so unlike TCP's
//! cookies no MSS index is needed: the MSS is the link's, the window comes
//! with the final ACK):
//!
//! ```text
//!  31    28 27                                0
//! | period |  SipHash-2-4(key, tuple, IRS, method, period) mod 2^28 |
//! ```
//!
//! `method` is the authentication method the listener chose
//! (`crate::auth`): the cookie binds it, and the listener finds it again
//! by trying each method of its list (at most 8 hashes, so a blind guess
//! succeeds with probability at most 8 x 2^-28).
//!
//! `period` is the wall clock in [`COOKIE_PERIOD`] units modulo 16; a cookie
//! is valid for [`COOKIE_PERIODS`] periods (60-64 s, as Linux's two
//! minutes, a bit shorter). A blind attacker guesses a valid cookie with
//! probability 2^-28 per forged ACK (one every 32 minutes at 140 000
//! frames/s), and such a connection then times out like any other.

use std::fmt;
use std::hash::Hasher;

use siphasher::sip::SipHasher24;

use crate::wire::{MacAddr, Seq};

/// Length of one cookie period, microseconds (4 s).
pub const COOKIE_PERIOD: u64 = 4_000_000;
/// Periods a cookie stays valid (the current one and the 15 before).
pub const COOKIE_PERIODS: u32 = 16;
const HASH_BITS: u32 = 28;
const HASH_MASK: u32 = (1 << HASH_BITS) - 1;

/// The keyed cookie function of one listener.
#[derive(Clone)]
pub struct SynCookies {
    key: [u8; 16],
}

impl fmt::Debug for SynCookies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SynCookies { key: <secret> }")
    }
}

impl SynCookies {
    /// Cookies with a random 128-bit key.
    pub fn random() -> Self {
        Self {
            key: rand::random(),
        }
    }

    /// Cookies with a fixed key (tests).
    pub fn with_key(key: [u8; 16]) -> Self {
        Self { key }
    }

    fn hash(
        &self,
        local: (MacAddr, u16),
        remote: (MacAddr, u16),
        irs: Seq,
        method: u8,
        period: u64,
    ) -> u32 {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(&local.0 .0);
        h.write(&local.1.to_be_bytes());
        h.write(&remote.0 .0);
        h.write(&remote.1.to_be_bytes());
        h.write(&irs.0.to_be_bytes());
        h.write(&[method]);
        h.write(&period.to_be_bytes());
        (h.finish() as u32) & HASH_MASK
    }

    /// The cookie (our ISS) for a SYN from `remote` with sequence number
    /// `irs`, binding authentication method id `method`, at wall-clock
    /// `clock_us` (microseconds).
    pub fn make(
        &self,
        local: (MacAddr, u16),
        remote: (MacAddr, u16),
        irs: Seq,
        method: u8,
        clock_us: u64,
    ) -> Seq {
        let period = clock_us / COOKIE_PERIOD;
        let tag = (period % u64::from(COOKIE_PERIODS)) as u32;
        Seq(tag << HASH_BITS | self.hash(local, remote, irs, method, period))
    }

    /// Whether `iss` is a cookie this listener made for (`remote`, `irs`)
    /// and `method` within the last [`COOKIE_PERIODS`] periods.
    pub fn check(
        &self,
        local: (MacAddr, u16),
        remote: (MacAddr, u16),
        irs: Seq,
        iss: Seq,
        method: u8,
        clock_us: u64,
    ) -> bool {
        let now = clock_us / COOKIE_PERIOD;
        let tag = u64::from(iss.0 >> HASH_BITS);
        let n = u64::from(COOKIE_PERIODS);
        // The most recent period at or before `now` with this tag.
        let age = (now % n + n - tag) % n;
        let Some(period) = now.checked_sub(age) else {
            return false;
        };
        self.hash(local, remote, irs, method, period) == iss.0 & HASH_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: (MacAddr, u16) = (MacAddr([2, 0, 0, 0, 0, 1]), 80);
    const R: (MacAddr, u16) = (MacAddr([2, 0, 0, 0, 0, 2]), 40000);

    #[test]
    fn valid_for_sixteen_periods_and_bound_to_the_tuple() {
        let c = SynCookies::with_key([3; 16]);
        let t = 1_700_000_000_000_000u64;
        let k = c.make(L, R, Seq(77), 0, t);
        for p in 0..COOKIE_PERIODS as u64 {
            assert!(
                c.check(L, R, Seq(77), k, 0, t + p * COOKIE_PERIOD),
                "period {p}"
            );
        }
        assert!(!c.check(L, R, Seq(77), k, 0, t + 16 * COOKIE_PERIOD));
        assert!(!c.check(L, R, Seq(77), k, 1, t), "bound to the method");
        assert!(!c.check(L, R, Seq(78), k, 0, t));
        assert!(!c.check(L, (R.0, 40001), Seq(77), k, 0, t));
        assert!(!c.check(L, R, Seq(77), k.add(1), 0, t));
        assert!(!SynCookies::with_key([4; 16]).check(L, R, Seq(77), k, 0, t));
        assert_eq!(format!("{c:?}"), "SynCookies { key: <secret> }");
    }

    #[test]
    fn random_guesses_fail() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let c = SynCookies::random();
        let t = 1_700_000_000_000_000u64;
        let hits = (0..200_000)
            .filter(|_| c.check(L, R, Seq(5), Seq(rng.random()), 0, t))
            .count();
        assert!(hits <= 1, "{hits}");
    }
}
