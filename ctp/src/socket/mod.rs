//! [`CtpSocket`]: a CTP endpoint on a transport, driven by the workspace's
//! one driver (`runtime::driver`).
//!
//! Over EDP the endpoint is a slot of the process's runtime for the
//! interface (one packet socket per process, sendmmsg batches, the RX
//! ring); over UDP it is an engine of its own around one kernel UDP socket.
//! Either way:
//! - deliveries go to the subscriber of their command, else to the default
//!   handler (handlers run on the bounded deliverer pool, CTP spec
//!   "Threads"), else to a queue read by [`CtpSocket::recv_delivery`];
//! - the calling thread drives the protocol while it waits
//!   (`recv_delivery`, `wait_confirmed`, `flush`, `poll`, a `send` into a
//!   full storage), following the socket's wait policy;
//! - while no caller waits, the runtime's service thread keeps confirming,
//!   resending and routing (the spec's "server thread", which always runs;
//!   see `runtime::Progress`);
//! - sockets are cheap to clone (shared state), usable from many threads,
//!   and `mio::event::Source`s whose readiness is the delivery queue.

use std::any::Any;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

pub use runtime::protocol::Carrier;
use runtime::protocol::SlotId;
use runtime::{Deadline, Runtime, RuntimeConfig, WaitPolicy};
use rustc_hash::FxHashMap;

use crate::deliver::DelivererPool;
use crate::endpoint::{
    Config, Delivery, Endpoint, MsgId, PeerAddr, SendError, Stats, StorageSizes,
};
use crate::wire::{Options, CTP_HEADER_LEN};

mod core;
mod over_edp;
mod over_udp;
mod upper;

pub use self::core::{CtpCore, APP_QUEUE_CAP};
pub use self::over_edp::EdpTransport;
pub use self::over_udp::{UdpCore, UdpEngine, UdpTransport, MAX_UDP_PAYLOAD, UDP_SOCKET_BUFFER};
pub use self::upper::UpperLayer;
pub use runtime::EthAddr;

/// What carries a socket's packets: the engine holding its endpoint's core
/// (the runtime's [`Carrier`] with a [`CtpCore`] for core), and its I/O
/// counters.
pub trait Transport: Carrier<Core = CtpCore<<Self as Carrier>::Addr>> {
    /// I/O counters.
    fn io_stats(e: &Self::Engine, slot: SlotId) -> CtpIoStats;
}

/// I/O counters of a CTP socket's transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtpIoStats {
    /// Datagrams the transport refused with an error other than WouldBlock.
    pub send_errors: u64,
    /// Receive errors other than WouldBlock.
    pub recv_errors: u64,
    /// Datagrams that met a full socket queue (kept and retried over UDP;
    /// recovered by resending over EDP).
    pub send_blocked: u64,
    /// Frames for the endpoint that were not CTP-over-EDP packets.
    pub malformed: u64,
}

/// Options of a [`CtpSocket`].
#[derive(Debug, Clone)]
pub struct CtpConfig {
    /// Protocol tunables. `data_size` is lowered to what the transport
    /// carries (UDP: 65482; EDP: link MTU - 31).
    pub protocol: Config,
    /// Most deliverer threads (spec `maxthreads`, 50).
    pub max_deliverers: usize,
    /// How blocking calls wait (busy-poll, blocking, adaptive).
    pub wait: WaitPolicy,
    /// Seed of the random starting ids; `None` = from the OS.
    pub seed: Option<u64>,
    /// UDP only: where broadcast commands go (e.g. `10.0.0.255:1515`); `None`
    /// disables broadcast.
    pub udp_broadcast: Option<SocketAddr>,
    /// EDP only: the runtime the endpoint joins (link options, faults,
    /// progress); UDP uses its `progress`.
    pub runtime: RuntimeConfig,
    /// EDP only: destination port of broadcasts (default: our own port).
    pub edp_broadcast_port: Option<u16>,
    /// How long `send` waits (driving the protocol) for room in a full
    /// sent-commands storage before failing with [`SendError::Full`];
    /// `None` waits without limit. Default 60 s.
    pub send_timeout: Option<Duration>,
}

impl Default for CtpConfig {
    fn default() -> Self {
        Self {
            protocol: Config::default(),
            max_deliverers: 50,
            wait: WaitPolicy::DEFAULT,
            seed: None,
            udp_broadcast: None,
            runtime: RuntimeConfig::default(),
            edp_broadcast_port: None,
            send_timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// A delivery handler: gets the socket (to reply) and the delivery.
pub type Handler<T> =
    Arc<dyn Fn(&CtpSocket<T>, Delivery<<T as Carrier>::Addr>) + Send + Sync + 'static>;

struct Routes<T: Transport> {
    by_command: FxHashMap<u16, Handler<T>>,
    default: Option<Handler<T>>,
}

struct Shared<T: Transport> {
    tr: T,
    routes: Arc<RwLock<Routes<T>>>,
    /// Whether `routes` has any handler: without one a delivery skips the
    /// routes' lock (the engine turn of an upper layer takes no other
    /// lock than the engine's).
    routed: Arc<AtomicBool>,
    pool: Arc<DelivererPool>,
    name: String,
    send_timeout: Option<Duration>,
    wait: RwLock<WaitPolicy>,
    /// Sends that found no room in the sent-commands storage and waited
    /// ([`CtpSocket::sends_waited`]).
    sends_waited: AtomicU64,
}

impl<T: Transport> Drop for Shared<T> {
    fn drop(&mut self) {
        // Confirmations held back behind the last delivery still go out.
        let slot = self.tr.slot();
        self.tr.driver().with(|e, now| {
            if let Some(c) = T::core(e, slot) {
                c.resume();
            }
            let _ = T::touched(e, slot, now);
        });
        self.tr.release();
        self.pool.shutdown();
    }
}

/// A CTP endpoint bound to a transport. See the module documentation.
///
/// Over kernel UDP (no privilege):
///
/// ```
/// use std::time::Duration;
/// use ctp::{CtpConfig, CtpSocket, Delivery, Options};
///
/// let a = CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default())?;
/// let b = CtpSocket::bind_udp("127.0.0.1:0", CtpConfig::default())?;
/// a.send(7, b.local_addr()?, b"request", Options::NONE).unwrap();
/// match b.recv_delivery(Some(Duration::from_secs(10)))? {
///     Delivery::Data(d) => assert_eq!((d.command, &d.data[..]), (7, &b"request"[..])),
///     Delivery::Error(e) => panic!("{e}"),
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct CtpSocket<T: Transport> {
    shared: Arc<Shared<T>>,
}

impl<T: Transport> Clone for CtpSocket<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T: Transport> std::fmt::Debug for CtpSocket<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CtpSocket")
            .field("local", &self.shared.name)
            .finish()
    }
}

/// A fresh endpoint for a transport carrying `max_datagram` bytes.
fn endpoint<P: PeerAddr>(
    cfg: &CtpConfig,
    max_datagram: usize,
    broadcast: Option<P>,
) -> io::Result<Endpoint<P>> {
    let mut core_cfg = cfg.protocol.clone();
    let max_data = max_datagram.saturating_sub(CTP_HEADER_LEN);
    if max_data == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "transport carries {max_datagram} bytes per datagram: no room for data after the {CTP_HEADER_LEN}-byte CTP header"
            ),
        ));
    }
    core_cfg.data_size = core_cfg
        .data_size
        .clamp(1, max_data.min(65535 - CTP_HEADER_LEN));
    let seed = cfg.seed.unwrap_or_else(rand::random);
    Ok(Endpoint::new(
        core_cfg,
        Instant::now(),
        SystemTime::now(),
        seed,
        broadcast,
    ))
}

impl CtpSocket<UdpTransport> {
    /// Binds a CTP endpoint to UDP address `addr` (wire-compatible with CTP
    /// v1.2 peers).
    ///
    /// Errors: address resolution and socket errors.
    pub fn bind_udp(addr: impl ToSocketAddrs, cfg: CtpConfig) -> io::Result<Self> {
        let tr = UdpTransport::bind(
            addr,
            cfg.udp_broadcast.is_some(),
            cfg.runtime.progress,
            |max| endpoint(&cfg, max, cfg.udp_broadcast).map(CtpCore::new),
        )?;
        Ok(Self::wrap(tr, &cfg))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.shared.tr.local_addr()
    }
}

impl CtpSocket<EdpTransport> {
    /// Binds a CTP endpoint to EDP `port` (0 = ephemeral) on `iface`, in
    /// the process's runtime for the interface (`cfg.runtime`; faults in
    /// `cfg.runtime.link.fault` give it a runtime of its own). Broadcasts
    /// go to ff:ff:ff:ff:ff:ff at `cfg.edp_broadcast_port` (default: our
    /// own port: CTP nodes share one port).
    ///
    /// Errors: those of `runtime::Runtime::shared` (EPERM names
    /// CAP_NET_RAW) and port ownership (`AddrInUse`).
    pub fn bind_edp(iface: &str, port: u16, cfg: CtpConfig) -> io::Result<Self> {
        let rt = Runtime::shared(iface, &cfg.runtime)?;
        Self::bind_on(&rt, port, cfg)
    }

    /// Binds a CTP endpoint to `port` on a runtime of its own around
    /// `link` (a `UdpLink`, a `SimLink`, a `FaultLink` around a
    /// `PacketLink`, ...), configured by `cfg.runtime`: what
    /// `EdpSocket::from_link_with` is for EDP.
    ///
    /// Errors: those of `runtime::Runtime::with_link` and
    /// [`CtpSocket::bind_on`].
    pub fn from_link(link: Box<dyn link::Link>, port: u16, cfg: CtpConfig) -> io::Result<Self> {
        let rt = Runtime::with_link(link, cfg.runtime.clone())?;
        Self::bind_on(&rt, port, cfg)
    }

    /// Binds a CTP endpoint to `port` on an existing runtime (any link: a
    /// `SimLink`, a `UdpLink`, ...).
    ///
    /// Errors: `AddrInUse`; `InvalidInput` for a link too small for the
    /// CTP header.
    pub fn bind_on(rt: &Runtime, port: u16, cfg: CtpConfig) -> io::Result<Self> {
        let tr = EdpTransport::bind(rt, port, |port, max| {
            let b = Some(EthAddr::new(
                edp::MacAddr::BROADCAST,
                cfg.edp_broadcast_port.unwrap_or(port),
            ));
            endpoint(&cfg, max, b).map(CtpCore::new)
        })?;
        Ok(Self::wrap(tr, &cfg))
    }

    /// Local `(interface, MAC, port)`.
    pub fn local_addr(&self) -> io::Result<(String, edp::MacAddr, u16)> {
        self.shared.tr.local_addr()
    }

    /// The I/O runtime the endpoint lives in (for its counters, e.g.
    /// `Runtime::kernel_stats`, or to bind other sockets beside it).
    pub fn runtime(&self) -> &Runtime {
        self.shared.tr.runtime()
    }
}

impl<T: Transport> CtpSocket<T> {
    fn wrap(tr: T, cfg: &CtpConfig) -> Self {
        let shared = Arc::new(Shared {
            name: tr.local_name(),
            tr,
            routes: Arc::new(RwLock::new(Routes {
                by_command: FxHashMap::default(),
                default: None,
            })),
            routed: Arc::new(AtomicBool::new(false)),
            pool: DelivererPool::new(cfg.max_deliverers),
            send_timeout: cfg.send_timeout,
            wait: RwLock::new(cfg.wait),
            sends_waited: AtomicU64::new(0),
        });
        // Deliveries are routed inside the engine (by whichever thread
        // drives it); handlers run on the pool with a handle to the socket.
        let weak: Weak<Shared<T>> = Arc::downgrade(&shared);
        let routes = shared.routes.clone();
        let routed = shared.routed.clone();
        let pool = shared.pool.clone();
        let route = Box::new(move |d: Delivery<T::Addr>| {
            if !routed.load(Ordering::Acquire) {
                return Some(d);
            }
            let h = {
                let r = routes.read().unwrap_or_else(|e| e.into_inner());
                d.command()
                    .and_then(|cmd| r.by_command.get(&cmd).cloned())
                    .or_else(|| r.default.clone())
            };
            match h {
                Some(h) => {
                    let weak = weak.clone();
                    pool.submit(Box::new(move || {
                        if let Some(shared) = weak.upgrade() {
                            h(&CtpSocket { shared }, d);
                        }
                    }));
                    None
                }
                None => Some(d),
            }
        });
        let slot = shared.tr.slot();
        shared.tr.driver().with_untimed(|e| {
            if let Some(c) = T::core(e, slot) {
                c.set_route(route);
            }
        });
        Self { shared }
    }

    /// Human-readable local address.
    pub fn local_name(&self) -> &str {
        &self.shared.name
    }

    /// Runs `f` on the engine's core of this socket, then sends what it
    /// queued.
    fn with_core<R>(&self, f: impl FnOnce(&mut CtpCore<T::Addr>, Instant) -> R) -> R {
        self.with_core_then(true, f)
    }

    /// [`CtpSocket::with_core`]; with `reply` false, for a call that is no
    /// reply (posting a receive): what is held behind the last delivery
    /// stays held unless `f` queued packets of its own
    /// ([`CtpSocket::with_upper_no_reply`]).
    fn with_core_then<R>(
        &self,
        reply: bool,
        f: impl FnOnce(&mut CtpCore<T::Addr>, Instant) -> R,
    ) -> R {
        let slot = self.shared.tr.slot();
        self.shared.tr.driver().with(|e, now| {
            let c = T::core(e, slot).expect("a CTP socket's core lives as long as the socket");
            // Back in the library: what was held for the last delivery
            // goes on, with what `f` sends.
            let r = if reply {
                c.resume();
                f(c, now)
            } else {
                let queued = c.ep.queued_packets();
                let r = f(c, now);
                if c.ep.queued_packets() != queued {
                    c.resume();
                }
                r
            };
            c.after_event();
            let _ = T::touched(e, slot, now);
            r
        })
    }

    /// Installs `upper` as the socket's upper layer (`upper.rs`): from now
    /// on it takes the deliveries no subscriber takes, inside the engine
    /// turn. Deliveries that arrived before (a peer that joined first and
    /// sent at once, while this process was still between binding its
    /// socket and installing the layer) go to it first, in arrival order.
    ///
    /// Errors: `AlreadyExists` when the socket has one (one upper layer per
    /// endpoint).
    pub fn set_upper(&self, upper: Box<dyn UpperLayer<T::Addr>>) -> io::Result<()> {
        self.with_core(|c, now| {
            if c.upper.is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "CTP endpoint {} already serves an upper layer (a communicator or tagged endpoint): bind a socket of its own",
                        self.shared.name
                    ),
                ));
            }
            c.install_upper(upper, now);
            Ok(())
        })
    }

    /// Runs `f` on the upper layer (of type `U`) and the endpoint, under the
    /// engine lock, then lets the core route what changed and sends what
    /// was queued: one lock for the whole call. `now` is one clock reading.
    ///
    /// Panics if the socket has no upper layer of type `U` (a handle only
    /// calls it on the socket it installed its layer on).
    pub fn with_upper<U: 'static, R>(
        &self,
        f: impl FnOnce(&mut U, &mut Endpoint<T::Addr>, Instant) -> R,
    ) -> R {
        self.with_core(|c, now| {
            let u = upper_of::<T::Addr, U>(&mut c.upper);
            f(u, &mut c.ep, now)
        })
    }

    /// As [`CtpSocket::with_upper`], for a call that sends nothing of its
    /// own, such as posting a receive: the transmission held behind the
    /// last delivery (`CtpCore::defer`: the confirmation, waiting for the
    /// application's reply to carry it) stays held, unless `f` queued
    /// packets (then they go, with it). The hold still ends with the next
    /// call that may send, a wait, the second empty poll in a row, or
    /// 100 us (`DEFER_MAX`) after the delivery. An MPI rank that
    /// posts its next receive before it replies (libfabric's fabtests
    /// pingpong, Open MPI's persistent receives) thus sends one frame per
    /// message instead of two: the confirmation alone, then the reply.
    ///
    /// Panics as [`CtpSocket::with_upper`].
    pub fn with_upper_no_reply<U: 'static, R>(
        &self,
        f: impl FnOnce(&mut U, &mut Endpoint<T::Addr>, Instant) -> R,
    ) -> R {
        self.with_core_then(false, |c, now| {
            let u = upper_of::<T::Addr, U>(&mut c.upper);
            f(u, &mut c.ep, now)
        })
    }

    /// Waits through the runtime driver's one wait (the socket's wait
    /// policy: busy-poll, adaptive or block) until `check`, run on the
    /// upper layer of type `U` after each engine turn and each wake-up,
    /// returns a value; with [`Deadline::Now`], one nonblocking turn. What
    /// `check` queued in the endpoint is sent at once.
    ///
    /// A blocking wait ends a hold of the transmission behind the last
    /// delivery (`CtpCore::defer`) at once; a nonblocking turn only when it
    /// is the second in a row to find nothing (`CtpCore::polled`), so that
    /// an application polling for completions still sends its reply in the
    /// frame that carries the confirmation.
    ///
    /// Errors: `WouldBlock` ([`Deadline::Now`]) or `TimedOut` naming `what`
    /// when `check` gave nothing; link errors.
    ///
    /// Panics as [`CtpSocket::with_upper`].
    pub fn wait_upper<U: 'static, R>(
        &self,
        deadline: Deadline,
        what: &str,
        mut check: impl FnMut(&mut U, &mut Endpoint<T::Addr>, Instant) -> Option<R>,
    ) -> io::Result<R> {
        let slot = self.shared.tr.slot();
        let name = &self.shared.name;
        let poll = deadline == Deadline::Now;
        // Calls of `check`: a nonblocking turn checks before and after
        // its one engine poll.
        let mut calls = 0u8;
        self.shared.tr.driver().wait(
            slot,
            self.wait_policy(),
            deadline,
            None,
            &format_args!("{what} on {name}"),
            |e, _| {
                let now = link::time::now();
                let c = T::core(e, slot).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotConnected, "CTP endpoint gone")
                })?;
                calls = calls.saturating_add(1);
                // Back in the library to wait: what was held for the last
                // delivery goes on now (see `wait`).
                let mut resumed = !poll && calls == 1 && c.resume();
                let accepts = |c: &CtpCore<T::Addr>| c.upper.as_ref().is_none_or(|u| u.accepts());
                let held = !accepts(c);
                let u = upper_of::<T::Addr, U>(&mut c.upper);
                let r = check(u, &mut c.ep, now);
                if poll && (r.is_some() || calls == 2) {
                    // The poll's outcome.
                    resumed |= c.polled(r.is_some());
                }
                // Only when the check changed the endpoint (sent: timers to
                // cache, packets to send) or let held deliveries in: a
                // check that found nothing costs nothing more.
                let released = held && accepts(c);
                if resumed || released || c.ep.has_transmit() {
                    c.after_event();
                    T::touched(e, slot, now)?;
                }
                Ok(r)
            },
        )
    }

    /// Runs `f` on the protocol core (e.g. `set_broadcast_group`,
    /// `set_peer_timeout`, `received_ids`).
    pub fn with_endpoint<R>(&self, f: impl FnOnce(&mut Endpoint<T::Addr>) -> R) -> R {
        self.with_core(|c, _| f(&mut c.ep))
    }

    /// The receivers a broadcast must be confirmed by (at most 64); see
    /// [`Endpoint::set_broadcast_group`]. Errors: `Err(n)` for more than 64.
    pub fn set_broadcast_group(&self, group: Vec<T::Addr>) -> Result<(), usize> {
        self.with_endpoint(|e| e.set_broadcast_group(group))
    }

    /// Fixes the resend timeout for `peer` (no adaptation; zero disables
    /// resending), as the spec's `SetTimeout`.
    pub fn set_peer_timeout(&self, peer: T::Addr, timeout: Duration) {
        self.with_endpoint(|e| e.set_peer_timeout(peer, timeout))
    }

    /// Drops message `msg` from the sent-commands storage (no further
    /// resends, no error); packets of other messages take the window it
    /// held. Returns false if it was no longer stored.
    pub fn cancel(&self, msg: MsgId) -> bool {
        self.with_core(|c, now| c.ep.cancel(now, msg))
    }

    /// How blocking calls wait (busy-poll, blocking, adaptive).
    pub fn set_wait_policy(&self, wait: WaitPolicy) {
        *self.shared.wait.write().unwrap_or_else(|e| e.into_inner()) = wait;
    }

    /// The wait policy of blocking calls.
    pub fn wait_policy(&self) -> WaitPolicy {
        *self.shared.wait.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Busy-poll mode on or off (off = the default adaptive policy).
    pub fn set_busy_poll(&self, on: bool) {
        self.set_wait_policy(if on {
            WaitPolicy::BusyPoll
        } else {
            WaitPolicy::DEFAULT
        });
    }

    /// Drives the engine until `check` on the core returns a value or the
    /// deadline passes (`TimedOut`).
    fn wait<R>(
        &self,
        deadline: Deadline,
        what: &str,
        mut check: impl FnMut(&mut CtpCore<T::Addr>) -> Option<R>,
    ) -> io::Result<R> {
        let slot = self.shared.tr.slot();
        let name = &self.shared.name;
        let mut first = true;
        self.shared.tr.driver().wait(
            slot,
            self.wait_policy(),
            deadline,
            None,
            &format_args!("CTP {what} on {name}"),
            |e, _| {
                let c = T::core(e, slot).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotConnected, "CTP endpoint gone")
                })?;
                if std::mem::take(&mut first) && c.resume() {
                    // Back in the library: what was held for the last
                    // delivery (its confirmation, the confirmations that
                    // came with it) goes on now.
                    T::touched(e, slot, link::time::now())?;
                    let c = T::core(e, slot).expect("core");
                    return Ok(check(c));
                }
                Ok(check(c))
            },
        )
    }

    /// Sends `data` as command `command` (0..=32767) to `peer` with `options`
    /// (CTP spec "Options"). Returns once the message is stored: its packets
    /// are kept until confirmed; a failure arrives later as an error delivery.
    /// When the sent-commands storage is full it first drives the protocol
    /// until confirmations make room (at most `send_timeout`).
    ///
    /// Errors: [`SendError`] (`Full` after `send_timeout`).
    pub fn send(
        &self,
        command: u16,
        peer: T::Addr,
        data: &[u8],
        options: Options,
    ) -> Result<MsgId, SendError> {
        self.send_with(data.len() as u64, Some(peer), |ep, now| {
            ep.send(now, command, peer, data, options)
        })
    }

    /// As [`CtpSocket::send`], without copying `data`.
    pub fn send_vec(
        &self,
        command: u16,
        peer: T::Addr,
        data: Vec<u8>,
        options: Options,
    ) -> Result<MsgId, SendError> {
        let size = data.len() as u64;
        let mut data = Some(data);
        self.send_with(size, Some(peer), move |ep, now| {
            ep.send_vec(now, command, peer, data.take().expect("sent once"), options)
        })
    }

    /// Broadcasts `data` (UDP broadcast address / broadcast MAC); each
    /// receiver confirms. Errors: [`SendError::NoBroadcast`] without a
    /// broadcast address, and those of [`CtpSocket::send`].
    ///
    /// Every receiver confirms every packet: the ACK scheme that the MAK
    /// paper shows scaling worst with the number of receivers. For reliable
    /// multicast of messages to a named group (MAK's windowed ACK requests,
    /// NAK suppression, silent members reported by name) use the `mak`
    /// crate's `MakSocket`, on the same carriers (an EDP group MAC or an
    /// IPv4 multicast group).
    pub fn broadcast(
        &self,
        command: u16,
        data: &[u8],
        options: Options,
    ) -> Result<MsgId, SendError> {
        self.send_with(data.len() as u64, None, |ep, now| {
            let b = ep.broadcast_addr().ok_or(SendError::NoBroadcast)?;
            ep.send(now, command, b, data, options | Options::BROADCAST)
        })
    }

    /// Sends a ping (DelAfterError|NoResend|UniqueCommand, empty body).
    pub fn ping(&self, command: u16, peer: T::Addr) -> Result<MsgId, SendError> {
        self.send_with(0, None, |ep, now| ep.ping(now, command, peer))
    }

    /// Waits (driving the protocol) until the storage has room for `size`
    /// bytes and, with a `peer`, until fewer than `notsent_lowat` bytes to
    /// it are unsent (`Endpoint::has_room_to`), then runs `op` and sends
    /// what it queued.
    fn send_with(
        &self,
        size: u64,
        peer: Option<T::Addr>,
        mut op: impl FnMut(&mut Endpoint<T::Addr>, Instant) -> Result<MsgId, SendError>,
    ) -> Result<MsgId, SendError> {
        let slot = self.shared.tr.slot();
        // Fast path: room now (no wait, no clock beyond one read).
        let fast = self.shared.tr.driver().with(|e, now| {
            let c = T::core(e, slot)?;
            // No room: held confirmations may make some.
            let room = room_for(c, peer, size) || (c.settle() && room_for(c, peer, size));
            if !room {
                return None;
            }
            // The reply leaves together with what was held back for it.
            c.release();
            let r = op(&mut c.ep, now);
            c.after_event();
            let _ = T::touched(e, slot, now);
            Self::settle_after_send(e, slot, now);
            Some(r)
        });
        if let Some(r) = fast {
            return r;
        }
        self.shared.sends_waited.fetch_add(1, Ordering::Relaxed);
        let deadline = Deadline::from_timeout(self.shared.send_timeout);
        let room = self.wait(deadline, "send", |c| room_for(c, peer, size).then_some(()));
        match room {
            Ok(()) => self.shared.tr.driver().with(|e, now| {
                let c = T::core(e, slot).expect("a CTP socket's core lives as long as the socket");
                c.release();
                let r = op(&mut c.ep, now);
                c.after_event();
                let _ = T::touched(e, slot, now);
                Self::settle_after_send(e, slot, now);
                r
            }),
            Err(_) => Err(self.with_core(|c, _| SendError::Full {
                stored: c.ep.stored_bytes(),
                size,
                limit: c.ep.config().max_stored_bytes,
            })),
        }
    }

    /// After a send left: the confirmations that came with the last
    /// delivery go to the endpoint now (see `CtpCore::hold`), off the
    /// reply's path, and what they let through is sent.
    fn settle_after_send(e: &mut T::Engine, slot: SlotId, now: Instant) {
        if T::core(e, slot).is_some_and(|c| c.settle()) {
            let _ = T::touched(e, slot, now);
        }
    }

    /// Changes the routes and whether there are any.
    fn edit_routes(&self, f: impl FnOnce(&mut Routes<T>)) {
        let mut r = self
            .shared
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner());
        f(&mut r);
        let any = !r.by_command.is_empty() || r.default.is_some();
        self.shared.routed.store(any, Ordering::Release);
    }

    /// Registers `handler` for deliveries of `command` (data and errors about it).
    pub fn subscribe(
        &self,
        command: u16,
        handler: impl Fn(&CtpSocket<T>, Delivery<T::Addr>) + Send + Sync + 'static,
    ) {
        self.edit_routes(|r| {
            r.by_command.insert(command, Arc::new(handler));
        });
    }

    /// Removes the subscriber of `command`.
    pub fn unsubscribe(&self, command: u16) {
        self.edit_routes(|r| {
            r.by_command.remove(&command);
        });
    }

    /// Sets the default receiver: it gets deliveries no subscriber takes
    /// (spec "default receiver"). Without one they queue for
    /// [`CtpSocket::recv_delivery`].
    pub fn set_default_handler(
        &self,
        handler: impl Fn(&CtpSocket<T>, Delivery<T::Addr>) + Send + Sync + 'static,
    ) {
        self.edit_routes(|r| r.default = Some(Arc::new(handler)));
    }

    /// Removes the default receiver: unclaimed deliveries queue again.
    pub fn clear_default_handler(&self) {
        self.edit_routes(|r| r.default = None);
    }

    /// Takes the next delivery from the queue (deliveries no subscriber or
    /// default handler took), driving the protocol while it waits.
    /// `None` waits without limit.
    ///
    /// Errors: `TimedOut` when nothing arrived within `timeout`; link errors.
    pub fn recv_delivery(&self, timeout: Option<Duration>) -> io::Result<Delivery<T::Addr>> {
        let deadline = Deadline::from_timeout(timeout);
        self.wait(deadline, "receive", |c| c.pop()).map_err(|e| {
            if e.kind() == io::ErrorKind::TimedOut {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no CTP delivery on {} within {:?}",
                        self.shared.name,
                        timeout.unwrap_or_default()
                    ),
                )
            } else {
                e
            }
        })
    }

    /// The next queued delivery, if any, after one nonblocking progress step.
    pub fn try_recv_delivery(&self) -> Option<Delivery<T::Addr>> {
        match self.wait(Deadline::Now, "receive", |c| c.pop()) {
            Ok(d) => Some(d),
            Err(_) => {
                self.shared.tr.driver().rearm_slot(self.shared.tr.slot());
                None
            }
        }
    }

    /// Drives the protocol for `timeout` (receiving, confirming, resending,
    /// routing deliveries), e.g. to linger after the last send.
    ///
    /// Errors: link errors.
    pub fn poll(&self, timeout: Duration) -> io::Result<()> {
        let deadline = Deadline::from_timeout(Some(timeout));
        match self.wait(deadline, "poll", |_| None::<()>) {
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(()),
            r => r,
        }
    }

    /// Drives the protocol until message `msg` is confirmed (true) or no
    /// longer stored (error delivered, cancelled) or `timeout` passes.
    ///
    /// Returns true if `msg` left the storage within `timeout`. Errors: link errors.
    pub fn wait_confirmed(&self, msg: MsgId, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = Deadline::from_timeout(timeout);
        match self.wait(deadline, "wait for a confirmation", |c| {
            (!c.ep.is_pending(msg)).then_some(())
        }) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Drives the protocol until the sent-commands storage is empty or
    /// `timeout` passes; returns true if it emptied.
    ///
    /// Errors: link errors.
    pub fn flush(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = Deadline::from_timeout(timeout);
        match self.wait(deadline, "flush", |c| {
            (c.ep.storage_sizes().awaiting_confirmation == 0).then_some(())
        }) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Storage sizes and deliverer counts (spec `Get...Count`).
    pub fn status(&self) -> StorageSizes {
        let (mut s, queued) = self.with_core(|c, _| (c.ep.storage_sizes(), c.queued()));
        let (threads, busy, jobs) = self.shared.pool.counts();
        s.deliveries_queued += queued + jobs;
        s.busy_deliverers = busy;
        s.deliverers = threads;
        s
    }

    /// Protocol counters (after handing over what was held for the last
    /// delivery, like every call: see `CtpCore::hold`).
    pub fn stats(&self) -> Stats {
        self.with_core(|c, _| c.ep.stats())
    }

    /// Sends (of every kind: `send`, `send_vec`, `broadcast`) that found
    /// no room in the sent-commands storage and waited for confirmations
    /// to make some, ever. One relaxed atomic load, no lock: an
    /// application compares it around a send to learn whether the send
    /// waited (then failed messages may have made the room, and their
    /// error deliveries wait) without reading the clock twice per send.
    pub fn sends_waited(&self) -> u64 {
        self.shared.sends_waited.load(Ordering::Relaxed)
    }

    /// Transport counters.
    pub fn driver_stats(&self) -> CtpIoStats {
        let slot = self.shared.tr.slot();
        self.shared
            .tr
            .driver()
            .with_untimed(|e| T::io_stats(e, slot))
    }
}

/// The upper layer of type `U` in `upper`.
fn upper_of<P: PeerAddr, U: 'static>(upper: &mut Option<Box<dyn UpperLayer<P>>>) -> &mut U {
    upper
        .as_mut()
        .and_then(|u| {
            let u: &mut dyn Any = &mut **u;
            u.downcast_mut::<U>()
        })
        .expect("the socket's upper layer is of the handle's type")
}

runtime::slot_source!(impl<T: Transport> for CtpSocket<T>, |s| (s.shared.tr.driver(), s.shared.tr.slot()));

/// Whether a message of `size` bytes may be stored now: room in the
/// storage and, to a `peer`, fewer unsent bytes than `notsent_lowat`.
fn room_for<A: PeerAddr>(c: &CtpCore<A>, peer: Option<A>, size: u64) -> bool {
    match peer {
        Some(p) => c.ep.has_room_to(p, size),
        None => c.ep.has_room(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<X: Send + Sync>() {}

    #[test]
    fn sockets_are_send_and_sync() {
        send_sync::<CtpSocket<UdpTransport>>();
        send_sync::<CtpSocket<EdpTransport>>();
    }

    #[test]
    fn link_too_small_for_a_header_is_refused() {
        let clock = ::link::sim::SimClock::new();
        let (l, _) = ::link::sim::SimLink::pair(&clock, 30, Default::default(), Default::default());
        let rt = Runtime::with_link(Box::new(l), RuntimeConfig::default()).unwrap();
        let e = CtpSocket::bind_on(&rt, 5, CtpConfig::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("25-byte CTP header"), "{e}");
    }
}
