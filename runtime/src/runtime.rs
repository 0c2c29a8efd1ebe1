//! [`Runtime`]: the handle on one I/O runtime, and the process registry
//! that shares runtimes per (network namespace, interface, link
//! configuration).

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use crate::ports::{self, PortLease};
use link::eth::MacAddr;
use link::fault::FaultLink;
use link::Link;
use link::{PacketConfig, PacketLink};

use crate::config::{Progress, RuntimeConfig};
use crate::demux::DemuxKey;
use crate::driver::Driver;
use crate::engine::EthEngine;
use crate::responder::UnclaimedHandler;
use crate::slot::SlotId;
use crate::socket::Socket;
use crate::stats::EngineStats;

/// What a runtime knows about itself without its lock.
#[derive(Debug)]
struct Info {
    iface: Option<String>,
    mac: MacAddr,
    mtu: usize,
    edp_ethertype: u16,
    esp_ethertype: u16,
    authenticated: bool,
}

/// A handle on a runtime (cheap to clone). See the module documentation.
#[derive(Clone)]
pub struct Runtime {
    driver: Arc<Driver<EthEngine>>,
    info: Arc<Info>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("iface", &self.info.iface)
            .field("mac", &self.info.mac)
            .field("mtu", &self.info.mtu)
            .finish()
    }
}

/// Registry key: network namespace inode, interface, link configuration.
type Key = (u64, String, String);

fn registry() -> &'static Mutex<HashMap<Key, Weak<Driver<EthEngine>>>> {
    static R: OnceLock<Mutex<HashMap<Key, Weak<Driver<EthEngine>>>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The calling thread's network namespace (inode of /proc/thread-self/ns/net):
/// runtimes are per namespace, like the interfaces they use.
fn netns_id() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0)
}

impl Runtime {
    /// The process's runtime for `iface` and `config` in the calling
    /// thread's network namespace, opened on first use (see
    /// [`Runtime::open`]) and shared until its last socket is gone.
    ///
    /// Errors: as [`Runtime::open`].
    pub fn shared(iface: &str, config: &RuntimeConfig) -> io::Result<Runtime> {
        // The config's Debug form hides the key (AuthKey(..)): the key's
        // fingerprint joins the registry key, so that sockets under two
        // different keys (or a key from the environment that changed) never
        // share a runtime and its first key.
        let auth = config.link.auth.resolve()?.map(|k| k.fingerprint());
        let key = (
            netns_id(),
            iface.to_string(),
            format!("{:?} {:?}", config, auth),
        );
        let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = reg.get(&key).and_then(Weak::upgrade) {
            let info = {
                let g = d.lock();
                Arc::new(Info {
                    iface: Some(iface.to_string()),
                    mac: g.engine.st.mac,
                    mtu: g.engine.st.mtu,
                    edp_ethertype: g.engine.st.edp_ethertype,
                    esp_ethertype: g.engine.st.esp_ethertype,
                    authenticated: g.engine.st.auth.is_some(),
                })
            };
            return Ok(Runtime { driver: d, info });
        }
        let rt = Self::open(iface, config.clone())?;
        reg.retain(|_, w| w.strong_count() > 0);
        reg.insert(key, Arc::downgrade(&rt.driver));
        Ok(rt)
    }

    /// Opens a new runtime on `iface`: one packet socket receiving both
    /// ethertypes of `config.link`, its filter passing nothing until
    /// sockets bind, and the host responder role (echo) when the control
    /// lease is free.
    ///
    /// Errors: `PermissionDenied` naming CAP_NET_RAW and the `setcap`
    /// command; `NotFound` for an unknown interface; socket option errors;
    /// eventfd errors.
    pub fn open(iface: &str, config: RuntimeConfig) -> io::Result<Runtime> {
        let lc = &config.link;
        let pc = PacketConfig {
            ethertype: link::ETH_P_ALL,
            rcvbuf: lc.socket_buffer,
            sndbuf: lc.socket_buffer,
            rx_ring: lc.rx_ring,
            qdisc_bypass: lc.qdisc_bypass,
            filter: None,
            // Nothing passes until the engine installs its port filter.
            program: Some(vec![netcore::bpf::Insn::new(
                netcore::bpf::op::RET,
                0,
                0,
                netcore::bpf::DROP,
            )]),
            ..PacketConfig::default()
        };
        let packet = PacketLink::open(iface, &pc)?;
        let link: Box<dyn Link> = match &lc.fault {
            Some(f) => Box::new(FaultLink::try_new(packet, f.clone()).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("fault injection: {e}"))
            })?),
            None => Box::new(packet),
        };
        let rt = Self::build(link, Some(iface.to_string()), config)?;
        rt.with_engine(|e, now| {
            if e.st.responder.enable_echo(now) {
                e.st.filter_stale = true;
            }
            e.refresh_filter();
        });
        Ok(rt)
    }

    /// A runtime over any link (a `SimLink`, a `UdpLink`, a `FaultLink`
    /// around a `PacketLink`, ...). Ports are not leased across processes
    /// (there is no interface name to lease them on); the host responder
    /// role is off.
    ///
    /// Errors: eventfd errors; a bad cluster key in the environment.
    pub fn with_link(link: Box<dyn Link>, config: RuntimeConfig) -> io::Result<Runtime> {
        Self::build(link, None, config)
    }

    fn build(
        link: Box<dyn Link>,
        iface: Option<String>,
        config: RuntimeConfig,
    ) -> io::Result<Runtime> {
        // The clock's one-time calibration (`link::time::now`) happens
        // here, not in the first message's path.
        let _ = link::time::now();
        let link_fd = link
            .as_fd()
            .map(|fd| fd.try_clone_to_owned())
            .transpose()
            .map_err(|e| io::Error::other(format!("dup of the link descriptor: {e}")))?;
        let auth = config.link.auth.resolve()?;
        let overhead = if auth.is_some() {
            crate::auth::TRAILER_LEN
        } else {
            0
        };
        let info = Arc::new(Info {
            iface: iface.clone(),
            mac: link.mac(),
            mtu: link.mtu().saturating_sub(overhead),
            edp_ethertype: config.link.edp_ethertype,
            esp_ethertype: config.link.esp_ethertype,
            authenticated: auth.is_some(),
        });
        let name = match &iface {
            Some(i) => format!("cn-rt-{i}"),
            None => "cn-rt".to_string(),
        };
        let engine = EthEngine::new(
            link,
            iface,
            config.link.edp_ethertype,
            config.link.esp_ethertype,
            auth.map(crate::auth::FrameAuth::new),
        );
        let driver = Driver::new(
            engine,
            link_fd,
            config.progress,
            name,
            crate::service::spawn,
        )?;
        if matches!(config.progress, Progress::WhenIdle { .. }) {
            // Idle progress needs the thread from the start: a listener or
            // the echo role has no deadline that would start it.
            driver.ensure_service();
        }
        Ok(Runtime { driver, info })
    }

    /// The interface name (`None` for runtimes over in-memory links).
    pub fn iface(&self) -> Option<&str> {
        self.info.iface.as_deref()
    }

    /// This end's MAC address.
    pub fn mac(&self) -> MacAddr {
        self.info.mac
    }

    /// Link MTU: the largest Ethernet payload, bytes.
    pub fn mtu(&self) -> usize {
        self.info.mtu
    }

    /// EDP's ethertype on this runtime.
    pub fn edp_ethertype(&self) -> u16 {
        self.info.edp_ethertype
    }

    /// ESP's ethertype on this runtime.
    pub fn esp_ethertype(&self) -> u16 {
        self.info.esp_ethertype
    }

    /// Whether this runtime has a cluster key (frame authentication on:
    /// every frame it sends is sealed, every frame it receives checked).
    pub fn authenticated(&self) -> bool {
        self.info.authenticated
    }

    /// The driver (for socket handles).
    pub fn driver(&self) -> &Arc<Driver<EthEngine>> {
        &self.driver
    }

    /// Runs `f` on the engine (locked) and reports what changed.
    pub fn with_engine<T>(&self, f: impl FnOnce(&mut EthEngine, Instant) -> T) -> T {
        self.driver.with(f)
    }

    /// [`Runtime::with_engine`] without reading the clock.
    pub fn with_engine_untimed<T>(&self, f: impl FnOnce(&mut EthEngine) -> T) -> T {
        self.driver.with_untimed(f)
    }

    /// Whether the runtime's link delivers only frames as they were sent
    /// ([`Link::frame_integrity`]: true for packet and UDP links, false
    /// for fault-injecting and simulated ones).
    pub fn frame_integrity(&self) -> bool {
        self.with_engine_untimed(|e| e.link().frame_integrity())
    }

    /// Counters of the engine.
    pub fn stats(&self) -> EngineStats {
        self.with_engine_untimed(|e| e.stats())
    }

    /// The kernel's counters of the packet socket (frames passed by the
    /// filter, frames dropped for lack of room), since it was opened.
    pub fn kernel_stats(&self) -> Option<link::KernelStats> {
        self.with_engine_untimed(|e| e.link().kernel_stats())
    }

    /// One nonblocking turn: receive what is ready, fire due timers,
    /// transmit. For applications that drive the runtime from their own
    /// event loop.
    ///
    /// Errors: fatal link errors.
    pub fn drive(&self) -> io::Result<()> {
        self.with_engine(|e, now| e.poll(now, None).map(|_| ()))
    }

    /// Takes `port` of `ethertype` for a new socket: an exclusive lease
    /// across the processes of this network namespace (port 0: the next
    /// free ephemeral port), or, on runtimes without an interface, a port
    /// no slot of this runtime uses. Returns the port and its lease.
    ///
    /// Errors: `AddrInUse` naming the port when it is taken (here or by
    /// another process), or when no ephemeral port is free.
    pub fn take_port(&self, ethertype: u16, port: u16) -> io::Result<(u16, Option<PortLease>)> {
        match self.iface() {
            Some(iface) => match ports::allocate(iface, ethertype, port) {
                Ok(lease) => Ok((lease.port(), Some(lease))),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && port != 0 => {
                    // Held by this runtime's own connections only (closing
                    // ones, or accepted ones whose listener is gone): a new
                    // listener or socket may take the port key again, as
                    // TCP's SO_REUSEADDR allows for a closed listener.
                    let reuse = self.with_engine_untimed(|e| e.reusable_lease(ethertype, port));
                    match reuse {
                        Some(l) => Ok((port, Some(l))),
                        None => Err(e),
                    }
                }
                Err(e) => Err(e),
            },
            None => self.with_engine_untimed(|e| {
                if port != 0 {
                    if e.st.demux.uses_port(ethertype, port) {
                        return Err(io::Error::new(
                            io::ErrorKind::AddrInUse,
                            format!("port {port} (ethertype {ethertype:#06x}) is already in use on this link"),
                        ));
                    }
                    return Ok((port, None));
                }
                let span = (ports::EPHEMERAL_LAST - ports::EPHEMERAL_FIRST) as u32 + 1;
                let start = rand::random::<u32>() % span;
                for i in 0..span {
                    let p = ports::EPHEMERAL_FIRST + ((start + i) % span) as u16;
                    if !e.st.demux.uses_port(ethertype, p) {
                        return Ok((p, None));
                    }
                }
                Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "no free ephemeral port on this link",
                ))
            }),
        }
    }

    /// Adds `socket` under `key` with its port `lease`; returns its slot.
    ///
    /// Errors: `AddrInUse` when the key is taken in this runtime.
    pub fn insert(
        &self,
        key: DemuxKey,
        socket: Box<dyn Socket>,
        lease: Option<PortLease>,
    ) -> io::Result<SlotId> {
        self.with_engine_untimed(|e| e.insert(key, socket, lease))
    }

    /// The handle of `slot` is gone: remove the socket or let it linger.
    pub fn release(&self, slot: SlotId) {
        let mut g = self.driver.lock();
        let now = Instant::now();
        self.driver.forget(&mut g, slot);
        g.engine.release(slot, now);
        self.driver.notify(&mut g);
    }

    /// Installs the ESP crate's answer to unclaimed ESP segments (RST) and
    /// tries the host's ESP control lease (the responder role: echo and RST for the host).
    pub fn enable_esp_responder(&self, handler: Box<dyn UnclaimedHandler>) {
        self.with_engine(|e, now| {
            e.st.responder.enable_esp(handler, now);
            e.st.filter_stale = true;
            e.refresh_filter();
        });
    }

    /// Whether this runtime answers echo requests for the host (holds the
    /// EDP control lease).
    pub fn holds_echo_lease(&self) -> bool {
        self.with_engine_untimed(|e| e.st.responder.holds_edp())
    }

    /// Whether this runtime answers SYNs to ports nobody owns for the host
    /// (holds the ESP control lease).
    pub fn holds_rst_lease(&self) -> bool {
        self.with_engine_untimed(|e| e.st.responder.holds_esp())
    }

    /// Whether the ESP responder role is installed (by any ESP socket).
    pub fn has_esp_responder(&self) -> bool {
        self.with_engine_untimed(|e| e.st.responder.esp_enabled())
    }

    /// Starts receiving frames sent to the Ethernet group `group` (for
    /// multicast); see [`Link::join_group`].
    ///
    /// Errors: those of the link.
    pub fn join_group(&self, group: MacAddr) -> io::Result<()> {
        self.with_engine_untimed(|e| e.link_mut().join_group(group))
    }

    /// Stops receiving frames for `group`.
    ///
    /// Errors: those of the link.
    pub fn leave_group(&self, group: MacAddr) -> io::Result<()> {
        self.with_engine_untimed(|e| e.link_mut().leave_group(group))
    }

    /// Whether two handles are the same runtime.
    pub fn same(&self, other: &Runtime) -> bool {
        Arc::ptr_eq(&self.driver, &other.driver)
    }
}
