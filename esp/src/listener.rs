//! The sans-IO listen side: SYN handling with a bounded backlog and a bounded
//! number of half-open connections (thesis ch. 5.2.5: the `syn` queue and
//! the accept queue of a listening socket).
//!
//! A [`Listener`] owns the connections it spawned until `accept` hands them
//! out: half-open ones (SYN_RCVD) and established ones waiting in the accept
//! queue. Each entry carries a handle `H` of the caller's choosing (the socket
//! layer stores the connection's own link there; tests use `()`).
//!
//! Limits: at most `max_half_open` connections in SYN_RCVD and at most
//! `backlog` established connections not yet accepted. A SYN beyond either
//! limit is dropped and counted (as TCP does): the client retransmits its
//! SYN with backoff and gets in once `accept` made room, or times out.

use std::time::Instant;

use crate::config::TransportConfig;
use crate::conn::{Connection, IsnGenerator, State};
use crate::wire::{EspRepr, MacAddr};

/// What to do with a segment that reached the listener.
#[derive(Debug)]
pub enum SynOutcome {
    /// A new half-open connection in SYN_RCVD: give it a link (or not) and
    /// [`Listener::insert`] it; its SYN-ACK is waiting in `poll_transmit`.
    Accept(Box<Connection>),
    /// Send this reset to the segment's source (a non-SYN segment for no
    /// connection, RFC 793 "LISTEN" state processing).
    Reset(EspRepr),
    /// Ignore the segment.
    Drop(DropReason),
}

/// Why the listener ignored a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The SYN belongs to a connection the listener already has.
    Duplicate,
    /// The accept queue is full (`backlog`).
    BacklogFull,
    /// Too many half-open connections (`max_half_open`).
    HalfOpenFull,
    /// An RST, or a segment not addressed to the listening port.
    Ignored,
}

/// Counters of a listener.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// SYNs that created a half-open connection.
    pub syns_accepted: u64,
    /// SYNs dropped because the backlog or the half-open table was full.
    pub syns_dropped: u64,
    /// Resets sent for segments that matched no connection.
    pub resets: u64,
    /// Half-open connections that died before completing the handshake.
    pub half_open_failed: u64,
}

/// A connection owned by the listener, with the caller's handle.
#[derive(Debug)]
pub struct Entry<H> {
    /// The connection's state machine.
    pub conn: Connection,
    /// The caller's handle for it (e.g. its socket slot).
    pub handle: H,
}

/// The listen side of one (MAC, port).
pub struct Listener<H> {
    cfg: TransportConfig,
    mtu: usize,
    local: (MacAddr, u16),
    isn: IsnGenerator,
    entries: Vec<Entry<H>>,
    stats: ListenerStats,
}

impl<H> Listener<H> {
    /// A listener on `local` (MAC, port) for links of MTU `mtu` bytes; limits
    /// from `cfg.backlog` and `cfg.max_half_open`.
    pub fn new(cfg: TransportConfig, mtu: usize, local: (MacAddr, u16), isn: IsnGenerator) -> Self {
        Self {
            cfg,
            mtu,
            local,
            isn,
            entries: Vec::new(),
            stats: ListenerStats::default(),
        }
    }

    /// Local (MAC, port).
    pub fn local(&self) -> (MacAddr, u16) {
        self.local
    }

    /// Counters.
    pub fn stats(&self) -> ListenerStats {
        self.stats
    }

    /// Connections in SYN_RCVD.
    pub fn half_open(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.conn.state() == State::SynRcvd)
            .count()
    }

    /// Established connections waiting for `accept`.
    pub fn ready(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.conn.was_established())
            .count()
    }

    /// Whether the listener owns a connection from `remote` (MAC, port).
    pub fn has(&self, remote: (MacAddr, u16)) -> bool {
        self.entries.iter().any(|e| e.conn.remote() == remote)
    }

    /// Decides about a segment from `src_mac` that no connection took.
    /// `clock_us` feeds the ISN clock term (RFC 6528); `known(remote)` tells
    /// whether a connection to `remote` exists outside the listener (already
    /// accepted): its SYNs are that connection's business.
    pub fn on_segment(
        &mut self,
        now: Instant,
        clock_us: u64,
        src_mac: MacAddr,
        repr: &EspRepr,
        known: impl Fn((MacAddr, u16)) -> bool,
    ) -> SynOutcome {
        if repr.dst_port != self.local.1 || repr.flags.rst() || src_mac.is_group() {
            return SynOutcome::Drop(DropReason::Ignored);
        }
        let remote = (src_mac, repr.src_port);
        if !repr.flags.syn() || repr.flags.ack() {
            if self.has(remote) || known(remote) {
                return SynOutcome::Drop(DropReason::Duplicate);
            }
            self.stats.resets += 1;
            return match repr.reset_reply() {
                Some(r) => SynOutcome::Reset(r),
                None => SynOutcome::Drop(DropReason::Ignored),
            };
        }
        if self.has(remote) || known(remote) {
            return SynOutcome::Drop(DropReason::Duplicate);
        }
        if self.half_open() >= self.cfg.max_half_open {
            self.stats.syns_dropped += 1;
            tracing::debug!(port = self.local.1, peer = %src_mac, "SYN dropped: half-open limit");
            return SynOutcome::Drop(DropReason::HalfOpenFull);
        }
        if self.ready() >= self.cfg.backlog {
            self.stats.syns_dropped += 1;
            tracing::debug!(port = self.local.1, peer = %src_mac, "SYN dropped: backlog full");
            return SynOutcome::Drop(DropReason::BacklogFull);
        }
        let iss = self.isn.isn(self.local, remote, clock_us);
        match Connection::accept(&self.cfg, self.mtu, self.local, src_mac, repr, iss, now) {
            Some(c) => {
                self.stats.syns_accepted += 1;
                SynOutcome::Accept(Box::new(c))
            }
            None => SynOutcome::Drop(DropReason::Ignored),
        }
    }

    /// Takes ownership of a half-open connection from [`SynOutcome::Accept`].
    pub fn insert(&mut self, conn: Connection, handle: H) {
        self.entries.push(Entry { conn, handle });
    }

    /// The owned connections, to drive them (segments, timers, transmit).
    pub fn entries_mut(&mut self) -> &mut [Entry<H>] {
        &mut self.entries
    }

    /// The owned connections.
    pub fn entries(&self) -> &[Entry<H>] {
        &self.entries
    }

    /// Removes half-open connections that died (RST, timeout) and have
    /// nothing left to send; returns them so their handles can be released.
    pub fn reap(&mut self) -> Vec<Entry<H>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            let c = &self.entries[i].conn;
            if c.state() == State::Closed && c.is_finished() && !c.was_established() {
                self.stats.half_open_failed += 1;
                out.push(self.entries.remove(i));
            } else {
                i += 1;
            }
        }
        out
    }

    /// The oldest established connection, if any (FIFO, thesis 5.2.5).
    pub fn accept(&mut self) -> Option<Entry<H>> {
        let i = self.entries.iter().position(|e| e.conn.was_established())?;
        Some(self.entries.remove(i))
    }

    /// Earliest deadline among the owned connections.
    pub fn poll_timeout(&self) -> Option<std::time::Instant> {
        self.entries
            .iter()
            .filter_map(|e| e.conn.poll_timeout())
            .min()
    }
}
