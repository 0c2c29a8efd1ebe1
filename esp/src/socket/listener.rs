//! [`EspListener`] and its slot: the sans-IO [`Listener`] (bounded backlog
//! and half-open table, thesis ch. 5.2.5) driven by the runtime. The
//! listener owns its connections until `accept` moves one into a slot of
//! its own (keyed by the peer), sharing the listener's port lease.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use link::eth::EthernetRepr;
use link::Link;
use runtime::ports::PortLease;
use runtime::protocol::{Cx, DemuxKey, GatherRef, Ready, RxFrame, SlotId, Socket, TxQueue};
use runtime::{Deadline, Runtime};

use crate::config::EspConfig;
use crate::listener::{Listener, ListenerStats, SynOutcome};
use crate::wire::{emit_esp_frame, EspFrame, EspRepr, MacAddr};

use super::conn::{ConnSocket, SlotStats};
use super::stream::EspStream;
use super::{clock_us, isn_generator, prepare};

/// RSTs a listener keeps queued between two transmissions at most (more
/// are dropped and counted: an attacker's non-SYN flood costs bounded
/// memory).
const MAX_PENDING_RST: usize = 64;

/// The listener in its slot.
pub(crate) struct ListenerSocket {
    pub listener: Listener<()>,
    ethertype: u16,
    pending_rst: Vec<(MacAddr, EspRepr)>,
    more: bool,
    pub stats: SlotStats,
    pub rst_dropped: u64,
}

impl Socket for ListenerSocket {
    /// Always: a SYN from a host without the key is negotiated (accepted
    /// under `none`, or refused with an explicit RST), and the half-open
    /// connections check their own binding (`crate::auth`).
    fn accepts_unverified(&self) -> bool {
        true
    }

    fn on_frame(&mut self, cx: &mut Cx<'_>, frame: RxFrame<'_>) {
        let f = match EspFrame::with_eth(frame.eth, frame.packet) {
            Ok(f) if f.eth.dst.is_group() => {
                self.stats.group_addressed += 1;
                return;
            }
            Ok(f) => f,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let remote = (f.eth.src, f.header.src_port);
        if let Some(e) = self
            .listener
            .entries_mut()
            .iter_mut()
            .find(|e| e.conn.remote() == remote)
        {
            e.conn
                .handle_segment_tagged(cx.now, &f.header, f.payload, cx.tag, &mut []);
            return;
        }
        // Connections already accepted have slots of their own: their
        // segments never reach the listener.
        match self.listener.on_segment_tagged(
            cx.now,
            clock_us(),
            f.eth.src,
            &f.header,
            f.payload,
            cx.tag,
            |_| false,
        ) {
            SynOutcome::Accept(conn) => self.listener.insert(*conn, ()),
            SynOutcome::Reset(rst) | SynOutcome::Cookie(rst) | SynOutcome::Refused(rst) => {
                if self.pending_rst.len() < MAX_PENDING_RST {
                    self.pending_rst.push((f.eth.src, rst));
                } else {
                    self.rst_dropped += 1;
                }
            }
            SynOutcome::Drop(_) => {}
        }
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        for e in self.listener.entries_mut() {
            if e.conn.poll_timeout().is_some_and(|t| t <= cx.now) {
                e.conn.handle_timeout(cx.now);
            }
        }
        self.listener.reap();
    }

    fn poll_transmit(&mut self, cx: &mut Cx<'_>, tx: &mut TxQueue) {
        self.more = false;
        while let Some((peer, rst)) = self.pending_rst.pop() {
            if tx.is_full() {
                self.pending_rst.push((peer, rst));
                self.more = true;
                return;
            }
            let eth = EthernetRepr {
                dst: peer,
                src: cx.mac,
                ethertype: self.ethertype,
            };
            if let Ok(n) = emit_esp_frame(tx.next_buf(), &eth, &rst, &[]) {
                tx.commit(n, None);
            }
        }
        for (i, e) in self.listener.entries_mut().iter_mut().enumerate() {
            loop {
                if tx.is_full() {
                    self.more = true;
                    return;
                }
                let Some(g) = e.conn.poll_transmit_gather(cx.now, tx.next_buf()) else {
                    break;
                };
                let gather = (g.payload_len > 0).then_some(GatherRef {
                    tag: i as u64,
                    offset: g.payload_off,
                    len: g.payload_len,
                });
                tx.commit(g.header_len, gather);
            }
        }
        self.listener.reap();
    }

    fn gather(&self, r: GatherRef) -> (&[u8], &[u8]) {
        match self.listener.entries().get(r.tag as usize) {
            Some(e) => e.conn.payload(r.offset, r.len),
            None => (&[], &[]),
        }
    }

    fn on_send_failed(&mut self) {
        // Recovered by the half-open connection's retransmission.
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.listener.poll_timeout()
    }

    fn readiness(&self) -> Ready {
        if self.listener.ready() > 0 {
            Ready::READABLE
        } else {
            Ready::NONE
        }
    }

    fn wants_transmit(&self) -> bool {
        self.more
    }
}

/// A listening ESP socket.
pub struct EspListener {
    rt: Runtime,
    slot: SlotId,
    port: u16,
    lease: Option<PortLease>,
    cfg: EspConfig,
    nonblocking: AtomicBool,
}

impl std::fmt::Debug for EspListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EspListener")
            .field("iface", &self.rt.iface())
            .field("mac", &self.rt.mac())
            .field("port", &self.port)
            .finish()
    }
}

impl EspListener {
    /// Binds `(iface, port)` with default options (port 0 = an ephemeral
    /// port). See [`EspListener::bind_with`].
    pub fn bind(addr: (&str, u16)) -> io::Result<EspListener> {
        Self::bind_with(addr.0, addr.1, EspConfig::default())
    }

    /// Takes the port's lease and adds the listener to the process's
    /// runtime for `iface`. At most `cfg.backlog` established connections
    /// wait for `accept` and at most `cfg.max_half_open` are half-open;
    /// further SYNs are dropped (the client retries).
    ///
    /// Errors: `AddrInUse` when another socket owns the port; `NotFound`
    /// for an unknown interface; `PermissionDenied` naming CAP_NET_RAW.
    pub fn bind_with(iface: &str, port: u16, cfg: EspConfig) -> io::Result<EspListener> {
        let rt = Runtime::shared(iface, &cfg.runtime_config())?;
        Self::bind_on(&rt, port, cfg)
    }

    /// Binds `port` (0 = ephemeral) on an existing runtime.
    ///
    /// Errors: as [`EspListener::bind_with`]; `InvalidInput` when the
    /// runtime's ESP ethertype differs from `cfg.ethertype`.
    pub fn bind_on(rt: &Runtime, port: u16, cfg: EspConfig) -> io::Result<EspListener> {
        let transport = prepare(rt, &cfg)?;
        let ethertype = cfg.transport.ethertype;
        let (port, lease) = rt.take_port(ethertype, port)?;
        let mtu = rt.mtu();
        let sock = ListenerSocket {
            listener: Listener::new(transport, mtu, (rt.mac(), port), isn_generator().clone()),
            ethertype,
            pending_rst: Vec::new(),
            more: false,
            stats: SlotStats::default(),
            rst_dropped: 0,
        };
        let key = DemuxKey::Port { ethertype, port };
        let slot = rt.insert(key, Box::new(sock), lease.clone())?;
        Ok(EspListener {
            rt: rt.clone(),
            slot,
            port,
            lease,
            cfg,
            nonblocking: AtomicBool::new(false),
        })
    }

    /// Local (interface, MAC, port).
    pub fn local_addr(&self) -> io::Result<(String, MacAddr, u16)> {
        Ok((
            self.rt.iface().unwrap_or_default().to_string(),
            self.rt.mac(),
            self.port,
        ))
    }

    /// The runtime the listener lives in.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Nonblocking mode: `accept` returns `WouldBlock` when no connection is
    /// ready.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking.store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// Counters of the listen side (SYNs accepted and dropped, resets).
    pub fn stats(&self) -> ListenerStats {
        self.rt.with_engine_untimed(|e| {
            e.socket::<ListenerSocket>(self.slot)
                .map(|l| l.listener.stats())
                .unwrap_or_default()
        })
    }

    /// Frames the listener's slot dropped before the listener saw them
    /// (malformed, e.g. a bad negotiation option; group-addressed).
    pub fn slot_stats(&self) -> SlotStats {
        self.rt.with_engine_untimed(|e| {
            e.socket::<ListenerSocket>(self.slot)
                .map(|l| l.stats)
                .unwrap_or_default()
        })
    }

    /// Waits for an established connection and returns it with the peer's
    /// (MAC, port). Half-open connections progress while waiting.
    ///
    /// Errors: `WouldBlock` in nonblocking mode; link errors.
    pub fn accept(&self) -> io::Result<(EspStream, (MacAddr, u16))> {
        self.accept_timeout(None)
    }

    /// [`EspListener::accept`] waiting at most `timeout`. Errors: `TimedOut`.
    pub fn accept_timeout(
        &self,
        timeout: Option<Duration>,
    ) -> io::Result<(EspStream, (MacAddr, u16))> {
        let now = Instant::now();
        let deadline = if self.nonblocking.load(Ordering::Relaxed) {
            Deadline::Now
        } else {
            Deadline::after(now, timeout)
        };
        let (slot, ethertype) = (self.slot, self.cfg.transport.ethertype);
        let linger = self.cfg.linger;
        let port = self.port;
        let r = self.rt.driver().wait(
            slot,
            self.cfg.wait,
            deadline,
            None,
            &format_args!("ESP accept on port {port}"),
            |e, _| {
                let Some(l) = e.socket_mut::<ListenerSocket>(slot) else {
                    return Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "listener closed",
                    ));
                };
                let Some(entry) = l.listener.accept() else {
                    return Ok(None);
                };
                e.refresh(slot);
                let remote = entry.conn.remote();
                let key = DemuxKey::Conn {
                    ethertype,
                    port: entry.conn.local().1,
                    peer: remote.0,
                    peer_port: remote.1,
                };
                let sock = ConnSocket::new(entry.conn, linger);
                let id = e.insert(key, Box::new(sock), self.lease.clone())?;
                Ok(Some((id, remote)))
            },
        );
        match r {
            Ok((id, remote)) => {
                let s = EspStream::from_slot(
                    self.rt.clone(),
                    id,
                    (self.rt.mac(), self.port),
                    remote,
                    &self.cfg,
                );
                Ok((s, remote))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.rt.driver().rearm_slot(slot);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}

/// Accepting one stream on a link of its own: a listener's work, so it
/// lives here, beside [`EspListener::accept_timeout`].
impl EspStream {
    /// Waits on `link` (a runtime of its own) for one connection to
    /// `local_port` and returns it. Waits at most `timeout` (`None` =
    /// forever).
    ///
    /// Errors: `TimedOut`; link errors.
    pub fn accept_link(
        link: Box<dyn Link>,
        local_port: u16,
        cfg: EspConfig,
        timeout: Option<Duration>,
    ) -> io::Result<EspStream> {
        let rt = Runtime::with_link(link, cfg.runtime_config())?;
        let l = EspListener::bind_on(&rt, local_port, cfg)?;
        let (s, _) = l.accept_timeout(timeout)?;
        Ok(s)
    }
}

impl Drop for EspListener {
    fn drop(&mut self) {
        self.rt.release(self.slot);
    }
}

runtime::slot_source!(impl for EspListener, |s| (s.rt.driver(), s.slot));

#[cfg(test)]
mod tests {
    use super::*;

    fn send<T: Send>() {}
    fn sync<T: Sync>() {}

    #[test]
    fn listeners_can_move_between_threads() {
        send::<EspListener>();
        sync::<EspListener>();
    }
}
