//! Event queues (fi_eq(3)): the provider's endpoints are connectionless
//! and insert addresses synchronously, so they report no events; what an
//! EQ holds is what the application writes with `fi_eq_write` (allowed
//! when it was opened with `FI_WRITE`), read back in order, with
//! `FI_PEEK` leaving the event in place. `fi_eq_sread` waits on a
//! condition variable until an event is written or its timeout passes.
//! Bounded: a full queue refuses writes (`FI_EAGAIN`).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{FiError, FiResult};
use crate::fi;

/// Events an EQ holds when opened with size 0.
pub const DEFAULT_EQ_SIZE: usize = 1024;

/// Most events an EQ holds, whatever size is asked.
pub const MAX_EQ_SIZE: usize = 1 << 16;

/// Largest event a write may carry, bytes (an `fi_eq_cm_entry` with its
/// connection data is far smaller).
pub const MAX_EQ_EVENT: usize = 4096;

/// One event: its type (`FI_NOTIFY`, ...) and the caller's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event type.
    pub event: u32,
    /// The event's data, as written.
    pub data: Vec<u8>,
}

/// An event queue. See the module documentation.
#[derive(Debug)]
pub struct EventQueue {
    capacity: usize,
    writable: bool,
    queue: Mutex<VecDeque<Event>>,
    written: Condvar,
}

impl EventQueue {
    /// A queue of `size` events (0: [`DEFAULT_EQ_SIZE`]; at most
    /// [`MAX_EQ_SIZE`]); `writable` when opened with `FI_WRITE`.
    pub fn new(size: usize, writable: bool) -> Self {
        let capacity = if size == 0 { DEFAULT_EQ_SIZE } else { size }.min(MAX_EQ_SIZE);
        EventQueue {
            capacity,
            writable,
            queue: Mutex::new(VecDeque::new()),
            written: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Event>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `fi_eq_write`: appends `event` with `data`; returns its length.
    ///
    /// Errors: `FI_EINVAL` when the queue was not opened with `FI_WRITE`
    /// or `data` exceeds [`MAX_EQ_EVENT`]; `FI_EAGAIN` when it is full.
    pub fn write(&self, event: u32, data: &[u8]) -> FiResult<usize> {
        if !self.writable {
            return Err(FiError::inval(
                "fi_eq_write on an event queue opened without FI_WRITE",
            ));
        }
        if data.len() > MAX_EQ_EVENT {
            return Err(FiError::inval(format!(
                "event of {} bytes: at most {MAX_EQ_EVENT}",
                data.len()
            )));
        }
        let mut q = self.lock();
        if q.len() >= self.capacity {
            return Err(FiError::again(format!(
                "event queue full ({} events)",
                self.capacity
            )));
        }
        q.push_back(Event {
            event,
            data: data.to_vec(),
        });
        drop(q);
        self.written.notify_all();
        Ok(data.len())
    }

    /// `fi_eq_read` (`wait` `None`) and `fi_eq_sread` (`Some(timeout)`,
    /// `Some(None)`: without limit): the oldest event, if its data fits
    /// `room` bytes; removed unless `peek`.
    ///
    /// Errors: `FI_EAGAIN` when there is none (after waiting);
    /// `FI_ETOOSMALL` when the oldest does not fit `room`.
    pub fn read(&self, room: usize, peek: bool, wait: Option<Option<Duration>>) -> FiResult<Event> {
        let deadline = wait.map(|t| t.map(|d| Instant::now() + d));
        let mut q = self.lock();
        loop {
            if let Some(e) = q.front() {
                if e.data.len() > room {
                    return Err(FiError::new(
                        fi::FI_ETOOSMALL,
                        format!("event of {} bytes, buffer of {room}", e.data.len()),
                    ));
                }
                let e = if peek {
                    e.clone()
                } else {
                    q.pop_front().expect("front exists")
                };
                return Ok(e);
            }
            let empty = || FiError::again("no event");
            q = match deadline {
                None => return Err(empty()),
                Some(None) => self.written.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some(Some(d)) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(empty());
                    }
                    self.written
                        .wait_timeout(q, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_back_in_order_and_peek_leaves_them() {
        let eq = EventQueue::new(4, true);
        for i in 0..4u8 {
            assert_eq!(eq.write(fi::FI_NOTIFY, &[i; 16]).unwrap(), 16);
        }
        assert_eq!(eq.write(1, &[0]).unwrap_err().code, fi::FI_EAGAIN);
        for i in 0..4u8 {
            assert_eq!(eq.read(16, true, None).unwrap().data, [i; 16]);
            assert_eq!(eq.read(16, false, None).unwrap().data, [i; 16]);
        }
        assert_eq!(eq.read(16, false, None).unwrap_err().code, fi::FI_EAGAIN);
    }

    #[test]
    fn small_buffers_and_unwritable_queues_are_refused() {
        let eq = EventQueue::new(0, true);
        eq.write(1, &[0; 24]).unwrap();
        assert_eq!(eq.read(8, false, None).unwrap_err().code, fi::FI_ETOOSMALL);
        assert_eq!(eq.read(24, false, None).unwrap().event, 1);
        let ro = EventQueue::new(0, false);
        assert_eq!(ro.write(1, &[]).unwrap_err().code, fi::FI_EINVAL);
        assert_eq!(
            eq.write(1, &[0; MAX_EQ_EVENT + 1]).unwrap_err().code,
            fi::FI_EINVAL
        );
    }

    #[test]
    fn sread_waits_for_its_timeout_or_an_event() {
        let eq = std::sync::Arc::new(EventQueue::new(8, true));
        let t = Instant::now();
        let e = eq.read(64, false, Some(Some(Duration::from_millis(200))));
        assert_eq!(e.unwrap_err().code, fi::FI_EAGAIN);
        assert!(t.elapsed() >= Duration::from_millis(200));
        let w = eq.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.write(7, b"event").unwrap();
        });
        let e = eq.read(64, false, Some(None)).unwrap();
        assert_eq!((e.event, e.data.as_slice()), (7, &b"event"[..]));
        writer.join().unwrap();
    }
}
