//! The runtime's slot table: the slots (a socket each, with its demux key,
//! port lease, readiness, deadline and transmit mark), their generations
//! and free list, the timer queue, and the per-frame dispatch to a slot.
//! The Ethernet engine ([`crate::engine`]) owns one beside its link.

use std::collections::VecDeque;
use std::io;
use std::time::Instant;

use netcore::timer::TimerQueue;

use crate::ports::PortLease;
use link::eth::{EthernetFrame, EthernetRepr, MacAddr, ETH_HEADER_LEN};

use crate::auth::{FrameAuth, Refused, TagStatus};
use crate::demux::{Demux, DemuxKey};
use crate::port::{PortPacket, PORT_HEADER_LEN};
use crate::responder::Responder;
use crate::slot::SlotId;
use crate::socket::{ChildEvent, Cx, DirectRead, Ready, RxFrame, Socket, Spawn, Traits};
use crate::stats::EngineStats;
use crate::tx::TxQueue;

/// One slot of the runtime.
pub(crate) struct Slot {
    pub(crate) socket: Box<dyn Socket>,
    pub(crate) key: DemuxKey,
    pub(crate) generation: u32,
    /// Held for the slot's lifetime: the port's cross-process ownership.
    pub(crate) lease: Option<PortLease>,
    pub(crate) parent: Option<SlotId>,
    /// A user handle exists.
    pub(crate) handle: bool,
    /// Last readiness reported.
    pub(crate) ready: Ready,
    /// The socket's current deadline.
    pub(crate) deadline: Option<Instant>,
    /// The deadline entered in the timer queue (at most one live entry).
    pub(crate) queued_at: Option<Instant>,
    /// On the transmit list.
    pub(crate) dirty: bool,
    /// [`Socket::transmits`], read once at insertion.
    pub(crate) transmits: bool,
    /// [`Socket::timed`], read once at insertion.
    pub(crate) timed: bool,
}

/// Everything of the engine but the link, so a receive callback borrowing
/// the link can borrow this mutably.
pub(crate) struct State {
    pub(crate) mac: MacAddr,
    pub(crate) mtu: usize,
    /// Largest frame taken from the link, bytes (`Link::max_rx_frame`,
    /// trailer included).
    pub(crate) rx_max: usize,
    pub(crate) edp_ethertype: u16,
    pub(crate) esp_ethertype: u16,
    pub(crate) slots: Vec<Option<Slot>>,
    pub(crate) generations: Vec<u32>,
    pub(crate) free: Vec<u32>,
    pub(crate) demux: Demux,
    pub(crate) timers: TimerQueue<SlotId>,
    pub(crate) dirty: VecDeque<SlotId>,
    /// Slots polled by the transmit turn under way, settled once its
    /// frames are out (`EthEngine::transmit`); empty between turns.
    pub(crate) polled: Vec<SlotId>,
    pub(crate) changed: Vec<(SlotId, Ready)>,
    pub(crate) spawned: Vec<(SlotId, Spawn)>,
    pub(crate) tx: TxQueue,
    pub(crate) responder: Responder,
    pub(crate) stats: EngineStats,
    /// The kernel filter must be rebuilt (ports or roles changed).
    pub(crate) filter_stale: bool,
    /// Slots lingering after their handle was dropped.
    pub(crate) lingering: Vec<SlotId>,
    /// Frame authentication, when a cluster key is in force.
    pub(crate) auth: Option<FrameAuth>,
}

impl State {
    pub(crate) fn slot(&self, id: SlotId) -> Option<&Slot> {
        self.slots
            .get(id.index as usize)?
            .as_ref()
            .filter(|s| s.generation == id.generation)
    }

    pub(crate) fn slot_mut(&mut self, id: SlotId) -> Option<&mut Slot> {
        self.slots
            .get_mut(id.index as usize)?
            .as_mut()
            .filter(|s| s.generation == id.generation)
    }

    pub(crate) fn insert_slot(
        &mut self,
        key: DemuxKey,
        socket: Box<dyn Socket>,
        lease: Option<PortLease>,
        parent: Option<SlotId>,
        handle: bool,
    ) -> io::Result<SlotId> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.generations[index as usize];
        let id = SlotId { index, generation };
        if let Err(crate::demux::InsertError::Taken(_)) = self.demux.insert(key, id) {
            self.free.push(index);
            let (e, p) = key.local();
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("ethertype {e:#06x} port {p}: already bound in this process ({key:?})"),
            ));
        }
        let ready = socket.readiness();
        let Traits { transmits, timed } = socket.traits();
        self.slots[index as usize] = Some(Slot {
            transmits,
            timed,
            socket,
            key,
            generation,
            lease,
            parent,
            handle,
            ready,
            deadline: None,
            queued_at: None,
            dirty: false,
        });
        self.filter_stale = true;
        tracing::debug!(?key, ?id, "runtime: slot added");
        Ok(id)
    }

    /// Removes slot `id` (its route, its lease, its timers lazily).
    pub(crate) fn remove(&mut self, id: SlotId) {
        let Some(slot) = self.slots[id.index as usize].take() else {
            return;
        };
        self.demux.remove(slot.key, id);
        let g = &mut self.generations[id.index as usize];
        *g = g.wrapping_add(1);
        self.free.push(id.index);
        self.filter_stale = true;
        self.changed.push((id, Ready::ERROR));
        if let Some(p) = slot.parent {
            if let Some(ps) = self.slot_mut(p) {
                ps.socket.on_child(id, ChildEvent::Gone);
            }
        }
        tracing::debug!(key = ?slot.key, ?id, "runtime: slot removed");
    }

    /// Removes lingering slots that finished.
    pub(crate) fn reap(&mut self) {
        if self.lingering.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.lingering.len() {
            let id = self.lingering[i];
            match self.slot(id) {
                Some(s) if !s.socket.is_finished() => i += 1,
                Some(_) => {
                    self.lingering.swap_remove(i);
                    self.remove(id);
                }
                None => {
                    self.lingering.swap_remove(i);
                }
            }
        }
    }

    /// Hands one received frame to its slot (or the responder).
    pub(crate) fn dispatch(
        &mut self,
        now: Instant,
        frame: &[u8],
        direct: Option<(SlotId, &mut DirectRead<'_>)>,
    ) {
        // Ethernet header + the 6-byte port header EDP and ESP share, at
        // most the link's largest frame: parsed here once, handed down.
        if frame.len() < ETH_HEADER_LEN + PORT_HEADER_LEN || frame.len() > self.rx_max {
            self.stats.malformed += 1;
            return;
        }
        let eth = EthernetFrame::new_unchecked(frame);
        let ethertype = eth.ethertype();
        if ethertype != self.edp_ethertype && ethertype != self.esp_ethertype {
            self.stats.foreign += 1;
            return;
        }
        let (dst, src) = (eth.dst(), eth.src());
        if src == self.mac || src.is_group() {
            // Our own source address, or an impossible one: never answer.
            self.stats.bad_source += 1;
            return;
        }
        if dst != self.mac && !dst.is_group() {
            self.stats.foreign += 1;
            return;
        }
        // Authentication before anything looks at the frame's contents.
        let (frame, tag) = match self.auth.as_mut() {
            None => (frame, TagStatus::Off),
            Some(a) => match a.verifier.verify(frame, crate::auth::wall_ns()) {
                Ok(body) => (&frame[..body], TagStatus::Verified),
                // No valid tag at all: only an ESP socket that negotiated
                // for such frames may take it (checked below).
                Err(Refused::Short | Refused::BadTag) if ethertype == self.esp_ethertype => {
                    (frame, TagStatus::Unverified)
                }
                Err(why) => {
                    tracing::trace!(?why, %src, "runtime: frame failed authentication");
                    return;
                }
            },
        };
        let packet = &frame[ETH_HEADER_LEN..];
        let ports = PortPacket::new_unchecked(packet);
        let (src_port, dst_port) = (ports.src_port(), ports.dst_port());
        let found = self.demux.lookup(ethertype, dst_port, src, src_port);
        if tag == TagStatus::Unverified {
            let wanted = found
                .and_then(|id| self.slots[id.index as usize].as_ref())
                .is_some_and(|s| s.socket.accepts_unverified());
            if !wanted {
                tracing::trace!(%src, "runtime: frame failed authentication");
                return;
            }
            self.stats.auth_unverified_delivered += 1;
        }
        let Some(id) = found else {
            let answered = self.responder.on_unclaimed(
                now,
                frame,
                ethertype,
                self.mac,
                self.mtu,
                &self.demux,
                &mut self.tx,
            );
            if !answered {
                self.stats.unclaimed += 1;
            }
            if self.responder.take_filter_change() {
                self.filter_stale = true;
            }
            return;
        };
        let Some(slot) = self.slots[id.index as usize].as_mut() else {
            self.stats.unclaimed += 1;
            return;
        };
        let mut cx = Cx {
            now,
            mac: self.mac,
            mtu: self.mtu,
            slot: id,
            tag,
            spawned: &mut self.spawned,
        };
        let rx = RxFrame {
            eth: EthernetRepr {
                dst,
                src,
                ethertype,
            },
            src_port,
            dst_port,
            packet,
        };
        match direct {
            Some((d, buf)) if d == id => slot.socket.on_frame_direct(&mut cx, rx, buf),
            _ => slot.socket.on_frame(&mut cx, rx),
        }
        self.touch(id);
    }

    /// Inserts the slots spawned during the last calls.
    pub(crate) fn adopt_spawned(&mut self) {
        while let Some((parent, spawn)) = self.spawned.pop() {
            match self.insert_slot(spawn.key, spawn.socket, None, Some(parent), false) {
                Ok(id) => {
                    if let Some(p) = self.slot_mut(parent) {
                        p.socket.on_child(id, ChildEvent::Adopted);
                    }
                    self.touch(id);
                }
                Err(e) => {
                    self.stats.spawn_refused += 1;
                    tracing::debug!(error = %e, "runtime: spawned socket refused");
                }
            }
        }
    }

    /// After slot `id` changed: a place on the transmit list
    /// ([`State::mark`]), then readiness and deadline ([`State::settle`]).
    pub(crate) fn touch(&mut self, id: SlotId) {
        self.mark(id);
        self.settle(id);
    }

    /// Puts slot `id` on the transmit list when it has something to send
    /// ([`Socket::transmit_due`]).
    #[inline]
    pub(crate) fn mark(&mut self, id: SlotId) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        if !slot.dirty && slot.transmits && slot.socket.transmit_due() {
            slot.dirty = true;
            self.dirty.push_back(id);
        }
    }

    /// Re-reads slot `id`'s readiness (reported once per change, to its
    /// parent too) and deadline.
    pub(crate) fn settle(&mut self, id: SlotId) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        let r = slot.socket.readiness();
        let parent = slot.parent;
        let changed = r != slot.ready;
        let woke = slot.socket.take_wake();
        if changed {
            slot.ready = r;
        }
        if slot.timed {
            self.retime(id);
        }
        if woke && !changed {
            self.changed.push((id, r));
        }
        if changed {
            self.changed.push((id, r));
            if let Some(p) = parent {
                if let Some(ps) = self.slot_mut(p) {
                    ps.socket.on_child(id, ChildEvent::Ready(r));
                    let pr = ps.socket.readiness();
                    if pr != ps.ready {
                        ps.ready = pr;
                        self.changed.push((p, pr));
                    }
                }
            }
        }
    }

    /// Settles the slots the transmit turn polled (see `polled`): their
    /// deadlines moved, and their readiness may have (a stream whose unsent
    /// bytes went out is writable again).
    pub(crate) fn settle_polled(&mut self) {
        while let Some(id) = self.polled.pop() {
            self.settle(id);
        }
    }

    /// Re-reads the slot's deadline and queues it if it moved earlier.
    pub(crate) fn retime(&mut self, id: SlotId) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        let d = slot.socket.poll_timeout();
        slot.deadline = d;
        if let Some(d) = d {
            if slot.queued_at.is_none_or(|q| d < q) {
                slot.queued_at = Some(d);
                self.timers.push(d, id);
            }
        }
    }
}
