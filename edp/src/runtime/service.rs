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

use super::config::Progress;
use super::driver::{drain, sleep_on, Driver, Engine};

/// Polling period of idle progress over links without a descriptor
/// (in-memory links used with real threads, in tests).
const FDLESS_POLL: std::time::Duration = std::time::Duration::from_micros(200);

/// Timer slack of the service thread, ns: its sleeps end within 1 us of
/// the deadline (the kernel's default slack is 50 us).
const TIMER_SLACK_NS: u64 = 1_000;

/// Starts the service thread of `driver`.
///
/// Errors: thread spawn errors.
pub(crate) fn spawn<E: Engine>(driver: &Arc<Driver<E>>, name: String) -> io::Result<()> {
    let weak = Arc::downgrade(driver);
    let wake = driver.svc_wake.clone();
    let link = driver
        .link_fd()
        .map(|fd| fd.try_clone())
        .transpose()
        .map_err(|e| io::Error::other(format!("dup of the link descriptor: {e}")))?;
    let progress = driver.progress;
    let span = tracing::debug_span!("runtime-service", name = %name);
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let _enter = span.enter();
            if let Err(e) = crate::privilege::drop_capabilities() {
                tracing::debug!(error = %e, "service thread: could not drop capabilities");
            }
            if let Err(e) = nix::sys::prctl::set_timerslack(TIMER_SLACK_NS as _) {
                tracing::debug!(error = %e, "service thread: timer slack");
            }
            loop {
                let Some(d) = weak.upgrade() else {
                    return;
                };
                let mut g = d.lock();
                if Driver::is_shutdown(&g) {
                    return;
                }
                let now = Instant::now();
                let (caller_leads, mut polling, last_caller) = Driver::svc_state(&g);
                let due = g.engine.next_deadline().is_some_and(|t| t <= now);
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
                    if caller_leads {
                        // Look again later: when the caller leaves, what it
                        // left due (a delayed ACK) is ours within `after`.
                        check_at = Some(now + after);
                    } else {
                        let idle_from = last_caller + after;
                        if now >= idle_from {
                            polling = Driver::svc_take_link(&mut g);
                            if polling && link.is_none() {
                                // An in-memory link has no descriptor to
                                // sleep on: poll it periodically.
                                check_at = Some(now + FDLESS_POLL);
                            }
                        } else {
                            check_at = Some(idle_from);
                        }
                    }
                }
                if caller_leads {
                    polling = false;
                }
                if !polling {
                    Driver::svc_release_link(&mut g);
                }
                let target = netcore::time::earliest(g.engine.next_deadline(), check_at);
                Driver::svc_set_target(&mut g, target);
                drop(g);
                drop(d);
                let r = match (&link, polling) {
                    (Some(l), true) => sleep_on(&[wake.as_fd(), l.as_fd()], target),
                    _ => sleep_on(&[wake.as_fd()], target),
                };
                if let Err(e) = r {
                    tracing::warn!(error = %e, "service thread: ppoll");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                drain(&wake);
            }
        })?;
    Ok(())
}
