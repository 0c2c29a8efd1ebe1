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
//! `PacketLink`). No allocation per frame: receive and transmit buffers are
//! allocated once.

use std::io;
use std::time::Instant;

use edp::wire::ETH_HEADER_LEN;
use edp::Link;

use crate::conn::Connection;
use crate::wire::{EspFrame, MacAddr};

/// Frames sent per `send_batch` call.
pub const TX_BATCH: usize = 32;

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

/// A connection and its link.
pub struct ConnDriver<L: Link> {
    /// The protocol state machine.
    pub conn: Connection,
    /// The link carrying this connection's frames.
    pub link: L,
    rx: Vec<u8>,
    tx: Vec<u8>,
    tx_lens: [usize; TX_BATCH],
    frame_cap: usize,
    ethertype: u16,
    local_mac: MacAddr,
    stats: DriverStats,
}

impl<L: Link> std::fmt::Debug for ConnDriver<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnDriver")
            .field("conn", &self.conn)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<L: Link> ConnDriver<L> {
    /// Couples `conn` with `link`; `ethertype` is the ESP ethertype.
    pub fn new(conn: Connection, link: L, ethertype: u16) -> Self {
        let frame_cap = link.mtu() + ETH_HEADER_LEN;
        Self {
            local_mac: link.mac(),
            conn,
            link,
            rx: vec![0; frame_cap],
            tx: vec![0; frame_cap * TX_BATCH],
            tx_lens: [0; TX_BATCH],
            frame_cap,
            ethertype,
            stats: DriverStats::default(),
        }
    }

    /// Driver counters.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// One round: receive, timers, transmit. Returns true when any frame
    /// moved. Errors: fatal link errors (not `WouldBlock`).
    pub fn poll(&mut self, now: Instant) -> io::Result<bool> {
        let got = self.receive(now)?;
        self.timers(now);
        let sent = self.transmit(now)?;
        Ok(got + sent > 0)
    }

    /// Hands every ready frame to the connection; returns how many frames
    /// were read.
    pub fn receive(&mut self, now: Instant) -> io::Result<usize> {
        let mut n = 0;
        loop {
            match self.link.recv(&mut self.rx) {
                Ok(len) => {
                    n += 1;
                    self.dispatch(now, len);
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

    fn dispatch(&mut self, now: Instant, len: usize) {
        let frame = &self.rx[..len];
        match EspFrame::parse(frame, self.ethertype, self.frame_cap) {
            Ok(f) => {
                let (peer_mac, peer_port) = self.conn.remote();
                if f.eth.src != peer_mac
                    || f.esp.src_port != peer_port
                    || f.esp.dst_port != self.conn.local().1
                    || (f.eth.dst != self.local_mac && !f.eth.dst.is_group())
                {
                    self.stats.foreign += 1;
                    return;
                }
                self.conn.handle_segment(now, &f.esp, f.payload);
            }
            Err(_) => {
                self.stats.malformed += 1;
                self.conn.on_malformed();
            }
        }
    }

    /// Fires the connection's expired timers.
    pub fn timers(&mut self, now: Instant) {
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
    }

    /// Sends every frame the connection has ready; returns how many were
    /// handed to the link. A frame the link refuses (`WouldBlock`, a full
    /// queue) counts as a send error and is recovered by retransmission.
    pub fn transmit(&mut self, now: Instant) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let mut k = 0;
            while k < TX_BATCH {
                let at = k * self.frame_cap;
                match self
                    .conn
                    .poll_transmit(now, &mut self.tx[at..at + self.frame_cap])
                {
                    Some(n) => {
                        self.tx_lens[k] = n;
                        k += 1;
                    }
                    None => break,
                }
            }
            if k == 0 {
                return Ok(total);
            }
            let mut frames: [&[u8]; TX_BATCH] = [&[]; TX_BATCH];
            for (i, f) in frames.iter_mut().enumerate().take(k) {
                let at = i * self.frame_cap;
                *f = &self.tx[at..at + self.tx_lens[i]];
            }
            let mut done = 0;
            while done < k {
                match self.link.send_batch(&frames[done..k]) {
                    Ok(0) => {
                        // Nothing accepted: the rest is lost locally.
                        for _ in done..k {
                            self.conn.on_send_error();
                        }
                        break;
                    }
                    Ok(m) => done += m,
                    Err(e)
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.kind() == io::ErrorKind::Interrupted
                            || e.kind() == io::ErrorKind::InvalidInput =>
                    {
                        self.conn.on_send_error();
                        done += 1;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                        self.conn.on_send_error();
                        done += 1;
                    }
                    Err(e) => return Err(e),
                }
            }
            total += k;
            if k < TX_BATCH {
                return Ok(total);
            }
        }
    }

    /// The earliest instant the driver must run again without input: the
    /// connection's timer or a frame the link itself holds back.
    pub fn poll_at(&self) -> Option<Instant> {
        match (self.conn.poll_timeout(), self.link.poll_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
