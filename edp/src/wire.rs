//! Wire codecs for the Ethernet II header and the EDP header.
//!
//! smoltcp style: a checked view over a byte slice (`EthernetFrame::new_checked`,
//! `EdpPacket::new_checked`) and a plain `Repr` with `parse` / `emit`.
//! Every length is checked before a field is read; malformed input is a
//! [`WireError`], never a panic.
//!
//! EDP header (thesis ch. 4.1; PROTOCOL.md), network byte order, 6 bytes:
//!
//! ```text
//!  0               2               4               6
//! +---------------+---------------+---------------+------------------
//! |  source port  |   dest port   | payload length|  payload ...
//! +---------------+---------------+---------------+------------------
//! ```
//!
//! The length field is needed because Ethernet pads frames shorter than 60
//! bytes: bytes beyond `payload length` are padding and are trimmed.

use std::fmt;
use std::str::FromStr;

/// Ethertype of EDP (IEEE 802 Local Experimental Ethertype 1).
pub const ETHERTYPE_EDP: u16 = 0x88B5;
/// Ethertype of ESP (IEEE 802 Local Experimental Ethertype 2).
pub const ETHERTYPE_ESP: u16 = 0x88B6;
/// Length of the Ethernet II header in bytes (dst MAC, src MAC, ethertype).
pub const ETH_HEADER_LEN: usize = 14;
/// Minimum Ethernet frame length without FCS, in bytes; shorter frames are padded.
pub const ETH_MIN_FRAME_LEN: usize = 60;
/// Length of the EDP header in bytes.
pub const EDP_HEADER_LEN: usize = 6;
/// Port 0 is reserved for control messages (thesis ch. 4.2.5).
pub const CONTROL_PORT: u16 = 0;

/// Why a frame or header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is shorter than the header or than the length field claims.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    /// The frame is longer than the largest frame the link can carry.
    #[error("oversized: {len} bytes exceeds the limit of {max}")]
    Oversized { len: usize, max: usize },
    /// The ethertype is not the one expected.
    #[error("unexpected ethertype {got:#06x}, expected {expected:#06x}")]
    Ethertype { got: u16, expected: u16 },
    /// A field holds a value that contradicts another field or the protocol.
    #[error("inconsistent header: {0}")]
    Inconsistent(&'static str),
}

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// True for multicast and broadcast addresses (I/G bit set).
    pub fn is_group(&self) -> bool {
        self.0[0] & 0x01 != 0
    }
    /// True for ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }
    /// The six octets.
    pub fn octets(&self) -> [u8; 6] {
        self.0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Error of [`MacAddr::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}: expected six hex octets like 02:00:00:00:00:01")]
pub struct ParseMacError(pub String);

impl FromStr for MacAddr {
    type Err = ParseMacError;
    /// Parses `aa:bb:cc:dd:ee:ff` (also with `-` separators).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseMacError(s.to_string());
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for o in out.iter_mut() {
            let p = parts.next().ok_or_else(err)?;
            if p.is_empty() || p.len() > 2 {
                return Err(err());
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// A checked read-only view of an Ethernet II frame (no FCS).
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buf` after checking it holds at least a full Ethernet header.
    ///
    /// Errors: [`WireError::Truncated`] if shorter than 14 bytes.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let have = buf.as_ref().len();
        if have < ETH_HEADER_LEN {
            return Err(WireError::Truncated {
                need: ETH_HEADER_LEN,
                have,
            });
        }
        Ok(Self { buf })
    }
    /// Destination MAC.
    pub fn dst(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[0..6]);
        MacAddr(m)
    }
    /// Source MAC.
    pub fn src(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[6..12]);
        MacAddr(m)
    }
    /// Ethertype (host order).
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), 12)
    }
    /// The bytes after the Ethernet header (may include padding).
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[ETH_HEADER_LEN..]
    }
}

/// The fields of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    pub dst: MacAddr,
    pub src: MacAddr,
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses the header of `frame`; returns it and the payload (padding included).
    pub fn parse(frame: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let f = EthernetFrame::new_checked(frame)?;
        Ok((
            Self {
                dst: f.dst(),
                src: f.src(),
                ethertype: f.ethertype(),
            },
            &frame[ETH_HEADER_LEN..],
        ))
    }
    /// Parses a whole received frame of one protocol: checks that it is at
    /// most `max_frame` bytes (link MTU + 14) and carries `ethertype`;
    /// returns the header and the payload (padding included). Every
    /// protocol's frame parser (EDP, ESP) starts here.
    ///
    /// Errors: [`WireError::Oversized`], [`WireError::Truncated`],
    /// [`WireError::Ethertype`].
    pub fn parse_for(
        frame: &[u8],
        ethertype: u16,
        max_frame: usize,
    ) -> Result<(Self, &[u8]), WireError> {
        if frame.len() > max_frame {
            return Err(WireError::Oversized {
                len: frame.len(),
                max: max_frame,
            });
        }
        let (eth, rest) = Self::parse(frame)?;
        if eth.ethertype != ethertype {
            return Err(WireError::Ethertype {
                got: eth.ethertype,
                expected: ethertype,
            });
        }
        Ok((eth, rest))
    }

    /// Writes the 14-byte header at the start of `buf`.
    ///
    /// Panics if `buf` is shorter than 14 bytes (a caller bug, not input).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        buf[12..14].copy_from_slice(&self.ethertype.to_be_bytes());
    }
}

/// A checked read-only view of an EDP packet (the Ethernet payload).
#[derive(Debug, Clone, Copy)]
pub struct EdpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EdpPacket<T> {
    /// Wraps `buf` after checking the header is complete and the length field
    /// fits in the buffer. Bytes beyond the length field are padding.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < EDP_HEADER_LEN {
            return Err(WireError::Truncated {
                need: EDP_HEADER_LEN,
                have: b.len(),
            });
        }
        let need = EDP_HEADER_LEN + be16(b, 4) as usize;
        if b.len() < need {
            return Err(WireError::Truncated {
                need,
                have: b.len(),
            });
        }
        Ok(Self { buf })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }
    /// Payload length in bytes.
    pub fn payload_len(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }
    /// The payload, padding trimmed.
    pub fn payload(&self) -> &[u8] {
        let n = self.payload_len() as usize;
        &self.buf.as_ref()[EDP_HEADER_LEN..EDP_HEADER_LEN + n]
    }
}

/// The fields of an EDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Payload length in bytes.
    pub payload_len: u16,
}

impl EdpRepr {
    /// Parses an EDP packet (an Ethernet payload); returns the header and the
    /// payload with Ethernet padding trimmed.
    ///
    /// Errors: [`WireError::Truncated`] if the header or the payload the
    /// length field announces is incomplete.
    pub fn parse(packet: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let p = EdpPacket::new_checked(packet)?;
        let repr = Self {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.payload_len(),
        };
        let n = repr.payload_len as usize;
        Ok((repr, &packet[EDP_HEADER_LEN..EDP_HEADER_LEN + n]))
    }
    /// Writes the 6-byte header at the start of `buf`. Panics if `buf` is
    /// shorter than 6 bytes (a caller bug).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        buf[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        buf[4..6].copy_from_slice(&self.payload_len.to_be_bytes());
    }
}

/// A parsed EDP frame: Ethernet header, EDP header and the trimmed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdpFrame<'a> {
    pub eth: EthernetRepr,
    pub edp: EdpRepr,
    pub payload: &'a [u8],
}

impl<'a> EdpFrame<'a> {
    /// Parses a whole Ethernet frame carrying EDP with ethertype `ethertype`.
    ///
    /// `max_frame` is the largest frame the link can carry (MTU + 14 bytes);
    /// longer input is [`WireError::Oversized`].
    pub fn parse(frame: &'a [u8], ethertype: u16, max_frame: usize) -> Result<Self, WireError> {
        let (eth, rest) = EthernetRepr::parse_for(frame, ethertype, max_frame)?;
        let (edp, payload) = EdpRepr::parse(rest)?;
        Ok(Self { eth, edp, payload })
    }
}

/// Builds a complete EDP frame into `buf` and returns its length in bytes.
///
/// The frame is not padded: the NIC pads short frames. Errors:
/// [`WireError::Oversized`] if the payload exceeds `u16::MAX` or does not fit
/// in `buf`.
pub fn emit_edp_frame(
    buf: &mut [u8],
    eth: &EthernetRepr,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Result<usize, WireError> {
    let total = ETH_HEADER_LEN + EDP_HEADER_LEN + payload.len();
    if payload.len() > u16::MAX as usize || total > buf.len() {
        return Err(WireError::Oversized {
            len: total,
            max: buf
                .len()
                .min(ETH_HEADER_LEN + EDP_HEADER_LEN + u16::MAX as usize),
        });
    }
    eth.emit(buf);
    EdpRepr {
        src_port,
        dst_port,
        payload_len: payload.len() as u16,
    }
    .emit(&mut buf[ETH_HEADER_LEN..]);
    buf[ETH_HEADER_LEN + EDP_HEADER_LEN..total].copy_from_slice(payload);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 2]);

    fn eth() -> EthernetRepr {
        EthernetRepr {
            dst: B,
            src: A,
            ethertype: ETHERTYPE_EDP,
        }
    }

    #[test]
    fn mac_parse_and_display() {
        let m: MacAddr = "02:00:0a:ff:00:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x0a, 0xff, 0, 1]);
        assert_eq!(m.to_string(), "02:00:0a:ff:00:01");
        assert!("02:00:0a:ff:00".parse::<MacAddr>().is_err());
        assert!("02:00:0a:ff:00:01:02".parse::<MacAddr>().is_err());
        assert!("zz:00:0a:ff:00:01".parse::<MacAddr>().is_err());
        assert!("002:0:0a:ff:00:01".parse::<MacAddr>().is_err());
        assert!(MacAddr::BROADCAST.is_group());
        assert!(MacAddr([0x01, 0, 0x5e, 0, 0, 1]).is_group());
        assert!(!A.is_group());
    }

    #[test]
    fn header_bytes_are_network_order() {
        let mut buf = [0u8; 64];
        let n = emit_edp_frame(&mut buf, &eth(), 0x1234, 0xabcd, b"hi").unwrap();
        assert_eq!(n, 22);
        assert_eq!(&buf[12..14], &[0x88, 0xb5]);
        assert_eq!(&buf[14..20], &[0x12, 0x34, 0xab, 0xcd, 0x00, 0x02]);
        assert_eq!(&buf[20..22], b"hi");
    }

    #[test]
    fn padding_is_trimmed() {
        let mut buf = [0u8; ETH_MIN_FRAME_LEN];
        emit_edp_frame(&mut buf, &eth(), 7, 9, b"abc").unwrap();
        let f = EdpFrame::parse(&buf, ETHERTYPE_EDP, 1514).unwrap();
        assert_eq!(f.payload, b"abc");
        assert_eq!(f.edp.src_port, 7);
        assert_eq!(f.edp.dst_port, 9);
    }

    #[test]
    fn malformed_frames_are_errors() {
        let mut buf = [0u8; 64];
        let n = emit_edp_frame(&mut buf, &eth(), 7, 9, b"abcdef").unwrap();
        // truncated Ethernet header
        assert!(matches!(
            EdpFrame::parse(&buf[..10], ETHERTYPE_EDP, 1514),
            Err(WireError::Truncated { .. })
        ));
        // truncated EDP header
        assert!(matches!(
            EdpFrame::parse(&buf[..17], ETHERTYPE_EDP, 1514),
            Err(WireError::Truncated { .. })
        ));
        // length field larger than the frame
        assert!(matches!(
            EdpFrame::parse(&buf[..n - 1], ETHERTYPE_EDP, 1514),
            Err(WireError::Truncated { need: 12, have: 11 })
        ));
        // wrong ethertype
        assert!(matches!(
            EdpFrame::parse(&buf[..n], ETHERTYPE_ESP, 1514),
            Err(WireError::Ethertype { .. })
        ));
        // oversized
        assert!(matches!(
            EdpFrame::parse(&buf[..n], ETHERTYPE_EDP, 20),
            Err(WireError::Oversized { .. })
        ));
        // payload too large for buffer
        assert!(emit_edp_frame(&mut buf, &eth(), 1, 2, &[0u8; 100]).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(src in any::<u16>(), dst in any::<u16>(),
                      payload in proptest::collection::vec(any::<u8>(), 0..2000),
                      pad in 0usize..64) {
            let mut buf = vec![0u8; ETH_HEADER_LEN + EDP_HEADER_LEN + payload.len() + pad];
            let n = emit_edp_frame(&mut buf, &eth(), src, dst, &payload).unwrap();
            prop_assert_eq!(n + pad, buf.len());
            let f = EdpFrame::parse(&buf, ETHERTYPE_EDP, 9014 + 64).unwrap();
            prop_assert_eq!(f.eth, eth());
            prop_assert_eq!(f.edp.src_port, src);
            prop_assert_eq!(f.edp.dst_port, dst);
            prop_assert_eq!(f.payload, &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(f) = EdpFrame::parse(&bytes, ETHERTYPE_EDP, 1514) {
                // Whatever parses must be self-consistent.
                prop_assert_eq!(f.payload.len(), f.edp.payload_len as usize);
                prop_assert!(ETH_HEADER_LEN + EDP_HEADER_LEN + f.payload.len() <= bytes.len());
            }
        }
    }
}
