//! The CTP core as both engines hold it: the sans-IO [`Endpoint`], the
//! deliveries waiting for the application, and the routing of deliveries
//! to subscribers (the spec's "subscribers" and "default receiver").

use std::collections::VecDeque;
use std::time::Instant;

use runtime::protocol::Ready;

use super::upper::UpperLayer;
use crate::endpoint::{Delivery, Endpoint, PeerAddr};
use crate::wire::CTP_HEADER_LEN;

/// Deliveries kept for `recv_delivery` at most; while the application does
/// not take them, further deliveries stay in the endpoint (whose own
/// delivery queue is bounded by its configuration).
pub const APP_QUEUE_CAP: usize = 1 << 16;

/// Longest a confirmation is held back behind a delivery the application
/// has not taken yet (see [`CtpCore::defer`]).
pub const DEFER_MAX: std::time::Duration = std::time::Duration::from_micros(100);

/// Confirmations held at most (see [`CtpCore::hold`]): a frame's worth
/// (a 9000-byte frame has room for 359); beyond, the held ones are handed
/// to the endpoint first.
pub const HELD_MAX: usize = 360;

/// A confirmation that arrived in front of a data packet, kept for the
/// endpoint (see [`CtpCore::hold`]).
#[derive(Debug, Clone, Copy)]
struct Held<P> {
    /// When its frame arrived: the endpoint handles it as of then (its RTT
    /// sample is not lengthened by the hold).
    at: Instant,
    from: P,
    packet: [u8; CTP_HEADER_LEN],
}

/// Routes a delivery to its subscriber (or the default receiver); gives it
/// back when nobody subscribed, for the application queue.
pub(crate) type RouteFn<P> = Box<dyn FnMut(Delivery<P>) -> Option<Delivery<P>> + Send>;

/// The core. See the module documentation.
pub struct CtpCore<P: PeerAddr> {
    /// The protocol state machine.
    pub ep: Endpoint<P>,
    queue: VecDeque<Delivery<P>>,
    route: Option<RouteFn<P>>,
    /// The endpoint's next deadline, cached after each event (its
    /// `poll_timeout` discards stale timers and needs `&mut`).
    deadline: Option<Instant>,
    /// Transmission held back until then (see [`CtpCore::defer`]).
    pub(crate) deferred_until: Option<Instant>,
    /// Nonblocking polls that found nothing since the hold began or a poll
    /// last found something (see [`CtpCore::polled`]).
    idle_polls: u8,
    /// Received confirmations not yet handed to the endpoint, oldest first
    /// (see [`CtpCore::hold`]).
    held: Vec<Held<P>>,
    /// The protocol above CTP that consumes deliveries in the engine turn
    /// (`upper.rs`), if any.
    pub(crate) upper: Option<Box<dyn UpperLayer<P>>>,
}

impl<P: PeerAddr> CtpCore<P> {
    pub(crate) fn new(ep: Endpoint<P>) -> Self {
        Self {
            ep,
            queue: VecDeque::new(),
            route: None,
            deadline: None,
            deferred_until: None,
            idle_polls: 0,
            held: Vec::new(),
            upper: None,
        }
    }

    pub(crate) fn set_route(&mut self, route: RouteFn<P>) {
        self.route = Some(route);
    }

    /// Installs the upper layer and hands it the deliveries queued before
    /// it existed (no subscriber took them; at most [`APP_QUEUE_CAP`]), in
    /// arrival order; what it gives back stays queued for
    /// `recv_delivery`. Without this hand-over a message that a faster
    /// peer sent between this socket's bind and the installation would
    /// stay in the application queue, which nobody reads once an upper
    /// layer serves the socket: confirmed to its sender, never matched.
    pub(crate) fn install_upper(&mut self, upper: Box<dyn UpperLayer<P>>, now: Instant) {
        let early = std::mem::take(&mut self.queue);
        let u = self.upper.insert(upper);
        if !early.is_empty() {
            tracing::debug!(
                deliveries = early.len(),
                "ctp: deliveries that arrived before the upper layer handed to it"
            );
        }
        for d in early {
            if let Some(d) = u.on_delivery(&mut self.ep, now, d) {
                self.queue.push_back(d);
            }
        }
        self.after_event();
    }

    /// After a received packet queued a delivery for the application: hold
    /// what the endpoint has to send (the confirmation) for at most
    /// [`DEFER_MAX`], so the application gets its delivery one system call
    /// earlier and a reply it sends at once carries the confirmation (over
    /// EDP in the same frame, PROTOCOL.md "Confirmations share a frame";
    /// over UDP in the same batch). The application's next call, or the
    /// deadline, releases it.
    pub(crate) fn defer(&mut self, now: Instant) {
        if self.deferred_until.is_none() {
            self.deferred_until = Some(now + DEFER_MAX);
        }
        self.idle_polls = 0;
    }

    /// After a nonblocking poll of the application (`fi_cq_read`, a
    /// progress call) that `found` what it polled for or not: a poll is
    /// not a reply, so it ends a hold only when it is the second in a row
    /// to find nothing. The first empty poll after a delivery is usually
    /// the application draining its queue before it replies (Open MPI's
    /// progress reads the completion queue until it is empty), and ending
    /// the hold there sends the confirmation in a frame of its own, just
    /// before the reply that could have carried it; a second one means the
    /// application is waiting for something else. True if a hold ended
    /// (then there may be packets to send).
    pub(crate) fn polled(&mut self, found: bool) -> bool {
        if found || (self.deferred_until.is_none() && self.held.is_empty()) {
            self.idle_polls = 0;
            return false;
        }
        self.idle_polls = self.idle_polls.saturating_add(1);
        self.idle_polls >= 2 && self.resume()
    }

    /// Whether transmission is held back at `now`.
    pub(crate) fn holds(&self, now: Instant) -> bool {
        self.deferred_until.is_some_and(|t| now < t)
    }

    /// Releases a held transmission; true if one was held.
    pub(crate) fn release(&mut self) -> bool {
        self.deferred_until.take().is_some()
    }

    /// The application is back in the library: what was held for its last
    /// delivery goes on, the transmission ([`release`](Self::release)) and
    /// the received confirmations ([`settle`](Self::settle)); true if
    /// either was held (then there may be packets to send).
    pub(crate) fn resume(&mut self) -> bool {
        let released = self.release();
        self.settle() || released
    }

    /// Keeps a confirmation that came in front of a data packet (over EDP
    /// they share a frame: PROTOCOL.md "Confirmations share a frame") for
    /// the endpoint to handle after the data is delivered: the sender's
    /// bookkeeping (removing the confirmed message, the RTT sample, loss
    /// detection, releasing what the window lets through) then runs after
    /// the application has its delivery and, when it replies at once,
    /// after the reply left, instead of before either. Handed over by
    /// [`settle`](Self::settle): when the application is back in the
    /// library (its next call), before the next frame is handled (so the
    /// endpoint sees confirmations in arrival order), when more than
    /// [`HELD_MAX`] are held, and at the latest [`DEFER_MAX`] after the
    /// oldest arrived (a deadline). The endpoint handles each as of its
    /// arrival time. `packet` must be a whole confirmation (its header);
    /// false, and nothing held, otherwise.
    pub(crate) fn hold(&mut self, at: Instant, from: P, packet: &[u8]) -> bool {
        let Ok(packet) = <[u8; CTP_HEADER_LEN]>::try_from(packet) else {
            return false;
        };
        if self.held.len() >= HELD_MAX {
            self.settle();
        }
        self.held.push(Held { at, from, packet });
        true
    }

    /// Hands the held confirmations to the endpoint, in arrival order;
    /// true if there were any (the endpoint may then have packets to
    /// send: the window opened).
    pub(crate) fn settle(&mut self) -> bool {
        if self.held.is_empty() {
            return false;
        }
        for h in self.held.drain(..) {
            self.ep.handle_datagram(h.at, h.from, &h.packet);
        }
        self.after_event();
        true
    }

    /// After the endpoint changed: routes new deliveries and refreshes the
    /// cached deadline.
    /// With an upper layer, deliveries left by the subscribers go to it
    /// (while it accepts them), and it runs its `after_event`.
    pub(crate) fn after_event(&mut self) {
        let mut now = None;
        while self.queue.len() < APP_QUEUE_CAP {
            if self.upper.as_ref().is_some_and(|u| !u.accepts()) {
                break;
            }
            let Some(d) = self.ep.poll_delivery() else {
                break;
            };
            let d = match self.route.as_mut() {
                Some(r) => r(d),
                None => Some(d),
            };
            let d = match (d, self.upper.as_mut()) {
                (Some(d), Some(u)) => {
                    let t = *now.get_or_insert_with(link::time::now);
                    u.on_delivery(&mut self.ep, t, d)
                }
                (d, _) => d,
            };
            if let Some(d) = d {
                self.queue.push_back(d);
            }
        }
        if let Some(u) = self.upper.as_mut() {
            u.after_event(&mut self.ep, now.unwrap_or_else(link::time::now));
        }
        self.deadline = self.ep.poll_timeout();
    }

    /// A count that grows with every delivery the application gets (queued
    /// for it, or taken by the upper layer): compared before and after a
    /// received packet to decide whether to hold the transmission for the
    /// application's reply ([`CtpCore::defer`]).
    pub(crate) fn delivered(&self) -> u64 {
        self.queued() as u64 + self.upper.as_ref().map_or(0, |u| u.app_messages())
    }

    /// Whether the upper layer has news for a waiting caller (a delivery
    /// it consumed completed something), without clearing it.
    pub(crate) fn has_news(&self) -> bool {
        self.upper.as_ref().is_some_and(|u| u.has_news())
    }

    /// [`CtpCore::has_news`], clearing it; also whether a destination's
    /// unsent bytes fell below the mark a sender may wait for
    /// (`Endpoint::has_room_to`).
    pub(crate) fn take_news(&mut self) -> bool {
        let unsent = self.ep.take_unsent_news();
        self.upper.as_mut().is_some_and(|u| u.take_news()) || unsent
    }

    /// Fires the endpoint's timers if due, and ends a held transmission
    /// whose time is up.
    pub(crate) fn on_timeout(&mut self, now: Instant) {
        self.settle();
        if self.deferred_until.is_some_and(|t| t <= now) {
            self.deferred_until = None;
        }
        if self.deadline.is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        if let Some(u) = self.upper.as_mut() {
            if u.deadline().is_some_and(|t| t <= now) {
                u.on_timeout(&mut self.ep, now);
            }
        }
        self.after_event();
    }

    /// The next deadline (the endpoint's, the end of a held transmission,
    /// or the latest time to hand held confirmations over).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let held = self.held.first().map(|h| h.at + DEFER_MAX);
        let upper = self.upper.as_ref().and_then(|u| u.deadline());
        netcore::time::earliest(
            netcore::time::earliest(self.deadline, self.deferred_until),
            netcore::time::earliest(held, upper),
        )
    }

    /// The oldest delivery for the application.
    pub(crate) fn pop(&mut self) -> Option<Delivery<P>> {
        let d = self.queue.pop_front();
        if d.is_some() && self.queue.len() + 1 == APP_QUEUE_CAP {
            // Room again: take what waited in the endpoint.
            self.after_event();
        }
        d
    }

    /// Deliveries queued for the application.
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Readable while deliveries wait or the upper layer has news; writable while the sent-commands
    /// storage has room for a small message.
    pub(crate) fn readiness(&self) -> Ready {
        let mut r = Ready::NONE;
        if !self.queue.is_empty() || self.has_news() {
            r |= Ready::READABLE;
        }
        if self.ep.has_room(1) {
            r |= Ready::WRITABLE;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::endpoint::Config;
    use crate::wire::Options;

    /// A held confirmation changes nothing until it is handed over; then
    /// the endpoint handles it as of its arrival (the RTT sample is not
    /// lengthened by the hold). The latest hand-over is a deadline
    /// DEFER_MAX after the arrival; a malformed packet is not held.
    #[test]
    fn a_held_confirmation_is_handled_as_of_its_arrival_by_the_deadline() {
        let t0 = Instant::now();
        let ep = |seed| Endpoint::new(Config::default(), t0, SystemTime::UNIX_EPOCH, seed, None);
        let mut a: CtpCore<u8> = CtpCore::new(ep(1));
        let mut b = ep(2);
        let key = a.ep.send(t0, 1, 2, b"req", Options::NONE).unwrap();
        let mut buf = vec![0u8; a.ep.config().max_packet_len()];
        let t = a.ep.poll_transmit(&mut buf).unwrap();
        b.handle_datagram(t0, 1, &buf[..t.len]);
        let t = b.poll_transmit(&mut buf).unwrap();
        assert_eq!(t.len, CTP_HEADER_LEN, "a confirmation");
        let arrived = t0 + Duration::from_micros(30);
        assert!(!a.hold(arrived, 2, &buf[..t.len - 1]), "not a whole header");
        assert!(a.hold(arrived, 2, &buf[..t.len]));
        assert!(a.ep.is_pending(key), "held: not handled yet");
        assert_eq!(a.deadline(), Some(arrived + DEFER_MAX));
        a.on_timeout(arrived + DEFER_MAX);
        assert!(!a.ep.is_pending(key), "handed over at the deadline");
        assert_eq!(a.ep.peer_srtt(2), Some(Duration::from_micros(30)));
        assert!(!a.settle(), "nothing left");
        assert_ne!(a.deadline(), Some(arrived + DEFER_MAX));
    }
}
