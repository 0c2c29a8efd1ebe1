//! Links: what carries whole Ethernet frames, and every system call of the
//! stack.
//!
//! - [`Link`]: the trait (send and receive whole frames, batches, gather,
//!   a kernel filter, group membership, outage handling);
//! - [`PacketLink`]: an AF_PACKET socket on a real interface (TPACKET_V2
//!   receive ring or recvmmsg batches, sendmmsg with gather);
//! - [`UdpLink`]: our Ethernet frames inside UDP datagrams: no privilege
//!   needed, routable;
//! - [`sim`]: in-memory links on a virtual clock (pairs, N-port switches
//!   with group delivery, seeded faults);
//! - [`fault`]: seeded fault injection ([`FaultLink`] around any link; the
//!   same injector serves the simulated links);
//! - [`eth`]: the Ethernet II header, [`MacAddr`], and frames of any
//!   protocol carried directly in Ethernet;
//! - [`time`]: the clock ([`time::now`]) and the virtual [`time::SimClock`];
//! - [`iface`]: interface index, MAC and MTU; dropping
//!   capabilities once sockets are open ([`drop_capabilities`]); the RFC
//!   1071 sum ([`ones_complement_sum`]);
//! - [`sys`]: every system call `nix` does not wrap, and all of the
//!   stack's `unsafe` (mio's `sys/unix`, quinn-udp's role).
#![warn(missing_docs)]
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod checksum;
mod delay_queue;
pub mod eth;
pub mod fault;
mod health;
pub mod iface;
mod link;
mod packet;
mod privilege;
pub mod sim;
#[allow(unsafe_code)]
pub mod sys;
pub mod time;
mod udp;
mod udp_peers;

pub use checksum::{fold, ones_complement_sum, ones_complement_sum_gather};
pub use eth::{MacAddr, ETH_HEADER_LEN};
pub use fault::{FaultConfig, FaultLink};
pub use health::{is_outage, OutageStats};
pub use link::{KernelStats, Link};
/// Re-exported so users name `mio::Token` etc. with the version the links use.
pub use mio;
pub use packet::{
    attach_filter, read_kernel_stats, FilterSpec, PacketConfig, PacketLink, BUSY_POLL_US,
    ETH_P_ALL, MAX_BATCH, MAX_GROUPS,
};
pub use privilege::{drop_capabilities, drop_capabilities_except};
pub use udp::{
    derived_mac, UdpConfig, UdpLink, UdpLinkStats, DEFAULT_UDP_LINK_MTU, MAX_UDP_GROUPS,
    MAX_UDP_PAYLOAD,
};
pub use udp_peers::{FrameCheck, Ipv4Net, ParseNetError, UdpAdmission, UdpPeers, MAX_PEERS};
