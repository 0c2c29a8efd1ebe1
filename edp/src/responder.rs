//! One responder per host, interface and ethertype, held by whichever
//! process owns a port lease: the mechanism behind the EDP echo responder
//! ([`crate::echo`], control port 0) and the ESP RST responder (`esp`
//! crate, thesis ch. 5.2.9).
//!
//! Every process that uses an interface runs one small thread per
//! (network namespace, interface, ethertype, kind) ([`shared`]) with its own
//! packet socket filtered on the responder's port ([`open_link`]), and tries
//! to take that port's lease ([`crate::ports`]). Only the holder answers, so
//! each frame draws at most one answer; the others retry the lease every
//! [`LEASE_RETRY`] and so take over within about a second when the holder
//! exits or crashes (the kernel releases its lease with its descriptors).
//!
//! The thread drops its capabilities at start (the packet socket is opened
//! before, in the calling thread, which needs CAP_NET_RAW), sleeps in
//! ppoll(2) on the packet socket and an eventfd, and is stopped and joined
//! when its [`Responder`] is dropped.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::event::{poll_fds, recv_ready};
use crate::link::packet::{FilterSpec, PacketConfig, PacketLink};
use crate::link::Link;
use crate::ports::{self, PortLease};
use crate::wire::{CONTROL_PORT, ETH_HEADER_LEN};

/// How often a responder that does not hold its lease retries it.
pub const LEASE_RETRY: Duration = Duration::from_secs(1);
/// Socket receive and send buffer of a responder's packet socket, in bytes.
pub const RESPONDER_SOCKET_BUFFER: usize = 256 << 10;
/// Bytes beyond the largest frame (MTU + Ethernet header) in the receive
/// buffer, so an oversized frame arrives whole and is rejected as too long
/// rather than parsed truncated; the reply buffer has the same size.
const SLACK: usize = 64;

/// What a responder's handler did with one received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Send the answer of this many bytes written to the reply buffer.
    Reply(usize),
    /// Not answered, on purpose (counted in [`ResponderStats::ignored`]):
    /// e.g. a group-addressed request, or a port that has an owner.
    Ignored,
    /// Not answered and not counted: malformed or not the kind of frame the
    /// responder answers.
    Dropped,
}

/// Counters of a responder.
#[derive(Debug, Default)]
pub struct ResponderStats {
    /// Answers sent (echo replies, RSTs).
    pub replies: AtomicU64,
    /// Frames not answered on purpose ([`Handled::Ignored`]) or received
    /// while another process held the lease.
    pub ignored: AtomicU64,
}

/// What a responder serves: its interface, ethertype, the port whose lease
/// it must hold to answer, and names for its thread and log messages.
#[derive(Debug, Clone, Copy)]
pub struct ResponderSpec<'a> {
    /// Interface name, e.g. "eth0".
    pub iface: &'a str,
    /// Ethertype of the protocol served.
    pub ethertype: u16,
    /// Port whose lease the responder holds while answering
    /// ([`CONTROL_PORT`] uses [`PortLease::control`]).
    pub port: u16,
    /// Thread name prefix (the interface is appended), e.g. "edp-echo".
    pub thread: &'static str,
    /// Subject of log messages (" on `<iface>`" is appended), e.g. "echo
    /// responder".
    pub what: &'static str,
}

/// Opens the packet socket of a responder on `iface` for `ethertype`,
/// filtered on EDP/ESP destination `port` (the ports sit at the same offset
/// in both headers), with [`RESPONDER_SOCKET_BUFFER`]-byte buffers. Call it
/// in a thread with CAP_NET_RAW; a caller may attach a narrower filter
/// before handing the link to [`Responder::spawn`].
///
/// Errors: those of [`PacketLink::open`] (missing CAP_NET_RAW, unknown
/// interface, attaching the filter).
pub fn open_link(iface: &str, ethertype: u16, port: u16) -> io::Result<PacketLink> {
    PacketLink::open(
        iface,
        &PacketConfig {
            ethertype,
            rcvbuf: RESPONDER_SOCKET_BUFFER,
            sndbuf: RESPONDER_SOCKET_BUFFER,
            filter: Some(FilterSpec::port(ethertype, port)),
            ..PacketConfig::default()
        },
    )
}

/// A running responder thread; stopped and joined on drop.
#[derive(Debug)]
pub struct Responder {
    stop: Arc<AtomicBool>,
    /// eventfd that wakes the thread at once when it must stop.
    wake: Arc<OwnedFd>,
    holder: Arc<AtomicBool>,
    stats: Arc<ResponderStats>,
    thread: Option<JoinHandle<()>>,
}

impl Responder {
    /// Starts the responder thread on `link` (see [`open_link`]). The thread
    /// drops its capabilities, tries to take the lease of `spec.port`
    /// (again every [`LEASE_RETRY`] while another process holds it), and
    /// while it holds the lease calls `handler(frame, link, reply)` for each
    /// received frame; `reply` holds MTU + Ethernet header + 64 bytes, and a
    /// [`Handled::Reply`] answer written there is sent on `link`. Frames
    /// received without the lease are counted as ignored and not handled.
    ///
    /// Errors: eventfd(2) and thread spawn errors.
    pub fn spawn<H>(link: PacketLink, spec: &ResponderSpec<'_>, handler: H) -> io::Result<Responder>
    where
        H: FnMut(&[u8], &dyn Link, &mut [u8]) -> Handled + Send + 'static,
    {
        // SAFETY: plain eventfd(2) call; result checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor we own.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        let shared = Shared {
            stop: Arc::new(AtomicBool::new(false)),
            wake,
            holder: Arc::new(AtomicBool::new(false)),
            stats: Arc::new(ResponderStats::default()),
        };
        let (stop, wake, holder, stats) = (
            shared.stop.clone(),
            shared.wake.clone(),
            shared.holder.clone(),
            shared.stats.clone(),
        );
        let lease = LeaseTarget {
            iface: spec.iface.to_string(),
            ethertype: spec.ethertype,
            port: spec.port,
            what: spec.what,
        };
        let thread = std::thread::Builder::new()
            .name(format!("{}-{}", spec.thread, spec.iface))
            .spawn(move || run(link, lease, shared, handler))?;
        Ok(Responder {
            stop,
            wake,
            holder,
            stats,
            thread: Some(thread),
        })
    }

    /// True while this responder holds its lease (answers frames).
    pub fn is_holder(&self) -> bool {
        self.holder.load(Ordering::Relaxed)
    }

    /// The responder's counters.
    pub fn stats(&self) -> &ResponderStats {
        &self.stats
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to our eventfd.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            );
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// State the thread shares with its [`Responder`].
struct Shared {
    stop: Arc<AtomicBool>,
    wake: Arc<OwnedFd>,
    holder: Arc<AtomicBool>,
    stats: Arc<ResponderStats>,
}

/// The lease the thread must hold to answer.
struct LeaseTarget {
    iface: String,
    ethertype: u16,
    port: u16,
    what: &'static str,
}

impl LeaseTarget {
    fn take(&self) -> io::Result<PortLease> {
        if self.port == CONTROL_PORT {
            PortLease::control(&self.iface, self.ethertype)
        } else {
            ports::allocate(&self.iface, self.ethertype, self.port)
        }
    }
}

fn run<H>(mut link: PacketLink, target: LeaseTarget, sh: Shared, mut handler: H)
where
    H: FnMut(&[u8], &dyn Link, &mut [u8]) -> Handled,
{
    let (iface, what) = (&target.iface, target.what);
    if let Err(e) = crate::privilege::drop_capabilities() {
        log::debug!("{what} on {iface}: could not drop capabilities: {e}");
    }
    let len = link.mtu() + ETH_HEADER_LEN + SLACK;
    let mut rx = vec![0u8; len];
    let mut tx = vec![0u8; len];
    let mut lease: Option<PortLease> = None;
    let mut next_try = Instant::now();
    let fds = [
        link.raw_fd().expect("packet link has a descriptor"),
        sh.wake.as_raw_fd(),
    ];
    while !sh.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if lease.is_none() && now >= next_try {
            match target.take() {
                Ok(l) => {
                    log::debug!("{what} on {iface}: holding port {}", target.port);
                    lease = Some(l);
                    sh.holder.store(true, Ordering::Relaxed);
                }
                Err(e) => {
                    if e.kind() != io::ErrorKind::AddrInUse {
                        log::warn!("{what} on {iface}: {e}");
                    }
                    next_try = now + LEASE_RETRY;
                }
            }
        }
        // Sleep until a frame, a stop request, or the next lease attempt.
        let timeout = match lease {
            Some(_) => None,
            None => Some(next_try.saturating_duration_since(Instant::now())),
        };
        if let Err(e) = poll_fds(&fds, libc::POLLIN, timeout) {
            log::warn!("{what} on {iface}: poll: {e}");
            std::thread::sleep(Duration::from_millis(100));
        }
        loop {
            let n = match recv_ready(&mut link, &mut rx) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    log::warn!("{what} on {iface}: recv: {e}");
                    break;
                }
            };
            if lease.is_none() {
                sh.stats.ignored.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match handler(&rx[..n], &link, &mut tx) {
                Handled::Reply(len) => match link.send(&tx[..len]) {
                    Ok(()) => {
                        sh.stats.replies.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => log::debug!("{what} on {iface}: answer not sent: {e}"),
                },
                Handled::Ignored => {
                    sh.stats.ignored.fetch_add(1, Ordering::Relaxed);
                }
                Handled::Dropped => {}
            }
        }
    }
    sh.holder.store(false, Ordering::Relaxed);
}

/// Registry key: network namespace inode, interface, ethertype, kind.
type Key = (u64, String, u16, &'static str);

fn registry() -> &'static Mutex<HashMap<Key, Weak<Responder>>> {
    static R: OnceLock<Mutex<HashMap<Key, Weak<Responder>>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Identity of the calling thread's network namespace (its inode number):
/// responders are per namespace, like the interfaces they serve.
fn netns_id() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// The process's responder of kind `spec.thread` for (network namespace of
/// the calling thread, `spec.iface`, `spec.ethertype`): the running one if
/// any handle to it is still alive, else the one `start` returns, which is
/// then shared until its last handle is dropped.
///
/// Errors: those of `start`.
pub fn shared<F>(spec: &ResponderSpec<'_>, start: F) -> io::Result<Arc<Responder>>
where
    F: FnOnce() -> io::Result<Responder>,
{
    let key = (
        netns_id(),
        spec.iface.to_string(),
        spec.ethertype,
        spec.thread,
    );
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = reg.get(&key).and_then(Weak::upgrade) {
        return Ok(r);
    }
    reg.retain(|_, w| w.strong_count() > 0);
    let r = Arc::new(start()?);
    reg.insert(key, Arc::downgrade(&r));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_takes_control_or_numbered_port() {
        let ctl = LeaseTarget {
            iface: format!("rsp-test-{}", std::process::id()),
            ethertype: 0x88b5,
            port: CONTROL_PORT,
            what: "test",
        };
        let held = ctl.take().unwrap();
        assert_eq!(held.port(), CONTROL_PORT);
        assert_eq!(ctl.take().unwrap_err().kind(), io::ErrorKind::AddrInUse);
        drop(held);
        assert_eq!(ctl.take().unwrap().port(), CONTROL_PORT);
        let numbered = LeaseTarget { port: 7, ..ctl };
        let held = numbered.take().unwrap();
        assert_eq!(held.port(), 7);
        assert_eq!(
            numbered.take().unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
    }
}
