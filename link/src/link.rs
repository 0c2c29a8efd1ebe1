//! The `Link` abstraction: something that sends and receives whole Ethernet
//! frames.
//!
//! Implementations:
//! - [`PacketLink`](crate::PacketLink): an AF_PACKET socket on a real interface, for
//!   one ethertype or all of them;
//! - [`sim`](crate::sim): in-memory links (pair, N-port switch with group delivery) on
//!   a virtual clock;
//! - [`FaultLink`](crate::FaultLink): seeded fault injection wrapped around any link
//!   (this kernel has no netem), forwarding every method. `SimLink` uses the
//!   same [`FaultInjector`](crate::fault::FaultInjector);
//! - [`UdpLink`](crate::UdpLink): our Ethernet frames inside UDP datagrams between
//!   named peers: no privilege needed, routable.
//!
//! Links are always nonblocking: `recv` returns `ErrorKind::WouldBlock` when no
//! frame is ready. Waiting is the caller's job (poll on [`Link::raw_fd`], spin,
//! or advance a virtual clock).

use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::time::Instant;

use crate::eth::MacAddr;
use crate::health::OutageStats;

/// Kernel counters of a link's socket (`PACKET_STATISTICS` for a packet
/// socket), accumulated since the link was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames the socket received (passed the filter).
    pub packets: u64,
    /// Of those, frames dropped because the buffer or ring was full.
    pub drops: u64,
}

/// [`Link::send_batch`] for links whose batched path is
/// [`Link::send_batch_vectored`] (one piece per frame): chunks of `N`
/// frames, stopping at the first short chunk; an error is returned only for
/// the first frame (a later one ends the batch). One implementation for
/// `PacketLink`, `UdpLink` and `FaultLink`.
pub(crate) fn send_batch_as_vectored<const N: usize, L: Link + ?Sized>(
    link: &mut L,
    frames: &[&[u8]],
) -> io::Result<usize> {
    let mut total = 0;
    while total < frames.len() {
        let chunk = &frames[total..frames.len().min(total + N)];
        let slices: [IoSlice<'_>; N] =
            std::array::from_fn(|i| IoSlice::new(chunk.get(i).copied().unwrap_or_default()));
        let gathered: [&[IoSlice<'_>]; N] =
            std::array::from_fn(|i| std::slice::from_ref(&slices[i]));
        match link.send_batch_vectored(&gathered[..chunk.len()]) {
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

/// A link that carries whole Ethernet frames (header included, no FCS).
pub trait Link: Send {
    /// Sends one frame. Errors: `WouldBlock` when the transmit queue is full,
    /// `InvalidInput` when the frame is larger than `mtu() + 14` bytes, other
    /// I/O errors from the device.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;

    /// Sends several frames (sendmmsg where the link supports it); returns how
    /// many were sent, in order. A short count means the rest were not sent.
    fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        for (i, f) in frames.iter().enumerate() {
            match self.send(f) {
                Ok(()) => {}
                Err(e) if i == 0 => return Err(e),
                Err(_) => return Ok(i),
            }
        }
        Ok(frames.len())
    }

    /// Sends frames each given as gathered pieces (e.g. headers followed by
    /// payload slices of a send buffer), in order; returns how many frames
    /// went out, with the semantics of [`send_batch`](Self::send_batch). A
    /// frame is the concatenation of its pieces. The default copies each
    /// frame into one buffer and calls [`send`](Self::send); `PacketLink`
    /// hands the pieces to sendmmsg(2) as an iovec each, so the payload goes
    /// from the caller's buffer straight into the kernel.
    fn send_batch_vectored(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        let mut frame = Vec::new();
        for (i, pieces) in frames.iter().enumerate() {
            frame.clear();
            for p in pieces.iter() {
                frame.extend_from_slice(p);
            }
            match self.send(&frame) {
                Ok(()) => {}
                Err(e) if i == 0 => return Err(e),
                Err(_) => return Ok(i),
            }
        }
        Ok(frames.len())
    }

    /// Receives one frame into `buf`; returns its length in bytes (the frame is
    /// truncated to `buf.len()` if longer; give at least `mtu() + 14` bytes).
    /// Errors: `WouldBlock` when no frame is ready.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize>;

    /// Receives up to `bufs.len()` frames without waiting: frame `i` goes into
    /// `bufs[i]` (truncated to its length) and its length in bytes into
    /// `lens[i]`. Returns how many frames were received (at least one).
    /// Errors: `WouldBlock` when no frame is ready; otherwise as
    /// [`Link::recv`] (an error after some frames ends the batch early and
    /// returns again on the next call if it persists).
    ///
    /// The default calls `recv` per frame; `PacketLink` uses one
    /// recvmmsg(2) per batch, or its receive ring.
    fn recv_batch(&mut self, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
        let max = bufs.len().min(lens.len());
        let mut n = 0;
        while n < max {
            match self.recv(bufs[n]) {
                Ok(len) => {
                    lens[n] = len;
                    n += 1;
                }
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(n)
    }

    /// Receives up to `max` frames without waiting and hands each to `f`
    /// borrowed in place (an RX ring slot or the link's own batch buffer),
    /// valid only during the call; returns how many frames `f` saw.
    ///
    /// This is the runtime's receive path: one recvmmsg(2) at most per call,
    /// and a batch shorter than `max` ends the call (no second system call
    /// that returns `EAGAIN`). Frames are whole Ethernet frames, at most
    /// [`Link::max_frame`] bytes.
    ///
    /// Errors: `WouldBlock` when no frame is ready; device errors.
    ///
    /// A link may drop frames it received before `f` sees them (a frame
    /// longer than `max_frame()`, a UDP datagram from an unknown peer),
    /// counting them; a call whose frames were all dropped returns `Ok(0)`,
    /// and the caller calls again rather than waiting.
    ///
    /// The default receives into a buffer it allocates per call; every link
    /// of this crate overrides it.
    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut buf = vec![0u8; self.max_frame()];
        let mut n = 0;
        while n < max {
            match self.recv(&mut buf) {
                Ok(len) => {
                    f(&buf[..len]);
                    n += 1;
                }
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(n)
    }

    /// Replaces the link's kernel receive filter with the classic-BPF
    /// program `prog` (`SO_ATTACH_FILTER`). Frames queued before the call
    /// are not filtered again, so readers still check what they receive.
    /// Links without a kernel filter accept the call and deliver every
    /// frame (the runtime demultiplexes in user space anyway).
    ///
    /// Errors: `InvalidInput` for a program longer than
    /// `netcore::bpf::MAX_INSNS`; errors of setsockopt(2).
    fn set_filter(&mut self, prog: &[netcore::bpf::Insn]) -> io::Result<()> {
        let _ = prog;
        Ok(())
    }

    /// The kernel's counters of the link's socket (`PACKET_STATISTICS`:
    /// frames passed by the filter, frames dropped for lack of room),
    /// accumulated since the link was opened; `None` for links without a
    /// kernel socket.
    fn kernel_stats(&self) -> Option<KernelStats> {
        None
    }

    /// Starts receiving frames sent to the Ethernet group address `group`
    /// (`PACKET_ADD_MEMBERSHIP` with `PACKET_MR_MULTICAST`). Memberships
    /// are counted: joining twice needs two leaves.
    ///
    /// Errors: `InvalidInput` when `group` is not a group address;
    /// `Unsupported` for links that cannot join groups; setsockopt(2) errors.
    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        let _ = group;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this link cannot join Ethernet multicast groups",
        ))
    }

    /// Stops receiving frames for `group` (one membership of
    /// [`Link::join_group`]). Errors: `NotFound` when not a member.
    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        let _ = group;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this link cannot join Ethernet multicast groups",
        ))
    }

    /// Does the link's own time-driven work due at `now` (a fault-injecting
    /// wrapper releases the frames it held back; a packet link checks its
    /// interface, `health`). The runtime calls it once
    /// [`Link::poll_at`] has passed, whether or not it sends or receives.
    ///
    /// Errors: those of sending the released frames.
    fn on_timeout(&mut self, now: Instant) -> io::Result<()> {
        let _ = now;
        Ok(())
    }

    /// The link's descriptor reported an error condition at `now`
    /// (`POLLERR` from poll(2)): for a packet socket, a pending `ENETDOWN`
    /// after its interface went down or away. The link reads (and so
    /// clears) the error and checks its interface (`health`). Links
    /// without outages ignore it.
    fn on_error_event(&mut self, now: Instant) {
        let _ = now;
    }

    /// Counters of the link's outages (`health`); zero for links that
    /// have none to report.
    fn outage_stats(&self) -> OutageStats {
        OutageStats::default()
    }

    /// Largest frame in bytes, Ethernet header included: `mtu() + 14`.
    fn max_frame(&self) -> usize {
        self.mtu() + crate::eth::ETH_HEADER_LEN
    }

    /// Largest frame it receives, bytes, Ethernet header included: at
    /// least [`Link::max_frame`]; more on a link that hears peers of a
    /// larger MTU (a `UdpLink` with `rx_mtu`).
    fn max_rx_frame(&self) -> usize {
        self.max_frame()
    }

    /// MAC address of this end.
    fn mac(&self) -> MacAddr;

    /// Link MTU: the largest Ethernet payload in bytes (1500 on standard
    /// Ethernet); frames are at most `mtu() + 14` bytes.
    fn mtu(&self) -> usize;

    /// A file descriptor that becomes readable when `recv` may succeed, for
    /// poll/epoll/mio; `None` for in-memory links.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }

    /// The link's descriptor, borrowed (the runtime duplicates it once to
    /// sleep in ppoll(2) on it without holding the link); `None` for
    /// in-memory links. Links with a [`Link::raw_fd`] should implement it.
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Whether a received frame is waiting, when the link can tell without a
    /// system call (an RX ring: one load of the next slot's status word);
    /// `None` when it cannot. Busy-poll loops spin on this between receives
    /// instead of reading the clock and calling `recv` on every turn.
    fn rx_ready(&self) -> Option<bool> {
        None
    }

    /// The earliest instant at which the link itself has work (a delayed
    /// frame in a fault-injecting wrapper to release, a packet link's next
    /// interface check, `health`), so a poller can wake for it. `None`
    /// when nothing is pending.
    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// Whether every frame this link delivers is the frame that was sent
    /// (or nothing at all): an Ethernet NIC drops frames whose FCS fails
    /// (IEEE 802.3 CRC-32; the thesis, sec. 4.1, relies on it for EDP and
    /// ESP), veth copies memory, a UDP link's datagrams carry the UDP
    /// checksum the kernel verifies. Protocols may then leave their own
    /// checksum out, as ESP's `Checksum::Auto` (crate `esp`) does.
    ///
    /// The default is `false` (a link that does not say is not trusted):
    /// the fault injector, which flips bits (also when it is configured
    /// without corruption: `set_faults` may add it later), and the
    /// simulation links keep it.
    fn frame_integrity(&self) -> bool {
        false
    }
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        (**self).send(frame)
    }
    fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        (**self).send_batch(frames)
    }
    fn send_batch_vectored(&mut self, frames: &[&[IoSlice<'_>]]) -> io::Result<usize> {
        (**self).send_batch_vectored(frames)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (**self).recv(buf)
    }
    fn recv_batch(&mut self, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
        (**self).recv_batch(bufs, lens)
    }
    fn recv_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        (**self).recv_with(max, f)
    }
    fn set_filter(&mut self, prog: &[netcore::bpf::Insn]) -> io::Result<()> {
        (**self).set_filter(prog)
    }
    fn kernel_stats(&self) -> Option<KernelStats> {
        (**self).kernel_stats()
    }
    fn join_group(&mut self, group: MacAddr) -> io::Result<()> {
        (**self).join_group(group)
    }
    fn leave_group(&mut self, group: MacAddr) -> io::Result<()> {
        (**self).leave_group(group)
    }
    fn max_frame(&self) -> usize {
        (**self).max_frame()
    }
    fn max_rx_frame(&self) -> usize {
        (**self).max_rx_frame()
    }
    fn on_timeout(&mut self, now: Instant) -> io::Result<()> {
        (**self).on_timeout(now)
    }
    fn on_error_event(&mut self, now: Instant) {
        (**self).on_error_event(now)
    }
    fn outage_stats(&self) -> OutageStats {
        (**self).outage_stats()
    }
    fn mac(&self) -> MacAddr {
        (**self).mac()
    }
    fn mtu(&self) -> usize {
        (**self).mtu()
    }
    fn raw_fd(&self) -> Option<RawFd> {
        (**self).raw_fd()
    }
    fn rx_ready(&self) -> Option<bool> {
        (**self).rx_ready()
    }
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        (**self).as_fd()
    }
    fn poll_at(&self) -> Option<Instant> {
        (**self).poll_at()
    }
    fn frame_integrity(&self) -> bool {
        (**self).frame_integrity()
    }
}
