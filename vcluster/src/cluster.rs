//! Building and removing a cluster of N hosts.
//!
//! Topology: two hosts may be joined by one veth pair; any number of hosts
//! (2 or more) by a Linux bridge, each host with a veth pair to one bridge
//! port. The bridge lives in a namespace of its own (the *switch*), not in
//! the caller's namespace, because
//! - the caller's namespace stays untouched: no interfaces, names or
//!   addresses of ours appear on the machine, and names of bridge ports need
//!   be unique in the switch only;
//! - the host's firewall does not apply: Docker and others load
//!   br_netfilter and set the FORWARD policy to DROP in the initial
//!   namespace, which would drop bridged IPv4 between our hosts;
//! - deleting the switch namespace removes the bridge and every port at
//!   once, also after a crash (the stale sweep);
//! - it works the same rootless, where the "root" namespace is the user
//!   namespace's own.
//!
//! The bridge runs without STP (ports forward at once) and without
//! multicast snooping (it floods multicast like a plain switch without
//! IGMP/MLD state, which raw-Ethernet multicast needs).
//!
//! IPv4: host `i` gets `subnet + i + 1` (default 198.18.0.0/16, the
//! benchmarking range of RFC 2544 / RFC 5735, which no real network uses),
//! with the subnet's broadcast address, so kernel UDP/TCP, broadcast and MPI
//! run on the same links. IPv6 is disabled unless asked for, so that no
//! router solicitation, DAD or MLD frame appears on the links unasked.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use edp::MacAddr;

use crate::cleanup::{self, PREFIX};
use crate::error::{Error, Result, MISSING_PRIVILEGE};
use crate::host::{enter_ns, Host};
use crate::ip::{ip, ip_batch};
use crate::userns;

/// Calls of [`ClusterBuilder::build`] in this process: part of every name.
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// How the hosts are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Topology {
    /// A veth pair for 2 hosts, a bridge for more.
    #[default]
    Auto,
    /// One veth pair (exactly 2 hosts).
    Pair,
    /// A bridge in a switch namespace (2 or more hosts).
    Bridge,
}

/// Options of a cluster; [`ClusterBuilder::build`] makes it.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    name: String,
    hosts: usize,
    mtu: usize,
    topology: Topology,
    subnet: Ipv4Addr,
    prefix_len: u8,
    ipv6: bool,
    keep: bool,
    ready_limit: Duration,
}

impl ClusterBuilder {
    /// A builder for a cluster called `name` (part of the namespace names,
    /// shortened to 24 characters): 2 hosts, MTU 1500, automatic topology,
    /// 198.18.0.0/16, IPv6 off.
    pub fn new(name: &str) -> ClusterBuilder {
        ClusterBuilder {
            name: name.to_string(),
            hosts: 2,
            mtu: 1500,
            topology: Topology::Auto,
            subnet: Ipv4Addr::new(198, 18, 0, 0),
            prefix_len: 16,
            ipv6: false,
            keep: false,
            ready_limit: Duration::from_secs(20),
        }
    }

    /// Number of hosts (at least 2).
    pub fn hosts(mut self, n: usize) -> Self {
        self.hosts = n;
        self
    }

    /// MTU of every link, bytes (68..=65535; 1500 is Ethernet, 9000 jumbo).
    pub fn mtu(mut self, bytes: usize) -> Self {
        self.mtu = bytes;
        self
    }

    /// How the hosts are joined.
    pub fn topology(mut self, t: Topology) -> Self {
        self.topology = t;
        self
    }

    /// The IPv4 subnet of the hosts: host `i` gets `subnet + i + 1`.
    pub fn subnet(mut self, subnet: Ipv4Addr, prefix_len: u8) -> Self {
        self.subnet = subnet;
        self.prefix_len = prefix_len;
        self
    }

    /// Keep IPv6 enabled on the links (link-local addresses, ND, MLD).
    pub fn ipv6(mut self, on: bool) -> Self {
        self.ipv6 = on;
        self
    }

    /// Keep the namespaces after the cluster is dropped (debugging); a
    /// signal before the drop still removes them.
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// Bound on the wait for every link to come up (default 20 s).
    pub fn ready_limit(mut self, limit: Duration) -> Self {
        self.ready_limit = limit;
        self
    }

    /// Builds the cluster and waits until every link passes frames: each
    /// interface operationally up with its real qdisc attached (until the
    /// kernel's link-watch work has run, late on a loaded machine, a device
    /// has the `noop` qdisc, which drops every frame while send() succeeds)
    /// and each bridge port forwarding.
    ///
    /// Also, once per process: installs the SIGINT/SIGTERM cleanup, mounts
    /// a private /run/netns when re-executed in a user namespace, and
    /// deletes namespaces left by dead processes.
    ///
    /// Errors: [`Error::Config`] for an impossible cluster;
    /// [`Error::Privilege`] without CAP_SYS_ADMIN + CAP_NET_ADMIN;
    /// [`Error::Spawn`] / [`Error::Command`] naming the `ip` command that
    /// failed; [`Error::NotReady`]. What was built is removed on error.
    pub fn build(self) -> Result<Cluster> {
        self.validate()?;
        userns::prepare()?;
        if !userns::can_build_directly() {
            return Err(Error::Privilege(MISSING_PRIVILEGE.to_string()));
        }
        cleanup::install_signal_cleanup();
        cleanup::sweep_stale();
        let started = Instant::now();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let base = format!("{PREFIX}{pid}x{n}-{}", tag(&self.name));
        let bridged = match self.topology {
            Topology::Auto => self.hosts > 2,
            Topology::Pair => false,
            Topology::Bridge => true,
        };
        let mut c = Cluster {
            id: n,
            name: base.clone(),
            hosts: Vec::new(),
            mtu: self.mtu,
            switch: bridged.then(|| format!("{base}-sw")),
            namespaces: Vec::new(),
            keep: self.keep,
            subnet: self.subnet,
            prefix_len: self.prefix_len,
        };
        let subnet = u32::from(self.subnet);
        for i in 0..self.hosts {
            c.hosts.push(Host {
                index: i,
                ns: format!("{base}-h{i}"),
                iface: format!("vc{n}h{i}"),
                mac: mac(pid, n, i),
                ip: Ipv4Addr::from(subnet + i as u32 + 1),
                prefix_len: self.prefix_len,
            });
        }
        // From here on, Drop removes whatever exists.
        let names: Vec<String> = c
            .hosts
            .iter()
            .map(|h| h.ns.clone())
            .chain(c.switch.clone())
            .collect();
        for ns in names {
            cleanup::create_namespace(&ns)?;
            c.namespaces.push(ns.clone());
            if !self.ipv6 {
                disable_ipv6(&ns)?;
            }
        }
        c.link()?;
        c.configure_hosts()?;
        c.wait_ready(self.ready_limit)?;
        tracing::info!(
            cluster = %c.name,
            hosts = c.hosts.len(),
            mtu = c.mtu,
            bridge = bridged,
            ms = started.elapsed().as_millis() as u64,
            "virtual cluster built"
        );
        Ok(c)
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.hosts < 2 {
            return bad(format!("{} hosts: a cluster has at least 2", self.hosts));
        }
        if self.topology == Topology::Pair && self.hosts != 2 {
            return bad(format!("a veth pair joins 2 hosts, not {}", self.hosts));
        }
        if !(68..=65535).contains(&self.mtu) {
            return bad(format!(
                "MTU {} bytes: veth and bridge take 68..=65535",
                self.mtu
            ));
        }
        if !(8..=30).contains(&self.prefix_len) {
            return bad(format!("prefix length /{}: use /8../30", self.prefix_len));
        }
        let room = (1u64 << (32 - self.prefix_len)) - 2;
        if self.hosts as u64 > room {
            return bad(format!(
                "{} hosts do not fit in {}/{} ({room} addresses)",
                self.hosts, self.subnet, self.prefix_len
            ));
        }
        if u32::from(self.subnet) & !mask(self.prefix_len) != 0 {
            return bad(format!(
                "{}/{} has host bits set",
                self.subnet, self.prefix_len
            ));
        }
        if self.hosts > 0xfffe {
            return bad(format!("{} hosts: at most 65534", self.hosts));
        }
        Ok(())
    }
}

/// A virtual cluster: N hosts (network namespaces) on one Ethernet segment.
/// Dropping it deletes every namespace (and with them the links), also
/// while unwinding from a panic.
#[derive(Debug)]
pub struct Cluster {
    /// The call number in this process (names of interfaces).
    id: u32,
    name: String,
    hosts: Vec<Host>,
    mtu: usize,
    switch: Option<String>,
    /// Every namespace created, in creation order.
    namespaces: Vec<String>,
    keep: bool,
    subnet: Ipv4Addr,
    prefix_len: u8,
}

impl Cluster {
    /// `hosts` hosts with links of `mtu` bytes, joined by a veth pair (2
    /// hosts) or a bridge (more); see [`ClusterBuilder`] for the rest.
    ///
    /// Errors: as [`ClusterBuilder::build`].
    pub fn new(name: &str, hosts: usize, mtu: usize) -> Result<Cluster> {
        ClusterBuilder::new(name).hosts(hosts).mtu(mtu).build()
    }

    /// A builder with every option.
    pub fn builder(name: &str) -> ClusterBuilder {
        ClusterBuilder::new(name)
    }

    /// The unique name of this cluster, `cn<pid>x<n>-<name>`: the prefix of
    /// its namespaces.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The hosts, in order.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// Host `i`.
    ///
    /// Panics: when `i >= len()`.
    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Always false: a cluster has at least 2 hosts.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// MTU of every link, bytes.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The switch namespace holding the bridge (`None` for a veth pair).
    pub fn switch_ns(&self) -> Option<&str> {
        self.switch.as_deref()
    }

    /// Every namespace of the cluster (hosts, then the switch).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// The hosts' subnet and prefix length.
    pub fn subnet(&self) -> (Ipv4Addr, u8) {
        (self.subnet, self.prefix_len)
    }

    /// The subnet's IPv4 broadcast address.
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.subnet) | !mask(self.prefix_len))
    }

    /// Keep the namespaces when dropped (debugging, `netgauge --keep`).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Creates the veth pairs (and the bridge), all in one `ip -batch`.
    fn link(&self) -> Result<()> {
        let n = self.id;
        let mtu = self.mtu;
        let mut batch = Vec::new();
        match &self.switch {
            None => {
                let (a, b) = (&self.hosts[0], &self.hosts[1]);
                batch.push(format!(
                    "link add name {} netns {} index {} mtu {mtu} address {} type veth peer name {} netns {} index {} mtu {mtu} address {}",
                    a.iface, a.ns, ifindex(a), a.mac, b.iface, b.ns, ifindex(b), b.mac
                ));
                ip_batch(None, &batch)
            }
            Some(sw) => {
                ip(&[
                    "-n",
                    sw,
                    "link",
                    "add",
                    "br0",
                    "mtu",
                    &mtu.to_string(),
                    "type",
                    "bridge",
                    "stp_state",
                    "0",
                    "mcast_snooping",
                    "0",
                ])?;
                let mut ports = Vec::new();
                for h in &self.hosts {
                    let port = port_name(n, h.index);
                    batch.push(format!(
                        "link add name {} netns {} index {} mtu {mtu} address {} type veth peer name {port} netns {sw} mtu {mtu}",
                        h.iface, h.ns, ifindex(h), h.mac
                    ));
                    ports.push(format!("link set {port} master br0 up"));
                }
                ip_batch(None, &batch)?;
                ports.push("link set br0 up".into());
                ip_batch(Some(sw), &ports)
            }
        }
    }

    /// Loopback up, the IPv4 address, the interface up, per host.
    fn configure_hosts(&self) -> Result<()> {
        let brd = self.broadcast();
        for h in &self.hosts {
            ip_batch(
                Some(&h.ns),
                &[
                    "link set lo up".into(),
                    format!("addr add {} broadcast {brd} dev {}", h.cidr(), h.iface),
                    format!("link set {} up", h.iface),
                ],
            )?;
        }
        Ok(())
    }

    fn wait_ready(&self, limit: Duration) -> Result<()> {
        let end = Instant::now() + limit;
        let mut waits: Vec<(&str, Vec<String>, bool)> = self
            .hosts
            .iter()
            .map(|h| (h.ns.as_str(), vec![h.iface.clone()], false))
            .collect();
        if let Some(sw) = &self.switch {
            let ports = self
                .hosts
                .iter()
                .map(|h| port_name(self.id, h.index))
                .collect();
            waits.push((sw.as_str(), ports, true));
        }
        for (ns, ifaces, bridge_ports) in waits {
            loop {
                let out = ip(&["-d", "-o", "-n", ns, "link", "show"])?;
                let text = String::from_utf8_lossy(&out.stdout);
                let pending = ifaces.iter().find(|i| {
                    let line = text.lines().find(|l| names_iface(l, i));
                    !line.is_some_and(|l| {
                        l.contains("state UP")
                            && !l.contains("qdisc noop")
                            && (!bridge_ports || l.contains("bridge_slave state forwarding"))
                    })
                });
                let Some(pending) = pending else { break };
                if Instant::now() >= end {
                    let state = text
                        .lines()
                        .find(|l| names_iface(l, pending))
                        .unwrap_or("(interface missing)");
                    return Err(Error::NotReady {
                        what: pending.clone(),
                        ns: ns.to_string(),
                        limit_s: limit.as_secs(),
                        state: state
                            .split_whitespace()
                            .take(12)
                            .collect::<Vec<_>>()
                            .join(" "),
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            if self.keep {
                cleanup::forget_namespace(ns);
                continue;
            }
            if let Err(e) = cleanup::delete_namespace(ns) {
                tracing::warn!(ns = %ns, "cleanup: {e}");
                eprintln!("vcluster cleanup: {e}");
            }
        }
        if self.keep {
            eprintln!("vcluster: kept namespaces {}", self.namespaces.join(" "));
        } else {
            tracing::info!(cluster = %self.name, "virtual cluster removed");
        }
    }
}

/// Whether an `ip -o link show` line is about interface `iface`
/// ("3: vc0h1@if2: <...").
fn names_iface(line: &str, iface: &str) -> bool {
    line.split_whitespace()
        .nth(1)
        .map(|n| n.trim_end_matches(':').split('@').next() == Some(iface))
        .unwrap_or(false)
}

/// Turns IPv6 off in namespace `ns` (sysctl net.ipv6.conf.{all,default}
/// .disable_ipv6=1) from a thread inside it: /proc/sys/net shows the
/// opening thread's namespace. Without IPv6 in the kernel there is nothing
/// to do.
fn disable_ipv6(ns: &str) -> Result<()> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_ns(ns)?;
            for which in ["all", "default"] {
                let path = format!("/proc/sys/net/ipv6/conf/{which}/disable_ipv6");
                match std::fs::write(&path, "1") {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                    Err(source) => {
                        return Err(Error::Namespace {
                            ns: ns.to_string(),
                            op: "write /proc/sys/net/ipv6/conf/*/disable_ipv6",
                            source,
                            hint: Some(
                                "is /proc mounted read-only? build with .ipv6(true) to skip this",
                            ),
                        })
                    }
                }
            }
            Ok(())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The interface index of a host's interface: 10 + its index, so that the
/// two ends of a veth pair never share an index. (Created in fresh
/// namespaces, both ends would get index 2; a veth whose index equals its
/// peer's is not "stacked" for the kernel's link watch
/// (`linkwatch_urgent_event`), whose carrier events are then rate-limited
/// to one batch per second: the pair came up ~1 s late.)
fn ifindex(h: &Host) -> usize {
    10 + h.index
}

/// The switch-side end of host `i`'s veth pair in cluster `n`.
fn port_name(n: u32, i: usize) -> String {
    format!("vc{n}p{i}")
}

/// Netmask of a prefix length.
fn mask(prefix_len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix_len))
        .unwrap_or(0)
}

/// `02:PP:PP:NN:HH:HH`: locally administered unicast (IEEE 802 U/L bit set,
/// I/G bit clear), with the pid's and the call's low bits for readability
/// and host `i + 1` in the last two bytes, unique in the cluster.
fn mac(pid: u32, n: u32, i: usize) -> MacAddr {
    let p = pid.to_be_bytes();
    let h = (i as u16 + 1).to_be_bytes();
    MacAddr([0x02, p[2], p[3], n as u8, h[0], h[1]])
}

/// The name's characters allowed in a file name, at most 24 of them.
fn tag(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(24)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_macs_and_addresses() {
        assert_eq!(tag("a b/c"), "a_b_c");
        assert_eq!(tag(&"x".repeat(40)).len(), 24);
        assert_eq!(mac(0x1234_5678, 3, 0).to_string(), "02:56:78:03:00:01");
        assert_eq!(mac(1, 300, 257).0[3..], [44, 1, 2]);
        assert_eq!(mask(16), 0xffff_0000);
        assert_eq!(mask(30), 0xffff_fffc);
        assert!(names_iface("3: vc0h1@if2: <BROADCAST>", "vc0h1"));
        assert!(!names_iface("3: vc0h10@if2: <BROADCAST>", "vc0h1"));
        assert_eq!(cleanup::creator_pid("cn123x4-t-h0"), Some(123));
        assert_eq!(cleanup::creator_pid("cnfoo"), None);
    }

    #[test]
    fn impossible_clusters_are_refused_before_anything_is_built() {
        let e = |b: ClusterBuilder| b.validate().unwrap_err().to_string();
        assert!(e(ClusterBuilder::new("t").hosts(1)).contains("at least 2"));
        assert!(
            e(ClusterBuilder::new("t").hosts(3).topology(Topology::Pair)).contains("veth pair")
        );
        assert!(e(ClusterBuilder::new("t").mtu(67)).contains("68..=65535"));
        assert!(e(ClusterBuilder::new("t")
            .hosts(5)
            .subnet(Ipv4Addr::new(10, 0, 0, 0), 30))
        .contains("do not fit"));
        assert!(
            e(ClusterBuilder::new("t").subnet(Ipv4Addr::new(10, 0, 0, 1), 24))
                .contains("host bits")
        );
        ClusterBuilder::new("t")
            .hosts(8)
            .mtu(9000)
            .validate()
            .unwrap();
    }
}
