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
}

impl<P: PeerAddr> CtpCore<P> {
    pub(crate) fn new(ep: Endpoint<P>) -> Self {
        Self {
            ep,
            queue: VecDeque::new(),
            route: None,
            deadline: None,
        }
    }

    pub(crate) fn set_route(&mut self, route: RouteFn<P>) {
        self.route = Some(route);
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

    /// Fires the endpoint's timers if due.
    pub(crate) fn on_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        self.after_event();
    }

    /// The next deadline.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
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
