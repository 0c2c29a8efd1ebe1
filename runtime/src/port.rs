//! The port header: EDP's 6-byte header (thesis ch. 4.1; PROTOCOL.md),
//! which ESP's header starts with. The runtime demultiplexes every frame
//! on it (ethertype, destination port, source MAC and port), parses it
//! once, and hands it down with the frame (`crate::socket::Cx`).
//!
//! Network byte order, 6 bytes:
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

use link::eth::{HeaderRepr, WireError};
use netcore::frame::{check_len, get_u16, set_u16};

/// Length of the port header in bytes.
pub const PORT_HEADER_LEN: usize = 6;

/// Byte ranges of the port header.
pub mod field {
    use netcore::frame::Field;
    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Payload length in bytes.
    pub const LENGTH: Field = 4..6;
}

/// A checked view of the port header and its payload (an Ethernet payload).
#[derive(Debug, Clone, Copy)]
pub struct PortPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> PortPacket<T> {
    /// Wraps `buf` after checking the header is complete and the length field
    /// fits in the buffer. Bytes beyond the length field are padding.
    ///
    /// Errors: [`WireError::Truncated`] if the header or the payload the
    /// length field announces is incomplete.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        check_len(b, PORT_HEADER_LEN)?;
        check_len(b, PORT_HEADER_LEN + get_u16(b, field::LENGTH) as usize)?;
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
        &self.buf.as_ref()[PORT_HEADER_LEN..PORT_HEADER_LEN + n]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PortPacket<T> {
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
        &mut self.buf.as_mut()[PORT_HEADER_LEN..]
    }
}

/// The fields of the port header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortHeader {
    /// Sender's port.
    pub src_port: u16,
    /// Receiver's port.
    pub dst_port: u16,
    /// Payload length in bytes.
    pub payload_len: u16,
}

impl PortHeader {
    /// Parses the header at the start of an Ethernet payload; returns the header and the
    /// payload with Ethernet padding trimmed.
    ///
    /// Errors: [`WireError::Truncated`] if the header or the payload the
    /// length field announces is incomplete.
    pub fn parse(packet: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let p = PortPacket::new_checked(packet)?;
        let repr = Self {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.payload_len(),
        };
        let n = repr.payload_len as usize;
        Ok((repr, &packet[PORT_HEADER_LEN..PORT_HEADER_LEN + n]))
    }
    /// Writes the 6-byte header at the start of `buf`. Panics if `buf` is
    /// shorter than 6 bytes (a caller bug).
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = PortPacket::new_unchecked(&mut buf[..PORT_HEADER_LEN]);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_payload_len(self.payload_len);
    }
}

impl HeaderRepr for PortHeader {
    fn parse(packet: &[u8]) -> Result<(Self, &[u8]), WireError> {
        PortHeader::parse(packet)
    }
    fn header_len(&self) -> usize {
        PORT_HEADER_LEN
    }
    fn emit(&self, packet: &mut [u8], payload_len: u16) {
        PortHeader {
            payload_len,
            ..*self
        }
        .emit(packet);
    }
}
