//! In-memory links on a virtual clock, for deterministic simulations (test
//! layer L1 of DESIGN.md).
//!
//! - [`SimClock`] (from [`crate::time`]): virtual time shared by every link of
//!   one simulation; it moves only when the driver calls [`SimClock::advance`]
//!   / [`SimClock::advance_to`].
//! - [`SimLink::pair`]: a point-to-point wire between two ends.
//! - [`SimSwitch::new`]: an N-port switch that delivers by destination MAC:
//!   unicast to the port owning the address, broadcast to every other port,
//!   multicast to the ports that joined the group ([`Link::join_group`]).
//! - [`next_event`]: the earliest pending delivery, for drivers that jump the clock.
//!
//! Each sending direction runs a [`FaultInjector`](super::fault::FaultInjector) (seeded loss, burst loss,
//! duplication, reordering, corruption, delay, jitter, rate limit). A frame sent
//! at virtual time `t` becomes receivable at the far end once the clock reaches
//! the delivery instant the injector chose (`t` itself with no fault), so a
//! driver loop is: send, `recv` until `WouldBlock`, then
//! `clock.advance_to(next_event(..))` or to the next protocol timeout.
//!
//! ```
//! use std::time::Duration;
//! use link::fault::FaultConfig;
//! use link::sim::{next_event, SimClock, SimLink};
//! use link::Link;
//!
//! let clock = SimClock::new();
//! let lossy = FaultConfig::seeded(7)
//!     .with_loss(0.01)
//!     .with_delay(Duration::from_micros(20), Duration::ZERO);
//! let (mut a, mut b) = SimLink::pair(&clock, 1500, lossy, FaultConfig::default());
//! let mut frame = [0u8; 64];
//! frame[..6].copy_from_slice(&b.mac().octets());
//! a.send(&frame)?;
//! let mut buf = [0u8; 1514];
//! assert!(b.recv(&mut buf).is_err()); // WouldBlock: 20 us of latency
//! clock.advance_to(next_event(&[&a, &b]).unwrap());
//! assert_eq!(b.recv(&mut buf)?, 64);
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Queues are bounded (default [`DEFAULT_SIM_QUEUE`] frames per receiving
//! port) so a runaway test cannot eat memory: a unicast `send` to a full port
//! returns `WouldBlock`; a group frame is tail-dropped at full ports and
//! counted in [`SimLinkStats::queue_dropped`].
//!
//! Files: `segment` (ports, routing, delivery), `link` ([`SimLink`] and its
//! [`Link`] impl), `control` ([`SimControl`], [`SimOptions`]), `switch`
//! ([`SimSwitch`]).

mod control;
mod link;
mod segment;
mod switch;

use std::io;
use std::time::Instant;

pub use self::control::{SimControl, SimOptions, DEFAULT_SIM_MTU, DEFAULT_SIM_QUEUE};
pub use self::link::{SimLink, SimLinkStats};
pub use self::switch::SimSwitch;
#[cfg(doc)]
use super::Link;
use crate::eth::MacAddr;
pub use crate::time::SimClock;

/// MAC of sim port `index`: 02:00:00:00:HH:LL with HHLL = index + 1.
pub fn sim_mac(index: usize) -> MacAddr {
    let n = u16::try_from(index + 1).expect("at most 65535 sim ports");
    let [hi, lo] = n.to_be_bytes();
    MacAddr([0x02, 0, 0, 0, hi, lo])
}

/// Earliest pending delivery over several links (due or not): the instant a
/// simulation driver can jump the clock to. `None` when every queue is empty.
pub fn next_event(links: &[&SimLink]) -> Option<Instant> {
    links.iter().filter_map(|l| l.next_delivery()).min()
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests;
