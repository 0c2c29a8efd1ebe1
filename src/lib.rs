//! Umbrella crate of the workspace: it only hosts the cross-crate tests in
//! `tests/` (real veth links between network namespaces) and the criterion
//! benchmarks in `benches/`. The protocols live in `edp`, `esp` and `ctp`.
#![forbid(unsafe_code)]
pub use ctp;
pub use edp;
pub use esp;
