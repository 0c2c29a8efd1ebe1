//! Connection states (thesis fig. 5.2.1: TCP's diagram without TIME_WAIT).

use std::fmt;

/// Connection states (thesis fig. 5.2.1: TCP's diagram without TIME_WAIT;
/// no simultaneous open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// No connection (initial, or after close, reset or timeout).
    Closed,
    /// Waiting for a SYN (the listener's state; connections never hold it).
    Listen,
    /// SYN sent, waiting for the SYN-ACK.
    SynSent,
    /// SYN received and SYN-ACK sent, waiting for its ACK.
    SynRcvd,
    /// Handshake done, data flows both ways.
    Established,
    /// This end closed (FIN sent), waiting for its ACK.
    FinWait1,
    /// This end's FIN was acknowledged, waiting for the peer's FIN.
    FinWait2,
    /// Both ends closed at once, waiting for the ACK of this end's FIN.
    Closing,
    /// The peer closed (FIN received); this end may still send.
    CloseWait,
    /// The peer closed first, then this end: waiting for the last ACK.
    LastAck,
}

impl State {
    /// True in the states where both sequence spaces are synchronized.
    pub fn is_synchronized(self) -> bool {
        !matches!(self, State::Closed | State::Listen | State::SynSent)
    }

    /// True in the states where this end may send new data segments.
    pub(crate) fn may_send_data(self) -> bool {
        matches!(
            self,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN_SENT",
            State::SynRcvd => "SYN_RCVD",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN_WAIT_1",
            State::FinWait2 => "FIN_WAIT_2",
            State::Closing => "CLOSING",
            State::CloseWait => "CLOSE_WAIT",
            State::LastAck => "LAST_ACK",
        };
        f.write_str(s)
    }
}
