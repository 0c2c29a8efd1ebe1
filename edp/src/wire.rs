//! Wire codecs for the Ethernet II header and the EDP header.
//!
//! smoltcp style: a checked view over a byte slice (`EthernetFrame::new_checked`,
//! `EdpPacket::new_checked`) with getters and setters over the named byte
//! ranges of a `field` module, and a plain `Repr` whose `parse` reads and
//! whose `emit` writes through the same view. Every length is checked
//! before a field is read; malformed input is a [`WireError`] (shared with
//! ESP: `netcore::frame::WireError`), never a panic.
//!
//! Whole frames of any protocol carried directly in Ethernet (EDP, ESP):
//! [`Frame`] over a [`HeaderRepr`] parses and emits "Ethernet header +
//! protocol header + payload" once for all of them ([`EdpFrame`],
//! `esp::wire::EspFrame`).
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

pub use netcore::frame::WireError;
use netcore::frame::{check_len, get_u16, set_u16};

/// Byte ranges of the Ethernet II and EDP headers.
pub mod field {
    use netcore::frame::Field;
    /// Ethernet: destination MAC.
    pub const ETH_DST: Field = 0..6;
    /// Ethernet: source MAC.
    pub const ETH_SRC: Field = 6..12;
    /// Ethernet: ethertype.
    pub const ETH_TYPE: Field = 12..14;
    /// EDP: source port.
    pub const SRC_PORT: Field = 0..2;
    /// EDP: destination port.
    pub const DST_PORT: Field = 2..4;
    /// EDP: payload length in bytes.
    pub const LENGTH: Field = 4..6;
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

fn mac_at(b: &[u8], f: netcore::frame::Field) -> MacAddr {
    let mut m = [0; 6];
    m.copy_from_slice(&b[f]);
    MacAddr(m)
}

/// A checked view of an Ethernet II frame (no FCS).
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buf` after checking it holds at least a full Ethernet header.
    ///
    /// Errors: [`WireError::Truncated`] if shorter than 14 bytes.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        check_len(buf.as_ref(), ETH_HEADER_LEN)?;
        Ok(Self { buf })
    }
    /// Wraps `buf` without a check: accessors panic if it is shorter than
    /// 14 bytes (for emitting into a buffer the caller sized).
    pub fn new_unchecked(buf: T) -> Self {
        Self { buf }
    }
    /// Destination MAC.
    pub fn dst(&self) -> MacAddr {
        mac_at(self.buf.as_ref(), field::ETH_DST)
    }
    /// Source MAC.
    pub fn src(&self) -> MacAddr {
        mac_at(self.buf.as_ref(), field::ETH_SRC)
    }
    /// Ethertype (host order).
    pub fn ethertype(&self) -> u16 {
        get_u16(self.buf.as_ref(), field::ETH_TYPE)
    }
    /// The bytes after the Ethernet header (may include padding).
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[ETH_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst(&mut self, mac: MacAddr) {
        self.buf.as_mut()[field::ETH_DST].copy_from_slice(&mac.0);
    }
    /// Sets the source MAC.
    pub fn set_src(&mut self, mac: MacAddr) {
        self.buf.as_mut()[field::ETH_SRC].copy_from_slice(&mac.0);
    }
    /// Sets the ethertype.
    pub fn set_ethertype(&mut self, ethertype: u16) {
        set_u16(self.buf.as_mut(), field::ETH_TYPE, ethertype);
    }
    /// The bytes after the Ethernet header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[ETH_HEADER_LEN..]
    }
}

/// The fields of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst: MacAddr,
    /// Source MAC address.
    pub src: MacAddr,
    /// EtherType (IEEE 802.3 clause 3.2.6), host byte order.
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
        let mut f = EthernetFrame::new_unchecked(&mut buf[..ETH_HEADER_LEN]);
        f.set_dst(self.dst);
        f.set_src(self.src);
        f.set_ethertype(self.ethertype);
    }
}

/// A checked view of an EDP packet (the Ethernet payload).
#[derive(Debug, Clone, Copy)]
pub struct EdpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EdpPacket<T> {
    /// Wraps `buf` after checking the header is complete and the length field
    /// fits in the buffer. Bytes beyond the length field are padding.
    ///
    /// Errors: [`WireError::Truncated`] if the header or the payload the
    /// length field announces is incomplete.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        check_len(b, EDP_HEADER_LEN)?;
        check_len(b, EDP_HEADER_LEN + get_u16(b, field::LENGTH) as usize)?;
        Ok(Self { buf })
    }
    /// Wraps `buf` without a check: accessors panic if it is too short
    /// (for emitting into a buffer the caller sized).
    pub fn new_unchecked(buf: T) -> Self {
        Self { buf }
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        get_u16(self.buf.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buf.as_ref(), field::DST_PORT)
    }
    /// Payload length in bytes.
    pub fn payload_len(&self) -> u16 {
        get_u16(self.buf.as_ref(), field::LENGTH)
    }
    /// The payload, padding trimmed.
    pub fn payload(&self) -> &[u8] {
        let n = self.payload_len() as usize;
        &self.buf.as_ref()[EDP_HEADER_LEN..EDP_HEADER_LEN + n]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EdpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        set_u16(self.buf.as_mut(), field::SRC_PORT, port);
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        set_u16(self.buf.as_mut(), field::DST_PORT, port);
    }
    /// Sets the payload length in bytes.
    pub fn set_payload_len(&mut self, len: u16) {
        set_u16(self.buf.as_mut(), field::LENGTH, len);
    }
    /// The bytes after the header (payload and any padding), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[EDP_HEADER_LEN..]
    }
}

/// The fields of an EDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdpRepr {
    /// Sender's EDP port.
    pub src_port: u16,
    /// Receiver's EDP port.
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
        let mut p = EdpPacket::new_unchecked(&mut buf[..EDP_HEADER_LEN]);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_payload_len(self.payload_len);
    }
}

impl HeaderRepr for EdpRepr {
    fn parse(packet: &[u8]) -> Result<(Self, &[u8]), WireError> {
        EdpRepr::parse(packet)
    }
    fn header_len(&self) -> usize {
        EDP_HEADER_LEN
    }
    fn emit(&self, packet: &mut [u8], payload_len: u16) {
        EdpRepr {
            payload_len,
            ..*self
        }
        .emit(packet);
    }
}

/// A protocol header carried directly in Ethernet frames (EDP, ESP), as
/// [`Frame`] needs it.
pub trait HeaderRepr: Sized {
    /// Parses the header at the start of `packet` (the Ethernet payload,
    /// padding included); returns it and the payload with padding trimmed.
    /// Verifies a checksum, if the protocol has one.
    fn parse(packet: &[u8]) -> Result<(Self, &[u8]), WireError>;
    /// Length of the header this repr emits, in bytes.
    fn header_len(&self) -> usize;
    /// Writes the header for a payload of `payload_len` bytes at the start
    /// of `packet`, which holds exactly header and payload, the payload
    /// already in place (so a checksum can cover it). Panics if `packet` is
    /// shorter than the header (a caller bug).
    fn emit(&self, packet: &mut [u8], payload_len: u16);
}

/// A parsed frame: Ethernet header, protocol header `R` and the payload with
/// Ethernet padding trimmed (one implementation for EDP and ESP, code
/// review pair D1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a, R> {
    /// The Ethernet II header.
    pub eth: EthernetRepr,
    /// The protocol header.
    pub header: R,
    /// The payload, padding trimmed.
    pub payload: &'a [u8],
}

/// A parsed EDP frame.
pub type EdpFrame<'a> = Frame<'a, EdpRepr>;

impl<'a, R: HeaderRepr> Frame<'a, R> {
    /// Parses a whole Ethernet frame carrying protocol `R` with ethertype
    /// `ethertype`.
    ///
    /// `max_frame` is the largest frame the link can carry (MTU + 14
    /// bytes). Errors: [`WireError::Oversized`] for longer input,
    /// [`WireError::Ethertype`], and those of `R`'s parser
    /// ([`WireError::Truncated`], [`WireError::Inconsistent`],
    /// [`WireError::Checksum`]).
    pub fn parse(frame: &'a [u8], ethertype: u16, max_frame: usize) -> Result<Self, WireError> {
        let (eth, rest) = EthernetRepr::parse_for(frame, ethertype, max_frame)?;
        let (header, payload) = R::parse(rest)?;
        Ok(Self {
            eth,
            header,
            payload,
        })
    }

    /// Builds this frame into `buf` (see [`emit_frame`]); returns its length
    /// in bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        emit_frame(buf, &self.eth, &self.header, self.payload)
    }
}

/// Builds a complete frame (Ethernet header, `header`, `payload`) into
/// `buf`; returns its length in bytes. The header's payload length field is
/// set from `payload` (and its checksum computed, if it has one). The frame
/// is not padded: the NIC pads short frames.
///
/// Errors: [`WireError::Oversized`] if the payload exceeds 65535 bytes or
/// the frame does not fit in `buf`.
pub fn emit_frame<R: HeaderRepr>(
    buf: &mut [u8],
    eth: &EthernetRepr,
    header: &R,
    payload: &[u8],
) -> Result<usize, WireError> {
    let hlen = header.header_len();
    let total = ETH_HEADER_LEN + hlen + payload.len();
    if payload.len() > u16::MAX as usize || total > buf.len() {
        return Err(WireError::Oversized {
            len: total,
            max: buf.len().min(ETH_HEADER_LEN + hlen + u16::MAX as usize),
        });
    }
    eth.emit(buf);
    let packet = &mut buf[ETH_HEADER_LEN..total];
    packet[hlen..].copy_from_slice(payload);
    header.emit(packet, payload.len() as u16);
    Ok(total)
}

/// Builds a complete EDP frame into `buf` and returns its length in bytes:
/// [`emit_frame`] with an [`EdpRepr`] of the two ports.
///
/// Errors: [`WireError::Oversized`] if the payload exceeds `u16::MAX` or does
/// not fit in `buf`.
pub fn emit_edp_frame(
    buf: &mut [u8],
    eth: &EthernetRepr,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Result<usize, WireError> {
    let edp = EdpRepr {
        src_port,
        dst_port,
        payload_len: 0,
    };
    emit_frame(buf, eth, &edp, payload)
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
    fn views_write_through_the_ranges_they_read() {
        let mut buf = [0u8; 32];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        f.set_dst(B);
        f.set_src(A);
        f.set_ethertype(ETHERTYPE_EDP);
        let mut p = EdpPacket::new_unchecked(f.payload_mut());
        p.set_src_port(7);
        p.set_dst_port(9);
        p.set_payload_len(3);
        p.payload_mut()[..3].copy_from_slice(b"xyz");
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!((f.dst(), f.src(), f.ethertype()), (B, A, ETHERTYPE_EDP));
        let p = EdpPacket::new_checked(f.payload()).unwrap();
        assert_eq!(
            (p.src_port(), p.dst_port(), p.payload()),
            (7, 9, &b"xyz"[..])
        );
        // Repr::emit goes through the same setters.
        let mut again = [0u8; 32];
        let n = emit_frame(
            &mut again,
            &eth(),
            &EdpRepr {
                src_port: 7,
                dst_port: 9,
                payload_len: 0,
            },
            b"xyz",
        )
        .unwrap();
        assert_eq!(&again[..n], &buf[..n]);
        let parsed = EdpFrame::parse(&again[..n], ETHERTYPE_EDP, 1514).unwrap();
        assert_eq!(parsed.emit(&mut [0u8; 32]), Ok(n));
    }

    #[test]
    fn padding_is_trimmed() {
        let mut buf = [0u8; ETH_MIN_FRAME_LEN];
        emit_edp_frame(&mut buf, &eth(), 7, 9, b"abc").unwrap();
        let f = EdpFrame::parse(&buf, ETHERTYPE_EDP, 1514).unwrap();
        assert_eq!(f.payload, b"abc");
        assert_eq!(f.header.src_port, 7);
        assert_eq!(f.header.dst_port, 9);
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
            prop_assert_eq!(f.header.src_port, src);
            prop_assert_eq!(f.header.dst_port, dst);
            prop_assert_eq!(f.payload, &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(f) = EdpFrame::parse(&bytes, ETHERTYPE_EDP, 1514) {
                // Whatever parses must be self-consistent.
                prop_assert_eq!(f.payload.len(), f.header.payload_len as usize);
                prop_assert!(ETH_HEADER_LEN + EDP_HEADER_LEN + f.payload.len() <= bytes.len());
            }
        }
    }
}
