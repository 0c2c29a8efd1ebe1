//! The communicator's control messages (flow control and connection
//! control, `notes-mak-ulfc.md` "ULFC", "Control messages"), carried as CTP
//! messages of their own command number, [`CONTROL_COMMAND`], so that CTP
//! confirms and resends them like data and the data header
//! ([`crate::wire`]) is unchanged.
//!
//! Layout, 20 bytes, big-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version, [`CONTROL_VERSION`] |
//! | 1 | 1 | kind ([`Control`]) |
//! | 2 | 2 | context id of the communicator |
//! | 4 | 8 | grant sequence number (`WinGrant`, `Applied`), the next fragment's sequence number (`SeqReset`), the sender's incarnation (`Connect`, `Probe`), else 0 |
//! | 12 | 8 | window, bytes (`WinGrant`), or the mode (`WinReq`: 0 normal, 1 through, 2 rapid), else 0 |
//!
//! Kinds, from the notes' table, plus three of ours:
//! - `CONNECT` (1): first contact, and `reconnect`; the receiver answers
//!   with `WIN_GRANT`; carries the sender's incarnation (see below);
//! - `WIN_GRANT` (2): the window the receiver grants the sender, bytes,
//!   numbered per (receiver, sender) so a late grant is ignored;
//! - `WIN_REQ` (3): `through` / `rapid` (and back to normal);
//! - `DISCONNECT` (4): explicit suspend;
//! - `APPLIED` (5, not in the paper): the sender has applied grant `seq`
//!   and has at most its window unconfirmed, so the receiver may give the
//!   share a lowered grant freed to other peers (see `flow.rs`).
//!
//! - `SEQ_RESET` (6): the sender's next fragment has sequence number
//!   `seq`; the receiver drops what it holds of the sender's unfinished
//!   messages and expects `seq` (the paper's sequence reset, L132).
//!
//! - `PROBE` (7, ours): a liveness probe (`liveness.rs`): the peer's CTP
//!   endpoint confirms it, which shows the process alive; carries the
//!   sender's incarnation. A rank that gets a probe from a peer it has
//!   never sent to answers with a probe of its own, so a restarted rank
//!   makes itself known to the ranks that probe it;
//! - `EXPEL` (8, ours): "I declared you failed": sent to a rank whose
//!   traffic arrives after it was declared failed (a stalled process, not
//!   a restarted one); the receiver fails the sender's rank in turn, so its
//!   application gets errors instead of silent drops.
//!
//! The incarnation is a random nonzero 64-bit number drawn when the
//! communicator is created: a rank that restarts (a new process at the
//! same address) announces a new one, and its peers then drop what they
//! hold of the old process and renumber (the paper's sequence reset, done
//! by the receiver on its own).
//!
//! A message that fails to decode is counted as malformed and dropped.

use crate::wire::{WireError, COLLECTIVE_CONTEXT};

/// The priority a `WIN_REQ` carries (defined with the grants it steers).
pub use crate::flow::Mode;

/// The CTP command number of control messages: "MC" in ASCII.
pub const CONTROL_COMMAND: u16 = 0x4d43;

/// Control header version.
pub const CONTROL_VERSION: u8 = 1;

/// Control message length, bytes.
pub const CONTROL_LEN: usize = 20;

/// A decoded control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// First contact or reconnect: please grant me a window.
    Connect {
        /// The sender's incarnation (nonzero; 0 from a sender that does not
        /// tell).
        incarnation: u64,
    },
    /// Grant number `seq`: you may have `window` bytes unconfirmed toward me.
    WinGrant {
        /// Grant sequence number (per receiver and sender, from 1).
        seq: u64,
        /// Window, bytes.
        window: u64,
    },
    /// Please set my priority to `mode`.
    WinReq(Mode),
    /// Explicit suspend: I send you nothing new until I reconnect.
    Disconnect,
    /// I applied grant `seq` and have at most its window unconfirmed.
    Applied {
        /// The grant applied.
        seq: u64,
    },
    /// My next fragment to you has sequence number `seq`.
    SeqReset {
        /// The next fragment's sequence number.
        seq: u64,
    },
    /// Are you alive? (liveness probe; CTP's confirmation answers.)
    Probe {
        /// The sender's incarnation.
        incarnation: u64,
    },
    /// You were declared failed by the sender.
    Expel,
}

impl Control {
    /// The sender's incarnation, for the kinds that carry one (`CONNECT`,
    /// `PROBE`); `None` for the others.
    pub fn incarnation(&self) -> Option<u64> {
        match *self {
            Control::Connect { incarnation } | Control::Probe { incarnation } => Some(incarnation),
            _ => None,
        }
    }

    /// Encodes the message for context `context`.
    pub fn encode(&self, context: u16) -> [u8; CONTROL_LEN] {
        let (kind, a, b) = match *self {
            Control::Connect { incarnation } => (1, incarnation, 0),
            Control::WinGrant { seq, window } => (2, seq, window),
            Control::WinReq(m) => (
                3,
                0,
                match m {
                    Mode::Normal => 0,
                    Mode::Through => 1,
                    Mode::Rapid => 2,
                },
            ),
            Control::Disconnect => (4, 0, 0),
            Control::Applied { seq } => (5, seq, 0),
            Control::SeqReset { seq } => (6, seq, 0),
            Control::Probe { incarnation } => (7, incarnation, 0),
            Control::Expel => (8, 0, 0),
        };
        let mut d = [0; CONTROL_LEN];
        d[0] = CONTROL_VERSION;
        d[1] = kind;
        d[2..4].copy_from_slice(&context.to_be_bytes());
        d[4..12].copy_from_slice(&a.to_be_bytes());
        d[12..20].copy_from_slice(&b.to_be_bytes());
        d
    }

    /// Decodes a control message; returns it and its context.
    ///
    /// Errors: [`WireError`] for a wrong length
    /// ([`WireError::Truncated`], [`WireError::Oversized`]), another
    /// version ([`WireError::Version`]), or an unknown kind or mode
    /// ([`WireError::Unknown`]).
    pub fn decode(d: &[u8]) -> Result<(Control, u16), WireError> {
        if d.len() < CONTROL_LEN {
            return Err(WireError::Truncated {
                need: CONTROL_LEN,
                have: d.len(),
            });
        }
        if d.len() > CONTROL_LEN {
            return Err(WireError::Oversized {
                len: d.len(),
                max: CONTROL_LEN,
            });
        }
        if d[0] != CONTROL_VERSION {
            return Err(WireError::Version {
                protocol: "comm control",
                got: d[0],
                expected: CONTROL_VERSION,
            });
        }
        let context = u16::from_be_bytes([d[2], d[3]]);
        let a = u64::from_be_bytes(d[4..12].try_into().expect("8 bytes"));
        let b = u64::from_be_bytes(d[12..20].try_into().expect("8 bytes"));
        let c = match d[1] {
            1 => Control::Connect { incarnation: a },
            2 => Control::WinGrant { seq: a, window: b },
            3 => Control::WinReq(match b {
                0 => Mode::Normal,
                1 => Mode::Through,
                2 => Mode::Rapid,
                _ => {
                    return Err(WireError::Unknown {
                        field: "comm window request mode",
                        value: b,
                    })
                }
            }),
            4 => Control::Disconnect,
            5 => Control::Applied { seq: a },
            6 => Control::SeqReset { seq: a },
            7 => Control::Probe { incarnation: a },
            8 => Control::Expel,
            k => {
                return Err(WireError::Unknown {
                    field: "comm control kind",
                    value: k.into(),
                })
            }
        };
        Ok((c, context))
    }
}

/// A random nonzero incarnation: std's randomly keyed hasher (keys from
/// the OS), over the process id and the time, so two processes, or two
/// communicators of one process, draw different ones.
pub(crate) fn new_incarnation() -> u64 {
    use std::hash::BuildHasher;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let h = std::collections::hash_map::RandomState::new().hash_one((std::process::id(), nanos));
    h.max(1)
}

/// The notice a process that is not yet a rank sends, as a
/// [`CONTROL_COMMAND`] message, to a rank whose communicator traffic
/// reaches it (a rank of an earlier process at this address: this one
/// restarted and has not joined): a `PROBE` with a fresh incarnation for
/// the point-to-point context of `cfg`. A rank that knew the earlier
/// process's incarnation then fails it at once, "restarted (a new
/// process announced itself)", instead of taking this process's CTP
/// confirmations for the old rank's progress; the rank is a peer again
/// for a later communicator. A rank that never learnt the old incarnation
/// just records the new one.
pub fn restart_notice(cfg: &crate::CommConfig) -> [u8; CONTROL_LEN] {
    Control::Probe {
        incarnation: new_incarnation(),
    }
    .encode(cfg.context & !COLLECTIVE_CONTEXT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_roundtrip_and_bad_ones_are_refused() {
        let all = [
            Control::Connect {
                incarnation: 0x1122,
            },
            Control::WinGrant {
                seq: 7,
                window: 1 << 20,
            },
            Control::WinReq(Mode::Normal),
            Control::WinReq(Mode::Through),
            Control::WinReq(Mode::Rapid),
            Control::Disconnect,
            Control::Applied { seq: 9 },
            Control::SeqReset { seq: 0 },
            Control::Probe { incarnation: 5 },
            Control::Expel,
        ];
        for c in all {
            let d = c.encode(0x0102);
            assert_eq!(Control::decode(&d), Ok((c, 0x0102)));
        }
        let d = Control::Connect { incarnation: 1 }.encode(1);
        assert_eq!(
            Control::decode(&d[..19]),
            Err(WireError::Truncated {
                need: CONTROL_LEN,
                have: 19
            })
        );
        let mut v = d;
        v[0] = 9;
        assert_eq!(
            Control::decode(&v),
            Err(WireError::Version {
                protocol: "comm control",
                got: 9,
                expected: CONTROL_VERSION
            })
        );
        let mut k = d;
        k[1] = 9;
        assert!(Control::decode(&k).is_err());
        let mut m = Control::WinReq(Mode::Rapid).encode(1);
        m[19] = 3;
        assert!(Control::decode(&m).is_err());
    }
}
