//! The CTP packet header codec (CTP spec v1.2, "Header", table 1).
//!
//! smoltcp style: a checked view over a byte slice ([`Packet::new_checked`])
//! and a plain [`Repr`] with [`Repr::parse`] / [`Repr::emit`]. Every length and
//! field is checked before use; malformed input is a [`WireError`], never a
//! panic.
//!
//! The header is the packed x86 struct of the original implementation, so all
//! fields are **little-endian**, 25 bytes, no padding:
//!
//! ```text
//! offset size field
//!  0      2   packet size (header included), bytes
//!  2      2   command (0..=32767); bit 15 set = confirmation of that command
//!  4      4   packet number inside a large message (0 for a normal command)
//!  8      4   packet count of the message (0 or 1 for a normal command)
//! 12      4   id (per sender and peer: random start, +1 per packet, wraps)
//! 16      8   message size in bytes (only the low 48 bits are used)
//! 24      1   options (DelAfterError 0x01, NoResend 0x02, UniqueCommand 0x04,
//!             Broadcast 0x08, StartSession 0x10; beyond the spec: Offer
//!             0x20, Pull 0x40)
//! ```
//!
//! Beyond the spec (PROTOCOL.md "Pulled messages"): a message whose body
//! the receiver pulls. Its announcement is a normal command with Offer
//! (0x20) whose data part starts with the body's size and the sender's
//! largest part; the receiver asks for parts with Pull (0x40) packets
//! carrying the confirmation bit and a list of part ranges ([`PullRequest`]);
//! the sender answers with Pull packets without it, one part each; the
//! receiver ends the transfer with a normal command carrying Offer | Pull
//! (0x60, "done"). [`Repr::kind`] tells them apart.
//!
//! A confirmation is the confirmed packet's header with packet size = 25,
//! bit 15 of command set and message size 0, and no body (spec, "Confirmations").

use std::fmt;

/// Size of the CTP header in bytes (spec table 1: 16+16+32+32+32+64+8 bits).
pub const CTP_HEADER_LEN: usize = 25;
/// Bit 15 of the command field marks a confirmation (spec table 1).
pub const CONFIRM_BIT: u16 = 0x8000;
/// Largest command number an application may send (spec table 1).
pub const MAX_COMMAND: u16 = 0x7fff;
/// Largest message size: the field has 64 bits of which 48 are used (spec table 1).
pub const MAX_MESSAGE_SIZE: u64 = (1 << 48) - 1;
/// Default largest data part per packet in bytes over UDP (spec, "Ideology": 65400).
pub const DEFAULT_UDP_DATA_SIZE: usize = 65400;
/// Largest packet the 16-bit size field can describe, in bytes.
pub const MAX_PACKET_LEN: usize = u16::MAX as usize;

/// Why a datagram was rejected as a CTP packet: the workspace's one wire
/// error type.
pub use netcore::frame::WireError;

bitflags::bitflags! {
    /// The option bits of the header (spec, "Options" and the `Options` enum of `CCTPNet`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Options: u8 {
        /// Delete the command from the sent-commands storage after its first
        /// "not confirmed" error instead of resending it further (the "ErrorOnce"
        /// of the spec's ping example).
        const DEL_AFTER_ERROR = 0x01;
        /// Send each packet once; never resend it (the error still comes when it
        /// is not confirmed in time).
        const NO_RESEND = 0x02;
        /// At most one unconfirmed command with this command number per peer:
        /// sending it drops older unconfirmed ones with the same number.
        const UNIQUE_COMMAND = 0x04;
        /// The command is broadcast; ids come from the sender's broadcast session.
        const BROADCAST = 0x08;
        /// First packet to a peer: tells the receiver the sender's starting id.
        const START_SESSION = 0x10;
        /// Beyond the spec: the announcement of a message whose body the
        /// receiver pulls (with [`Options::PULL`]: the receiver's "done").
        const OFFER = 0x20;
        /// Beyond the spec: a packet of a receiver-driven transfer, a
        /// request (confirmation bit set) or a part (bit clear).
        const PULL = 0x40;
        /// A ping: DelAfterError | NoResend | UniqueCommand (spec, "Options").
        const PING = 0x07;
    }
}

impl Options {
    /// No option (`Options::empty()`).
    pub const NONE: Options = Options::empty();
    /// The bits this implementation knows.
    pub const KNOWN: u8 = Options::all().bits();
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(u8, &str); 7] = [
            (0x01, "DelAfterError"),
            (0x02, "NoResend"),
            (0x04, "UniqueCommand"),
            (0x08, "Broadcast"),
            (0x10, "StartSession"),
            (0x20, "Offer"),
            (0x40, "Pull"),
        ];
        let mut first = true;
        write!(f, "Options(")?;
        for (bit, name) in NAMES {
            if self.bits() & bit != 0 {
                if !first {
                    write!(f, "|")?;
                }
                write!(f, "{name}")?;
                first = false;
            }
        }
        let unknown = self.bits() & !Self::KNOWN;
        if unknown != 0 {
            if !first {
                write!(f, "|")?;
            }
            write!(f, "{unknown:#04x}")?;
        }
        write!(f, ")")
    }
}

mod field {
    use std::ops::Range;
    pub const SIZE: Range<usize> = 0..2;
    pub const COMMAND: Range<usize> = 2..4;
    pub const NUMBER: Range<usize> = 4..8;
    pub const AMOUNT: Range<usize> = 8..12;
    pub const ID: Range<usize> = 12..16;
    pub const MESSAGE_SIZE: Range<usize> = 16..24;
    pub const OPTIONS: usize = 24;
}

fn le16(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    u16::from_le_bytes([b[r.start], b[r.start + 1]])
}
fn le32(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_le_bytes(a)
}
fn le64(b: &[u8], r: std::ops::Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[r]);
    u64::from_le_bytes(a)
}

/// A checked read-only view of one CTP packet (header + body).
///
/// [`Packet::new_checked`] guarantees the buffer holds the whole header and at
/// least `packet size` bytes, and that `packet size >= 25`, so every accessor is
/// safe to call. Bytes beyond `packet size` (e.g. Ethernet padding) are ignored.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buf` after checking its length against the header and the size field.
    ///
    /// Errors: [`WireError::Truncated`] if `buf` is shorter than 25 bytes or than
    /// `packet size`; [`WireError::Inconsistent`] if `packet size < 25`.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let have = buf.as_ref().len();
        if have < CTP_HEADER_LEN {
            return Err(WireError::Truncated {
                need: CTP_HEADER_LEN,
                have,
            });
        }
        let p = Self { buf };
        let size = p.packet_size() as usize;
        if size < CTP_HEADER_LEN {
            return Err(WireError::Inconsistent(
                "packet size smaller than the header",
            ));
        }
        if size > have {
            return Err(WireError::Truncated { need: size, have });
        }
        Ok(p)
    }
    /// Packet size in bytes, header included.
    pub fn packet_size(&self) -> u16 {
        le16(self.buf.as_ref(), field::SIZE)
    }
    /// Raw command field (bit 15 = confirmation).
    pub fn command_field(&self) -> u16 {
        le16(self.buf.as_ref(), field::COMMAND)
    }
    /// Packet number inside a large message.
    pub fn number(&self) -> u32 {
        le32(self.buf.as_ref(), field::NUMBER)
    }
    /// Packet count of the message.
    pub fn amount(&self) -> u32 {
        le32(self.buf.as_ref(), field::AMOUNT)
    }
    /// Packet id.
    pub fn id(&self) -> u32 {
        le32(self.buf.as_ref(), field::ID)
    }
    /// Message size field in bytes (all 64 bits as sent).
    pub fn message_size(&self) -> u64 {
        le64(self.buf.as_ref(), field::MESSAGE_SIZE)
    }
    /// Options byte.
    pub fn options(&self) -> Options {
        Options::from_bits_retain(self.buf.as_ref()[field::OPTIONS])
    }
    /// The body: bytes 25..packet size.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[CTP_HEADER_LEN..self.packet_size() as usize]
    }
}

/// The fields of a CTP header, with the confirmation bit split out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Command number, 0..=32767 (bit 15 cleared).
    pub command: u16,
    /// True for a confirmation (bit 15 of the command field set).
    pub confirm: bool,
    /// Packet number inside a large message (0 for a normal command).
    pub number: u32,
    /// Packet count of the message (0 or 1 for a normal command).
    pub amount: u32,
    /// Packet id.
    pub id: u32,
    /// Size of the whole message in bytes (0 in a confirmation).
    pub message_size: u64,
    /// Option bits.
    pub options: Options,
    /// Body length in bytes (0 for a confirmation).
    pub payload_len: u16,
}

/// What a packet is, by its confirmation bit and its Offer / Pull options
/// (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A data packet of the spec (a command or a part of a large one).
    Data,
    /// A confirmation (of a data packet, an offer or a done).
    Confirm,
    /// The announcement of a pulled message: a normal command.
    Offer,
    /// The receiver's request for parts of a pulled message.
    Request,
    /// A part of a pulled message, answering a request.
    Part,
    /// The receiver pulled what it wanted: a normal command.
    Done,
}

/// Bytes in front of the data of an offer's data part: the body's size
/// (8) and the sender's largest part (4), little-endian.
pub const OFFER_PREFIX_LEN: usize = 12;

/// Bytes in front of the ranges of a request's body: the part size (4)
/// and flags (4), little-endian.
pub const REQUEST_PREFIX_LEN: usize = 8;

/// Request flag: the request asks again for parts asked before.
pub const REQUEST_RETRY: u32 = 1;

/// A request's body (a Pull packet with the confirmation bit): the part
/// size the receiver counts in, flags, then `(first part, count)` ranges,
/// all little-endian u32.
#[derive(Debug, Clone, Copy)]
pub struct PullRequest<'a> {
    /// Part size, bytes.
    pub part: u32,
    /// [`REQUEST_RETRY`] or 0.
    pub flags: u32,
    body: &'a [u8],
}

impl<'a> PullRequest<'a> {
    /// The request in `body` (checked by [`Repr::parse`]).
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        if body.len() < REQUEST_PREFIX_LEN || !(body.len() - REQUEST_PREFIX_LEN).is_multiple_of(8) {
            return Err(WireError::Inconsistent("pull request body of a bad length"));
        }
        Ok(Self {
            part: le32(body, 0..4),
            flags: le32(body, 4..8),
            body: &body[REQUEST_PREFIX_LEN..],
        })
    }

    /// The `(first part, count)` ranges.
    pub fn ranges(&self) -> impl Iterator<Item = (u32, u32)> + 'a {
        self.body
            .chunks_exact(8)
            .map(|c| (le32(c, 0..4), le32(c, 4..8)))
    }

    /// Writes a request body into `buf`; returns its length.
    ///
    /// Panics if `buf` is shorter than `8 + 8 x ranges`.
    pub fn emit(part: u32, flags: u32, ranges: &[(u32, u32)], buf: &mut [u8]) -> usize {
        buf[0..4].copy_from_slice(&part.to_le_bytes());
        buf[4..8].copy_from_slice(&flags.to_le_bytes());
        let mut at = REQUEST_PREFIX_LEN;
        for &(first, count) in ranges {
            buf[at..at + 4].copy_from_slice(&first.to_le_bytes());
            buf[at + 4..at + 8].copy_from_slice(&count.to_le_bytes());
            at += 8;
        }
        at
    }
}

impl Repr {
    /// What the packet is.
    pub fn kind(&self) -> Kind {
        let offer = self.options.contains(Options::OFFER);
        let pull = self.options.contains(Options::PULL);
        match (self.confirm, offer, pull) {
            (true, false, true) => Kind::Request,
            (true, _, _) => Kind::Confirm,
            (false, true, false) => Kind::Offer,
            (false, true, true) => Kind::Done,
            (false, false, true) => Kind::Part,
            (false, false, false) => Kind::Data,
        }
    }

    /// Parses and validates a packet; returns the header and the body.
    ///
    /// Checks (beyond [`Packet::new_checked`]): message size fits 48 bits;
    /// a confirmation has no body; a data packet's number is below its count
    /// (count > 1), or is 0 for a normal command whose message size equals
    /// its body length; a large message's parts are not larger than the
    /// message. Errors: [`WireError`].
    pub fn parse(datagram: &[u8]) -> Result<(Repr, &[u8]), WireError> {
        let p = Packet::new_checked(datagram)?;
        let cmd = p.command_field();
        let payload = &datagram[CTP_HEADER_LEN..p.packet_size() as usize];
        let repr = Repr {
            command: cmd & MAX_COMMAND,
            confirm: cmd & CONFIRM_BIT != 0,
            number: p.number(),
            amount: p.amount(),
            id: p.id(),
            message_size: p.message_size(),
            options: p.options(),
            payload_len: payload.len() as u16,
        };
        if repr.message_size > MAX_MESSAGE_SIZE {
            return Err(WireError::Inconsistent("message size exceeds 48 bits"));
        }
        match repr.kind() {
            Kind::Request => {
                if repr.message_size != 0 {
                    return Err(WireError::Inconsistent("pull request with a message size"));
                }
                PullRequest::parse(payload)?;
                return Ok((repr, payload));
            }
            Kind::Part => {
                if payload.is_empty() || payload.len() as u64 > repr.message_size {
                    return Err(WireError::Inconsistent("pulled part of a bad length"));
                }
                return Ok((repr, payload));
            }
            Kind::Offer if repr.amount > 1 || payload.len() < OFFER_PREFIX_LEN => {
                return Err(WireError::Inconsistent(
                    "offer not a normal command with its prefix",
                ));
            }
            Kind::Done if repr.amount > 1 || payload.len() != 4 => {
                return Err(WireError::Inconsistent(
                    "done not a normal command of 4 bytes",
                ));
            }
            _ => {}
        }
        if repr.confirm {
            if !payload.is_empty() {
                return Err(WireError::Inconsistent("confirmation with a body"));
            }
        } else if repr.amount <= 1 {
            if repr.number != 0 {
                return Err(WireError::Inconsistent(
                    "normal command with packet number > 0",
                ));
            }
            if repr.message_size != payload.len() as u64 {
                return Err(WireError::Inconsistent(
                    "normal command whose message size differs from its body length",
                ));
            }
        } else {
            if repr.number >= repr.amount {
                return Err(WireError::Inconsistent(
                    "packet number not below packet count",
                ));
            }
            if payload.len() as u64 > repr.message_size {
                return Err(WireError::Inconsistent("part larger than its message"));
            }
        }
        Ok((repr, payload))
    }

    /// Header of a confirmation of the packet `self` (spec, "Confirmations":
    /// size = header size, command bit 15 set, message size 0, no body).
    pub fn confirmation(&self) -> Repr {
        Repr {
            confirm: true,
            message_size: 0,
            payload_len: 0,
            ..*self
        }
    }

    /// Total packet length in bytes (header + body).
    pub fn packet_len(&self) -> usize {
        CTP_HEADER_LEN + self.payload_len as usize
    }

    /// Writes the 25-byte header at the start of `buf` (the body is the
    /// caller's: it goes at `buf[25..25 + payload_len]`).
    ///
    /// Panics if `buf` is shorter than 25 bytes or `packet_len()` exceeds
    /// 65535 (both caller bugs, not input).
    pub fn emit(&self, buf: &mut [u8]) {
        let size = self.packet_len();
        assert!(
            size <= MAX_PACKET_LEN,
            "CTP packet of {size} bytes exceeds 65535"
        );
        let b = &mut buf[..CTP_HEADER_LEN];
        b[field::SIZE].copy_from_slice(&(size as u16).to_le_bytes());
        let cmd = (self.command & MAX_COMMAND) | if self.confirm { CONFIRM_BIT } else { 0 };
        b[field::COMMAND].copy_from_slice(&cmd.to_le_bytes());
        b[field::NUMBER].copy_from_slice(&self.number.to_le_bytes());
        b[field::AMOUNT].copy_from_slice(&self.amount.to_le_bytes());
        b[field::ID].copy_from_slice(&self.id.to_le_bytes());
        b[field::MESSAGE_SIZE].copy_from_slice(&self.message_size.to_le_bytes());
        b[field::OPTIONS] = self.options.bits();
    }
}

/// Wraparound "less than" on packet ids, exactly as `CCTPNet::Less` of the
/// spec: `a < b`, reversed when the ids are more than 0x7fffffff apart.
pub fn id_less(a: u32, b: u32) -> bool {
    if a.max(b) - a.min(b) > 0x7fff_ffff {
        a >= b
    } else {
        a < b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_debug_and_ping() {
        assert_eq!(
            Options::PING,
            Options::DEL_AFTER_ERROR | Options::NO_RESEND | Options::UNIQUE_COMMAND
        );
        assert_eq!(
            format!("{:?}", Options::from_bits_retain(0x15 | 0x80)),
            "Options(DelAfterError|UniqueCommand|StartSession|0x80)"
        );
    }

    fn pull_packet(confirm: bool, options: Options, message_size: u64, body: &[u8]) -> Vec<u8> {
        let r = Repr {
            command: 9,
            confirm,
            number: 3,
            amount: 7,
            id: 0x1234,
            message_size,
            options,
            payload_len: body.len() as u16,
        };
        let mut b = vec![0; r.packet_len()];
        r.emit(&mut b);
        b[CTP_HEADER_LEN..].copy_from_slice(body);
        b
    }

    /// The packets of pulled messages parse by their own rules: a request
    /// is a "confirmation" with a body of ranges, a part is a piece of a
    /// body whose number may exceed its count (the count echoes a
    /// request), offers and dones are normal commands with their prefix.
    #[test]
    fn pulled_message_packets_parse_by_kind() {
        let mut req = [0u8; REQUEST_PREFIX_LEN + 16];
        let n = PullRequest::emit(1469, REQUEST_RETRY, &[(0, 44), (90, 2)], &mut req);
        assert_eq!(n, req.len());
        let b = pull_packet(true, Options::PULL, 0, &req);
        let (r, body) = Repr::parse(&b).unwrap();
        assert_eq!(r.kind(), Kind::Request);
        let q = PullRequest::parse(body).unwrap();
        assert_eq!((q.part, q.flags), (1469, REQUEST_RETRY));
        assert_eq!(q.ranges().collect::<Vec<_>>(), [(0, 44), (90, 2)]);
        // A request with a size, or ranges cut short, is malformed.
        assert!(Repr::parse(&pull_packet(true, Options::PULL, 5, &req)).is_err());
        assert!(Repr::parse(&pull_packet(true, Options::PULL, 0, &req[..12])).is_err());
        // A part: number 3 of "count" 7 is fine, and so is number 9 (the
        // count is a request's number); not a part longer than the body,
        // nor an empty one.
        let mut part = pull_packet(false, Options::PULL, 100, b"abcd");
        assert_eq!(Repr::parse(&part).unwrap().0.kind(), Kind::Part);
        part[4] = 9;
        assert_eq!(Repr::parse(&part).unwrap().0.number, 9);
        assert!(Repr::parse(&pull_packet(false, Options::PULL, 3, b"abcd")).is_err());
        assert!(Repr::parse(&pull_packet(false, Options::PULL, 3, b"")).is_err());
        // Offers and dones are normal commands (number 0, count <= 1,
        // size = body) with their prefix.
        let offer = |body: &[u8]| {
            let r = Repr {
                command: 9,
                confirm: false,
                number: 0,
                amount: 1,
                id: 5,
                message_size: body.len() as u64,
                options: Options::OFFER,
                payload_len: body.len() as u16,
            };
            let mut b = vec![0; r.packet_len()];
            r.emit(&mut b);
            b[CTP_HEADER_LEN..].copy_from_slice(body);
            b
        };
        assert_eq!(Repr::parse(&offer(&[0; 12])).unwrap().0.kind(), Kind::Offer);
        assert!(Repr::parse(&offer(&[0; 11])).is_err(), "no prefix");
        let mut done = offer(&[1, 2, 3, 4]);
        done[24] = (Options::OFFER | Options::PULL).bits();
        assert_eq!(Repr::parse(&done).unwrap().0.kind(), Kind::Done);
        let mut done5 = offer(&[1, 2, 3, 4, 5]);
        done5[24] = (Options::OFFER | Options::PULL).bits();
        assert!(Repr::parse(&done5).is_err());
        // Their confirmations are confirmations.
        let (r, _) = Repr::parse(&done).unwrap();
        let mut c = vec![0; CTP_HEADER_LEN];
        r.confirmation().emit(&mut c);
        assert_eq!(Repr::parse(&c).unwrap().0.kind(), Kind::Confirm);
    }

    #[test]
    fn id_less_wraps() {
        assert!(id_less(1, 2));
        assert!(!id_less(2, 1));
        assert!(!id_less(5, 5));
        assert!(id_less(u32::MAX, 0));
        assert!(!id_less(0, u32::MAX));
        assert!(id_less(0xffff_fff0, 0x10));
        assert!(id_less(0, 0x7fff_ffff));
        assert!(!id_less(0, 0x8000_0000));
    }
}
