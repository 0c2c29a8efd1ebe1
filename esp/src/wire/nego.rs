//! The negotiation option (kind [`OPT_NEGO`]): the authentication and
//! encryption method lists of ESP's handshake (`crate::auth`; layout in
//! `esp/PROTOCOL.md`).
//!
//! ```text
//!  0      1      2        3                  3+A     4+A
//! +------+------+--------+------------------+-------+------------------+
//! | kind | len  | A      | A auth ids       | E     | E enc ids        |
//! |  6   |4+A+E | 1..=8  | (1 byte each)    | 0..=8 | (1 byte each)    |
//! +------+------+--------+------------------+-------+------------------+
//! ```
//!
//! In a SYN: the initiator's offered lists in its order of preference. In a
//! SYN-ACK: the listener's choice (A = 1, E = 1). In an RST: a refusal by
//! negotiation, with the listener's accepted lists. Anywhere else, or
//! twice in one header, or with counts that disagree with `len`, the
//! segment is malformed ([`WireError::Inconsistent`]): counted and dropped
//! before any state changes.

use super::WireError;
use crate::auth::{MethodList, MAX_METHODS};

/// Option kind: authentication/encryption negotiation.
pub const OPT_NEGO: u8 = 6;

/// The lists of one negotiation option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Nego {
    /// Authentication method ids (`crate::auth::AuthMethod`).
    pub auth: MethodList,
    /// Encryption method ids (`crate::auth::EncMethod`; empty = none).
    pub enc: MethodList,
}

impl Nego {
    /// Bytes the option takes on the wire.
    pub fn wire_len(&self) -> usize {
        4 + self.auth.len() + self.enc.len()
    }

    /// Parses the option's body (the bytes after kind and length).
    ///
    /// Errors: [`WireError::Inconsistent`] when a count is out of range or
    /// the counts disagree with the option's length.
    pub fn parse_body(body: &[u8]) -> Result<Nego, WireError> {
        let bad = WireError::Inconsistent("malformed negotiation option");
        let (&na, rest) = body.split_first().ok_or(bad)?;
        let na = na as usize;
        if na == 0 || na > MAX_METHODS || rest.len() < na + 1 {
            return Err(bad);
        }
        let auth = MethodList::from_ids(&rest[..na]).ok_or(bad)?;
        let ne = rest[na] as usize;
        let enc_ids = &rest[na + 1..];
        if ne > MAX_METHODS || enc_ids.len() != ne {
            return Err(bad);
        }
        let enc = MethodList::from_ids(enc_ids).ok_or(bad)?;
        Ok(Nego { auth, enc })
    }

    /// Writes the option (kind, length, lists) at the start of `buf`;
    /// returns its length. Panics if `buf` is shorter than
    /// [`Nego::wire_len`] (a caller bug).
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let n = self.wire_len();
        buf[0] = OPT_NEGO;
        buf[1] = n as u8;
        buf[2] = self.auth.len() as u8;
        let a = self.auth.as_slice();
        buf[3..3 + a.len()].copy_from_slice(a);
        let i = 3 + a.len();
        buf[i] = self.enc.len() as u8;
        buf[i + 1..n].copy_from_slice(self.enc.as_slice());
        n
    }
}
