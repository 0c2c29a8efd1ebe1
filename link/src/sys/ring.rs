//! The TPACKET_V2 receive ring (packet(7), `PACKET_RX_RING` + mmap):
//! frames are read from memory shared with the kernel, without a system
//! call per frame.
//!
//! Ownership of a slot goes back and forth through its `tp_status` word:
//! the kernel fills a slot whose status is `TP_STATUS_KERNEL`, then sets
//! `TP_STATUS_USER` (af_packet.c `__packet_set_status`: a `WRITE_ONCE`
//! after an `smp_wmb`, so the frame bytes are visible before the status);
//! user space reads the status with Acquire ordering (pairing with that
//! barrier), uses the slot, and hands it back by storing
//! `TP_STATUS_KERNEL` with Release ordering (so its reads of the slot
//! happen before the kernel may overwrite it). V3 is not used: its block
//! timeout adds milliseconds of latency.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use super::{annotate, sockopt};

/// What one [`RxRing::recv_with`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RingBatch {
    /// Frames handed to the callback.
    pub frames: usize,
    /// Frames skipped because the kernel truncated them to the slot.
    pub truncated: usize,
}

/// A TPACKET_V2 receive ring mapped into this process.
pub(crate) struct RxRing {
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    frame_size: usize,
    frames_per_block: usize,
    frame_nr: usize,
    next: usize,
}

// SAFETY: the mapping is owned by the ring (unmapped on drop) and only
// touched through `&mut self` (or read through `&self` for the status word,
// an atomic); moving it to another thread moves that ownership.
unsafe impl Send for RxRing {}

impl std::fmt::Debug for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxRing")
            .field("bytes", &self.map_len)
            .field("frame_size", &self.frame_size)
            .field("frames", &self.frame_nr)
            .finish()
    }
}

/// Hands a slot back to the kernel when dropped, so a panicking callback
/// does not stall the ring.
struct Release<'a>(&'a AtomicU32);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
}

impl RxRing {
    /// Sets up a ring of about `bytes` bytes on packet socket `fd` for
    /// frames up to `max_frame` bytes (Ethernet header included), before
    /// the socket is bound.
    ///
    /// Errors: those of setsockopt(2) and mmap(2), naming the call.
    pub(crate) fn setup(fd: BorrowedFd<'_>, bytes: usize, max_frame: usize) -> io::Result<Self> {
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        sockopt::set(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(|e| annotate(e, "PACKET_VERSION TPACKET_V2"))?;
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .unwrap_or(4096)
            .max(4096) as usize;
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
        sockopt::set(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
            .map_err(|e| annotate(e, "PACKET_RX_RING"))?;
        let map_len = block_size * block_nr;
        let map_with = |flags: libc::c_int| {
            // SAFETY: maps the ring the kernel just allocated for this
            // socket; the result is checked against MAP_FAILED.
            unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags,
                    fd.as_raw_fd(),
                    0,
                )
            }
        };
        let mut map = map_with(libc::MAP_SHARED | libc::MAP_LOCKED);
        if map == libc::MAP_FAILED {
            // MAP_LOCKED may exceed RLIMIT_MEMLOCK without root: retry unlocked.
            map = map_with(libc::MAP_SHARED);
            if map == libc::MAP_FAILED {
                return Err(annotate(
                    io::Error::last_os_error(),
                    "mmap of PACKET_RX_RING",
                ));
            }
        }
        Ok(Self {
            map: map.cast::<u8>(),
            map_len,
            block_size,
            frame_size,
            frames_per_block,
            frame_nr,
            next: 0,
        })
    }

    /// Start of slot `i` (`i < frame_nr`).
    fn slot(&self, i: usize) -> *mut u8 {
        let off = (i / self.frames_per_block) * self.block_size
            + (i % self.frames_per_block) * self.frame_size;
        debug_assert!(off + self.frame_size <= self.map_len);
        // SAFETY: off + frame_size <= map_len because i < frame_nr =
        // frames_per_block * block_nr: the pointer stays inside the mapping.
        unsafe { self.map.add(off) }
    }

    /// The status word of slot `i`.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: every slot starts with a tpacket2_hdr, aligned to
        // TPACKET_ALIGNMENT (16) inside a page-aligned mapping, whose first
        // field `tp_status` (u32) is the word shared with the kernel; it
        // lives as long as the mapping, i.e. as long as `self`.
        unsafe { &*(self.slot(i) as *const AtomicU32) }
    }

    /// True when the next slot holds a frame (one Acquire load).
    pub(crate) fn ready(&self) -> bool {
        self.status(self.next).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Takes the next waiting frame: `f` sees it borrowed in its slot, and
    /// the slot goes back to the kernel right after (also if `f` panics).
    /// `None` when the ring is empty; `Some(None)` when the frame was
    /// truncated by the kernel (skipped, not shown to `f`).
    #[inline]
    fn take<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<Option<R>> {
        let i = self.next;
        if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // Advanced first, so a panicking callback leaves the ring
        // consistent with the kernel's position.
        self.next = if i + 1 == self.frame_nr { 0 } else { i + 1 };
        let _release = Release(self.status(i));
        let base = self.slot(i);
        // SAFETY: the slot belongs to user space until its status is reset
        // (the Acquire load above saw TP_STATUS_USER, ordering the kernel's
        // writes before our reads); the header is read by value. tp_mac and
        // tp_snaplen are bounded by the kernel to the slot and clamped to it
        // again here, so the slice stays inside the slot, which the kernel
        // does not write until `_release` drops after `f` returns (the
        // slice cannot outlive the call: `f` takes it for any lifetime).
        let (frame, truncated) = unsafe {
            let hdr = ptr::read_volatile(base as *const libc::tpacket2_hdr);
            let mac = (hdr.tp_mac as usize).min(self.frame_size);
            let len = (hdr.tp_snaplen as usize).min(self.frame_size - mac);
            (
                std::slice::from_raw_parts(base.add(mac), len),
                hdr.tp_len > hdr.tp_snaplen,
            )
        };
        Some(if truncated { None } else { Some(f(frame)) })
    }

    /// Hands up to `max` waiting frames to `f`, each borrowed in its slot
    /// and returned to the kernel right after the callback (also if it
    /// panics). Frames the kernel truncated to the slot are skipped and
    /// counted.
    pub(crate) fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> RingBatch {
        let mut out = RingBatch::default();
        while out.frames < max {
            match self.take(&mut *f) {
                None => break,
                Some(Some(())) => out.frames += 1,
                Some(None) => out.truncated += 1,
            }
        }
        out
    }

    /// Copies the next waiting frame into `buf` (truncated to its length);
    /// `None` when the ring is empty. Frames the kernel truncated are
    /// skipped and added to `truncated`.
    pub(crate) fn try_recv(&mut self, buf: &mut [u8], truncated: &mut u64) -> Option<usize> {
        loop {
            let copied = self.take(|frame| {
                let len = frame.len().min(buf.len());
                buf[..len].copy_from_slice(&frame[..len]);
                len
            })?;
            match copied {
                Some(n) => return Some(n),
                None => *truncated += 1,
            }
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `setup`; no slice
        // into it outlives a `recv_with` call.
        unsafe {
            libc::munmap(self.map.cast::<libc::c_void>(), self.map_len);
        }
    }
}
