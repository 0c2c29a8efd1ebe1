//! The host responder role of a runtime: echo replies on EDP's control port
//! (thesis ch. 4.2.5; reachability discovery, ch. 6.3) and RSTs for ESP
//! segments to no socket (thesis ch. 5.2.9).
//!
//! One process per host and interface answers for ports nobody owns: the
//! holder of the protocol's *control lease* (port 0 of its ethertype,
//! [`crate::ports::PortLease::control`]). A runtime tries the lease when it
//! opens and again every [`LEASE_RETRY`] while another process holds it, so
//! when the holder exits or crashes another takes over within about a
//! second. Frames for ports this runtime owns but no socket claims (a
//! connection that is gone) are answered by the runtime itself, lease or
//! not: nobody else could.
//!
//! The ESP role answers every segment but an RST sent to a port no process
//! holds (RFC 9293 3.10.7.1, "If the state is CLOSED ... a reset is sent in
//! response to any incoming segment except another reset"), not only SYNs:
//! a client whose server process died learns it from its next segment
//! instead of waiting for its retransmission limit. Its
//! kernel filter excludes the ports other processes hold (rescanned every
//! [`ELSEWHERE_RESCAN`], on the timer and when such frames arrive); a
//! port bound since the last scan is checked with [`ports::is_held`]
//! before answering. RSTs are limited to
//! [`RESETS_PER_SEC`] per second (a flood of segments to closed ports must
//! not become an equal flood of RSTs; Linux limits its out-of-window
//! answers alike, `tcp_invalid_ratelimit`); beyond it they are counted in
//! `rate_limited`. Once a second's RSTs are spent on segments to closed
//! ports, the role leaves the kernel filter until the second ends
//! (`rst_pauses`): the rest of a flood of forged segments is then dropped
//! by the kernel, as frames of a foreign ethertype are, instead of each
//! costing a receive in user space to be dropped unanswered anyway. The
//! same holds for this runtime's own ports that only connections use (an
//! accepted ESP stream whose listener is gone, a client's port): for the
//! rest of such a second the kernel filter keeps their connections' peers
//! only, so a stranger's flood to them (an attacker's forged ACKs from its
//! own MAC) stops at the kernel too.
//!
//! This replaces the responder threads of the first design, which each had
//! their own packet socket (two more sockets per process that every frame
//! visited): the role now rides on the runtime's one socket and filter.

use std::time::{Duration, Instant};

use netcore::rate::PerSecond;

use crate::ports::{self, PortLease};
use link::eth::MacAddr;

use crate::control;
use crate::ports::CONTROL_PORT;

use crate::demux::Demux;
use crate::stats::ResponderStats;
use crate::tx::TxQueue;

/// How often a runtime that does not hold a control lease tries it again.
pub const LEASE_RETRY: Duration = Duration::from_secs(1);
/// How often the ESP lease holder rescans the ports other processes hold
/// (to exclude them from its kernel filter).
pub const ELSEWHERE_RESCAN: Duration = Duration::from_secs(1);
/// Most RSTs the responder sends per second for segments to no socket.
pub const RESETS_PER_SEC: u32 = 1000;

/// Builds the answer to a frame of its protocol that no slot claimed (the
/// ESP crate installs one that answers RST).
pub trait UnclaimedHandler: Send + 'static {
    /// Writes the answer to `frame` (addressed to `mac`; at most
    /// `max_frame` bytes) into `out` and returns its length; `None` leaves
    /// the frame unanswered (e.g. an RST, which is never answered).
    fn answer(
        &mut self,
        frame: &[u8],
        mac: MacAddr,
        max_frame: usize,
        out: &mut [u8],
    ) -> Option<usize>;
}

/// One protocol's role: its control lease and how it answers.
struct Role {
    ethertype: u16,
    enabled: bool,
    lease: Option<PortLease>,
    next_try: Option<Instant>,
}

impl Role {
    fn new(ethertype: u16) -> Self {
        Self {
            ethertype,
            enabled: false,
            lease: None,
            next_try: None,
        }
    }

    /// Tries the lease if due; true when holding it changed.
    fn try_lease(&mut self, iface: Option<&str>, now: Instant) -> bool {
        if !self.enabled || self.lease.is_some() || self.next_try.is_some_and(|t| now < t) {
            return false;
        }
        let Some(iface) = iface else {
            return false;
        };
        match PortLease::control(iface, self.ethertype) {
            Ok(l) => {
                tracing::debug!(
                    iface,
                    ethertype = self.ethertype,
                    "runtime: holding the control lease"
                );
                self.lease = Some(l);
                self.next_try = None;
                true
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::AddrInUse {
                    tracing::warn!(iface, error = %e, "runtime: control lease");
                }
                self.next_try = Some(now + LEASE_RETRY);
                false
            }
        }
    }
}

/// The responder role. See the module documentation.
pub struct Responder {
    iface: Option<String>,
    edp: Role,
    esp: Role,
    esp_handler: Option<Box<dyn UnclaimedHandler>>,
    /// ESP ports other processes hold (while holding the ESP lease).
    esp_elsewhere: Vec<u16>,
    next_rescan: Option<Instant>,
    /// RSTs allowed: [`RESETS_PER_SEC`].
    resets: PerSecond,
    /// `esp_elsewhere` changed in a rescan outside `on_timeout`.
    filter_changed: bool,
    /// The RST role is out of the kernel filter until then (this second's
    /// RSTs are spent).
    rst_paused_until: Option<Instant>,
    stats: ResponderStats,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("edp_lease", &self.edp.lease.is_some())
            .field("esp_lease", &self.esp.lease.is_some())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Responder {
    pub(crate) fn new(iface: Option<String>, edp_ethertype: u16, esp_ethertype: u16) -> Self {
        Self {
            iface,
            edp: Role::new(edp_ethertype),
            esp: Role::new(esp_ethertype),
            esp_handler: None,
            esp_elsewhere: Vec::new(),
            next_rescan: None,
            resets: PerSecond::new(RESETS_PER_SEC),
            filter_changed: false,
            rst_paused_until: None,
            stats: ResponderStats::default(),
        }
    }

    /// Answers echo requests while holding EDP's control lease.
    pub(crate) fn enable_echo(&mut self, now: Instant) -> bool {
        self.edp.enabled = true;
        self.edp.try_lease(self.iface.as_deref(), now)
    }

    /// Answers unclaimed ESP segments with `handler`.
    pub(crate) fn enable_esp(&mut self, handler: Box<dyn UnclaimedHandler>, now: Instant) -> bool {
        self.esp_handler = Some(handler);
        self.esp.enabled = true;
        let took = self.esp.try_lease(self.iface.as_deref(), now);
        if took {
            self.rescan(now, true);
        }
        took
    }

    /// Whether an ESP answer handler is installed.
    pub fn esp_enabled(&self) -> bool {
        self.esp_handler.is_some()
    }

    /// Whether this runtime answers echo requests for the host.
    pub fn holds_edp(&self) -> bool {
        self.edp.lease.is_some()
    }

    /// Whether this runtime answers SYNs to unowned ports for the host.
    pub fn holds_esp(&self) -> bool {
        self.esp.lease.is_some()
    }

    /// Whether the kernel filter lets segments to unowned ports through
    /// now: the ESP lease is held and this second's RSTs are not spent.
    pub(crate) fn answers_esp(&self) -> bool {
        self.holds_esp() && self.rst_paused_until.is_none()
    }

    /// Whether segments to this runtime's own ports that match no
    /// connection are answered (with RST) now: an answer is installed and
    /// this second's RSTs are not spent. When not, the kernel filter keeps
    /// only the connections' peers on ports that only connections use.
    pub(crate) fn answers_own_ports(&self) -> bool {
        self.esp_handler.is_some() && self.rst_paused_until.is_none()
    }

    /// ESP ports other processes held at the last scan (empty unless this
    /// runtime holds the ESP lease).
    pub fn esp_elsewhere(&self) -> &[u16] {
        &self.esp_elsewhere
    }

    /// Counters.
    pub fn stats(&self) -> ResponderStats {
        self.stats
    }

    /// Next lease retry or rescan.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let t = netcore::time::earliest(
            self.edp.next_try.filter(|_| self.edp.lease.is_none()),
            self.esp.next_try.filter(|_| self.esp.lease.is_none()),
        );
        let t = netcore::time::earliest(t, self.rst_paused_until);
        netcore::time::earliest(t, self.next_rescan.filter(|_| self.esp.lease.is_some()))
    }

    /// Retries leases that are due and rescans the ports held elsewhere;
    /// true when the filter must change.
    pub(crate) fn on_timeout(&mut self, now: Instant) -> bool {
        let a = self.edp.try_lease(self.iface.as_deref(), now);
        let b = self.esp.try_lease(self.iface.as_deref(), now);
        let c = self.rescan(now, b);
        let d = self.rst_paused_until.is_some_and(|t| now >= t);
        if d {
            self.rst_paused_until = None;
        }
        a || b || c || d
    }

    /// Rescans the ESP ports other processes hold when due (or `force`d);
    /// true when the list changed.
    fn rescan(&mut self, now: Instant, force: bool) -> bool {
        let (Some(iface), Some(_)) = (self.iface.as_deref(), self.esp.lease.as_ref()) else {
            return false;
        };
        if !force && self.next_rescan.is_some_and(|t| now < t) {
            return false;
        }
        self.next_rescan = Some(now + ELSEWHERE_RESCAN);
        self.stats.rescans += 1;
        match ports::held_ports(iface, self.esp.ethertype) {
            Ok(mut held) => {
                held.retain(|&p| p != CONTROL_PORT);
                let changed = held != self.esp_elsewhere;
                self.esp_elsewhere = held;
                changed
            }
            Err(e) => {
                tracing::debug!(iface, error = %e, "runtime: scanning held ports");
                false
            }
        }
    }

    /// Whether another RST may go out now (without taking it).
    fn reset_available(&mut self, now: Instant) -> bool {
        self.resets.available(now)
    }

    /// Whether the kernel filter must change (a rescan while receiving
    /// changed the excluded ports); clears the flag.
    pub(crate) fn take_filter_change(&mut self) -> bool {
        std::mem::take(&mut self.filter_changed)
    }

    /// A frame of `ethertype` (already checked: sent to `mac` or a group,
    /// from a unicast source that is not us) that no slot claimed. Writes
    /// the answer, if any, into `tx`; returns whether it answered.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_unclaimed(
        &mut self,
        now: Instant,
        frame: &[u8],
        ethertype: u16,
        mac: MacAddr,
        mtu: usize,
        demux: &Demux,
        tx: &mut TxQueue,
    ) -> bool {
        let max_frame = mtu + link::eth::ETH_HEADER_LEN;
        let dst_port = u16::from_be_bytes([frame[16], frame[17]]);
        let to_group = frame[0] & 1 == 1;
        if ethertype == self.edp.ethertype {
            if dst_port != CONTROL_PORT || self.edp.lease.is_none() {
                return false;
            }
            if tx.is_full() {
                self.stats.overflow += 1;
                return false;
            }
            let out = tx.next_buf();
            match control::answer(frame, ethertype, mac, max_frame, out) {
                control::Verdict::Reply(n) => {
                    tx.commit(n, None);
                    self.stats.echo_replies += 1;
                    true
                }
                _ => {
                    self.stats.ignored += 1;
                    false
                }
            }
        } else if ethertype == self.esp.ethertype {
            if to_group {
                self.stats.ignored += 1;
                return false;
            }
            if self.esp_handler.is_none() {
                return false;
            }
            let ours = demux.uses_port(ethertype, dst_port);
            if !ours {
                // Only the lease holder answers for the host, and only for
                // ports no process holds. The check looks without taking
                // the lease (a process binding it now is not disturbed).
                if self.esp.lease.is_none() {
                    return false;
                }
                if self.rescan(now, false) {
                    self.filter_changed = true;
                }
            }
            if !self.reset_available(now) {
                self.stats.rate_limited += 1;
                if self.rst_paused_until.is_none() {
                    // The rest of this second's segments to closed ports,
                    // and to our ports from strangers, would be dropped
                    // here unanswered: let the kernel drop them.
                    self.rst_paused_until = self.resets.window_end();
                    self.stats.rst_pauses += 1;
                    self.filter_changed = true;
                }
                return false;
            }
            if !ours && dst_port != CONTROL_PORT {
                if let Some(iface) = self.iface.as_deref() {
                    if ports::is_held(iface, ethertype, dst_port) {
                        // Bound since the last scan (the next one, driven
                        // by such frames too, excludes it from the filter).
                        self.stats.ignored += 1;
                        return false;
                    }
                }
            }
            if tx.is_full() {
                self.stats.overflow += 1;
                return false;
            }
            let handler = self.esp_handler.as_mut().expect("checked above");
            match handler.answer(frame, mac, max_frame, tx.next_buf()) {
                Some(n) => {
                    tx.commit(n, None);
                    self.resets.take();
                    self.stats.resets += 1;
                    true
                }
                None => false,
            }
        } else {
            false
        }
    }
}
