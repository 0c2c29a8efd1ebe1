//! Group membership and frame addressing: what a carrier needs to move a
//! core's frames.
//!
//! The cores never name a wire address: a frame goes [`Dest::Group`] (the
//! carrier's group address: an Ethernet group MAC, an IP multicast group) or
//! [`Dest::Member`] (one member's unicast address of type `A`, which the
//! carrier chose: `(MAC, port)` over EDP, `SocketAddr` over UDP, an integer
//! in simulations). Frames come in with the unicast address of their
//! emitter, which the cores check against the membership.

use std::fmt;
use std::hash::Hash;

pub use crate::wire::{GroupId, MemberId};

/// An address type usable for members (as `ctp::endpoint::PeerAddr`).
pub trait Addr: Copy + Eq + Hash + fmt::Debug + Send + 'static {}
impl<T: Copy + Eq + Hash + fmt::Debug + Send + 'static> Addr for T {}

/// A member of a group: its id on the wire and its unicast address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Member<A> {
    /// Id inside the group (carried in every ACK and NAK it sends).
    pub id: MemberId,
    /// Unicast address (where ACKs to it, or iterative DATA, go).
    pub addr: A,
}

impl<A> Member<A> {
    /// A member with id `id` at `addr`.
    pub fn new(id: u16, addr: A) -> Self {
        Self {
            id: MemberId(id),
            addr,
        }
    }
}

/// Where a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dest<A> {
    /// Every member (multicast to the group address).
    Group,
    /// One member (unicast).
    Member(A),
}

/// A frame to send: `len` bytes were written to the buffer given to
/// `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit<A> {
    /// Destination.
    pub dest: Dest<A>,
    /// Frame length, bytes.
    pub len: usize,
}
