//! [`LaunchCluster`]: a bridged cluster that a job launcher started in this
//! (the root) namespace can reach. Open MPI's `mpirun` (its PMIx server and
//! out-of-band TCP) or Slurm's `srun` run here; each rank enters its
//! host's namespace before the program starts ([`ENTER_RANK_NS`]). A veth
//! from here into the cluster's bridge, with an address on the cluster's
//! subnet, carries the launcher's traffic. Used by `netgauge --mpirun` /
//! `--srun` and `comm-osu --ompi`.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use crate::error::{Error, Result};
use crate::ip::ip;
use crate::{Cluster, Topology};

/// The shell wrapper that puts MPI rank r into host r's namespace: run as
/// `sh -c ENTER_RANK_NS <namespace prefix> program args...` (`$0` is the
/// prefix; the rank comes from Open MPI, PMI or Slurm's environment).
pub const ENTER_RANK_NS: &str =
    r#"exec ip netns exec "$0${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-$SLURM_PROCID}}" "$@""#;

/// See the module documentation. The namespaces go with the cluster, the
/// launcher's veth with this value (or with the switch namespace).
#[derive(Debug)]
pub struct LaunchCluster {
    cluster: Cluster,
    root_link: String,
    subnet: String,
    ns_prefix: String,
}

impl Drop for LaunchCluster {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.root_link])
            .stderr(Stdio::null())
            .status();
    }
}

impl LaunchCluster {
    /// `hosts` hosts on a bridge with links of `mtu` bytes, on a /24 of
    /// 198.19.0.0/16 chosen from the process id (concurrent runs do not
    /// share the launcher's routes), and a veth from this namespace into
    /// the bridge holding the subnet's .254. `keep` leaves the namespaces
    /// after the end (`ClusterBuilder::keep`).
    ///
    /// Errors: those of [`crate::ClusterBuilder::build`] (root needed);
    /// [`Error::Command`] when a step of the launcher's veth fails.
    pub fn build(name: &str, hosts: usize, mtu: usize, keep: bool) -> Result<LaunchCluster> {
        let pid = std::process::id();
        let third = (pid % 250 + 1) as u8;
        let subnet = Ipv4Addr::new(198, 19, third, 0);
        let cluster = Cluster::builder(name)
            .hosts(hosts)
            .mtu(mtu)
            .topology(Topology::Bridge)
            .subnet(subnet, 24)
            .keep(keep)
            .build()?;
        let sw = cluster
            .switch_ns()
            .ok_or_else(|| Error::Privilege("a bridged cluster without a switch".into()))?
            .to_string();
        let ns_prefix = cluster
            .host(0)
            .ns
            .strip_suffix('0')
            .expect("host namespaces end with their index")
            .to_string();
        let root_link = format!("lc{}", pid % 10_000_000);
        let peer = format!("lcp{}", pid % 10_000_000);
        let job = LaunchCluster {
            cluster,
            root_link: root_link.clone(),
            subnet: format!("{subnet}/24"),
            ns_prefix,
        };
        let mtu = mtu.to_string();
        ip(&[
            "link", "add", &root_link, "mtu", &mtu, "type", "veth", "peer", "name", &peer, "netns",
            &sw, "mtu", &mtu,
        ])?;
        ip(&["-n", &sw, "link", "set", &peer, "master", "br0", "up"])?;
        let addr = format!("198.19.{third}.254/24");
        ip(&["addr", "add", &addr, "dev", &root_link])?;
        ip(&["link", "set", &root_link, "up"])?;
        Ok(job)
    }

    /// The cluster.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The launcher's veth in this namespace.
    pub fn launcher_link(&self) -> &str {
        &self.root_link
    }

    /// The cluster's subnet, CIDR (`198.19.x.0/24`).
    pub fn subnet(&self) -> &str {
        &self.subnet
    }

    /// The hosts' namespace names without their index (host r's is this
    /// followed by r).
    pub fn ns_prefix(&self) -> &str {
        &self.ns_prefix
    }

    /// Open MPI's `mpirun` for `np` ranks of `program args`, rank r in host
    /// r: the TCP BTL, PMIx and out-of-band TCP on the cluster's subnet
    /// (through this namespace's veth), idle ranks yielding the CPU
    /// ([`mpirun_base`]); `RUST_LOG` passed on when set.
    pub fn mpirun(&self, np: usize, program: &str, args: &[String]) -> Command {
        let mut c = mpirun_base(np);
        c.env("PMIX_MCA_ptl_tcp_remote_connections", "1")
            .env("PMIX_MCA_ptl_tcp_if_include", &self.subnet)
            .args(["--mca", "btl_tcp_if_include", &self.subnet])
            .args(["--mca", "oob_tcp_if_include", &self.subnet])
            .args(["-x", "PMIX_MCA_ptl_tcp_remote_connections"])
            .args(["-x", "PMIX_MCA_ptl_tcp_if_include"])
            .args(if std::env::var_os("RUST_LOG").is_some() {
                &["-x", "RUST_LOG"][..]
            } else {
                &[]
            })
            .args(["sh", "-c", ENTER_RANK_NS, &self.ns_prefix, program])
            .args(args)
            .stdin(Stdio::null());
        c
    }
}

/// `mpirun` for `np` ranks as root, oversubscription allowed, over Open
/// MPI's TCP BTL (`self,tcp`); add the program and its arguments.
///
/// Idle ranks yield the CPU (`mpi_yield_when_idle`) only when there are
/// more ranks than CPUs, as Open MPI decides by itself on an oversubscribed
/// node: ranks that each have a CPU poll without yielding (Open MPI's
/// default), so a comparison with our busy-poll mode does not slow Open
/// MPI down, and ranks sharing CPUs let each other run.
pub fn mpirun_base(np: usize) -> Command {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(np.to_string())
        .args(["--mca", "btl", "self,tcp"])
        .args([
            "--mca",
            "mpi_yield_when_idle",
            if np > cpus { "1" } else { "0" },
        ]);
    c
}
