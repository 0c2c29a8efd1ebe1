//! CTP over EDP: the CTP packet is the payload of an EDP datagram (ctp
//! PROTOCOL.md). The endpoint lives in a slot of the process's runtime for
//! the interface (`runtime`): frames are handed to it borrowed from the
//! RX ring, and its packets and confirmations leave in the runtime's
//! sendmmsg batches, the CTP header written straight behind the EDP header
//! in the batch buffer.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use edp::wire::{EdpFrame, EdpRepr, EDP_HEADER_LEN};
use link::eth::EthernetRepr;
use link::{MacAddr, ETH_HEADER_LEN};
use runtime::protocol::{
    Cx, DemuxKey, Driver, EthEngine, GatherRef, Ready, RxFrame, SlotId, Socket, TxQueue,
};
use runtime::EthAddr;
use runtime::Runtime;

use super::core::CtpCore;
use super::{Carrier, Transport};
use crate::endpoint::{PayloadRef, MAX_INLINE_LEN};
use crate::wire::{CONFIRM_BIT, CTP_HEADER_LEN};

/// Bytes in front of the CTP header in a frame.
const HEAD: usize = ETH_HEADER_LEN + EDP_HEADER_LEN;

/// A gathered payload's offset with this bit set lies in an offered
/// message's body (a pulled part), not in its stored data part.
const BODY_BIT: u64 = 1 << 63;

/// The bytes after the first CTP packet of an EDP payload, if they hold
/// another packet: at least a header whose packet size is not zero (zero
/// bytes are Ethernet padding of a short frame).
fn packed_after(payload: &[u8]) -> Option<&[u8]> {
    let size = usize::from(u16::from_le_bytes([*payload.first()?, *payload.get(1)?]));
    let rest = payload.get(size.max(CTP_HEADER_LEN)..)?;
    (rest.len() >= CTP_HEADER_LEN && rest[..2] != [0, 0]).then_some(rest)
}

/// The last packet of an EDP payload, if every packet in front of it is a
/// confirmation (the only packets sent in front of another; see
/// [`packed_after`]); `None` for a payload breaking that rule.
fn last_packet(payload: &[u8]) -> Option<&[u8]> {
    let mut p = payload;
    while let Some(rest) = packed_after(p) {
        if !is_confirmation(p) {
            return None;
        }
        p = rest;
    }
    Some(p)
}

/// Whether `p` starts with a confirmation header: packet size 25 and bit
/// 15 of the command set.
fn is_confirmation(p: &[u8]) -> bool {
    p.len() >= CTP_HEADER_LEN
        && u16::from_le_bytes([p[0], p[1]]) as usize == CTP_HEADER_LEN
        && u16::from_le_bytes([p[2], p[3]]) & CONFIRM_BIT != 0
}

/// The endpoint in its runtime slot.
pub(crate) struct CtpSlot {
    pub core: CtpCore<EthAddr>,
    port: u16,
    ethertype: u16,
    more: bool,
    /// Where `poll_transmit` has the endpoint write a packet's header (a
    /// pull's request carries its short body there too): kept, so a
    /// transmit pass does not zero 289 bytes first.
    hdr: [u8; MAX_INLINE_LEN],
    /// Frames for this port that failed to parse.
    pub malformed: u64,
}

impl Socket for CtpSlot {
    fn on_frame(&mut self, cx: &mut Cx<'_>, frame: RxFrame<'_>) {
        let f = match EdpFrame::with_eth(frame.eth, frame.packet) {
            Ok(f) if f.header.dst_port == self.port => f,
            _ => {
                self.malformed += 1;
                return;
            }
        };
        let before = self.core.delivered();
        // Several packets share a frame: confirmations, then at most one
        // other packet, last (PROTOCOL.md "Confirmations share a frame").
        // A frame breaking that rule is dropped whole before any of it
        // changes state.
        let Some(last) = last_packet(f.payload) else {
            self.malformed += 1;
            return;
        };
        // Confirmations in front of a data packet wait until the data is
        // delivered (CtpCore::hold).
        let hold = !is_confirmation(last);
        let from = EthAddr::new(f.eth.src, f.header.src_port);
        // Confirmations held from an earlier frame first (arrival order).
        self.core.settle();
        let mut packet = Some(f.payload);
        while let Some(p) = packet {
            let next = packed_after(p);
            // Every packet but the last is a whole confirmation.
            if !(hold && next.is_some() && self.core.hold(cx.now, from, &p[..CTP_HEADER_LEN])) {
                self.core.ep.handle_datagram(cx.now, from, p);
            }
            packet = next;
        }
        self.core.after_event();
        if self.core.delivered() > before {
            self.core.defer(cx.now);
        }
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.core.on_timeout(cx.now);
    }

    fn poll_transmit(&mut self, cx: &mut Cx<'_>, tx: &mut TxQueue) {
        self.more = false;
        if self.core.holds(cx.now) {
            return;
        }
        loop {
            if tx.is_full() {
                self.more = self.core.ep.has_transmit();
                break;
            }
            let buf = tx.next_buf();
            let (head, body) = buf.split_at_mut(HEAD);
            // The CTP header goes behind the EDP header in the batch
            // buffer; the data part is sent from the stored message.
            let Some(t) = self.core.ep.poll_transmit_gather(&mut self.hdr) else {
                break;
            };
            // The confirmations due to the same peer share the frame
            // (PROTOCOL.md "Confirmations share a frame"): in front of a
            // data packet, which must come last (its data part is
            // gathered); behind a confirmation, so the confirmations keep
            // the order they were queued in, which is the order the packets
            // arrived: the sender's early resend (RACK) reads a
            // confirmation ahead of an earlier one's as a sign of loss.
            let hl = t.header_len;
            let room = (body.len().min(cx.mtu + ETH_HEADER_LEN - HEAD))
                .saturating_sub(hl + t.payload.len());
            let behind = if t.confirm { hl } else { 0 };
            let packed = self
                .core
                .ep
                .take_confirmations_to(&t.dest, &mut body[behind..behind + room]);
            let at = if t.confirm { 0 } else { packed };
            body[at..at + hl].copy_from_slice(&self.hdr[..hl]);
            let len = hl + packed + t.payload.len();
            EthernetRepr {
                dst: t.dest.mac,
                src: cx.mac,
                ethertype: self.ethertype,
            }
            .emit(&mut head[..ETH_HEADER_LEN]);
            EdpRepr {
                src_port: self.port,
                dst_port: t.dest.port,
                payload_len: len as u16,
            }
            .emit(&mut head[ETH_HEADER_LEN..]);
            let gather = (!t.payload.is_empty()).then_some(GatherRef {
                tag: t.payload.msg,
                offset: t.payload.start as u64 | if t.payload.body { BODY_BIT } else { 0 },
                len: t.payload.len(),
            });
            tx.commit(HEAD + len - t.payload.len(), gather);
        }
        // Taking packets out of the transmit queues moves no timer and
        // makes no delivery: the deadline cached after the last event
        // (`after_event`, run by every handle call, frame and timeout that
        // marks the slot for transmission) stays right.
    }

    fn gather(&self, r: GatherRef) -> (&[u8], &[u8]) {
        let start = (r.offset & !BODY_BIT) as usize;
        let p = PayloadRef {
            msg: r.tag,
            start,
            end: start + r.len,
            body: r.offset & BODY_BIT != 0,
        };
        (self.core.ep.payload(p), &[])
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.core.deadline()
    }

    fn readiness(&self) -> Ready {
        self.core.readiness()
    }

    fn wants_transmit(&self) -> bool {
        self.more
    }

    fn take_wake(&mut self) -> bool {
        self.core.take_news()
    }

    fn on_handle_dropped(&mut self, now: Instant) -> bool {
        // Bodies offered for pulling and buffers pulled into are the
        // owner's (an application's send and receive buffers): none is
        // touched after the handle is gone.
        self.core.ep.cancel_offers(now);
        self.core.ep.cancel_pulls();
        // Confirmations still queued go out first.
        !self.core.ep.has_transmit()
    }

    fn is_finished(&self) -> bool {
        !self.core.ep.has_transmit()
    }
}

/// CTP over EDP: the endpoint's slot in a runtime.
#[derive(Debug)]
pub struct EdpTransport {
    rt: Runtime,
    slot: SlotId,
    port: u16,
}

impl EdpTransport {
    /// Adds `core` on `port` (0 = ephemeral) of `rt`.
    pub(crate) fn bind(
        rt: &Runtime,
        port: u16,
        make: impl FnOnce(u16, usize) -> io::Result<CtpCore<EthAddr>>,
    ) -> io::Result<Self> {
        let ethertype = rt.edp_ethertype();
        let (port, lease) = rt.take_port(ethertype, port)?;
        let mtu = rt.mtu();
        let slot = CtpSlot {
            core: make(port, mtu.saturating_sub(EDP_HEADER_LEN))?,
            port,
            ethertype,
            more: false,
            hdr: [0; MAX_INLINE_LEN],
            malformed: 0,
        };
        let id = rt.insert(DemuxKey::Port { ethertype, port }, Box::new(slot), lease)?;
        Ok(Self {
            rt: rt.clone(),
            slot: id,
            port,
        })
    }

    /// Local `(interface, MAC, port)`.
    pub fn local_addr(&self) -> io::Result<(String, MacAddr, u16)> {
        Ok((
            self.rt.iface().unwrap_or_default().to_string(),
            self.rt.mac(),
            self.port,
        ))
    }

    /// The runtime the endpoint lives in.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

impl Carrier for EdpTransport {
    type Addr = EthAddr;
    type Core = CtpCore<EthAddr>;
    type Engine = EthEngine;

    fn driver(&self) -> &Arc<Driver<EthEngine>> {
        self.rt.driver()
    }
    fn slot(&self) -> SlotId {
        self.slot
    }
    fn core(e: &mut EthEngine, slot: SlotId) -> Option<&mut CtpCore<EthAddr>> {
        e.socket_mut::<CtpSlot>(slot).map(|s| &mut s.core)
    }
    fn core_ref(e: &EthEngine, slot: SlotId) -> Option<&CtpCore<EthAddr>> {
        e.socket::<CtpSlot>(slot).map(|s| &s.core)
    }
    fn touched(e: &mut EthEngine, slot: SlotId, now: Instant) -> io::Result<()> {
        e.touched(slot, now)
    }
    fn local_name(&self) -> String {
        format!(
            "edp {} {} port {}",
            self.rt.iface().unwrap_or("(link)"),
            self.rt.mac(),
            self.port
        )
    }
    fn release(&self) {
        self.rt.release(self.slot);
    }
}

impl Transport for EdpTransport {
    fn io_stats(e: &EthEngine, slot: SlotId) -> super::CtpIoStats {
        let s = e.stats();
        super::CtpIoStats {
            send_errors: s.send_errors,
            recv_errors: s.recv_errors,
            send_blocked: s.tx_lost,
            malformed: e.socket::<CtpSlot>(slot).map_or(0, |c| c.malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use link::sim::{SimClock, SimLink};
    use runtime::RuntimeConfig;

    use super::*;
    use crate::{CtpConfig, CtpSocket, Options};

    const PATIENCE: Option<Duration> = Some(Duration::from_secs(20));

    fn pair() -> (
        CtpSocket<EdpTransport>,
        CtpSocket<EdpTransport>,
        MacAddr,
        Runtime,
    ) {
        pair_with(CtpConfig::default())
    }

    fn pair_with(
        cfg: CtpConfig,
    ) -> (
        CtpSocket<EdpTransport>,
        CtpSocket<EdpTransport>,
        MacAddr,
        Runtime,
    ) {
        let clock = SimClock::new();
        let (la, lb) = SimLink::pair(&clock, 1500, Default::default(), Default::default());
        let mb = link::Link::mac(&lb);
        let ra = Runtime::with_link(Box::new(la), RuntimeConfig::default()).unwrap();
        let rb = Runtime::with_link(Box::new(lb), RuntimeConfig::default()).unwrap();
        let a = CtpSocket::bind_on(&ra, 7, cfg.clone()).unwrap();
        let b = CtpSocket::bind_on(&rb, 8, cfg).unwrap();
        (a, b, mb, rb)
    }

    /// The confirmations of a large message's parts leave in a few frames
    /// (packed per peer), in the order the parts arrived, and the sender
    /// takes every one of them.
    #[test]
    fn confirmations_of_one_peer_share_frames() {
        let (a, b, mb, rb) = pair();
        let data: Vec<u8> = (0..64 << 10).map(|i: u32| (i * 7) as u8).collect();
        let parts = data.len().div_ceil(1500 - EDP_HEADER_LEN - CTP_HEADER_LEN) as u64;
        let id = a
            .send(3, runtime::EthAddr::new(mb, 8), &data, Options::NONE)
            .unwrap();
        match b.recv_delivery(PATIENCE).unwrap() {
            crate::Delivery::Data(d) => assert!(d.data == data, "payload differs"),
            e => panic!("{e:?}"),
        }
        assert!(a.wait_confirmed(id, PATIENCE).unwrap());
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(sb.confirmations_sent, parts);
        assert_eq!(sa.confirmations_received, parts);
        assert_eq!(sa.data_packets_resent, 0);
        // A frame of confirmations lists them in arrival order: none
        // overtakes an earlier one's and makes its packet presumed lost.
        assert_eq!(sa.presumed_lost, 0);
        let frames = rb.stats().tx_frames;
        assert!(
            frames < parts / 4,
            "{parts} confirmations in {frames} frames: not packed"
        );
    }

    /// What counts as a packed packet: a packet behind another; zero
    /// padding does not. Only confirmations may stand in front of another
    /// packet: a frame with a data packet before the last is malformed.
    #[test]
    fn packed_confirmations_are_recognised() {
        assert!(packed_after(&[25, 0]).is_none());
        let conf = [
            25, 0, 0x07, 0x80, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert!(is_confirmation(&conf));
        let mut two = conf.to_vec();
        two.extend(conf);
        assert_eq!(packed_after(&two), Some(&conf[..]));
        // Zero padding behind a packet is not a packet.
        let mut padded = conf.to_vec();
        padded.extend([0u8; 25]);
        assert!(packed_after(&padded).is_none());
        let mut data = conf;
        data[3] = 0;
        assert!(!is_confirmation(&data));
        assert_eq!(last_packet(&two), Some(&conf[..]));
        // Confirmations, then a data packet last: one frame.
        let mut hi = data.to_vec();
        hi[0] = 27;
        hi.extend(b"hi");
        let mut conf_data = two.clone();
        conf_data.extend(&hi);
        assert_eq!(last_packet(&conf_data), Some(&hi[..]));
        assert_eq!(packed_after(&two[25..]), None);
        // A data packet in front of anything: malformed.
        let mut data_conf = hi.clone();
        data_conf.extend(conf);
        assert_eq!(last_packet(&data_conf), None);
        let mut conf_data_conf = conf_data.clone();
        conf_data_conf.extend(conf);
        assert_eq!(last_packet(&conf_data_conf), None);
    }

    /// In a ping-pong each reply carries the confirmation of its request in
    /// the same frame (the request's confirmation is held for the reply;
    /// PROTOCOL.md "Confirmations share a frame"): one frame per message,
    /// and every message is still confirmed.
    #[test]
    fn a_reply_carries_the_confirmation_of_its_request() {
        // Timers far beyond any scheduling delay: a test thread descheduled
        // while the suite runs in parallel must not make a tail probe or a
        // resend duplicate a packet (the counts below are exact).
        let mut cfg = CtpConfig::default();
        cfg.protocol.tail_probe = false;
        cfg.protocol.default_timeout = Duration::from_secs(10);
        cfg.protocol.min_timeout = Duration::from_secs(10);
        let (a, b, mb, rb) = pair_with(cfg);
        let ma = a.runtime().mac();
        let n = 50u64;
        for i in 0..n {
            a.send(
                1,
                runtime::EthAddr::new(mb, 8),
                &i.to_le_bytes(),
                Options::NONE,
            )
            .unwrap();
            let d = match b.recv_delivery(PATIENCE).unwrap() {
                crate::Delivery::Data(d) => d,
                e => panic!("{e:?}"),
            };
            assert_eq!(d.data, i.to_le_bytes());
            b.send(2, runtime::EthAddr::new(ma, 7), &d.data, Options::NONE)
                .unwrap();
            match a.recv_delivery(PATIENCE).unwrap() {
                crate::Delivery::Data(d) => assert_eq!(d.data, i.to_le_bytes()),
                e => panic!("{e:?}"),
            }
        }
        // A confirmation is held for at most DEFER_MAX (100 us of real
        // time): a test thread descheduled longer while the suite runs in
        // parallel sends that one apart. Without the hold every one would
        // be (2n frames).
        let frames = rb.stats().tx_frames;
        assert!(
            (n..n + n / 5).contains(&frames),
            "b sent {frames} frames for {n} replies: its confirmations went apart"
        );
        assert_eq!(b.stats().confirmations_sent, n);
        assert_eq!(a.stats().confirmations_received, n);
        assert_eq!(a.stats().data_packets_resent, 0);
        assert_eq!(b.stats().malformed, 0);
    }
}
