//! [`PacketLink`]: a real Ethernet link through an `AF_PACKET` / `SOCK_RAW`
//! socket (packet(7)) bound to one interface and one ethertype, or to every
//! ethertype ([`ETH_P_ALL`]) for the I/O runtime, which then installs its
//! own filter with [`Link::set_filter`].
//!
//! What the socket is set up with, in this order (before `bind`, so no frame
//! reaches the socket before its filter is in place: a packet socket opened
//! with protocol 0 receives nothing until it is bound to a protocol):
//!
//! 1. `SOCK_CLOEXEC`; every operation of the [`Link`] trait passes
//!    `MSG_DONTWAIT`, so the link never blocks: waiting is the runtime's
//!    job (ppoll on [`Link::as_fd`]);
//! 2. large buffers: `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE` (need CAP_NET_ADMIN,
//!    e.g. root), falling back to `SO_RCVBUF` / `SO_SNDBUF` (capped by
//!    `net.core.rmem_max` / `wmem_max`); default 4 MiB each;
//! 3. `PACKET_IGNORE_OUTGOING` (Linux 4.20): the socket does not see the
//!    frames its own host transmits on the interface;
//! 4. an optional classic BPF filter (`SO_ATTACH_FILTER`): a
//!    [`netcore::bpf::FrameFilter`] program given in
//!    [`PacketConfig::program`], or the per-socket [`FilterSpec`] (ethertype,
//!    destination port, extra ports, peer MAC and port), so the kernel
//!    hands the socket only its own frames (DESIGN.md, principle 3);
//! 5. an optional `TPACKET_V2` receive ring (`PACKET_RX_RING` + `mmap`),
//!    read without a system call per frame: DESIGN.md measured a 1.05 us
//!    half round-trip with the ring and busy polling vs 1.6 us with plain
//!    `recv` (64 B, veth). V3 is not offered: its block timeout adds
//!    milliseconds of latency.
//!
//! `PACKET_QDISC_BYPASS` is off unless asked for ([`PacketConfig::qdisc_bypass`]):
//! tests and traffic shaping want the kernel queue.
//!
//! Receiving: [`Link::recv_with`] hands frames borrowed in their ring slot
//! (released after the callback), or, without a ring, from one
//! recvmmsg(2) into the link's own batch buffers; transmitting:
//! sendmmsg(2) with one iovec per piece. All system calls are in
//! [`crate::sys`].
//!
//! Interface facts (index, MAC, MTU) come from [`crate::iface::lookup`].
//!
//! Outages (`health`): a send or receive that fails with an
//! outage error (`ENETDOWN`, `ENXIO`, ...) or a pending socket error makes
//! the link check its interface (index, flags, MTU, asked on the socket
//! itself, so in its network namespace) from [`Link::on_timeout`]: at
//! once, then every 100 ms until it is up and running again; an interface
//! re-created under the same name gets the socket bound again (the same
//! descriptor, receive ring and filter) and its groups joined again.
//!
//! Privilege: opening needs CAP_NET_RAW. Without it, [`PacketLink::open`]
//! fails with `PermissionDenied` and a message naming the capability and the
//! exact `setcap cap_net_raw+ep <binary>` command to run.

mod filter;

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use netcore::bpf::Insn;
use nix::sys::socket::MsgFlags;
use rustc_hash::FxHashMap;

pub use self::filter::{attach_filter, read_kernel_stats, FilterSpec};
use super::health::{self, Health, OutageStats, Transition};
pub use super::KernelStats;
use super::Link;
use crate::eth::{MacAddr, ETHERTYPE_EXPERIMENTAL_1, ETH_HEADER_LEN};
use crate::iface::{self, IfaceInfo};
use crate::sys::mmsg::{Mmsg, RecvMeta};
use crate::sys::ring::RxRing;
use crate::sys::{annotate, ifreq, packet, sockopt};

/// Default socket receive and send buffer size in bytes (4 MiB).
pub const DEFAULT_SOCKET_BUFFER: usize = 4 << 20;
/// Frames per `sendmmsg` / `recvmmsg` call; larger batches are split.
pub const MAX_BATCH: usize = 64;
/// Most iovecs in one sendmmsg(2) call of `send_batch_vectored`: four pieces
/// per frame of a full batch (a frame may use more if others use fewer).
pub const MAX_IOV: usize = 4 * MAX_BATCH;
/// Busy-poll budget given to `SO_BUSY_POLL` by [`PacketLink::set_busy_poll`], in us.
pub const BUSY_POLL_US: i32 = 50;
/// The protocol that receives every ethertype (`ETH_P_ALL`,
/// `linux/if_ether.h`): give it as [`PacketConfig::ethertype`].
pub const ETH_P_ALL: u16 = 0x0003;
/// Most distinct Ethernet groups one link joins ([`Link::join_group`]).
pub const MAX_GROUPS: usize = 1024;

/// Options of [`PacketLink::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketConfig {
    /// Ethertype to receive (EDP 0x88B5, ESP 0x88B6), or [`ETH_P_ALL`] for
    /// every ethertype (then give a `program` that keeps only yours).
    /// Frames are sent as given, whatever their ethertype.
    pub ethertype: u16,
    /// Requested `SO_RCVBUF` in bytes (the kernel doubles it for bookkeeping).
    pub rcvbuf: usize,
    /// Requested `SO_SNDBUF` in bytes.
    pub sndbuf: usize,
    /// Per-socket kernel filter; `None` accepts every frame of the ethertype.
    pub filter: Option<FilterSpec>,
    /// A classic-BPF program installed before the socket is bound (e.g. a
    /// compiled [`netcore::bpf::FrameFilter`]); exclusive with `filter`.
    pub program: Option<Vec<Insn>>,
    /// Size of a TPACKET_V2 receive ring in bytes; `None` = recv(2) /
    /// recvmmsg(2).
    pub rx_ring: Option<usize>,
    /// Set `PACKET_IGNORE_OUTGOING` (default true).
    pub ignore_outgoing: bool,
    /// Set `PACKET_QDISC_BYPASS` (default false: keep the kernel queue).
    pub qdisc_bypass: bool,
}

impl Default for PacketConfig {
    fn default() -> Self {
        Self {
            ethertype: ETHERTYPE_EXPERIMENTAL_1,
            rcvbuf: DEFAULT_SOCKET_BUFFER,
            sndbuf: DEFAULT_SOCKET_BUFFER,
            filter: None,
            program: None,
            rx_ring: None,
            ignore_outgoing: true,
            qdisc_bypass: false,
        }
    }
}

/// The error returned when a raw socket may not be opened: names the missing
/// capability and the exact command that grants it to the running program.
pub fn permission_error(what: &str, err: &io::Error) -> io::Error {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "<path of this program>".to_string());
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{what}: {err}: raw Ethernet needs the CAP_NET_RAW capability; \
             grant it with `setcap cap_net_raw+ep {exe}` (as root) or run as root"
        ),
    )
}

/// Receive-side buffers of a link without a ring, allocated on first use.
struct RxBatch {
    mmsg: Mmsg,
    store: Vec<u8>,
    meta: Vec<RecvMeta>,
}

impl RxBatch {
    /// Buffers for [`MAX_BATCH`] frames of up to `slot` bytes.
    fn new(slot: usize) -> Self {
        Self {
            mmsg: Mmsg::new(MAX_BATCH, MAX_BATCH),
            store: vec![0u8; MAX_BATCH * slot],
            meta: vec![RecvMeta::default(); MAX_BATCH],
        }
    }
}

/// An `AF_PACKET` socket on one interface for one ethertype (or all). See
/// the module documentation for how it is configured.
pub struct PacketLink {
    fd: OwnedFd,
    iface: IfaceInfo,
    ethertype: u16,
    ring: Option<RxRing>,
    busy_poll: bool,
    tx: Mmsg,
    rx: Option<RxBatch>,
    groups: FxHashMap<MacAddr, u32>,
    /// `PACKET_STATISTICS` accumulated (the kernel resets on read).
    stat_packets: AtomicU64,
    stat_drops: AtomicU64,
    /// Frames received longer than the link's largest frame, dropped.
    truncated: u64,
    /// Outage state and counters (`super::health`).
    health: Health,
    /// The interface's MTU at the last check (`iface.mtu` stays the MTU
    /// the link was opened with: the size of the frames above it).
    current_mtu: usize,
    /// The interface's MAC at the last check (`iface.mac` stays the one
    /// the link was opened with: the address this end's peers know).
    current_mac: MacAddr,
}

impl std::fmt::Debug for PacketLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketLink")
            .field("fd", &self.fd.as_raw_fd())
            .field("iface", &self.iface)
            .field("ethertype", &format_args!("{:#06x}", self.ethertype))
            .field("rx_ring", &self.ring.is_some())
            .field("busy_poll", &self.busy_poll)
            .field("groups", &self.groups.len())
            .finish()
    }
}

impl PacketLink {
    /// Opens a link on `iface` for `ethertype` with default options (no
    /// kernel filter, no ring). See [`PacketLink::open`].
    pub fn new(iface: &str, ethertype: u16) -> io::Result<Self> {
        Self::open(
            iface,
            &PacketConfig {
                ethertype,
                ..PacketConfig::default()
            },
        )
    }

    /// Opens and configures a packet socket on `iface` (see the module docs).
    ///
    /// Errors: `NotFound` naming the interface if it does not exist;
    /// `PermissionDenied` naming CAP_NET_RAW and the `setcap` command when the
    /// process lacks the capability; `InvalidInput` for a bad interface name,
    /// a bad filter or both `filter` and `program`; other errors from the
    /// socket options (each names the option).
    pub fn open(iface: &str, config: &PacketConfig) -> io::Result<Self> {
        let info = iface::lookup(iface)?;
        let program = match (&config.filter, &config.program) {
            (Some(_), Some(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "PacketConfig: give a filter or a program, not both",
                ))
            }
            (Some(spec), None) => Some(spec.program()?),
            (None, p) => p.clone(),
        };
        let fd = packet::open().map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => {
                permission_error(&format!("opening an AF_PACKET socket on {iface:?}"), &e)
            }
            _ => annotate(e, "socket(AF_PACKET, SOCK_RAW)"),
        })?;
        let b = fd.as_fd();
        sockopt::set_buffer(
            b,
            libc::SO_RCVBUFFORCE,
            libc::SO_RCVBUF,
            config.rcvbuf,
            "SO_RCVBUF",
        )?;
        sockopt::set_buffer(
            b,
            libc::SO_SNDBUFFORCE,
            libc::SO_SNDBUF,
            config.sndbuf,
            "SO_SNDBUF",
        )?;
        if config.ignore_outgoing {
            sockopt::set_int(b, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
                .map_err(|e| annotate(e, "PACKET_IGNORE_OUTGOING (needs Linux 4.20)"))?;
        }
        if config.qdisc_bypass {
            sockopt::set_int(b, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
                .map_err(|e| annotate(e, "PACKET_QDISC_BYPASS"))?;
        }
        if let Some(prog) = &program {
            sockopt::attach_filter(b, prog)?;
        }
        let ring = match config.rx_ring {
            Some(bytes) => Some(RxRing::setup(b, bytes, info.mtu + ETH_HEADER_LEN)?),
            None => None,
        };
        packet::bind(b, info.index, config.ethertype)
            .map_err(|e| annotate(e, &format!("bind AF_PACKET socket to {iface:?}")))?;
        tracing::debug!(
            iface,
            ethertype = format_args!("{:#06x}", config.ethertype),
            rx_ring = ?config.rx_ring,
            filter = program.as_ref().map(Vec::len),
            "packet link open"
        );
        Ok(Self {
            fd,
            ethertype: config.ethertype,
            ring,
            busy_poll: false,
            tx: Mmsg::new(MAX_BATCH, MAX_IOV),
            rx: None,
            groups: FxHashMap::default(),
            stat_packets: AtomicU64::new(0),
            stat_drops: AtomicU64::new(0),
            truncated: 0,
            health: Health::new(Instant::now()),
            current_mtu: info.mtu,
            current_mac: info.mac,
            iface: info,
        })
    }

    /// Name, index, MAC and MTU of the interface.
    pub fn iface(&self) -> &IfaceInfo {
        &self.iface
    }

    /// The ethertype this link receives ([`ETH_P_ALL`] for every one).
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// True when frames are read from a TPACKET_V2 ring.
    pub fn has_rx_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// Replaces the kernel filter with the program of `spec` (see
    /// [`attach_filter`]).
    pub fn set_filter_spec(&mut self, spec: &FilterSpec) -> io::Result<()> {
        attach_filter(self.fd.as_fd(), spec)
    }

    /// Busy-poll mode: sets `SO_BUSY_POLL` to [`BUSY_POLL_US`] us (or 0) so
    /// the kernel polls the device queue on receive where the driver supports
    /// it, and records the mode for callers ([`PacketLink::busy_poll`]) that
    /// then spin on `recv` instead of sleeping in poll(2).
    ///
    /// Errors: `setsockopt` errors (raising `SO_BUSY_POLL` above
    /// `net.core.busy_read` needs CAP_NET_ADMIN); the mode is recorded anyway.
    pub fn set_busy_poll(&mut self, on: bool) -> io::Result<()> {
        self.busy_poll = on;
        let us = if on { BUSY_POLL_US } else { 0 };
        sockopt::set_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_BUSY_POLL, us)
            .map_err(|e| annotate(e, "SO_BUSY_POLL"))
    }

    /// Whether busy-poll mode is on.
    pub fn busy_poll(&self) -> bool {
        self.busy_poll
    }

    /// The socket's file descriptor, for mio / poll.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Effective receive buffer in bytes (`SO_RCVBUF`, as doubled by the kernel).
    pub fn rcvbuf(&self) -> io::Result<usize> {
        sockopt::get_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).map(|v| v as usize)
    }

    /// Effective send buffer in bytes (`SO_SNDBUF`).
    pub fn sndbuf(&self) -> io::Result<usize> {
        sockopt::get_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF).map(|v| v as usize)
    }

    /// True when a frame is waiting in the RX ring (always false without a ring).
    pub fn ring_ready(&self) -> bool {
        self.ring.as_ref().is_some_and(|r| r.ready())
    }

    /// Frames received that were longer than [`Link::max_frame`] and were
    /// dropped (counted, never handed out cut).
    pub fn truncated(&self) -> u64 {
        self.truncated
    }

    /// Groups joined, with their membership counts.
    pub fn groups(&self) -> impl Iterator<Item = (MacAddr, u32)> + '_ {
        self.groups.iter().map(|(m, n)| (*m, *n))
    }

    fn check_len(&self, len: usize) -> io::Result<()> {
        if len > self.max_frame() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "frame of {len} bytes exceeds MTU {} + {ETH_HEADER_LEN} of {}",
                    self.iface.mtu, self.iface.name
                ),
            ));
        }
        if len < ETH_HEADER_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {len} bytes is shorter than an Ethernet header"),
            ));
        }
        Ok(())
    }

    /// Checks a gathered frame: its length and its number of pieces.
    fn check_pieces(&self, pieces: &[IoSlice<'_>]) -> io::Result<()> {
        let nonempty = pieces.iter().filter(|p| !p.is_empty()).count();
        if nonempty > MAX_IOV {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {nonempty} pieces: at most {MAX_IOV}"),
            ));
        }
        self.check_len(pieces.iter().map(|p| p.len()).sum())
    }

    /// Receives up to `bufs.len()` frames (`recvmmsg`, or the RX ring);
    /// frame `i` is copied into `bufs[i]` (truncated to its length) and its
    /// length in bytes stored in `lens[i]`. Returns the number of frames.
    ///
    /// Errors: `WouldBlock` when no frame is ready; `InvalidInput` when
    /// `lens` is shorter than `bufs`.
    pub fn recv_batch(&mut self, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
        if lens.len() < bufs.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "recv_batch: lens is shorter than bufs",
            ));
        }
        if let Some(ring) = self.ring.as_mut() {
            let mut n = 0;
            while n < bufs.len() {
                match ring.try_recv(bufs[n], &mut self.truncated) {
                    Some(len) => {
                        lens[n] = len;
                        n += 1;
                    }
                    None => break,
                }
            }
            return if n == 0 {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                self.received();
                Ok(n)
            };
        }
        let mut meta = [RecvMeta::default(); MAX_BATCH];
        let mut total = 0;
        while total < bufs.len() {
            let chunk = (bufs.len() - total).min(MAX_BATCH);
            let slot = self.iface.mtu + ETH_HEADER_LEN;
            let rx = self.rx.get_or_insert_with(|| RxBatch::new(slot));
            let r = match rx.mmsg.recv(
                self.fd.as_fd(),
                &mut bufs[total..total + chunk],
                &mut meta[..chunk],
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(r) => r,
                // An error after some frames: report those; the error
                // (if persistent) comes back on the next call.
                Err(_) if total > 0 => break,
                Err(e) => return Err(self.io_error(e, "recvmmsg")),
            };
            for (i, m) in meta[..r].iter().enumerate() {
                lens[total + i] = m.len;
            }
            total += r;
            if r < chunk {
                break;
            }
        }
        Ok(total)
    }

    /// Names the interface in errors other than the transient ones callers
    /// match on by code (EAGAIN, ENOBUFS, EINTR), which are passed as they
    /// are; an outage error ([`health::is_outage`]) keeps its code too and
    /// makes the link check its interface at the next
    /// [`Link::on_timeout`], and `ENOBUFS` does when no check ran for a
    /// while (without the kernel queue, a lost carrier shows as it).
    fn io_error(&mut self, e: io::Error, what: &str) -> io::Error {
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => e,
            Some(libc::ENOBUFS) => {
                self.health.on_pressure(Instant::now());
                e
            }
            _ if health::is_outage(&e) => {
                if self.health.on_error() {
                    tracing::debug!(iface = %self.iface.name, error = %e, "{what}: link outage suspected; checking the interface");
                }
                io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::ENETDOWN))
            }
            _ => io::Error::new(e.kind(), format!("{what} on {}: {e}", self.iface.name)),
        }
    }

    /// Frames arrived: while the link counts as down, evidence that it
    /// works again ([`Health::on_rx`]).
    #[inline]
    fn received(&mut self) {
        if self.health.is_down() {
            self.health.on_rx(Instant::now());
        }
    }

    /// The outage counters (also through [`Link::outage_stats`]).
    pub fn outage_stats(&self) -> OutageStats {
        let mut s = self.health.stats();
        s.down = self.health.is_down();
        s
    }

    /// Checks the interface at `now` (`health`): reads the
    /// socket's pending error (clearing it, and with it poll(2)'s
    /// `POLLERR`); unless the link is quiet (no evidence, not down), asks
    /// the kernel for the interface's index, flags and MTU, binds the
    /// socket again when the index changed (the interface was re-created)
    /// and records whether it is up and running.
    fn check(&mut self, now: Instant) {
        match sockopt::get_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_ERROR) {
            Ok(0) => {}
            Ok(err) => {
                tracing::debug!(iface = %self.iface.name, error = %io::Error::from_raw_os_error(err), "packet socket reported an error");
                self.health.on_error();
            }
            Err(e) => {
                tracing::debug!(iface = %self.iface.name, "SO_ERROR: {e}");
            }
        }
        if self.health.quiet() {
            self.health.checked(now, true);
            return;
        }
        let up = match ifreq::query_on(self.fd.as_fd(), &self.iface.name) {
            Err(e) => {
                tracing::trace!(iface = %self.iface.name, "interface query: {e}");
                false
            }
            Ok(st) => self.adopt(&st),
        };
        tracing::trace!(iface = %self.iface.name, up, "interface checked");
        match self.health.checked(now, up) {
            Transition::Down => tracing::warn!(
                iface = %self.iface.name,
                "link down: frames are not sent until it is back (checking every {} ms)",
                health::DOWN_RECHECK.as_millis()
            ),
            Transition::Up(d) => tracing::warn!(
                iface = %self.iface.name,
                down_ms = d.as_millis() as u64,
                "link back up"
            ),
            Transition::None => {}
        }
    }

    /// Takes what a check found about the interface: a new index (the
    /// interface was re-created: the socket is bound to it and joins its
    /// groups again), a new MTU or MAC (logged). Returns whether the link
    /// works: bound, up, with a carrier (the driver's link status, read
    /// directly: the `IFF_RUNNING` flag can lag a second behind a
    /// re-created veth that already carries frames), with an MTU that
    /// carries the runtime's frames.
    fn adopt(&mut self, st: &ifreq::IfaceState) -> bool {
        if st.index != self.iface.index {
            if let Err(e) = packet::bind(self.fd.as_fd(), st.index, self.ethertype) {
                tracing::warn!(iface = %self.iface.name, index = st.index, "binding to the re-created interface: {e}");
                return false;
            }
            let groups: Vec<MacAddr> = self.groups.keys().copied().collect();
            for g in groups.into_iter().filter(|g| *g != MacAddr::BROADCAST) {
                if let Err(e) = packet::membership(self.fd.as_fd(), st.index, g.0, true) {
                    tracing::warn!(iface = %self.iface.name, group = %g, "joining again after re-creation: {e}");
                }
            }
            tracing::warn!(
                iface = %self.iface.name,
                old_index = self.iface.index,
                new_index = st.index,
                "interface re-created: socket bound again"
            );
            self.iface.index = st.index;
            self.health.on_rebind();
        }
        if st.mac != self.current_mac.0 {
            tracing::warn!(
                iface = %self.iface.name,
                was = %self.current_mac,
                now = %MacAddr(st.mac),
                "interface MAC changed: this end keeps sending as {} (its peers know it by that address)",
                self.iface.mac
            );
            self.current_mac = MacAddr(st.mac);
        }
        if st.mtu != self.current_mtu {
            tracing::warn!(
                iface = %self.iface.name,
                was = self.current_mtu,
                now = st.mtu,
                opened_with = self.iface.mtu,
                "interface MTU changed; frames stay at most {} + 14 bytes (the link counts as down while the MTU is below that)",
                self.iface.mtu
            );
            self.current_mtu = st.mtu;
            self.health.on_mtu_change();
        }
        // A lowered MTU cannot carry the frames the runtime builds (full
        // segments fail with EMSGSIZE): down until it is restored.
        st.up && st.running && st.mtu >= self.iface.mtu
    }

    /// Reads the kernel's counters into the accumulated ones.
    fn poll_kernel_stats(&self) -> io::Result<()> {
        let (packets, drops) =
            packet::statistics(self.fd.as_fd()).map_err(|e| annotate(e, "PACKET_STATISTICS"))?;
        self.stat_packets
            .fetch_add(u64::from(packets), Ordering::Relaxed);
        self.stat_drops
            .fetch_add(u64::from(drops), Ordering::Relaxed);
        if drops > 0 {
            tracing::debug!(iface = %self.iface.name, drops, "kernel dropped frames (buffer or ring full)");
        }
        Ok(())
    }

    fn group_check(group: MacAddr) -> io::Result<()> {
        if group.is_group() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{group} is not an Ethernet group address (I/G bit clear)"),
            ))
        }
    }
}

impl AsFd for PacketLink {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Link for PacketLink {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.check_len(frame.len())?;
        // The socket is bound, so no destination address is needed: the
        // kernel sends on the bound interface with the bound protocol.
        nix::sys::socket::send(self.fd.as_raw_fd(), frame, MsgFlags::MSG_DONTWAIT)
            .map_err(|e| self.io_error(e.into(), "send"))?;
        Ok(())
    }

    fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        if let [frame] = frames {
            // One frame: send(2) skips sendmmsg's per-message header copies.
            return self.send(frame).map(|()| 1);
        }
        crate::link::send_batch_as_vectored::<MAX_BATCH, _>(self, frames)
    }

    fn send_batch_vectored(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        // One frame (a ping-pong message) goes with sendmsg(2), a batch
        // with sendmmsg(2) (`Mmsg::send`). Oversized frames (and frames of too many pieces) end the batch
        // before them; the first one is an error.
        let mut valid = 0;
        for pieces in frames {
            if let Err(e) = self.check_pieces(pieces) {
                if valid == 0 {
                    return Err(e);
                }
                break;
            }
            valid += 1;
        }
        self.tx
            .send(
                self.fd.as_fd(),
                &frames[..valid],
                &[],
                MsgFlags::MSG_DONTWAIT,
            )
            .map_err(|e| self.io_error(e, "sendmsg/sendmmsg"))
    }

    fn recv_batch(&mut self, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
        PacketLink::recv_batch(self, bufs, lens)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = match self.ring.as_mut() {
            Some(ring) => ring
                .try_recv(buf, &mut self.truncated)
                .ok_or_else(|| io::ErrorKind::WouldBlock.into()),
            None => nix::sys::socket::recv(self.fd.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT)
                .map_err(|e| self.io_error(e.into(), "recv")),
        };
        if r.is_ok() {
            self.received();
        }
        r
    }

    /// Hands up to `max` frames to `f`: from the ring, borrowed in their
    /// slots; otherwise from one recvmmsg(2) of at most [`MAX_BATCH`]
    /// frames into the link's own buffers (allocated on first use: 64
    /// frames of [`Link::max_frame`] bytes). Frames longer than
    /// `max_frame()` are dropped and counted ([`PacketLink::truncated`]),
    /// so the call may return 0.
    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        if let Some(ring) = self.ring.as_mut() {
            let b = ring.recv_with(max, f);
            if b.truncated > 0 {
                self.truncated += b.truncated as u64;
                tracing::trace!(
                    truncated = b.truncated,
                    "oversized frames dropped from the ring"
                );
            }
            if b.frames == 0 && b.truncated == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.received();
            return Ok(b.frames);
        }
        let slot = self.max_frame();
        let n = max.min(MAX_BATCH);
        let rx = self.rx.get_or_insert_with(|| RxBatch::new(slot));
        let r = rx.mmsg.recv_slots(
            self.fd.as_fd(),
            &mut rx.store[..n * slot],
            slot,
            &mut rx.meta[..n],
            MsgFlags::MSG_DONTWAIT,
        );
        let r = match r {
            Ok(r) => r,
            Err(e) => return Err(self.io_error(e, "recvmmsg")),
        };
        let rx = self.rx.as_ref().expect("allocated above");
        let mut seen = 0;
        let mut truncated = 0;
        for (i, m) in rx.meta[..r].iter().enumerate() {
            if m.truncated {
                truncated += 1;
                continue;
            }
            f(&rx.store[i * slot..][..m.len]);
            seen += 1;
        }
        if truncated > 0 {
            self.truncated += truncated;
            tracing::trace!(truncated, "oversized frames dropped");
        }
        if r > 0 {
            self.received();
        }
        Ok(seen)
    }

    fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn set_filter(&mut self, prog: &[Insn]) -> io::Result<()> {
        sockopt::attach_filter(self.fd.as_fd(), prog)?;
        tracing::debug!(iface = %self.iface.name, insns = prog.len(), "kernel filter replaced");
        Ok(())
    }

    /// `PACKET_STATISTICS` accumulated since the link was opened (one
    /// getsockopt(2) per call; `None` if it fails).
    fn kernel_stats(&self) -> Option<KernelStats> {
        if let Err(e) = self.poll_kernel_stats() {
            tracing::debug!(iface = %self.iface.name, "{e}");
            return None;
        }
        Some(KernelStats {
            packets: self.stat_packets.load(Ordering::Relaxed),
            drops: self.stat_drops.load(Ordering::Relaxed),
        })
    }

    /// `PACKET_ADD_MEMBERSHIP` on the first join of `group` (broadcast
    /// needs none: it is always received). Errors: `InvalidInput` for a
    /// unicast address; `Other` beyond [`MAX_GROUPS`] groups; setsockopt(2).
    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        Self::group_check(group)?;
        if let Some(n) = self.groups.get_mut(&group) {
            *n += 1;
            return Ok(());
        }
        if self.groups.len() >= MAX_GROUPS {
            return Err(io::Error::other(format!(
                "{}: already a member of {MAX_GROUPS} Ethernet groups (the limit)",
                self.iface.name
            )));
        }
        if group != MacAddr::BROADCAST {
            packet::membership(self.fd.as_fd(), self.iface.index, group.0, true).map_err(|e| {
                annotate(
                    e,
                    &format!("PACKET_ADD_MEMBERSHIP {group} on {}", self.iface.name),
                )
            })?;
        }
        self.groups.insert(group, 1);
        tracing::debug!(iface = %self.iface.name, %group, "joined group");
        Ok(())
    }

    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        let Some(n) = self.groups.get_mut(&group) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: not a member of group {group}", self.iface.name),
            ));
        };
        *n -= 1;
        if *n > 0 {
            return Ok(());
        }
        self.groups.remove(&group);
        if group != MacAddr::BROADCAST {
            packet::membership(self.fd.as_fd(), self.iface.index, group.0, false).map_err(|e| {
                annotate(
                    e,
                    &format!("PACKET_DROP_MEMBERSHIP {group} on {}", self.iface.name),
                )
            })?;
        }
        tracing::debug!(iface = %self.iface.name, %group, "left group");
        Ok(())
    }

    fn max_frame(&self) -> usize {
        self.iface.mtu + ETH_HEADER_LEN
    }

    fn mac(&self) -> MacAddr {
        self.iface.mac
    }

    fn mtu(&self) -> usize {
        self.iface.mtu
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    /// Ethernet: the NIC drops a frame whose FCS fails; veth copies memory.
    fn frame_integrity(&self) -> bool {
        true
    }

    fn rx_ready(&self) -> Option<bool> {
        self.ring.as_ref().map(RxRing::ready)
    }

    /// Checks the interface when a check is due (`health`).
    fn on_timeout(&mut self, now: Instant) -> io::Result<()> {
        if self.health.due(now) {
            self.check(now);
        }
        Ok(())
    }

    /// The next interface check (`health`).
    fn poll_at(&self) -> Option<Instant> {
        Some(self.health.poll_at())
    }

    /// `POLLERR`: the socket has a pending error; checks the interface now.
    fn on_error_event(&mut self, now: Instant) {
        self.health.on_error();
        self.check(now);
    }

    fn outage_stats(&self) -> OutageStats {
        PacketLink::outage_stats(self)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
