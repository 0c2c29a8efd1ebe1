//! Helpers for checked-view frame codecs (smoltcp's `wire` style), shared
//! by the EDP and ESP codecs (`edp::wire`, `esp::wire`):
//!
//! - header fields are named byte ranges ([`Field`]) in a `field` module of
//!   each codec; views read them with [`get_u16`] / [`get_u32`] and
//!   setters write them with [`set_u16`] / [`set_u32`], so `emit` writes
//!   through the same ranges `parse` reads;
//! - [`check_len`] is the length check every `new_checked` starts with;
//! - [`WireError`] is the one error type of the workspace's codecs
//!   (Ethernet, EDP, ESP, CTP, MAK, comm): malformed input is an error,
//!   never a panic;
//! - [`fmt_flags`] prints a flag byte as `SYN|ACK` (`-` when empty).
//!
//! All multi-byte fields are big-endian (network byte order).

use std::ops::Range;

/// A header field: its byte range from the start of the header.
pub type Field = Range<usize>;

/// Why a frame or header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is shorter than the header or than the length field claims.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The frame (or a part of it) is longer than its limit: the largest
    /// frame the link can carry, the message a fragment belongs to.
    #[error("oversized: {len} bytes exceeds the limit of {max}")]
    Oversized {
        /// Length of the frame in bytes.
        len: usize,
        /// Largest acceptable length in bytes.
        max: usize,
    },
    /// The ethertype is not the one expected.
    #[error("unexpected ethertype {got:#06x}, expected {expected:#06x}")]
    Ethertype {
        /// The frame's ethertype.
        got: u16,
        /// The protocol's ethertype.
        expected: u16,
    },
    /// The first byte is not the protocol's magic number: not a frame of
    /// this protocol.
    #[error("not a {protocol} frame: first byte {got:#04x}, expected {expected:#04x}")]
    Magic {
        /// The protocol expected (`"MAK"`).
        protocol: &'static str,
        /// The frame's first byte.
        got: u8,
        /// The protocol's magic number.
        expected: u8,
    },
    /// A header of a protocol version this implementation does not speak.
    #[error(
        "{protocol} version {got} not supported (this implementation speaks version {expected})"
    )]
    Version {
        /// The protocol or header (`"MAK"`, `"comm header"`).
        protocol: &'static str,
        /// The header's version.
        got: u8,
        /// The version spoken here.
        expected: u8,
    },
    /// A field holds a value (or bits) the protocol does not define.
    #[error("unknown {field} {value:#04x}")]
    Unknown {
        /// The field (`"comm header flags"`).
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A field holds a value that contradicts another field or the protocol.
    #[error("inconsistent header: {0}")]
    Inconsistent(&'static str),
    /// The checksum does not match the contents (RFC 1071 Internet
    /// checksum): the frame was corrupted on the way.
    #[error("checksum mismatch: the frame was corrupted in transit")]
    Checksum,
}

/// `Ok` if `buf` holds at least `need` bytes, else [`WireError::Truncated`].
#[inline]
pub fn check_len(buf: &[u8], need: usize) -> Result<(), WireError> {
    if buf.len() < need {
        return Err(WireError::Truncated {
            need,
            have: buf.len(),
        });
    }
    Ok(())
}

/// The big-endian `u16` at `field` (2 bytes). Panics if `buf` is shorter
/// than `field.end` (views check lengths first).
#[inline]
pub fn get_u16(buf: &[u8], field: Field) -> u16 {
    let b = &buf[field];
    u16::from_be_bytes([b[0], b[1]])
}

/// The big-endian `u32` at `field` (4 bytes). Panics if `buf` is shorter
/// than `field.end`.
#[inline]
pub fn get_u32(buf: &[u8], field: Field) -> u32 {
    let b = &buf[field];
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Writes `v` big-endian at `field` (2 bytes). Panics if `buf` is shorter
/// than `field.end`.
#[inline]
pub fn set_u16(buf: &mut [u8], field: Field, v: u16) {
    buf[field].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `field` (4 bytes). Panics if `buf` is shorter
/// than `field.end`.
#[inline]
pub fn set_u32(buf: &mut [u8], field: Field, v: u32) {
    buf[field].copy_from_slice(&v.to_be_bytes());
}

/// Writes the names of the flags that are set, joined by `|`, or `-` when
/// none is: the `Debug` form of ESP's and MAK's flag bytes.
///
/// Errors: those of the formatter.
pub fn fmt_flags(
    f: &mut std::fmt::Formatter<'_>,
    flags: impl IntoIterator<Item = (bool, &'static str)>,
) -> std::fmt::Result {
    let mut first = true;
    for (set, name) in flags {
        if set {
            if !first {
                f.write_str("|")?;
            }
            f.write_str(name)?;
            first = false;
        }
    }
    if first {
        f.write_str("-")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_print_as_names_joined_by_a_bar() {
        struct F(u8);
        impl std::fmt::Debug for F {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                super::fmt_flags(f, [(self.0 & 1 != 0, "SYN"), (self.0 & 2 != 0, "ACK")])
            }
        }
        assert_eq!(format!("{:?}", F(3)), "SYN|ACK");
        assert_eq!(format!("{:?}", F(2)), "ACK");
        assert_eq!(format!("{:?}", F(0)), "-");
    }

    use super::*;

    const PORT: Field = 2..4;
    const SEQ: Field = 4..8;

    #[test]
    fn fields_round_trip_big_endian() {
        let mut b = [0u8; 8];
        set_u16(&mut b, PORT, 0x1234);
        set_u32(&mut b, SEQ, 0x0102_0304);
        assert_eq!(b, [0, 0, 0x12, 0x34, 1, 2, 3, 4]);
        assert_eq!(get_u16(&b, PORT), 0x1234);
        assert_eq!(get_u32(&b, SEQ), 0x0102_0304);
    }

    #[test]
    fn length_check_reports_need_and_have() {
        assert_eq!(check_len(&[0; 4], 4), Ok(()));
        assert_eq!(
            check_len(&[0; 3], 4),
            Err(WireError::Truncated { need: 4, have: 3 })
        );
        assert_eq!(
            WireError::Checksum.to_string(),
            "checksum mismatch: the frame was corrupted in transit"
        );
    }
}
