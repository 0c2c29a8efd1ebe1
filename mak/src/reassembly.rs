//! Reassembly of messages from the in-order packet stream of one source,
//! and the bounded queue of what the receiver delivers.
//!
//! Packets arrive here exactly once and in sequence order (the receiver's
//! window sees to it), so a message is the run of packets from one with
//! START to one with END; `msg` and `msg_len` must agree along the run.
//! Memory: the message being reassembled (at most `max_message_bytes`) plus
//! the unread deliveries, together at most `recv_buffer_bytes`.

use std::collections::VecDeque;

use tracing::{debug, warn};

use crate::wire::{Flags, Seq};

/// Bytes charged against the receive buffer per queued event beyond its
/// data (bounds the number of queued events).
const EVENT_OVERHEAD: usize = 64;

/// A message delivered to the application, byte-exact and in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The id the sender's `send` returned.
    pub msg: u32,
    /// The message.
    pub data: Vec<u8>,
}

/// Why a message was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Larger than this receiver's `max_message_bytes` (a configuration
    /// mismatch between sender and receiver: the sender would have refused
    /// it with the same limit).
    TooLarge,
    /// Its packets contradicted each other (a packet without START where a
    /// message begins, a changed `msg` or `msg_len`, a wrong total): a
    /// faulty or forged sender.
    Inconsistent,
}

/// Something a receiver reports to its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverEvent {
    /// A complete message.
    Message(Message),
    /// A message that will not be delivered, and why (never silent loss).
    MessageDropped {
        /// Message id.
        msg: u32,
        /// Its announced length, bytes.
        len: u32,
        /// Why.
        reason: DropReason,
    },
    /// K NAK rounds (and `min_silence`) passed without any missing packet
    /// arriving: the source seems dead. NAKing stops until new DATA comes.
    SenderSilent {
        /// The first packet still missing.
        first_missing: Seq,
    },
    /// The source sent a packet beyond this receiver's window: it freed
    /// packets this receiver never got (it declared this receiver silent,
    /// or, NAK baseline, their linger ran out). The stream cannot continue
    /// in order; the receiver ignores further DATA.
    Abandoned {
        /// The first packet this receiver lacks.
        first_missing: Seq,
    },
}

#[derive(Debug)]
struct Partial {
    msg: u32,
    msg_len: u32,
    /// Absent while skipping a dropped message.
    data: Option<Vec<u8>>,
}

#[derive(Debug)]
pub(crate) struct Reassembly {
    max_message: usize,
    buffer: usize,
    current: Option<Partial>,
    events: VecDeque<ReceiverEvent>,
    queued_bytes: usize,
    pub(crate) delivered: u64,
    pub(crate) dropped: u64,
}

impl Reassembly {
    pub(crate) fn new(max_message: usize, buffer: usize) -> Self {
        Self {
            max_message,
            buffer,
            current: None,
            events: VecDeque::new(),
            queued_bytes: 0,
            delivered: 0,
            dropped: 0,
        }
    }

    fn partial_len(&self) -> usize {
        self.current
            .as_ref()
            .and_then(|p| p.data.as_ref())
            .map_or(0, Vec::len)
    }

    /// Whether a packet of `len` payload bytes fits the receive buffer now.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.queued_bytes + self.partial_len() + len + EVENT_OVERHEAD <= self.buffer
    }

    pub(crate) fn push_event(&mut self, ev: ReceiverEvent) {
        self.queued_bytes += EVENT_OVERHEAD
            + match &ev {
                ReceiverEvent::Message(m) => m.data.len(),
                _ => 0,
            };
        self.events.push_back(ev);
    }

    pub(crate) fn has_event(&self) -> bool {
        !self.events.is_empty()
    }

    pub(crate) fn pop_event(&mut self) -> Option<ReceiverEvent> {
        let ev = self.events.pop_front()?;
        self.queued_bytes -= EVENT_OVERHEAD
            + match &ev {
                ReceiverEvent::Message(m) => m.data.len(),
                _ => 0,
            };
        Some(ev)
    }

    fn drop_current(&mut self, reason: DropReason) {
        if let Some(p) = self.current.take() {
            if p.data.is_some() || reason == DropReason::TooLarge {
                self.dropped += 1;
                warn!(msg = p.msg, len = p.msg_len, ?reason, "MAK message dropped");
                self.push_event(ReceiverEvent::MessageDropped {
                    msg: p.msg,
                    len: p.msg_len,
                    reason,
                });
            }
        }
    }

    /// Takes the next in-order packet.
    pub(crate) fn push(&mut self, flags: Flags, msg: u32, msg_len: u32, payload: &[u8]) {
        if flags.contains(Flags::START) {
            if self.current.is_some() {
                debug!(msg, "MAK: a message starts before the previous one ended");
                self.drop_current(DropReason::Inconsistent);
            }
            let data = if msg_len as usize > self.max_message {
                None
            } else {
                Some(Vec::with_capacity(msg_len as usize))
            };
            let too_large = data.is_none();
            self.current = Some(Partial { msg, msg_len, data });
            if too_large {
                self.drop_current(DropReason::TooLarge);
                // Keep skipping the rest of it.
                self.current = Some(Partial {
                    msg,
                    msg_len,
                    data: None,
                });
            }
        }
        let consistent = self
            .current
            .as_ref()
            .is_some_and(|p| p.msg == msg && p.msg_len == msg_len);
        if !consistent {
            // The message in progress is cut short (reported if it was being
            // kept); this packet belongs to a message whose start was not
            // seen: report that one too, unless it is the same, then skip
            // the rest of it.
            let same = self
                .current
                .as_ref()
                .is_some_and(|p| p.msg == msg && p.data.is_some());
            self.drop_current(DropReason::Inconsistent);
            if !same {
                self.dropped += 1;
                self.push_event(ReceiverEvent::MessageDropped {
                    msg,
                    len: msg_len,
                    reason: DropReason::Inconsistent,
                });
            }
            self.current = Some(Partial {
                msg,
                msg_len,
                data: None,
            });
        }
        let p = self.current.as_mut().expect("set above");
        if let Some(d) = &mut p.data {
            if d.len() + payload.len() > msg_len as usize {
                self.drop_current(DropReason::Inconsistent);
                self.current = Some(Partial {
                    msg,
                    msg_len,
                    data: None,
                });
            } else {
                d.extend_from_slice(payload);
            }
        }
        if flags.contains(Flags::END) {
            let p = self.current.take().expect("set above");
            match p.data {
                Some(data) if data.len() == msg_len as usize => {
                    self.delivered += 1;
                    self.push_event(ReceiverEvent::Message(Message { msg, data }));
                }
                Some(_) => {
                    self.current = Some(p);
                    self.drop_current(DropReason::Inconsistent);
                }
                None => {}
            }
        }
    }
}
