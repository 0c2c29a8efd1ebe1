//! Link outages: which send and receive errors mean that the interface
//! went away for a while rather than that the socket broke, the state of a
//! link across an outage ([`Health`]), and its counters ([`OutageStats`]).
//!
//! An interface that is set down and up, loses its carrier, changes its MTU
//! or is deleted and re-created under the same name (a new index) is an
//! outage: the socket and everything above it survive. The runtime drops
//! the frames it could not send (reliable protocols retransmit them;
//! datagram sockets count them in `EngineStats::tx_unsent`, as kernel UDP
//! counts `SndbufErrors` instead of failing the call), and the link checks
//! its interface at once and then every [`DOWN_RECHECK`] until it works
//! again. A `PacketLink` re-binds its socket (same descriptor, same receive
//! ring and filter) to a re-created interface and joins its groups again.
//! While the link works it checks every [`UP_CHECK`] (one getsockopt(2) of
//! `SO_ERROR`), so a reader that never sends and never sleeps in poll(2)
//! still finds a re-created interface. While it is down, frames arriving
//! bring the next check forward (they flow only once the interface works
//! again), and the check reads the carrier from the driver
//! (`ETHTOOL_GLINK`), not the `IFF_RUNNING` flag, which the kernel's link
//! watcher may raise a second after a re-created veth carries frames.
//!
//! Kernel behaviour this relies on (net/packet/af_packet.c,
//! `packet_notifier`): when the bound interface goes down the socket's
//! protocol hook is removed and `sk_err` set to `ENETDOWN` (poll(2) reports
//! `POLLERR` until it is read); when it comes up with the same index the
//! hook is added back by itself; when it is unregistered the socket's
//! index becomes -1 (sends fail with `ENXIO`) and its multicast memberships
//! on it are dropped, so the socket must be bound again.

use std::io;
use std::time::{Duration, Instant};

/// While a link is down: how often it checks whether its interface is back.
pub const DOWN_RECHECK: Duration = Duration::from_millis(100);

/// While a link works: how often it looks for a pending socket error.
pub const UP_CHECK: Duration = Duration::from_secs(1);

/// Shortest time between two checks caused by `ENOBUFS` (a full queue is
/// usually load, not an outage; only with `PACKET_QDISC_BYPASS` does a lost
/// carrier show as `ENOBUFS`).
pub const PRESSURE_RECHECK: Duration = Duration::from_millis(10);

/// Whether `e`, from sending or receiving on a link, means an outage of the
/// interface or of the path (not a broken socket): `ENETDOWN` (interface
/// down), `ENXIO` and `ENODEV` (interface deleted: the packet socket lost
/// its binding), `EMSGSIZE` (the MTU was lowered under the frames the
/// runtime builds), `ENETUNREACH`, `EHOSTUNREACH`, `EHOSTDOWN`,
/// `ECONNREFUSED` (a UDP link's route or peer went away).
pub fn is_outage(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENETDOWN
                | libc::ENXIO
                | libc::ENODEV
                | libc::EMSGSIZE
                | libc::ENETUNREACH
                | libc::EHOSTUNREACH
                | libc::EHOSTDOWN
                | libc::ECONNREFUSED
        )
    )
}

/// Counters of a link's outages, since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutageStats {
    /// Outages seen: a send or receive failed with an outage error
    /// ([`is_outage`]), the socket reported a pending error, or a check
    /// found the interface down, without carrier, or gone.
    pub outages: u64,
    /// Outages that ended: a check found the interface up and running.
    pub recoveries: u64,
    /// Times the socket was bound again to an interface re-created under
    /// the same name (a new index).
    pub rebinds: u64,
    /// MTU changes of the interface seen by a check (the runtime keeps the
    /// frame size it was opened with; frames larger than a lowered MTU are
    /// not sent until it is restored).
    pub mtu_changes: u64,
    /// Time spent down, in microseconds (outages that ended; the current
    /// one is in `down_now_us`).
    pub down_us: u64,
    /// Length of the current outage in microseconds at the last check (0
    /// while up).
    pub down_now_us: u64,
    /// Whether the link is down now (as of its last check).
    pub down: bool,
}

/// What a check changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing: up before and after, or still down.
    None,
    /// The link went down.
    Down,
    /// The link came back after being down this long.
    Up(Duration),
}

/// The outage state of one link (no I/O: the link reports errors and the
/// result of each check; this says when to check next and keeps the
/// counters). See the module documentation.
#[derive(Debug, Clone)]
pub struct Health {
    /// Evidence of an outage since the last check: check at once.
    suspect: bool,
    down_since: Option<Instant>,
    last_check: Instant,
    stats: OutageStats,
}

impl Health {
    /// A link that works, last checked at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            suspect: false,
            down_since: None,
            last_check: now,
            stats: OutageStats::default(),
        }
    }

    /// A send or receive failed with an outage error, or the descriptor
    /// reported one: the next check is due at once (while the link is known
    /// down, the next periodic recheck is soon enough). Returns true when
    /// this is the first evidence since the last check (for a log line).
    pub fn on_error(&mut self) -> bool {
        if self.down_since.is_some() {
            // Known down: the periodic recheck looks again.
            return false;
        }
        let news = !self.suspect;
        self.suspect = true;
        news
    }

    /// A send found the queue full (`ENOBUFS`) at `now`: a check is due
    /// unless one ran within [`PRESSURE_RECHECK`].
    pub fn on_pressure(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_check) >= PRESSURE_RECHECK {
            self.suspect = true;
        }
    }

    /// Frames arrived at `now` while the link counts as down: evidence
    /// that it works again, so a check is due unless one ran within
    /// [`PRESSURE_RECHECK`] (frames flow only once the interface is up
    /// with a carrier: the check confirms it and counts the recovery
    /// before the frames' data is read).
    pub fn on_rx(&mut self, now: Instant) {
        if self.down_since.is_some()
            && now.saturating_duration_since(self.last_check) >= PRESSURE_RECHECK
        {
            self.suspect = true;
        }
    }

    /// When the link must check next: at once after evidence of an
    /// outage, every [`DOWN_RECHECK`] while down, every [`UP_CHECK`] while
    /// up.
    pub fn poll_at(&self) -> Instant {
        if self.suspect {
            self.last_check
        } else if self.down_since.is_some() {
            self.last_check + DOWN_RECHECK
        } else {
            self.last_check + UP_CHECK
        }
    }

    /// Whether a check is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.poll_at() <= now
    }

    /// Whether the last check only needs the cheap part (no evidence, not
    /// down): a look at the socket's pending error.
    pub fn quiet(&self) -> bool {
        !self.suspect && self.down_since.is_none()
    }

    /// Whether the link is down (as of its last check).
    pub fn is_down(&self) -> bool {
        self.down_since.is_some()
    }

    /// The result of a check at `now`: whether the interface works.
    pub fn checked(&mut self, now: Instant, up: bool) -> Transition {
        let was_suspect = std::mem::replace(&mut self.suspect, false);
        self.last_check = now;
        match (self.down_since, up) {
            (None, true) => {
                if was_suspect {
                    // An error, but the interface works again already (a
                    // flap shorter than the check): an outage of no length.
                    self.stats.outages += 1;
                    self.stats.recoveries += 1;
                }
                Transition::None
            }
            (None, false) => {
                self.down_since = Some(now);
                self.stats.outages += 1;
                self.stats.down = true;
                self.stats.down_now_us = 0;
                Transition::Down
            }
            (Some(since), false) => {
                self.stats.down_now_us = micros(now.saturating_duration_since(since));
                Transition::None
            }
            (Some(since), true) => {
                let d = now.saturating_duration_since(since);
                self.down_since = None;
                self.stats.recoveries += 1;
                self.stats.down_us += micros(d);
                self.stats.down_now_us = 0;
                self.stats.down = false;
                Transition::Up(d)
            }
        }
    }

    /// A re-bind to a re-created interface.
    pub fn on_rebind(&mut self) {
        self.stats.rebinds += 1;
    }

    /// An MTU change.
    pub fn on_mtu_change(&mut self) {
        self.stats.mtu_changes += 1;
    }

    /// The counters.
    pub fn stats(&self) -> OutageStats {
        self.stats
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outage_errors_are_told_from_broken_sockets() {
        for e in [
            libc::ENETDOWN,
            libc::ENXIO,
            libc::ENODEV,
            libc::EMSGSIZE,
            libc::ENETUNREACH,
            libc::EHOSTUNREACH,
            libc::ECONNREFUSED,
        ] {
            assert!(is_outage(&io::Error::from_raw_os_error(e)), "{e}");
        }
        for e in [libc::EBADF, libc::EFAULT, libc::EAGAIN, libc::ENOBUFS] {
            assert!(!is_outage(&io::Error::from_raw_os_error(e)), "{e}");
        }
        assert!(!is_outage(&io::ErrorKind::WouldBlock.into()));
    }

    #[test]
    fn an_outage_is_checked_at_once_then_periodically_until_it_ends() {
        let t0 = Instant::now();
        let mut h = Health::new(t0);
        assert_eq!(h.poll_at(), t0 + UP_CHECK);
        assert!(h.quiet());
        assert!(h.on_error(), "first evidence is news");
        assert!(!h.on_error(), "the second is not");
        assert!(h.due(t0), "due at once");
        let t1 = t0 + Duration::from_millis(5);
        assert_eq!(h.checked(t1, false), Transition::Down);
        assert!(h.is_down() && h.stats().down);
        assert_eq!(h.poll_at(), t1 + DOWN_RECHECK);
        // Errors while known down wait for the periodic recheck.
        assert!(!h.on_error());
        assert!(!h.due(t1 + DOWN_RECHECK / 2));
        let t2 = t1 + DOWN_RECHECK;
        assert_eq!(h.checked(t2, false), Transition::None);
        assert_eq!(h.stats().down_now_us, 100_000);
        let t3 = t2 + Duration::from_secs(3);
        assert_eq!(h.checked(t3, true), Transition::Up(t3 - t1));
        let s = h.stats();
        assert_eq!((s.outages, s.recoveries, s.down), (1, 1, false));
        assert_eq!(s.down_us, (t3 - t1).as_micros() as u64);
        assert_eq!(h.poll_at(), t3 + UP_CHECK);
    }

    #[test]
    fn an_error_on_a_working_interface_counts_a_blip() {
        let t0 = Instant::now();
        let mut h = Health::new(t0);
        h.on_error();
        assert_eq!(h.checked(t0, true), Transition::None);
        let s = h.stats();
        assert_eq!((s.outages, s.recoveries, s.down_us), (1, 1, 0));
        // A check without evidence counts nothing.
        assert_eq!(h.checked(t0 + UP_CHECK, true), Transition::None);
        assert_eq!(h.stats().outages, 1);
    }

    #[test]
    fn frames_while_down_bring_the_next_check_forward() {
        let t0 = Instant::now();
        let mut h = Health::new(t0);
        h.on_rx(t0 + PRESSURE_RECHECK);
        assert!(h.quiet(), "frames on a working link are no news");
        h.on_error();
        assert_eq!(h.checked(t0, false), Transition::Down);
        assert_eq!(h.poll_at(), t0 + DOWN_RECHECK);
        h.on_rx(t0 + Duration::from_millis(1));
        assert_eq!(h.poll_at(), t0 + DOWN_RECHECK, "a check ran just now");
        let t1 = t0 + PRESSURE_RECHECK;
        h.on_rx(t1);
        assert!(h.due(t1), "due at once");
        assert_eq!(h.checked(t1, true), Transition::Up(t1 - t0));
    }

    #[test]
    fn pressure_checks_at_most_every_pressure_recheck() {
        let t0 = Instant::now();
        let mut h = Health::new(t0);
        h.on_pressure(t0 + Duration::from_millis(1));
        assert!(h.quiet(), "a check ran just now");
        h.on_pressure(t0 + PRESSURE_RECHECK);
        assert!(!h.quiet());
        assert!(h.due(t0 + PRESSURE_RECHECK));
    }
}
