//! The per-host RST responder: answers a SYN to a port nobody owns with RST
//! (thesis ch. 5.2.9: "if no target socket was found, the reception hook
//! will discard the received packet after having informed its originator
//! with a packet carrying the RST flag").
//!
//! With one packet socket per ESP socket there is no kernel hook that sees
//! "no socket": instead every process that opens ESP sockets on an interface
//! runs one small thread ([`shared_responder`]) with a packet socket whose
//! BPF filter passes only SYN segments (SYN set, ACK clear), and tries to
//! take the control-port lease of ESP on that interface (port 0 of the ESP
//! ethertype). Only the holder answers, so each SYN draws at most one RST;
//! the others retry the lease every second and take over within about a
//! second when the holder exits or crashes. For each SYN the holder tests
//! whether the destination port's lease is free (binding it for an instant):
//! free means no listener, so it answers RST|ACK; taken means a listener (or
//! a stream) owns the port and answers itself.
//!
//! Limits: segments other than SYN for a dead socket are not answered (the
//! filter keeps established traffic away from the responder); a dead peer is
//! found by retransmission limits and keepalive instead.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use edp::link::packet::{FilterSpec, PacketConfig, PacketLink};
use edp::ports::{self, PortLease};
use edp::wire::ETH_HEADER_LEN;
use edp::Link;

use crate::conn::reset_frame;
use crate::wire::EspFrame;

/// How often a responder that does not hold the lease retries it.
pub const LEASE_RETRY: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(100);

/// Counters of a responder.
#[derive(Debug, Default)]
pub struct ResponderStats {
    /// RSTs sent.
    pub resets: AtomicU64,
    /// SYNs for owned ports (or seen while not holding the lease).
    pub ignored: AtomicU64,
}

/// A running responder thread; stops when dropped.
#[derive(Debug)]
pub struct Responder {
    stop: Arc<AtomicBool>,
    holder: Arc<AtomicBool>,
    stats: Arc<ResponderStats>,
    thread: Option<JoinHandle<()>>,
}

impl Responder {
    /// Opens the SYN-only packet socket on `iface` and starts the thread.
    ///
    /// Errors: those of `PacketLink::open` (missing CAP_NET_RAW, unknown
    /// interface) and of attaching the filter.
    pub fn spawn(iface: &str, ethertype: u16) -> io::Result<Responder> {
        let link = PacketLink::open(
            iface,
            &PacketConfig {
                ethertype,
                rcvbuf: 256 << 10,
                sndbuf: 256 << 10,
                // Port 0 first (no ESP traffic), then the SYN-only program.
                filter: Some(FilterSpec::port(ethertype, 0)),
                ..PacketConfig::default()
            },
        )?;
        let fd = link.raw_fd().expect("packet link has a descriptor");
        crate::bpf::attach(fd, &mut crate::bpf::syn_filter(ethertype, None))?;
        let stop = Arc::new(AtomicBool::new(false));
        let holder = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ResponderStats::default());
        let (s, h, st) = (stop.clone(), holder.clone(), stats.clone());
        let name = iface.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("esp-rst-{iface}"))
            .spawn(move || run(link, name, ethertype, s, h, st))?;
        Ok(Responder {
            stop,
            holder,
            stats,
            thread: Some(thread),
        })
    }

    /// True while this process's responder holds the lease and answers.
    pub fn is_holder(&self) -> bool {
        self.holder.load(Ordering::Relaxed)
    }

    /// Counters.
    pub fn stats(&self) -> &ResponderStats {
        &self.stats
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    mut link: PacketLink,
    iface: String,
    ethertype: u16,
    stop: Arc<AtomicBool>,
    holder: Arc<AtomicBool>,
    stats: Arc<ResponderStats>,
) {
    let max = link.mtu() + ETH_HEADER_LEN;
    let mut rx = vec![0u8; max + 64];
    let mut tx = vec![0u8; 128];
    let mut lease: Option<PortLease> = None;
    let mut next_try = Instant::now();
    let fd = link.raw_fd().expect("packet link has a descriptor");
    let me = link.mac();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if lease.is_none() && now >= next_try {
            match PortLease::control(&iface, ethertype) {
                Ok(l) => {
                    lease = Some(l);
                    holder.store(true, Ordering::Relaxed);
                }
                Err(e) => {
                    if e.kind() != io::ErrorKind::AddrInUse {
                        log::warn!("ESP RST responder on {iface}: {e}");
                    }
                    next_try = now + LEASE_RETRY;
                }
            }
        }
        if let Err(e) = edp::event::poll_fd(fd, libc::POLLIN, Some(TICK)) {
            log::warn!("ESP RST responder on {iface}: poll: {e}");
            std::thread::sleep(TICK);
        }
        loop {
            let n = match link.recv(&mut rx) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("ESP RST responder on {iface}: recv: {e}");
                    break;
                }
            };
            if lease.is_none() {
                stats.ignored.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let Ok(f) = EspFrame::parse(&rx[..n], ethertype, max) else {
                continue;
            };
            if !f.esp.flags.syn() || f.esp.flags.ack() || f.eth.dst != me {
                continue;
            }
            let port = f.esp.dst_port;
            // Port 0 is the responder's own; any other: free lease = no owner.
            let unowned = port == 0 || ports::allocate(&iface, ethertype, port).is_ok();
            if !unowned {
                stats.ignored.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if let Some(len) = reset_frame(&mut tx, me, f.eth.src, ethertype, &f.esp) {
                match link.send(&tx[..len]) {
                    Ok(()) => {
                        stats.resets.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => log::debug!("ESP RST responder on {iface}: RST not sent: {e}"),
                }
            }
        }
    }
    holder.store(false, Ordering::Relaxed);
}

type Key = (u64, String, u16);

/// Inode of the calling thread's network namespace (responders are per
/// namespace, like the interfaces they serve).
fn netns_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0)
}

fn registry() -> &'static Mutex<HashMap<Key, Weak<Responder>>> {
    static R: std::sync::OnceLock<Mutex<HashMap<Key, Weak<Responder>>>> =
        std::sync::OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The process's responder for (`iface`, `ethertype`), started on first use
/// and stopped when the last holder of the `Arc` drops it.
///
/// Errors: as [`Responder::spawn`].
pub fn shared_responder(iface: &str, ethertype: u16) -> io::Result<Arc<Responder>> {
    let key = (netns_id(), iface.to_string(), ethertype);
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = reg.get(&key).and_then(Weak::upgrade) {
        return Ok(r);
    }
    reg.retain(|_, w| w.strong_count() > 0);
    let r = Arc::new(Responder::spawn(iface, ethertype)?);
    reg.insert(key, Arc::downgrade(&r));
    Ok(r)
}
