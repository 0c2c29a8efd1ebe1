//! 32-bit sequence numbers compared with wraparound (RFC 1982 serial
//! number arithmetic; TCP's `SEQ_LT`, RFC 9293 sec. 3.4): ESP's segment
//! numbers and MAK's packet numbers.

use std::cmp::Ordering;
use std::fmt;

/// A 32-bit sequence number: `a < b` iff `(b - a) mod 2^32` is in
/// `1..2^31` (RFC 1982). Numbers exactly 2^31 apart are unordered
/// (`partial_cmp` says `Less` for both; protocols keep windows far below).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// `self + n` modulo 2^32.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }
    /// `self - n` modulo 2^32.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn sub(self, n: u32) -> Seq {
        Seq(self.0.wrapping_sub(n))
    }
    /// Signed distance `self - other` (meaningful while |distance| < 2^31).
    #[inline]
    pub fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
    /// True if `self` lies in `[start, start + len)` with wraparound.
    #[inline]
    pub fn in_window(self, start: Seq, len: u32) -> bool {
        self.0.wrapping_sub(start.0) < len
    }
    /// The later of two sequence numbers.
    #[inline]
    pub fn max(self, other: Seq) -> Seq {
        if self.diff(other) >= 0 {
            self
        } else {
            other
        }
    }
}

impl PartialOrd for Seq {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_wraps_around() {
        assert!(Seq(u32::MAX) < Seq(0));
        assert!(Seq(0) > Seq(u32::MAX));
        assert!(Seq(5) < Seq(6));
        assert_eq!(Seq(u32::MAX).add(2), Seq(1));
        assert_eq!(Seq(1).sub(2), Seq(u32::MAX));
        assert_eq!(Seq(1).diff(Seq(u32::MAX)), 2);
        assert_eq!(Seq(u32::MAX).diff(Seq(1)), -2);
        assert_eq!(Seq(u32::MAX).max(Seq(3)), Seq(3));
        assert_eq!(Seq(3).max(Seq(u32::MAX)), Seq(3));
    }

    #[test]
    fn window_membership_wraps_around() {
        let start = Seq(u32::MAX - 1);
        assert!(start.in_window(start, 4));
        assert!(Seq(1).in_window(start, 4));
        assert!(!Seq(2).in_window(start, 4));
        assert!(!Seq(u32::MAX - 2).in_window(start, 4));
        assert!(!start.in_window(start, 0));
    }
}
