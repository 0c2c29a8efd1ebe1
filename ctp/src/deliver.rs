//! The deliverers (CTP spec v1.2, "Threads"): a bounded pool of handler
//! threads. A new thread is started when a delivery is waiting and every
//! existing deliverer is busy, up to a maximum (spec default 50); idle
//! deliverers exit after a while.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long an idle deliverer waits for work before exiting.
pub const DELIVERER_IDLE_EXIT: Duration = Duration::from_secs(20);

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    busy: usize,
    shutdown: bool,
}

/// A bounded, growing pool of deliverer threads.
pub struct DelivererPool {
    st: Mutex<State>,
    cv: Condvar,
    max: usize,
}

impl std::fmt::Debug for DelivererPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (threads, busy, queued) = self.counts();
        f.debug_struct("DelivererPool")
            .field("max", &self.max)
            .field("threads", &threads)
            .field("busy", &busy)
            .field("queued", &queued)
            .finish()
    }
}

impl DelivererPool {
    /// A pool of at most `max` threads (at least 1).
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            st: Mutex::new(State::default()),
            cv: Condvar::new(),
            max: max.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job`; starts a deliverer if all are busy and the maximum is
    /// not reached. If no thread can be started and none exists, the job runs
    /// on the calling thread (so no delivery is ever stranded).
    pub fn submit(self: &Arc<Self>, job: Job) {
        let mut st = self.lock();
        st.jobs.push_back(job);
        if st.idle == 0 && st.threads < self.max {
            st.threads += 1;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("ctp-deliverer".into())
                .spawn(move || me.worker());
            if let Err(e) = spawned {
                st.threads -= 1;
                tracing::warn!(error = %e, "ctp: cannot start a deliverer thread");
                if st.threads == 0 {
                    let job = st.jobs.pop_back().expect("just pushed");
                    drop(st);
                    job();
                }
            }
        } else {
            self.cv.notify_one();
        }
    }

    fn worker(self: Arc<Self>) {
        // Capabilities belong to threads: a deliverer started by a caller
        // that still held CAP_NET_RAW would keep it after the program
        // dropped its own (docs/DECISIONS.md). Handlers need none: sockets
        // are opened before they run.
        if let Err(e) = link::drop_capabilities() {
            tracing::debug!(error = %e, "ctp deliverer: could not drop capabilities");
        }
        let mut st = self.lock();
        loop {
            while st.jobs.is_empty() {
                if st.shutdown {
                    st.threads -= 1;
                    return;
                }
                st.idle += 1;
                let (g, to) = self
                    .cv
                    .wait_timeout(st, DELIVERER_IDLE_EXIT)
                    .unwrap_or_else(|e| e.into_inner());
                st = g;
                st.idle -= 1;
                if to.timed_out() && st.jobs.is_empty() {
                    st.threads -= 1;
                    return;
                }
            }
            let job = st.jobs.pop_front().expect("not empty");
            st.busy += 1;
            drop(st);
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                tracing::error!("ctp: a delivery handler panicked; the deliverer goes on");
            }
            st = self.lock();
            st.busy -= 1;
        }
    }

    /// (threads alive, threads busy, jobs queued).
    pub fn counts(&self) -> (usize, usize, usize) {
        let st = self.lock();
        (st.threads, st.busy, st.jobs.len())
    }

    /// Lets idle deliverers exit; queued jobs still run.
    pub fn shutdown(&self) {
        self.lock().shutdown = true;
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    #[test]
    fn grows_to_max_and_runs_everything() {
        let pool = DelivererPool::new(3);
        let done = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Barrier::new(4));
        for _ in 0..3 {
            let (d, g) = (done.clone(), gate.clone());
            pool.submit(Box::new(move || {
                g.wait();
                d.fetch_add(1, Ordering::SeqCst);
            }));
        }
        // three blocked handlers: the pool is at its maximum
        for _ in 0..5 {
            let d = done.clone();
            pool.submit(Box::new(move || {
                d.fetch_add(1, Ordering::SeqCst);
            }));
        }
        let (threads, _, queued) = pool.counts();
        assert_eq!(threads, 3);
        assert!(queued >= 5);
        gate.wait();
        while done.load(Ordering::SeqCst) < 8 {
            std::thread::yield_now();
        }
        pool.submit(Box::new(|| panic!("handler bug")));
        let d = done.clone();
        pool.submit(Box::new(move || {
            d.fetch_add(1, Ordering::SeqCst);
        }));
        while done.load(Ordering::SeqCst) < 9 {
            std::thread::yield_now();
        }
        pool.shutdown();
    }
}
