//! `comm`: a communicator in MPI's terms over one CTP endpoint per process
//! (the thesis's Open MPI port, ch. 6, and the user-level
//! flow-control library paper, `notes-mak-ulfc.md` "ULFC").
//!
//! Layers, each usable alone:
//! - [`matching`]: the sans-IO matching engine (posted and unexpected
//!   queues, 64-bit tags with ignore masks, sources named or not, MPI 4.0
//!   section 3.5 non-overtaking order, peek / claim / discard, bounds), with
//!   MPI's view (ranks, 32-bit tags, wildcards);
//! - [`wire`]: the private header (thesis ch. 6: length and tag; plus
//!   context id, per-peer sequence number and remote CQ data) and its
//!   checked codec;
//! - the core, `state.rs` (sans-IO: peers, fragments, windows, per-peer
//!   order, requests, failure detection), living in the CTP core as its
//!   upper layer (`layer.rs`, `ctp::UpperLayer`): deliveries reach matching
//!   inside the engine turn, and every handle waits through the runtime
//!   driver's one wait under the engine lock, the only lock;
//! - [`tagged`]: [`TaggedEndpoint`], the core with peers inserted and
//!   removed at run time, libfabric's tagged semantics and a bounded
//!   completion queue ([`completion`]): what a libfabric provider stands on;
//! - `reorder` (internal): per-peer in-order release and fragment joining, sans-IO;
//! - [`Communicator`]: ranks from a host list over one `ctp::CtpSocket`
//!   (CTP over the EDP runtime or over UDP): blocking and nonblocking
//!   send/recv with requests, vectored sends, messages of any size, and
//!   collectives (barrier, bcast, reduce/allreduce of sums, gather/allgather).
//!
//! - [`flow`] and [`control`]: the user-level flow-control and
//!   connection-control API (ULFC) per peer: receiver grants whose sum
//!   never exceeds the receive budget, `dest_buf`, `through`, `rapid`,
//!   `disconnect` / `reconnect`, `state`, sequence reset, implicit
//!   disconnect and recovery.
//! - `bootstrap` (feature `mpi`): ranks from an MPI launcher (mpirun, srun),
//!   addresses exchanged with one MPI_Allgather.
//!
//! The C ABI is the `comm-ffi` crate; OSU-style benchmarks are `comm-osu`.
//! - `liveness` (internal): failure detection by probes: a silent peer is
//!   suspected after `CommConfig::suspect_timeout`
//!   (`Communicator::unresponsive`) and failed only after
//!   `CommConfig::failure_timeout`; the rejoin of a restarted rank (a new
//!   incarnation).
//! - `mcast` (internal): `bcast` over MAK reliable multicast
//!   (`Communicator::enable_multicast_bcast`).
//!
//! Tracing: each communicator's state carries a `tracing` span (`comm`:
//! rank and size; `comm_tagged` for a tagged endpoint), entered by the
//! communicator's calls and waits and by its CTP upper-layer callbacks,
//! whichever thread runs them; events at connection (CONNECT, first
//! grant), grants, control messages, losses and refused fragments, peer
//! suspicion, failure, disconnect and rejoin. Without a subscriber the
//! span costs one branch per call.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "mpi")]
pub mod bootstrap;
pub mod matching;
pub(crate) mod reorder;
pub mod wire;

pub mod control;
pub mod flow;
pub(crate) mod liveness;
pub(crate) mod mcast;

pub mod completion;
pub mod tagged;

mod collective;
mod communicator;
mod config;
mod error;
mod layer;
mod request;
mod source;
mod state;
mod stats;

#[cfg(test)]
mod tests;

pub use collective::SumElement;
pub use communicator::Communicator;
pub use completion::{PeerId, RecvBuf, SendBuf, TaggedCompletion};
pub use config::CommConfig;
pub use error::CommError;
pub use flow::{Mode, PeerState};
pub use matching::{Selector, SourceSel, Tag, TagEnvelope, TagSel, ANY_SOURCE, ANY_TAG, MAX_TAG};
pub use request::{Completion, Request, Status};
pub use stats::CommStats;
pub use tagged::{TaggedConfig, TaggedEndpoint};
