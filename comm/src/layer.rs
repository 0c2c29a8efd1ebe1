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
        netcore::in_span!(self, self.on_delivery(d));
        None
    }

    fn after_event(&mut self, ep: &mut Endpoint<A>, now: Instant) {
        netcore::in_span!(self, {
            self.pump_held();
            if self.pump_due(ep) {
                self.pump_sends(ep, now);
            }
        })
    }

    fn deadline(&self) -> Option<Instant> {
        if self.waiting > 0 {
            self.liveness_next_check()
        } else {
            None
        }
    }

    fn on_timeout(&mut self, _ep: &mut Endpoint<A>, now: Instant) {
        netcore::in_span!(self, self.liveness_tick(now))
    }

    fn app_messages(&self) -> u64 {
        self.app_messages
    }

    fn has_news(&self) -> bool {
        self.news
    }

    fn take_news(&mut self) -> bool {
        std::mem::take(&mut self.news)
    }
}

/// The work of every call and wait step on the state: the failure
/// detector's check if due, held messages into matching, confirmed
/// fragments forgotten and the next ones handed to CTP.
pub(crate) fn step<A: PeerAddr>(st: &mut State<A>, ep: &mut Endpoint<A>, now: Instant) {
    st.liveness_tick(now);
    st.pump_held();
    if st.pump_due(ep) {
        st.pump_sends(ep, now);
    }
}

/// Waits through the runtime driver's one wait until `check` (run after
/// [`step`], in the state's span) gives a value; while the caller is
/// blocked the failure detector also runs on the layer's timer
/// (`State::waiting`).
///
/// Errors: `TimedOut` after `timeout`; link errors.
pub(crate) fn block<T: ctp::Transport, R>(
    sock: &ctp::CtpSocket<T>,
    timeout: Option<std::time::Duration>,
    what: &str,
    mut check: impl FnMut(&mut State<T::Addr>) -> Option<R>,
) -> std::io::Result<R> {
    let mut counted = false;
    let mut wake = |st: &mut State<T::Addr>, ep: &mut Endpoint<T::Addr>, now| {
        // Done already (nothing else to do), or after a step.
        let done = check(st).or_else(|| {
            step(st, ep, now);
            check(st)
        });
        // The count changes under this lock: no call of its own (which
        // would also release the transmission held for the caller's
        // reply, `ctp::CtpSocket::with_upper`).
        match (&done, counted) {
            (Some(_), true) => {
                st.waiting -= 1;
                counted = false;
            }
            (None, false) => {
                st.waiting += 1;
                counted = true;
            }
            _ => {}
        }
        done
    };
    let r = sock.wait_upper(
        runtime::Deadline::from_timeout(timeout),
        what,
        |st: &mut State<T::Addr>, ep, now| netcore::in_span!(st, wake(st, ep, now)),
    );
    if counted {
        // Timed out or failed while counted.
        sock.with_upper(|st: &mut State<T::Addr>, _, _| st.waiting -= 1);
    }
    r
}

/// One nonblocking turn of the engine with `check` run before and after
/// it, in the state's span; `None` when it gave nothing.
///
/// Errors: link errors.
pub(crate) fn turn<T: ctp::Transport, R>(
    sock: &ctp::CtpSocket<T>,
    mut check: impl FnMut(&mut State<T::Addr>) -> Option<R>,
) -> std::io::Result<Option<R>> {
    match sock.wait_upper(
        runtime::Deadline::Now,
        "comm progress",
        |st: &mut State<T::Addr>, ep, now| {
            netcore::in_span!(st, {
                step(st, ep, now);
                check(st)
            })
        },
    ) {
        Ok(r) => Ok(Some(r)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}
