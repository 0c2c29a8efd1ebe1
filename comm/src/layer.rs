//! The communicator's state as CTP's upper layer (`ctp::UpperLayer`): it
//! lives in the CTP core, in the engine slot beside the endpoint, so a
//! delivery reaches matching inside the engine turn that received its
//! frame, whichever thread runs that turn (a waiting caller, a caller's
//! progress step, or the runtime's service thread while nobody calls), and
//! the handles ([`Communicator`](crate::Communicator), the tagged endpoint)
//! wait through the runtime driver's one wait with the engine lock as the
//! only lock.
//!
//! Inside every event of the endpoint: in-order messages move into
//! matching (held ones first, as receives make room), confirmed fragments
//! are forgotten and the windows let the next ones go. The failure
//! detector's checks run inside calls, and on the engine's timer while a
//! caller is blocked in a wait (`State::waiting`): never while the
//! application computes outside the library (`liveness.rs`).

use std::any::Any;
use std::time::Instant;

use ctp::{Delivery, Endpoint, PeerAddr, UpperLayer};

use crate::state::State;

impl<A: PeerAddr> UpperLayer<A> for State<A> {
    fn accepts(&self) -> bool {
        !self.holding()
    }

    fn on_delivery(
        &mut self,
        _ep: &mut Endpoint<A>,
        _now: Instant,
        d: Delivery<A>,
    ) -> Option<Delivery<A>> {
        // Every delivery is the communicator's: foreign commands are
        // counted and dropped there.
        self.on_delivery(d);
        None
    }

    fn after_event(&mut self, ep: &mut Endpoint<A>, now: Instant) {
        self.pump_held();
        if self.has_work_for_ctp() {
            self.pump_sends(ep, now);
        }
    }

    fn deadline(&self) -> Option<Instant> {
        if self.waiting > 0 {
            self.liveness_next_check()
        } else {
            None
        }
    }

    fn on_timeout(&mut self, _ep: &mut Endpoint<A>, now: Instant) {
        self.liveness_tick(now);
    }

    fn has_news(&self) -> bool {
        self.news
    }

    fn take_news(&mut self) -> bool {
        std::mem::take(&mut self.news)
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
