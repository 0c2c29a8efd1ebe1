//! The service thread of a runtime: the one deadline mechanism, the
//! lingering-close service, and asynchronous progress while no caller
//! waits.
//!
//! It sleeps in ppoll(2) until the engine's earliest deadline (or until
//! poked because an earlier one appeared), fires what is due and sends what
//! that produced. Deadlines mostly move later in steady state (every ACK
//! restarts the RTO), so it wakes about once per RTO period, off the data
//! path. When no caller has led the runtime for the idle time of
//! [`Progress::WhenIdle`], it also polls the link itself (taking the leader
//! role) so that ACKs, confirmations, echo replies and retransmissions
//! continue while the application computes; a caller that starts waiting
//! takes the link back at once (it pokes this thread).
//!
//! It drops every capability when it starts (capabilities are per thread;
//! the socket was opened by the caller), holds only a weak reference to its
//! runtime between turns, and exits when the runtime is dropped.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use crate::config::Progress;
use crate::driver::{drain, sleep_on, Driver, Engine, ERROR_BIT};

/// Polling period of idle progress over links without a descriptor
/// (in-memory links used with real threads, in tests).
const FDLESS_POLL: std::time::Duration = std::time::Duration::from_micros(200);

/// Longest time between two looks of the service thread while callers keep
/// leading the link: after a caller leaves, its leftovers (a delayed ACK, a
/// retransmission) wait at most this long, and link polling for an absent
/// application starts within this long.
const MAX_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_millis(16);

/// Timer slack of the service thread, ns: its sleeps end within 1 us of
/// the deadline (the kernel's default slack is 50 us).
const TIMER_SLACK_NS: u64 = 1_000;

/// Starts the service thread of `driver`.
///
/// Errors: thread spawn errors.
pub(crate) fn spawn<E: Engine>(
    driver: &Arc<Driver<E>>,
    name: String,
) -> io::Result<std::thread::JoinHandle<()>> {
    let weak = Arc::downgrade(driver);
    let wake = driver.svc_wake.clone();
    let link = driver
        .link_fd()
        .map(|fd| fd.try_clone())
        .transpose()
        .map_err(|e| io::Error::other(format!("dup of the link descriptor: {e}")))?;
    let progress = driver.progress;
    let span = tracing::debug_span!("runtime-service", name = %name);
    std::thread::Builder::new().name(name).spawn(move || {
        let _enter = span.enter();
        if let Err(e) = link::drop_capabilities() {
            tracing::debug!(error = %e, "service thread: could not drop capabilities");
        }
        if let Err(e) = nix::sys::prctl::set_timerslack(TIMER_SLACK_NS as _) {
            tracing::debug!(error = %e, "service thread: timer slack");
        }
        let mut period = match progress {
            Progress::WhenIdle { after } => after,
            Progress::Callers => MAX_CHECK_PERIOD,
        };
        loop {
            let Some(d) = weak.upgrade() else {
                return;
            };
            let Some(mut g) = d.try_lock() else {
                // A caller holds the engine (a spinning leader, or one
                // at work): it keeps the link and the deadlines. Look
                // again later, less often while this lasts.
                drop(d);
                if let Ok(m) = sleep_on(&[wake.as_fd()], Some(Instant::now() + period)) {
                    if m & 1 != 0 {
                        drain(&wake);
                    }
                }
                period = (period * 2).min(MAX_CHECK_PERIOD);
                continue;
            };
            if Driver::is_shutdown(&g) {
                return;
            }
            let now = Instant::now();
            let (caller_leads, caller_awake, mut polling, last_caller) = Driver::svc_state(&g);
            let due = !caller_awake && g.engine.next_deadline().is_some_and(|t| t <= now);
            let r = if polling {
                g.engine.poll(now, None).map(|_| ())
            } else if due {
                g.engine.on_deadline(now)
            } else {
                Ok(())
            };
            if let Err(e) = r {
                tracing::warn!(error = %e, "service thread: link error");
            }
            d.notify(&mut g);
            let mut check_at = None;
            if let Progress::WhenIdle { after } = progress {
                if caller_leads || now < last_caller + after {
                    // Look again later: when the caller leaves, what it
                    // left due (a delayed ACK) is ours. While callers
                    // keep leading, look less and less often (up to
                    // MAX_CHECK_PERIOD): a thread that busy-polls must
                    // not be preempted every `after` for nothing.
                    check_at = Some(now + period);
                    period = (period * 2).min(MAX_CHECK_PERIOD.max(after));
                } else {
                    // No caller for `after`: poll the link for them.
                    period = after;
                    polling = Driver::svc_take_link(&mut g);
                    if polling && link.is_none() {
                        // An in-memory link has no descriptor to
                        // sleep on: poll it periodically.
                        check_at = Some(now + FDLESS_POLL);
                    }
                }
            }
            if caller_leads {
                polling = false;
            }
            if !polling {
                Driver::svc_release_link(&mut g);
            }
            // An awake leader keeps the deadlines itself (a spinning
            // one checks them between spins; one about to sleep hands
            // them over): waking for them would only steal its CPU.
            let deadline = if caller_awake {
                None
            } else {
                g.engine.next_deadline()
            };
            let target = netcore::time::earliest(deadline, check_at);
            Driver::svc_set_target(&mut g, target);
            drop(g);
            drop(d);
            let r = match (&link, polling) {
                (Some(l), true) => sleep_on(&[wake.as_fd(), l.as_fd()], target),
                _ => sleep_on(&[wake.as_fd()], target),
            };
            if matches!(r, Ok(m) if m & (ERROR_BIT << 1) != 0) {
                // The link reported an error (its interface went down or
                // away): let it read the error, or ppoll returns at once
                // forever.
                if let Some(d) = weak.upgrade() {
                    let mut g = d.lock();
                    g.engine.on_link_error(Instant::now());
                    d.notify(&mut g);
                }
            }
            match r {
                Ok(m) if m & 1 != 0 => drain(&wake),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "service thread: ppoll");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    })
}
