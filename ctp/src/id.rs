//! The identifiers the endpoint and its storages share, below both: a
//! sent message's id ([`MsgId`]), a pull's ([`PullId`]) and the peer
//! address type ([`PeerAddr`]).
//! Re-exported at the crate root.

use std::fmt;
use std::hash::Hash;

/// Identifies a message given to [`Endpoint::send`](crate::Endpoint::send):
/// opaque, never 0, unique while the endpoint lives (its slot in the
/// sent-commands storage and that slot's version; not sequential).
pub type MsgId = u64;

/// Identifies a pull ([`Endpoint::pull`](crate::Endpoint::pull)): opaque,
/// never 0, not reused while the endpoint lives.
pub type PullId = u64;

/// An address type usable as a CTP peer (a `SocketAddr` over UDP, an
/// `(MAC, port)` pair over EDP, a plain integer in simulations).
pub trait PeerAddr: Copy + Eq + Hash + fmt::Debug + Send + 'static {}
impl<T: Copy + Eq + Hash + fmt::Debug + Send + 'static> PeerAddr for T {}
