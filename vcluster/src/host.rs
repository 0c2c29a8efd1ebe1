//! One host of a cluster: a network namespace with one Ethernet interface,
//! and the three ways to run code there.
//!
//! - [`Host::run`]: a closure on a thread that entered the namespace
//!   (setns(2)); its result comes back, its panic is resumed.
//! - [`Host::spawn`]: the same on a background thread.
//! - [`Host::command`]: a child process (`ip netns exec`), with the host's
//!   /sys as well, as on a real machine.
//!
//! A socket keeps the namespace it was created in: one made inside `run`
//! may be returned and used from any thread.

use std::ffi::OsStr;
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use std::thread::JoinHandle;

use edp::MacAddr;
use nix::sched::{setns, CloneFlags};

use crate::error::{Error, Result, MISSING_PRIVILEGE};

/// One host: namespace, interface, addresses. Cloning copies the
/// description only; the namespace belongs to its [`crate::Cluster`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Position in the cluster, from 0.
    pub index: usize,
    /// Network namespace name (`ip netns`; the file /run/netns/`ns`).
    pub ns: String,
    /// The host's Ethernet interface (a veth end), unique in the process.
    pub iface: String,
    /// MAC address of `iface`: locally administered, unique in the cluster.
    pub mac: MacAddr,
    /// IPv4 address of `iface`.
    pub ip: Ipv4Addr,
    /// Prefix length of `ip`'s subnet, bits.
    pub prefix_len: u8,
}

impl Host {
    /// The namespace file, `/run/netns/<ns>`.
    pub fn ns_path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.ns))
    }

    /// The namespace's identity: the inode of its nsfs file, as shown by
    /// `readlink /proc/<pid>/ns/net` (`net:[<inode>]`).
    ///
    /// Errors: [`Error::Namespace`] when the namespace file is gone.
    pub fn netns_inode(&self) -> Result<u64> {
        std::fs::metadata(self.ns_path())
            .map(|m| m.ino())
            .map_err(|source| self.ns_error("stat", source, None))
    }

    /// `ip/prefix`, e.g. `198.18.0.1/16`.
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.ip, self.prefix_len)
    }

    /// Moves the calling thread into this host's namespace, for good (the
    /// thread cannot return). Prefer [`Host::run`] / [`Host::spawn`].
    ///
    /// Errors: [`Error::Namespace`] when the namespace file cannot be opened
    /// (cluster dropped) or setns(2) fails (missing CAP_SYS_ADMIN).
    pub fn enter(&self) -> Result<()> {
        enter_ns(&self.ns)
    }

    /// Runs `f` on a new thread inside this host's namespace and returns its
    /// result.
    ///
    /// Panics: resumes a panic of `f`; panics when the namespace cannot be
    /// entered (see [`Host::enter`]).
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|s| {
            let t = std::thread::Builder::new()
                .name(self.ns.clone())
                .spawn_scoped(s, || {
                    self.enter().unwrap_or_else(|e| panic!("{e}"));
                    f()
                })
                .unwrap_or_else(|e| panic!("cannot start a thread for {}: {e}", self.ns));
            match t.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// Starts `f` on a background thread inside this host's namespace.
    /// The thread panics when the namespace cannot be entered.
    ///
    /// Panics: when no thread can be started.
    pub fn spawn<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> JoinHandle<R> {
        let ns = self.ns.clone();
        std::thread::Builder::new()
            .name(ns.clone())
            .spawn(move || {
                enter_ns(&ns).unwrap_or_else(|e| panic!("{e}"));
                f()
            })
            .unwrap_or_else(|e| panic!("cannot start a thread for {}: {e}", self.ns))
    }

    /// A command that runs `program` inside this host's namespace, through
    /// `ip netns exec` (which execs `program` in place, so the child's pid
    /// is the program's once `ip` has entered the namespace and exec'd, and
    /// mounts the namespace's own /sys). Add arguments
    /// and stdio as usual; start it with [`crate::Process::spawn`] so that
    /// it is stopped on drop and on SIGINT/SIGTERM.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(program);
        c
    }

    fn ns_error(
        &self,
        op: &'static str,
        source: std::io::Error,
        hint: Option<&'static str>,
    ) -> Error {
        Error::Namespace {
            ns: self.ns.clone(),
            op,
            source,
            hint,
        }
    }
}

/// Moves the calling thread into namespace `ns` (setns(2) on
/// /run/netns/`ns`).
pub(crate) fn enter_ns(ns: &str) -> Result<()> {
    let path = format!("/run/netns/{ns}");
    let f = File::open(&path).map_err(|source| Error::Namespace {
        ns: ns.to_string(),
        op: "open /run/netns entry",
        source,
        hint: Some("was the cluster dropped already?"),
    })?;
    setns(&f, CloneFlags::CLONE_NEWNET).map_err(|e| Error::Namespace {
        ns: ns.to_string(),
        op: "setns",
        source: e.into(),
        hint: Some(MISSING_PRIVILEGE),
    })
}
