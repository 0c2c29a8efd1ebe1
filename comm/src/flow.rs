//! User-level flow control and connection control (ULFC), sans-IO: the
//! receiver's grants ([`Grants`]) and the sender's window and peer state
//! ([`SendWindow`], [`PeerState`]).
//!
//! Source: the flow-control library paper
//! (`udp-library-user-level-flow-control-ja.txt` §3.2, L157–163) as read in
//! `notes-mak-ulfc.md` "ULFC": each receiver has a receive budget `B` (the
//! paper's `SO_RCVBUF`) and grants each peer `p` a window `w_p` with
//! `Σ_p w_p <= B`; grants are sent at connection setup and when a request
//! changes them, never per packet; a sender never has more than `w_p` bytes
//! unconfirmed toward `p`.
//!
//! Enforcement (beyond the paper, which does not say how a window is
//! lowered safely): the receiver keeps per peer the window last granted
//! (`granted`) and the window the peer may still be using (`reserved`,
//! `>= granted`). Raising a grant reserves the new window at once, and only
//! from the unreserved part of the budget. Lowering a grant keeps the old
//! reservation until the peer answers `APPLIED` for that grant (it sends it
//! once its unconfirmed bytes are within the new window), so the freed share
//! is given to others only when it is really free. Hence
//! `Σ_p reserved_p <= B` always, and every sender's unconfirmed bytes toward
//! us are within its reservation: the bytes in flight toward a receiver
//! never exceed its budget. [`Grants::reserved_total`] exposes the sum for
//! tests.
//!
//! Departures from the paper: windows are in bytes (of comm fragments,
//! header included); "acknowledged" means confirmed by the receiver's CTP
//! endpoint (CTP confirms every packet at once, spec "Confirmations"), not
//! the paper's ACK; before its first grant a sender uses the default share
//! `B / (N - 1)` that every receiver reserves for every peer from the start
//! (an implicit grant 0), so first contact costs no round trip — all ranks
//! must therefore use the same `recv_budget_bytes`; a peer that disconnects
//! explicitly keeps its reservation (its share is not given to others), so
//! its reconnect needs no shrinking of the others.
//!
//! Departure for `rapid` (response priority): the paper makes the rapid
//! peer's window small and its ACKs frequent. CTP already confirms every
//! packet at once, and the rapid peer's own window does not decide how long
//! its message waits at the receiver: the bytes of the *other* peers queued
//! ahead of it do. So while some peer is rapid, every other peer's window
//! is capped at the rapid window as well (the rest of the budget stays
//! unused): a rapid peer's message waits behind at most
//! `(N - 2) x rapid_window_bytes`, instead of up to the whole budget. Bulk
//! senders pay for it in throughput while the rapid peer keeps its mode.

/// A peer's priority at the receiver (the paper's `through` / `rapid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// An equal share of the receive budget.
    #[default]
    Normal,
    /// The largest window the receiver can give (throughput priority).
    Through,
    /// A small window (response priority; `CommConfig::rapid_window_bytes`).
    Rapid,
}

/// Smallest window granted, bytes: one fragment of 4072 payload bytes plus
/// the 24-byte comm header. `recv_budget_bytes / (size - 1)` must be at
/// least this.
pub const MIN_WINDOW_BYTES: u64 = 4096;

/// A peer's connection state as this rank sees it (the paper's
/// `datagram_state`, fig. 5 as reconstructed in the notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerState {
    /// Nothing sent to the peer yet (connection is lazy, thesis ch. 6).
    Unconnected,
    /// `CONNECT` sent, no grant received yet (data already flows in the
    /// default share).
    Connecting,
    /// The peer granted us a window.
    Connected,
    /// `disconnect` was called: writes fail until `reconnect`.
    ExplicitDisconnect,
    /// CTP reported a message to the peer not confirmed; ends by itself
    /// when the peer answers again (a confirmation or a message from it).
    ImplicitDisconnect,
    /// Declared failed (no answer to probes within
    /// `CommConfig::failure_timeout`, an `EXPEL`, or CTP refused a
    /// fragment): writes to it and receives naming it fail; ends only when
    /// a new process at its address announces itself (a restarted rank
    /// rejoins; `liveness.rs`).
    Failed,
}

#[derive(Debug, Clone)]
struct GrantPeer {
    mode: Mode,
    target: u64,
    granted: u64,
    reserved: u64,
    /// Number of the last grant sent (0: the implicit default grant).
    seq: u64,
    /// The peer disconnected explicitly: no grants until its CONNECT.
    suspended: bool,
    /// A grant waits to be sent.
    dirty: bool,
    /// Removed from the peer table (or this process itself): no share.
    gone: bool,
}

/// The receiving side of ULFC: the budget and the window granted to each
/// peer. See the module documentation.
#[derive(Debug, Clone)]
pub struct Grants {
    me: usize,
    budget: u64,
    rapid: u64,
    peers: Vec<GrantPeer>,
    /// A table that grows at run time ([`Grants::dynamic`]): the default
    /// share kept unreserved for each peer that may still join (`budget /
    /// share` peers at most), so a first contact always finds its window
    /// however much the active peers were granted. 0 for a fixed table.
    join_share: u64,
}

impl Grants {
    /// Grants of rank `me` among `size` ranks with a budget of `budget`
    /// bytes; rapid peers get `rapid` bytes (at least [`MIN_WINDOW_BYTES`]).
    /// Every other rank starts with the default share `budget / (size - 1)`.
    ///
    /// Errors: the share is below [`MIN_WINDOW_BYTES`] (the text says what
    /// to raise).
    pub fn new(me: usize, size: usize, budget: u64, rapid: u64) -> Result<Self, String> {
        let share = Self::default_share(size, budget);
        if size > 1 && share < MIN_WINDOW_BYTES {
            return Err(format!(
                "receive budget of {budget} bytes gives each of {} peers {share} bytes, less than the {MIN_WINDOW_BYTES}-byte minimum window: raise CommConfig::recv_budget_bytes",
                size - 1
            ));
        }
        let peers = (0..size)
            .map(|p| {
                let w = if p == me { 0 } else { share };
                GrantPeer {
                    mode: Mode::Normal,
                    target: w,
                    granted: w,
                    reserved: w,
                    seq: 0,
                    suspended: false,
                    dirty: false,
                    gone: false,
                }
            })
            .collect();
        Ok(Self {
            me,
            budget,
            rapid: rapid.max(MIN_WINDOW_BYTES),
            peers,
            join_share: 0,
        })
    }

    /// Grants of an endpoint whose peers join at run time
    /// ([`Grants::add_peer`]): each starts with `share` bytes reserved
    /// (every process must use the same), as long as the budget has room.
    ///
    /// Errors: `share` below [`MIN_WINDOW_BYTES`] or above the budget.
    pub fn dynamic(budget: u64, rapid: u64, share: u64) -> Result<Self, String> {
        if share < MIN_WINDOW_BYTES || share > budget {
            return Err(format!(
                "a default window of {share} bytes must be at least {MIN_WINDOW_BYTES} and at most the receive budget of {budget} bytes: raise CommConfig::recv_budget_bytes or lower the peer count"
            ));
        }
        Ok(Self {
            me: usize::MAX,
            budget,
            rapid: rapid.max(MIN_WINDOW_BYTES),
            peers: Vec::new(),
            join_share: share,
        })
    }

    /// Adds the next peer (index `peers.len()`): reserves the default
    /// `share` for it, or nothing for this process itself (`is_self`).
    ///
    /// Errors: the budget has less than `share` unreserved.
    pub fn add_peer(&mut self, share: u64, is_self: bool) -> Result<(), String> {
        let w = if is_self { 0 } else { share };
        let free = self.budget - self.reserved_total();
        if w > free {
            return Err(format!(
                "receive budget of {} bytes has {free} bytes unreserved, less than the {share}-byte default window of a new peer: raise CommConfig::recv_budget_bytes (every process alike)",
                self.budget
            ));
        }
        if is_self {
            self.me = self.peers.len();
        }
        self.peers.push(GrantPeer {
            mode: Mode::Normal,
            target: w,
            granted: w,
            reserved: w,
            seq: 0,
            suspended: false,
            dirty: false,
            gone: is_self,
        });
        Ok(())
    }

    /// `peer` left the peer table: its reservation returns to the budget
    /// (its last unconfirmed bytes may still arrive: a departure from the
    /// invariant for the time of one resend timeout, counted against no
    /// one).
    pub fn remove_peer(&mut self, peer: usize) {
        let p = &mut self.peers[peer];
        *p = GrantPeer {
            gone: true,
            suspended: true,
            target: 0,
            granted: 0,
            reserved: 0,
            dirty: false,
            ..p.clone()
        };
        self.rebalance();
    }

    /// The window every receiver grants every peer until told otherwise,
    /// bytes.
    pub fn default_share(size: usize, budget: u64) -> u64 {
        budget / (size.max(2) as u64 - 1)
    }

    /// The budget, bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Sum of the reservations, bytes: never above [`Grants::budget`].
    pub fn reserved_total(&self) -> u64 {
        self.peers.iter().map(|p| p.reserved).sum()
    }

    /// The window last granted to `peer`, bytes.
    pub fn granted(&self, peer: usize) -> u64 {
        self.peers[peer].granted
    }

    /// The bytes `peer` may have unconfirmed toward us (its reservation).
    pub fn reserved(&self, peer: usize) -> u64 {
        self.peers[peer].reserved
    }

    /// `peer` made contact (CONNECT): it is no longer suspended and gets a
    /// grant.
    pub fn on_connect(&mut self, peer: usize) {
        let p = &mut self.peers[peer];
        p.suspended = false;
        p.dirty = true;
        self.rebalance();
    }

    /// `peer` disconnected explicitly: no grants to it until CONNECT; its
    /// reservation stays (see the module documentation).
    pub fn on_disconnect(&mut self, peer: usize) {
        self.peers[peer].suspended = true;
        self.rebalance();
    }

    /// `peer` asked for priority `mode`.
    pub fn on_request(&mut self, peer: usize, mode: Mode) {
        self.peers[peer].mode = mode;
        self.rebalance();
    }

    /// `peer` applied grant `seq`: if it is the latest, its reservation
    /// falls to the grant.
    pub fn on_applied(&mut self, peer: usize, seq: u64) {
        let p = &mut self.peers[peer];
        if seq == p.seq && p.reserved > p.granted {
            p.reserved = p.granted;
            self.rebalance();
        }
    }

    /// True if grants wait to be sent.
    pub fn has_grants(&self) -> bool {
        self.peers.iter().any(|p| p.dirty && !p.suspended)
    }

    /// The grants to send now: (peer, grant number, window in bytes).
    pub fn take_grants(&mut self) -> Vec<(usize, u64, u64)> {
        let mut out = Vec::new();
        for (i, p) in self.peers.iter_mut().enumerate() {
            if p.dirty && !p.suspended {
                p.dirty = false;
                p.seq += 1;
                out.push((i, p.seq, p.granted));
            }
        }
        out
    }

    /// The windows the modes ask for; their sum is at most the budget.
    fn targets(&self) -> Vec<u64> {
        let mut t = vec![0; self.peers.len()];
        let mut rest = self.budget;
        if let Some(slots) = self.budget.checked_div(self.join_share) {
            // Room for the peers that may still join (a dynamic table).
            let joined = self
                .peers
                .iter()
                .enumerate()
                .filter(|&(i, p)| i != self.me && !p.gone)
                .count() as u64;
            rest -= slots.saturating_sub(joined) * self.join_share;
        }
        let mut active = Vec::new();
        for (i, p) in self.peers.iter().enumerate() {
            if i == self.me || p.gone {
                continue;
            }
            if p.suspended {
                // Frozen: its share stays its own.
                t[i] = p.granted;
                rest = rest.saturating_sub(p.granted);
            } else {
                active.push(i);
            }
        }
        if active.is_empty() {
            return t;
        }
        let n = active.len() as u64;
        let rapid = self.rapid.min(rest / n);
        let count = |m| active.iter().filter(|&&i| self.peers[i].mode == m).count() as u64;
        let (nr, nt) = (count(Mode::Rapid), count(Mode::Through));
        let nn = n - nr - nt;
        rest -= nr * rapid;
        let normal_if_through = MIN_WINDOW_BYTES.min(rest / n);
        let (mut normal, mut through) = match (rest - nn * normal_if_through).checked_div(nt) {
            Some(through) => (normal_if_through, through),
            None => (rest / nn.max(1), 0),
        };
        if nr > 0 {
            // Response priority (see the module documentation).
            normal = normal.min(rapid);
            through = through.min(rapid);
        }
        for &i in &active {
            t[i] = match self.peers[i].mode {
                Mode::Normal => normal,
                Mode::Through => through,
                Mode::Rapid => rapid,
            };
        }
        t
    }

    /// Moves grants toward the targets without breaking the invariant:
    /// lowers at once (the reservation stays until APPLIED), raises from the
    /// free part of the budget only.
    fn rebalance(&mut self) {
        let t = self.targets();
        for (i, (p, &target)) in self.peers.iter_mut().zip(&t).enumerate() {
            p.target = target;
            if target < p.granted && !p.suspended {
                tracing::debug!(
                    peer = i,
                    from = p.granted,
                    to = target,
                    "comm: lowering a grant"
                );
                p.granted = target;
                p.dirty = true;
            }
        }
        let mut free = self.budget - self.reserved_total();
        for p in self.peers.iter_mut() {
            if p.suspended || p.target <= p.granted {
                continue;
            }
            let new = p.target.min(p.reserved + free);
            if new > p.granted {
                free -= new.saturating_sub(p.reserved);
                p.reserved = p.reserved.max(new);
                p.granted = new;
                p.dirty = true;
            }
        }
        debug_assert!(self.reserved_total() <= self.budget);
    }
}

/// The sending side of ULFC toward one peer: the window it granted us, our
/// unconfirmed bytes, and the connection state.
#[derive(Debug, Clone)]
pub struct SendWindow {
    /// The window, bytes (the peer's last grant, or the default share).
    pub window: u64,
    /// Our bytes handed to CTP toward the peer and not yet confirmed.
    pub in_flight: u64,
    grant_seq: u64,
    apply_pending: Option<u64>,
    contacted: bool,
    granted_once: bool,
    /// `disconnect` was called.
    pub explicit: bool,
    /// Why the peer is implicitly disconnected (CTP's error).
    pub implicit: Option<String>,
}

impl SendWindow {
    /// A window of `initial` bytes (the default share).
    pub fn new(initial: u64) -> Self {
        Self {
            window: initial,
            in_flight: 0,
            grant_seq: 0,
            apply_pending: None,
            contacted: false,
            granted_once: false,
            explicit: false,
            implicit: None,
        }
    }

    /// The state (explicit wins over implicit, notes fig. 5).
    pub fn state(&self) -> PeerState {
        if self.explicit {
            PeerState::ExplicitDisconnect
        } else if self.implicit.is_some() {
            PeerState::ImplicitDisconnect
        } else if self.granted_once {
            PeerState::Connected
        } else if self.contacted {
            PeerState::Connecting
        } else {
            PeerState::Unconnected
        }
    }

    /// First contact: true the first time (send CONNECT).
    pub fn contact(&mut self) -> bool {
        !std::mem::replace(&mut self.contacted, true)
    }

    /// Room for `bytes` more unconfirmed bytes (never while explicitly
    /// disconnected).
    pub fn fits(&self, bytes: u64) -> bool {
        !self.explicit && self.in_flight + bytes <= self.window
    }

    /// The largest fragment (header included) the window takes, bytes.
    pub fn free(&self) -> u64 {
        if self.explicit {
            0
        } else {
            self.window.saturating_sub(self.in_flight)
        }
    }

    /// Grant `seq` of `window` bytes arrived; returns the grant to answer
    /// `APPLIED` for now (later by [`SendWindow::release`] if more is
    /// unconfirmed than the new window). A grant older than the last is
    /// ignored (CTP may reorder).
    pub fn on_grant(&mut self, seq: u64, window: u64) -> Option<u64> {
        if seq <= self.grant_seq {
            return None;
        }
        self.grant_seq = seq;
        self.granted_once = true;
        if window != self.window {
            tracing::debug!(from = self.window, to = window, seq, "comm: window changed");
        }
        self.window = window;
        self.apply_pending = Some(seq);
        self.check_applied()
    }

    /// `bytes` were handed to CTP.
    pub fn sent(&mut self, bytes: u64) {
        self.in_flight += bytes;
    }

    /// `bytes` were confirmed; returns a grant to answer `APPLIED` for.
    pub fn release(&mut self, bytes: u64) -> Option<u64> {
        self.in_flight -= bytes;
        self.check_applied()
    }

    fn check_applied(&mut self) -> Option<u64> {
        if self.in_flight <= self.window {
            self.apply_pending.take()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step_all(g: &mut Grants, w: &mut [SendWindow]) {
        // Deliver grants, apply them with nothing in flight.
        loop {
            let out = g.take_grants();
            if out.is_empty() {
                return;
            }
            for (p, seq, win) in out {
                if let Some(s) = w[p].on_grant(seq, win) {
                    g.on_applied(p, s);
                }
                assert!(g.reserved_total() <= g.budget());
            }
        }
    }

    /// A dynamic table keeps the default share of every peer that may
    /// still join: the first peers' grants never take a newcomer's window.
    #[test]
    fn a_dynamic_table_keeps_room_for_the_peers_still_to_join() {
        let share = MIN_WINDOW_BYTES * 4;
        let mut g = Grants::dynamic(share * 3, MIN_WINDOW_BYTES, share).unwrap();
        g.add_peer(share, false).unwrap();
        g.on_connect(0);
        g.on_request(0, Mode::Through);
        let mut w = vec![SendWindow::new(share)];
        step_all(&mut g, &mut w);
        assert_eq!(g.granted(0), share, "two shares stay free for joiners");
        g.add_peer(share, false).unwrap();
        g.add_peer(share, false).unwrap();
        assert!(g.add_peer(share, false).is_err(), "three peers at most");
        assert_eq!(g.reserved_total(), g.budget());
    }

    #[test]
    fn through_takes_share_from_others_only_after_they_apply() {
        let mut g = Grants::new(0, 4, 3 << 20, 64 << 10).unwrap();
        assert_eq!(g.granted(1), 1 << 20);
        assert_eq!(g.reserved_total(), 3 << 20);
        let mut w: Vec<SendWindow> = (0..4).map(|_| SendWindow::new(1 << 20)).collect();
        // Peer 2 has its whole window unconfirmed.
        w[2].sent(1 << 20);
        g.on_request(1, Mode::Through);
        let out = g.take_grants();
        // Peers 2 and 3 are lowered; peer 1 cannot be raised yet.
        assert_eq!(
            out.iter().map(|o| (o.0, o.2)).collect::<Vec<_>>(),
            vec![(2, MIN_WINDOW_BYTES), (3, MIN_WINDOW_BYTES)]
        );
        assert_eq!(g.reserved_total(), 3 << 20);
        for (p, seq, win) in out {
            if let Some(s) = w[p].on_grant(seq, win) {
                g.on_applied(p, s);
            }
        }
        // 3 applied at once: its share goes to 1; 2 has not.
        let out = g.take_grants();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 1);
        assert_eq!(out[0].2, (2 << 20) - MIN_WINDOW_BYTES);
        assert!(g.reserved_total() <= g.budget());
        w[1].on_grant(out[0].1, out[0].2);
        // 2's bytes are confirmed: it applies, 1 gets the rest.
        let s = w[2].release(1 << 20).unwrap();
        g.on_applied(2, s);
        step_all(&mut g, &mut w);
        assert_eq!(w[1].window, (3 << 20) - 2 * MIN_WINDOW_BYTES);
        assert_eq!(g.reserved_total(), 3 << 20);
        // Back to normal: equal shares again.
        g.on_request(1, Mode::Normal);
        step_all(&mut g, &mut w);
        assert_eq!(
            (w[1].window, w[2].window, w[3].window),
            (1 << 20, 1 << 20, 1 << 20)
        );
    }

    #[test]
    fn rapid_lowers_the_windows_and_late_grants_are_ignored() {
        let mut g = Grants::new(1, 3, 1 << 20, 64 << 10).unwrap();
        let mut w: Vec<SendWindow> = (0..3).map(|_| SendWindow::new(512 << 10)).collect();
        g.on_request(0, Mode::Rapid);
        step_all(&mut g, &mut w);
        // The rapid peer and, while it is rapid, the others too.
        assert_eq!(w[0].window, 64 << 10);
        assert_eq!(w[2].window, 64 << 10);
        g.on_request(0, Mode::Normal);
        step_all(&mut g, &mut w);
        assert_eq!((w[0].window, w[2].window), (512 << 10, 512 << 10));
        g.on_request(0, Mode::Rapid);
        step_all(&mut g, &mut w);
        // A stale grant (number 1) after a newer one changes nothing.
        assert_eq!(w[0].on_grant(1, 1 << 20), None);
        assert_eq!(w[0].window, 64 << 10);
    }

    #[test]
    fn states_and_explicit_over_implicit() {
        let mut w = SendWindow::new(1000);
        assert_eq!(w.state(), PeerState::Unconnected);
        assert!(w.contact());
        assert!(!w.contact());
        assert_eq!(w.state(), PeerState::Connecting);
        w.on_grant(1, 5000);
        assert_eq!(w.state(), PeerState::Connected);
        w.implicit = Some("not confirmed".into());
        assert_eq!(w.state(), PeerState::ImplicitDisconnect);
        w.explicit = true;
        assert_eq!(w.state(), PeerState::ExplicitDisconnect);
        assert!(!w.fits(1));
        w.implicit = None;
        assert_eq!(w.state(), PeerState::ExplicitDisconnect);
        w.explicit = false;
        assert!(w.fits(5000) && !w.fits(5001));
    }

    #[test]
    fn a_budget_too_small_for_the_peers_is_refused() {
        let e = Grants::new(0, 10, 9 * MIN_WINDOW_BYTES - 1, 0).unwrap_err();
        assert!(e.contains("recv_budget_bytes"), "{e}");
        assert!(Grants::new(0, 10, 9 * MIN_WINDOW_BYTES, 0).is_ok());
    }
}
