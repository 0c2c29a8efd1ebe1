//! The Internet checksum's ones' complement sum (RFC 1071), for the ESP
//! checksum and anything else that needs it: one implementation, with the
//! AVX2 word loop of `sys::checksum` selected at run time.

use crate::sys::checksum::sum_words;

/// Folds a 64-bit sum of 16-bit words to 16 bits with end-around carry
/// (RFC 1071 sec. 2(C)).
pub fn fold(acc: u64) -> u16 {
    let mut x = (acc >> 32) + (acc & 0xffff_ffff);
    x = (x >> 32) + (x & 0xffff_ffff);
    let mut y = (x >> 16) + (x & 0xffff);
    y = (y >> 16) + (y & 0xffff);
    y = (y >> 16) + (y & 0xffff);
    y as u16
}

/// RFC 1071 ones' complement sum of `data` taken as big-endian 16-bit
/// words (an odd last byte padded with zero), without the final
/// complement. The checksum field of a header is `!sum` over the header
/// (with the field zero) and payload.
pub fn ones_complement_sum(data: &[u8]) -> u16 {
    // Native-endian 32-bit words summed into a 64-bit accumulator (no carry
    // chain, so the compiler vectorizes the loop); the ones' complement sum
    // is byte-order independent (RFC 1071 sec. 2(B)): fold, then swap to
    // network order.
    let whole = data.len() & !3;
    let acc = sum_words(&data[..whole]);
    let mut sum = u64::from(u16::from_ne_bytes(fold(acc).to_be_bytes()));
    // Up to 3 trailing bytes, in network order (an odd byte is padded).
    let rest = &data[whole..];
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [b] = pairs.remainder() {
        sum += u64::from(*b) << 8;
    }
    fold(sum)
}

/// [`ones_complement_sum`] of the concatenation of `pieces` (e.g. a header
/// and the two halves of a ring buffer), without copying them: a piece
/// starting at an odd offset contributes its own sum byte-swapped (RFC 1071
/// sec. 2(B)).
pub fn ones_complement_sum_gather(pieces: &[&[u8]]) -> u16 {
    let mut sum = 0u64;
    let mut odd = false;
    for piece in pieces {
        let s = ones_complement_sum(piece);
        sum += u64::from(if odd { s.swap_bytes() } else { s });
        odd ^= piece.len() % 2 == 1;
    }
    fold(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::checksum::sum_words_portable;
    use proptest::prelude::*;

    /// RFC 1071 sum the textbook way: big-endian 16-bit words, an odd last
    /// byte padded with zero, end-around carry.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for p in data.chunks(2) {
            let w = u16::from_be_bytes([p[0], *p.get(1).unwrap_or(&0)]);
            acc += u32::from(w);
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    proptest! {
        #[test]
        fn sum_matches_the_textbook_sum(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            prop_assert_eq!(ones_complement_sum(&data), reference_sum(&data));
            let whole = &data[..data.len() & !3];
            prop_assert_eq!(sum_words(whole), sum_words_portable(whole));
        }

        #[test]
        fn gathered_sum_equals_contiguous(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            cut1 in 0usize..3000,
            cut2 in 0usize..3000,
        ) {
            let (c1, c2) = (cut1.min(data.len()), cut2.min(data.len()));
            let (c1, c2) = (c1.min(c2), c1.max(c2));
            prop_assert_eq!(
                ones_complement_sum_gather(&[&data[..c1], &data[c1..c2], &data[c2..]]),
                ones_complement_sum(&data)
            );
        }
    }

    #[test]
    fn rfc1071_example_and_all_ones() {
        // RFC 1071 sec. 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(
            ones_complement_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        // Carries across every fold.
        assert_eq!(
            ones_complement_sum(&[0xff; 9001]),
            reference_sum(&[0xff; 9001])
        );
        assert_eq!(ones_complement_sum(&[0xff; 9000]), 0xffff);
        assert_eq!(fold(0x1_0000_ffff), 0x1);
    }
}
