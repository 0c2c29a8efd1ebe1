//! Drives one [`Connection`] over one [`Link`]: frames in, timers, frames out.
//!
//! The driver is the only place where the sans-IO core meets I/O; it is used
//! the same way by the sockets (with a real clock and a `PacketLink`) and by
//! the simulations (with a `SimClock` and a `SimLink`). It reads no clock
//! itself: every call takes `now`.
//!
//! Per poll: receive every ready frame (parse, check the peer, hand to the
//! connection), fire expired timers, then send everything the connection
//! wants in batches of up to [`TX_BATCH`] frames (`send_batch`, sendmmsg on a
//! `PacketLink`). Frames are read [`RX_BATCH`] at a time (`recv_batch`,
//! recvmmsg). No allocation per frame: receive and transmit buffers are
//! allocated once.

use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use edp::wire::ETH_HEADER_LEN;
use edp::Link;

use crate::conn::{Connection, GatherFrame};
use crate::wire::{EspFrame, MacAddr};

/// Frames sent per `send_batch` call (`edp::link::packet::MAX_BATCH`: one
/// sendmmsg(2) per batch on a `PacketLink`).
pub const TX_BATCH: usize = 64;

/// Frames read per `recv_batch` call (one recvmmsg(2) on a `PacketLink`
/// instead of one recv(2) per frame: the reader of a bulk stream is the
/// bottleneck on an idle host).
pub const RX_BATCH: usize = 16;

/// Counters of the driver (frames that never reached the connection).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Frames that failed to parse (truncated, bad checksum, bad option).
    pub malformed: u64,
    /// Well-formed frames from another peer or for another port.
    pub foreign: u64,
    /// Link receive errors other than `WouldBlock`.
    pub recv_errors: u64,
}

/// Receive and transmit buffers plus counters: the per-connection I/O state
/// that is not the protocol. Kept apart from the link so a listener can hold
/// half-open connections as (connection, link, io) triples.
pub struct Io {
    rx: Vec<u8>,
    rx_slot: usize,
    rx_lens: [usize; RX_BATCH],
    tx: Vec<u8>,
    tx_frames: [GatherFrame; TX_BATCH],
    frame_cap: usize,
    ethertype: u16,
    local_mac: MacAddr,
    stats: DriverStats,
}

impl std::fmt::Debug for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Io").field("stats", &self.stats).finish()
    }
}

impl Io {
    /// Buffers for frames of `link` carrying `ethertype`.
    pub fn new(link: &dyn Link, ethertype: u16) -> Self {
        let frame_cap = link.mtu() + ETH_HEADER_LEN;
        // Slack so an oversized frame is seen whole and rejected.
        let rx_slot = frame_cap + 64;
        Self {
            rx: vec![0; rx_slot * RX_BATCH],
            rx_slot,
            rx_lens: [0; RX_BATCH],
            tx: vec![0; frame_cap * TX_BATCH],
            tx_frames: [GatherFrame::default(); TX_BATCH],
            frame_cap,
            ethertype,
            local_mac: link.mac(),
            stats: DriverStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// One round: receive, timers, transmit. Returns true when any frame
    /// moved. Errors: fatal link errors (not `WouldBlock`).
    pub fn poll(
        &mut self,
        conn: &mut Connection,
        link: &mut dyn Link,
        now: Instant,
    ) -> io::Result<bool> {
        let got = self.receive(conn, link, now)?;
        timers(conn, now);
        let sent = self.transmit(conn, link, now)?;
        Ok(got + sent > 0)
    }

    /// Hands every ready frame to the connection; returns how many frames
    /// were read.
    pub fn receive(
        &mut self,
        conn: &mut Connection,
        link: &mut dyn Link,
        now: Instant,
    ) -> io::Result<usize> {
        let mut n = 0;
        loop {
            let mut slots = self.rx.chunks_mut(self.rx_slot);
            let mut bufs: [&mut [u8]; RX_BATCH] =
                std::array::from_fn(|_| slots.next().expect("RX_BATCH slots"));
            match link.recv_batch(&mut bufs, &mut self.rx_lens) {
                Ok(k) => {
                    for i in 0..k {
                        self.dispatch(conn, now, i);
                    }
                    n += k;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.stats.recv_errors += 1;
                    return Err(e);
                }
            }
        }
    }

    /// Hands frame `i` of the last batch to the connection.
    fn dispatch(&mut self, conn: &mut Connection, now: Instant, i: usize) {
        let at = i * self.rx_slot;
        let frame = &self.rx[at..at + self.rx_lens[i].min(self.rx_slot)];
        match EspFrame::parse(frame, self.ethertype, self.frame_cap) {
            Ok(f) => {
                let (peer_mac, peer_port) = conn.remote();
                if f.eth.src != peer_mac
                    || f.header.src_port != peer_port
                    || f.header.dst_port != conn.local().1
                    || (f.eth.dst != self.local_mac && !f.eth.dst.is_group())
                {
                    self.stats.foreign += 1;
                    return;
                }
                conn.handle_segment(now, &f.header, f.payload);
            }
            Err(_) => {
                self.stats.malformed += 1;
                conn.on_malformed();
            }
        }
    }

    /// Sends every frame the connection has ready; returns how many were
    /// handed to the link. Data segments are gathered: the headers are
    /// written into the transmit buffer and the payload goes from the
    /// connection's send buffer straight to the link
    /// ([`Connection::poll_transmit_gather`], `send_batch_vectored`: one
    /// copy fewer per segment on a `PacketLink`). A frame the link refuses
    /// (`WouldBlock`, a full queue) counts as a send error and is recovered
    /// by retransmission.
    pub fn transmit(
        &mut self,
        conn: &mut Connection,
        link: &mut dyn Link,
        now: Instant,
    ) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let mut k = 0;
            while k < TX_BATCH {
                let at = k * self.frame_cap;
                match conn.poll_transmit_gather(now, &mut self.tx[at..at + self.frame_cap]) {
                    Some(f) => {
                        self.tx_frames[k] = f;
                        k += 1;
                    }
                    None => break,
                }
            }
            if k == 0 {
                return Ok(total);
            }
            let (done, errors) = self.send_gathered(conn, link, k)?;
            for _ in 0..errors {
                conn.on_send_error();
            }
            debug_assert_eq!(done, k);
            total += k;
            if k < TX_BATCH {
                return Ok(total);
            }
        }
    }

    /// Hands the first `k` gathered frames to the link; returns (frames
    /// handled, frames lost to transient send errors).
    fn send_gathered(
        &self,
        conn: &Connection,
        link: &mut dyn Link,
        k: usize,
    ) -> io::Result<(usize, usize)> {
        let piece = |i: usize| {
            let f = self.tx_frames[i];
            let at = i * self.frame_cap;
            let (a, b) = conn.payload(f.payload_off, f.payload_len);
            [
                IoSlice::new(&self.tx[at..at + f.header_len]),
                IoSlice::new(a),
                IoSlice::new(b),
            ]
        };
        if k == 1 {
            // One frame (ping-pong): no batch arrays to fill.
            return match link.send_batch_vectored(&[&piece(0)]) {
                Ok(0) => Ok((1, 1)),
                Ok(_) => Ok((1, 0)),
                Err(e) if is_transient(&e) => Ok((1, 1)),
                Err(e) => Err(e),
            };
        }
        let mut pieces: [[IoSlice<'_>; 3]; TX_BATCH] = [[IoSlice::new(&[]); 3]; TX_BATCH];
        for (i, p) in pieces.iter_mut().enumerate().take(k) {
            *p = piece(i);
        }
        let frames: [&[IoSlice<'_>]; TX_BATCH] = std::array::from_fn(|i| &pieces[i][..]);
        let (mut done, mut errors) = (0, 0);
        while done < k {
            match link.send_batch_vectored(&frames[done..k]) {
                Ok(0) => {
                    // Nothing accepted: the rest is lost locally.
                    errors += k - done;
                    done = k;
                }
                Ok(m) => done += m,
                Err(e) if is_transient(&e) => {
                    errors += 1;
                    done += 1;
                }
                Err(e) => return Err(e),
            }
        }
        Ok((done, errors))
    }
}

/// Send errors after which the frame is dropped and recovered by
/// retransmission: a full queue, EINTR, ENOBUFS, an oversized frame.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::InvalidInput
    ) || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Fires the connection's expired timers.
pub fn timers(conn: &mut Connection, now: Instant) {
    if conn.poll_timeout().is_some_and(|t| t <= now) {
        conn.handle_timeout(now);
    }
}

/// A connection, its link and its I/O buffers.
pub struct ConnDriver<L: Link> {
    /// The protocol state machine.
    pub conn: Connection,
    /// The link carrying this connection's frames.
    pub link: L,
    io: Io,
}

impl<L: Link> std::fmt::Debug for ConnDriver<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnDriver")
            .field("conn", &self.conn)
            .field("io", &self.io)
            .finish()
    }
}

impl<L: Link> ConnDriver<L> {
    /// Couples `conn` with `link`; `ethertype` is the ESP ethertype.
    pub fn new(conn: Connection, link: L, ethertype: u16) -> Self {
        let io = Io::new(&link, ethertype);
        Self { conn, link, io }
    }

    /// Reassembles a driver from its parts.
    pub fn from_parts(conn: Connection, link: L, io: Io) -> Self {
        Self { conn, link, io }
    }

    /// Driver counters.
    pub fn stats(&self) -> DriverStats {
        self.io.stats
    }

    /// One round: receive, timers, transmit (see [`Io::poll`]).
    pub fn poll(&mut self, now: Instant) -> io::Result<bool> {
        self.io.poll(&mut self.conn, &mut self.link, now)
    }

    /// Receives every ready frame (see [`Io::receive`]).
    pub fn receive(&mut self, now: Instant) -> io::Result<usize> {
        self.io.receive(&mut self.conn, &mut self.link, now)
    }

    /// Fires expired timers.
    pub fn timers(&mut self, now: Instant) {
        timers(&mut self.conn, now)
    }

    /// Sends every ready frame (see [`Io::transmit`]).
    pub fn transmit(&mut self, now: Instant) -> io::Result<usize> {
        self.io.transmit(&mut self.conn, &mut self.link, now)
    }

    /// The earliest instant the driver must run again without input: the
    /// connection's timer or a frame the link itself holds back.
    pub fn poll_at(&self) -> Option<Instant> {
        earliest(self.conn.poll_timeout(), self.link.poll_at())
    }
}

/// The earlier of two optional instants.
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Waits until one of `fds` is readable or `deadline` passes (`None` =
/// forever), with ppoll(2)'s nanosecond timeout (mio rounds to
/// milliseconds). With no descriptor (in-memory links) it sleeps until the
/// deadline, at most 1 ms. Returns true when a descriptor is readable.
///
/// Errors: from ppoll(2) (EINTR is a normal early return).
pub fn wait_readable(fds: &[RawFd], deadline: Option<Instant>) -> io::Result<bool> {
    let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    if fds.is_empty() {
        std::thread::sleep(
            timeout
                .unwrap_or(Duration::from_millis(1))
                .min(Duration::from_millis(1)),
        );
        return Ok(false);
    }
    edp::event::poll_fds(fds, libc::POLLIN, timeout)
}
