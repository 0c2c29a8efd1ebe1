//! The Ethernet engine of a runtime: one link, the demultiplexing table, the
//! slots, their timers and the transmit batch. No waiting and no threads
//! here (that is [`super::driver`]); every call does what is ready and
//! returns.
//!
//! Per turn ([`EthEngine::poll`]): receive one batch (the RX ring's ready
//! slots or one recvmmsg(2)), hand each frame borrowed in place to its slot,
//! fire due timers, then let every touched slot queue its frames and send
//! them with one sendmmsg(2) per 64 frames.

use std::any::Any;
use std::collections::VecDeque;
use std::io;
use std::time::Instant;

use netcore::timer::TimerQueue;

use crate::ports::PortLease;
use link::eth::MacAddr;
use link::Link;

use crate::auth::{FrameAuth, TagStatus, TRAILER_LEN};
use crate::demux::{Demux, DemuxKey};
use crate::driver::Engine;
use crate::filter::{FilterPlan, MAX_FILTER_PEERS};
use crate::responder::Responder;
use crate::slot::SlotId;
use crate::slots::State;
use crate::socket::{Cx, DirectRead, Ready, Socket};
use crate::stats::EngineStats;
use crate::tx::{self, Lost, TxQueue};
use link::is_outage;

/// Frames read per receive call.
pub const RX_BATCH: usize = 64;

/// Most frames a socket may queue per transmit batch while other sockets
/// also have frames waiting (round-robin fairness between streams).
const FAIR_SHARE: usize = 16;

/// The engine. See the module documentation.
pub struct EthEngine {
    pub(crate) link: Box<dyn Link>,
    pub(crate) st: State,
}

impl std::fmt::Debug for EthEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EthEngine")
            .field("mac", &self.st.mac)
            .field("mtu", &self.st.mtu)
            .field("slots", &(self.st.slots.len() - self.st.free.len()))
            .field("stats", &self.st.stats)
            .finish()
    }
}

impl EthEngine {
    /// An engine over `link`, for frames of the two ethertypes. `iface`
    /// names the interface for port leases (`None` for in-memory links,
    /// where ports are not leased).
    pub(crate) fn new(
        link: Box<dyn Link>,
        iface: Option<String>,
        edp_ethertype: u16,
        esp_ethertype: u16,
        auth: Option<FrameAuth>,
    ) -> Self {
        // The trailer of frame authentication comes out of the MTU.
        let mtu = link
            .mtu()
            .saturating_sub(if auth.is_some() { TRAILER_LEN } else { 0 });
        let st = State {
            mac: link.mac(),
            mtu,
            rx_max: link.max_rx_frame(),
            responder: Responder::new(iface, edp_ethertype, esp_ethertype),
            edp_ethertype,
            esp_ethertype,
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            demux: Demux::new(),
            timers: TimerQueue::new(),
            dirty: VecDeque::new(),
            polled: Vec::new(),
            changed: Vec::new(),
            spawned: Vec::new(),
            tx: TxQueue::new(link.max_frame()),
            stats: EngineStats::default(),
            filter_stale: true,
            lingering: Vec::new(),
            auth,
        };
        Self { link, st }
    }

    /// The link (for its fd, MAC, MTU, kernel counters).
    pub fn link(&self) -> &dyn Link {
        &*self.link
    }

    /// The link, mutably (fault reconfiguration, group membership).
    pub fn link_mut(&mut self) -> &mut dyn Link {
        &mut *self.link
    }

    /// Counters.
    pub fn stats(&self) -> EngineStats {
        let mut s = self.st.stats;
        s.link = self.link.outage_stats();
        s.responder = self.st.responder.stats();
        if let Some(a) = &self.st.auth {
            s.auth = a.verifier.stats();
        }
        s
    }

    /// Adds `socket` under `key`, holding `lease` for its lifetime.
    ///
    /// Errors: `AddrInUse` when the key is taken in this runtime.
    pub fn insert(
        &mut self,
        key: DemuxKey,
        socket: Box<dyn Socket>,
        lease: Option<PortLease>,
    ) -> io::Result<SlotId> {
        let id = self.st.insert_slot(key, socket, lease, None, true)?;
        self.st.touch(id);
        self.refresh_filter();
        Ok(id)
    }

    /// The socket of `id` as its concrete type.
    pub fn socket<S: Socket>(&self, id: SlotId) -> Option<&S> {
        let socket: &dyn Any = &*self.st.slot(id)?.socket;
        socket.downcast_ref()
    }

    /// The socket of `id` as its concrete type, mutably. Call
    /// [`EthEngine::touched`] after changing it.
    pub fn socket_mut<S: Socket>(&mut self, id: SlotId) -> Option<&mut S> {
        let socket: &mut dyn Any = &mut *self.st.slot_mut(id)?.socket;
        socket.downcast_mut()
    }

    /// The port lease slot `id` holds (a listener's, shared with the
    /// connections it accepts).
    pub fn lease_of(&self, id: SlotId) -> Option<PortLease> {
        self.st.slot(id)?.lease.clone()
    }

    /// A lease on `(ethertype, port)` held only by connection slots of this
    /// runtime (no socket holds the port key itself), to share with a new
    /// socket binding the port.
    pub fn reusable_lease(&self, ethertype: u16, port: u16) -> Option<PortLease> {
        if self
            .st
            .demux
            .get(DemuxKey::Port { ethertype, port })
            .is_some()
        {
            return None;
        }
        self.st.slots.iter().flatten().find_map(|s| {
            (s.key.local() == (ethertype, port))
                .then(|| s.lease.clone())
                .flatten()
        })
    }

    /// Whether `id` still exists.
    pub fn contains(&self, id: SlotId) -> bool {
        self.st.slot(id).is_some()
    }

    /// After a handle changed its socket (a send, a read that opened the
    /// window, a close): what the socket queued is sent, then its
    /// readiness and deadline are updated (after the send: off the path of
    /// the frame a write just queued).
    pub fn touched(&mut self, id: SlotId, now: Instant) -> io::Result<()> {
        self.st.mark(id);
        let r = self.transmit(now);
        self.st.settle(id);
        r
    }

    /// Re-reads the readiness and deadline of `id` after its handle took
    /// data out (no transmission).
    pub fn refresh(&mut self, id: SlotId) {
        self.st.settle(id);
    }

    /// Sends frames given as gathered pieces right away (a datagram
    /// socket's send from its caller's buffers); returns how many the link
    /// took (a short count when its queue filled).
    ///
    /// During a link outage the frames are counted
    /// ([`EngineStats::tx_unsent`]) and reported sent (a datagram service
    /// drops them, as a device without carrier does).
    ///
    /// Errors: those of the link's `send_batch_vectored` other than an
    /// outage's.
    pub fn send_now(&mut self, frames: &[&[std::io::IoSlice<'_>]]) -> io::Result<usize> {
        let r = match self.st.auth.as_mut() {
            None => self.link.send_batch_vectored(frames),
            Some(a) => {
                // Each frame gets its padding and trailer as two more pieces.
                let now_ns = crate::auth::wall_ns();
                let mut tails = Vec::with_capacity(frames.len());
                for f in frames {
                    let len: usize = f.iter().map(|p| p.len()).sum();
                    let pad = crate::auth::MIN_SEALED_BODY.saturating_sub(len);
                    let mut pieces: Vec<&[u8]> = f.iter().map(|p| &p[..]).collect();
                    pieces.push(&crate::auth::ZEROS[..pad]);
                    tails.push((pad, a.sealer.trailer(&pieces, now_ns)));
                }
                let sealed: Vec<Vec<std::io::IoSlice<'_>>> = frames
                    .iter()
                    .zip(&tails)
                    .map(|(f, (pad, t))| {
                        let mut v = f.to_vec();
                        v.push(std::io::IoSlice::new(&crate::auth::ZEROS[..*pad]));
                        v.push(std::io::IoSlice::new(t));
                        v
                    })
                    .collect();
                let refs: Vec<&[std::io::IoSlice<'_>]> = sealed.iter().map(|v| &v[..]).collect();
                self.link.send_batch_vectored(&refs)
            }
        };
        match r {
            Ok(n) => {
                self.st.stats.tx_frames += n as u64;
                Ok(n)
            }
            Err(e) => self.datagrams_unsent(frames.len(), e),
        }
    }

    /// A datagram send of `n` frames failed with `e`: during a link outage
    /// (an outage error, or a full queue while the link's check finds it
    /// down) the frames are counted in `tx_unsent` and reported sent, as
    /// kernel UDP counts a frame the device dropped instead of failing the
    /// call; any other error is returned.
    fn datagrams_unsent(&mut self, n: usize, e: io::Error) -> io::Result<usize> {
        let full = tx::is_transient(&e) && e.kind() != io::ErrorKind::InvalidInput;
        if !is_outage(&e) && !full {
            return Err(e);
        }
        // Let the link check its interface now if the error made that due.
        let now = link::time::now();
        if self.link.poll_at().is_some_and(|t| t <= now) {
            let _ = self.link.on_timeout(now);
        }
        if is_outage(&e) || self.link.outage_stats().down {
            self.st.stats.link_errors += 1;
            self.st.stats.tx_unsent += n as u64;
            return Ok(n);
        }
        Err(e)
    }

    /// The link's descriptor reported an error (`POLLERR`) at `now`: the
    /// link reads it and checks its interface ([`Link::on_error_event`]).
    pub fn on_link_error(&mut self, now: Instant) {
        self.st.stats.link_errors += 1;
        self.link.on_error_event(now);
    }

    /// The handle of `id` was dropped: the socket is removed, or lingers
    /// (keeps being driven) until it is finished.
    pub fn release(&mut self, id: SlotId, now: Instant) {
        let Some(slot) = self.st.slot_mut(id) else {
            return;
        };
        slot.handle = false;
        if slot.socket.on_handle_dropped(now) {
            self.st.remove(id);
            self.refresh_filter();
        } else {
            self.st.lingering.push(id);
            self.st.touch(id);
            let _ = self.transmit(now);
        }
    }

    /// Moves a spawned child to a new handle (a listener's `accept`).
    pub fn take_handle(&mut self, id: SlotId) -> bool {
        match self.st.slot_mut(id) {
            Some(s) if !s.handle => {
                s.handle = true;
                true
            }
            _ => false,
        }
    }

    /// Current readiness of `id` (ERROR when it no longer exists).
    pub fn readiness(&self, id: SlotId) -> Ready {
        self.st
            .slot(id)
            .map_or(Ready::ERROR, |s| s.socket.readiness())
    }

    /// One turn: receive a batch, fire due timers, transmit. `direct` offers
    /// a waiting reader's buffer to its slot. Returns how many frames were
    /// received.
    ///
    /// Errors: fatal link errors (not `WouldBlock`).
    pub fn poll(
        &mut self,
        now: Instant,
        mut direct: Option<(SlotId, &mut DirectRead<'_>)>,
    ) -> io::Result<usize> {
        let st = &mut self.st;
        let got = match self.link.recv_with(RX_BATCH, &mut |frame| {
            st.dispatch(now, frame, direct.as_mut().map(|(i, d)| (*i, &mut **d)))
        }) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            Err(e) if is_outage(&e) => {
                // The interface went down or away: the link checks it
                // (its `poll_at` is due now); the sockets wait it out.
                self.st.stats.link_errors += 1;
                0
            }
            Err(e) => {
                self.st.stats.recv_errors += 1;
                return Err(e);
            }
        };
        self.st.stats.rx_frames += got as u64;
        if !self.st.spawned.is_empty() {
            self.st.adopt_spawned();
        }
        if self.timers_due(now) {
            self.fire_timers(now);
        }
        if self.st.filter_stale {
            self.refresh_filter();
        }
        self.transmit(now)?;
        Ok(got)
    }

    /// Whether [`EthEngine::fire_timers`] has anything to do at `now` (a
    /// slot timer, the responder's lease retry, the link's release time,
    /// a lingering slot to reap): a few loads, so a receive turn with no
    /// timer due costs no more.
    #[inline]
    fn timers_due(&self, now: Instant) -> bool {
        self.st.timers.peek().is_some_and(|t| t <= now)
            || self.st.responder.poll_timeout().is_some_and(|t| t <= now)
            || self.link.poll_at().is_some_and(|t| t <= now)
            || !self.st.lingering.is_empty()
    }

    /// Fires every slot timer due at `now` and the responder's.
    pub fn fire_timers(&mut self, now: Instant) {
        let (mac, mtu) = (self.st.mac, self.st.mtu);
        while let Some((at, id)) = self.st.timers.pop_due(now) {
            let st = &mut self.st;
            let Some(slot) = st
                .slots
                .get_mut(id.index as usize)
                .and_then(Option::as_mut)
                .filter(|s| s.generation == id.generation)
            else {
                continue;
            };
            if slot.queued_at != Some(at) {
                continue; // stale entry
            }
            slot.queued_at = None;
            match slot.deadline {
                Some(d) if d <= now => {
                    let mut cx = Cx {
                        now,
                        mac,
                        mtu,
                        slot: id,
                        tag: TagStatus::Off,
                        spawned: &mut st.spawned,
                    };
                    slot.socket.on_timeout(&mut cx);
                    st.touch(id);
                }
                Some(d) => {
                    // Moved later since it was queued: queue it again.
                    slot.queued_at = Some(d);
                    st.timers.push(d, id);
                }
                None => {}
            }
        }
        if self.st.responder.on_timeout(now) {
            self.st.filter_stale = true;
        }
        if self.link.poll_at().is_some_and(|t| t <= now) {
            if let Err(e) = self.link.on_timeout(now) {
                tracing::debug!(error = %e, "runtime: link refused released frames");
            }
        }
        self.st.reap();
        self.st.adopt_spawned();
    }

    /// The earliest instant the engine must run again (a slot timer, the
    /// responder's lease retry, a frame held back by fault injection). May
    /// be early (a deadline that moved later since): waking then is cheap.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        let State { slots, timers, .. } = &mut self.st;
        let t = timers.peek_live(|at, id| {
            slots
                .get(id.index as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.generation == id.generation && s.queued_at == Some(at))
        });
        netcore::time::earliest(
            netcore::time::earliest(t, self.st.responder.poll_timeout()),
            self.link.poll_at(),
        )
    }

    /// Before the caller waiting on `slot` sleeps in the kernel: the slot
    /// sends now what would otherwise wake it soon (a delayed ACK).
    pub fn before_sleep(&mut self, slot: Option<SlotId>, now: Instant) -> io::Result<()> {
        let Some(id) = slot else {
            return Ok(());
        };
        if let Some(s) = self.st.slot_mut(id) {
            s.socket.before_sleep(now);
            self.st.touch(id);
            self.transmit(now)?;
        }
        Ok(())
    }

    /// Calls `f` for every slot whose readiness changed since the last call.
    pub fn drain_changed(&mut self, f: &mut dyn FnMut(SlotId, Ready)) {
        for (id, r) in self.st.changed.drain(..) {
            f(id, r);
        }
    }

    /// Sends every frame the touched slots (and the responder) have ready.
    ///
    /// Errors: fatal link errors.
    pub fn transmit(&mut self, now: Instant) -> io::Result<()> {
        loop {
            let st = &mut self.st;
            // Answers the responder wrote while receiving are already queued.
            while !st.tx.is_full() {
                let Some(id) = st.dirty.pop_front() else {
                    break;
                };
                let Some(slot) = st.slots[id.index as usize].as_mut() else {
                    continue;
                };
                slot.dirty = false;
                let share = if st.dirty.is_empty() {
                    tx::MAX_BATCH
                } else {
                    FAIR_SHARE
                };
                st.tx.set_owner(Some(id));
                st.tx.set_limit(share);
                let mut cx = Cx {
                    now,
                    mac: st.mac,
                    mtu: st.mtu,
                    slot: id,
                    tag: TagStatus::Off,
                    spawned: &mut st.spawned,
                };
                slot.socket.poll_transmit(&mut cx, &mut st.tx);
                st.tx.set_limit(tx::MAX_BATCH);
                st.tx.set_owner(None);
                if slot.socket.wants_transmit() {
                    slot.dirty = true;
                    st.dirty.push_back(id);
                }
                // A send arms a retransmission timer, and can make room in a
                // send buffer (a writer waits for that): the slot is settled
                // once the batch is out, so the timer queue's work is not on
                // the path to the wire (`settle_polled`).
                st.polled.push(id);
            }
            let n = st.tx.len();
            if n == 0 {
                st.settle_polled();
                return Ok(());
            }
            let full = st.tx.is_full();
            let slots = &st.slots;
            let q = &st.tx;
            let gather = |i: usize| match q.frames[i].gather {
                Some((id, r)) => slots[id.index as usize]
                    .as_ref()
                    .map_or((&[][..], &[][..]), |s| s.socket.gather(r)),
                None => (&[][..], &[][..]),
            };
            if let Some(a) = st.auth.as_mut() {
                let now_ns = crate::auth::wall_ns();
                for i in 0..n {
                    let (x, y) = gather(i);
                    a.seal_pieces(i, [q.head(i), x, y], now_ns);
                }
            }
            let auth = &st.auth;
            let mut lost: Vec<(usize, Lost)> = Vec::new();
            let sent = tx::send_frames(
                n,
                |i| q.head(i),
                gather,
                |i| auth.as_ref().map_or((&[][..], &[][..]), |a| a.tail(i)),
                |frames| self.link.send_batch_vectored(frames),
                |i, why| lost.push((i, why)),
            );
            self.st.settle_polled();
            if lost.first().is_some_and(|(_, why)| *why == Lost::Outage)
                || lost.last().is_some_and(|(_, why)| *why == Lost::Outage)
            {
                self.st.stats.link_errors += 1;
            }
            for (i, why) in lost {
                match why {
                    Lost::Transient => self.st.stats.tx_lost += 1,
                    Lost::Outage => self.st.stats.tx_unsent += 1,
                }
                if let Some(owner) = self.st.tx.frames[i].owner {
                    if let Some(s) = self.st.slot_mut(owner) {
                        s.socket.on_send_failed();
                    }
                }
            }
            match sent {
                Ok(k) => self.st.stats.tx_frames += k as u64,
                Err(e) => {
                    self.st.stats.send_errors += 1;
                    self.st.tx.clear();
                    return Err(e);
                }
            }
            self.st.tx.clear();
            if !full && self.st.dirty.is_empty() {
                return Ok(());
            }
        }
    }

    /// Rebuilds and installs the kernel filter when ports or roles changed.
    pub fn refresh_filter(&mut self) {
        self.st.filter_stale = false;
        let esp = self.st.esp_ethertype;
        let mut esp_ports = self.st.demux.ports_of(esp);
        // While segments from strangers draw RSTs, every frame of a
        // connection's port must reach the responder; while they draw
        // none, the kernel keeps only the connections' peers.
        let esp_peer_ports: Vec<(u16, Vec<(MacAddr, u16)>)> =
            if self.st.responder.answers_own_ports() {
                Vec::new()
            } else {
                self.st.demux.peer_ports_of(esp, MAX_FILTER_PEERS)
            };
        esp_ports.retain(|p| esp_peer_ports.binary_search_by_key(p, |(q, _)| *q).is_err());
        let plan = FilterPlan {
            edp_ethertype: self.st.edp_ethertype,
            esp_ethertype: esp,
            edp_ports: self.st.demux.ports_of(self.st.edp_ethertype),
            esp_ports,
            esp_peer_ports,
            edp_control: self.st.responder.holds_edp(),
            esp_rst_any: self.st.responder.answers_esp(),
            esp_elsewhere: self.st.responder.esp_elsewhere().to_vec(),
        };
        let program = plan.program().or_else(|_| plan.without_peers().program());
        let installed = match program {
            Ok(prog) => self.link.set_filter(&prog),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidInput, e.to_string())),
        };
        if let Err(e) = installed {
            self.st.stats.filter_errors += 1;
            tracing::warn!(error = %e, "runtime: kernel filter not installed; frames are filtered in user space");
            // Accept everything of our ethertypes: user space still drops
            // foreign frames, only the kernel's early drop is lost.
            let _ = self.link.set_filter(&FilterPlan::accept_ethertypes(
                self.st.edp_ethertype,
                self.st.esp_ethertype,
            ));
        }
        self.st.stats.filter_updates += 1;
    }

    /// Ids of the slots that exist (for diagnostics and tests).
    pub fn slot_ids(&self) -> Vec<SlotId> {
        self.st
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.as_ref().map(|s| SlotId {
                    index: i as u32,
                    generation: s.generation,
                })
            })
            .collect()
    }

    /// Slots lingering (closing after their handle was dropped).
    pub fn lingering(&self) -> usize {
        self.st.lingering.len()
    }
}

/// The Ethernet runtime's engine as the driver sees it.
impl Engine for EthEngine {
    fn poll(
        &mut self,
        now: Instant,
        direct: Option<(SlotId, &mut DirectRead<'_>)>,
    ) -> io::Result<usize> {
        EthEngine::poll(self, now, direct)
    }
    fn on_deadline(&mut self, now: Instant) -> io::Result<()> {
        self.fire_timers(now);
        if self.st.filter_stale {
            self.refresh_filter();
        }
        self.transmit(now)
    }
    fn next_deadline(&mut self) -> Option<Instant> {
        EthEngine::next_deadline(self)
    }
    fn before_sleep(&mut self, slot: Option<SlotId>, now: Instant) -> io::Result<()> {
        EthEngine::before_sleep(self, slot, now)
    }
    fn rx_ready(&self) -> Option<bool> {
        self.link.rx_ready()
    }
    fn drain_changed(&mut self, f: &mut dyn FnMut(SlotId, Ready)) {
        EthEngine::drain_changed(self, f)
    }
    fn readiness(&self, slot: SlotId) -> Ready {
        EthEngine::readiness(self, slot)
    }
    fn has_lingering(&self) -> bool {
        self.lingering() > 0
    }
    fn on_link_error(&mut self, now: Instant) {
        EthEngine::on_link_error(self, now)
    }
}
