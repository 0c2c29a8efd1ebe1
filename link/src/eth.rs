//! The Ethernet II header, MAC addresses, and whole frames of any protocol
//! carried directly in Ethernet.
//!
//! smoltcp style: a checked view over a byte slice
//! ([`EthernetFrame::new_checked`]) with getters and setters over the named
//! byte ranges of [`field`], and a plain [`EthernetRepr`] whose `parse`
//! reads and whose `emit` writes through the same view. Every length is
//! checked before a field is read; malformed input is a [`WireError`]
//! (`netcore::frame::WireError`, shared by every codec), never a panic.
//!
//! [`Frame`] over a [`HeaderRepr`] parses and emits "Ethernet header +
//! protocol header + payload" once for every protocol carried directly in
//! Ethernet (`edp::wire::EdpFrame`, `esp::wire::EspFrame`).

use std::fmt;
use std::str::FromStr;

/// Length of the Ethernet II header in bytes (dst MAC, src MAC, ethertype).
pub const ETH_HEADER_LEN: usize = 14;
/// IEEE Std 802 Local Experimental EtherType 1 (0x88B5): EDP's default.
pub const ETHERTYPE_EXPERIMENTAL_1: u16 = 0x88B5;
/// IEEE Std 802 Local Experimental EtherType 2 (0x88B6): ESP's default.
pub const ETHERTYPE_EXPERIMENTAL_2: u16 = 0x88B6;
/// Minimum Ethernet frame length without FCS, in bytes; shorter frames are padded.
pub const ETH_MIN_FRAME_LEN: usize = 60;

pub use netcore::frame::WireError;
use netcore::frame::{check_len, get_u16, set_u16};

/// Byte ranges of the Ethernet II header.
pub mod field {
    use netcore::frame::Field;
    /// Destination MAC.
    pub const ETH_DST: Field = 0..6;
    /// Source MAC.
    pub const ETH_SRC: Field = 6..12;
    /// Ethertype.
    pub const ETH_TYPE: Field = 12..14;
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

    /// The frame whose Ethernet header a receiver parsed already (the
    /// runtime parses it once per frame): parses `R` from `packet`, the
    /// Ethernet payload (padding included).
    ///
    /// Errors: those of `R`'s parser ([`WireError::Truncated`],
    /// [`WireError::Inconsistent`], [`WireError::Checksum`]).
    pub fn with_eth(eth: EthernetRepr, packet: &'a [u8]) -> Result<Self, WireError> {
        let (header, payload) = R::parse(packet)?;
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

/// Frames for this crate's tests: an Ethernet header and a 6-byte header of
/// two ports and a length (the layout of EDP's), without the EDP crate.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// Ethertype the tests use (EDP's default).
    pub const ETHERTYPE_EDP: u16 = ETHERTYPE_EXPERIMENTAL_1;
    /// A second ethertype (ESP's default).
    pub const ETHERTYPE_ESP: u16 = ETHERTYPE_EXPERIMENTAL_2;

    /// Source port, destination port, payload length.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Ports(pub u16, pub u16, pub u16);

    impl HeaderRepr for Ports {
        fn parse(packet: &[u8]) -> Result<(Self, &[u8]), WireError> {
            check_len(packet, 6)?;
            let len = get_u16(packet, 4..6);
            check_len(packet, 6 + len as usize)?;
            Ok((
                Ports(get_u16(packet, 0..2), get_u16(packet, 2..4), len),
                &packet[6..6 + len as usize],
            ))
        }
        fn header_len(&self) -> usize {
            6
        }
        fn emit(&self, packet: &mut [u8], payload_len: u16) {
            set_u16(packet, 0..2, self.0);
            set_u16(packet, 2..4, self.1);
            set_u16(packet, 4..6, payload_len);
        }
    }

    /// A frame of `eth` carrying `payload` from port `src` to port `dst`.
    pub fn emit_edp_frame(
        buf: &mut [u8],
        eth: &EthernetRepr,
        src: u16,
        dst: u16,
        payload: &[u8],
    ) -> Result<usize, WireError> {
        emit_frame(buf, eth, &Ports(src, dst, 0), payload)
    }

    /// A parsed test frame.
    pub type EdpFrame<'a> = Frame<'a, Ports>;
}
