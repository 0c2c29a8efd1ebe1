//! The per-host RST responder: answers a SYN to a port nobody owns with RST
//! (thesis ch. 5.2.9: "if no target socket was found, the reception hook
//! will discard the received packet after having informed its originator
//! with a packet carrying the RST flag").
//!
//! With one packet socket per ESP socket there is no kernel hook that sees
//! "no socket": instead every process that opens ESP sockets on an interface
//! runs one small thread ([`shared_responder`], on [`edp::responder`]) with a
//! packet socket whose BPF filter passes only SYN segments (SYN set, ACK
//! clear), and tries to take the control-port lease of ESP on that
//! interface (port 0 of the ESP ethertype). Only the holder answers, so
//! each SYN draws at most one RST; the others retry the lease every second
//! and take over within about a second when the holder exits or crashes.
//! For each SYN the holder tests whether the destination port's lease is
//! free (binding it for an instant): free means no listener, so it answers
//! RST|ACK; taken means a listener (or a stream) owns the port and answers
//! itself.
//!
//! Limits: segments other than SYN for a dead socket are not answered (the
//! filter keeps established traffic away from the responder); a dead peer is
//! found by retransmission limits and keepalive instead.

use std::io;
use std::sync::Arc;

use edp::responder::{self, Handled, ResponderSpec};
use edp::wire::ETH_HEADER_LEN;
use edp::{ports, Link};

use crate::conn::reset_frame;
use crate::wire::EspFrame;

pub use edp::responder::{Responder, ResponderStats, LEASE_RETRY};

fn spec(iface: &str, ethertype: u16) -> ResponderSpec<'_> {
    ResponderSpec {
        iface,
        ethertype,
        port: 0,
        thread: "esp-rst",
        what: "ESP RST responder",
    }
}

/// Opens the SYN-only packet socket on `iface` (in the calling thread, which
/// needs CAP_NET_RAW) and starts a responder thread ([`edp::responder`])
/// that holds the ESP control-port lease and, while it holds it, answers
/// each SYN to a port without an owner with RST|ACK.
/// [`ResponderStats::replies`] counts RSTs sent; [`ResponderStats::ignored`]
/// counts SYNs for owned ports and SYNs seen while not holding the lease.
///
/// Errors: those of `PacketLink::open` (missing CAP_NET_RAW, unknown
/// interface) and of attaching the filter; eventfd and thread spawn errors.
pub fn spawn_responder(iface: &str, ethertype: u16) -> io::Result<Responder> {
    // Port 0 first (no ESP traffic), then the SYN-only program.
    let link = responder::open_link(iface, ethertype, 0)?;
    let fd = link.raw_fd().expect("packet link has a descriptor");
    crate::bpf::attach(fd, &mut crate::bpf::syn_filter(ethertype, None))?;
    let max = link.mtu() + ETH_HEADER_LEN;
    let name = iface.to_string();
    Responder::spawn(link, &spec(iface, ethertype), move |frame, link, out| {
        let me = link.mac();
        let Ok(f) = EspFrame::parse(frame, ethertype, max) else {
            return Handled::Dropped;
        };
        if !f.header.flags.syn() || f.header.flags.ack() || f.eth.dst != me {
            return Handled::Dropped;
        }
        let port = f.header.dst_port;
        // Port 0 is the responder's own; any other: free lease = no owner.
        let unowned = port == 0 || ports::allocate(&name, ethertype, port).is_ok();
        if !unowned {
            return Handled::Ignored;
        }
        match reset_frame(out, me, f.eth.src, ethertype, &f.header) {
            Some(len) => Handled::Reply(len),
            None => Handled::Dropped,
        }
    })
}

/// The process's responder for (network namespace of the calling thread,
/// `iface`, `ethertype`), started on first use and stopped when the last
/// holder of the `Arc` drops it.
///
/// Errors: as [`spawn_responder`].
pub fn shared_responder(iface: &str, ethertype: u16) -> io::Result<Arc<Responder>> {
    responder::shared(&spec(iface, ethertype), || {
        spawn_responder(iface, ethertype)
    })
}
