//! The CTP core as both engines hold it: the sans-IO [`Endpoint`], the
//! deliveries waiting for the application, and the routing of deliveries
//! to subscribers (the spec's "subscribers" and "default receiver").

use std::collections::VecDeque;
use std::time::Instant;

use edp::runtime::Ready;

use crate::endpoint::{Delivery, Endpoint, PeerAddr};

/// Deliveries kept for `recv_delivery` at most; while the application does
/// not take them, further deliveries stay in the endpoint (whose own
/// delivery queue is bounded by its configuration).
pub const APP_QUEUE_CAP: usize = 1 << 16;

/// Longest a confirmation is held back behind a delivery the application
/// has not taken yet (see [`CtpCore::defer`]).
pub const DEFER_MAX: std::time::Duration = std::time::Duration::from_micros(100);

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
}

impl<P: PeerAddr> CtpCore<P> {
    pub(crate) fn new(ep: Endpoint<P>) -> Self {
        Self {
            ep,
            queue: VecDeque::new(),
            route: None,
            deadline: None,
            deferred_until: None,
        }
    }

    pub(crate) fn set_route(&mut self, route: RouteFn<P>) {
        self.route = Some(route);
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
    }

    /// Whether transmission is held back at `now`.
    pub(crate) fn holds(&self, now: Instant) -> bool {
        self.deferred_until.is_some_and(|t| now < t)
    }

    /// Releases a held transmission; true if one was held.
    pub(crate) fn release(&mut self) -> bool {
        self.deferred_until.take().is_some()
    }

    /// After the endpoint changed: routes new deliveries and refreshes the
    /// cached deadline.
    pub(crate) fn after_event(&mut self) {
        while self.queue.len() < APP_QUEUE_CAP {
            let Some(d) = self.ep.poll_delivery() else {
                break;
            };
            let d = match self.route.as_mut() {
                Some(r) => r(d),
                None => Some(d),
            };
            if let Some(d) = d {
                self.queue.push_back(d);
            }
        }
        self.deadline = self.ep.poll_timeout();
    }

    /// Fires the endpoint's timers if due, and ends a held transmission
    /// whose time is up.
    pub(crate) fn on_timeout(&mut self, now: Instant) {
        if self.deferred_until.is_some_and(|t| t <= now) {
            self.deferred_until = None;
        }
        if self.deadline.is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        self.after_event();
    }

    /// The next deadline (the endpoint's, or the end of a held
    /// transmission).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        netcore::time::earliest(self.deadline, self.deferred_until)
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

    /// Readable while deliveries wait; writable while the sent-commands
    /// storage has room for a small message.
    pub(crate) fn readiness(&self) -> Ready {
        let mut r = Ready::NONE;
        if !self.queue.is_empty() {
            r = r | Ready::READABLE;
        }
        if self.ep.has_room(1) {
            r = r | Ready::WRITABLE;
        }
        r
    }
}
