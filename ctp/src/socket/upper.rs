//! An upper layer inside the CTP core: a protocol above CTP (the `comm`
//! crate's matching, per-peer order and flow control) whose state lives in
//! the engine slot beside the endpoint, so deliveries are consumed inside
//! the engine turn that produced them (no queue, no thread hand-off, no
//! lock of its own) and its handles wait through the runtime driver's one
//! wait ([`CtpSocket::wait_upper`](super::CtpSocket::wait_upper)).
//!
//! Deliveries go to subscribers and the default handler first; what they
//! leave goes to the upper layer, and what it gives back to the queue of
//! `recv_delivery`. While it does not accept deliveries
//! ([`UpperLayer::accepts`]: its own queues are full) they stay in the
//! endpoint, whose delivery queue is bounded (CTP's flow control then makes
//! the senders wait).

use std::any::Any;
use std::time::Instant;

use crate::endpoint::{Delivery, Endpoint, PeerAddr};

/// A protocol layer above CTP living in the CTP core (see the module
/// documentation). Every method runs under the engine lock, by whichever
/// thread drives the engine: a caller waiting or making progress, or the
/// runtime's service thread (auto progress).
pub trait UpperLayer<P: PeerAddr>: Any + Send {
    /// Whether it takes deliveries now (false while its own bounded
    /// queues are full).
    fn accepts(&self) -> bool {
        true
    }

    /// Takes a delivery; gives it back when it is not its own (it then
    /// queues for `recv_delivery`).
    fn on_delivery(
        &mut self,
        ep: &mut Endpoint<P>,
        now: Instant,
        d: Delivery<P>,
    ) -> Option<Delivery<P>>;

    /// After every event of the endpoint (frames, timers, a handle's call):
    /// forget confirmed messages, hand the endpoint what may go now.
    fn after_event(&mut self, ep: &mut Endpoint<P>, now: Instant);

    /// When [`UpperLayer::on_timeout`] must run next, if ever.
    fn deadline(&self) -> Option<Instant> {
        None
    }

    /// Its timer is due.
    fn on_timeout(&mut self, ep: &mut Endpoint<P>, now: Instant) {
        let _ = (ep, now);
    }

    /// How many messages for the application it has taken, ever (a count
    /// that only grows; not its own control traffic): after a packet that
    /// raised it, the core holds its transmission briefly so that the
    /// application's reply carries the confirmation (`CtpCore::defer`).
    fn app_messages(&self) -> u64;

    /// Whether something a waiting caller may want (a completion) happened
    /// since [`UpperLayer::take_news`] last ran.
    fn has_news(&self) -> bool;

    /// [`UpperLayer::has_news`], clearing it.
    fn take_news(&mut self) -> bool;
}
