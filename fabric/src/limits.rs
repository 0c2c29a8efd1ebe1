//! What the provider advertises and keeps to: its name and version, queue
//! sizes, and the tag bit FI_MSG reserves. A leaf: `getinfo` writes these
//! into its answers, the endpoints, queues and the C side hold to them.

use crate::attr::fi_version;

/// `fi_fabric_attr::name` of every answer.
pub const FABRIC_NAME: &str = "clusternet";

/// The provider's version (`fi_provider::version`, `prov_version`): the
/// crate's 0.1.
pub const PROV_VERSION: u32 = fi_version(0, 1);

/// Sends in flight per endpoint: a send completes when its frame is handed
/// to the link, so this bounds only the completions not yet read.
pub const TX_SIZE: usize = 1024;

/// Operations of an RDM endpoint that will complete, at most (the tagged
/// core's completion queue, `TaggedConfig::cq_size`).
pub const RDM_QUEUE: usize = 4096;

/// `inject_size` of an RDM endpoint, bytes: every send copies its data at
/// the call, so this only says up to which size an application may send
/// without a completion (Open MPI sends blocking messages up to it with
/// fi_tinject).
pub const RDM_INJECT: usize = 16384;

/// Receives posted per endpoint (ofi_rxd posts its whole pool).
pub const RX_SIZE: usize = 4096;

/// Most bytes of `err_data` an error completion carries (`max_err_data`):
/// a sender's name (FI_SOURCE_ERR), at most `FI_NAME_MAX` (64) bytes.
pub const MAX_ERR_DATA: usize = 256;

/// Objects per domain (CQs, endpoints).
pub const DOMAIN_OBJECTS: usize = 256;

/// The tag bit untagged (FI_MSG) messages of an RDM endpoint carry.
pub const MSG_TAG: u64 = 1 << 63;

/// `mem_tag_format`: every tag bit but `MSG_TAG` (bit 63) is the
/// application's.
pub const MEM_TAG_FORMAT: u64 = !MSG_TAG;
