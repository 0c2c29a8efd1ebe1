//! Wire codec of the ESP header (PROTOCOL section: `esp/PROTOCOL.md`).
//!
//! smoltcp style: a checked view over a byte slice ([`EspPacket::new_checked`])
//! with getters and setters over the byte ranges of [`field`], a separate
//! checksum verification ([`EspPacket::verify_checksum`]), and a plain
//! [`EspRepr`] whose `parse` reads and whose `emit` writes through the
//! view. Every length is checked before a field is read; malformed input is
//! a [`WireError`] (shared with EDP), never a panic. The Ethernet header,
//! [`MacAddr`] and the frame codec ([`EspFrame`] = [`link::eth::Frame`] over
//! [`EspRepr`]) come from [`edp::wire`].
//!
//! ESP header, network byte order, 20 bytes plus options (thesis ch. 5.1
//! extended with an acknowledgement number, a receive window, a checksum and
//! option room):
//!
//! ```text
//!  0       2       4       6   7   8               12              16      18      20
//! +-------+-------+-------+---+---+---------------+---------------+-------+-------+---------+-----
//! | sport | dport | plen  |flg|hln|   sequence    |  acknowledge  |window | csum  | options | payload
//! +-------+-------+-------+---+---+---------------+---------------+-------+-------+---------+-----
//! ```
//!
//! The first 6 bytes are laid out as the EDP header (ports, payload length in
//! bytes). `hln` is the header length in bytes including options (20..=255).
//! Sequence and acknowledgement numbers count segments, not bytes. `csum` is
//! the Internet checksum (RFC 1071) over header and payload, 0 = not computed
//! (as UDP): it catches what the Ethernet FCS cannot (a link without FCS such
//! as veth, or a fault injector's bit flips).

use std::fmt;

use link::eth::{emit_frame, EthernetRepr, Frame, HeaderRepr};
pub use link::MacAddr;
use link::{fold, ones_complement_sum};
pub use netcore::frame::WireError;
use netcore::frame::{check_len, get_u16, get_u32, set_u16, set_u32};
pub use runtime::ETHERTYPE_ESP;

/// Length of the fixed ESP header in bytes (without options).
pub const ESP_HEADER_LEN: usize = 20;
/// Largest header length the 8-bit header-length field can express, in bytes.
pub const ESP_MAX_HEADER_LEN: usize = 255;
/// Most SACK blocks carried in one segment (as TCP, RFC 2018 sec. 3).
pub const MAX_SACK_BLOCKS: usize = 4;
/// Option kind: end of option list (the rest of the option room is padding).
pub const OPT_END: u8 = 0;
/// Option kind: no-operation (one byte).
pub const OPT_NOP: u8 = 1;
/// Option kind: selective acknowledgement, `2 + 8 n` bytes, n = 1..=4 blocks.
pub const OPT_SACK: u8 = 5;

mod nego;
pub use nego::{Nego, OPT_NEGO};

/// Sequence numbers with wraparound (RFC 1982), shared with the other
/// protocols of the workspace.
pub use netcore::seq::Seq;

bitflags::bitflags! {
    /// ESP header flags (byte 6). The bit values are TCP's (RFC 9293 3.1).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Flags: u8 {
        /// No more data from the sender (consumes one sequence number).
        const FIN = 0x01;
        /// Synchronize sequence numbers (consumes one sequence number).
        const SYN = 0x02;
        /// Reset the connection.
        const RST = 0x04;
        /// The acknowledgement number is valid.
        const ACK = 0x10;
    }
}

impl Flags {
    /// Shorthand for `contains(SYN)`.
    pub const fn syn(self) -> bool {
        self.contains(Flags::SYN)
    }
    /// Shorthand for `contains(ACK)`.
    pub const fn ack(self) -> bool {
        self.contains(Flags::ACK)
    }
    /// Shorthand for `contains(FIN)`.
    pub const fn fin(self) -> bool {
        self.contains(Flags::FIN)
    }
    /// Shorthand for `contains(RST)`.
    pub const fn rst(self) -> bool {
        self.contains(Flags::RST)
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        netcore::frame::fmt_flags(
            f,
            [
                (self.contains(Flags::SYN), "SYN"),
                (self.contains(Flags::FIN), "FIN"),
                (self.contains(Flags::RST), "RST"),
                (self.contains(Flags::ACK), "ACK"),
            ],
        )
    }
}

/// Up to [`MAX_SACK_BLOCKS`] selectively acknowledged ranges `[start, end)` of
/// segment numbers above the cumulative acknowledgement (RFC 2018 semantics,
/// in segments).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct SackBlocks {
    len: u8,
    blocks: [(Seq, Seq); MAX_SACK_BLOCKS],
}

impl SackBlocks {
    /// No block.
    pub const fn new() -> Self {
        Self {
            len: 0,
            blocks: [(Seq(0), Seq(0)); MAX_SACK_BLOCKS],
        }
    }
    /// Appends `[start, end)`; returns false (and keeps the list) when full.
    pub fn push(&mut self, start: Seq, end: Seq) -> bool {
        if (self.len as usize) < MAX_SACK_BLOCKS {
            self.blocks[self.len as usize] = (start, end);
            self.len += 1;
            true
        } else {
            false
        }
    }
    /// The blocks.
    pub fn as_slice(&self) -> &[(Seq, Seq)] {
        &self.blocks[..self.len as usize]
    }
    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True if there is no block.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes the SACK option takes on the wire (0 when empty).
    pub fn wire_len(&self) -> usize {
        if self.is_empty() {
            0
        } else {
            2 + 8 * self.len()
        }
    }
}

impl fmt::Debug for SackBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.as_slice().iter().map(|(a, b)| a.0..b.0))
            .finish()
    }
}

/// Byte ranges of the ESP header (`esp/PROTOCOL.md`).
pub mod field {
    use netcore::frame::Field;
    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Payload length in bytes.
    pub const LENGTH: Field = 4..6;
    /// Flags (one byte).
    pub const FLAGS: usize = 6;
    /// Header length in bytes, options included (one byte).
    pub const HLEN: usize = 7;
    /// Sequence number (segments).
    pub const SEQ: Field = 8..12;
    /// Acknowledgement number (segments).
    pub const ACK: Field = 12..16;
    /// Receive window (segments).
    pub const WINDOW: Field = 16..18;
    /// Internet checksum, 0 = not computed.
    pub const CHECKSUM: Field = 18..20;
}

/// Writes the checksum of an emitted segment (header with options, then
/// payload: exactly `hlen + payload_len` bytes) into its checksum field.
/// With `enabled == false` the field is set to 0 (not computed).
pub fn fill_checksum(segment: &mut [u8], enabled: bool) {
    fill_checksum_gather(segment, &[], enabled);
}

/// Writes the checksum of a segment sent as gathered pieces: `header` (the
/// ESP header with options, whose checksum field is written) followed on the
/// wire by `payload` pieces of any lengths (e.g. the two halves of a ring
/// buffer). The payload is read, not copied. With `enabled == false` the
/// field is set to 0 (not computed).
pub fn fill_checksum_gather(header: &mut [u8], payload: &[&[u8]], enabled: bool) {
    header[field::CHECKSUM].copy_from_slice(&[0, 0]);
    if enabled {
        // RFC 1071 sec. 2(B): a piece starting at an odd offset contributes
        // its own sum byte-swapped.
        let mut sum = u64::from(ones_complement_sum(header));
        let mut odd = header.len() % 2 == 1;
        for piece in payload {
            let s = ones_complement_sum(piece);
            sum += u64::from(if odd { s.swap_bytes() } else { s });
            odd ^= piece.len() % 2 == 1;
        }
        let mut c = !fold(sum);
        if c == 0 {
            c = 0xffff;
        }
        header[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

/// A checked view of an ESP segment (the Ethernet payload).
#[derive(Debug, Clone, Copy)]
pub struct EspPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EspPacket<T> {
    /// Wraps `buf` after checking that the fixed header, the header length
    /// and the payload length are consistent with the buffer. Bytes beyond
    /// the payload are Ethernet padding. The checksum is not verified here:
    /// see [`EspPacket::verify_checksum`].
    ///
    /// Errors: [`WireError::Truncated`] if the header, the options or the
    /// payload are incomplete; [`WireError::Inconsistent`] if the header
    /// length is below 20 bytes or undefined flag bits are set.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        check_len(b, ESP_HEADER_LEN)?;
        let hlen = b[field::HLEN] as usize;
        if hlen < ESP_HEADER_LEN {
            return Err(WireError::Inconsistent("ESP header length below 20 bytes"));
        }
        if Flags::from_bits(b[field::FLAGS]).is_none() {
            return Err(WireError::Inconsistent("undefined ESP flag bits set"));
        }
        check_len(b, hlen + get_u16(b, field::LENGTH) as usize)?;
        Ok(Self { buf })
    }
    /// Wraps `buf` without a check: accessors panic if it is too short
    /// (for emitting into a buffer the caller sized).
    pub fn new_unchecked(buf: T) -> Self {
        Self { buf }
    }
    /// Verifies the Internet checksum (RFC 1071) over header and payload;
    /// a checksum field of 0 means "not computed" and passes.
    ///
    /// Errors: [`WireError::Checksum`] on a mismatch.
    pub fn verify_checksum(&self) -> Result<(), WireError> {
        if self.checksum() != 0 {
            let need = self.header_len() + self.payload_len() as usize;
            if ones_complement_sum(&self.buf.as_ref()[..need]) != 0xffff {
                return Err(WireError::Checksum);
            }
        }
        Ok(())
    }
    /// Checksum field (0 = not computed).
    pub fn checksum(&self) -> u16 {
        get_u16(self.buf.as_ref(), field::CHECKSUM)
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
    /// Flags.
    pub fn flags(&self) -> Flags {
        Flags::from_bits_retain(self.buf.as_ref()[field::FLAGS])
    }
    /// Header length including options, in bytes.
    pub fn header_len(&self) -> usize {
        self.buf.as_ref()[field::HLEN] as usize
    }
    /// Sequence number (segments).
    pub fn seq(&self) -> Seq {
        Seq(get_u32(self.buf.as_ref(), field::SEQ))
    }
    /// Acknowledgement number: the next segment expected (segments).
    pub fn ack(&self) -> Seq {
        Seq(get_u32(self.buf.as_ref(), field::ACK))
    }
    /// Receive window in segments.
    pub fn window(&self) -> u16 {
        get_u16(self.buf.as_ref(), field::WINDOW)
    }
    /// The option bytes.
    pub fn options(&self) -> &[u8] {
        &self.buf.as_ref()[ESP_HEADER_LEN..self.header_len()]
    }
    /// The payload, padding trimmed.
    pub fn payload(&self) -> &[u8] {
        let h = self.header_len();
        &self.buf.as_ref()[h..h + self.payload_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EspPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buf.as_mut(), field::SRC_PORT, v);
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buf.as_mut(), field::DST_PORT, v);
    }
    /// Sets the payload length in bytes.
    pub fn set_payload_len(&mut self, v: u16) {
        set_u16(self.buf.as_mut(), field::LENGTH, v);
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, v: Flags) {
        self.buf.as_mut()[field::FLAGS] = v.bits();
    }
    /// Sets the header length in bytes (options included).
    pub fn set_header_len(&mut self, v: u8) {
        self.buf.as_mut()[field::HLEN] = v;
    }
    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: Seq) {
        set_u32(self.buf.as_mut(), field::SEQ, v.0);
    }
    /// Sets the acknowledgement number.
    pub fn set_ack(&mut self, v: Seq) {
        set_u32(self.buf.as_mut(), field::ACK, v.0);
    }
    /// Sets the window in segments.
    pub fn set_window(&mut self, v: u16) {
        set_u16(self.buf.as_mut(), field::WINDOW, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buf.as_mut(), field::CHECKSUM, v);
    }
    /// The option bytes (header length must be set), writable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buf.as_mut()[ESP_HEADER_LEN..h]
    }
}

/// The fields of an ESP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EspRepr {
    /// Sender's ESP port.
    pub src_port: u16,
    /// Receiver's ESP port.
    pub dst_port: u16,
    /// Control flags (SYN, ACK, FIN, RST, ...).
    pub flags: Flags,
    /// Sequence number of this segment (segments).
    pub seq: Seq,
    /// Next segment expected from the peer; valid when `flags` has ACK.
    pub ack: Seq,
    /// Free receive window in segments beyond `ack`.
    pub window: u16,
    /// Selective acknowledgements (option kind 5).
    pub sack: SackBlocks,
    /// Authentication/encryption negotiation (option kind 6; SYN, SYN-ACK
    /// and RST only: `crate::auth`).
    pub nego: Option<Nego>,
    /// Payload length in bytes.
    pub payload_len: u16,
}

impl EspRepr {
    /// Parses an ESP segment (an Ethernet payload); returns the header and the
    /// payload with Ethernet padding trimmed.
    ///
    /// Errors: those of [`EspPacket::new_checked`] and
    /// [`EspPacket::verify_checksum`] ([`WireError::Checksum`]), then those
    /// of [`EspRepr::parse_packet`].
    pub fn parse(segment: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let p = EspPacket::new_checked(segment)?;
        p.verify_checksum()?;
        let repr = Self::parse_packet(&p)?;
        let h = p.header_len();
        Ok((repr, &segment[h..h + repr.payload_len as usize]))
    }

    /// The fields of a checked packet (its checksum is not looked at).
    ///
    /// Errors: [`WireError::Inconsistent`] for SYN together with RST or FIN,
    /// SYN or FIN carrying payload, a malformed option, or a SACK block that
    /// is empty or longer than 2^31. Unknown option kinds are skipped by
    /// their length.
    pub fn parse_packet<T: AsRef<[u8]>>(p: &EspPacket<T>) -> Result<Self, WireError> {
        let flags = p.flags();
        if flags.syn() && flags.intersects(Flags::RST | Flags::FIN) {
            return Err(WireError::Inconsistent("SYN with RST or FIN"));
        }
        if flags.intersects(Flags::SYN | Flags::FIN) && p.payload_len() != 0 {
            return Err(WireError::Inconsistent("SYN or FIN segment with payload"));
        }
        let mut sack = SackBlocks::new();
        let mut nego = None;
        let opts = p.options();
        let mut i = 0;
        while i < opts.len() {
            match opts[i] {
                OPT_END => break,
                OPT_NOP => i += 1,
                kind => {
                    if i + 2 > opts.len() {
                        return Err(WireError::Inconsistent("option length missing"));
                    }
                    let len = opts[i + 1] as usize;
                    if len < 2 || i + len > opts.len() {
                        return Err(WireError::Inconsistent("option length out of range"));
                    }
                    if kind == OPT_NEGO {
                        if nego.is_some() || !flags.intersects(Flags::SYN | Flags::RST) {
                            return Err(WireError::Inconsistent(
                                "negotiation option twice, or on a segment other than SYN, SYN-ACK or RST",
                            ));
                        }
                        nego = Some(Nego::parse_body(&opts[i + 2..i + len])?);
                    }
                    if kind == OPT_SACK {
                        let body = &opts[i + 2..i + len];
                        if body.is_empty()
                            || body.len() & 7 != 0 // not whole 8-byte blocks
                            || body.len() / 8 > MAX_SACK_BLOCKS
                            || !sack.is_empty()
                        {
                            return Err(WireError::Inconsistent("malformed SACK option"));
                        }
                        for b in body.chunks_exact(8) {
                            let (s, e) = (Seq(get_u32(b, 0..4)), Seq(get_u32(b, 4..8)));
                            if e.diff(s) <= 0 {
                                return Err(WireError::Inconsistent("empty SACK block"));
                            }
                            sack.push(s, e);
                        }
                    }
                    i += len;
                }
            }
        }
        Ok(EspRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            flags,
            seq: p.seq(),
            ack: p.ack(),
            window: p.window(),
            sack,
            nego,
            payload_len: p.payload_len(),
        })
    }

    /// Header length this repr emits, in bytes (options padded to 4 bytes).
    pub fn header_len(&self) -> usize {
        let opt = self.sack.wire_len() + self.nego.map_or(0, |n| n.wire_len());
        ESP_HEADER_LEN + opt.div_ceil(4) * 4
    }

    /// Writes the header (with options, checksum 0) at the start of `buf`;
    /// returns its length in bytes. Call [`fill_checksum`] once the payload
    /// follows. Panics if `buf` is shorter than
    /// [`EspRepr::header_len`] (a caller bug, not input).
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let hlen = self.header_len();
        let mut p = EspPacket::new_unchecked(&mut buf[..hlen]);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_payload_len(self.payload_len);
        p.set_flags(self.flags);
        p.set_header_len(hlen as u8);
        p.set_seq(self.seq);
        p.set_ack(self.ack);
        p.set_window(self.window);
        p.set_checksum(0);
        let opts = p.options_mut();
        let mut i = 0;
        if !self.sack.is_empty() {
            opts[0] = OPT_SACK;
            opts[1] = self.sack.wire_len() as u8;
            i = 2;
            for (s, e) in self.sack.as_slice() {
                set_u32(opts, i..i + 4, s.0);
                set_u32(opts, i + 4..i + 8, e.0);
                i += 8;
            }
        }
        if let Some(n) = &self.nego {
            i += n.emit(&mut opts[i..]);
        }
        if i < opts.len() {
            opts[i..].fill(OPT_END);
        }
        hlen
    }

    /// Sequence space this segment consumes: 1 for SYN, FIN or a segment with
    /// payload, else 0 (pure ACK, RST, probe).
    pub fn seq_len(&self) -> u32 {
        if self.flags.intersects(Flags::SYN | Flags::FIN) || self.payload_len > 0 {
            1
        } else {
            0
        }
    }

    /// The reset to send in answer to `self` when no connection wants it
    /// (RFC 793 sec. 3.4 "Reset Generation", thesis 5.2.9): `None` for an
    /// incoming RST (never answer a reset). With ACK set the reset carries
    /// `seq = SEG.ACK`; otherwise `seq = 0`, `ack = SEG.SEQ + SEG.LEN`, ACK set.
    pub fn reset_reply(&self) -> Option<EspRepr> {
        if self.flags.rst() {
            return None;
        }
        let mut r = EspRepr {
            src_port: self.dst_port,
            dst_port: self.src_port,
            ..Default::default()
        };
        if self.flags.ack() {
            r.flags = Flags::RST;
            r.seq = self.ack;
        } else {
            r.flags = Flags::RST | Flags::ACK;
            r.seq = Seq(0);
            r.ack = self.seq.add(self.seq_len());
        }
        Some(r)
    }
}

impl HeaderRepr for EspRepr {
    fn parse(packet: &[u8]) -> Result<(Self, &[u8]), WireError> {
        EspRepr::parse(packet)
    }
    fn header_len(&self) -> usize {
        EspRepr::header_len(self)
    }
    /// Writes the header with `payload_len` and the checksum over header
    /// and payload.
    fn emit(&self, packet: &mut [u8], payload_len: u16) {
        let n = EspRepr {
            payload_len,
            ..*self
        }
        .emit(packet);
        fill_checksum(&mut packet[..n + payload_len as usize], true);
    }
}

/// A parsed ESP frame: Ethernet header, ESP header (`header`) and the
/// trimmed payload ([`Frame::parse`] checks ethertype, size, layout and
/// checksum).
pub type EspFrame<'a> = Frame<'a, EspRepr>;

/// Builds a complete ESP frame (Ethernet header, ESP header, payload) into
/// `buf`; returns its length in bytes: [`link::eth::emit_frame`] over an
/// [`EspRepr`]. `esp.payload_len` is set from `payload`; the checksum is
/// computed. The frame is not padded (the NIC pads).
///
/// Errors: [`WireError::Oversized`] if the payload exceeds 65535 bytes or the
/// frame does not fit in `buf`.
pub fn emit_esp_frame(
    buf: &mut [u8],
    eth: &EthernetRepr,
    esp: &EspRepr,
    payload: &[u8],
) -> Result<usize, WireError> {
    emit_frame(buf, eth, esp, payload)
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
            ethertype: ETHERTYPE_ESP,
        }
    }

    #[test]
    fn seq_wraparound() {
        assert!(Seq(1) > Seq(0));
        assert!(Seq(0) > Seq(u32::MAX));
        assert!(Seq(5) < Seq(0x8000_0000));
        assert_eq!(Seq(u32::MAX).add(2), Seq(1));
        assert_eq!(Seq(1).diff(Seq(u32::MAX)), 2);
        assert!(Seq(1).in_window(Seq(u32::MAX), 3));
        assert!(!Seq(2).in_window(Seq(u32::MAX), 3));
    }

    #[test]
    fn header_bytes_are_network_order() {
        let mut buf = [0u8; 128];
        let esp = EspRepr {
            src_port: 0x1234,
            dst_port: 0xabcd,
            flags: Flags::ACK | Flags::FIN,
            seq: Seq(0x01020304),
            ack: Seq(0x0a0b0c0d),
            window: 0x0102,
            ..Default::default()
        };
        let n = emit_esp_frame(&mut buf, &eth(), &esp, b"").unwrap();
        assert_eq!(n, 14 + 20);
        assert_eq!(&buf[12..14], &[0x88, 0xb6]);
        assert_eq!(
            &buf[14..32],
            &[0x12, 0x34, 0xab, 0xcd, 0, 0, 0x11, 20, 1, 2, 3, 4, 0xa, 0xb, 0xc, 0xd, 1, 2]
        );
        // RFC 1071: the 16-bit words of header + checksum sum to 0xffff.
        let words: u32 = buf[14..34]
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let folded = (words & 0xffff) + (words >> 16);
        assert_eq!((folded & 0xffff) + (folded >> 16), 0xffff);
    }

    #[test]
    fn sack_round_trip_and_padding() {
        let mut sack = SackBlocks::new();
        assert!(sack.push(Seq(10), Seq(12)));
        assert!(sack.push(Seq(20), Seq(21)));
        let esp = EspRepr {
            src_port: 1,
            dst_port: 2,
            flags: Flags::ACK,
            seq: Seq(7),
            ack: Seq(9),
            window: 64,
            sack,
            nego: None,
            payload_len: 0,
        };
        assert_eq!(esp.header_len(), 20 + 20);
        let mut buf = [0u8; 80];
        let n = emit_esp_frame(&mut buf, &eth(), &esp, b"").unwrap();
        let f = EspFrame::parse(&buf[..n + 10], ETHERTYPE_ESP, 1514).unwrap();
        assert_eq!(f.header, esp);
        assert!(f.payload.is_empty());
    }

    #[test]
    fn malformed_segments_are_errors() {
        let good = EspRepr {
            src_port: 1,
            dst_port: 2,
            flags: Flags::ACK,
            ..Default::default()
        };
        let mut buf = [0u8; 64];
        let n = good.emit(&mut buf);
        assert!(EspRepr::parse(&buf[..n]).is_ok());
        assert!(matches!(
            EspRepr::parse(&buf[..n - 1]),
            Err(WireError::Truncated { .. })
        ));
        let mut b = buf;
        b[7] = 10; // header length below 20
        assert!(EspRepr::parse(&b[..n]).is_err());
        let mut b = buf;
        b[6] = 0x80; // undefined flag
        assert!(EspRepr::parse(&b[..n]).is_err());
        let mut b = buf;
        b[6] = 0x06; // SYN|RST
        assert!(EspRepr::parse(&b[..n]).is_err());
        let mut b = buf;
        b[5] = 4; // payload length beyond the buffer
        assert!(matches!(
            EspRepr::parse(&b[..n]),
            Err(WireError::Truncated { need: 24, have: 20 })
        ));
        // option with a length running past the header
        let mut b = [0u8; 64];
        b[..n].copy_from_slice(&buf[..n]);
        b[7] = 24;
        b[20] = OPT_SACK;
        b[21] = 10;
        assert!(EspRepr::parse(&b[..24]).is_err());
        // SYN with payload
        let mut b = [0u8; 64];
        b[..n].copy_from_slice(&buf[..n]);
        b[6] = Flags::SYN.bits();
        b[5] = 1;
        assert!(EspRepr::parse(&b[..n + 1]).is_err());
    }

    #[test]
    fn reset_replies() {
        let syn = EspRepr {
            src_port: 5,
            dst_port: 6,
            flags: Flags::SYN,
            seq: Seq(100),
            ..Default::default()
        };
        let r = syn.reset_reply().unwrap();
        assert_eq!((r.src_port, r.dst_port), (6, 5));
        assert_eq!(r.flags, Flags::RST | Flags::ACK);
        assert_eq!(r.ack, Seq(101));
        let data = EspRepr {
            flags: Flags::ACK,
            seq: Seq(3),
            ack: Seq(77),
            payload_len: 10,
            ..syn
        };
        let r = data.reset_reply().unwrap();
        assert_eq!(r.flags, Flags::RST);
        assert_eq!(r.seq, Seq(77));
        assert!(r.reset_reply().is_none());
    }

    proptest! {
        #[test]
        fn gathered_checksum_equals_contiguous(
            payload in proptest::collection::vec(any::<u8>(), 0..3000),
            cut1 in 0usize..3000,
            cut2 in 0usize..3000,
            opt_len in 0usize..7,
        ) {
            // A header of 20 + opt_len bytes (odd lengths included) and the
            // payload cut into three pieces at arbitrary points.
            let hlen = ESP_HEADER_LEN + opt_len;
            let mut whole = vec![0x5au8; hlen];
            whole.extend_from_slice(&payload);
            let (c1, c2) = (cut1.min(payload.len()), cut2.min(payload.len()));
            let (c1, c2) = (c1.min(c2), c1.max(c2));
            let mut header = whole[..hlen].to_vec();
            fill_checksum_gather(&mut header, &[&payload[..c1], &payload[c1..c2], &payload[c2..]], true);
            fill_checksum(&mut whole, true);
            prop_assert_eq!(&header[..], &whole[..hlen]);
        }

    }

    #[test]
    fn checksum_catches_any_single_bit_flip() {
        let esp = EspRepr {
            src_port: 9,
            dst_port: 10,
            flags: Flags::ACK,
            seq: Seq(123456),
            ack: Seq(654321),
            window: 77,
            ..Default::default()
        };
        let payload: Vec<u8> = (0..101u8).collect();
        let mut buf = [0u8; 200];
        let n = emit_esp_frame(&mut buf, &eth(), &esp, &payload).unwrap();
        assert!(EspFrame::parse(&buf[..n], ETHERTYPE_ESP, 1514).is_ok());
        for byte in 14..n {
            for bit in 0..8 {
                let mut b = buf;
                b[byte] ^= 1 << bit;
                let ok = match EspFrame::parse(&b[..n], ETHERTYPE_ESP, 1514) {
                    Ok(f) => f.header == esp && f.payload == &payload[..],
                    Err(_) => false,
                };
                assert!(!ok, "flip of bit {bit} in byte {byte} went unnoticed");
            }
        }
        // A flipped payload bit is a checksum error, reported as such.
        let mut b = buf;
        b[n - 1] ^= 1;
        assert_eq!(
            EspFrame::parse(&b[..n], ETHERTYPE_ESP, 1514),
            Err(WireError::Checksum)
        );
        let p = EspPacket::new_checked(&b[14..n]).expect("layout is intact");
        assert_eq!(p.verify_checksum(), Err(WireError::Checksum));
        assert_eq!(EspRepr::parse_packet(&p).map(|r| r.seq), Ok(esp.seq));
        // 0 = not computed: accepted unchecked.
        let mut b = buf;
        fill_checksum(&mut b[14..n], false);
        assert_eq!(EspPacket::new_checked(&b[14..n]).unwrap().checksum(), 0);
        assert!(EspFrame::parse(&b[..n], ETHERTYPE_ESP, 1514).is_ok());
    }

    proptest! {
        #[test]
        fn round_trip(src in any::<u16>(), dst in any::<u16>(), fl in 0u8..4,
                      seq in any::<u32>(), ack in any::<u32>(), window in any::<u16>(),
                      blocks in proptest::collection::vec((any::<u32>(), 1u32..1000), 0..=4),
                      payload in proptest::collection::vec(any::<u8>(), 0..1600),
                      pad in 0usize..64) {
            let flags = [Flags::ACK, Flags::ACK | Flags::RST, Flags::empty(), Flags::RST][fl as usize];
            let mut sack = SackBlocks::new();
            for (s, l) in &blocks { sack.push(Seq(*s), Seq(s.wrapping_add(*l))); }
            let esp = EspRepr { src_port: src, dst_port: dst, flags, seq: Seq(seq), ack: Seq(ack),
                                window, sack, nego: None, payload_len: payload.len() as u16 };
            let mut buf = vec![0u8; 14 + esp.header_len() + payload.len() + pad];
            let n = emit_esp_frame(&mut buf, &eth(), &esp, &payload).unwrap();
            prop_assert_eq!(n + pad, buf.len());
            let f = EspFrame::parse(&buf, ETHERTYPE_ESP, 9014 + 64).unwrap();
            prop_assert_eq!(f.header, esp);
            prop_assert_eq!(f.payload, &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok((r, p)) = EspRepr::parse(&bytes) {
                prop_assert_eq!(p.len(), r.payload_len as usize);
                prop_assert!(r.sack.len() <= MAX_SACK_BLOCKS);
            }
        }
    }
}
