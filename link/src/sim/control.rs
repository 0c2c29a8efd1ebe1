//! [`SimOptions`] of a segment and [`SimControl`], the simulation driver's
//! handle on a segment: pull cables, change faults mid-run, read counters.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::invalid;
use super::segment::{mix_seed, Segment};
use super::SimLinkStats;
use crate::fault::{FaultConfig, FaultStats};

/// Default bound of each port's receive queue, in frames.
pub const DEFAULT_SIM_QUEUE: usize = 1 << 16;
/// Default MTU of sim links in bytes (standard Ethernet).
pub const DEFAULT_SIM_MTU: usize = 1500;

/// Options of a sim segment beyond the faults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimOptions {
    /// Largest Ethernet payload in bytes; frames are at most `mtu + 14` bytes.
    pub mtu: usize,
    /// Bound of each port's receive queue in frames.
    pub queue_limit: usize,
    /// Pad frames shorter than 60 bytes with zeros, as an Ethernet NIC does
    /// (veth does not), so receivers must trim by the length field.
    pub pad_short_frames: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            mtu: DEFAULT_SIM_MTU,
            queue_limit: DEFAULT_SIM_QUEUE,
            pad_short_frames: false,
        }
    }
}

/// Driver-side control of a sim segment (a pair or a switch), from
/// `SimLink::control`. Cheap to clone, `Send + Sync`.
///
/// Port indices are those of `SimLink::index`: 0 and 1 for a pair.
#[derive(Clone)]
pub struct SimControl {
    pub(super) segment: Arc<Mutex<Segment>>,
}

impl fmt::Debug for SimControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimControl")
            .field("ports", &self.ports())
            .finish()
    }
}

impl SimControl {
    fn lock(&self) -> MutexGuard<'_, Segment> {
        self.segment.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(seg: &Segment, port: usize) -> io::Result<()> {
        if port < seg.ports.len() {
            Ok(())
        } else {
            Err(invalid(format!(
                "sim port {port} does not exist (segment has {} ports)",
                seg.ports.len()
            )))
        }
    }

    /// Number of ports on the segment.
    pub fn ports(&self) -> usize {
        self.lock().ports.len()
    }

    /// Plugs (`true`) or pulls (`false`) the cable of `port`. While a port is
    /// down, frames it sends and frames sent to it are lost (counted in the
    /// sender's [`SimLinkStats::partitioned`]); `send` still returns `Ok`, as
    /// on a real wire. Frames already in flight are still delivered. On a
    /// pair, pulling either end partitions both directions.
    ///
    /// Errors: `InvalidInput` for a port index out of range.
    pub fn set_up(&self, port: usize, up: bool) -> io::Result<()> {
        let mut seg = self.lock();
        Self::check(&seg, port)?;
        seg.ports[port].up = up;
        Ok(())
    }

    /// Whether `port`'s cable is plugged in (false for an unknown port).
    pub fn is_up(&self, port: usize) -> bool {
        self.lock().ports.get(port).is_some_and(|p| p.up)
    }

    /// Replaces the faults of frames `port` sends, mid-run (see
    /// `FaultInjector::reconfigure`); the seed is derived per port as at
    /// creation. Counters and the FIFO order of frames in flight are kept.
    ///
    /// Errors: `InvalidInput` for a port out of range or an invalid config
    /// (the message says which field).
    pub fn set_faults(&self, port: usize, mut cfg: FaultConfig) -> io::Result<()> {
        let mut seg = self.lock();
        Self::check(&seg, port)?;
        cfg.seed = mix_seed(cfg.seed, port as u64);
        seg.ports[port]
            .injector
            .reconfigure(cfg)
            .map_err(|e| invalid(e.to_string()))
    }

    /// Fault counters of frames `port` sends (default for an unknown port).
    pub fn fault_stats(&self, port: usize) -> FaultStats {
        self.lock()
            .ports
            .get(port)
            .map(|p| p.injector.stats().clone())
            .unwrap_or_default()
    }

    /// Counters of `port` (default for an unknown port).
    pub fn stats(&self, port: usize) -> SimLinkStats {
        self.lock()
            .ports
            .get(port)
            .map(|p| p.stats.clone())
            .unwrap_or_default()
    }
}
