//! Message sizes of a sweep: netgauge's `-s MIN-MAX` and its size steps
//! (`-g`).

use std::str::FromStr;

/// An inclusive size range in bytes, netgauge's `-s MIN-MAX` (also `-s N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRange {
    pub min: usize,
    pub max: usize,
}

impl FromStr for SizeRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |t: &str| -> Result<usize, String> {
            let t = t.trim();
            let (digits, mult) = match t.chars().last() {
                Some('k' | 'K') => (&t[..t.len() - 1], 1024),
                Some('m' | 'M') => (&t[..t.len() - 1], 1024 * 1024),
                _ => (t, 1),
            };
            digits.parse::<usize>().map(|v| v * mult).map_err(|_| {
                format!("invalid size {t:?} in -s {s:?}: expected bytes, e.g. 1-65536")
            })
        };
        let (min, max) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let v = num(s)?;
                (v, v)
            }
        };
        if min == 0 || max < min {
            return Err(format!(
                "invalid size range {s:?}: need 1 <= MIN <= MAX (bytes)"
            ));
        }
        Ok(SizeRange { min, max })
    }
}

/// The sizes of a sweep from `range.min` to `range.max`, netgauge's
/// `get_next_testparams`: each step adds the largest power of two not above
/// `size / 2^(grade-1)` (grade 1 doubles the size).
pub fn size_steps(range: SizeRange, grade: u32) -> Vec<usize> {
    let mut sizes = vec![range.min];
    let mut s = range.min;
    while s < range.max {
        let scaled = (s >> (grade - 1).min(63)).max(1);
        let inc = 1usize << (usize::BITS - 1 - scaled.leading_zeros());
        s += inc.clamp(1, range.max - s);
        sizes.push(s);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_steps_follow_netgauge() {
        let r = |a, b| SizeRange { min: a, max: b };
        assert_eq!(size_steps(r(1, 16), 1), vec![1, 2, 4, 8, 16]);
        assert_eq!(size_steps(r(1, 20), 1), vec![1, 2, 4, 8, 16, 20]);
        assert_eq!(size_steps(r(64, 64), 1), vec![64]);
        assert_eq!(size_steps(r(1, 16), 2), vec![1, 2, 3, 4, 6, 8, 12, 16]);
        assert_eq!(size_steps(r(3, 10), 1), vec![3, 5, 9, 10]);
    }

    #[test]
    fn size_range_parsing() {
        assert_eq!(
            "1-65536".parse::<SizeRange>().unwrap(),
            SizeRange { min: 1, max: 65536 }
        );
        assert_eq!(
            "64".parse::<SizeRange>().unwrap(),
            SizeRange { min: 64, max: 64 }
        );
        assert_eq!(
            "1k-1M".parse::<SizeRange>().unwrap(),
            SizeRange {
                min: 1024,
                max: 1 << 20
            }
        );
        assert!("0-10".parse::<SizeRange>().is_err());
        assert!("10-1".parse::<SizeRange>().is_err());
        assert!("x".parse::<SizeRange>().is_err());
    }
}
