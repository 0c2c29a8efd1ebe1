//! Congestion control behind one [`Controller`] trait (quinn-proto's
//! `congestion/`, smoltcp's `socket/tcp/congestion/`), so a protocol core
//! keeps its loss detection and asks the controller only for the window.
//!
//! Units are the caller's: ESP counts **segments** (its sequence numbers
//! do), so windows and `acked` counts here are in segments for ESP.
//!
//! - [`NewReno`]: slow start and congestion avoidance (RFC 5681 sec. 3.1),
//!   multiplicative decrease on a fast retransmit (RFC 5681 sec. 3.2, RFC
//!   6582 NewReno: no growth during recovery), a window of one segment
//!   after a retransmission timeout (RFC 5681 sec. 3.1, equation 4),
//!   growth only while the window is used (RFC 7661 spirit), and undo of a
//!   reduction shown spurious (RFC 2883 DSACK, RFC 3708 spirit, Linux
//!   `tcp_undo_cwnd_reduction`).
//! - [`NoControl`]: no congestion window (the peer's receive window alone
//!   limits the sender).

mod new_reno;
mod no_control;

pub use new_reno::NewReno;
pub use no_control::NoControl;

/// What started a congestion response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CongestionEvent {
    /// Loss detected by duplicate ACKs or SACK (fast retransmit, RFC 5681
    /// sec. 3.2 / RFC 6675): halve and continue in fast recovery.
    FastRetransmit,
    /// The retransmission timer expired (RFC 5681 sec. 3.1): restart from
    /// one segment in slow start.
    Timeout,
}

/// The congestion state saved when a loss episode starts, restored by
/// [`Controller::on_spurious_congestion_event`] if the episode proves
/// spurious.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Congestion window.
    pub window: u32,
    /// Slow-start threshold.
    pub ssthresh: u32,
}

/// A congestion controller: told about acknowledgements and congestion
/// events, answers with the congestion window.
pub trait Controller: std::fmt::Debug + Send {
    /// Congestion window: the sender keeps at most this many units (ESP:
    /// segments) in flight (RFC 6675's `pipe`).
    fn window(&self) -> u32;

    /// Slow-start threshold (`u32::MAX` until the first congestion event).
    fn ssthresh(&self) -> u32;

    /// `acked` units were newly acknowledged cumulatively. `in_flight` is
    /// what was in flight before this acknowledgement (`pipe`);
    /// `in_recovery` is true for a partial acknowledgement in fast recovery
    /// (RFC 6582: no growth then).
    fn on_ack(&mut self, acked: u32, in_flight: u32, in_recovery: bool);

    /// A loss episode starts with `in_flight` units in flight (RFC 5681
    /// sec. 3.1 equation 4: `ssthresh = max(FlightSize / 2, 2)`).
    fn on_congestion_event(&mut self, event: CongestionEvent, in_flight: u32);

    /// The state to restore if the episode about to start proves spurious;
    /// take it before [`Controller::on_congestion_event`].
    fn snapshot(&self) -> Snapshot;

    /// The episode that began at `before` was spurious (every
    /// retransmission of it was reported duplicate by DSACK): restore the
    /// window (never shrinking it) and the threshold.
    fn on_spurious_congestion_event(&mut self, before: Snapshot);
}

/// A controller chosen at run time without a box: the hot path's calls
/// ([`Controller::window`] on every segment sent) dispatch by a `match`
/// the compiler inlines instead of through a vtable.
#[derive(Debug, Clone)]
pub enum AnyController {
    /// [`NewReno`].
    NewReno(NewReno),
    /// [`NoControl`].
    NoControl(NoControl),
}

macro_rules! dispatch {
    ($self:ident, $c:ident => $e:expr) => {
        match $self {
            AnyController::NewReno($c) => $e,
            AnyController::NoControl($c) => $e,
        }
    };
}

impl Controller for AnyController {
    #[inline]
    fn window(&self) -> u32 {
        dispatch!(self, c => c.window())
    }
    #[inline]
    fn ssthresh(&self) -> u32 {
        dispatch!(self, c => c.ssthresh())
    }
    #[inline]
    fn on_ack(&mut self, acked: u32, in_flight: u32, in_recovery: bool) {
        dispatch!(self, c => c.on_ack(acked, in_flight, in_recovery))
    }
    #[inline]
    fn on_congestion_event(&mut self, event: CongestionEvent, in_flight: u32) {
        dispatch!(self, c => c.on_congestion_event(event, in_flight))
    }
    #[inline]
    fn snapshot(&self) -> Snapshot {
        dispatch!(self, c => c.snapshot())
    }
    #[inline]
    fn on_spurious_congestion_event(&mut self, before: Snapshot) {
        dispatch!(self, c => c.on_spurious_congestion_event(before))
    }
}

#[cfg(test)]
mod tests;
