//! MAK over EDP: the MAK frame is the payload of an EDP datagram sent to
//! the group's MAC address (DATA, and MAK's NAKs) or to one member's
//! `(MAC, port)` (ACKs, iterative DATA, NAK-baseline NAKs). The member is a
//! slot of the process's runtime for the interface (`runtime`), keyed
//! by the group's EDP port, which every member binds; the runtime's packet
//! socket joins the group MAC (`PACKET_ADD_MEMBERSHIP`, so real NICs pass
//! the frames up). Frames arrive borrowed from the RX ring and leave in the
//! runtime's sendmmsg batches, the MAK frame written behind the EDP header
//! in the batch buffer.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use edp::wire::{EdpFrame, EdpRepr, EDP_HEADER_LEN};
use link::eth::EthernetRepr;
use link::{MacAddr, ETH_HEADER_LEN};
use runtime::protocol::{Cx, DemuxKey, Driver, EthEngine, Ready, RxFrame, SlotId, Socket, TxQueue};
use runtime::EthAddr;
use runtime::Runtime;

use super::core::GroupCore;
use super::{GroupSpec, MakConfig, MakSocket};
use crate::member::Dest;

/// Bytes in front of the MAK frame in an Ethernet frame.
const HEAD: usize = ETH_HEADER_LEN + EDP_HEADER_LEN;

/// The group MAC of group `group`: `03:4d:41:4b:hh:ll` ("MAK" after a first
/// octet with the group (0x01) and locally administered (0x02) bits set,
/// then the group id), so it never collides with a vendor's multicast
/// range.
pub fn group_mac(group: u16) -> MacAddr {
    let [h, l] = group.to_be_bytes();
    MacAddr([0x03, 0x4d, 0x41, 0x4b, h, l])
}

/// Where a group's frames go over EDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EdpGroup {
    /// The group MAC address (a multicast address; locally administered
    /// ones, first octet `0x03`, are the natural choice).
    pub mac: MacAddr,
    /// The EDP port every member binds.
    pub port: u16,
}

impl EdpGroup {
    /// Group `group` at its [`group_mac`] on EDP port `port`.
    pub fn new(group: u16, port: u16) -> Self {
        Self {
            mac: group_mac(group),
            port,
        }
    }
}

/// The member in its runtime slot.
pub(crate) struct MakSlot {
    pub core: GroupCore<EthAddr>,
    group: EdpGroup,
    ethertype: u16,
    /// Largest MAK frame.
    frame: usize,
    more: bool,
}

impl Socket for MakSlot {
    fn on_frame(&mut self, cx: &mut Cx<'_>, frame: RxFrame<'_>) {
        let f = match EdpFrame::with_eth(frame.eth, frame.packet) {
            Ok(f)
                if f.header.dst_port == self.group.port
                    && (f.eth.dst == cx.mac || f.eth.dst == self.group.mac) =>
            {
                f
            }
            _ => {
                self.core.stats.malformed += 1;
                return;
            }
        };
        self.core.on_frame(
            cx.now,
            EthAddr::new(f.eth.src, f.header.src_port),
            f.payload,
        );
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.core.handle_timeout(cx.now);
    }

    fn poll_transmit(&mut self, cx: &mut Cx<'_>, tx: &mut TxQueue) {
        self.more = false;
        loop {
            if tx.is_full() {
                self.more = self.core.wants_transmit();
                break;
            }
            let buf = tx.next_buf();
            let (head, body) = buf.split_at_mut(HEAD);
            let Some(t) = self.core.poll_transmit(cx.now, &mut body[..self.frame]) else {
                break;
            };
            let (mac, port) = match t.dest {
                Dest::Group => (self.group.mac, self.group.port),
                Dest::Member(a) => (a.mac, a.port),
            };
            EthernetRepr {
                dst: mac,
                src: cx.mac,
                ethertype: self.ethertype,
            }
            .emit(&mut head[..ETH_HEADER_LEN]);
            EdpRepr {
                src_port: self.group.port,
                dst_port: port,
                payload_len: t.len as u16,
            }
            .emit(&mut head[ETH_HEADER_LEN..]);
            tx.commit(HEAD + t.len, None);
        }
    }

    fn on_send_failed(&mut self) {
        // The frame is lost: the protocol recovers it (NAK, Tw).
        self.core.stats.send_blocked += 1;
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    fn readiness(&self) -> Ready {
        self.core.readiness()
    }

    fn wants_transmit(&self) -> bool {
        self.more
    }

    fn on_handle_dropped(&mut self, _now: Instant) -> bool {
        // Unacknowledged messages still complete, and due ACKs go out
        // (bounded: silent members are given up after K x Tw and
        // min_silence).
        self.is_finished()
    }

    fn is_finished(&self) -> bool {
        self.core.is_idle() && !self.core.wants_transmit()
    }
}

/// MAK over EDP: the member's slot in a runtime.
#[derive(Debug)]
pub struct EdpCarrier {
    rt: Runtime,
    slot: SlotId,
    group: EdpGroup,
}

impl EdpCarrier {
    /// The runtime the member lives in.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The group's MAC and port.
    pub fn group(&self) -> EdpGroup {
        self.group
    }
}

impl runtime::protocol::Carrier for EdpCarrier {
    type Addr = EthAddr;
    type Core = GroupCore<EthAddr>;
    type Engine = EthEngine;

    fn driver(&self) -> &Arc<Driver<EthEngine>> {
        self.rt.driver()
    }
    fn slot(&self) -> SlotId {
        self.slot
    }
    fn core(e: &mut EthEngine, slot: SlotId) -> Option<&mut GroupCore<EthAddr>> {
        e.socket_mut::<MakSlot>(slot).map(|s| &mut s.core)
    }
    fn core_ref(e: &EthEngine, slot: SlotId) -> Option<&GroupCore<EthAddr>> {
        e.socket::<MakSlot>(slot).map(|s| &s.core)
    }
    fn touched(e: &mut EthEngine, slot: SlotId, now: Instant) -> io::Result<()> {
        e.touched(slot, now)
    }
    fn local_name(&self) -> String {
        format!(
            "mak/edp {} {} group {} port {}",
            self.rt.iface().unwrap_or("(link)"),
            self.rt.mac(),
            self.group.mac,
            self.group.port
        )
    }
    fn release(&self) {
        self.rt.release(self.slot);
        // A lingering member (unacknowledged messages) keeps hearing the
        // group until the runtime closes; otherwise leave now.
        let lingering = self.rt.with_engine(|e, _| e.contains(self.slot));
        if !lingering {
            if let Err(e) = self.rt.leave_group(self.group.mac) {
                tracing::debug!(error = %e, group = %self.group.mac, "MAK: leaving the group MAC failed");
            }
        }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl MakSocket<EdpCarrier> {
    /// Joins `group` on interface `iface` as the member `spec` describes,
    /// in the process's runtime for the interface (`cfg.runtime`).
    ///
    /// Errors: those of `runtime::Runtime::shared` (EPERM names
    /// CAP_NET_RAW); those of [`MakSocket::bind_edp_on`].
    pub fn bind_edp(
        iface: &str,
        group: EdpGroup,
        spec: GroupSpec<EthAddr>,
        cfg: MakConfig,
    ) -> io::Result<Self> {
        let rt = Runtime::shared(iface, &cfg.runtime)?;
        Self::bind_edp_on(&rt, group, spec, cfg)
    }

    /// Joins `group` on an existing runtime (any link: a `SimLink` switch,
    /// a `UdpLink`, ...).
    ///
    /// Errors: `InvalidInput` for a group MAC that is not a multicast
    /// address, a member whose port is not the group's, this member's
    /// address not being the runtime's MAC, an invalid spec, protocol
    /// configuration or link fault; `AddrInUse` when the group's port is
    /// taken; errors joining the group MAC.
    pub fn bind_edp_on(
        rt: &Runtime,
        group: EdpGroup,
        spec: GroupSpec<EthAddr>,
        cfg: MakConfig,
    ) -> io::Result<Self> {
        if !group.mac.is_group() {
            return Err(invalid(format!(
                "MAK group address {} is not a multicast MAC (first octet bit 0x01; e.g. {})",
                group.mac,
                group_mac(spec.group.0)
            )));
        }
        spec.validate()?;
        for p in &spec.members {
            if p.addr.port != group.port {
                return Err(invalid(format!(
                    "MAK member {} ({}) is at EDP port {}, not the group's port {}: every member binds the group port",
                    p.id.0, p.name, p.addr.port, group.port
                )));
            }
        }
        let me = spec.me_peer().expect("validated");
        if me.addr.mac != rt.mac() {
            return Err(invalid(format!(
                "MAK member {} ({}) is listed at {}, but this interface's MAC is {}",
                me.id.0,
                me.name,
                me.addr.mac,
                rt.mac()
            )));
        }
        let mtu = rt.mtu();
        let where_ = format!("EDP on {}", rt.iface().unwrap_or("(link)"));
        let protocol = cfg.protocol_for(mtu.saturating_sub(EDP_HEADER_LEN), &where_)?;
        let core = GroupCore::new(
            &spec,
            &protocol,
            &where_,
            cfg.seed(),
            cfg.link_fault.as_ref(),
        )?;
        let ethertype = rt.edp_ethertype();
        let (port, lease) = rt.take_port(ethertype, group.port)?;
        rt.join_group(group.mac)?;
        let slot = MakSlot {
            core,
            group,
            ethertype,
            frame: protocol.mtu,
            more: false,
        };
        let id = match rt.insert(DemuxKey::Port { ethertype, port }, Box::new(slot), lease) {
            Ok(id) => id,
            Err(e) => {
                let _ = rt.leave_group(group.mac);
                return Err(e);
            }
        };
        tracing::debug!(group = spec.group.0, me = spec.me.0, mac = %group.mac, port, "MAK member joined over EDP");
        let carrier = EdpCarrier {
            rt: rt.clone(),
            slot: id,
            group,
        };
        Ok(MakSocket::wrap(carrier, &cfg))
    }
}
