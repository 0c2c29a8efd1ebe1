//! The network of a simulation: [`Port`]s (what a node holds), the
//! segments behind them (a [`SimLink`] pair or a [`SimSwitch`]), and
//! [`Cable`]s: a pair between a node and its switch port, whose far end
//! this module forwards to the switch (and back) in every round.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use edp::MacAddr;
use link::fault::{FaultConfig, FaultStats};
use link::sim::{SimClock, SimControl, SimLink, SimLinkStats, SimOptions, SimSwitch};
use link::Link;

/// The faults of the cable between a node and its switch port, per
/// direction (seeds are derived per cable and direction).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cable {
    /// Faults of the frames the node sends.
    pub up: FaultConfig,
    /// Faults of the frames the node receives.
    pub down: FaultConfig,
}

/// FNV-1a offset basis: the wire hash of a port that sent nothing.
const FNV_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// Bytes of each frame the wire hash covers (the headers of every
/// protocol here).
const HASHED_BYTES: usize = 64;

/// A node's end of the network: a [`Link`] (give it to a socket, a
/// runtime, or drive it directly).
///
/// MAC address: that of its switch port (`02:00:00:00:HH:LL`, HHLL = switch
/// port index + 1) or pair end. Group memberships apply at the switch.
pub struct Port {
    link: SimLink,
    mac: MacAddr,
    /// The switch port a cable leads to.
    switch: Option<Arc<Mutex<SimLink>>>,
    hash: Arc<AtomicU64>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("mac", &self.mac)
            .field("cable", &self.switch.is_some())
            .finish_non_exhaustive()
    }
}

impl Port {
    /// The instant the next frame for this port is due (due or not).
    pub fn next_delivery(&self) -> Option<Instant> {
        self.link.next_delivery()
    }

    /// Frames waiting for this port (due or not).
    pub fn pending(&self) -> usize {
        self.link.pending()
    }

    /// The clock the port reads.
    pub fn clock(&self) -> &SimClock {
        self.link.clock()
    }
}

fn lock(l: &Mutex<SimLink>) -> MutexGuard<'_, SimLink> {
    l.lock().unwrap_or_else(|e| e.into_inner())
}

impl Link for Port {
    /// Sends through the port's faults (see `SimLink::send`) and folds the
    /// frame into the port's wire hash.
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let t = self.link.clock().elapsed().as_nanos() as u64;
        let len = frame.len() as u64;
        let head = &frame[..frame.len().min(HASHED_BYTES)];
        let mut h = self.hash.load(Ordering::Relaxed);
        for &b in t.to_le_bytes().iter().chain(&len.to_le_bytes()).chain(head) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        self.hash.store(h, Ordering::Relaxed);
        self.link.send(frame)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.link.recv(buf)
    }
    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        self.link.recv_with(max, f)
    }
    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        match &self.switch {
            Some(s) => lock(s).join_group(group),
            None => self.link.join_group(group),
        }
    }
    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        match &self.switch {
            Some(s) => lock(s).leave_group(group),
            None => self.link.leave_group(group),
        }
    }
    fn mac(&self) -> MacAddr {
        self.mac
    }
    fn mtu(&self) -> usize {
        self.link.mtu()
    }
    fn poll_at(&self) -> Option<Instant> {
        self.link.poll_at()
    }
    fn rx_ready(&self) -> Option<bool> {
        self.link.rx_ready()
    }
}

/// Where a port's link lives, for the driver's controls.
struct PortInfo {
    /// The segment of the node's link (the cable's pair for a cabled port).
    control: SimControl,
    /// The link's index on that segment.
    index: usize,
    /// The cable's index on its switch (its seeds derive from it).
    cable: Option<u64>,
    hash: Arc<AtomicU64>,
}

/// The far end of a cable and the switch port it is plugged into.
struct Relay {
    far: SimLink,
    switch: Arc<Mutex<SimLink>>,
    buf: Vec<u8>,
}

impl Relay {
    /// Moves every due frame across; true when one moved. A frame the
    /// other side refuses (a full queue) is lost, as on a switch.
    fn forward(&mut self) -> bool {
        let mut moved = false;
        let mut sw = lock(&self.switch);
        while let Ok(n) = self.far.recv(&mut self.buf) {
            let _ = sw.send(&self.buf[..n]);
            moved = true;
        }
        while let Ok(n) = sw.recv(&mut self.buf) {
            let _ = self.far.send(&self.buf[..n]);
            moved = true;
        }
        moved
    }

    fn poll_at(&self) -> Option<Instant> {
        let sw = lock(&self.switch).next_delivery();
        [self.far.next_delivery(), sw].into_iter().flatten().min()
    }
}

/// SplitMix64 finaliser: a seed per cable from the caller's seed.
fn mix_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Every segment, port and cable of one simulation.
#[derive(Default)]
pub(super) struct Net {
    ports: Vec<PortInfo>,
    relays: Vec<Relay>,
}

impl Net {
    fn add(
        &mut self,
        link: SimLink,
        mac: MacAddr,
        cable: Option<(u64, Arc<Mutex<SimLink>>)>,
    ) -> Port {
        let hash = Arc::new(AtomicU64::new(FNV_BASIS));
        self.ports.push(PortInfo {
            control: link.control(),
            index: link.index(),
            cable: cable.as_ref().map(|c| c.0),
            hash: hash.clone(),
        });
        let switch = cable.map(|c| c.1);
        Port {
            link,
            mac,
            switch,
            hash,
        }
    }

    pub(super) fn pair(
        &mut self,
        clock: &SimClock,
        opts: SimOptions,
        a_to_b: FaultConfig,
        b_to_a: FaultConfig,
    ) -> [Port; 2] {
        let (a, b) = SimLink::pair_with(clock, opts, a_to_b, b_to_a);
        let (ma, mb) = (a.mac(), b.mac());
        [self.add(a, ma, None), self.add(b, mb, None)]
    }

    pub(super) fn switch(
        &mut self,
        clock: &SimClock,
        opts: SimOptions,
        faults: Vec<FaultConfig>,
    ) -> Vec<Port> {
        SimSwitch::with_options(clock, opts, faults)
            .into_iter()
            .map(|l| {
                let mac = l.mac();
                self.add(l, mac, None)
            })
            .collect()
    }

    pub(super) fn cabled_switch(
        &mut self,
        clock: &SimClock,
        opts: SimOptions,
        cables: Vec<Cable>,
    ) -> Vec<Port> {
        let transparent = vec![FaultConfig::default(); cables.len()];
        let switch = SimSwitch::with_options(clock, opts.clone(), transparent);
        let buf = vec![0u8; opts.mtu + 14];
        switch
            .into_iter()
            .zip(cables)
            .enumerate()
            .map(|(i, (sw, c))| {
                let mac = sw.mac();
                let up = mix_seed(c.up.seed, i as u64);
                let down = mix_seed(c.down.seed, i as u64);
                let (near, far) = SimLink::pair_with(
                    clock,
                    opts.clone(),
                    c.up.with_seed(up),
                    c.down.with_seed(down),
                );
                let sw = Arc::new(Mutex::new(sw));
                self.relays.push(Relay {
                    far,
                    switch: sw.clone(),
                    buf: buf.clone(),
                });
                self.add(near, mac, Some((i as u64, sw)))
            })
            .collect()
    }

    fn port(&self, port: usize) -> &PortInfo {
        self.ports.get(port).unwrap_or_else(|| {
            panic!(
                "no port {port}: the simulation has {} ports",
                self.ports.len()
            )
        })
    }

    pub(super) fn set_up(&self, port: usize, up: bool) {
        let p = self.port(port);
        p.control.set_up(p.index, up).expect("the port exists");
    }

    pub(super) fn set_faults(&self, port: usize, cfg: FaultConfig) {
        let p = self.port(port);
        let cfg = match p.cable {
            Some(i) => {
                let seed = mix_seed(cfg.seed, i);
                cfg.with_seed(seed)
            }
            None => cfg,
        };
        p.control
            .set_faults(p.index, cfg)
            .unwrap_or_else(|e| panic!("faults of port {port}: {e}"));
    }

    pub(super) fn link_stats(&self, port: usize) -> SimLinkStats {
        let p = self.port(port);
        p.control.stats(p.index)
    }

    pub(super) fn fault_stats(&self, port: usize) -> (FaultStats, FaultStats) {
        let p = self.port(port);
        let down = match p.cable {
            Some(_) => p.control.fault_stats(1 - p.index),
            None => FaultStats::default(),
        };
        (p.control.fault_stats(p.index), down)
    }

    pub(super) fn wire_hash(&self, port: usize) -> u64 {
        self.port(port).hash.load(Ordering::Relaxed)
    }

    /// Forwards every cable's due frames; true when one moved.
    pub(super) fn forward(&mut self) -> bool {
        let mut moved = false;
        for r in &mut self.relays {
            moved |= r.forward();
        }
        moved
    }

    /// The earliest frame due on a cable's far end or its switch port.
    pub(super) fn poll_at(&self) -> Option<Instant> {
        self.relays.iter().filter_map(Relay::poll_at).min()
    }
}
