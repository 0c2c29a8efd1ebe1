//! [`SimSwitch`]: N sim ports that deliver by destination MAC.

use super::segment::{make_links, Topology};
use super::{SimClock, SimLink, SimOptions};
use crate::fault::FaultConfig;

/// An N-port switch (a learning switch after learning, with multicast
/// snooping).
///
/// A frame is delivered to the port owning its destination MAC; to all
/// other ports for broadcast; to the other ports that joined the group
/// ([`crate::Link::join_group`]) for multicast. Unicast to an unknown MAC or
/// to the sender itself, and multicast no other port joined, is dropped and
/// counted in [`super::SimLinkStats::unroutable`]. Each port's outgoing
/// frames go through that port's own fault injector, so a duplicate or a
/// delay applies to every copy of a broadcast alike. (Was `SimHub`.)
pub struct SimSwitch;

impl SimSwitch {
    /// `ports` links on `clock` with MTU `mtu` bytes; every port sends through
    /// `fault`, with a seed derived per port from `fault.seed`.
    ///
    /// Panics if `fault` is invalid or `ports > 65535`.
    #[allow(clippy::new_ret_no_self)] // a switch is its ports
    pub fn new(clock: &SimClock, ports: usize, mtu: usize, fault: FaultConfig) -> Vec<SimLink> {
        Self::with_options(
            clock,
            SimOptions {
                mtu,
                ..SimOptions::default()
            },
            vec![fault; ports],
        )
    }

    /// A switch with one fault config per port (`faults.len()` ports) and all
    /// [`SimOptions`]. Seeds are still derived per port.
    pub fn with_options(
        clock: &SimClock,
        opts: SimOptions,
        faults: Vec<FaultConfig>,
    ) -> Vec<SimLink> {
        assert!(faults.len() <= u16::MAX as usize, "at most 65535 sim ports");
        make_links(clock, Topology::Switch, opts, faults)
    }
}
