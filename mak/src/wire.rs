//! Wire codec of MAK frames (layout and rules: `mak/PROTOCOL.md`).
//!
//! smoltcp style: a checked view over a byte slice ([`Packet::new_checked`])
//! and a plain [`Repr`] with [`Repr::parse`] / [`Repr::emit`]. Every length is
//! checked before a field is read; malformed input is a [`WireError`], never a
//! panic. Bytes beyond the frame's own length are padding (an Ethernet frame
//! is at least 60 bytes) and are ignored.
//!
//! Every frame starts with the same 16-byte header, network byte order:
//!
//! ```text
//!  0     1     2     3     4     6      8      10    12          16
//! +-----+-----+-----+-----+-----+------+------+-----+-----------+
//! |magic|ver/ |flags|mode |group|source|member| len |    seq    |  + body
//! |0x4D |type |     |     |     |      |      |     |           |
//! +-----+-----+-----+-----+-----+------+------+-----+-----------+
//! ```
//!
//! - DATA (type 1, to the group or, iterative, to one member): body
//!   `msg u32, msg_len u32`, then `len` payload bytes;
//! - ACK (type 2, to the sender): no body, `len` = 0, `seq` = cumulative;
//! - NAK (type 3, to the group; NAK baseline: to the sender): body
//!   `len` (the paper's count) sequence numbers `u32`, `seq` = the emitter's
//!   cumulative acknowledgement (informational).
//!
//! The paper fixes only the NAK content `[count, seq...]` (MAK paper §2 (3),
//! §3.1); the rest departs from the layout proposed in the notes, as argued
//! in PROTOCOL.md (a magic byte, the strategy, a source id for groups with
//! several senders, message fields for splitting).

use std::fmt;

/// First byte of every MAK frame (`'M'`).
pub const MAGIC: u8 = 0x4D;
/// Protocol version carried in the high nibble of byte 1.
pub const VERSION: u8 = 1;
/// Length of the common header, bytes.
pub const HEADER_LEN: usize = 16;
/// Length of the DATA header (common header + `msg` + `msg_len`), bytes.
pub const DATA_HEADER_LEN: usize = 24;
/// Bytes per NAK list entry.
pub const NAK_ENTRY_LEN: usize = 4;
/// Smallest frame size a carrier must move for MAK to work: a DATA header
/// with one payload byte (bytes). A NAK with one entry (20 bytes) fits too.
pub const MIN_MTU: usize = DATA_HEADER_LEN + 1;
/// Largest frame the 16-bit length fields can describe, bytes.
pub const MAX_FRAME_LEN: usize = DATA_HEADER_LEN + u16::MAX as usize;

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is shorter than the header or than the length field claims.
    #[error("truncated MAK frame: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The first byte is not [`MAGIC`]: not a MAK frame.
    #[error("not a MAK frame: first byte {0:#04x}, expected 0x4d")]
    NotMak(u8),
    /// A MAK frame of another protocol version.
    #[error("MAK version {0} not supported (this implementation speaks version 1)")]
    Version(u8),
    /// A field holds a value that contradicts another field or the protocol.
    #[error("inconsistent MAK header: {0}")]
    Inconsistent(&'static str),
}

/// Sequence numbers with wraparound (RFC 1982), shared with the other
/// protocols of the workspace.
pub use netcore::seq::Seq;

/// Frame type (low nibble of byte 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// A data packet of the source's stream.
    Data = 1,
    /// A cumulative acknowledgement from one member to the source.
    Ack = 2,
    /// A negative acknowledgement: the list of missing sequence numbers.
    Nak = 3,
}

impl FrameType {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Data),
            2 => Some(Self::Ack),
            3 => Some(Self::Nak),
            _ => None,
        }
    }
}

/// The reliability strategy a frame was sent under (byte 3). Sender and
/// receivers of one stream must agree; a receiver drops (and counts) DATA
/// of another strategy. The three baselines are the ones the MAK paper
/// compares (§2, §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Strategy {
    /// MAK (§3): windows with ACK requests, multicast NAKs after a random
    /// delay with suppression, retransmission once per NAK.
    #[default]
    Mak = 1,
    /// ACK baseline (§2 (2)): stop-and-wait, every receiver acknowledges
    /// every packet, multicast resend on timeout.
    Ack = 2,
    /// NAK baseline (§2 (3)): no acknowledgements, receivers send a NAK by
    /// unicast as soon as they see a gap.
    Nak = 3,
    /// Iterative baseline (§2 (1)): reliable stop-and-wait unicast to each
    /// member in turn.
    Iterative = 4,
}

impl Strategy {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Mak),
            2 => Some(Self::Ack),
            3 => Some(Self::Nak),
            4 => Some(Self::Iterative),
            _ => None,
        }
    }
}

bitflags::bitflags! {
    /// DATA flags (byte 2).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Flags: u8 {
        /// Acknowledgement request: every member acknowledges once it holds this
        /// packet and every one before it (the window-closing packet, paper
        /// §3.1 and fig. 6).
        const ACK_REQ = 0x01;
        /// The last packet the source has to send for now (the paper's "last
        /// packet"); always together with [`Flags::ACK_REQ`].
        const LAST = 0x02;
        /// First packet of a message.
        const START = 0x04;
        /// Last packet of a message.
        const END = 0x08;
        /// A retransmission (informational: counted, traced).
        const RETX = 0x10;
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        netcore::frame::fmt_flags(
            f,
            [
                (self.contains(Flags::START), "START"),
                (self.contains(Flags::END), "END"),
                (self.contains(Flags::ACK_REQ), "ACKREQ"),
                (self.contains(Flags::LAST), "LAST"),
                (self.contains(Flags::RETX), "RETX"),
            ],
        )
    }
}

/// A group identifier (configured; every member of a group uses the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct GroupId(pub u16);

/// A member identifier inside a group (configured, unique per group, like
/// an MPI rank). Sources and receivers are members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MemberId(pub u16);

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "member {}", self.0)
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

mod field {
    use std::ops::Range;
    pub const MAGIC: usize = 0;
    pub const VER_TYPE: usize = 1;
    pub const FLAGS: usize = 2;
    pub const MODE: usize = 3;
    pub const GROUP: Range<usize> = 4..6;
    pub const SOURCE: Range<usize> = 6..8;
    pub const MEMBER: Range<usize> = 8..10;
    pub const LEN: Range<usize> = 10..12;
    pub const SEQ: Range<usize> = 12..16;
    pub const MSG: Range<usize> = 16..20;
    pub const MSG_LEN: Range<usize> = 20..24;
}

/// A checked read-only view of a MAK frame.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buf` after checking the magic byte, the version, the type and
    /// strategy codes, the flags, and that the buffer holds the header and
    /// the body the length field announces.
    ///
    /// Errors: [`WireError::Truncated`], [`WireError::NotMak`],
    /// [`WireError::Version`], [`WireError::Inconsistent`] (unknown type or
    /// strategy, undefined flags, flags on ACK/NAK, LAST without ACK_REQ, an
    /// ACK with a length, an empty NAK, a DATA or NAK whose emitter does not
    /// fit its role).
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.is_empty() {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                have: 0,
            });
        }
        if b[field::MAGIC] != MAGIC {
            return Err(WireError::NotMak(b[field::MAGIC]));
        }
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                have: b.len(),
            });
        }
        let vt = b[field::VER_TYPE];
        if vt >> 4 != VERSION {
            return Err(WireError::Version(vt >> 4));
        }
        let Some(ty) = FrameType::from_u8(vt & 0x0f) else {
            return Err(WireError::Inconsistent("unknown frame type"));
        };
        if Strategy::from_u8(b[field::MODE]).is_none() {
            return Err(WireError::Inconsistent("unknown strategy"));
        }
        let flags = b[field::FLAGS];
        let len = be16(b, field::LEN.start) as usize;
        let same = be16(b, field::SOURCE.start) == be16(b, field::MEMBER.start);
        let need = match ty {
            FrameType::Data => {
                if Flags::from_bits(flags).is_none() {
                    return Err(WireError::Inconsistent("undefined DATA flag bits set"));
                }
                let f = Flags::from_bits_retain(flags);
                if f.contains(Flags::LAST) && !f.contains(Flags::ACK_REQ) {
                    return Err(WireError::Inconsistent("LAST without ACK_REQ"));
                }
                if !same {
                    return Err(WireError::Inconsistent("DATA not sent by its source"));
                }
                DATA_HEADER_LEN + len
            }
            FrameType::Ack | FrameType::Nak => {
                if flags != 0 {
                    return Err(WireError::Inconsistent("flags on an ACK or NAK"));
                }
                if same {
                    return Err(WireError::Inconsistent("ACK or NAK from the source itself"));
                }
                if ty == FrameType::Ack {
                    if len != 0 {
                        return Err(WireError::Inconsistent("ACK with a length"));
                    }
                    HEADER_LEN
                } else {
                    if len == 0 {
                        return Err(WireError::Inconsistent("NAK with an empty list"));
                    }
                    HEADER_LEN + NAK_ENTRY_LEN * len
                }
            }
        };
        if b.len() < need {
            return Err(WireError::Truncated {
                need,
                have: b.len(),
            });
        }
        if ty == FrameType::Data {
            let msg_len = be32(b, field::MSG_LEN.start) as usize;
            if len > msg_len {
                return Err(WireError::Inconsistent(
                    "DATA payload longer than its message",
                ));
            }
            let f = Flags::from_bits_retain(flags);
            if f.contains(Flags::START) && f.contains(Flags::END) && len != msg_len {
                return Err(WireError::Inconsistent(
                    "single-packet message whose payload is not the message",
                ));
            }
        }
        Ok(Self { buf })
    }
    /// Frame type.
    pub fn frame_type(&self) -> FrameType {
        FrameType::from_u8(self.buf.as_ref()[field::VER_TYPE] & 0x0f).unwrap_or(FrameType::Data)
    }
    /// DATA flags (0 on ACK and NAK).
    pub fn flags(&self) -> Flags {
        Flags::from_bits_retain(self.buf.as_ref()[field::FLAGS])
    }
    /// The strategy of the emitter.
    pub fn strategy(&self) -> Strategy {
        Strategy::from_u8(self.buf.as_ref()[field::MODE]).unwrap_or_default()
    }
    /// Group id.
    pub fn group(&self) -> GroupId {
        GroupId(be16(self.buf.as_ref(), field::GROUP.start))
    }
    /// The source (sender) whose stream the frame is about.
    pub fn source(&self) -> MemberId {
        MemberId(be16(self.buf.as_ref(), field::SOURCE.start))
    }
    /// The member that emitted the frame (the source for DATA).
    pub fn member(&self) -> MemberId {
        MemberId(be16(self.buf.as_ref(), field::MEMBER.start))
    }
    /// DATA: payload length in bytes; NAK: number of entries; ACK: 0.
    pub fn len(&self) -> u16 {
        be16(self.buf.as_ref(), field::LEN.start)
    }
    /// True if the length field is 0 (an ACK or an empty DATA payload).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// DATA: the packet's sequence number; ACK and NAK: the emitter's
    /// cumulative acknowledgement (every packet up to it received).
    pub fn seq(&self) -> Seq {
        Seq(be32(self.buf.as_ref(), field::SEQ.start))
    }
    /// DATA: message id (per source, +1 per message, wraps); 0 for other
    /// types (their frames may be shorter than the DATA header).
    pub fn msg(&self) -> u32 {
        if self.frame_type() != FrameType::Data {
            return 0;
        }
        be32(self.buf.as_ref(), field::MSG.start)
    }
    /// DATA: total message length in bytes; 0 for other types.
    pub fn msg_len(&self) -> u32 {
        if self.frame_type() != FrameType::Data {
            return 0;
        }
        be32(self.buf.as_ref(), field::MSG_LEN.start)
    }
    /// DATA: the payload, padding trimmed (empty for other types).
    pub fn payload(&self) -> &[u8] {
        if self.frame_type() != FrameType::Data {
            return &[];
        }
        &self.buf.as_ref()[DATA_HEADER_LEN..DATA_HEADER_LEN + self.len() as usize]
    }
    /// NAK: the raw list bytes (empty for other types).
    pub fn nak_bytes(&self) -> &[u8] {
        if self.frame_type() != FrameType::Nak {
            return &[];
        }
        &self.buf.as_ref()[HEADER_LEN..HEADER_LEN + NAK_ENTRY_LEN * self.len() as usize]
    }
}

/// The fields every frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// Strategy of the emitter.
    pub strategy: Strategy,
    /// Group id.
    pub group: GroupId,
    /// The source whose stream the frame is about.
    pub source: MemberId,
    /// The emitter (= `source` for DATA).
    pub member: MemberId,
}

/// The list of a NAK: parsed from the wire (a view, no allocation) or given
/// to [`Repr::emit`] as a slice.
#[derive(Clone, Copy)]
pub enum SeqList<'a> {
    /// Big-endian u32 entries as on the wire (length a multiple of 4).
    Wire(&'a [u8]),
    /// Entries to emit.
    Slice(&'a [Seq]),
}

impl<'a> SeqList<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            SeqList::Wire(b) => b.len() / NAK_ENTRY_LEN,
            SeqList::Slice(s) => s.len(),
        }
    }
    /// True if there is no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The entries in list order.
    pub fn iter(&self) -> impl Iterator<Item = Seq> + 'a {
        let (w, s): (&'a [u8], &'a [Seq]) = match *self {
            SeqList::Wire(b) => (b, &[]),
            SeqList::Slice(s) => (&[], s),
        };
        w.chunks_exact(NAK_ENTRY_LEN)
            .map(|c| Seq(be32(c, 0)))
            .chain(s.iter().copied())
    }
}

impl PartialEq for SeqList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for SeqList<'_> {}

impl fmt::Debug for SeqList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A parsed (or to-be-emitted) MAK frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr<'a> {
    /// A data packet.
    Data {
        /// Common header.
        header: Header,
        /// ACK_REQ, LAST, START, END, RETX.
        flags: Flags,
        /// Sequence number of this packet.
        seq: Seq,
        /// Message id.
        msg: u32,
        /// Total length of the message, bytes.
        msg_len: u32,
        /// This packet's part of the message.
        payload: &'a [u8],
    },
    /// A cumulative acknowledgement: every packet up to `seq` received.
    Ack {
        /// Common header.
        header: Header,
        /// Last packet of the run received without a gap.
        seq: Seq,
    },
    /// A negative acknowledgement listing missing packets.
    Nak {
        /// Common header.
        header: Header,
        /// The emitter's cumulative acknowledgement (informational).
        cum: Seq,
        /// The missing packets (the paper's `[count, seq...]`).
        missing: SeqList<'a>,
    },
}

impl<'a> Repr<'a> {
    /// Parses a frame (padding after it is ignored).
    ///
    /// Errors: those of [`Packet::new_checked`].
    pub fn parse(frame: &'a [u8]) -> Result<Self, WireError> {
        let p = Packet::new_checked(frame)?;
        let header = Header {
            strategy: p.strategy(),
            group: p.group(),
            source: p.source(),
            member: p.member(),
        };
        Ok(match p.frame_type() {
            FrameType::Data => {
                let len = p.len() as usize;
                Repr::Data {
                    header,
                    flags: p.flags(),
                    seq: p.seq(),
                    msg: p.msg(),
                    msg_len: p.msg_len(),
                    payload: &frame[DATA_HEADER_LEN..DATA_HEADER_LEN + len],
                }
            }
            FrameType::Ack => Repr::Ack {
                header,
                seq: p.seq(),
            },
            FrameType::Nak => {
                let n = p.len() as usize;
                Repr::Nak {
                    header,
                    cum: p.seq(),
                    missing: SeqList::Wire(&frame[HEADER_LEN..HEADER_LEN + NAK_ENTRY_LEN * n]),
                }
            }
        })
    }

    /// The common header.
    pub fn header(&self) -> &Header {
        match self {
            Repr::Data { header, .. } | Repr::Ack { header, .. } | Repr::Nak { header, .. } => {
                header
            }
        }
    }

    /// Length of the emitted frame, bytes.
    pub fn frame_len(&self) -> usize {
        match self {
            Repr::Data { payload, .. } => DATA_HEADER_LEN + payload.len(),
            Repr::Ack { .. } => HEADER_LEN,
            Repr::Nak { missing, .. } => HEADER_LEN + NAK_ENTRY_LEN * missing.len(),
        }
    }

    /// Writes the frame (header, body, payload) at the start of `buf` and
    /// returns its length in bytes.
    ///
    /// Panics (a caller bug, not input) if `buf` is shorter than
    /// [`Repr::frame_len`], if a payload or a NAK list exceeds the 16-bit
    /// length field, or if a NAK list is empty.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let n = self.frame_len();
        let b = &mut buf[..n];
        let h = self.header();
        let (ty, flags, len, seq) = match self {
            Repr::Data {
                flags,
                seq,
                payload,
                ..
            } => (FrameType::Data, flags.bits(), payload.len(), *seq),
            Repr::Ack { seq, .. } => (FrameType::Ack, 0, 0, *seq),
            Repr::Nak { cum, missing, .. } => {
                assert!(!missing.is_empty(), "a NAK lists at least one packet");
                (FrameType::Nak, 0, missing.len(), *cum)
            }
        };
        let len = u16::try_from(len).expect("MAK length field overflow");
        b[field::MAGIC] = MAGIC;
        b[field::VER_TYPE] = (VERSION << 4) | ty as u8;
        b[field::FLAGS] = flags;
        b[field::MODE] = h.strategy as u8;
        b[field::GROUP].copy_from_slice(&h.group.0.to_be_bytes());
        b[field::SOURCE].copy_from_slice(&h.source.0.to_be_bytes());
        b[field::MEMBER].copy_from_slice(&h.member.0.to_be_bytes());
        b[field::LEN].copy_from_slice(&len.to_be_bytes());
        b[field::SEQ].copy_from_slice(&seq.0.to_be_bytes());
        match self {
            Repr::Data {
                msg,
                msg_len,
                payload,
                ..
            } => {
                b[field::MSG].copy_from_slice(&msg.to_be_bytes());
                b[field::MSG_LEN].copy_from_slice(&msg_len.to_be_bytes());
                b[DATA_HEADER_LEN..].copy_from_slice(payload);
            }
            Repr::Ack { .. } => {}
            Repr::Nak { missing, .. } => {
                for (i, s) in missing.iter().enumerate() {
                    let at = HEADER_LEN + NAK_ENTRY_LEN * i;
                    b[at..at + NAK_ENTRY_LEN].copy_from_slice(&s.0.to_be_bytes());
                }
            }
        }
        n
    }
}

/// Most NAK entries that fit a frame of `mtu` bytes (0 if not even one).
pub fn max_nak_entries(mtu: usize) -> usize {
    (mtu.saturating_sub(HEADER_LEN) / NAK_ENTRY_LEN).min(u16::MAX as usize)
}

/// Most payload bytes a DATA frame of `mtu` bytes carries.
pub fn max_payload(mtu: usize) -> usize {
    mtu.saturating_sub(DATA_HEADER_LEN).min(u16::MAX as usize)
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
