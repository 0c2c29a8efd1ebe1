//! Counters (fi_cntr(3)): a count of completed operations and a count of
//! failed ones, which callers read, add to, set and wait on.
//!
//! What moves them here: `fi_cntr_add` / `fi_cntr_set` (and their error
//! twins) of the application, and nothing else. The endpoints take a
//! counter only for events they never have (RMA reads and writes:
//! fi_ep_bind with FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE;
//! the endpoints offer no FI_RMA), and refuse it for sends and receives,
//! so every count a counter shows is exact. MPICH's ch4 ofi netmod opens
//! one counter per domain and binds it to its endpoint for FI_READ |
//! FI_WRITE whatever the provider offers (src/mpid/ch4/netmod/ofi/
//! ofi_init.c, `create_vci_domain`); it counts RMA only when the provider
//! has FI_RMA.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The two counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    value: u64,
    errors: u64,
}

/// A counter: its counts, and the waiters of `fi_cntr_wait`.
#[derive(Debug, Default)]
pub struct Cntr {
    counts: Mutex<Counts>,
    changed: Condvar,
}

/// How `fi_cntr_wait` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The count reached the threshold.
    Reached,
    /// The error count changed first (FI_EAVAIL).
    Error,
    /// The timeout passed first (FI_ETIMEDOUT).
    TimedOut,
}

impl Cntr {
    /// A counter at 0 with no errors.
    pub fn new() -> Cntr {
        Cntr::default()
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the counts with `f` and wakes the waiters.
    fn update(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self.counts());
        self.changed.notify_all();
    }

    /// `fi_cntr_read`: the count.
    pub fn read(&self) -> u64 {
        self.counts().value
    }

    /// `fi_cntr_readerr`: the error count.
    pub fn read_err(&self) -> u64 {
        self.counts().errors
    }

    /// `fi_cntr_add` (wrapping at 2^64, `max_cntr_value`).
    pub fn add(&self, n: u64) {
        self.update(|c| c.value = c.value.wrapping_add(n));
    }

    /// `fi_cntr_set`.
    pub fn set(&self, n: u64) {
        self.update(|c| c.value = n);
    }

    /// `fi_cntr_adderr`.
    pub fn add_err(&self, n: u64) {
        self.update(|c| c.errors = c.errors.wrapping_add(n));
    }

    /// `fi_cntr_seterr`.
    pub fn set_err(&self, n: u64) {
        self.update(|c| c.errors = n);
    }

    /// `fi_cntr_wait`: until the count is at least `threshold`, the error
    /// count changes, or `timeout` (None: no limit) passes.
    pub fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Waited {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut c = self.counts();
        let errors = c.errors;
        loop {
            if c.value >= threshold {
                return Waited::Reached;
            }
            if c.errors != errors {
                return Waited::Error;
            }
            c = match deadline {
                None => self.changed.wait(c).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Waited::TimedOut;
                    }
                    self.changed
                        .wait_timeout(c, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests;
