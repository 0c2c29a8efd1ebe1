//! `clusternet-fi`: the libfabric provider `clusternet` (fi_provider(7)),
//! built as `libclusternet-fi.so` (scripts/build-provider.sh) and loaded by
//! libfabric through `FI_PROVIDER_PATH`, so that MPI libraries (Open MPI's
//! mtl ofi, MPICH's ch4 ofi netmod) and other libfabric programs run over
//! the stack unchanged, under libfabric 1.x and 2.x cores alike ([`abi`]).
//!
//! Endpoints, over EDP (the process's runtime and packet socket, or a UDP
//! link without privilege):
//! - FI_EP_RDM with FI_TAGGED and FI_MSG (`rdm`) on `comm`'s tagged core
//!   over CTP: what Open MPI's mtl ofi uses;
//! - FI_EP_DGRAM with FI_MSG (`dgram`): `fi_pingpong -e dgram`, and a
//!   base for libfabric's ofi_rxd (`FI_PROVIDER="clusternet;ofi_rxd"`).
//!
//! libfabric reaches the provider through the library's one export,
//! `fi_prov_ini`, and the function tables it hands out; the rlib serves
//! the tests, which get `fi_getinfo`'s answers from the items re-exported
//! here ([`getinfo`] and what it takes and gives), and libfabric's
//! constants from [`fi`].
//!
//! Layout, from the ground up (every import runs downward):
//! - [`fi`]: libfabric's C API as bindgen generates it from the 1.17
//!   headers, and [`abi`]: how those types serve 2.x cores too (the
//!   version the provider declares, the layouts 2.x grew); `error` (FI_E*
//!   codes and provider errors); `log` (warnings for libfabric's log);
//! - `config` (the `FI_CLUSTERNET_*` variables), `addr` (names), `attr`
//!   (`struct fi_info` as Rust values, and the rules for hints);
//! - `limits` (the sizes, name and version the provider advertises),
//!   `nic` (interfaces and their link MTU), `av` (address vectors);
//! - `getinfo` (the answers), `cq` (completion queues), `cntr`
//!   (counters), `eq` (event queues), `link` (the carrier of an
//!   endpoint);
//! - `rdm` and `dgram` (the endpoints), then `domain` (fabric and domain:
//!   it opens them);
//! - `ffi`: the C side, the crate's only hand-written `unsafe`
//!   (libfabric's structs and function tables, pointer checks).
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unnameable_types)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod abi;
mod addr;
mod attr;
mod av;
mod cntr;
mod config;
mod cq;
mod dgram;
mod domain;
mod eq;
mod error;
mod ffi;
pub mod fi;
mod getinfo;
mod limits;
mod link;
mod log;
mod nic;
mod rdm;

pub use addr::{AddrFormat, KeyMark, Name, NameInfo};
pub use attr::{fi_version, DomainAttr, EpAttr, FabricAttr, Info, RxAttr, TxAttr};
pub use config::{Config, LinkKind};
pub use error::{FiError, FiResult, ProvErrno};
pub use getinfo::{getinfo, layering_requested, max_dgram, OFI_CORE_PROV_ONLY};
pub use limits::MEM_TAG_FORMAT;
pub use nic::Nic;
