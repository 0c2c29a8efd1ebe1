//! The communicator's private header, carried at the front of every CTP
//! message it sends (one CTP command, [`COMM_COMMAND`]).
//!
//! Source: the thesis's Open MPI transport (ch. 6, the BTL) puts a private
//! header of *length and tag* before each fragment; this one adds the
//! communicator's *context id* (MPI 4.0 section 6.1.2: a context separates
//! the traffic of communicators, and point-to-point from collective traffic)
//! and a per-peer *sequence number*, because CTP may deliver the messages of
//! one peer out of order and MPI needs them in send order (section 3.5).
//!
//! Layout, 24 bytes, big-endian (network order):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version, [`VERSION`] |
//! | 1 | 1 | flags: bit 0 [`FLAG_LAST`] (last fragment of the message); the others must be 0 |
//! | 2 | 2 | context id |
//! | 4 | 4 | tag, 0..=[`MAX_TAG`] |
//! | 8 | 8 | sequence number of this fragment among all sent to the peer, from 0 |
//! | 16 | 8 | length of the whole message, bytes |
//!
//! The fragment's bytes follow. A message longer than the sender's fragment
//! size is sent as consecutive fragments (consecutive sequence numbers, the
//! same context, tag and length, [`FLAG_LAST`] on the last); a message of 0
//! bytes is one fragment with no bytes.
//!
//! Decoding checks every field; a datagram that fails is malformed, and the
//! communicator counts and drops it before it changes any state.

use crate::matching::{Tag, MAX_TAG};

/// The CTP command number the communicator's messages use (0..=32767, CTP
/// spec table 1): "MP" in ASCII.
pub const COMM_COMMAND: u16 = 0x4d50;

/// Header version.
pub const VERSION: u8 = 1;

/// Header length, bytes.
pub const HEADER_LEN: usize = 24;

/// Flag: the last fragment of its message.
pub const FLAG_LAST: u8 = 0x01;

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// Flags ([`FLAG_LAST`]).
    pub flags: u8,
    /// Context id of the communicator (and of its point-to-point or
    /// collective traffic).
    pub context: u16,
    /// Message tag.
    pub tag: Tag,
    /// Per-peer fragment sequence number.
    pub seq: u64,
    /// Length of the whole message, bytes.
    pub len: u64,
}

impl Header {
    /// True if this is the last fragment of its message.
    pub fn is_last(&self) -> bool {
        self.flags & FLAG_LAST != 0
    }

    /// Writes the header into `buf[..HEADER_LEN]`.
    ///
    /// Panics if `buf` is shorter than [`HEADER_LEN`].
    pub fn encode(&self, buf: &mut [u8]) {
        buf[0] = VERSION;
        buf[1] = self.flags;
        buf[2..4].copy_from_slice(&self.context.to_be_bytes());
        buf[4..8].copy_from_slice(&self.tag.to_be_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&self.len.to_be_bytes());
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0; HEADER_LEN];
        self.encode(&mut b);
        b
    }

    /// Decodes a datagram: the header and the fragment's bytes.
    ///
    /// Errors: [`WireError`] for a short datagram, another version, unknown
    /// flags, a tag above `MAX_TAG`, or a fragment longer than the message.
    pub fn decode(datagram: &[u8]) -> Result<(Header, &[u8]), WireError> {
        if datagram.len() < HEADER_LEN {
            return Err(WireError::Short(datagram.len()));
        }
        if datagram[0] != VERSION {
            return Err(WireError::Version(datagram[0]));
        }
        let flags = datagram[1];
        if flags & !FLAG_LAST != 0 {
            return Err(WireError::Flags(flags));
        }
        let u64_at = |o: usize| u64::from_be_bytes(datagram[o..o + 8].try_into().expect("8 bytes"));
        let h = Header {
            flags,
            context: u16::from_be_bytes([datagram[2], datagram[3]]),
            tag: u32::from_be_bytes(datagram[4..8].try_into().expect("4 bytes")),
            seq: u64_at(8),
            len: u64_at(16),
        };
        if h.tag > MAX_TAG {
            return Err(WireError::Tag(h.tag));
        }
        let payload = &datagram[HEADER_LEN..];
        if payload.len() as u64 > h.len {
            return Err(WireError::Fragment {
                fragment: payload.len(),
                len: h.len,
            });
        }
        Ok((h, payload))
    }
}

/// Why a datagram is not a communicator message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the header.
    #[error("{0} bytes: shorter than the {HEADER_LEN}-byte comm header")]
    Short(usize),
    /// Another header version.
    #[error("comm header version {0}, expected {VERSION}")]
    Version(u8),
    /// Unknown flag bits.
    #[error("comm header flags {0:#04x} have unknown bits")]
    Flags(u8),
    /// Tag above `MAX_TAG`.
    #[error("tag {0} above the largest tag {MAX_TAG}")]
    Tag(u32),
    /// The fragment is longer than the whole message.
    #[error("fragment of {fragment} bytes in a message of {len} bytes")]
    Fragment {
        /// Fragment length, bytes.
        fragment: usize,
        /// Announced message length, bytes.
        len: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Header {
        Header {
            flags: FLAG_LAST,
            context: 0x0102,
            tag: 0x0304_0506,
            seq: 0x0708_090a_0b0c_0d0e,
            len: 5,
        }
    }

    #[test]
    fn layout_is_big_endian_as_documented() {
        let b = header().to_bytes();
        assert_eq!(
            b,
            [1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0, 0, 0, 0, 0, 0, 0, 5]
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        let mut d = header().to_bytes().to_vec();
        d.extend_from_slice(b"hello");
        assert_eq!(Header::decode(&d).unwrap(), (header(), &b"hello"[..]));
        assert_eq!(Header::decode(&d[..23]), Err(WireError::Short(23)));
        let mut v = d.clone();
        v[0] = 2;
        assert_eq!(Header::decode(&v), Err(WireError::Version(2)));
        let mut f = d.clone();
        f[1] = 0x81;
        assert_eq!(Header::decode(&f), Err(WireError::Flags(0x81)));
        let mut t = d.clone();
        t[4] = 0x80;
        assert!(matches!(Header::decode(&t), Err(WireError::Tag(_))));
        let mut long = d.clone();
        long.push(0);
        assert_eq!(
            Header::decode(&long),
            Err(WireError::Fragment {
                fragment: 6,
                len: 5
            })
        );
    }

    proptest! {
        #[test]
        fn roundtrip(flags in 0u8..2, context: u16, tag in 0..=MAX_TAG, seq: u64, len in 0u64..64, extra in 0usize..64) {
            let h = Header { flags, context, tag, seq, len };
            let frag = (len as usize).min(extra);
            let mut d = h.to_bytes().to_vec();
            d.extend(std::iter::repeat_n(0xab, frag));
            let (g, p) = Header::decode(&d).unwrap();
            prop_assert_eq!(g, h);
            prop_assert_eq!(p.len(), frag);
        }

        #[test]
        fn decode_never_panics(d in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Header::decode(&d);
        }
    }
}
