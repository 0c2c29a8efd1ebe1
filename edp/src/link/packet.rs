//! [`PacketLink`]: a real Ethernet link through an `AF_PACKET` / `SOCK_RAW`
//! socket (packet(7)) bound to one interface and one ethertype.
//!
//! What the socket is set up with, in this order (before `bind`, so no frame
//! reaches the socket before its filter is in place: a packet socket opened
//! with protocol 0 receives nothing until it is bound to a protocol):
//!
//! 1. `SOCK_CLOEXEC`; every operation of the [`Link`] trait passes
//!    `MSG_DONTWAIT`, so the link never blocks, except
//!    [`Link::recv_wait`], which sleeps inside recv(2) (with `SO_RCVTIMEO`
//!    for its timeout, rounded up to the kernel's timer tick): one system
//!    call per frame, as a blocking UDP socket, instead of poll + recv;
//! 2. large buffers: `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE` (need CAP_NET_ADMIN,
//!    e.g. root), falling back to `SO_RCVBUF` / `SO_SNDBUF` (capped by
//!    `net.core.rmem_max` / `wmem_max`); default 4 MiB each;
//! 3. `PACKET_IGNORE_OUTGOING` (Linux 4.20): the socket does not see the
//!    frames its own host transmits on the interface;
//! 4. an optional classic BPF filter (`SO_ATTACH_FILTER`) built by
//!    [`build_filter`] from a [`FilterSpec`]: ethertype + EDP destination port
//!    (+ extra ports, + peer MAC and port), so the kernel hands each socket
//!    only its own frames (DESIGN.md, principle 3);
//! 5. an optional `TPACKET_V2` receive ring (`PACKET_RX_RING` + `mmap`),
//!    read without a system call per frame: DESIGN.md measured a 1.05 us
//!    half round-trip with the ring and busy polling vs 1.6 us with plain
//!    `recv` (64 B, veth). V3 is not offered: its block timeout adds
//!    milliseconds of latency.
//!
//! `PACKET_QDISC_BYPASS` is off unless asked for ([`PacketConfig::qdisc_bypass`]):
//! tests and traffic shaping want the kernel queue.
//!
//! Interface facts (index, MAC, MTU) come from [`crate::iface::lookup`]
//! (ioctls, not the `netdev` crate).
//!
//! Privilege: opening needs CAP_NET_RAW. Without it, [`PacketLink::open`]
//! fails with `PermissionDenied` and a message naming the capability and the
//! exact `setcap cap_net_raw+ep <binary>` command to run.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use super::Link;
use crate::iface::{self, IfaceInfo};
use crate::wire::{MacAddr, ETHERTYPE_EDP, ETH_HEADER_LEN};

/// Default socket receive and send buffer size in bytes (4 MiB).
pub const DEFAULT_SOCKET_BUFFER: usize = 4 << 20;
/// Default size of the TPACKET_V2 receive ring in bytes (4 MiB).
pub const DEFAULT_RX_RING_BYTES: usize = 4 << 20;
/// Frames per `sendmmsg` / `recvmmsg` call; larger batches are split.
pub const MAX_BATCH: usize = 64;

/// Most iovecs in one sendmmsg(2) call of `send_batch_vectored`: four pieces
/// per frame of a full batch (a frame may use more if others use fewer).
pub const MAX_IOV: usize = 4 * MAX_BATCH;

/// Pieces of a single frame sent with one sendmsg(2) instead of sendmmsg.
const SMALL_GATHER: usize = 4;
/// Busy-poll budget given to `SO_BUSY_POLL` by [`PacketLink::set_busy_poll`], in us.
pub const BUSY_POLL_US: i32 = 50;
/// Most extra accepted ports a [`FilterSpec`] may list (keeps BPF jumps < 256).
pub const MAX_EXTRA_PORTS: usize = 64;

/// Options of [`PacketLink::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketConfig {
    /// Ethertype to send and receive (EDP 0x88B5, ESP 0x88B6).
    pub ethertype: u16,
    /// Requested `SO_RCVBUF` in bytes (the kernel doubles it for bookkeeping).
    pub rcvbuf: usize,
    /// Requested `SO_SNDBUF` in bytes.
    pub sndbuf: usize,
    /// Kernel filter; `None` accepts every frame of the ethertype.
    pub filter: Option<FilterSpec>,
    /// Size of a TPACKET_V2 receive ring in bytes; `None` = plain `recv`.
    pub rx_ring: Option<usize>,
    /// Set `PACKET_IGNORE_OUTGOING` (default true).
    pub ignore_outgoing: bool,
    /// Set `PACKET_QDISC_BYPASS` (default false: keep the kernel queue).
    pub qdisc_bypass: bool,
}

impl PacketConfig {
    /// `ethertype` value that receives every ethertype (`ETH_P_ALL`): the
    /// runtime then installs its own filter with [`Link::set_filter`].
    pub const ALL_ETHERTYPES: u16 = libc::ETH_P_ALL as u16;
}

impl Default for PacketConfig {
    fn default() -> Self {
        Self {
            ethertype: ETHERTYPE_EDP,
            rcvbuf: DEFAULT_SOCKET_BUFFER,
            sndbuf: DEFAULT_SOCKET_BUFFER,
            filter: None,
            rx_ring: None,
            ignore_outgoing: true,
            qdisc_bypass: false,
        }
    }
}

/// Which frames a kernel filter accepts: a frame passes when its ethertype is
/// `ethertype` and either
/// - its EDP destination port (bytes 16..18 of the frame) is `port` and, when
///   `peer` is set, its source MAC and EDP source port are the peer's; or
/// - its destination port is one of `extra_ports` (e.g. port 0 for the echo
///   responder), whoever sent it.
///
/// The layout (ports at Ethernet offset 14 and 16) is shared by EDP and ESP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSpec {
    /// Ethertype the frame must carry.
    pub ethertype: u16,
    /// Destination port of the socket.
    pub port: u16,
    /// Further destination ports accepted from anyone (at most [`MAX_EXTRA_PORTS`]).
    pub extra_ports: Vec<u16>,
    /// For a connected socket: only frames from this MAC and source port.
    pub peer: Option<(MacAddr, u16)>,
}

impl FilterSpec {
    /// Accept `ethertype` frames for destination `port` from anyone.
    pub fn port(ethertype: u16, port: u16) -> Self {
        Self {
            ethertype,
            port,
            extra_ports: Vec::new(),
            peer: None,
        }
    }
}

// Classic BPF opcodes (linux/bpf_common.h).
const BPF_LD_H_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
/// Return value of an accepting filter: keep the whole frame.
pub const BPF_ACCEPT: u32 = u32::MAX;

#[derive(Clone, Copy)]
enum Target {
    Next,
    Accept,
    Drop,
}

/// Builds the classic BPF program for `spec` (see [`FilterSpec`] for what it
/// accepts). Loads beyond the end of a short frame make the kernel drop it.
///
/// Errors: `InvalidInput` when `extra_ports` has more than
/// [`MAX_EXTRA_PORTS`] entries.
pub fn build_filter(spec: &FilterSpec) -> io::Result<Vec<libc::sock_filter>> {
    if spec.extra_ports.len() > MAX_EXTRA_PORTS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "BPF filter: {} extra ports, at most {MAX_EXTRA_PORTS}",
                spec.extra_ports.len()
            ),
        ));
    }
    // (code, k, jump-if-true, jump-if-false)
    let mut prog: Vec<(u16, u32, Target, Target)> = Vec::new();
    let ld_h = |off: u32| (BPF_LD_H_ABS, off, Target::Next, Target::Next);
    prog.push(ld_h(12));
    prog.push((BPF_JEQ_K, spec.ethertype as u32, Target::Next, Target::Drop));
    prog.push(ld_h(16));
    for &p in &spec.extra_ports {
        prog.push((BPF_JEQ_K, p as u32, Target::Accept, Target::Next));
    }
    prog.push((BPF_JEQ_K, spec.port as u32, Target::Next, Target::Drop));
    if let Some((mac, peer_port)) = spec.peer {
        let m = mac.0;
        let hi = u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
        let lo = u16::from_be_bytes([m[4], m[5]]) as u32;
        prog.push((BPF_LD_W_ABS, 6, Target::Next, Target::Next));
        prog.push((BPF_JEQ_K, hi, Target::Next, Target::Drop));
        prog.push(ld_h(10));
        prog.push((BPF_JEQ_K, lo, Target::Next, Target::Drop));
        prog.push(ld_h(14));
        prog.push((BPF_JEQ_K, peer_port as u32, Target::Next, Target::Drop));
    }
    let accept = prog.len();
    let drop = accept + 1;
    let mut out = Vec::with_capacity(prog.len() + 2);
    for (pc, &(code, k, jt, jf)) in prog.iter().enumerate() {
        let rel = |t: Target| -> u8 {
            let to = match t {
                Target::Next => pc + 1,
                Target::Accept => accept,
                Target::Drop => drop,
            };
            // At most 2 + 64 + 1 + 6 instructions: always < 256.
            (to - pc - 1) as u8
        };
        out.push(libc::sock_filter {
            code,
            jt: rel(jt),
            jf: rel(jf),
            k,
        });
    }
    out.push(libc::sock_filter {
        code: BPF_RET_K,
        jt: 0,
        jf: 0,
        k: BPF_ACCEPT,
    });
    out.push(libc::sock_filter {
        code: BPF_RET_K,
        jt: 0,
        jf: 0,
        k: 0,
    });
    Ok(out)
}

/// Attaches (or replaces) the classic BPF filter of socket `fd`
/// (`SO_ATTACH_FILTER`). Frames queued before the call are not re-filtered:
/// readers must still check addresses themselves.
///
/// Errors: those of [`build_filter`] and of `setsockopt(2)`.
pub fn attach_filter(fd: BorrowedFd<'_>, spec: &FilterSpec) -> io::Result<()> {
    let mut prog = build_filter(spec)?;
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    setsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_ATTACH_FILTER,
        &fprog,
    )
    .map_err(|e| annotate(e, "SO_ATTACH_FILTER"))
}

/// Attaches (or replaces) the classic-BPF program `prog` on `fd`.
///
/// Errors: `InvalidInput` for an empty or too long program; setsockopt(2).
pub fn attach_program(fd: BorrowedFd<'_>, prog: &[netcore::bpf::Insn]) -> io::Result<()> {
    if prog.is_empty() || prog.len() > netcore::bpf::MAX_INSNS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "BPF program of {} instructions (1..={})",
                prog.len(),
                netcore::bpf::MAX_INSNS
            ),
        ));
    }
    let mut p: Vec<libc::sock_filter> = prog
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let fprog = libc::sock_fprog {
        len: p.len() as u16,
        filter: p.as_mut_ptr(),
    };
    setsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_ATTACH_FILTER,
        &fprog,
    )
    .map_err(|e| annotate(e, "SO_ATTACH_FILTER"))
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

fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn setsockopt<T>(fd: RawFd, level: i32, name: i32, val: &T) -> io::Result<()> {
    // SAFETY: `val` points to a valid T of the given size for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn getsockopt_int(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for writes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut v as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Sets a buffer size, trying the privileged `*FORCE` option first.
fn set_buffer(fd: RawFd, force: i32, plain: i32, bytes: usize, what: &str) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    if setsockopt(fd, libc::SOL_SOCKET, force, &v).is_ok() {
        return Ok(());
    }
    setsockopt(fd, libc::SOL_SOCKET, plain, &v).map_err(|e| annotate(e, what))
}

/// Kernel counters of a packet socket (`PACKET_STATISTICS`; reading resets them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames the socket received (passed the filter) since the last read.
    pub packets: u32,
    /// Of those, frames dropped because the buffer or ring was full.
    pub drops: u32,
}

/// Reads and resets the counters of packet socket `fd` (`PACKET_STATISTICS`).
///
/// Errors: from getsockopt(2) (e.g. `ENOPROTOOPT` if `fd` is not a packet socket).
pub fn read_kernel_stats(fd: BorrowedFd<'_>) -> io::Result<KernelStats> {
    let mut st = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: st and len are valid for writes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(annotate(io::Error::last_os_error(), "PACKET_STATISTICS"));
    }
    Ok(KernelStats {
        packets: st.tp_packets,
        drops: st.tp_drops,
    })
}

/// A TPACKET_V2 receive ring mapped into this process.
struct RxRing {
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    frame_size: usize,
    frames_per_block: usize,
    frame_nr: usize,
    next: usize,
}

// SAFETY: the mapping is owned by the ring and only touched through &mut self.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Sets up a ring of about `bytes` bytes for frames up to `max_frame` bytes.
    fn setup(fd: RawFd, bytes: usize, max_frame: usize) -> io::Result<Self> {
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(|e| annotate(e, "PACKET_VERSION TPACKET_V2"))?;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let align = |n: usize, a: usize| n.div_ceil(a) * a;
        // The frame data starts at TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14
        // (net/packet/af_packet.c, tpacket_rcv); keep 4 spare bytes for a VLAN tag.
        let data_off = align(libc::TPACKET2_HDRLEN + 16, libc::TPACKET_ALIGNMENT);
        let frame_size = align(data_off + max_frame + 4, libc::TPACKET_ALIGNMENT);
        let block_size = align(frame_size.max(64 * 1024), page);
        let frames_per_block = block_size / frame_size;
        let block_nr = bytes.div_ceil(block_size).max(1);
        let frame_nr = frames_per_block * block_nr;
        let req = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: block_nr as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frame_nr as u32,
        };
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
            .map_err(|e| annotate(e, "PACKET_RX_RING"))?;
        let map_len = block_size * block_nr;
        // SAFETY: mapping the ring the kernel just allocated for this socket.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd,
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED may exceed RLIMIT_MEMLOCK without root: retry unlocked.
            // SAFETY: as above.
            let m = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(annotate(
                    io::Error::last_os_error(),
                    "mmap of PACKET_RX_RING",
                ));
            }
            m
        } else {
            map
        };
        Ok(Self {
            map: map as *mut u8,
            map_len,
            block_size,
            frame_size,
            frames_per_block,
            frame_nr,
            next: 0,
        })
    }

    fn frame(&self, i: usize) -> *mut u8 {
        let off = (i / self.frames_per_block) * self.block_size
            + (i % self.frames_per_block) * self.frame_size;
        // SAFETY: off < map_len by construction of i < frame_nr.
        unsafe { self.map.add(off) }
    }

    /// Hands the next ready frame to `f` borrowed in its slot, then gives
    /// the slot back to the kernel; false when the ring is empty.
    fn with_next(&mut self, f: &mut dyn FnMut(&[u8])) -> bool {
        let slot = self.frame(self.next);
        // SAFETY: every frame slot starts with a 4-byte aligned tpacket2_hdr
        // whose first field, tp_status, is shared with the kernel.
        let status = unsafe { &*(slot as *const AtomicU32) };
        if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return false;
        }
        // SAFETY: the slot belongs to user space until tp_status is reset
        // below (Release); tp_mac and tp_snaplen are bounded by the kernel
        // to the slot and checked against it again here; the slice does
        // not outlive this call.
        let frame = unsafe {
            let hdr = ptr::read_volatile(slot as *const libc::tpacket2_hdr);
            let mac = (hdr.tp_mac as usize).min(self.frame_size);
            let len = (hdr.tp_snaplen as usize).min(self.frame_size - mac);
            std::slice::from_raw_parts(slot.add(mac), len)
        };
        f(frame);
        status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.frame_nr;
        true
    }

    /// Copies the next ready frame into `buf`; `None` when the ring is empty.
    fn try_recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        let f = self.frame(self.next);
        // SAFETY: every frame slot starts with a 4-byte aligned tpacket2_hdr
        // whose first field, tp_status, is shared with the kernel.
        let status = unsafe { &*(f as *const AtomicU32) };
        if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the slot belongs to user space until tp_status is reset;
        // tp_mac and tp_snaplen are bounded by the kernel to the frame slot,
        // and are checked against it again here.
        let n = unsafe {
            let hdr = ptr::read_volatile(f as *const libc::tpacket2_hdr);
            let mac = hdr.tp_mac as usize;
            let len = (hdr.tp_snaplen as usize).min(self.frame_size.saturating_sub(mac));
            let n = len.min(buf.len());
            ptr::copy_nonoverlapping(f.add(mac), buf.as_mut_ptr(), n);
            n
        };
        status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.frame_nr;
        Some(n)
    }

    fn ready(&self) -> bool {
        // SAFETY: as in try_recv.
        let status = unsafe { &*(self.frame(self.next) as *const AtomicU32) };
        status.load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in setup.
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.map_len);
        }
    }
}

/// An `AF_PACKET` socket on one interface for one ethertype. See the module
/// documentation for how it is configured.
pub struct PacketLink {
    fd: OwnedFd,
    iface: IfaceInfo,
    ethertype: u16,
    ring: Option<RxRing>,
    busy_poll: bool,
    /// Kernel counters accumulated since open.
    kernel_acc: std::cell::Cell<KernelStats>,
    /// recvmmsg batch buffers of `recv_with` (allocated on first use).
    rx_store: Vec<u8>,
}

impl std::fmt::Debug for PacketLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketLink")
            .field("fd", &self.fd.as_raw_fd())
            .field("iface", &self.iface)
            .field("ethertype", &format_args!("{:#06x}", self.ethertype))
            .field("rx_ring", &self.ring.is_some())
            .field("busy_poll", &self.busy_poll)
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
    /// process lacks the capability; `InvalidInput` for a bad interface name or
    /// filter; other errors from the socket options (each names the option).
    pub fn open(iface: &str, config: &PacketConfig) -> io::Result<Self> {
        let info = iface::lookup(iface)?;
        // Protocol 0: receive nothing until bind() below.
        // SAFETY: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    permission_error(&format!("opening an AF_PACKET socket on {iface:?}"), &e)
                }
                _ => annotate(e, "socket(AF_PACKET, SOCK_RAW)"),
            });
        }
        // SAFETY: raw is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let r = fd.as_raw_fd();
        set_buffer(
            r,
            libc::SO_RCVBUFFORCE,
            libc::SO_RCVBUF,
            config.rcvbuf,
            "SO_RCVBUF",
        )?;
        set_buffer(
            r,
            libc::SO_SNDBUFFORCE,
            libc::SO_SNDBUF,
            config.sndbuf,
            "SO_SNDBUF",
        )?;
        if config.ignore_outgoing {
            setsockopt(
                r,
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                &1 as &libc::c_int,
            )
            .map_err(|e| annotate(e, "PACKET_IGNORE_OUTGOING (needs Linux 4.20)"))?;
        }
        if config.qdisc_bypass {
            setsockopt(
                r,
                libc::SOL_PACKET,
                libc::PACKET_QDISC_BYPASS,
                &1 as &libc::c_int,
            )
            .map_err(|e| annotate(e, "PACKET_QDISC_BYPASS"))?;
        }
        if let Some(spec) = &config.filter {
            attach_filter(fd.as_fd(), spec)?;
        } else if config.ethertype == PacketConfig::ALL_ETHERTYPES {
            // Nothing passes until the owner installs its filter.
            attach_program(
                fd.as_fd(),
                &[netcore::bpf::Insn {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: 0,
                }],
            )?;
        }
        let ring = match config.rx_ring {
            Some(bytes) => Some(RxRing::setup(r, bytes, info.mtu + ETH_HEADER_LEN)?),
            None => None,
        };
        // SAFETY: sockaddr_ll is plain old data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = config.ethertype.to_be();
        sll.sll_ifindex = info.index as i32;
        // SAFETY: sll is a valid sockaddr_ll of the given length.
        let b = unsafe {
            libc::bind(
                r,
                &sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if b < 0 {
            return Err(annotate(
                io::Error::last_os_error(),
                &format!("bind AF_PACKET socket to {iface:?}"),
            ));
        }
        Ok(Self {
            fd,
            iface: info,
            ethertype: config.ethertype,
            ring,
            busy_poll: false,
            kernel_acc: std::cell::Cell::new(KernelStats::default()),
            rx_store: Vec::new(),
        })
    }

    /// Name, index, MAC and MTU of the interface.
    pub fn iface(&self) -> &IfaceInfo {
        &self.iface
    }

    /// The ethertype this link sends and receives.
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// True when frames are read from a TPACKET_V2 ring.
    pub fn has_rx_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// Replaces the kernel filter (see [`attach_filter`]).
    pub fn set_filter(&mut self, spec: &FilterSpec) -> io::Result<()> {
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
        let us: libc::c_int = if on { BUSY_POLL_US } else { 0 };
        setsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            &us,
        )
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
        getsockopt_int(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).map(|v| v as usize)
    }

    /// Effective send buffer in bytes (`SO_SNDBUF`).
    pub fn sndbuf(&self) -> io::Result<usize> {
        getsockopt_int(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF).map(|v| v as usize)
    }

    /// Reads and resets the kernel's counters (`PACKET_STATISTICS`): frames
    /// that passed the filter and those dropped for lack of buffer space.
    pub fn kernel_stats(&self) -> io::Result<KernelStats> {
        read_kernel_stats(self.fd.as_fd())
    }

    /// True when a frame is waiting in the RX ring (always false without a ring).
    pub fn ring_ready(&self) -> bool {
        self.ring.as_ref().is_some_and(|r| r.ready())
    }

    /// One frame from up to [`SMALL_GATHER`] pieces with sendmsg(2).
    fn send_gathered(&mut self, pieces: &[IoSlice<'_>]) -> io::Result<()> {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        self.check_len(len)?;
        // SAFETY: iovec is plain old data; zero is valid.
        let mut iov: [libc::iovec; SMALL_GATHER] = unsafe { std::mem::zeroed() };
        let mut n = 0;
        for p in pieces.iter().filter(|p| !p.is_empty()) {
            iov[n].iov_base = p.as_ptr() as *mut libc::c_void;
            iov[n].iov_len = p.len();
            n += 1;
        }
        // SAFETY: msghdr is plain old data; zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n;
        // SAFETY: msg points at n live iovecs over buffers the kernel only reads.
        let r = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
        if r < 0 {
            return Err(self.io_error("sendmsg"));
        }
        Ok(())
    }

    fn max_frame(&self) -> usize {
        self.iface.mtu + ETH_HEADER_LEN
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
                match ring.try_recv(bufs[n]) {
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
                Ok(n)
            };
        }
        let mut total = 0;
        while total < bufs.len() {
            let chunk = (bufs.len() - total).min(MAX_BATCH);
            // SAFETY: iovec/mmsghdr are plain old data; zero is valid.
            let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
            let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
            for i in 0..chunk {
                let b = &mut bufs[total + i];
                iov[i].iov_base = b.as_mut_ptr() as *mut libc::c_void;
                iov[i].iov_len = b.len();
                msgs[i].msg_hdr.msg_iov = &mut iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: msgs[..chunk] point at live, writable buffers.
            let r = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    chunk as u32,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut(),
                )
            };
            if r < 0 {
                // An error after some frames: report those; the error
                // (if persistent) comes back on the next call.
                if total > 0 {
                    break;
                }
                return Err(self.io_error("recvmmsg"));
            }
            let r = r as usize;
            for i in 0..r {
                lens[total + i] = (msgs[i].msg_len as usize).min(bufs[total + i].len());
            }
            total += r;
            if r < chunk {
                break;
            }
        }
        Ok(total)
    }
}

impl PacketLink {
    /// Names the interface in errors other than the transient ones callers
    /// match on by code (EAGAIN, ENOBUFS, EINTR), which are passed as they are.
    fn io_error(&self, what: &str) -> io::Error {
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => e,
            _ => io::Error::new(e.kind(), format!("{what} on {}: {e}", self.iface.name)),
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
        // SAFETY: frame is a valid readable buffer.
        let r = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return Err(self.io_error("send"));
        }
        Ok(())
    }

    fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        if let [frame] = frames {
            // One frame: send(2) skips sendmmsg's per-message header copies.
            return self.send(frame).map(|()| 1);
        }
        let mut total = 0;
        while total < frames.len() {
            let chunk = &frames[total..frames.len().min(total + MAX_BATCH)];
            let slices: [IoSlice<'_>; MAX_BATCH] =
                std::array::from_fn(|i| IoSlice::new(chunk.get(i).copied().unwrap_or_default()));
            let gathered: [&[IoSlice<'_>]; MAX_BATCH] =
                std::array::from_fn(|i| std::slice::from_ref(&slices[i]));
            match self.send_batch_vectored(&gathered[..chunk.len()]) {
                Ok(n) => {
                    total += n;
                    if n < chunk.len() {
                        break;
                    }
                }
                Err(e) if total == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(total)
    }

    fn send_batch_vectored(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        if let [pieces] = frames {
            if pieces.len() <= SMALL_GATHER {
                // One frame (a ping-pong message): sendmsg(2) with a few
                // iovecs on the stack, without sendmmsg's batch arrays.
                return self.send_gathered(pieces).map(|()| 1);
            }
        }
        let mut total = 0;
        while total < frames.len() {
            let chunk = (frames.len() - total).min(MAX_BATCH);
            // SAFETY: plain old data; zero is valid.
            let mut iov: [libc::iovec; MAX_IOV] = unsafe { std::mem::zeroed() };
            let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
            // Oversized frames (and frames of too many pieces) end the batch
            // before them.
            let mut valid = 0;
            let mut used = 0;
            while valid < chunk {
                let pieces = frames[total + valid];
                let len: usize = pieces.iter().map(|p| p.len()).sum();
                let nonempty = pieces.iter().filter(|p| !p.is_empty()).count();
                let check = if nonempty > MAX_IOV {
                    Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("frame of {nonempty} pieces: at most {MAX_IOV}"),
                    ))
                } else {
                    self.check_len(len)
                };
                if let Err(e) = check {
                    if total + valid == 0 {
                        return Err(e);
                    }
                    break;
                }
                if used + nonempty > MAX_IOV {
                    break;
                }
                let first = used;
                for p in pieces.iter().filter(|p| !p.is_empty()) {
                    iov[used].iov_base = p.as_ptr() as *mut libc::c_void;
                    iov[used].iov_len = p.len();
                    used += 1;
                }
                // SAFETY: first <= used <= MAX_IOV, inside the array.
                msgs[valid].msg_hdr.msg_iov = unsafe { iov.as_mut_ptr().add(first) };
                msgs[valid].msg_hdr.msg_iovlen = nonempty;
                valid += 1;
            }
            if valid == 0 {
                break;
            }
            // SAFETY: msgs[..valid] point at live iovecs over buffers that the
            // kernel only reads.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    valid as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                if total == 0 {
                    return Err(self.io_error("sendmmsg"));
                }
                break;
            }
            total += r as usize;
            if (r as usize) < chunk {
                break;
            }
        }
        Ok(total)
    }

    fn recv_batch(&mut self, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
        PacketLink::recv_batch(self, bufs, lens)
    }

    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        if let Some(ring) = self.ring.as_mut() {
            let mut n = 0;
            while n < max && ring.with_next(f) {
                n += 1;
            }
            return if n == 0 {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(n)
            };
        }
        // One recvmmsg(2) into the link's own batch buffers (allocated on
        // first use), with slack so an oversized frame is seen whole.
        let slot = self.iface.mtu + ETH_HEADER_LEN + 64;
        let k = max.min(MAX_BATCH);
        let mut store = std::mem::take(&mut self.rx_store);
        if store.len() < k * slot {
            store = vec![0; MAX_BATCH * slot];
        }
        let mut lens = [0usize; MAX_BATCH];
        let r = {
            let mut it = store.chunks_mut(slot);
            let mut bufs: [&mut [u8]; MAX_BATCH] =
                std::array::from_fn(|_| it.next().unwrap_or(&mut []));
            match self.recv_batch(&mut bufs[..k], &mut lens[..k]) {
                Ok(n) => {
                    for i in 0..n {
                        f(&bufs[i][..lens[i]]);
                    }
                    Ok(n)
                }
                Err(e) => Err(e),
            }
        };
        self.rx_store = store;
        r
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(ring) = self.ring.as_mut() {
            return ring
                .try_recv(buf)
                .ok_or_else(|| io::ErrorKind::WouldBlock.into());
        }
        // SAFETY: buf is a valid writable buffer.
        let r = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return Err(self.io_error("recv"));
        }
        Ok(r as usize)
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

    fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn set_filter(&mut self, prog: &[netcore::bpf::Insn]) -> io::Result<()> {
        attach_program(self.fd.as_fd(), prog)
    }

    fn kernel_stats(&self) -> Option<KernelStats> {
        // The kernel resets its counters on read: accumulate them here.
        let k = read_kernel_stats(self.fd.as_fd()).ok()?;
        let mut acc = self.kernel_acc.get();
        acc.packets = acc.packets.wrapping_add(k.packets);
        acc.drops = acc.drops.wrapping_add(k.drops);
        self.kernel_acc.set(acc);
        Some(acc)
    }

    fn rx_ready(&self) -> Option<bool> {
        self.ring.as_ref().map(RxRing::ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{emit_edp_frame, EthernetRepr, ETHERTYPE_ESP};

    /// A classic BPF interpreter for the opcodes `build_filter` emits, with
    /// the kernel's rule that a load beyond the packet drops it (returns 0).
    fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0;
        loop {
            let ins = prog[pc];
            pc += 1;
            match ins.code {
                BPF_LD_H_ABS => {
                    let k = ins.k as usize;
                    if k + 2 > pkt.len() {
                        return 0;
                    }
                    a = u16::from_be_bytes([pkt[k], pkt[k + 1]]) as u32;
                }
                BPF_LD_W_ABS => {
                    let k = ins.k as usize;
                    if k + 4 > pkt.len() {
                        return 0;
                    }
                    a = u32::from_be_bytes([pkt[k], pkt[k + 1], pkt[k + 2], pkt[k + 3]]);
                }
                BPF_JEQ_K => {
                    pc += if a == ins.k { ins.jt } else { ins.jf } as usize;
                }
                BPF_RET_K => return ins.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
            assert!(pc < prog.len(), "fell off the end of the program");
        }
    }

    const ME: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
    const PEER: MacAddr = MacAddr([0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]);
    const OTHER: MacAddr = MacAddr([0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xef]);

    fn frame(ethertype: u16, src: MacAddr, sport: u16, dport: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        let n = emit_edp_frame(
            &mut b,
            &EthernetRepr {
                dst: ME,
                src,
                ethertype,
            },
            sport,
            dport,
            b"payload",
        )
        .unwrap();
        b.truncate(n);
        b
    }

    #[test]
    fn filter_matches_ethertype_and_port() {
        let prog = build_filter(&FilterSpec::port(ETHERTYPE_EDP, 5000)).unwrap();
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 1, 5000)), BPF_ACCEPT);
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 1, 5001)), 0);
        assert_eq!(run(&prog, &frame(ETHERTYPE_ESP, PEER, 1, 5000)), 0);
        // control port not accepted unless listed
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 1, 0)), 0);
        // frames too short to hold the port are dropped
        let f = frame(ETHERTYPE_EDP, PEER, 1, 5000);
        assert_eq!(run(&prog, &f[..17]), 0);
        assert_eq!(run(&prog, &f[..13]), 0);
    }

    #[test]
    fn filter_extra_ports() {
        let spec = FilterSpec {
            ethertype: ETHERTYPE_EDP,
            port: 7,
            extra_ports: vec![0, 9],
            peer: Some((PEER, 100)),
        };
        let prog = build_filter(&spec).unwrap();
        // extra ports are accepted from anyone
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, OTHER, 3, 0)), BPF_ACCEPT);
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, OTHER, 3, 9)), BPF_ACCEPT);
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, OTHER, 3, 8)), 0);
        // the main port only from the peer
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 100, 7)), BPF_ACCEPT);
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, PEER, 101, 7)), 0);
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, OTHER, 100, 7)), 0);
        // differing only in the first four MAC bytes
        let m = MacAddr([0x06, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]);
        assert_eq!(run(&prog, &frame(ETHERTYPE_EDP, m, 100, 7)), 0);
        assert_eq!(run(&prog, &frame(ETHERTYPE_ESP, PEER, 100, 7)), 0);
    }

    #[test]
    fn filter_jumps_stay_in_program() {
        let spec = FilterSpec {
            ethertype: ETHERTYPE_ESP,
            port: 65535,
            extra_ports: (1..=MAX_EXTRA_PORTS as u16).collect(),
            peer: Some((PEER, 1)),
        };
        let prog = build_filter(&spec).unwrap();
        for (pc, ins) in prog.iter().enumerate().filter(|(_, i)| i.code == BPF_JEQ_K) {
            assert!(pc + 1 + (ins.jt as usize) < prog.len());
            assert!(pc + 1 + (ins.jf as usize) < prog.len());
        }
        assert_eq!(run(&prog, &frame(ETHERTYPE_ESP, OTHER, 1, 64)), BPF_ACCEPT);
        assert_eq!(
            run(&prog, &frame(ETHERTYPE_ESP, PEER, 1, 65535)),
            BPF_ACCEPT
        );
        let mut too_many = spec.clone();
        too_many.extra_ports.push(100);
        assert_eq!(
            build_filter(&too_many).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    /// What the filter must accept, written directly from the FilterSpec docs.
    fn reference(spec: &FilterSpec, f: &[u8]) -> bool {
        if f.len() < 18 {
            return false;
        }
        let be = |i: usize| u16::from_be_bytes([f[i], f[i + 1]]);
        if be(12) != spec.ethertype {
            return false;
        }
        let dport = be(16);
        if spec.extra_ports.contains(&dport) {
            return true;
        }
        if dport != spec.port {
            return false;
        }
        match spec.peer {
            None => true,
            Some((mac, port)) => f[6..12] == mac.0 && be(14) == port,
        }
    }

    proptest::proptest! {
        #[test]
        fn filter_agrees_with_its_specification(
            ethertype in proptest::sample::select(vec![ETHERTYPE_EDP, ETHERTYPE_ESP, 0x0800]),
            port in 0u16..8,
            extra in proptest::collection::vec(0u16..8, 0..4),
            peer in proptest::option::of((0u8..3, 0u16..4)),
            frame in proptest::collection::vec(0u8..4, 0..40),
            f_ethertype in proptest::sample::select(vec![ETHERTYPE_EDP, ETHERTYPE_ESP, 0x0800]),
        ) {
            // Small value ranges make matches likely.
            let spec = FilterSpec {
                ethertype,
                port,
                extra_ports: extra,
                peer: peer.map(|(m, p)| (MacAddr([m, 0, 0, 0, 0, m]), p)),
            };
            let mut f = frame;
            if f.len() >= 14 {
                f[12..14].copy_from_slice(&f_ethertype.to_be_bytes());
                f[6] = f[11];
                f[7..11].fill(0);
            }
            let prog = build_filter(&spec).unwrap();
            let got = run(&prog, &f) == BPF_ACCEPT;
            proptest::prop_assert_eq!(got, reference(&spec, &f));
        }
    }

    #[test]
    fn filter_is_accepted_by_the_kernel() {
        // Attach to an unprivileged socket to prove the kernel's verifier
        // accepts the program (SO_ATTACH_FILTER works on any socket).
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let spec = FilterSpec {
            ethertype: ETHERTYPE_EDP,
            port: 7,
            extra_ports: vec![0],
            peer: Some((PEER, 100)),
        };
        attach_filter(s.as_fd(), &spec).unwrap();
    }

    #[test]
    fn unknown_interface_is_named() {
        let e = PacketLink::new("nosuchif7", ETHERTYPE_EDP).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nosuchif7"), "{e}");
    }

    #[test]
    fn permission_error_names_capability_and_command() {
        let e = permission_error("opening", &io::Error::from_raw_os_error(libc::EPERM));
        let s = e.to_string();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(s.contains("CAP_NET_RAW"), "{s}");
        let exe = std::env::current_exe().unwrap();
        assert!(
            s.contains(&format!("setcap cap_net_raw+ep {}", exe.display())),
            "{s}"
        );
    }
}
