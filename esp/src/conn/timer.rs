//! The timers of one connection (quinn's `connection/timer.rs`), kept in a
//! [`netcore::timer::TimerTable`].

use netcore::timer::{TimerKind, TimerTable};

/// A connection timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Retransmission timeout (RFC 6298 sec. 5).
    Rto = 0,
    /// Delayed acknowledgement (RFC 1122 sec. 4.2.3.2, RFC 5681 sec. 4.2).
    DelayedAck = 1,
    /// Zero-window probe (RFC 1122 sec. 4.2.2.17, RFC 9293 sec. 3.8.6.1):
    /// data waits, nothing is in flight and the peer's window is closed.
    Persist = 2,
    /// Keepalive (RFC 1122 sec. 4.2.3.6): nothing in flight on an idle
    /// connection; unanswered probes count as retransmissions.
    KeepAlive = 3,
}

impl TimerKind for Timer {
    const ALL: &'static [Timer] = &[
        Timer::Rto,
        Timer::DelayedAck,
        Timer::Persist,
        Timer::KeepAlive,
    ];
    fn index(self) -> usize {
        self as usize
    }
}

/// The timers of one connection.
pub(crate) type Timers = TimerTable<Timer, 4>;
