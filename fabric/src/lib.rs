//! `clusternet-fi`: the libfabric provider `clusternet` (fi_provider(7)),
//! built as `libclusternet-fi.so` (scripts/build-provider.sh) and loaded by
//! libfabric through `FI_PROVIDER_PATH`, so that MPI libraries (Open MPI's
//! mtl ofi) and other libfabric programs run over the stack unchanged.
//!
//! Endpoints, over EDP (the process's runtime and packet socket, or a UDP
//! link without privilege):
//! - FI_EP_RDM with FI_TAGGED and FI_MSG ([`rdm`]) on `comm`'s tagged core
//!   over CTP: what Open MPI's mtl ofi uses;
//! - FI_EP_DGRAM with FI_MSG ([`dgram`]): `fi_pingpong -e dgram`, and a
//!   base for libfabric's ofi_rxd (`FI_PROVIDER="clusternet;ofi_rxd"`).
//!
//! Layout: [`ffi`] is the C side and the crate's only hand-written
//! `unsafe` (libfabric's structs and function tables, pointer checks),
//! over [`fi`], libfabric's C API as bindgen generates it; everything else
//! is safe Rust: [`config`] (the `FI_CLUSTERNET_*` variables), [`nic`] (interfaces),
//! [`attr`] and [`getinfo`] (fi_info and hints), [`limits`] (the sizes,
//! name and version it advertises), [`addr`] (names), [`av`],
//! [`cq`], [`domain`], [`link`] (the carrier of an endpoint), [`rdm`] and
//! [`dgram`] (the endpoints), [`error`] (FI_E* codes and provider errors).
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod addr;
pub mod attr;
pub mod av;
pub mod config;
pub mod cq;
pub mod dgram;
pub mod domain;
pub mod error;
pub mod ffi;
pub mod fi;
pub mod getinfo;
pub mod limits;
pub mod link;
mod log;
pub mod nic;
pub mod rdm;
