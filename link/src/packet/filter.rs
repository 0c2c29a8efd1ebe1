//! The per-socket kernel filter of a [`super::PacketLink`] ([`FilterSpec`]),
//! compiled with [`netcore::bpf::FrameFilter`], and the descriptor-level
//! helpers sockets use on a link's descriptor.

use std::io;
use std::os::fd::BorrowedFd;

use netcore::bpf::{FrameFilter, Insn};

use super::KernelStats;
use crate::eth::MacAddr;
use crate::sys::{annotate, packet, sockopt};

/// Which frames a per-socket kernel filter accepts: a frame passes when its
/// ethertype is `ethertype` and either
/// - its EDP destination port (bytes 16..18 of the frame) is `port` and, when
///   `peer` is set, its source MAC and EDP source port are the peer's; or
/// - its destination port is one of `extra_ports` (e.g. port 0 for the echo
///   responder), whoever sent it.
///
/// The layout (ports at Ethernet offset 14 and 16) is shared by EDP and ESP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSpec {
    /// Ethertype the frame must carry.
    pub ethertype: u16,
    /// Destination port of the socket.
    pub port: u16,
    /// Further destination ports accepted from anyone.
    pub extra_ports: Vec<u16>,
    /// For a connected socket: only frames from this MAC and source port.
    pub peer: Option<(MacAddr, u16)>,
}

impl FilterSpec {
    /// Accept `ethertype` frames for destination `port` from anyone.
    pub fn port(ethertype: u16, port: u16) -> Self {
        Self {
            ethertype,
            port,
            extra_ports: Vec::new(),
            peer: None,
        }
    }

    /// The spec as a [`FrameFilter`]: `port` with its peer condition, the
    /// extra ports from anyone (an extra port equal to `port` accepts
    /// everyone, as before).
    pub fn to_filter(&self) -> FrameFilter {
        let mut f = FrameFilter::new();
        match self.peer {
            Some((mac, peer_port)) => f.peer_port(self.ethertype, self.port, mac.0, peer_port),
            None => f.port(self.ethertype, self.port),
        };
        f.ports(self.ethertype, self.extra_ports.iter().copied());
        f
    }

    /// The classic-BPF program of this spec.
    ///
    /// Errors: `InvalidInput` when the program would exceed
    /// [`netcore::bpf::MAX_INSNS`] (thousands of extra ports).
    pub fn program(&self) -> io::Result<Vec<Insn>> {
        self.to_filter()
            .compile()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("BPF filter: {e}")))
    }
}

/// Attaches (or replaces) the classic BPF filter of socket `fd`
/// (`SO_ATTACH_FILTER`) with the program of `spec`. Frames queued before
/// the call are not re-filtered: readers must still check addresses
/// themselves.
///
/// Errors: those of [`FilterSpec::program`] and of `setsockopt(2)`.
pub fn attach_filter(fd: BorrowedFd<'_>, spec: &FilterSpec) -> io::Result<()> {
    sockopt::attach_filter(fd, &spec.program()?)
}

/// Reads and resets the counters of packet socket `fd`
/// (`PACKET_STATISTICS`): the frames counted since the previous read.
/// ([`crate::Link::kernel_stats`] accumulates them instead.)
///
/// Errors: from getsockopt(2) (e.g. `ENOPROTOOPT` if `fd` is not a packet socket).
pub fn read_kernel_stats(fd: BorrowedFd<'_>) -> io::Result<KernelStats> {
    let (packets, drops) = packet::statistics(fd).map_err(|e| annotate(e, "PACKET_STATISTICS"))?;
    Ok(KernelStats {
        packets: u64::from(packets),
        drops: u64::from(drops),
    })
}
