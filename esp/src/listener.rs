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
//! `backlog` established connections not yet accepted. A SYN beyond the
//! half-open limit is answered with a SYN cookie when
//! `TransportConfig::syn_cookies` is on (the default; RFC 4987 sec. 3.6,
//! [`cookie`]): no state is kept until the final ACK returns the cookie,
//! so a SYN flood from forged addresses neither fills memory nor keeps
//! legitimate clients out (Linux does the same once its SYN queue
//! overflows). Without cookies, and whenever the backlog is full, the SYN
//! is dropped and counted (as TCP does): the client retransmits its SYN
//! with backoff and gets in once `accept` made room, or times out.
//!
//! A final ACK is checked for a cookie only while cookies may be
//! outstanding: when the listener sent one within a cookie's lifetime
//! (Linux's rule: `cookie_v4_check` gives up at once when
//! `tcp_synq_no_recent_overflow`, RFC 4987 sec. 3.6 leaves it to the
//! implementation). A flood of forged ACKs to an idle listener then costs
//! no hash each, and cannot be used to guess cookies that were never sent.
//!
//! A segment to the listening port that matches no connection and returns
//! no valid cookie draws an RST (RFC 9293 sec. 3.10.7.2), at most
//! [`RESETS_PER_SEC`] per second, as the host responder's: a flood of
//! forged ACKs does not make the host send one RST each.
//!
//! Memory: at most `max_half_open + backlog` connections, each a
//! [`Connection`] with empty buffers (a few kilobytes; buffers grow only
//! with data), whatever the SYN rate.

use std::time::Instant;

use netcore::rate::PerSecond;

use crate::auth::{choose, AuthMethod, EncMethod, MethodList, TagStatus};
use crate::config::TransportConfig;
use crate::conn::{window_segments, Connection, IsnGenerator, State};
use crate::wire::{EspRepr, Flags, MacAddr, Nego, ESP_HEADER_LEN};

pub mod cookie;

pub use cookie::SynCookies;

/// What to do with a segment that reached the listener.
#[derive(Debug)]
pub enum SynOutcome {
    /// A new connection: [`Listener::insert`] it. Either half-open in
    /// SYN_RCVD with its SYN-ACK waiting in `poll_transmit`, or
    /// ESTABLISHED from a valid SYN cookie (the segment that returned the
    /// cookie, data included, is processed already; it is ready for
    /// `accept`).
    Accept(Box<Connection>),
    /// Send this reset to the segment's source (a non-SYN segment for no
    /// connection, RFC 793 "LISTEN" state processing).
    Reset(EspRepr),
    /// Send this SYN-ACK carrying a SYN cookie to the segment's source; no
    /// state was kept.
    Cookie(EspRepr),
    /// Send this RST to the segment's source: its SYN offered no method
    /// of the listener's list (`crate::auth`); the RST carries the
    /// listener's lists for the initiator's error. No state was kept.
    Refused(EspRepr),
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
    /// A segment without a valid frame tag where the negotiated method
    /// needs one (a final ACK completing a cookie).
    Unauthenticated,
    /// A segment that matched no connection, past the listener's RST rate
    /// limit ([`RESETS_PER_SEC`]): dropped unanswered.
    RateLimited,
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
    /// SYN-ACKs sent with a SYN cookie (half-open table full).
    pub cookies_sent: u64,
    /// Connections made from a valid cookie.
    pub cookies_accepted: u64,
    /// ACKs that carried no valid cookie (answered with RST).
    pub cookies_invalid: u64,
    /// ACKs not checked for a cookie because the listener had sent none
    /// within a cookie's lifetime (answered with RST, rate-limited).
    pub cookies_unexpected: u64,
    /// Half-open connections that died before completing the handshake.
    pub half_open_failed: u64,
    /// SYNs refused by negotiation: no common authentication (or
    /// encryption) method (`crate::auth`).
    pub auth_refused: u64,
    /// Segments dropped for want of a valid frame tag under the method
    /// they were bound to.
    pub auth_dropped: u64,
    /// Segments that matched no connection and drew no RST: the RST rate
    /// limit ([`RESETS_PER_SEC`]) was reached.
    pub rate_limited: u64,
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
    /// The governing list of authentication methods (`cfg.auth`).
    auth: MethodList,
    mtu: usize,
    local: (MacAddr, u16),
    isn: IsnGenerator,
    cookies: SynCookies,
    /// When the last cookie was sent (`clock_us`), if ever.
    cookie_sent_us: Option<u64>,
    entries: Vec<Entry<H>>,
    stats: ListenerStats,
    /// RSTs to segments that match no connection, at most
    /// [`RESETS_PER_SEC`] per second.
    resets: PerSecond,
}

/// Most RSTs per second a listener sends to segments that match no
/// connection (the host responder's limit, `runtime::responder`): a
/// flood of forged ACKs to a listening port costs the host one RST each
/// only up to this rate.
pub const RESETS_PER_SEC: u32 = runtime::RESETS_PER_SEC;

impl<H> Listener<H> {
    /// A listener on `local` (MAC, port) for links of MTU `mtu` bytes; limits
    /// from `cfg.backlog` and `cfg.max_half_open`.
    pub fn new(cfg: TransportConfig, mtu: usize, local: (MacAddr, u16), isn: IsnGenerator) -> Self {
        Self {
            auth: cfg.auth.resolve(false),
            cfg,
            mtu,
            local,
            isn,
            cookies: SynCookies::random(),
            cookie_sent_us: None,
            entries: Vec::new(),
            stats: ListenerStats::default(),
            resets: PerSecond::new(RESETS_PER_SEC),
        }
    }

    /// This listener with a fixed cookie key (tests, deterministic runs).
    pub fn with_cookies(mut self, cookies: SynCookies) -> Self {
        self.cookies = cookies;
        self
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
        self.on_segment_with_payload(now, clock_us, src_mac, repr, &[], known)
    }

    /// [`Listener::on_segment`] with the segment's payload: a data segment
    /// that returns a SYN cookie (the final ACK was lost) is delivered to
    /// the connection it completes.
    pub fn on_segment_with_payload(
        &mut self,
        now: Instant,
        clock_us: u64,
        src_mac: MacAddr,
        repr: &EspRepr,
        payload: &[u8],
        known: impl Fn((MacAddr, u16)) -> bool,
    ) -> SynOutcome {
        self.on_segment_tagged(now, clock_us, src_mac, repr, payload, TagStatus::Off, known)
    }

    /// [`Listener::on_segment_with_payload`] with frame authentication's
    /// verdict on the segment (`cx.tag`): a SYN is negotiated with it
    /// (`crate::auth`: a method with a tag counts as offered only on a
    /// verified SYN), a final ACK returning a cookie for such a method
    /// must be verified.
    #[allow(clippy::too_many_arguments)]
    pub fn on_segment_tagged(
        &mut self,
        now: Instant,
        clock_us: u64,
        src_mac: MacAddr,
        repr: &EspRepr,
        payload: &[u8],
        tag: TagStatus,
        known: impl Fn((MacAddr, u16)) -> bool,
    ) -> SynOutcome {
        if repr.dst_port != self.local.1 || repr.flags.rst() || src_mac.is_group() {
            return SynOutcome::Drop(DropReason::Ignored);
        }
        let is_syn = repr.flags.syn() && !repr.flags.ack();
        if tag == TagStatus::Unverified && !is_syn && !self.auth.contains(AuthMethod::NONE.0) {
            // Without a tag, a listener that requires one answers only a
            // SYN (with its refusal): no RST for an attacker's untagged
            // segments.
            self.stats.auth_dropped += 1;
            return SynOutcome::Drop(DropReason::Unauthenticated);
        }
        let remote = (src_mac, repr.src_port);
        if !repr.flags.syn() || repr.flags.ack() {
            if self.has(remote) || known(remote) {
                return SynOutcome::Drop(DropReason::Duplicate);
            }
            if repr.flags.ack() && !repr.flags.syn() && self.cfg.syn_cookies {
                if let Some(o) = self.complete_cookie(now, clock_us, src_mac, repr, payload, tag) {
                    return o;
                }
            }
            if !self.resets.allow(now) {
                self.stats.rate_limited += 1;
                return SynOutcome::Drop(DropReason::RateLimited);
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
        // Negotiation first (the LAM rule: the acceptor's list governs);
        // a SYN without the option offers none only.
        let none = MethodList::one(AuthMethod::NONE.0);
        let (offer_auth, offer_enc) = repr.nego.map_or((none, none), |n| (n.auth, n.enc));
        let method = match choose(&self.auth, &offer_auth, &offer_enc, tag) {
            Ok((m, _enc)) => m,
            Err(stage) => {
                self.stats.auth_refused += 1;
                tracing::debug!(port = self.local.1, peer = %src_mac, ?stage, offered = ?offer_auth,
                    accepted = ?self.auth, "SYN refused: no common method");
                let mut rst = repr.reset_reply().expect("a SYN is no RST");
                rst.nego = Some(Nego {
                    auth: self.auth,
                    enc: MethodList::one(EncMethod::NONE.0),
                });
                return SynOutcome::Refused(rst);
            }
        };
        if self.ready() >= self.cfg.backlog {
            self.stats.syns_dropped += 1;
            tracing::debug!(port = self.local.1, peer = %src_mac, "SYN dropped: backlog full");
            return SynOutcome::Drop(DropReason::BacklogFull);
        }
        if self.half_open() >= self.cfg.max_half_open {
            if self.cfg.syn_cookies {
                self.stats.cookies_sent += 1;
                self.cookie_sent_us = Some(clock_us);
                tracing::trace!(port = self.local.1, peer = %src_mac, "half-open table full: SYN cookie");
                return SynOutcome::Cookie(self.cookie_syn_ack(remote, repr, method, clock_us));
            }
            self.stats.syns_dropped += 1;
            tracing::debug!(port = self.local.1, peer = %src_mac, "SYN dropped: half-open limit");
            return SynOutcome::Drop(DropReason::HalfOpenFull);
        }
        let iss = self.isn.isn(self.local, remote, clock_us);
        match Connection::accept(&self.cfg, self.mtu, self.local, src_mac, repr, iss, now) {
            Some(mut c) => {
                c.bind_auth(method);
                self.stats.syns_accepted += 1;
                SynOutcome::Accept(Box::new(c))
            }
            None => SynOutcome::Drop(DropReason::Ignored),
        }
    }

    /// The stateless SYN-ACK answering `syn` from `remote` (its sequence
    /// number is the cookie; its window the whole receive buffer, as a
    /// connection's SYN-ACK advertises).
    fn cookie_syn_ack(
        &self,
        remote: (MacAddr, u16),
        syn: &EspRepr,
        method: AuthMethod,
        clock_us: u64,
    ) -> EspRepr {
        let mss = self.mtu.saturating_sub(ESP_HEADER_LEN).max(1);
        EspRepr {
            src_port: self.local.1,
            dst_port: remote.1,
            flags: Flags::SYN | Flags::ACK,
            seq: self
                .cookies
                .make(self.local, remote, syn.seq, method.0, clock_us),
            ack: syn.seq.add(1),
            window: window_segments(self.cfg.recv_buffer, mss).max(1) as u16,
            nego: Some(Nego {
                auth: MethodList::one(method.0),
                enc: MethodList::one(EncMethod::NONE.0),
            }),
            ..Default::default()
        }
    }

    /// An ACK from a remote the listener has no connection for: when it
    /// returns a valid cookie, the connection it completes (established,
    /// the segment processed), or a drop when the backlog is full; `None`
    /// when it carries no valid cookie.
    fn complete_cookie(
        &mut self,
        now: Instant,
        clock_us: u64,
        src_mac: MacAddr,
        repr: &EspRepr,
        payload: &[u8],
        tag: TagStatus,
    ) -> Option<SynOutcome> {
        let lifetime = cookie::COOKIE_PERIOD * (u64::from(cookie::COOKIE_PERIODS) + 1);
        if self
            .cookie_sent_us
            .is_none_or(|t| clock_us.saturating_sub(t) > lifetime)
        {
            self.stats.cookies_unexpected += 1;
            return None;
        }
        let remote = (src_mac, repr.src_port);
        let iss = repr.ack.sub(1);
        let irs = repr.seq.sub(1);
        // The cookie binds the method chosen: one hash per method of the
        // listener's list (at most 8).
        let Some(method) = self.auth.auth_methods().find(|m| {
            self.cookies
                .check(self.local, remote, irs, iss, m.0, clock_us)
        }) else {
            self.stats.cookies_invalid += 1;
            return None;
        };
        if method.requires_tag() && tag != TagStatus::Verified {
            self.stats.auth_dropped += 1;
            return Some(SynOutcome::Drop(DropReason::Unauthenticated));
        }
        if self.ready() >= self.cfg.backlog {
            // The client retransmits (its data, or a keepalive) and gets
            // in once `accept` made room, within the cookie's lifetime.
            self.stats.syns_dropped += 1;
            return Some(SynOutcome::Drop(DropReason::BacklogFull));
        }
        let mut c =
            Connection::from_cookie(&self.cfg, self.mtu, self.local, src_mac, repr, iss, now)?;
        c.bind_auth(method);
        self.stats.cookies_accepted += 1;
        tracing::debug!(port = self.local.1, peer = %src_mac, "connection from a SYN cookie");
        c.handle_segment_tagged(now, repr, payload, tag, &mut []);
        Some(SynOutcome::Accept(Box::new(c)))
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
