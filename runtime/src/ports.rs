//! Exclusive port ownership across processes: port *leases*.
//!
//! A port on an (interface, ethertype) belongs to whoever holds its lease;
//! the kernel releases a lease when its holder closes it or dies, however
//! it dies (no lock-file cleanup, no daemon). Two lease spaces exist; every
//! process of a host uses the same one (the lease directory's existence
//! decides):
//!
//! - **Privileged** (when the lease directory exists: `$CLUSTERNET_LEASE_DIR`,
//!   else [`DEFAULT_LEASE_DIR`], created by `scripts/install-lease-dir.sh`
//!   with mode 2770, owner root, group `clusternet`): a lease is an
//!   open-file-description lock (`F_OFD_SETLK`, fcntl(2)) on the file
//!   `<dir>/<netns inode>/<iface>/<ethertype hex>/<port>`. Only root and
//!   members of the directory's group can open those files, so a process
//!   without that access (a user without `CAP_NET_RAW`, who could not use a
//!   port anyway) cannot hold a lease that blocks root: no squatting of
//!   servers' ports, of the ephemeral range, or of the control port of the
//!   echo/RST responder.
//! - **Abstract** (no lease directory; the default of a machine where the
//!   install script never ran, of tests and of development): a lease is
//!   the abstract Unix socket named `"\0clusternet/<iface>/<ethertype
//!   hex>/<port>"` (unix(7), "abstract namespace"). Binding it is atomic and
//!   exclusive among the processes of the network namespace and needs no
//!   setup, but any local user can bind such names: a user without
//!   privilege can squat ports. Use the privileged space on shared hosts.
//!
//! A process whose host uses the privileged space but that cannot open
//! the directory gets `PermissionDenied` naming the directory and what to
//! do; it never falls back to the abstract space (two spaces at once would
//! let two processes own one port).
//!
//! Leases are per network namespace, like the interfaces they name. EDP and
//! ESP share this module, each with its own ethertype, so their port spaces
//! are independent (as TCP and UDP ports are).
//!
//! Besides taking leases, [`is_held`] tells whether some process holds a
//! port (without taking it, so a process binding at that moment is never
//! disturbed) and [`held_ports`] lists the held ports of an interface (the
//! host responder excludes them from its kernel filter).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use nix::fcntl::{fcntl, FcntlArg};

/// Port 0 of every ethertype is reserved for control messages (thesis
/// ch. 4.2.5): EDP echo, and the host's control lease
/// ([`PortLease::control`]).
pub const CONTROL_PORT: u16 = 0;
/// First ephemeral port (RFC 6335 dynamic range: 49152..=65535).
pub const EPHEMERAL_FIRST: u16 = 49152;
/// Last ephemeral port.
pub const EPHEMERAL_LAST: u16 = 65535;
/// Lease directory used when `$CLUSTERNET_LEASE_DIR` is not set (its
/// existence selects the privileged lease space).
pub const DEFAULT_LEASE_DIR: &str = "/run/clusternet/leases";
/// Environment variable naming the lease directory.
pub const LEASE_DIR_ENV: &str = "CLUSTERNET_LEASE_DIR";

/// Where this host's leases live (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseSpace {
    /// Abstract Unix socket names (no setup; squattable).
    Abstract,
    /// Locked files under this directory (root and its group only).
    Directory(PathBuf),
}

/// The process's lease space, decided once: the directory of
/// `$CLUSTERNET_LEASE_DIR` or [`DEFAULT_LEASE_DIR`] when it exists (even
/// when this process cannot open it), otherwise the abstract space.
pub fn lease_space() -> &'static LeaseSpace {
    static S: OnceLock<LeaseSpace> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::var_os(LEASE_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_LEASE_DIR));
        if std::fs::symlink_metadata(&dir).is_ok() {
            tracing::debug!(dir = %dir.display(), "port leases: privileged directory");
            LeaseSpace::Directory(dir)
        } else {
            LeaseSpace::Abstract
        }
    })
}

/// What keeps a lease alive.
#[derive(Debug)]
enum Hold {
    Abstract(#[allow(dead_code)] UnixDatagram),
    File(#[allow(dead_code)] File),
}

/// Ownership of one port; the port is released when the last clone is
/// dropped (or the process exits, however it exits). Clones share the
/// lease: an ESP listener and the connections it accepted hold one port.
#[derive(Debug, Clone)]
pub struct PortLease {
    _hold: Arc<Hold>,
    iface: String,
    ethertype: u16,
    port: u16,
}

impl PortLease {
    /// The leased port.
    pub fn port(&self) -> u16 {
        self.port
    }
    /// Interface name the lease is for.
    pub fn iface(&self) -> &str {
        &self.iface
    }
    /// Ethertype (protocol) the lease is for.
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// Tries to take the control port (port 0) of `iface` / `ethertype`:
    /// only its holder answers echo requests and RSTs for the host (see
    /// the runtime's responder role).
    ///
    /// Errors: `AddrInUse` when another socket holds it; as [`allocate`].
    pub fn control(iface: &str, ethertype: u16) -> io::Result<PortLease> {
        try_lease(iface, ethertype, CONTROL_PORT)
    }
}

/// The abstract socket name (without the leading NUL) for a port.
pub fn lease_name(iface: &str, ethertype: u16, port: u16) -> String {
    format!("clusternet/{iface}/{ethertype:04x}/{port}")
}

/// The lease file of a port under the privileged directory `dir`, in the
/// calling thread's network namespace.
pub fn lease_path(dir: &Path, iface: &str, ethertype: u16, port: u16) -> PathBuf {
    lease_dir(dir, iface, ethertype).join(port.to_string())
}

fn lease_dir(dir: &Path, iface: &str, ethertype: u16) -> PathBuf {
    dir.join(netns_inode().to_string())
        .join(iface)
        .join(format!("{ethertype:04x}"))
}

/// The calling thread's network namespace inode (0 if unknown).
fn netns_inode() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net").map_or(0, |m| m.ino())
}

/// Takes `port` on `iface` for `ethertype`; port 0 means the next free
/// ephemeral port (49152..=65535, scanned upward from a random start so that
/// a port just released is not handed out again at once: ESP has no
/// TIME_WAIT). Use [`PortLease::control`] for the control port itself.
///
/// Errors: `AddrInUse` naming the port, interface and ethertype when another
/// socket (in any process of this network namespace) owns it, or when every
/// ephemeral port is taken; `PermissionDenied` naming the lease directory
/// when the host uses privileged leases and this process may not open it;
/// other errors from socket(2)/bind(2)/open(2)/fcntl(2).
pub fn allocate(iface: &str, ethertype: u16, port: u16) -> io::Result<PortLease> {
    if port != 0 {
        return try_lease(iface, ethertype, port);
    }
    let span = (EPHEMERAL_LAST - EPHEMERAL_FIRST) as u32 + 1;
    let start = rand::random::<u32>() % span;
    for i in 0..span {
        let p = EPHEMERAL_FIRST + ((start + i) % span) as u16;
        match try_lease(iface, ethertype, p) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "no free ephemeral port ({EPHEMERAL_FIRST}..={EPHEMERAL_LAST}) on {iface} for ethertype {ethertype:#06x}"
        ),
    ))
}

fn in_use(iface: &str, ethertype: u16, port: u16) -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("port {port} on {iface} (ethertype {ethertype:#06x}) is already in use by another socket"),
    )
}

fn try_lease(iface: &str, ethertype: u16, port: u16) -> io::Result<PortLease> {
    let hold = match lease_space() {
        LeaseSpace::Abstract => Hold::Abstract(lease_abstract(iface, ethertype, port)?),
        LeaseSpace::Directory(dir) => Hold::File(lease_file(dir, iface, ethertype, port)?),
    };
    Ok(PortLease {
        _hold: Arc::new(hold),
        iface: iface.to_string(),
        ethertype,
        port,
    })
}

fn lease_abstract(iface: &str, ethertype: u16, port: u16) -> io::Result<UnixDatagram> {
    let name = lease_name(iface, ethertype, port);
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixDatagram::bind_addr(&addr).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            in_use(iface, ethertype, port)
        } else {
            io::Error::new(
                e.kind(),
                format!("taking port {port} on {iface}: binding abstract socket {name:?}: {e}"),
            )
        }
    })
}

/// A whole-file write lock description for fcntl(2).
fn write_lock() -> libc::flock {
    libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

fn denied(dir: &Path, e: &io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "port leases on this host are privileged ({} exists): {e}; run as root or as a member \
             of the directory's group (scripts/install-lease-dir.sh creates group clusternet), \
             or set {LEASE_DIR_ENV} to a directory this user may write",
            dir.display()
        ),
    )
}

fn lease_file(dir: &Path, iface: &str, ethertype: u16, port: u16) -> io::Result<File> {
    let sub = lease_dir(dir, iface, ethertype);
    // Level by level, so that each directory this process creates gets
    // mode 2770 whatever its umask (group members create leases too).
    let mut at = dir.to_path_buf();
    for part in sub.strip_prefix(dir).unwrap_or(&sub).components() {
        at.push(part);
        match std::fs::DirBuilder::new().mode(0o2770).create(&at) {
            Ok(()) => {
                let _ = std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o2770));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(denied(dir, &e)),
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("creating {}: {e}", at.display()),
                ))
            }
        }
    }
    let path = sub.join(port.to_string());
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o660)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::PermissionDenied => denied(dir, &e),
            _ => io::Error::new(e.kind(), format!("opening {}: {e}", path.display())),
        })?;
    // The owner (whoever created the file) widens it past its umask; for
    // others this fails harmlessly.
    if f.metadata().is_ok_and(|m| m.mode() & 0o660 != 0o660) {
        let _ = f.set_permissions(std::fs::Permissions::from_mode(0o660));
    }
    let lock = write_lock();
    match fcntl(f.as_fd(), FcntlArg::F_OFD_SETLK(&lock)) {
        Ok(_) => Ok(f),
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => {
            Err(in_use(iface, ethertype, port))
        }
        Err(e) => Err(io::Error::new(
            io::Error::from(e).kind(),
            format!("locking {}: {e}", path.display()),
        )),
    }
}

/// Whether some process of this network namespace holds the lease of
/// `port` (without taking it: a process binding the port at this moment is
/// not disturbed). An error (a privileged directory this process cannot
/// read) counts as held: the caller then leaves the port alone.
pub fn is_held(iface: &str, ethertype: u16, port: u16) -> bool {
    match lease_space() {
        LeaseSpace::Abstract => {
            let name = lease_name(iface, ethertype, port);
            let Ok(addr) = SocketAddr::from_abstract_name(name.as_bytes()) else {
                return true;
            };
            match UnixDatagram::unbound() {
                // connect(2) to a datagram socket name only checks that it
                // is bound.
                Ok(s) => s.connect_addr(&addr).is_ok(),
                Err(_) => true,
            }
        }
        LeaseSpace::Directory(dir) => {
            let path = lease_path(dir, iface, ethertype, port);
            match File::open(&path) {
                Ok(f) => file_locked(&f).unwrap_or(true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(_) => true,
            }
        }
    }
}

/// Whether another open file description holds a lock on `f`.
fn file_locked(f: &File) -> io::Result<bool> {
    let mut lock = write_lock();
    fcntl(f.as_fd(), FcntlArg::F_OFD_GETLK(&mut lock))?;
    Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
}

/// The ports of `iface` / `ethertype` some process of this network
/// namespace holds (the control port included), sorted. A snapshot: ports
/// may be taken or released right after.
///
/// Errors: reading `/proc/thread-self/net/unix` or the lease directory.
pub fn held_ports(iface: &str, ethertype: u16) -> io::Result<Vec<u16>> {
    let mut ports = match lease_space() {
        LeaseSpace::Abstract => {
            let prefix = format!("@{}", lease_name(iface, ethertype, 0));
            let prefix = &prefix[..prefix.len() - 1];
            let table = std::fs::read_to_string("/proc/thread-self/net/unix")?;
            table
                .lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().nth(7))
                .filter_map(|name| name.strip_prefix(prefix)?.parse::<u16>().ok())
                .collect::<Vec<_>>()
        }
        LeaseSpace::Directory(dir) => {
            let sub = lease_dir(dir, iface, ethertype);
            let entries = match std::fs::read_dir(&sub) {
                Ok(e) => e,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(e),
            };
            let mut v = Vec::new();
            for e in entries.flatten() {
                let Some(port) = e.file_name().to_str().and_then(|s| s.parse::<u16>().ok()) else {
                    continue;
                };
                if let Ok(f) = File::open(e.path()) {
                    if file_locked(&f).unwrap_or(false) {
                        v.push(port);
                    }
                }
            }
            v
        }
    };
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ETHERTYPE_EDP, ETHERTYPE_ESP};

    // Abstract sockets need no privilege; names include the test's port so
    // tests in this binary do not collide (each uses distinct ports). The
    // privileged space is tested in tests/port_squat.rs (its own process:
    // the space is chosen once per process).

    #[test]
    fn exclusive_until_dropped() {
        let a = allocate("lo", ETHERTYPE_EDP, 4101).unwrap();
        assert_eq!(a.port(), 4101);
        let e = allocate("lo", ETHERTYPE_EDP, 4101).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("4101"), "{e}");
        assert!(e.to_string().contains("lo"), "{e}");
        drop(a);
        let b = allocate("lo", ETHERTYPE_EDP, 4101).unwrap();
        assert_eq!(b.port(), 4101);
    }

    #[test]
    fn ethertypes_and_interfaces_are_separate_spaces() {
        let _a = allocate("lo", ETHERTYPE_EDP, 4102).unwrap();
        let _b = allocate("lo", ETHERTYPE_ESP, 4102).unwrap();
        let _c = allocate("lo2", ETHERTYPE_EDP, 4102).unwrap();
    }

    #[test]
    fn ephemeral_ports_are_distinct_and_in_range() {
        let leases: Vec<_> = (0..50)
            .map(|_| allocate("ephem-test", ETHERTYPE_EDP, 0).unwrap())
            .collect();
        let mut ports: Vec<u16> = leases.iter().map(|l| l.port()).collect();
        assert!(ports.iter().all(|&p| p >= EPHEMERAL_FIRST));
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50);
    }

    #[test]
    fn control_port_is_exclusive() {
        let c = PortLease::control("ctl-test", ETHERTYPE_EDP).unwrap();
        assert_eq!(c.port(), 0);
        assert_eq!(
            PortLease::control("ctl-test", ETHERTYPE_EDP)
                .unwrap_err()
                .kind(),
            io::ErrorKind::AddrInUse
        );
    }

    #[test]
    fn held_ports_and_is_held_see_leases_without_taking_them() {
        let iface = "held-test";
        assert!(!is_held(iface, ETHERTYPE_ESP, 4201));
        let a = allocate(iface, ETHERTYPE_ESP, 4201).unwrap();
        let _b = allocate(iface, ETHERTYPE_ESP, 4203).unwrap();
        let _c = allocate(iface, ETHERTYPE_EDP, 4202).unwrap();
        assert!(is_held(iface, ETHERTYPE_ESP, 4201));
        assert!(!is_held(iface, ETHERTYPE_ESP, 4202));
        // Looking did not take it: its owner keeps it, others still fail.
        assert_eq!(
            allocate(iface, ETHERTYPE_ESP, 4201).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        assert_eq!(held_ports(iface, ETHERTYPE_ESP).unwrap(), vec![4201, 4203]);
        drop(a);
        assert!(!is_held(iface, ETHERTYPE_ESP, 4201));
        assert_eq!(held_ports(iface, ETHERTYPE_ESP).unwrap(), vec![4203]);
    }

    #[test]
    fn name_layout() {
        assert_eq!(lease_name("eth0", 0x88b5, 7), "clusternet/eth0/88b5/7");
        let p = lease_path(Path::new("/d"), "eth0", 0x88b5, 7);
        assert!(p.starts_with("/d"));
        assert!(p.ends_with("eth0/88b5/7"), "{}", p.display());
    }
}
