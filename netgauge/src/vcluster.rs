//! The two-host virtual cluster of `--local`: two network namespaces joined
//! by a veth pair, built with iproute2 and removed when dropped — also after
//! a failure, and on Ctrl-C/SIGTERM through [`install_signal_cleanup`].
//!
//! Host A (server) is `198.18.0.1`, host B (client) `198.18.0.2`: RFC 2544's
//! benchmarking range, on links that exist only inside this machine.

use std::io;
use std::net::Ipv4Addr;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use edp::MacAddr;

/// Namespaces that exist right now, for the signal handler.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Processes running inside the cluster, killed by the signal handler.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Records a process started inside the cluster so that Ctrl-C stops it.
pub fn register_child(pid: u32) {
    CHILDREN.lock().unwrap().push(pid);
}

/// Forgets a process that has been reaped.
pub fn unregister_child(pid: u32) {
    CHILDREN.lock().unwrap().retain(|&p| p != pid);
}

/// Prefix of every namespace netgauge creates: `ng<pid>a`, `ng<pid>b`.
const PREFIX: &str = "ng";

/// One host of the virtual cluster.
#[derive(Debug, Clone)]
pub struct Host {
    /// Network namespace name.
    pub netns: String,
    /// The veth end inside it.
    pub iface: String,
    pub mac: MacAddr,
    pub ip: Ipv4Addr,
}

/// Two hosts joined by a veth pair. Dropping it deletes both namespaces.
#[derive(Debug)]
pub struct VCluster {
    pub a: Host,
    pub b: Host,
    pub mtu: usize,
    keep: bool,
}

fn ip(args: &[&str]) -> io::Result<Output> {
    let out =
        Command::new("ip")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                io::Error::new(
            e.kind(),
            format!("cannot run `ip` (iproute2): {e}; install it with `apt-get install iproute2`"),
        )
            })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

impl VCluster {
    /// Builds the cluster with a veth MTU of `mtu` bytes. Needs
    /// CAP_SYS_ADMIN and CAP_NET_ADMIN (root, or a user namespace).
    pub fn create(mtu: usize) -> io::Result<VCluster> {
        remove_stale();
        let pid = std::process::id();
        let host = |tag: char, n: u8| Host {
            netns: format!("{PREFIX}{pid}{tag}"),
            iface: format!("ng{tag}"),
            mac: MacAddr([0x02, 0x6e, 0x67, 0x00, 0x00, n]),
            ip: Ipv4Addr::new(198, 18, 0, n),
        };
        let vc = VCluster {
            a: host('a', 1),
            b: host('b', 2),
            mtu,
            keep: false,
        };
        for h in [&vc.a, &vc.b] {
            ip(&["netns", "add", &h.netns])?;
            LIVE.lock().unwrap().push(h.netns.clone());
        }
        // From here on, Drop removes whatever was built.
        let mtu_s = mtu.to_string();
        ip(&[
            "link",
            "add",
            "name",
            &vc.a.iface,
            "netns",
            &vc.a.netns,
            "mtu",
            &mtu_s,
            "address",
            &vc.a.mac.to_string(),
            "type",
            "veth",
            "peer",
            "name",
            &vc.b.iface,
            "netns",
            &vc.b.netns,
            "mtu",
            &mtu_s,
            "address",
            &vc.b.mac.to_string(),
        ])?;
        for h in [&vc.a, &vc.b] {
            let n = |args: &[&str]| {
                let mut v = vec!["-n", h.netns.as_str()];
                v.extend_from_slice(args);
                ip(&v)
            };
            n(&["addr", "add", &format!("{}/24", h.ip), "dev", &h.iface])?;
            n(&["link", "set", "lo", "up"])?;
            n(&["link", "set", &h.iface, "up"])?;
        }
        vc.wait_ready()?;
        Ok(vc)
    }

    /// Waits until both veth ends are operationally up with their real qdisc
    /// attached: until the kernel's link-watch work has run (late on a
    /// loaded machine) a device has the `noop` qdisc, which drops every
    /// frame while send() reports success.
    fn wait_ready(&self) -> io::Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        for h in [&self.a, &self.b] {
            loop {
                let out = ip(&["-n", &h.netns, "-o", "link", "show", "dev", &h.iface])?;
                let s = String::from_utf8_lossy(&out.stdout);
                if s.contains("state UP") && !s.contains("qdisc noop") {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(io::Error::other(format!(
                        "{} in {} did not come up within 20 s: {}",
                        h.iface,
                        h.netns,
                        s.trim()
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        Ok(())
    }

    /// Keeps the namespaces after the cluster is dropped (debugging).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// A command running `program args` inside `host`'s namespace.
    pub fn command(&self, host: &Host, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &host.netns, program]);
        c
    }
}

impl Drop for VCluster {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        for h in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", &h.netns]);
            LIVE.lock().unwrap().retain(|n| n != &h.netns);
        }
    }
}

/// Deletes the namespaces of netgauge runs whose process no longer exists
/// (a run killed with SIGKILL cannot clean up after itself).
fn remove_stale() {
    let Ok(out) = ip(&["netns", "list"]) else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.strip_suffix(['a', 'b']) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// On SIGINT/SIGTERM: delete the live namespaces and exit with 130.
/// Child processes inside them receive the same signal from the terminal or
/// die with their namespace's links.
pub fn install_signal_cleanup() {
    let _ = ctrlc::set_handler(|| {
        let pids: Vec<u32> = CHILDREN.lock().map(|v| v.clone()).unwrap_or_default();
        for pid in pids {
            // SAFETY: kill(2) on a pid we spawned; at worst it is already gone.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        let names: Vec<String> = LIVE.lock().map(|v| v.clone()).unwrap_or_default();
        for n in names {
            let _ = ip(&["netns", "del", &n]);
        }
        eprintln!("netgauge: interrupted; virtual cluster removed");
        std::process::exit(130);
    });
}

/// Whether this process may build the cluster directly (effective root or
/// CAP_SYS_ADMIN + CAP_NET_ADMIN).
pub fn can_build_directly() -> bool {
    use caps::{CapSet, Capability};
    let has = |c| caps::has_cap(None, CapSet::Effective, c).unwrap_or(false);
    has(Capability::CAP_SYS_ADMIN) && has(Capability::CAP_NET_ADMIN)
}
