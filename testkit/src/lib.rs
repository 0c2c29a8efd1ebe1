//! The project's test kit (a dev crate, never published):
//!
//! - [`sim`]: the deterministic simulator every simulation test drives its
//!   nodes with: N nodes over sim links and switches on the virtual clock,
//!   each node's trace printed when the test fails;
//! - the virtual cluster ([`vcluster`], re-exported) with the project's rule
//!   for tests that need root, [`setup`]: without the privilege or `ip
//!   netns`, print why and skip, unless `CI=true`, where the test fails;
//! - [`TestHost::spawn_test_child`]: one test function of the running test
//!   binary as a child process inside a host;
//! - [`pattern`]: deterministic payloads, their check and a length + hash
//!   digest;
//! - [`fuzz`]: the fuzz targets' bytes-to-`FaultConfig` mapping.
//!
//! ```no_run
//! let Some(net) = testkit::setup("my_test", 2, 1500) else { return };
//! let (a, b) = (net.host(0), net.host(1));
//! let n = b.run(|| {
//!     let s = std::net::UdpSocket::bind((b.ip, 7000)).unwrap();
//!     a.spawn({
//!         let (a, b) = (a.clone(), b.clone());
//!         move || {
//!             let c = std::net::UdpSocket::bind((a.ip, 0)).unwrap();
//!             c.send_to(&testkit::pattern::pattern(100, 1), (b.ip, 7000)).unwrap();
//!         }
//!     });
//!     let mut buf = [0; 200];
//!     s.recv(&mut buf).unwrap()
//! });
//! assert_eq!(n, 100);
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod fuzz;
mod lines;
pub mod pattern;
pub mod sim;

use std::process::Stdio;
use std::time::{Duration, Instant};

pub use lines::Lines;
pub use vcluster::{self, Cluster, Host, MacAddr, Process};

/// Whether tests that cannot run must fail (`CI=true`) rather than skip.
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips test `test`: prints `reason` to stderr, or, when `CI=true`,
/// panics with it.
pub fn skip(test: &str, reason: &str) {
    if in_ci() {
        panic!("{test}: cannot run under CI=true: {reason}");
    }
    eprintln!("SKIPPED {test}: {reason}");
}

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether test `test`, which builds network namespaces, may run: true as
/// root; otherwise [`skip`] (which fails under `CI=true`) and false.
pub fn root_or_skip(test: &str) -> bool {
    if !is_root() {
        skip(test, "not root (network namespaces need root)");
        return false;
    }
    true
}

/// The network namespaces that process `pid` built and still holds
/// (vcluster names them `cn<pid>x...`): a test asserts the list is empty
/// after the process ended, so that clean-up is checked.
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    dir.flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("cn{pid}x")))
        .collect()
}

/// Runs `cmd` to its end with stdout and stderr piped; asserts that it
/// succeeded (the panic names its arguments, exit status, stderr and
/// stdout) and that it left no network namespace behind
/// ([`namespaces_of`]); returns its stdout.
pub fn run_clean(cmd: &mut std::process::Command) -> String {
    use std::process::Stdio;
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let args: Vec<_> = cmd.get_args().collect();
    assert!(
        out.status.success(),
        "{:?} {args:?} failed ({}): {}\nstdout: {stdout}",
        cmd.get_program(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let left = namespaces_of(pid);
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    stdout
}

/// Runs `ip args...` (iproute2) in the caller's network namespace;
/// panics naming the command and its stderr if it fails.
pub fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2: scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON objects of a `--json` output: every line that starts with `{`,
/// parsed (a line that does not parse fails the test).
pub fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l:?}: {e}")))
        .collect()
}

/// The cluster of test `test`: `hosts` hosts (a veth pair for 2, a bridge
/// for more) with links of `mtu` bytes; or `None` after [`skip`] when this
/// process may not build it (not root, no `ip netns`, a failing `ip`
/// command: the reason names it).
pub fn setup(test: &str, hosts: usize, mtu: usize) -> Option<Cluster> {
    if !vcluster::userns::can_build_directly() {
        skip(
            test,
            "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces",
        );
        return None;
    }
    match Cluster::new(test, hosts, mtu) {
        Ok(c) => Some(c),
        Err(e) => {
            skip(test, &e.to_string());
            None
        }
    }
}

/// Polls `cond` every millisecond until it is true or `limit` passes;
/// returns whether it became true. (A bound for liveness, not a timing
/// check.)
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

/// Test-only ways to run code in a [`Host`].
pub trait TestHost {
    /// Runs test function `test` of the current test binary as a child
    /// process inside this host's namespace (`<test> --exact --ignored
    /// --nocapture --test-threads=1`), with `env` set, stdout piped (read
    /// it with [`Process::expect_line`]) and stderr inherited. The child
    /// test should be `#[ignore]` and act only when its env is set. The
    /// child is killed when the returned [`Process`] is dropped.
    ///
    /// Panics: when the child cannot be started.
    fn spawn_test_child(&self, test: &str, env: &[(&str, String)]) -> Process;
}

impl TestHost for Host {
    fn spawn_test_child(&self, test: &str, env: &[(&str, String)]) -> Process {
        let exe = std::env::current_exe().expect("current test executable");
        let mut cmd = self.command(exe);
        cmd.args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Process::spawn(&mut cmd).unwrap_or_else(|e| panic!("test child {test}: {e}"))
    }
}
