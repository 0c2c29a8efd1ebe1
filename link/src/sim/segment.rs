//! A sim segment: its ports (receive queue, fault injector, counters,
//! cable state, group memberships), where a frame goes (`route`) and how
//! it gets there (`deliver`).

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustc_hash::FxHashMap;

use super::{invalid, sim_mac, SimClock, SimLink, SimLinkStats, SimOptions};
use crate::delay_queue::DelayQueue;
use crate::eth::{MacAddr, ETH_HEADER_LEN, ETH_MIN_FRAME_LEN};
use crate::fault::{FaultConfig, FaultInjector};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// Two ends; everything one end sends goes to the other.
    Pair,
    /// N ports; delivery by destination MAC and group membership.
    Switch,
}

pub(crate) struct Port {
    pub(crate) mac: MacAddr,
    pub(crate) inbox: DelayQueue,
    pub(crate) injector: FaultInjector,
    pub(crate) stats: SimLinkStats,
    /// False while the port's cable is pulled (see `SimControl::set_up`).
    pub(crate) up: bool,
    /// Groups joined, with membership counts.
    pub(crate) groups: FxHashMap<MacAddr, u32>,
}

pub(crate) struct Segment {
    pub(crate) ports: Vec<Port>,
    pub(crate) topology: Topology,
    pub(crate) opts: SimOptions,
    /// Destination ports of the frame being sent (reused).
    dests: Vec<usize>,
}

/// SplitMix64 finaliser: derives independent per-port seeds from one seed.
pub(crate) fn mix_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One link per fault config on a new segment.
pub(crate) fn make_links(
    clock: &SimClock,
    topology: Topology,
    opts: SimOptions,
    faults: Vec<FaultConfig>,
) -> Vec<SimLink> {
    let ports: Vec<Port> = faults
        .into_iter()
        .enumerate()
        .map(|(i, mut cfg)| {
            cfg.seed = mix_seed(cfg.seed, i as u64);
            Port {
                mac: sim_mac(i),
                inbox: DelayQueue::default(),
                injector: FaultInjector::new(cfg),
                stats: SimLinkStats::default(),
                up: true,
                groups: FxHashMap::default(),
            }
        })
        .collect();
    let n = ports.len();
    let mtu = opts.mtu;
    let segment = Arc::new(Mutex::new(Segment {
        ports,
        topology,
        opts,
        dests: Vec::new(),
    }));
    (0..n)
        .map(|index| SimLink::new(segment.clone(), index, sim_mac(index), mtu, clock.clone()))
        .collect()
}

impl Segment {
    /// The ports a frame from `me` to `dst` goes to, into `self.dests`:
    /// the other end of a pair; on a switch the owner of a unicast address
    /// (none for an unknown one or the sender itself), every other port for
    /// broadcast, the other ports that joined a multicast group.
    fn route(&mut self, me: usize, dst: MacAddr) {
        self.dests.clear();
        match self.topology {
            Topology::Pair => self.dests.push(1 - me),
            Topology::Switch if dst == MacAddr::BROADCAST => {
                self.dests
                    .extend((0..self.ports.len()).filter(|&i| i != me));
            }
            Topology::Switch if dst.is_group() => {
                let ports = &self.ports;
                self.dests.extend(
                    (0..ports.len()).filter(|&i| i != me && ports[i].groups.contains_key(&dst)),
                );
            }
            Topology::Switch => {
                if let Some(i) = self.ports.iter().position(|p| p.mac == dst) {
                    if i != me {
                        self.dests.push(i);
                    }
                }
            }
        }
    }

    /// Sends `frame` from port `me` at `now` (see `SimLink::send`).
    pub(crate) fn send(
        &mut self,
        me: usize,
        frame: &[u8],
        max: usize,
        now: Instant,
    ) -> io::Result<()> {
        if frame.len() > max {
            self.ports[me].stats.oversize += 1;
            return Err(invalid(format!(
                "frame of {} bytes exceeds mtu + 14 = {max} bytes",
                frame.len()
            )));
        }
        if frame.len() < ETH_HEADER_LEN {
            self.ports[me].stats.runt += 1;
            return Err(invalid(format!(
                "frame of {} bytes is shorter than the 14-byte Ethernet header",
                frame.len()
            )));
        }
        let mut d = [0u8; 6];
        d.copy_from_slice(&frame[..6]);
        self.route(me, MacAddr(d));
        let dests = std::mem::take(&mut self.dests);
        let r = self.send_to(me, frame, &dests, now);
        self.dests = dests;
        r
    }

    fn send_to(
        &mut self,
        me: usize,
        frame: &[u8],
        dests: &[usize],
        now: Instant,
    ) -> io::Result<()> {
        // Pulled cables: drop before the faults (the frame never reaches the wire).
        if !self.ports[me].up || dests.iter().any(|&d| !self.ports[d].up) {
            let lost = if self.ports[me].up {
                dests.iter().filter(|&&d| !self.ports[d].up).count()
            } else {
                dests.len().max(1)
            };
            self.ports[me].stats.partitioned += lost as u64;
            tracing::trace!(port = me, lost, "sim: frame lost to a pulled cable");
            if !self.ports[me].up || dests.len() == 1 {
                self.ports[me].stats.sent += 1;
                return Ok(());
            }
        }
        let limit = self.opts.queue_limit;
        if dests.len() == 1 && self.ports[dests[0]].inbox.len() >= limit {
            self.ports[me].stats.would_block += 1;
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "sim receive queue of port {} is full ({limit} frames)",
                    dests[0]
                ),
            ));
        }
        self.ports[me].stats.sent += 1;
        if dests.is_empty() {
            // Still decided, so the fault sequence does not depend on routing.
            self.ports[me].injector.on_send(now, frame, &mut |_, _| {});
            self.ports[me].stats.unroutable += 1;
            return Ok(());
        }
        let pad = self.opts.pad_short_frames;
        let (senders, rest) = self.ports.split_at_mut(me);
        let (sender, after) = rest.split_first_mut().expect("me < ports.len()");
        sender.injector.on_send(now, frame, &mut |at, bytes| {
            for &d in dests {
                let port = if d < me {
                    &mut senders[d]
                } else {
                    &mut after[d - me - 1]
                };
                deliver(port, at, bytes, pad, limit);
            }
        });
        Ok(())
    }
}

/// Queues one copy of `bytes` for `port`, due at `at`.
fn deliver(port: &mut Port, at: Instant, bytes: &[u8], pad: bool, limit: usize) {
    if !port.up {
        return;
    }
    if port.inbox.len() >= limit {
        port.stats.queue_dropped += 1;
        tracing::trace!(mac = %port.mac, "sim: receive queue full, frame dropped");
        return;
    }
    let mut copy = Vec::with_capacity(bytes.len().max(if pad { ETH_MIN_FRAME_LEN } else { 0 }));
    copy.extend_from_slice(bytes);
    if pad && copy.len() < ETH_MIN_FRAME_LEN {
        copy.resize(ETH_MIN_FRAME_LEN, 0);
    }
    port.inbox.push(at, copy);
}
