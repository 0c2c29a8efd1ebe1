//! NewReno congestion control (RFC 5681, RFC 6582), counted in segments.

use super::{CongestionEvent, Controller, Snapshot};

/// NewReno: slow start below `ssthresh` (the window grows by the segments
/// acknowledged), congestion avoidance above it (one segment per window
/// of acknowledged segments, RFC 5681 sec. 3.1 with appropriate byte
/// counting in segments), `ssthresh = max(in_flight / 2, 2)` on a loss,
/// window = ssthresh in fast recovery and 1 after a timeout.
///
/// Departures, documented: the window grows only while it is used (at
/// least half of it in flight before the acknowledgement: RFC 7661
/// spirit; an application-limited sender would otherwise inflate it
/// without evidence and burst later), and it is capped at `max_window`
/// (ESP: twice the largest window the wire can advertise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReno {
    window: u32,
    ssthresh: u32,
    /// Segments acknowledged in congestion avoidance since the last
    /// increase.
    acked_acc: u32,
    max_window: u32,
}

impl NewReno {
    /// Starts at `initial_window` segments (RFC 6928: 10), at least 1, with
    /// no threshold; never grows past `max_window`.
    pub fn new(initial_window: u32, max_window: u32) -> Self {
        Self {
            window: initial_window.max(1),
            ssthresh: u32::MAX,
            acked_acc: 0,
            max_window: max_window.max(1),
        }
    }
}

impl Controller for NewReno {
    #[inline]
    fn window(&self) -> u32 {
        self.window
    }

    #[inline]
    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    #[inline]
    fn on_ack(&mut self, acked: u32, in_flight: u32, in_recovery: bool) {
        if in_recovery || in_flight.saturating_mul(2) < self.window {
            return;
        }
        if self.window < self.ssthresh {
            self.window = self.window.saturating_add(acked);
        } else {
            self.acked_acc += acked;
            if self.acked_acc >= self.window {
                self.acked_acc -= self.window;
                self.window += 1;
            }
        }
        self.window = self.window.min(self.max_window);
    }

    #[inline]
    fn on_congestion_event(&mut self, event: CongestionEvent, in_flight: u32) {
        self.ssthresh = (in_flight / 2).max(2);
        match event {
            CongestionEvent::FastRetransmit => self.window = self.ssthresh,
            CongestionEvent::Timeout => {
                self.window = 1;
                self.acked_acc = 0;
            }
        }
    }

    #[inline]
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            window: self.window,
            ssthresh: self.ssthresh,
        }
    }

    #[inline]
    fn on_spurious_congestion_event(&mut self, before: Snapshot) {
        self.window = self.window.max(before.window);
        self.ssthresh = before.ssthresh;
    }
}
