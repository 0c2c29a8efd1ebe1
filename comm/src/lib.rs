//! `comm`: a communicator in MPI's terms over one CTP endpoint per process
//! (issue 12; the thesis's Open MPI port, ch. 6, and the user-level
//! flow-control library paper, `notes-mak-ulfc.md` "ULFC").
//!
//! Layers, each usable alone:
//! - [`matching`]: the sans-IO matching engine (posted and unexpected
//!   queues, wildcards, MPI 4.0 section 3.5 non-overtaking order, bounds);
//! - [`wire`]: the private header (thesis ch. 6: length and tag; plus
//!   context id and per-peer sequence number) and its checked codec;
//! - [`reorder`]: per-peer in-order release and fragment joining, sans-IO.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod matching;
pub mod reorder;
pub mod wire;
