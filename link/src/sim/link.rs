//! [`SimLink`]: one end of an in-memory link, and its [`Link`] impl.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::segment::{make_links, Segment, Topology};
use super::{invalid, SimClock, SimControl, SimOptions};
use crate::eth::{MacAddr, ETH_HEADER_LEN};
use crate::fault::{FaultConfig, FaultStats};
use crate::Link;

/// Counters of one sim port, in frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimLinkStats {
    /// Frames accepted by `send` (before faults).
    pub sent: u64,
    /// Frames returned by `recv`.
    pub received: u64,
    /// `send` calls rejected with `InvalidInput`: larger than `mtu + 14` bytes.
    pub oversize: u64,
    /// `send` calls rejected with `InvalidInput`: shorter than the 14-byte
    /// Ethernet header.
    pub runt: u64,
    /// `send` calls refused with `WouldBlock` because the receiving port's
    /// queue was full.
    pub would_block: u64,
    /// Frames sent by this port that no port takes (switch: unicast to an
    /// unknown MAC or to the sender's own MAC, multicast no other port joined).
    pub unroutable: u64,
    /// Frames for this port tail-dropped because its receive queue was full.
    pub queue_dropped: u64,
    /// Frames returned by `recv` truncated to the caller's buffer.
    pub truncated: u64,
    /// Frames (or copies of a group frame) sent by this port that were lost
    /// because this port or the receiving port was down.
    pub partitioned: u64,
}

/// One end of an in-memory link (a [`SimLink::pair`] end or a
/// [`SimSwitch`](super::SimSwitch) port).
///
/// Frames sent become receivable at the far end(s) once the clock reaches
/// their delivery instant, after the fault injector of the sending port
/// decided their fate. MAC address `02:00:00:00:HH:LL` where `HHLL` is the port
/// index + 1 (so `02:00:00:00:00:01` and `02:00:00:00:00:02` for a pair).
/// Implements [`Link`]: `recv` returns `WouldBlock` when nothing is due;
/// `poll_at` is [`SimLink::next_delivery`]; `join_group` / `leave_group`
/// decide which multicast frames a switch port receives.
pub struct SimLink {
    segment: Arc<Mutex<Segment>>,
    index: usize,
    mac: MacAddr,
    mtu: usize,
    clock: SimClock,
}

impl fmt::Debug for SimLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLink")
            .field("index", &self.index)
            .field("mac", &self.mac)
            .field("mtu", &self.mtu)
            .finish_non_exhaustive()
    }
}

impl SimLink {
    pub(crate) fn new(
        segment: Arc<Mutex<Segment>>,
        index: usize,
        mac: MacAddr,
        mtu: usize,
        clock: SimClock,
    ) -> Self {
        Self {
            segment,
            index,
            mac,
            mtu,
            clock,
        }
    }

    /// Two connected ends on `clock` with link MTU `mtu` bytes. `a_to_b`
    /// applies to frames the first end sends, `b_to_a` to the second's. The
    /// generator seed of each direction is derived from its config's seed and
    /// the direction, so one config used for both directions still gives
    /// independent fates.
    ///
    /// Panics if a config is invalid (see [`FaultConfig::validate`]).
    pub fn pair(
        clock: &SimClock,
        mtu: usize,
        a_to_b: FaultConfig,
        b_to_a: FaultConfig,
    ) -> (SimLink, SimLink) {
        Self::pair_with(
            clock,
            SimOptions {
                mtu,
                ..SimOptions::default()
            },
            a_to_b,
            b_to_a,
        )
    }

    /// Like [`SimLink::pair`] with all [`SimOptions`].
    pub fn pair_with(
        clock: &SimClock,
        opts: SimOptions,
        a_to_b: FaultConfig,
        b_to_a: FaultConfig,
    ) -> (SimLink, SimLink) {
        let mut v = make_links(clock, Topology::Pair, opts, vec![a_to_b, b_to_a]);
        let b = v.pop().expect("two ends");
        let a = v.pop().expect("two ends");
        (a, b)
    }

    fn lock(&self) -> MutexGuard<'_, Segment> {
        // A panic in another thread while holding the lock leaves the queues
        // consistent (every mutation is a single push/pop), so keep going.
        self.segment.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Earliest delivery instant of a frame waiting for this end (due or not);
    /// also returned by `poll_at()`.
    pub fn next_delivery(&self) -> Option<Instant> {
        self.lock().ports[self.index].inbox.next_at()
    }

    /// Fault counters of the direction this end sends on.
    pub fn fault_stats(&self) -> FaultStats {
        self.lock().ports[self.index].injector.stats().clone()
    }

    /// Counters of this port.
    pub fn stats(&self) -> SimLinkStats {
        self.lock().ports[self.index].stats.clone()
    }

    /// Frames waiting for this end (due or not).
    pub fn pending(&self) -> usize {
        self.lock().ports[self.index].inbox.len()
    }

    /// Index of this port on its segment (0 and 1 for a pair).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The clock this link reads.
    pub fn clock(&self) -> &SimClock {
        &self.clock
    }

    /// A handle on this link's segment for the simulation driver: pull
    /// cables (partitions) and change faults mid-run while the links
    /// themselves are owned by the endpoints under test.
    pub fn control(&self) -> SimControl {
        SimControl {
            segment: self.segment.clone(),
        }
    }

    /// The next due frame, removed from the inbox and counted.
    fn pop_due(&self) -> Option<Vec<u8>> {
        let now = self.clock.now();
        let mut seg = self.lock();
        let port = &mut seg.ports[self.index];
        let bytes = port.inbox.pop_due(now)?;
        port.stats.received += 1;
        Some(bytes)
    }
}

fn no_frame() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "no sim frame due")
}

impl Link for SimLink {
    /// Sends one frame through this port's faults.
    ///
    /// Errors: `InvalidInput` for a frame larger than `mtu + 14` bytes or
    /// shorter than 14 bytes (counted in `oversize` / `runt`); `WouldBlock`
    /// when the receiving port's queue holds `queue_limit` frames (unicast).
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let now = self.clock.now();
        let max = self.mtu + ETH_HEADER_LEN;
        self.lock().send(self.index, frame, max, now)
    }

    /// Receives the earliest frame whose delivery instant has been reached.
    /// Errors: `WouldBlock` when none is due.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let bytes = self.pop_due().ok_or_else(no_frame)?;
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        if n < bytes.len() {
            self.lock().ports[self.index].stats.truncated += 1;
        }
        Ok(n)
    }

    /// Hands up to `max` due frames to `f` (the segment is not locked
    /// during the callback, so it may send). Errors: `WouldBlock` when none
    /// is due.
    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.pop_due() {
                Some(bytes) => {
                    f(&bytes);
                    n += 1;
                }
                None if n == 0 && max > 0 => return Err(no_frame()),
                None => break,
            }
        }
        Ok(n)
    }

    /// Joins `group` (counted): a switch delivers frames for it to this
    /// port. Errors: `InvalidInput` for a unicast address.
    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        if !group.is_group() {
            return Err(invalid(format!("{group} is not an Ethernet group address")));
        }
        *self.lock().ports[self.index]
            .groups
            .entry(group)
            .or_insert(0) += 1;
        Ok(())
    }

    /// Leaves `group` once. Errors: `NotFound` when not a member.
    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        let mut seg = self.lock();
        let groups = &mut seg.ports[self.index].groups;
        match groups.get_mut(&group) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                groups.remove(&group);
            }
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("sim port {} is not a member of {group}", self.index),
                ))
            }
        }
        Ok(())
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn poll_at(&self) -> Option<Instant> {
        self.next_delivery()
    }

    /// Whether a frame is due on the simulated clock (as a ring's slot
    /// status: known without a receive call).
    fn rx_ready(&self) -> Option<bool> {
        Some(self.next_delivery().is_some_and(|t| t <= self.clock.now()))
    }
}
