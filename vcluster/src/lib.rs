//! Virtual clusters on one Linux machine: N hosts, each a network namespace
//! with one Ethernet interface (a veth end), joined by a veth pair (2 hosts)
//! or a Linux bridge, with a chosen MTU and IPv4 addresses, so that raw
//! Ethernet (EDP/ESP/CTP), kernel UDP/TCP and MPI all run on the same links.
//!
//! One harness for `netgauge --local` and for every real-link test:
//!
//! - **Names** are unique per process and call (`cn<pid>x<n>-<name>-h<i>`
//!   for namespaces, `vc<n>h<i>` for interfaces), so tests run in parallel,
//!   in one process or several.
//! - **Cleanup**: dropping the [`Cluster`] deletes its namespaces, also when
//!   unwinding from a panic; SIGINT/SIGTERM/SIGHUP stop every [`Process`]
//!   started in a cluster and delete every namespace, then exit with 130;
//!   namespaces of processes killed by SIGKILL are swept at the next build.
//! - **Running code in a host**: [`Host::run`] (a closure on a thread that
//!   entered the namespace with setns(2)), [`Host::spawn`] (the same in the
//!   background) and [`Host::command`] (a child process, `ip netns exec`).
//!   Sockets keep the namespace they were created in.
//! - **Privileges**: as root (or with CAP_SYS_ADMIN + CAP_NET_ADMIN) it uses
//!   `ip netns`; without, a program re-executes itself in a user namespace
//!   with [`userns::reexec`] and builds the cluster there.
//!
//! Fault injection is not here: it is in-process (`link::fault`).
//!
//! ```no_run
//! use vcluster::Cluster;
//! let net = Cluster::builder("demo").hosts(8).mtu(9000).build()?;
//! let (a, b) = (net.host(0), net.host(7));
//! let server = std::net::UdpSocket::bind((b.ip, 7000)).ok(); // wrong namespace: fails
//! assert!(server.is_none());
//! let got = b.run(|| {
//!     let s = std::net::UdpSocket::bind((b.ip, 7000)).unwrap();
//!     a.run(|| {
//!         let c = std::net::UdpSocket::bind((a.ip, 0)).unwrap();
//!         c.send_to(b"hi", (b.ip, 7000)).unwrap();
//!     });
//!     let mut buf = [0; 16];
//!     s.recv(&mut buf).unwrap()
//! });
//! assert_eq!(got, 2);
//! # Ok::<(), vcluster::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod cleanup;
mod cluster;
mod error;
mod host;
mod ip;
mod launcher;
mod process;
pub mod userns;

pub use cleanup::{install_signal_cleanup, remove_all};
pub use cluster::{Cluster, ClusterBuilder, Topology};
pub use edp::MacAddr;
pub use error::{Error, Result};
pub use host::Host;
pub use launcher::{mpirun_base, LaunchCluster, ENTER_RANK_NS};
pub use nix::sys::signal::Signal;
pub use process::Process;
