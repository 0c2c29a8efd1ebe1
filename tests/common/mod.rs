//! Test harness for real links: hosts are network namespaces joined by veth
//! pairs (two hosts) or by a bridge in a switch namespace (more hosts).
//!
//! - Names are unique per process and call (`cn<pid>x<n>...`), so tests can
//!   run in parallel, in one or several processes.
//! - [`TestNet`] deletes its namespaces on drop, also when a test panics.
//! - [`Host::run`] runs a closure on a thread that entered the host's
//!   namespace (setns); sockets created there stay in that namespace even
//!   when moved to another thread. [`Host::spawn`] does the same in the
//!   background. [`Host::command`] starts a process inside the namespace.
//! - [`setup`] implements the project's rule: without root or `ip netns`,
//!   print why and skip, unless `CI=true`, in which case fail.
//!
//! Usage from a test file: `mod common;` then
//! `let Some(net) = common::setup("my_test", 2, 1500) else { return };`.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use edp::MacAddr;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// One simulated host: a network namespace with one Ethernet interface.
#[derive(Debug, Clone)]
pub struct Host {
    /// Namespace name (`ip netns`).
    pub ns: String,
    /// Interface name inside the namespace.
    pub iface: String,
    /// MAC address of the interface.
    pub mac: MacAddr,
}

/// Namespaces and links created for one test; deleted on drop.
#[derive(Debug)]
pub struct TestNet {
    /// The hosts, in creation order.
    pub hosts: Vec<Host>,
    /// Link MTU in bytes.
    pub mtu: usize,
    /// Every namespace created (hosts and the switch), for cleanup.
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

impl TestNet {
    /// Two hosts joined by a veth pair of the given MTU.
    ///
    /// Errors: a message naming the `ip` command that failed.
    pub fn pair(tag: &str, mtu: usize) -> Result<TestNet, String> {
        let (base, n) = Self::base();
        let mut net = TestNet {
            hosts: Vec::new(),
            mtu,
            namespaces: Vec::new(),
        };
        for i in 0..2 {
            net.add_ns(format!("{base}-{tag}-h{i}"))?;
        }
        let pid = std::process::id();
        let if0 = format!("v{pid}x{n}a");
        let if1 = format!("v{pid}x{n}b");
        let (ns0, ns1) = (net.namespaces[0].clone(), net.namespaces[1].clone());
        ip(&[
            "link", "add", &if0, "netns", &ns0, "type", "veth", "peer", "name", &if1, "netns", &ns1,
        ])?;
        for (i, (ns, ifname)) in [(ns0, if0), (ns1, if1)].into_iter().enumerate() {
            net.add_host(ns, ifname, Self::mac(n, i as u8))?;
        }
        net.wait_ready()?;
        Ok(net)
    }

    /// Configures `iface` (up, `mac`, the net's MTU) in namespace `ns` and
    /// records the host.
    fn add_host(&mut self, ns: String, iface: String, mac: MacAddr) -> Result<(), String> {
        Self::configure(&ns, &iface, mac, self.mtu)?;
        self.hosts.push(Host { ns, iface, mac });
        Ok(())
    }

    /// `count` hosts, each with a veth to one bridge in a switch namespace.
    ///
    /// Errors: a message naming the `ip` command that failed.
    pub fn bridged(tag: &str, count: usize, mtu: usize) -> Result<TestNet, String> {
        let (base, n) = Self::base();
        let mut net = TestNet {
            hosts: Vec::new(),
            mtu,
            namespaces: Vec::new(),
        };
        let sw = format!("{base}-{tag}-sw");
        net.add_ns(sw.clone())?;
        let mtu_s = mtu.to_string();
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "mtu", &mtu_s, "up"])?;
        let pid = std::process::id();
        for i in 0..count {
            let ns = format!("{base}-{tag}-h{i}");
            net.add_ns(ns.clone())?;
            let hif = format!("v{pid}x{n}h{i}");
            let sif = format!("v{pid}x{n}s{i}");
            ip(&[
                "link", "add", &hif, "netns", &ns, "type", "veth", "peer", "name", &sif, "netns",
                &sw,
            ])?;
            ip(&[
                "-n", &sw, "link", "set", &sif, "mtu", &mtu_s, "master", "br0", "up",
            ])?;
            net.add_host(ns, hif, Self::mac(n, i as u8))?;
        }
        net.wait_ready()?;
        Ok(net)
    }

    /// Host `i`.
    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    fn base() -> (String, u32) {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        (format!("cn{}x{n}", std::process::id()), n)
    }

    /// Locally administered unicast MAC unique per (pid, call, host).
    fn mac(n: u32, host: u8) -> MacAddr {
        let p = std::process::id().to_be_bytes();
        MacAddr([0x02, p[1], p[2], p[3], n as u8, host + 1])
    }

    fn add_ns(&mut self, ns: String) -> Result<(), String> {
        ip(&["netns", "add", &ns])?;
        self.namespaces.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"])
    }

    /// Waits until every host's interface is operationally up with its
    /// real qdisc attached. Until the kernel's link-watch work has run
    /// (asynchronously, late on a loaded machine), the device still has the
    /// `noop` qdisc, which drops every frame while send() reports success.
    fn wait_ready(&self) -> Result<(), String> {
        for h in &self.hosts {
            let ready = wait_until(Duration::from_secs(20), || {
                Command::new("ip")
                    .args(["-n", &h.ns, "-o", "link", "show", "dev", &h.iface])
                    .output()
                    .map(|o| {
                        let s = String::from_utf8_lossy(&o.stdout);
                        s.contains("state UP") && !s.contains("qdisc noop")
                    })
                    .unwrap_or(false)
            });
            if !ready {
                return Err(format!(
                    "{} in {} did not come up (state UP, qdisc attached) within 20 s",
                    h.iface, h.ns
                ));
            }
        }
        Ok(())
    }

    fn configure(ns: &str, ifname: &str, mac: MacAddr, mtu: usize) -> Result<(), String> {
        ip(&[
            "-n",
            ns,
            "link",
            "set",
            ifname,
            "address",
            &mac.to_string(),
            "mtu",
            &mtu.to_string(),
            "up",
        ])
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// Enters namespace `ns` on the calling thread.
///
/// Panics with the reason if the namespace cannot be entered.
pub fn enter_ns(ns: &str) {
    let path = format!("/run/netns/{ns}");
    let f = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    // SAFETY: setns on a valid namespace descriptor; affects this thread only.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns({ns}): {}", std::io::Error::last_os_error());
}

impl Host {
    /// Runs `f` on a thread inside this host's namespace and returns its
    /// result (a panic in `f` is resumed here).
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                enter_ns(&self.ns);
                f()
            });
            match h.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// Starts `f` on a background thread inside this host's namespace.
    pub fn spawn<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> std::thread::JoinHandle<R> {
        let ns = self.ns.clone();
        std::thread::spawn(move || {
            enter_ns(&ns);
            f()
        })
    }

    /// A command that runs `program` inside this host's namespace.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let path = format!("/run/netns/{}", self.ns);
        let f = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        let mut cmd = Command::new(program);
        // SAFETY: the pre-exec hook only calls setns (async-signal-safe) on a
        // descriptor opened before the fork; `f` is kept alive by the closure.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// Runs the test function `test` of the current test binary as a child
    /// process inside this host's namespace, with `env` set, stdout piped.
    /// The child test should be `#[ignore]` and act only when its env is set.
    pub fn spawn_test_child(&self, test: &str, env: &[(&str, String)]) -> TestChild {
        let exe = std::env::current_exe().expect("current test executable");
        let mut cmd = self.command(exe);
        cmd.args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn test child");
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        TestChild { child, out }
    }
}

/// A child process started by [`Host::spawn_test_child`]; killed on drop.
#[derive(Debug)]
pub struct TestChild {
    pub child: Child,
    out: BufReader<ChildStdout>,
}

impl TestChild {
    /// Reads stdout until a line containing `prefix`; returns the rest of
    /// that line after it. Panics when the child's output ends first.
    pub fn expect_line(&mut self, prefix: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.out.read_line(&mut line).expect("read child stdout");
            assert!(n > 0, "child exited before printing {prefix:?}");
            // libtest may print "test name ... " before the child's first line.
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_string();
            }
        }
    }

    /// Kills the child with SIGKILL (a crash) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the child to exit; panics if it failed.
    pub fn wait_success(&mut self) {
        let st = self.child.wait().expect("wait child");
        assert!(st.success(), "child failed: {st}");
    }
}

impl Drop for TestChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// Skips (prints `reason`, returns) or, when `CI=true`, fails the test.
pub fn skip(test: &str, reason: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: cannot run under CI=true: {reason}");
    }
    eprintln!("SKIPPED {test}: {reason}");
}

/// True when running as root (uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Creates `hosts` hosts (a veth pair for 2, a bridge for more) with `mtu`,
/// or skips the test (see [`skip`]) when not root or `ip netns` fails.
pub fn setup(test: &str, hosts: usize, mtu: usize) -> Option<TestNet> {
    if !is_root() {
        skip(test, "needs root to create network namespaces");
        return None;
    }
    sweep_stale_namespaces();
    let r = if hosts == 2 {
        TestNet::pair(test_tag(test), mtu)
    } else {
        TestNet::bridged(test_tag(test), hosts, mtu)
    };
    match r {
        Ok(n) => Some(n),
        Err(e) => {
            skip(test, &e);
            None
        }
    }
}

/// Deletes namespaces left by harness processes that no longer exist (a
/// test run killed by a timeout cannot run its Drop guards). Names are
/// `cn<pid>x...`; namespaces of live processes are left alone.
pub fn sweep_stale_namespaces() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("cn") else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

fn test_tag(test: &str) -> &str {
    // Namespace names are file names under /run/netns: keep them short.
    &test[..test.len().min(24)]
}

/// Polls `cond` every millisecond until it is true or `limit` passes;
/// returns whether it became true. (A bound for liveness, not a timing check.)
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}
