//! CTP over UDP (CTP v1.2's own transport, wire-compatible: the 25-byte
//! header is the UDP payload). One kernel UDP socket and one endpoint form
//! an engine driven by the same driver as the Ethernet runtime
//! (`edp::runtime::driver`): the same wait policies, deadlines, idle
//! progress and readiness.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use edp::runtime::{DirectRead, Driver, Engine, Progress, Ready, SlotId};
use socket2::{Domain, Protocol, Socket, Type};

use super::core::CtpCore;
use super::{CtpIoStats, Transport};

/// Default UDP socket buffers in bytes (capped by `net.core.rmem_max` / `wmem_max`).
pub const UDP_SOCKET_BUFFER: usize = 4 << 20;

/// Largest UDP payload over IPv4, bytes.
pub const MAX_UDP_PAYLOAD: usize = 65507;

/// Datagrams received per engine turn.
const RX_BATCH: usize = 64;

/// The UDP engine: a socket and a CTP core.
pub struct UdpEngine {
    sock: UdpSocket,
    pub(crate) core: CtpCore<SocketAddr>,
    rx: Vec<u8>,
    tx: Vec<u8>,
    /// A datagram the socket refused with `WouldBlock`, sent first next time.
    blocked: Option<(SocketAddr, usize)>,
    last_send_failed: bool,
    ready: Ready,
    changed: bool,
    pub(crate) stats: CtpIoStats,
}

impl std::fmt::Debug for UdpEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpEngine")
            .field("local", &self.sock.local_addr().ok())
            .field("stats", &self.stats)
            .finish()
    }
}

impl UdpEngine {
    fn transmit(&mut self, now: Instant) {
        if self.core.holds(now) {
            return;
        }
        if let Some((dest, len)) = self.blocked {
            match self.sock.send_to(&self.tx[..len], dest) {
                Ok(_) => self.blocked = None,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.blocked = None;
                    self.send_failed(e, dest, now);
                }
            }
        }
        while let Some(t) = self.core.ep.poll_transmit(&mut self.tx) {
            match self.sock.send_to(&self.tx[..t.len], t.dest) {
                Ok(_) => self.last_send_failed = false,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stats.send_blocked += 1;
                    self.blocked = Some((t.dest, t.len));
                    break;
                }
                Err(e) => self.send_failed(e, t.dest, now),
            }
        }
        self.core.after_event();
    }

    fn send_failed(&mut self, e: io::Error, dest: SocketAddr, now: Instant) {
        self.stats.send_errors += 1;
        // One error delivery per run of failures, not one per datagram; the
        // packet itself stays stored and is resent on its schedule.
        if !self.last_send_failed {
            tracing::warn!(%dest, error = %e, "ctp: send failed");
            self.core.ep.push_error(
                now,
                crate::ErrorType::Transport,
                e.raw_os_error().unwrap_or(0) as i64,
                Some(dest),
            );
        }
        self.last_send_failed = true;
    }

    fn update_ready(&mut self) {
        let r = self.core.readiness();
        // News of the upper layer is reported even at the same readiness
        // (see `edp::runtime::Socket::take_wake`).
        if self.core.take_news() || r != self.ready {
            self.ready = r;
            self.changed = true;
        }
    }

    /// Sends what the core has queued (after a handle's call).
    pub(crate) fn touched(&mut self, now: Instant) {
        self.transmit(now);
        self.update_ready();
    }
}

impl Engine for UdpEngine {
    fn poll(
        &mut self,
        now: Instant,
        _direct: Option<(SlotId, &mut DirectRead<'_>)>,
    ) -> io::Result<usize> {
        let mut got = 0;
        let mut errors = 0;
        let before = self.core.delivered();
        while got < RX_BATCH {
            match self.sock.recv_from(&mut self.rx) {
                Ok((n, from)) => {
                    self.core.ep.handle_datagram(now, from, &self.rx[..n]);
                    got += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // ICMP errors (port unreachable) surface here; they are
                    // not fatal for a connectionless socket.
                    self.stats.recv_errors += 1;
                    errors += 1;
                    tracing::debug!(error = %e, "ctp: UDP receive error");
                    if errors > 64 {
                        break;
                    }
                }
            }
        }
        self.core.on_timeout(now);
        if self.core.delivered() > before {
            self.core.defer(now);
        }
        self.transmit(now);
        self.update_ready();
        Ok(got)
    }

    fn on_deadline(&mut self, now: Instant) -> io::Result<()> {
        self.core.on_timeout(now);
        self.transmit(now);
        self.update_ready();
        Ok(())
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        self.core.deadline()
    }

    fn before_sleep(&mut self, _slot: Option<SlotId>, _now: Instant) -> io::Result<()> {
        Ok(())
    }

    fn rx_ready(&self) -> Option<bool> {
        None
    }

    fn drain_changed(&mut self, f: &mut dyn FnMut(SlotId, Ready)) {
        if std::mem::take(&mut self.changed) {
            f(SlotId::FIRST, self.ready);
        }
    }

    fn readiness(&self, _slot: SlotId) -> Ready {
        self.core.readiness()
    }

    fn has_lingering(&self) -> bool {
        false
    }
}

/// CTP over a kernel UDP socket.
#[derive(Debug)]
pub struct UdpTransport {
    driver: Arc<Driver<UdpEngine>>,
    local: SocketAddr,
}

impl UdpTransport {
    /// Binds a nonblocking UDP socket to `addr` with 4 MiB buffers (as far as
    /// the kernel allows) and builds the engine around `make`'s core. With
    /// `broadcast` set, SO_BROADCAST is enabled.
    ///
    /// Errors: address resolution and socket errors (EADDRINUSE etc.).
    pub(crate) fn bind(
        addr: impl ToSocketAddrs,
        broadcast: bool,
        progress: Progress,
        make: impl FnOnce(usize) -> io::Result<CtpCore<SocketAddr>>,
    ) -> io::Result<Self> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        // Best effort: the kernel caps these at rmem_max / wmem_max.
        let _ = s.set_recv_buffer_size(UDP_SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(UDP_SOCKET_BUFFER);
        if broadcast {
            s.set_broadcast(true)?;
        }
        s.set_nonblocking(true)?;
        s.bind(&addr.into())?;
        let sock: UdpSocket = s.into();
        let local = sock.local_addr()?;
        let fd: OwnedFd = sock.try_clone()?.into();
        let core = make(MAX_UDP_PAYLOAD)?;
        let buf = core.ep.config().max_packet_len().max(MAX_UDP_PAYLOAD) + 64;
        let engine = UdpEngine {
            sock,
            core,
            rx: vec![0; buf],
            tx: vec![0; buf],
            blocked: None,
            last_send_failed: false,
            ready: Ready::NONE,
            changed: false,
            stats: CtpIoStats::default(),
        };
        let driver = Driver::new(engine, Some(fd), progress, format!("cn-ctp-{local}"))?;
        if matches!(progress, Progress::WhenIdle { .. }) {
            driver.ensure_service();
        }
        Ok(Self { driver, local })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl Transport for UdpTransport {
    type Addr = SocketAddr;
    type Engine = UdpEngine;

    fn driver(&self) -> &Arc<Driver<UdpEngine>> {
        &self.driver
    }
    fn slot(&self) -> SlotId {
        SlotId::FIRST
    }
    fn core(e: &mut UdpEngine, _slot: SlotId) -> Option<&mut CtpCore<SocketAddr>> {
        Some(&mut e.core)
    }
    fn core_ref(e: &UdpEngine, _slot: SlotId) -> Option<&CtpCore<SocketAddr>> {
        Some(&e.core)
    }
    fn touched(e: &mut UdpEngine, _slot: SlotId, now: Instant) -> io::Result<()> {
        e.touched(now);
        Ok(())
    }
    fn io_stats(e: &UdpEngine, _slot: SlotId) -> CtpIoStats {
        e.stats
    }
    fn local_name(&self) -> String {
        format!("udp {}", self.local)
    }
    fn release(&self) {}
}
