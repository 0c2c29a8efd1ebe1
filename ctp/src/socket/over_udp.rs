//! CTP over UDP (CTP v1.2's own transport, wire-compatible: the 25-byte
//! header is the UDP payload). The endpoint's core is hosted alone on one
//! kernel UDP socket by the runtime's single-socket engine
//! (`runtime::udp`), driven by the same driver as the Ethernet runtime
//! (`runtime::driver`): the same wait policies, deadlines, idle
//! progress and readiness.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Instant;

use runtime::protocol::{DatagramCore, UdpEvent};
use runtime::protocol::{Driver, Ready, SlotId};
use runtime::Progress;

use super::core::CtpCore;
use super::{Carrier, CtpIoStats, Transport};

pub use runtime::protocol::{MAX_UDP_PAYLOAD, UDP_SOCKET_BUFFER};

/// The UDP engine of a CTP endpoint.
pub type UdpEngine = runtime::protocol::UdpEngine<UdpCore>;

/// A CTP core on a UDP socket: the core and the socket's counters.
pub struct UdpCore {
    pub(crate) core: CtpCore<SocketAddr>,
    stats: CtpIoStats,
    /// The last send failed (one error delivery per run of failures).
    last_send_failed: bool,
    /// Deliveries counted when the engine turn began.
    delivered_before: u64,
}

impl std::fmt::Debug for UdpCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpCore")
            .field("stats", &self.stats)
            .finish()
    }
}

impl DatagramCore for UdpCore {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.core.ep.handle_datagram(now, from, datagram);
    }

    fn has_delivery(&self) -> bool {
        self.core.ep.has_delivery()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.core.on_timeout(now);
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.core.deadline()
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        self.core.ep.poll_transmit(buf).map(|t| (t.dest, t.len))
    }

    fn readiness(&self) -> Ready {
        self.core.readiness()
    }

    fn take_news(&mut self) -> bool {
        // News of the upper layer is reported even at the same readiness
        // (see `runtime::protocol::Socket::take_wake`).
        self.core.take_news()
    }

    fn holds(&self, now: Instant) -> bool {
        self.core.holds(now)
    }

    fn turn_begins(&mut self) {
        self.delivered_before = self.core.delivered();
    }

    fn turn_received(&mut self, now: Instant) {
        if self.core.delivered() > self.delivered_before {
            self.core.defer(now);
        }
    }

    fn transmitted(&mut self) {
        self.core.after_event();
    }

    fn on_event(&mut self, now: Instant, event: UdpEvent<'_>) {
        match event {
            UdpEvent::Sent => self.last_send_failed = false,
            UdpEvent::SendBlocked => self.stats.send_blocked += 1,
            UdpEvent::SendFailed { dest, error } => {
                self.stats.send_errors += 1;
                // One error delivery per run of failures, not one per
                // datagram; the packet itself stays stored and is resent on
                // its schedule.
                if !self.last_send_failed {
                    tracing::warn!(%dest, %error, "ctp: send failed");
                    self.core.ep.push_error(
                        now,
                        crate::ErrorType::Transport,
                        error.raw_os_error().unwrap_or(0) as i64,
                        Some(dest),
                    );
                }
                self.last_send_failed = true;
            }
            UdpEvent::RecvFailed(_) => self.stats.recv_errors += 1,
            UdpEvent::Malformed => self.stats.malformed += 1,
        }
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
        let sock = runtime::protocol::bind_socket(addr, "ctp", |s| {
            if broadcast {
                s.set_broadcast(true)?;
            }
            Ok(())
        })?;
        let local = sock.local_addr()?;
        let core = make(MAX_UDP_PAYLOAD)?;
        let room = core.ep.config().max_packet_len().max(MAX_UDP_PAYLOAD) + 64;
        let core = UdpCore {
            core,
            stats: CtpIoStats::default(),
            last_send_failed: false,
            delivered_before: 0,
        };
        let driver = UdpEngine::spawn(sock, core, room, progress, format!("cn-ctp-{local}"))?;
        Ok(Self { driver, local })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl Carrier for UdpTransport {
    type Addr = SocketAddr;
    type Core = CtpCore<SocketAddr>;
    type Engine = UdpEngine;

    fn driver(&self) -> &Arc<Driver<UdpEngine>> {
        &self.driver
    }
    fn slot(&self) -> SlotId {
        SlotId::FIRST
    }
    fn core(e: &mut UdpEngine, _slot: SlotId) -> Option<&mut CtpCore<SocketAddr>> {
        Some(&mut e.core_mut().core)
    }
    fn core_ref(e: &UdpEngine, _slot: SlotId) -> Option<&CtpCore<SocketAddr>> {
        Some(&e.core().core)
    }
    fn touched(e: &mut UdpEngine, _slot: SlotId, now: Instant) -> io::Result<()> {
        e.touched(now);
        Ok(())
    }
    fn local_name(&self) -> String {
        format!("udp {}", self.local)
    }
    fn release(&self) {}
}

impl Transport for UdpTransport {
    fn io_stats(e: &UdpEngine, _slot: SlotId) -> CtpIoStats {
        e.core().stats
    }
}
