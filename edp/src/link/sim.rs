//! In-memory links on a virtual clock, for deterministic simulations (test
//! layer L1 of DESIGN.md).
//!
//! - [`SimClock`]: virtual time shared by every link of one simulation; it moves
//!   only when the driver calls [`SimClock::advance`] / [`SimClock::advance_to`].
//! - [`SimLink::pair`]: a point-to-point wire between two ends.
//! - [`SimHub::new`]: an N-port shared segment that delivers by destination MAC.
//! - [`next_event`]: the earliest pending delivery, for drivers that jump the clock.
//!
//! Each sending direction runs a [`FaultInjector`] (seeded loss, burst loss,
//! duplication, reordering, corruption, delay, jitter, rate limit). A frame sent
//! at virtual time `t` becomes receivable at the far end once the clock reaches
//! the delivery instant the injector chose (`t` itself with no fault), so a
//! driver loop is: send, `recv` until `WouldBlock`, then
//! `clock.advance_to(next_event(..))` or to the next protocol timeout.
//!
//! ```
//! use std::time::Duration;
//! use edp::link::fault::FaultConfig;
//! use edp::link::sim::{next_event, SimClock, SimLink};
//! use edp::Link;
//!
//! let clock = SimClock::new();
//! let lossy = FaultConfig::seeded(7)
//!     .with_loss(0.01)
//!     .with_delay(Duration::from_micros(20), Duration::ZERO);
//! let (mut a, mut b) = SimLink::pair(&clock, 1500, lossy, FaultConfig::default());
//! let mut frame = [0u8; 64];
//! frame[..6].copy_from_slice(&b.mac().octets());
//! a.send(&frame)?;
//! let mut buf = [0u8; 1514];
//! assert!(b.recv(&mut buf).is_err()); // WouldBlock: 20 us of latency
//! clock.advance_to(next_event(&[&a, &b]).unwrap());
//! assert_eq!(b.recv(&mut buf)?, 64);
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Queues are bounded (default [`DEFAULT_SIM_QUEUE`] frames per receiving
//! port) so a runaway test cannot eat memory: a unicast `send` to a full port
//! returns `WouldBlock`; a group frame is tail-dropped at full ports and
//! counted in [`SimLinkStats::queue_dropped`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::fault::{FaultConfig, FaultInjector, FaultStats, Pending};
use super::Link;
use crate::wire::{MacAddr, ETH_HEADER_LEN, ETH_MIN_FRAME_LEN};

/// Default bound of each port's receive queue, in frames.
pub const DEFAULT_SIM_QUEUE: usize = 1 << 16;
/// Default MTU of sim links in bytes (standard Ethernet).
pub const DEFAULT_SIM_MTU: usize = 1500;

/// A virtual clock shared by all sim links of one simulation.
///
/// Starts at a base `Instant` captured once by [`SimClock::new`]; time is the
/// base plus an offset in nanoseconds that only moves forward. Cheap to clone
/// (clones share the time), `Send + Sync`.
#[derive(Clone)]
pub struct SimClock {
    inner: Arc<ClockInner>,
}

struct ClockInner {
    base: Instant,
    offset_ns: AtomicU64,
}

impl Default for SimClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SimClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimClock(+{:?})", self.elapsed())
    }
}

impl SimClock {
    /// A clock at its base instant (elapsed zero).
    pub fn new() -> Self {
        Self {
            inner: Arc::new(ClockInner {
                base: Instant::now(),
                offset_ns: AtomicU64::new(0),
            }),
        }
    }

    /// The base instant (time zero of the simulation).
    pub fn base(&self) -> Instant {
        self.inner.base
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.inner.base + self.elapsed()
    }

    /// Virtual time elapsed since the base instant.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.inner.offset_ns.load(Ordering::SeqCst))
    }

    /// Moves time forward by `d` (saturating at about 584 years).
    pub fn advance(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .inner
            .offset_ns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                Some(o.saturating_add(ns))
            });
    }

    /// Moves time forward to `t`; never goes backwards (an earlier `t` is a no-op).
    pub fn advance_to(&self, t: Instant) {
        let ns = t.saturating_duration_since(self.inner.base).as_nanos();
        let ns = u64::try_from(ns).unwrap_or(u64::MAX);
        self.inner.offset_ns.fetch_max(ns, Ordering::SeqCst);
    }
}

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
    /// Frames sent by this port that no port takes (hub: unicast to an unknown
    /// MAC or to the sender's own MAC).
    pub unroutable: u64,
    /// Frames for this port tail-dropped because its receive queue was full.
    pub queue_dropped: u64,
    /// Frames returned by `recv` truncated to the caller's buffer.
    pub truncated: u64,
    /// Frames (or copies of a group frame) sent by this port that were lost
    /// because this port or the receiving port was down.
    pub partitioned: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Topology {
    /// Two ends; everything one end sends goes to the other.
    Pair,
    /// N ports; delivery by destination MAC.
    Hub,
}

struct Port {
    mac: MacAddr,
    inbox: BinaryHeap<Reverse<Pending>>,
    injector: FaultInjector,
    stats: SimLinkStats,
    /// False while the port's cable is pulled (see [`SimControl::set_up`]).
    up: bool,
}

struct Segment {
    ports: Vec<Port>,
    topology: Topology,
    opts: SimOptions,
    seq: u64,
}

/// One end of an in-memory link (a [`SimLink::pair`] end or a [`SimHub`] port).
///
/// Frames sent become receivable at the far end(s) once the clock reaches
/// their delivery instant, after the [`FaultInjector`] of the sending port
/// decided their fate. MAC address `02:00:00:00:HH:LL` where `HHLL` is the port
/// index + 1 (so `02:00:00:00:00:01` and `02:00:00:00:00:02` for a pair).
/// Implements [`Link`]: `recv` returns `WouldBlock` when nothing is due;
/// `poll_at` is [`SimLink::next_delivery`].
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

/// MAC of sim port `index`: 02:00:00:00:HH:LL with HHLL = index + 1.
pub fn sim_mac(index: usize) -> MacAddr {
    let n = u16::try_from(index + 1).expect("at most 65535 sim ports");
    let [hi, lo] = n.to_be_bytes();
    MacAddr([0x02, 0, 0, 0, hi, lo])
}

/// SplitMix64 finaliser: derives independent per-port seeds from one seed.
fn mix_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn make_links(
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
                inbox: BinaryHeap::new(),
                injector: FaultInjector::new(cfg),
                stats: SimLinkStats::default(),
                up: true,
            }
        })
        .collect();
    let n = ports.len();
    let mtu = opts.mtu;
    let segment = Arc::new(Mutex::new(Segment {
        ports,
        topology,
        opts,
        seq: 0,
    }));
    (0..n)
        .map(|index| SimLink {
            segment: segment.clone(),
            index,
            mac: sim_mac(index),
            mtu,
            clock: clock.clone(),
        })
        .collect()
}

impl SimLink {
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
        self.lock().ports[self.index]
            .inbox
            .peek()
            .map(|Reverse(p)| p.at)
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
}

/// Driver-side control of a sim segment (a pair or a hub), from
/// [`SimLink::control`]. Cheap to clone, `Send + Sync`.
///
/// Port indices are those of [`SimLink::index`]: 0 and 1 for a pair.
#[derive(Clone)]
pub struct SimControl {
    segment: Arc<Mutex<Segment>>,
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
    /// [`FaultInjector::reconfigure`]); the seed is derived per port as at
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

/// An N-port hub (a shared segment, or a learning switch after learning).
///
/// A frame is delivered to the port owning its destination MAC, or to all
/// other ports for group (broadcast/multicast) destinations; unicast to an
/// unknown MAC or to the sender itself is dropped and counted in
/// [`SimLinkStats::unroutable`]. Each port's outgoing frames go through that
/// port's own [`FaultInjector`], so a duplicate or a delay applies to every
/// copy of a broadcast alike.
pub struct SimHub;

impl SimHub {
    /// `ports` links on `clock` with MTU `mtu` bytes; every port sends through
    /// `fault`, with a seed derived per port from `fault.seed`.
    ///
    /// Panics if `fault` is invalid or `ports > 65535`.
    #[allow(clippy::new_ret_no_self)] // a hub is its ports
    pub fn new(clock: &SimClock, ports: usize, mtu: usize, fault: FaultConfig) -> Vec<SimLink> {
        Self::with_options(
            clock,
            SimOptions {
                mtu,
                ..SimOptions::default()
            },
            vec![fault; ports],
        )
    }

    /// A hub with one fault config per port (`faults.len()` ports) and all
    /// [`SimOptions`]. Seeds are still derived per port.
    pub fn with_options(
        clock: &SimClock,
        opts: SimOptions,
        faults: Vec<FaultConfig>,
    ) -> Vec<SimLink> {
        assert!(faults.len() <= u16::MAX as usize, "at most 65535 sim ports");
        make_links(clock, Topology::Hub, opts, faults)
    }
}

/// Earliest pending delivery over several links (due or not): the instant a
/// simulation driver can jump the clock to. `None` when every queue is empty.
pub fn next_event(links: &[&SimLink]) -> Option<Instant> {
    links.iter().filter_map(|l| l.next_delivery()).min()
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl Link for SimLink {
    /// Sends one frame through this port's faults.
    ///
    /// Errors: `InvalidInput` for a frame larger than `mtu + 14` bytes or
    /// shorter than 14 bytes (counted in `oversize` / `runt`); `WouldBlock`
    /// when the receiving port's queue holds `queue_limit` frames (unicast).
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let max = self.mtu + ETH_HEADER_LEN;
        let mut seg = self.lock();
        let seg = &mut *seg;
        let me = self.index;
        if frame.len() > max {
            seg.ports[me].stats.oversize += 1;
            return Err(invalid(format!(
                "frame of {} bytes exceeds mtu + 14 = {max} bytes",
                frame.len()
            )));
        }
        if frame.len() < ETH_HEADER_LEN {
            seg.ports[me].stats.runt += 1;
            return Err(invalid(format!(
                "frame of {} bytes is shorter than the 14-byte Ethernet header",
                frame.len()
            )));
        }

        // Destination ports.
        let mut dst_buf = [0usize; 1];
        let all_others: Vec<usize>;
        let dests: &[usize] = match seg.topology {
            Topology::Pair => {
                dst_buf[0] = 1 - me;
                &dst_buf
            }
            Topology::Hub => {
                let mut d = [0u8; 6];
                d.copy_from_slice(&frame[..6]);
                let dst = MacAddr(d);
                if dst.is_group() {
                    all_others = (0..seg.ports.len()).filter(|&i| i != me).collect();
                    &all_others
                } else {
                    match seg.ports.iter().position(|p| p.mac == dst) {
                        Some(i) if i != me => {
                            dst_buf[0] = i;
                            &dst_buf
                        }
                        _ => &[],
                    }
                }
            }
        };

        // Pulled cables: drop before the faults (the frame never reaches the wire).
        if !seg.ports[me].up || dests.iter().any(|&d| !seg.ports[d].up) {
            let lost = if seg.ports[me].up {
                dests.iter().filter(|&&d| !seg.ports[d].up).count()
            } else {
                dests.len().max(1)
            };
            seg.ports[me].stats.partitioned += lost as u64;
            if !seg.ports[me].up || dests.len() == 1 {
                seg.ports[me].stats.sent += 1;
                return Ok(());
            }
        }
        let limit = seg.opts.queue_limit;
        if dests.len() == 1 && seg.ports[dests[0]].inbox.len() >= limit {
            seg.ports[me].stats.would_block += 1;
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "sim receive queue of port {} is full ({limit} frames)",
                    dests[0]
                ),
            ));
        }

        let now = self.clock.now();
        let mut out: Vec<(Instant, Vec<u8>)> = Vec::with_capacity(2);
        seg.ports[me]
            .injector
            .on_send(now, frame, &mut |at, bytes| out.push((at, bytes)));
        seg.ports[me].stats.sent += 1;
        if dests.is_empty() {
            seg.ports[me].stats.unroutable += 1;
            return Ok(());
        }
        for (at, mut bytes) in out {
            if seg.opts.pad_short_frames && bytes.len() < ETH_MIN_FRAME_LEN {
                bytes.resize(ETH_MIN_FRAME_LEN, 0);
            }
            for &d in dests {
                let port = &mut seg.ports[d];
                if !port.up {
                    continue;
                }
                if port.inbox.len() >= limit {
                    port.stats.queue_dropped += 1;
                    continue;
                }
                seg.seq += 1;
                port.inbox.push(Reverse(Pending {
                    at,
                    seq: seg.seq,
                    bytes: bytes.clone(),
                }));
            }
        }
        Ok(())
    }

    /// Receives the earliest frame whose delivery instant has been reached.
    /// Errors: `WouldBlock` when none is due.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let now = self.clock.now();
        let mut seg = self.lock();
        let port = &mut seg.ports[self.index];
        match port.inbox.peek() {
            Some(Reverse(p)) if p.at <= now => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "no sim frame due",
                ))
            }
        }
        let Reverse(p) = port.inbox.pop().expect("peeked");
        let n = p.bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&p.bytes[..n]);
        port.stats.received += 1;
        if n < p.bytes.len() {
            port.stats.truncated += 1;
        }
        Ok(n)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{emit_edp_frame, EdpFrame, EthernetRepr, ETHERTYPE_EDP};

    const US: Duration = Duration::from_micros(1);

    fn assert_send<T: Send>() {}
    fn assert_send_sync<T: Send + Sync + Clone>() {}

    /// An EDP frame from `src` to `dst` whose payload is `seq` (4 bytes BE)
    /// padded with zeros to `len` payload bytes.
    fn frame(src: MacAddr, dst: MacAddr, seq: u32, len: usize) -> Vec<u8> {
        let mut payload = vec![0u8; len.max(4)];
        payload[..4].copy_from_slice(&seq.to_be_bytes());
        let mut buf = vec![0u8; 20 + payload.len()];
        let eth = EthernetRepr {
            dst,
            src,
            ethertype: ETHERTYPE_EDP,
        };
        let n = emit_edp_frame(&mut buf, &eth, 1, 2, &payload).unwrap();
        buf.truncate(n);
        buf
    }

    fn seq_of(f: &[u8]) -> u32 {
        let p = EdpFrame::parse(f, ETHERTYPE_EDP, 9014).unwrap().payload;
        u32::from_be_bytes([p[0], p[1], p[2], p[3]])
    }

    fn recv_all(l: &mut SimLink) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; l.mtu() + 14];
        let mut out = Vec::new();
        loop {
            match l.recv(&mut buf) {
                Ok(n) => out.push(buf[..n].to_vec()),
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                    return out;
                }
            }
        }
    }

    #[test]
    fn types_are_send() {
        assert_send::<SimLink>();
        assert_send_sync::<SimClock>();
        assert_send::<crate::link::fault::FaultLink<SimLink>>();
    }

    #[test]
    fn clock_moves_forward_only() {
        let c = SimClock::new();
        let t0 = c.now();
        assert_eq!(t0, c.base());
        c.advance(Duration::from_micros(5));
        assert_eq!(c.now(), t0 + Duration::from_micros(5));
        c.advance_to(t0 + Duration::from_micros(2));
        assert_eq!(c.elapsed(), Duration::from_micros(5), "never backwards");
        c.advance_to(t0 + Duration::from_millis(1));
        let c2 = c.clone();
        assert_eq!(c2.elapsed(), Duration::from_millis(1), "clones share time");
    }

    #[test]
    fn pair_delivers_both_ways_at_send_instant() {
        let clock = SimClock::new();
        let (mut a, mut b) =
            SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        assert_eq!(a.mac().to_string(), "02:00:00:00:00:01");
        assert_eq!(b.mac().to_string(), "02:00:00:00:00:02");
        assert_eq!((a.mtu(), a.raw_fd()), (1500, None));
        let f = frame(a.mac(), b.mac(), 7, 10);
        a.send(&f).unwrap();
        assert_eq!(b.poll_at(), Some(clock.now()));
        assert!(recv_all(&mut a).is_empty());
        assert_eq!(recv_all(&mut b), vec![f.clone()]);
        b.send(&f).unwrap();
        assert_eq!(recv_all(&mut a), vec![f]);
        assert_eq!(a.stats().sent, 1);
        assert_eq!(a.stats().received, 1);
        assert_eq!(a.fault_stats().frames, 1);
        assert_eq!(next_event(&[&a, &b]), None);
    }

    #[test]
    fn vectored_batch_sends_each_frame_as_its_pieces_concatenated() {
        use std::io::IoSlice;
        let clock = SimClock::new();
        let (mut a, mut b) =
            SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        let f1 = frame(a.mac(), b.mac(), 1, 100);
        let f2 = frame(a.mac(), b.mac(), 2, 1400);
        // f1 in three pieces (one empty, one of odd length), f2 whole.
        let p1 = [
            IoSlice::new(&f1[..17]),
            IoSlice::new(&[]),
            IoSlice::new(&f1[17..]),
        ];
        let p2 = [IoSlice::new(&f2)];
        assert_eq!(a.send_batch_vectored(&[&p1, &p2]).unwrap(), 2);
        assert_eq!(recv_all(&mut b), vec![f1, f2]);
        // An oversized first frame is an error; after a good one it ends the batch.
        let big = vec![0u8; 1515];
        let pb = [IoSlice::new(&big)];
        assert!(a.send_batch_vectored(&[&pb]).is_err());
        let f3 = frame(a.mac(), b.mac(), 3, 10);
        let p3 = [IoSlice::new(&f3)];
        assert_eq!(a.send_batch_vectored(&[&p3, &pb, &p3]).unwrap(), 1);
        assert_eq!(recv_all(&mut b), vec![f3]);
    }

    #[test]
    fn delay_holds_frame_until_due() {
        let clock = SimClock::new();
        let d = Duration::from_micros(100);
        let (mut a, mut b) = SimLink::pair(
            &clock,
            1500,
            FaultConfig::default().with_delay(d, Duration::ZERO),
            FaultConfig::default(),
        );
        let t0 = clock.now();
        a.send(&frame(a.mac(), b.mac(), 1, 10)).unwrap();
        assert_eq!(b.next_delivery(), Some(t0 + d));
        assert_eq!(next_event(&[&a, &b]), Some(t0 + d));
        clock.advance(d - Duration::from_nanos(1));
        assert!(
            recv_all(&mut b).is_empty(),
            "not receivable before now + delay"
        );
        assert_eq!(b.pending(), 1);
        clock.advance_to(t0 + d);
        let got = recv_all(&mut b);
        assert_eq!(got.len(), 1);
        assert_eq!(seq_of(&got[0]), 1);
    }

    #[test]
    fn rate_limit_spacing_on_pair() {
        let clock = SimClock::new();
        // 1514-byte frames at 100 Mbit/s: 12112 bits = 121.12 us each.
        let (mut a, mut b) = SimLink::pair(
            &clock,
            1500,
            FaultConfig::default().with_rate(100_000_000),
            FaultConfig::default(),
        );
        for i in 0..20 {
            a.send(&frame(a.mac(), b.mac(), i, 1494)).unwrap();
        }
        let t0 = clock.now();
        let mut arrivals = Vec::new();
        while let Some(t) = next_event(&[&a, &b]) {
            clock.advance_to(t);
            for f in recv_all(&mut b) {
                arrivals.push((clock.now() - t0, seq_of(&f)));
            }
        }
        assert_eq!(arrivals.len(), 20);
        for (k, (at, seq)) in arrivals.iter().enumerate() {
            assert_eq!(*seq, k as u32);
            assert_eq!(*at, Duration::from_nanos(121_120) * (k as u32 + 1));
        }
    }

    /// Drives a pair with every fault in both directions and returns the
    /// receive trace of b: (virtual time, bytes).
    fn trace(seed: u64) -> Vec<(Duration, Vec<u8>)> {
        let clock = SimClock::new();
        let cfg = FaultConfig::seeded(seed)
            .with_loss(0.05)
            .with_duplicate(0.05)
            .with_reorder(0.05, Duration::from_micros(20))
            .with_corrupt(0.05)
            .with_delay(Duration::from_micros(5), Duration::from_micros(3));
        let (mut a, mut b) = SimLink::pair(&clock, 1500, cfg.clone(), cfg);
        let mut out = Vec::new();
        for i in 0..2_000 {
            a.send(&frame(a.mac(), b.mac(), i, 32)).unwrap();
            clock.advance(US);
            for f in recv_all(&mut b) {
                out.push((clock.elapsed(), f));
            }
        }
        while let Some(t) = b.next_delivery() {
            clock.advance_to(t);
            for f in recv_all(&mut b) {
                out.push((clock.elapsed(), f));
            }
        }
        out
    }

    #[test]
    fn determinism_same_seed_same_trace() {
        let t1 = trace(99);
        assert!(t1.len() > 1_500);
        assert_eq!(t1, trace(99));
        assert_ne!(t1, trace(100));
    }

    #[test]
    fn directions_get_independent_seeds() {
        let clock = SimClock::new();
        let cfg = FaultConfig::seeded(1).with_loss(0.5);
        let (mut a, mut b) = SimLink::pair(&clock, 1500, cfg.clone(), cfg);
        let mut got_ab = Vec::new();
        let mut got_ba = Vec::new();
        for i in 0..200 {
            a.send(&frame(a.mac(), b.mac(), i, 8)).unwrap();
            b.send(&frame(b.mac(), a.mac(), i, 8)).unwrap();
            got_ab.extend(recv_all(&mut b).iter().map(|f| seq_of(f)));
            got_ba.extend(recv_all(&mut a).iter().map(|f| seq_of(f)));
        }
        assert_ne!(got_ab, got_ba);
    }

    #[test]
    fn hub_unicast_broadcast_multicast() {
        let clock = SimClock::new();
        let mut ports = SimHub::new(&clock, 4, 1500, FaultConfig::default());
        let macs: Vec<MacAddr> = ports.iter().map(|p| p.mac()).collect();
        assert_eq!(macs[3].to_string(), "02:00:00:00:00:04");

        // Unicast 0 -> 2 reaches only port 2.
        let f = frame(macs[0], macs[2], 1, 8);
        ports[0].send(&f).unwrap();
        let got: Vec<usize> = ports.iter_mut().map(|p| recv_all(p).len()).collect();
        assert_eq!(got, vec![0, 0, 1, 0]);

        // Broadcast from 1 reaches every other port, not the sender.
        ports[1]
            .send(&frame(macs[1], MacAddr::BROADCAST, 2, 8))
            .unwrap();
        let got: Vec<usize> = ports.iter_mut().map(|p| recv_all(p).len()).collect();
        assert_eq!(got, vec![1, 0, 1, 1]);

        // Multicast (I/G bit) likewise.
        ports[3]
            .send(&frame(macs[3], MacAddr([0x01, 0, 0x5e, 0, 0, 1]), 3, 8))
            .unwrap();
        let got: Vec<usize> = ports.iter_mut().map(|p| recv_all(p).len()).collect();
        assert_eq!(got, vec![1, 1, 1, 0]);

        // Unknown unicast and frames to oneself go nowhere, counted.
        ports[0]
            .send(&frame(macs[0], MacAddr([2, 9, 9, 9, 9, 9]), 4, 8))
            .unwrap();
        ports[0].send(&frame(macs[0], macs[0], 5, 8)).unwrap();
        assert!(ports.iter_mut().all(|p| recv_all(p).is_empty()));
        assert_eq!(ports[0].stats().unroutable, 2);
        assert_eq!(ports[0].stats().sent, 3);
    }

    #[test]
    fn hub_ports_get_derived_seeds() {
        let clock = SimClock::new();
        let mut ports = SimHub::new(&clock, 3, 1500, FaultConfig::seeded(5).with_loss(0.5));
        let macs: Vec<MacAddr> = ports.iter().map(|p| p.mac()).collect();
        for i in 0..200 {
            ports[0].send(&frame(macs[0], macs[2], i, 8)).unwrap();
            ports[1].send(&frame(macs[1], macs[2], i, 8)).unwrap();
        }
        let got = recv_all(&mut ports[2]);
        let from0: Vec<u32> = got
            .iter()
            .filter(|f| f[6..12] == macs[0].0)
            .map(|f| seq_of(f))
            .collect();
        let from1: Vec<u32> = got
            .iter()
            .filter(|f| f[6..12] == macs[1].0)
            .map(|f| seq_of(f))
            .collect();
        assert_ne!(from0, from1);
        assert_eq!(ports[0].fault_stats().lost + from0.len() as u64, 200);
    }

    #[test]
    fn oversize_and_runt_rejected() {
        let clock = SimClock::new();
        let (mut a, mut b) =
            SimLink::pair(&clock, 1000, FaultConfig::default(), FaultConfig::default());
        let ok = frame(a.mac(), b.mac(), 1, 1000 - 6);
        assert_eq!(ok.len(), 1014);
        a.send(&ok).unwrap();
        let big = frame(a.mac(), b.mac(), 1, 1000 - 5);
        let e = a.send(&big).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("1015"), "{e}");
        let e = a.send(&[0u8; 13]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let st = a.stats();
        assert_eq!((st.sent, st.oversize, st.runt), (1, 1, 1));
        assert_eq!(recv_all(&mut b), vec![ok]);
    }

    #[test]
    fn queues_are_bounded() {
        let clock = SimClock::new();
        let opts = SimOptions {
            queue_limit: 8,
            ..SimOptions::default()
        };
        let (mut a, mut b) = SimLink::pair_with(
            &clock,
            opts.clone(),
            FaultConfig::default(),
            FaultConfig::default(),
        );
        for i in 0..8 {
            a.send(&frame(a.mac(), b.mac(), i, 8)).unwrap();
        }
        let e = a.send(&frame(a.mac(), b.mac(), 8, 8)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(a.stats().would_block, 1);
        assert_eq!(recv_all(&mut b).len(), 8);
        a.send(&frame(a.mac(), b.mac(), 9, 8)).unwrap();

        // Broadcast is tail-dropped at a full port, delivered elsewhere.
        let mut ports = SimHub::with_options(&clock, opts, vec![FaultConfig::default(); 3]);
        let m: Vec<MacAddr> = ports.iter().map(|p| p.mac()).collect();
        for i in 0..8 {
            ports[0].send(&frame(m[0], m[1], i, 8)).unwrap();
        }
        ports[2]
            .send(&frame(m[2], MacAddr::BROADCAST, 99, 8))
            .unwrap();
        assert_eq!(ports[1].stats().queue_dropped, 1);
        assert_eq!(recv_all(&mut ports[0]).len(), 1);
        assert_eq!(recv_all(&mut ports[1]).len(), 8);
    }

    #[test]
    fn padding_and_truncation() {
        let clock = SimClock::new();
        let opts = SimOptions {
            pad_short_frames: true,
            ..SimOptions::default()
        };
        let (mut a, mut b) =
            SimLink::pair_with(&clock, opts, FaultConfig::default(), FaultConfig::default());
        let f = frame(a.mac(), b.mac(), 3, 4);
        assert_eq!(f.len(), 24);
        a.send(&f).unwrap();
        let got = recv_all(&mut b);
        assert_eq!(got[0].len(), ETH_MIN_FRAME_LEN);
        assert_eq!(
            seq_of(&got[0]),
            3,
            "receiver trims padding by the length field"
        );

        a.send(&f).unwrap();
        let mut small = [0u8; 10];
        assert_eq!(b.recv(&mut small).unwrap(), 10);
        assert_eq!(small[..], got[0][..10]);
        assert_eq!(b.stats().truncated, 1);
    }

    #[test]
    fn loss_and_reorder_through_pair() {
        let clock = SimClock::new();
        let (mut a, mut b) = SimLink::pair(
            &clock,
            1500,
            FaultConfig::seeded(8)
                .with_loss(0.1)
                .with_reorder(0.1, Duration::from_micros(30)),
            FaultConfig::default(),
        );
        let n = 4_000;
        let mut seqs = Vec::new();
        for i in 0..n {
            a.send(&frame(a.mac(), b.mac(), i, 8)).unwrap();
            clock.advance(Duration::from_micros(10));
            seqs.extend(recv_all(&mut b).iter().map(|f| seq_of(f)));
        }
        while let Some(t) = b.poll_at() {
            clock.advance_to(t);
            seqs.extend(recv_all(&mut b).iter().map(|f| seq_of(f)));
        }
        let st = a.fault_stats();
        assert_eq!(seqs.len() as u64, n as u64 - st.lost);
        let lost = st.lost as f64 / n as f64;
        assert!((lost - 0.1).abs() < 0.015, "loss {lost}");
        let inversions = seqs.windows(2).filter(|w| w[1] < w[0]).count() as u64;
        assert!(inversions > 0 && inversions <= st.reordered);
    }

    #[test]
    fn partition_and_heal() {
        let clock = SimClock::new();
        let (mut a, mut b) =
            SimLink::pair(&clock, 1500, FaultConfig::default(), FaultConfig::default());
        let ctl = a.control();
        assert_eq!(ctl.ports(), 2);
        a.send(&frame(a.mac(), b.mac(), 1, 8)).unwrap(); // in flight before the cut
        ctl.set_up(1, false).unwrap();
        assert!(!ctl.is_up(1));
        a.send(&frame(a.mac(), b.mac(), 2, 8)).unwrap();
        b.send(&frame(b.mac(), a.mac(), 3, 8)).unwrap();
        assert_eq!(
            recv_all(&mut b)
                .iter()
                .map(|f| seq_of(f))
                .collect::<Vec<_>>(),
            vec![1]
        );
        assert!(recv_all(&mut a).is_empty());
        assert_eq!(a.stats().partitioned, 1);
        assert_eq!(ctl.stats(1).partitioned, 1);
        ctl.set_up(1, true).unwrap();
        a.send(&frame(a.mac(), b.mac(), 4, 8)).unwrap();
        assert_eq!(recv_all(&mut b).len(), 1);
        assert_eq!(
            ctl.set_up(2, false).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );

        // Hub: a broadcast still reaches the ports that are up.
        let mut ports = SimHub::new(&clock, 3, 1500, FaultConfig::default());
        let ctl = ports[0].control();
        ctl.set_up(2, false).unwrap();
        let m0 = ports[0].mac();
        ports[0].send(&frame(m0, MacAddr::BROADCAST, 5, 8)).unwrap();
        assert_eq!(recv_all(&mut ports[1]).len(), 1);
        assert!(recv_all(&mut ports[2]).is_empty());
        assert_eq!(ports[0].stats().partitioned, 1);
    }

    #[test]
    fn faults_change_mid_run_keeping_fifo() {
        let clock = SimClock::new();
        let d = Duration::from_micros(100);
        let (mut a, mut b) = SimLink::pair(
            &clock,
            1500,
            FaultConfig::default().with_delay(d, Duration::ZERO),
            FaultConfig::default(),
        );
        let ctl = b.control();
        let t0 = clock.now();
        a.send(&frame(a.mac(), b.mac(), 1, 8)).unwrap();
        // Heal: no delay from now on, but the next frame must not overtake.
        ctl.set_faults(0, FaultConfig::default()).unwrap();
        clock.advance(US);
        a.send(&frame(a.mac(), b.mac(), 2, 8)).unwrap();
        assert!(recv_all(&mut b).is_empty());
        clock.advance_to(t0 + d);
        assert_eq!(
            recv_all(&mut b)
                .iter()
                .map(|f| seq_of(f))
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        // Once the link is idle, frames go through at their send instant again.
        a.send(&frame(a.mac(), b.mac(), 3, 8)).unwrap();
        assert_eq!(recv_all(&mut b).len(), 1);
        assert_eq!(a.fault_stats().frames, 3, "counters kept across the change");
        // Degrade: lose everything.
        ctl.set_faults(0, FaultConfig::default().with_loss(1.0))
            .unwrap();
        a.send(&frame(a.mac(), b.mac(), 4, 8)).unwrap();
        assert!(recv_all(&mut b).is_empty());
        assert_eq!(a.fault_stats().lost, 1);
        let e = ctl
            .set_faults(0, FaultConfig::default().with_loss(7.0))
            .unwrap_err();
        assert!(e.to_string().contains("loss"), "{e}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Under any faults and any interleaving of sends, clock steps and
        /// receives: nothing is delivered early, and every frame is accounted
        /// for (received = accepted - lost - tail-dropped + duplicated).
        #[test]
        fn every_frame_accounted_for(
            seed in proptest::prelude::any::<u64>(),
            loss in 0.0..0.5f64,
            dup in 0.0..0.5f64,
            reorder in 0.0..0.5f64,
            corrupt in 0.0..0.5f64,
            delay_us in 0u64..50,
            jitter_us in 0u64..50,
            rate in proptest::option::of(1_000_000u64..10_000_000_000),
            queue in proptest::option::of(1usize..64),
            ops in proptest::collection::vec((0u8..3, 0usize..1600), 0..400),
        ) {
            let mut cfg = FaultConfig::seeded(seed)
                .with_loss(loss)
                .with_duplicate(dup)
                .with_reorder(reorder, Duration::from_micros(20))
                .with_corrupt(corrupt)
                .with_delay(Duration::from_micros(delay_us), Duration::from_micros(jitter_us));
            cfg.rate_bps = rate;
            cfg.queue_limit = queue;
            let clock = SimClock::new();
            let (mut a, mut b) = SimLink::pair(&clock, 1500, cfg, FaultConfig::default());
            let mut buf = vec![0u8; 1514];
            let (mut accepted, mut received) = (0u64, 0u64);
            let mut lens = std::collections::BTreeMap::<usize, i64>::new();
            for (op, x) in ops {
                match op {
                    0 => match a.send(&vec![0x5a; x]) {
                        Ok(()) => {
                            proptest::prop_assert!((14..=1514).contains(&x));
                            accepted += 1;
                        }
                        Err(e) => proptest::prop_assert_eq!(e.kind(), io::ErrorKind::InvalidInput),
                    },
                    1 => clock.advance(Duration::from_nanos(x as u64 * 50)),
                    _ => {
                        let due = b.next_delivery();
                        match b.recv(&mut buf) {
                            Ok(n) => {
                                proptest::prop_assert!(due.unwrap() <= clock.now());
                                *lens.entry(n).or_default() += 1;
                                received += 1;
                            }
                            Err(_) => proptest::prop_assert!(!matches!(due, Some(t) if t <= clock.now())),
                        }
                    }
                }
            }
            while let Some(t) = b.next_delivery() {
                clock.advance_to(t);
                while let Ok(n) = b.recv(&mut buf) {
                    *lens.entry(n).or_default() += 1;
                    received += 1;
                }
            }
            let st = a.fault_stats();
            proptest::prop_assert_eq!(st.frames, accepted);
            proptest::prop_assert_eq!(received, accepted - st.lost - st.queue_dropped + st.duplicated);
            proptest::prop_assert!(lens.keys().all(|n| (14..=1514).contains(n)));
        }
    }
}
