//! No congestion control: the window is unlimited.

use super::{CongestionEvent, Controller, Snapshot};

/// A controller that never limits the sender ([`Controller::window`] is
/// `u32::MAX`): the receive window alone bounds the flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoControl;

impl Controller for NoControl {
    #[inline]
    fn window(&self) -> u32 {
        u32::MAX
    }
    #[inline]
    fn ssthresh(&self) -> u32 {
        u32::MAX
    }
    #[inline]
    fn on_ack(&mut self, _acked: u32, _in_flight: u32, _in_recovery: bool) {}
    #[inline]
    fn on_congestion_event(&mut self, _event: CongestionEvent, _in_flight: u32) {}
    #[inline]
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            window: u32::MAX,
            ssthresh: u32::MAX,
        }
    }
    #[inline]
    fn on_spurious_congestion_event(&mut self, _before: Snapshot) {}
}
