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
//! Version 2 carries a 64-bit tag and 8 bytes of remote CQ data, so that
//! one header serves MPI's communicator (a 32-bit tag in the low bits; the
//! context id keeps communicators and collectives apart) and libfabric's
//! tagged messages (`fi_tagged(3)`: 64-bit tags; `fi_tsenddata`: up to 8
//! bytes of CQ data delivered with the completion).
//!
//! Layout, 36 bytes, big-endian (network order):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version, [`VERSION`] (2) |
//! | 1 | 1 | flags: bit 0 [`FLAG_LAST`] (last fragment of the message), bit 1 [`FLAG_DATA`] (CQ data present), bit 2 [`FLAG_RNDV`] (rendezvous: the bytes are pulled); the others must be 0 |
//! | 2 | 2 | context id |
//! | 4 | 8 | tag |
//! | 12 | 8 | sequence number of this fragment among all sent to the peer, from 0 |
//! | 20 | 8 | length of the whole message, bytes |
//! | 28 | 8 | remote CQ data (0 without [`FLAG_DATA`]) |
//!
//! The fragment's bytes follow. A message longer than the sender's fragment
//! size is sent as consecutive fragments (consecutive sequence numbers, the
//! same context, tag, CQ data and length, [`FLAG_LAST`] on the last); a
//! message of 0 bytes is one fragment with no bytes. Version 1 (24 bytes,
//! a 32-bit tag, no CQ data) is refused as another version.
//!
//! Decoding checks every field; a datagram that fails is malformed, and the
//! communicator counts and drops it before it changes any state. Which tags
//! a context admits (MPI's 0..=`MAX_TAG`) is the receiver's check.

/// The CTP command number the communicator's messages use (0..=32767, CTP
/// spec table 1): "MP" in ASCII.
pub const COMM_COMMAND: u16 = 0x4d50;

/// Header version.
pub const VERSION: u8 = 2;

/// Header length, bytes.
pub const HEADER_LEN: usize = 36;

/// Flag: the last fragment of its message.
pub const FLAG_LAST: u8 = 0x01;

/// Flag: the header carries remote CQ data.
pub const FLAG_DATA: u8 = 0x02;

/// Flag: rendezvous: the message's bytes are pulled from the sender (see
/// the module documentation); set with [`FLAG_LAST`] on an empty fragment.
pub const FLAG_RNDV: u8 = 0x04;

/// Bit of the context id marking collective traffic.
pub(crate) const COLLECTIVE_CONTEXT: u16 = 0x8000;

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// Flags ([`FLAG_LAST`], [`FLAG_RNDV`]; [`FLAG_DATA`] is
    /// `cq_data.is_some()`).
    pub flags: u8,
    /// Context id of the communicator (and of its point-to-point or
    /// collective traffic).
    pub context: u16,
    /// Message tag.
    pub tag: u64,
    /// Per-peer fragment sequence number.
    pub seq: u64,
    /// Length of the whole message, bytes.
    pub len: u64,
    /// Remote CQ data, if sent.
    pub cq_data: Option<u64>,
}

impl Header {
    /// True if this is the last fragment of its message.
    pub fn is_last(&self) -> bool {
        self.flags & FLAG_LAST != 0
    }

    /// True for a rendezvous announcement ([`FLAG_RNDV`]).
    pub fn is_rndv(&self) -> bool {
        self.flags & FLAG_RNDV != 0
    }

    /// Writes the header into `buf[..HEADER_LEN]`.
    ///
    /// Panics if `buf` is shorter than [`HEADER_LEN`].
    pub fn encode(&self, buf: &mut [u8]) {
        let data_flag = if self.cq_data.is_some() { FLAG_DATA } else { 0 };
        buf[0] = VERSION;
        buf[1] = (self.flags & (FLAG_LAST | FLAG_RNDV)) | data_flag;
        buf[2..4].copy_from_slice(&self.context.to_be_bytes());
        buf[4..12].copy_from_slice(&self.tag.to_be_bytes());
        buf[12..20].copy_from_slice(&self.seq.to_be_bytes());
        buf[20..28].copy_from_slice(&self.len.to_be_bytes());
        buf[28..36].copy_from_slice(&self.cq_data.unwrap_or(0).to_be_bytes());
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
    /// flags, CQ data without [`FLAG_DATA`], or a fragment longer than the
    /// message.
    pub fn decode(datagram: &[u8]) -> Result<(Header, &[u8]), WireError> {
        if datagram.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                have: datagram.len(),
            });
        }
        if datagram[0] != VERSION {
            return Err(WireError::Version {
                protocol: "comm header",
                got: datagram[0],
                expected: VERSION,
            });
        }
        let flags = datagram[1];
        if flags & !(FLAG_LAST | FLAG_DATA | FLAG_RNDV) != 0 {
            return Err(WireError::Unknown {
                field: "comm header flags",
                value: flags.into(),
            });
        }
        let u64_at = |o: usize| u64::from_be_bytes(datagram[o..o + 8].try_into().expect("8 bytes"));
        let data = u64_at(28);
        let cq_data = if flags & FLAG_DATA != 0 {
            Some(data)
        } else if data != 0 {
            return Err(WireError::Inconsistent(
                "comm header carries CQ data bytes without its flag",
            ));
        } else {
            None
        };
        let h = Header {
            flags: flags & (FLAG_LAST | FLAG_RNDV),
            context: u16::from_be_bytes([datagram[2], datagram[3]]),
            tag: u64_at(4),
            seq: u64_at(12),
            len: u64_at(20),
            cq_data,
        };
        let payload = &datagram[HEADER_LEN..];
        if h.is_rndv() && (!h.is_last() || !payload.is_empty()) {
            return Err(WireError::Inconsistent(
                "rendezvous fragment that is not one empty last fragment",
            ));
        }
        if payload.len() as u64 > h.len {
            // The fragment is longer than the whole message.
            return Err(WireError::Oversized {
                len: payload.len(),
                max: usize::try_from(h.len).unwrap_or(usize::MAX),
            });
        }
        Ok((h, payload))
    }
}

/// Why a datagram is not a communicator message: the workspace's one wire
/// error type.
pub use netcore::frame::WireError;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Header {
        Header {
            flags: FLAG_LAST,
            context: 0x0102,
            tag: 0x0304_0506_0708_090a,
            seq: 0x0b0c_0d0e_0f10_1112,
            len: 5,
            cq_data: Some(0x1314_1516_1718_191a),
        }
    }

    #[test]
    fn layout_is_big_endian_as_documented() {
        let b = header().to_bytes();
        let mut want = vec![2, 3, 1, 2];
        want.extend(3..=18u8);
        want.extend([0, 0, 0, 0, 0, 0, 0, 5]);
        want.extend(0x13..=0x1au8);
        assert_eq!(b.to_vec(), want);
        let plain = Header {
            cq_data: None,
            ..header()
        };
        assert_eq!(plain.to_bytes()[1], FLAG_LAST);
        assert_eq!(plain.to_bytes()[28..], [0; 8]);
    }

    #[test]
    fn malformed_headers_are_refused() {
        let mut d = header().to_bytes().to_vec();
        d.extend_from_slice(b"hello");
        assert_eq!(Header::decode(&d).unwrap(), (header(), &b"hello"[..]));
        assert_eq!(
            Header::decode(&d[..HEADER_LEN - 1]),
            Err(WireError::Truncated {
                need: HEADER_LEN,
                have: HEADER_LEN - 1
            })
        );
        let mut v = d.clone();
        v[0] = 1;
        assert_eq!(
            Header::decode(&v),
            Err(WireError::Version {
                protocol: "comm header",
                got: 1,
                expected: VERSION
            })
        );
        let mut f = d.clone();
        f[1] = 0x89;
        assert_eq!(
            Header::decode(&f),
            Err(WireError::Unknown {
                field: "comm header flags",
                value: 0x89
            })
        );
        let mut n = d.clone();
        n[1] = FLAG_LAST;
        assert!(matches!(
            Header::decode(&n),
            Err(WireError::Inconsistent(_))
        ));
        let mut long = d.clone();
        long.push(0);
        assert_eq!(
            Header::decode(&long),
            Err(WireError::Oversized { len: 6, max: 5 })
        );
    }

    #[test]
    fn a_rendezvous_is_one_empty_last_fragment() {
        let h = Header {
            flags: FLAG_LAST | FLAG_RNDV,
            len: 1 << 30,
            ..header()
        };
        let (d, p) = Header::decode(&h.to_bytes())
            .map(|(d, p)| (d, p.len()))
            .unwrap();
        assert!(d.is_rndv() && d.is_last());
        assert_eq!((d.len, p), (1 << 30, 0));
        let mut with_bytes = h.to_bytes().to_vec();
        with_bytes.push(1);
        assert!(Header::decode(&with_bytes).is_err(), "bytes after it");
        let not_last = Header {
            flags: FLAG_RNDV,
            ..h
        };
        assert!(Header::decode(&not_last.to_bytes()).is_err(), "not last");
    }

    proptest! {
        #[test]
        fn roundtrip(last: bool, context: u16, tag: u64, seq: u64, len in 0u64..64, extra in 0usize..64, cq_data: Option<u64>) {
            let h = Header { flags: if last { FLAG_LAST } else { 0 }, context, tag, seq, len, cq_data };
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
