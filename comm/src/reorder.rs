//! Per-peer in-order delivery and reassembly, sans-IO.
//!
//! CTP delivers each message once but may deliver the messages of one peer
//! out of order (its packets and messages are confirmed independently, CTP
//! spec "Large commands"); MPI needs them in send order (MPI 4.0 section
//! 3.5). Each fragment carries its per-peer sequence number
//! ([`crate::wire::Header::seq`]); [`PeerRx`] holds fragments that arrive
//! early in a bounded reorder buffer and releases them in sequence, joining
//! the fragments of a message into the whole message.
//!
//! Bound: the sender keeps at most `window` fragments unconfirmed per peer
//! (`CommConfig::window_fragments`), so a fragment can be at most `window - 1`
//! ahead of the next expected one; a fragment further ahead, or one already
//! delivered, is counted and dropped ([`Refused`]) before it changes state.

use std::collections::BTreeMap;

use ctp::Offer;

use crate::wire::Header;

/// A complete message released in sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Complete {
    /// Context id.
    pub context: u16,
    /// Tag.
    pub tag: u64,
    /// Remote CQ data, if sent.
    pub cq_data: Option<u64>,
    /// The message (empty for a rendezvous).
    pub data: Vec<u8>,
    /// A rendezvous: the offer of the message's bytes, still at the sender.
    pub offer: Option<Offer>,
}

/// Why a fragment was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Its sequence number was already delivered (a duplicate).
    #[error("fragment {seq} already delivered (next expected {next})")]
    Duplicate {
        /// The fragment's sequence number.
        seq: u64,
        /// The next expected sequence number.
        next: u64,
    },
    /// Further ahead than the window allows, or already buffered.
    #[error("fragment {seq} outside the reorder window [{next}, {next} + {window})")]
    OutOfWindow {
        /// The fragment's sequence number.
        seq: u64,
        /// The next expected sequence number.
        next: u64,
        /// The window, fragments.
        window: u64,
    },
    /// Its message length disagrees with the message being joined, the
    /// fragments overrun the length, or the last fragment comes short.
    #[error("fragment {seq} does not continue its message ({why})")]
    Inconsistent {
        /// The fragment's sequence number.
        seq: u64,
        /// What disagreed.
        why: &'static str,
    },
    /// The announced message is longer than the receiver accepts.
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    TooLong {
        /// Announced length, bytes.
        len: u64,
        /// The limit, bytes.
        max: u64,
    },
}

/// A fragment held early: header, datagram, offset of the payload in it,
/// the offer of a rendezvous.
type Early = (Header, Vec<u8>, usize, Option<Offer>);

#[derive(Debug)]
struct Partial {
    context: u16,
    tag: u64,
    cq_data: Option<u64>,
    len: u64,
    data: Vec<u8>,
}

/// The receive side of one peer: next expected sequence number, reorder
/// buffer, the message being joined.
#[derive(Debug)]
pub struct PeerRx {
    next: u64,
    window: u64,
    max_message: u64,
    /// Early fragments: header, datagram, offset of the payload in it,
    /// the offer of a rendezvous.
    early: BTreeMap<u64, Early>,
    early_bytes: u64,
    early_total: u64,
    partial: Option<Partial>,
}

impl PeerRx {
    /// A peer expecting sequence number 0, buffering at most `window`
    /// fragments (>= 1) and accepting messages up to `max_message` bytes.
    pub fn new(window: usize, max_message: u64) -> Self {
        Self {
            next: 0,
            window: window.max(1) as u64,
            max_message,
            early: BTreeMap::new(),
            early_bytes: 0,
            early_total: 0,
            partial: None,
        }
    }

    /// Forgets everything and expects `seq` next (a sequence reset,
    /// ULFC `SEQ_RESET`); returns the fragments dropped (buffered early, or
    /// of a message being joined).
    pub fn reset(&mut self, seq: u64) -> usize {
        let dropped = self.early.len() + usize::from(self.partial.is_some());
        self.next = seq;
        self.early.clear();
        self.early_bytes = 0;
        self.partial = None;
        dropped
    }

    /// The next expected sequence number.
    #[cfg(test)]
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Fragments held in the reorder buffer.
    pub fn buffered(&self) -> usize {
        self.early.len()
    }

    /// Fragments that arrived ahead of sequence and were buffered, since
    /// creation.
    pub fn early_total(&self) -> u64 {
        self.early_total
    }

    /// Bytes held in the reorder buffer.
    pub fn buffered_bytes(&self) -> u64 {
        self.early_bytes
    }

    /// Takes fragment `h` + `payload` (a copy of it); see
    /// [`PeerRx::accept_owned`].
    #[cfg(test)]
    pub fn accept(
        &mut self,
        h: Header,
        payload: &[u8],
        out: &mut Vec<Complete>,
    ) -> Result<(), Refused> {
        self.accept_owned(h, payload.to_vec(), 0, None, out)
    }

    /// Takes fragment `h`, whose payload is `datagram[off..]`; pushes onto
    /// `out` the messages it completes, in sequence (none if it arrived
    /// early). The datagram's buffer becomes the message's when the
    /// fragment starts one (its first `off` bytes are moved out in place),
    /// so a message sent in one fragment costs no allocation or copy of a
    /// second buffer (a 1 MiB message: no 256 fresh pages to fault in).
    ///
    /// A rendezvous fragment (`offer`, checked against the header by the
    /// caller) is a whole message of its own.
    ///
    /// Errors: [`Refused`]; nothing changed. An inconsistent fragment met
    /// while joining (its predecessors already taken) drops the message
    /// being joined as well, and is reported likewise.
    ///
    /// Panics if `off > datagram.len()`.
    pub fn accept_owned(
        &mut self,
        h: Header,
        datagram: Vec<u8>,
        off: usize,
        offer: Option<Offer>,
        out: &mut Vec<Complete>,
    ) -> Result<(), Refused> {
        assert!(off <= datagram.len(), "payload offset beyond the datagram");
        if h.len > self.max_message {
            return Err(Refused::TooLong {
                len: h.len,
                max: self.max_message,
            });
        }
        if h.seq < self.next {
            return Err(Refused::Duplicate {
                seq: h.seq,
                next: self.next,
            });
        }
        if h.seq - self.next >= self.window || self.early.contains_key(&h.seq) {
            return Err(Refused::OutOfWindow {
                seq: h.seq,
                next: self.next,
                window: self.window,
            });
        }
        if h.seq > self.next {
            self.early_total += 1;
            self.early_bytes += (datagram.len() - off) as u64;
            self.early.insert(h.seq, (h, datagram, off, offer));
            return Ok(());
        }
        let mut result = self.join(h, datagram, off, offer, out);
        while let Some(e) = self.early.first_entry() {
            if *e.key() != self.next {
                break;
            }
            let (h, d, off, offer) = e.remove();
            self.early_bytes -= (d.len() - off) as u64;
            let r = self.join(h, d, off, offer, out);
            if result.is_ok() {
                result = r;
            }
        }
        result
    }

    /// Joins the in-sequence fragment `h` (payload `datagram[off..]`);
    /// advances `next`.
    fn join(
        &mut self,
        h: Header,
        mut datagram: Vec<u8>,
        off: usize,
        offer: Option<Offer>,
        out: &mut Vec<Complete>,
    ) -> Result<(), Refused> {
        self.next = h.seq + 1;
        if let Some(offer) = offer {
            if self.partial.take().is_some() {
                return Err(Refused::Inconsistent {
                    seq: h.seq,
                    why: "a rendezvous inside a message being joined",
                });
            }
            out.push(Complete {
                context: h.context,
                tag: h.tag,
                cq_data: h.cq_data,
                data: Vec::new(),
                offer: Some(offer),
            });
            return Ok(());
        }
        let payload_len = datagram.len() - off;
        let mut p = match self.partial.take() {
            Some(p)
                if (p.context, p.tag, p.cq_data, p.len) != (h.context, h.tag, h.cq_data, h.len) =>
            {
                // The message being joined lost its end: drop both.
                return Err(Refused::Inconsistent {
                    seq: h.seq,
                    why: "context, tag, CQ data or length differs from the message being joined",
                });
            }
            Some(p) => p,
            None => Partial {
                context: h.context,
                tag: h.tag,
                cq_data: h.cq_data,
                len: h.len,
                data: Vec::new(),
            },
        };
        if (p.data.len() + payload_len) as u64 > p.len {
            return Err(Refused::Inconsistent {
                seq: h.seq,
                why: "fragments overrun the message length",
            });
        }
        if p.data.is_empty() {
            // The first fragment: its buffer becomes the message's.
            datagram.drain(..off);
            p.data = datagram;
        } else {
            p.data.extend_from_slice(&datagram[off..]);
        }
        let full = p.data.len() as u64 == p.len;
        match (h.is_last(), full) {
            (true, true) => {
                out.push(Complete {
                    context: p.context,
                    tag: p.tag,
                    cq_data: p.cq_data,
                    data: p.data,
                    offer: None,
                });
                Ok(())
            }
            (true, false) => Err(Refused::Inconsistent {
                seq: h.seq,
                why: "last fragment before the message length",
            }),
            (false, true) if p.len > 0 => Err(Refused::Inconsistent {
                seq: h.seq,
                why: "message length reached without the last flag",
            }),
            _ => {
                self.partial = Some(p);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::FLAG_LAST;

    fn frag(seq: u64, tag: u64, len: u64, last: bool) -> Header {
        Header {
            flags: if last { FLAG_LAST } else { 0 },
            context: 0,
            tag,
            seq,
            len,
            cq_data: None,
        }
    }

    #[test]
    fn early_fragments_wait_for_their_predecessors() {
        let mut rx = PeerRx::new(4, 1 << 20);
        let mut out = Vec::new();
        rx.accept(frag(2, 7, 1, true), b"c", &mut out).unwrap();
        rx.accept(frag(1, 6, 1, true), b"b", &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!((rx.buffered(), rx.buffered_bytes()), (2, 2));
        rx.accept(frag(0, 5, 1, true), b"a", &mut out).unwrap();
        let got: Vec<_> = out.iter().map(|c| (c.tag, c.data.clone())).collect();
        assert_eq!(
            got,
            vec![(5, b"a".to_vec()), (6, b"b".to_vec()), (7, b"c".to_vec())]
        );
        assert_eq!(
            (rx.next_seq(), rx.buffered(), rx.buffered_bytes()),
            (3, 0, 0)
        );
    }

    #[test]
    fn fragments_join_into_one_message_in_any_arrival_order() {
        let mut rx = PeerRx::new(8, 1 << 20);
        let mut out = Vec::new();
        rx.accept(frag(1, 3, 6, false), b"cd", &mut out).unwrap();
        rx.accept(frag(2, 3, 6, true), b"ef", &mut out).unwrap();
        rx.accept(frag(0, 3, 6, false), b"ab", &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data, b"abcdef");
        // An empty message is one fragment.
        rx.accept(frag(3, 4, 0, true), b"", &mut out).unwrap();
        assert_eq!((out.len(), out[1].data.len()), (2, 0));
    }

    #[test]
    fn duplicates_and_far_fragments_are_refused_without_change() {
        let mut rx = PeerRx::new(2, 10);
        let mut out = Vec::new();
        rx.accept(frag(0, 0, 1, true), b"a", &mut out).unwrap();
        assert_eq!(
            rx.accept(frag(0, 0, 1, true), b"a", &mut out),
            Err(Refused::Duplicate { seq: 0, next: 1 })
        );
        assert!(matches!(
            rx.accept(frag(3, 0, 1, true), b"a", &mut out),
            Err(Refused::OutOfWindow { seq: 3, .. })
        ));
        rx.accept(frag(2, 0, 1, true), b"c", &mut out).unwrap();
        assert!(matches!(
            rx.accept(frag(2, 0, 1, true), b"c", &mut out),
            Err(Refused::OutOfWindow { .. })
        ));
        assert_eq!(
            rx.accept(frag(1, 0, 11, true), b"b", &mut out),
            Err(Refused::TooLong { len: 11, max: 10 })
        );
        assert_eq!((rx.next_seq(), out.len()), (1, 1));
    }

    #[test]
    fn inconsistent_fragments_are_reported() {
        let mut rx = PeerRx::new(8, 100);
        let mut out = Vec::new();
        rx.accept(frag(0, 1, 4, false), b"ab", &mut out).unwrap();
        assert!(matches!(
            rx.accept(frag(1, 2, 4, true), b"cd", &mut out),
            Err(Refused::Inconsistent { seq: 1, .. })
        ));
        assert!(matches!(
            rx.accept(frag(2, 1, 4, true), b"ab", &mut out),
            Err(Refused::Inconsistent { seq: 2, .. })
        ));
        // The stream goes on with the next message.
        rx.accept(frag(3, 1, 2, true), b"ok", &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data, b"ok");
    }

    #[test]
    fn a_fragment_starting_a_message_lends_it_its_buffer() {
        let mut rx = PeerRx::new(4, 1 << 20);
        let mut out = Vec::new();
        let mut d = b"HDRwhole".to_vec();
        d.reserve(100);
        let base = d.as_ptr();
        rx.accept_owned(frag(0, 1, 5, true), d, 3, None, &mut out)
            .unwrap();
        assert_eq!(out[0].data, b"whole");
        assert_eq!(out[0].data.as_ptr(), base, "no second buffer");
        // Early, then joined: the first fragment's buffer grows.
        rx.accept_owned(frag(2, 2, 4, true), b"hhcd".to_vec(), 2, None, &mut out)
            .unwrap();
        rx.accept_owned(frag(1, 2, 4, false), b"hhab".to_vec(), 2, None, &mut out)
            .unwrap();
        assert_eq!(out[1].data, b"abcd");
        assert_eq!((rx.buffered(), rx.buffered_bytes()), (0, 0));
    }
}
