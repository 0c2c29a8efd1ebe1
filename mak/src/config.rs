//! Tunables shared by the sender and the receivers of a stream.
//!
//! The MAK paper gives no values; the defaults are the proposals of the
//! implementation notes (`seeds/notes-mak-ulfc.md`, "Parameters") for GigE
//! or veth, each argued on its field. Sender and receivers must use the same
//! `window` and `strategy` (paper §3.1: "收/发双方均开设相等大小的缓冲区",
//! both sides keep buffers of equal size).

use std::time::Duration;

use crate::wire::{max_nak_entries, max_payload, Strategy, MAX_FRAME_LEN, MIN_MTU};

/// Largest window, packets: windows stay far below 2^31 so that serial
/// number comparisons of sequence numbers are unambiguous.
pub const MAX_WINDOW: u16 = 32_768;

/// Tunables of a [`Sender`](crate::Sender) and a [`Receiver`](crate::Receiver).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Reliability strategy (MAK or one of the paper's baselines). Default
    /// MAK.
    pub strategy: Strategy,
    /// Window W, packets: the sender keeps at most W unacknowledged packets
    /// and asks for acknowledgements with the packet that fills it; a
    /// receiver buffers at most W packets ahead of its first missing one.
    /// Default 64 (notes). The ACK and iterative baselines are stop-and-wait
    /// and use 1 whatever this says. 1..=32768.
    pub window: u16,
    /// Tw, the sender's fixed ACK-wait timer (paper §3.2 (2): a fixed
    /// waiting time, no backoff). On expiry the window's last packet is
    /// multicast again. Notes: `max(2 x the largest RTT in the group,
    /// 200 us)`; the default 1 ms covers veth and GigE RTTs with room for a
    /// busy host's scheduling delay. The ACK and iterative baselines use it
    /// as their retransmission timeout. Must be > 0.
    pub ack_timeout: Duration,
    /// Dmax, bound of a receiver's random NAK delay, drawn uniformly in
    /// `[0, Dmax]` (paper §3.2 receiver (2): different receivers time out at
    /// different moments). It must exceed one multicast frame time plus a
    /// NAK's one-way delay so the first NAK can suppress the others; notes
    /// propose 50-200 us on a LAN. Default 100 us. Unused by the NAK
    /// baseline, which naks at once (§2 (3)).
    pub nak_delay_max: Duration,
    /// Ts, how long a missing packet named in a NAK (ours or overheard) is
    /// not named again (paper §3.1: an overheard nak\[2,4,5\] turns ours from
    /// nak\[2,4,5\] into nak\[1,5\]). After Ts (plus a fresh random delay) a
    /// packet still missing is naked again: its retransmission was lost.
    /// Notes: about Tw. Default 1 ms. Must be > 0.
    pub suppression: Duration,
    /// δ, the sender's NAK de-duplication: a NAK entry for a packet
    /// retransmitted less than δ ago is ignored, so two NAKs that cross cost
    /// one retransmission (beyond the paper, which retransmits once per NAK;
    /// notes: about Dmax). Default 100 us. The NAK baseline does not
    /// de-duplicate (the paper's flaw: "连续重发了两次数据包4").
    pub resend_dedup: Duration,
    /// K: after this many Tw expiries without an acknowledgement from a
    /// member, the sender declares it silent, reports it and stops waiting
    /// for it; the rest of the group completes (beyond the paper, which
    /// waits forever). A receiver likewise reports its source silent after K
    /// NAK rounds without progress. Default 8, like ESP's and CTP's
    /// retransmission limits. Must be >= 1.
    pub max_expiries: u32,
    /// A member is not declared silent earlier than this after it first
    /// owed an acknowledgement, however short K x Tw is (CTP's
    /// `min_error_delay`, same reason: a descheduled process on a loaded
    /// host stalls for tens of milliseconds, longer than 8 x 1 ms). Tw
    /// resends go on meanwhile. Default 1 s; 0 makes K x Tw the bound.
    pub min_silence: Duration,
    /// Largest frame the carrier moves, bytes (the payload of its datagram:
    /// 1472 for UDP/IPv4 on a 1500-byte MTU, 1494 for EDP). Messages are
    /// split into DATA packets of at most `mtu - 24` payload bytes; NAK
    /// lists hold at most `(mtu - 16) / 4` entries. Default 1472.
    /// 25..=65559.
    pub mtu: usize,
    /// Largest message, bytes. The sender refuses larger ones
    /// ([`SendError::TooLarge`](crate::SendError::TooLarge)); a receiver
    /// reassembles whole messages and reports a larger announced one as
    /// dropped ([`ReceiverEvent::MessageDropped`](crate::ReceiverEvent)).
    /// Default 16 MiB.
    pub max_message_bytes: usize,
    /// Sender: bytes of queued and unacknowledged messages it holds at most;
    /// `send` beyond it fails with [`SendError::Full`](crate::SendError::Full).
    /// Default 64 MiB. Must be >= `max_message_bytes`.
    pub send_buffer_bytes: usize,
    /// Receiver: bytes of delivered-but-unread messages plus the message
    /// being reassembled it holds at most. Beyond it the receiver stops
    /// consuming (and acknowledging) packets until the application reads:
    /// flow control by withheld acknowledgements. Default 32 MiB. Must be
    /// >= `max_message_bytes`.
    pub recv_buffer_bytes: usize,
    /// NAK baseline only: a sent packet is freed this long after its last
    /// transmission. The paper's NAK has no rule for freeing (its first
    /// flaw: the window never frees); `None` reproduces that, and the sender
    /// then stops after W packets. Default `Some(16 ms)`: longer than the
    /// tail repeats (8 x Tw) plus a few NAK rounds (Ts each), so a receiver
    /// can nak a lost retransmission several times. It also bounds the NAK
    /// baseline's throughput to W packets per linger once the window
    /// fills: the paper's point that NAK needs large buffers.
    pub nak_linger: Option<Duration>,
    /// NAK baseline only: how often the last packet before a pause (nothing
    /// more queued, or the window full until a linger expires) is sent
    /// again, every Tw, while nothing newer is sent. The paper's NAK cannot
    /// detect a lost last packet (its second flaw); 0 reproduces that.
    /// Default 8 (K): a receiver then misses the tail only if 9 copies in a
    /// row are lost. Keep `nak_tail_repeats x Tw` below `nak_linger`.
    pub nak_tail_repeats: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            strategy: Strategy::Mak,
            window: 64,
            ack_timeout: Duration::from_millis(1),
            nak_delay_max: Duration::from_micros(100),
            suppression: Duration::from_millis(1),
            resend_dedup: Duration::from_micros(100),
            max_expiries: 8,
            min_silence: Duration::from_secs(1),
            mtu: 1472,
            max_message_bytes: 16 << 20,
            send_buffer_bytes: 64 << 20,
            recv_buffer_bytes: 32 << 20,
            nak_linger: Some(Duration::from_millis(16)),
            nak_tail_repeats: 8,
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `window` (packets) out of range.
    #[error("window of {0} packets out of range 1..=32768")]
    Window(u16),
    /// `mtu` (bytes) out of range.
    #[error("mtu of {0} bytes out of range 25..=65559 (a DATA header is 24 bytes)")]
    Mtu(usize),
    /// A duration or count that must not be zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// A buffer smaller than the largest message.
    #[error("{what} ({have} bytes) is smaller than max_message_bytes ({need} bytes)")]
    Buffer {
        /// The field.
        what: &'static str,
        /// Its value, bytes.
        have: usize,
        /// `max_message_bytes`.
        need: usize,
    },
    /// `max_message_bytes` beyond the 32-bit length field.
    #[error("max_message_bytes of {0} exceeds the 32-bit message length field")]
    MessageSize(usize),
    /// Two members with one id.
    #[error("duplicate member id {0}")]
    DuplicateMember(u16),
    /// The source listed among its own members (or as its own source).
    #[error("member id {0} is the source itself")]
    SelfMember(u16),
}

impl Config {
    /// Checks that the values can work together.
    ///
    /// Errors: a [`ConfigError`] naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.window == 0 || self.window > MAX_WINDOW {
            return Err(ConfigError::Window(self.window));
        }
        if !(MIN_MTU..=MAX_FRAME_LEN).contains(&self.mtu) {
            return Err(ConfigError::Mtu(self.mtu));
        }
        if self.ack_timeout.is_zero() {
            return Err(ConfigError::Zero("ack_timeout (Tw)"));
        }
        if self.suppression.is_zero() {
            return Err(ConfigError::Zero("suppression (Ts)"));
        }
        if self.max_expiries == 0 {
            return Err(ConfigError::Zero("max_expiries (K)"));
        }
        if self.max_message_bytes > u32::MAX as usize {
            return Err(ConfigError::MessageSize(self.max_message_bytes));
        }
        for (what, have) in [
            ("send_buffer_bytes", self.send_buffer_bytes),
            ("recv_buffer_bytes", self.recv_buffer_bytes),
        ] {
            if have < self.max_message_bytes {
                return Err(ConfigError::Buffer {
                    what,
                    have,
                    need: self.max_message_bytes,
                });
            }
        }
        Ok(())
    }

    /// The window in force: `window` for MAK and NAK, 1 for the
    /// stop-and-wait baselines (ACK, iterative), packets.
    pub fn effective_window(&self) -> u32 {
        match self.strategy {
            Strategy::Mak | Strategy::Nak => u32::from(self.window),
            Strategy::Ack | Strategy::Iterative => 1,
        }
    }

    /// Payload bytes per DATA packet.
    pub fn max_payload(&self) -> usize {
        max_payload(self.mtu)
    }

    /// Entries per NAK frame.
    pub fn max_nak_entries(&self) -> usize {
        max_nak_entries(self.mtu)
    }
}
