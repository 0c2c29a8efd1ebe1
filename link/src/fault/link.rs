//! [`FaultLink`]: fault injection around any [`Link`].

use std::fmt;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::time::Instant;

use netcore::bpf::Insn;

use super::{FaultConfig, FaultConfigError, FaultInjector, FaultStats};
use crate::delay_queue::DelayQueue;
use crate::eth::MacAddr;
use crate::time::{Clock, SystemClock};
use crate::{KernelStats, Link, OutageStats};

/// Frames decided per round of a batch send (and immediate copies: twice
/// that with duplicates).
const CHUNK: usize = 64;

/// Counters of a [`FaultLink`] beyond the fault decisions, in frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultLinkStats {
    /// Frames handed to the inner link.
    pub released: u64,
    /// Frames the inner link refused with an error other than `WouldBlock`
    /// (the frame is dropped and the error returned by the `send` that released it,
    /// or logged when the release happened in `recv`).
    pub inner_errors: u64,
    /// `send` calls refused with `WouldBlock` because the hold queue was full.
    pub backlog_full: u64,
    /// Frames rejected with `InvalidInput` for being larger than `mtu + 14` bytes.
    pub oversize: u64,
}

/// Default bound of the hold queue of a [`FaultLink`], in frames.
pub const DEFAULT_FAULT_LINK_BACKLOG: usize = 1 << 16;

/// Fault injection wrapped around any link (this kernel has no netem).
///
/// Every [`Link`] method is forwarded to the inner link: batches stay
/// batches (sendmmsg on a `PacketLink`), `recv_with`, `rx_ready`,
/// `set_filter`, `kernel_stats`, groups, `raw_fd` and `poll_at` reach it.
/// With no fault configured and nothing held, frames go straight through
/// without a copy or an allocation; with faults, frames delivered at once
/// are still sent as one batch, and only frames held back (delayed,
/// reordered, corrupted, or refused by the inner link) are copied.
///
/// Faults apply to frames this end sends. Frames whose delivery instant is in
/// the future are kept in a queue ordered by release instant and handed to the
/// inner link by later `send`/`recv` calls or [`FaultLink::release_due`] once
/// the clock passes [`Link::poll_at`]. The clock is `Instant::now()` unless
/// given by [`FaultLink::with_clock`] (any [`Clock`], e.g. a [`crate::time::SimClock`]). Frames received are passed through
/// unchanged.
pub struct FaultLink<L: Link> {
    inner: L,
    injector: FaultInjector,
    queue: DelayQueue,
    backlog: usize,
    clock: Box<dyn Clock>,
    stats: FaultLinkStats,
}

impl<L: Link> fmt::Debug for FaultLink<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultLink")
            .field("injector", &self.injector)
            .field("queued", &self.queue.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn gather(pieces: &[IoSlice<'_>]) -> Vec<u8> {
    let mut v = Vec::with_capacity(pieces.iter().map(|p| p.len()).sum());
    for p in pieces {
        v.extend_from_slice(p);
    }
    v
}

impl<L: Link> FaultLink<L> {
    /// Wraps `inner` with the faults of `cfg`, on the real clock.
    ///
    /// Panics if `cfg` is invalid (see [`FaultConfig::validate`]); use
    /// [`FaultLink::try_new`] for the error.
    pub fn new(inner: L, cfg: FaultConfig) -> Self {
        Self::with_clock(inner, cfg, SystemClock)
    }

    /// Like [`FaultLink::new`]. Errors: those of [`FaultConfig::validate`].
    pub fn try_new(inner: L, cfg: FaultConfig) -> Result<Self, FaultConfigError> {
        cfg.validate()?;
        Ok(Self::new(inner, cfg))
    }

    /// Wraps `inner` with the faults of `cfg`, reading time from `clock`
    /// (a [`crate::time::SimClock`], or a closure such as
    /// `move || sim_clock.now()`). Panics if `cfg` is invalid.
    pub fn with_clock(inner: L, cfg: FaultConfig, clock: impl Clock + 'static) -> Self {
        Self {
            inner,
            injector: FaultInjector::new(cfg),
            queue: DelayQueue::default(),
            backlog: DEFAULT_FAULT_LINK_BACKLOG,
            clock: Box::new(clock),
            stats: FaultLinkStats::default(),
        }
    }

    /// Sets the bound of the hold queue in frames (default
    /// [`DEFAULT_FAULT_LINK_BACKLOG`]); `send` returns `WouldBlock` when it is full.
    pub fn set_backlog(&mut self, frames: usize) {
        self.backlog = frames.max(1);
    }

    /// Fault counters of the sending direction.
    pub fn stats(&self) -> FaultStats {
        self.injector.stats().clone()
    }

    /// Counters of the wrapper itself.
    pub fn link_stats(&self) -> FaultLinkStats {
        self.stats.clone()
    }

    /// Frames held, waiting for their release instant.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The wrapped link.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped link, mutably (frames sent through it bypass the faults).
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// Replaces the fault configuration (see [`FaultInjector::reconfigure`]);
    /// frames already held keep their release instants.
    pub fn set_faults(&mut self, cfg: FaultConfig) -> Result<(), FaultConfigError> {
        self.injector.reconfigure(cfg)
    }

    /// Unwraps the inner link; frames still held are dropped.
    pub fn into_inner(self) -> L {
        self.inner
    }

    /// Hands every held frame whose release instant has passed to the inner
    /// link, in release order; returns how many were sent. Stops at the first
    /// `WouldBlock` (the frame stays queued). A frame the inner link refuses
    /// with another error is dropped, counted in `inner_errors`, and the error
    /// is returned.
    pub fn release_due(&mut self) -> io::Result<usize> {
        let now = self.clock.now();
        self.release(now)
    }

    fn release(&mut self, now: Instant) -> io::Result<usize> {
        let mut n = 0;
        while let Some(bytes) = self.queue.peek_due(now) {
            match self.inner.send(bytes) {
                Ok(()) => {
                    self.queue.pop_due(now);
                    self.stats.released += 1;
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.queue.pop_due(now);
                    self.stats.inner_errors += 1;
                    return Err(e);
                }
            }
        }
        Ok(n)
    }

    /// Releases due frames before a receive; an inner error is only logged
    /// (the receive is what the caller asked for).
    fn release_before_recv(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        let now = self.clock.now();
        if let Err(e) = self.release(now) {
            tracing::warn!(target: "link::fault", "inner link refused a delayed frame: {e}");
        }
    }

    fn oversize(&mut self, len: usize) -> io::Error {
        self.stats.oversize += 1;
        let max = self.inner.max_frame();
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {len} bytes exceeds mtu + 14 = {max} bytes"),
        )
    }

    /// Sends `refs` (frames due now, in order) as one batch; frames the
    /// inner link refuses with `WouldBlock` are held for the next release
    /// (and `blocked` is set), a frame refused with another error is
    /// dropped and its error kept in `err`.
    fn flush(
        &mut self,
        refs: &[&[IoSlice<'_>]],
        now: Instant,
        err: &mut Option<io::Error>,
        blocked: &mut bool,
    ) {
        let mut sent = 0;
        while sent < refs.len() {
            match self.inner.send_batch_vectored(&refs[sent..]) {
                Ok(0) => break,
                Ok(n) => {
                    sent += n;
                    self.stats.released += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    *blocked = true;
                    break;
                }
                Err(e) => {
                    self.stats.inner_errors += 1;
                    tracing::debug!(target: "link::fault", "inner link refused a frame: {e}");
                    err.get_or_insert(e);
                    sent += 1;
                }
            }
        }
        for pieces in &refs[sent..] {
            self.queue.push(now, gather(pieces));
        }
    }
}

impl<L: Link> FaultLink<L> {
    /// The transparent fast path check for frames of `lens` bytes: releases
    /// due frames, then true (frames counted) when nothing is held, no fault
    /// applies and every frame fits, so the caller forwards them as they
    /// are. An oversized first frame is an error; otherwise false sends the
    /// caller down the fault path (which checks sizes again).
    fn transparent(&mut self, lens: &[usize]) -> io::Result<bool> {
        let max = self.inner.max_frame();
        if let Some(&first) = lens.first() {
            if first > max {
                return Err(self.oversize(first));
            }
        }
        if lens.iter().any(|&l| l > max) {
            return Ok(false);
        }
        let now = self.clock.now();
        self.release(now)?;
        Ok(self.queue.is_empty() && self.injector.pass_through(now, lens.len()))
    }
}

impl<L: Link> Link for FaultLink<L> {
    /// Sends `frame` through the faults (as a batch of one). Errors:
    /// `InvalidInput` for a frame larger than `mtu() + 14` bytes;
    /// `WouldBlock` when the hold queue is full (or, with no fault
    /// configured and nothing held, when the inner link is); an error of
    /// the inner link when sending or releasing a frame failed.
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.transparent(&[frame.len()])? {
            return self.inner.send(frame);
        }
        let slice = [IoSlice::new(frame)];
        self.send_batch_vectored(&[&slice]).map(|_| ())
    }

    fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        let lens: [usize; CHUNK] = std::array::from_fn(|i| frames.get(i).map_or(0, |f| f.len()));
        if frames.len() <= CHUNK && self.transparent(&lens[..frames.len()])? {
            return self.inner.send_batch(frames);
        }
        crate::link::send_batch_as_vectored::<CHUNK, _>(self, frames)
    }

    /// Sends frames through the faults; see [`Link::send_batch_vectored`].
    /// An oversized first frame is `InvalidInput` (a later one ends the
    /// batch before it); a full hold queue is `WouldBlock` for the first
    /// frame (a later one ends the batch); an inner error other than
    /// `WouldBlock` is returned for a batch of one frame and counted
    /// otherwise.
    fn send_batch_vectored(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        let max = self.inner.max_frame();
        let mut valid = 0;
        for pieces in frames {
            let len: usize = pieces.iter().map(|p| p.len()).sum();
            if len > max {
                let e = self.oversize(len);
                if valid == 0 {
                    return Err(e);
                }
                break;
            }
            valid += 1;
        }
        let frames = &frames[..valid];
        let now = self.clock.now();
        self.release(now)?;
        if self.queue.is_empty() && self.injector.pass_through(now, frames.len()) {
            // Transparent: the inner link's own batch path, no copy.
            return self.inner.send_batch_vectored(frames);
        }
        let mut err = None;
        let mut blocked = false;
        let mut accepted = 0;
        'chunks: for chunk in frames.chunks(CHUNK) {
            let mut refs: [&[IoSlice<'_>]; 2 * CHUNK] = [&[]; 2 * CHUNK];
            let mut k = 0;
            // Once a frame is held, later frames are held too (FIFO).
            let mut holding = !self.queue.is_empty();
            for pieces in chunk {
                if self.queue.len() >= self.backlog {
                    self.stats.backlog_full += 1;
                    if accepted == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::WouldBlock,
                            format!("fault hold queue full ({} frames)", self.backlog),
                        ));
                    }
                    self.flush(&refs[..k], now, &mut err, &mut blocked);
                    break 'chunks;
                }
                accepted += 1;
                let len = pieces.iter().map(|p| p.len()).sum();
                let fate = self.injector.decide(now, len);
                if fate.copies == 0 {
                    continue;
                }
                if !holding && fate.at <= now && fate.corrupt.is_none() {
                    for _ in 0..fate.copies {
                        refs[k] = pieces;
                        k += 1;
                    }
                    continue;
                }
                if !holding {
                    // Frames before this one leave first.
                    self.flush(&refs[..k], now, &mut err, &mut blocked);
                    k = 0;
                    holding = true;
                }
                let mut bytes = gather(pieces);
                fate.apply(&mut bytes);
                if fate.copies == 2 {
                    self.queue.push(fate.at, bytes.clone());
                }
                self.queue.push(fate.at, bytes);
            }
            self.flush(&refs[..k], now, &mut err, &mut blocked);
        }
        // Frames held due now (corrupted ones) leave unless the inner link
        // just said it is full.
        if !blocked {
            if let Err(e) = self.release(now) {
                err.get_or_insert(e);
            }
        }
        match err {
            Some(e) if frames.len() == 1 => Err(e),
            _ => Ok(accepted),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.release_before_recv();
        self.inner.recv(buf)
    }

    fn recv_batch(&mut self, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
        self.release_before_recv();
        self.inner.recv_batch(bufs, lens)
    }

    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        self.release_before_recv();
        self.inner.recv_with(max, f)
    }

    fn set_filter(&mut self, prog: &[Insn]) -> io::Result<()> {
        self.inner.set_filter(prog)
    }

    fn kernel_stats(&self) -> Option<KernelStats> {
        self.inner.kernel_stats()
    }

    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        self.inner.join_group(group)
    }

    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        self.inner.leave_group(group)
    }

    fn max_frame(&self) -> usize {
        self.inner.max_frame()
    }

    fn max_rx_frame(&self) -> usize {
        self.inner.max_rx_frame()
    }

    fn mac(&self) -> MacAddr {
        self.inner.mac()
    }

    fn mtu(&self) -> usize {
        self.inner.mtu()
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.inner.raw_fd()
    }

    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.as_fd()
    }

    fn rx_ready(&self) -> Option<bool> {
        self.inner.rx_ready()
    }

    /// Releases held frames that are due (the runtime calls this when
    /// [`Link::poll_at`] passes), then lets the inner link do the same.
    fn on_timeout(&mut self, now: Instant) -> io::Result<()> {
        // The inner link's own work (a packet link's interface check) runs
        // even when releasing failed (its interface may be down).
        let released = self.release(now);
        self.inner.on_timeout(now)?;
        released.map(|_| ())
    }

    fn on_error_event(&mut self, now: Instant) {
        self.inner.on_error_event(now)
    }

    fn outage_stats(&self) -> OutageStats {
        self.inner.outage_stats()
    }

    /// The earliest release instant of a held frame, or the inner link's.
    fn poll_at(&self) -> Option<Instant> {
        netcore::time::earliest(self.queue.next_at(), self.inner.poll_at())
    }
}
