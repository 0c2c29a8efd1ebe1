//! `struct fi_info` as plain Rust values, and the rules by which the
//! provider's attributes satisfy (or refuse) an application's hints.
//!
//! Source: fi_getinfo(3), fi_domain(3), fi_endpoint(3) of libfabric 1.17:
//! a hint of 0 (or an absent attribute struct) means "unspecified"; caps
//! and mode are bit sets (caps requested must all be offered; the mode bits
//! the provider needs must all be among those the application supports);
//! sizes and counts requested must not exceed the provider's; enumerated
//! attributes must match unless the provider's value serves the requested
//! one (FI_THREAD_SAFE serves every threading level). What the provider
//! cannot do is answered with FI_ENODATA. `ffi` converts to and from the C
//! structures.
//!
//! Callers of API 2.0 and later (the same man pages of libfabric 2.5.1)
//! may also ask for `FI_PROGRESS_CONTROL_UNIFIED` (the caller serializes
//! and progresses control and data calls itself: served), for tag formats
//! by name (`FI_TAG_MPI`, `FI_TAG_CCL`: constrained uses of the tag bits,
//! kept as asked since they fit the provider's bits, like any tag format
//! within them), and for the domain fields 2.x appended
//! (`max_ep_auth_key`, `max_group_id`, `max_cntr_value`,
//! `max_err_cntr_value`; `crate::abi`).

use crate::abi::FI_PROGRESS_CONTROL_UNIFIED;
use crate::error::{FiError, FiResult};
use crate::fi;

/// The API version from which this provider answers (FI_LOCAL_COMM /
/// FI_REMOTE_COMM checking and the mr_mode bit set began with 1.5).
pub const MIN_API: u32 = fi_version(1, 5);

/// `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// Primary capabilities (fi_getinfo(3)): returned only when requested
/// (or when the hints give no caps). The bits mean the same in 1.17 and
/// 2.x (1.17's FI_VARIABLE_MSG, bit 48, is 2.x's FI_EXACT_DIRECTED_RECV:
/// neither is offered, so neither is listed).
pub const PRIMARY_CAPS: u64 = fi::FI_MSG
    | fi::FI_TAGGED
    | fi::FI_RMA
    | fi::FI_ATOMIC
    | fi::FI_MULTICAST
    | fi::FI_NAMED_RX_CTX
    | fi::FI_DIRECTED_RECV
    | fi::FI_HMEM
    | fi::FI_COLLECTIVE
    | fi::FI_READ
    | fi::FI_WRITE
    | fi::FI_RECV
    | fi::FI_SEND
    | fi::FI_REMOTE_READ
    | fi::FI_REMOTE_WRITE;

/// The secondary capabilities a provider may return unasked.
pub const SECONDARY_CAPS: u64 = !PRIMARY_CAPS;

/// Transmit attributes (`struct fi_tx_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct TxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
}

/// Receive attributes (`struct fi_rx_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct RxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

/// Endpoint attributes (`struct fi_ep_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct EpAttr {
    pub ep_type: u32,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
}

/// Domain attributes (`struct fi_domain_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DomainAttr {
    pub name: Option<String>,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub resource_mgmt: u32,
    pub av_type: u32,
    pub mr_mode: i32,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
    /// Appended by libfabric 1.20 (`crate::abi::DomainAttr2`): read and
    /// written only where the core and the caller have it.
    pub max_ep_auth_key: usize,
    /// Appended by 2.0.
    pub max_group_id: u32,
    /// Appended by 2.5.
    pub max_cntr_value: u64,
    /// Appended by 2.5.
    pub max_err_cntr_value: u64,
}

/// Fabric attributes (`struct fi_fabric_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct FabricAttr {
    pub name: Option<String>,
    pub prov_name: Option<String>,
    pub prov_version: u32,
    pub api_version: u32,
}

/// A `struct fi_info`: hints (sub-attributes `None` where the pointer is
/// NULL) or an answer (all present).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Info {
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addr: Option<Vec<u8>>,
    pub dest_addr: Option<Vec<u8>>,
    /// The hints carry a passive endpoint handle (connection requests).
    pub has_handle: bool,
    pub tx: Option<TxAttr>,
    pub rx: Option<RxAttr>,
    pub ep: Option<EpAttr>,
    pub domain: Option<DomainAttr>,
    pub fabric: Option<FabricAttr>,
}

fn refuse<T>(what: impl Into<String>) -> FiResult<T> {
    Err(FiError::nodata(what))
}

/// `want` must be a subset of `have`.
fn subset(what: &str, want: u64, have: u64) -> FiResult<()> {
    if want & !have != 0 {
        return refuse(format!(
            "{what} {:#x} not supported (offered {have:#x}, missing {:#x})",
            want,
            want & !have
        ));
    }
    Ok(())
}

/// A requested size or count must not exceed the provider's.
fn at_most(what: &str, want: usize, have: usize) -> FiResult<()> {
    if want > have {
        return refuse(format!("{what} {want} exceeds the provider's {have}"));
    }
    Ok(())
}

/// The caps to return for requested `want` out of offered `have`.
fn pick_caps(want: u64, have: u64) -> u64 {
    if want == 0 {
        return have;
    }
    let mut caps = (want | (have & SECONDARY_CAPS)) & have;
    // FI_MSG / FI_TAGGED without FI_SEND or FI_RECV mean both directions.
    if want & (fi::FI_SEND | fi::FI_RECV) == 0 {
        caps |= have & (fi::FI_SEND | fi::FI_RECV);
    }
    caps
}

/// An enumerated attribute: unspecified (0) takes the provider's value;
/// otherwise it must be one of `serves`.
fn pick_enum(what: &str, want: u32, base: u32, serves: &[u32]) -> FiResult<u32> {
    if want == 0 {
        Ok(base)
    } else if serves.contains(&want) {
        Ok(want)
    } else {
        refuse(format!("{what} {want} not supported (offered {base})"))
    }
}

/// The answer to `hints` from the provider's full description `base` (one
/// endpoint type on one domain), for API `version`.
///
/// Errors: `FI_ENODATA` naming the first attribute that cannot be met.
pub fn offer(version: u32, hints: Option<&Info>, base: &Info) -> FiResult<Info> {
    if version < MIN_API {
        return refuse(format!(
            "API {}.{} requested; clusternet answers from API 1.5",
            version >> 16,
            version & 0xffff
        ));
    }
    let Some(h) = hints else {
        return Ok(base.clone());
    };
    let mut out = base.clone();
    let (bt, br, be, bd, bf) = parts(base);
    if h.has_handle {
        return refuse("passive endpoint handles (FI_EP_MSG connections) are not supported");
    }
    subset("caps", h.caps, base.caps)?;
    out.caps = pick_caps(h.caps, base.caps);
    subset("mode needed by the provider", base.mode, h.mode)?;
    if !accepts_format(h.addr_format, base.addr_format) {
        return refuse(format!(
            "addr_format {} (the provider's is {})",
            h.addr_format, base.addr_format
        ));
    }
    if let Some(e) = &h.ep {
        let o = out.ep.as_mut().expect("base has ep_attr");
        if e.ep_type != 0 && e.ep_type != be.ep_type {
            return refuse(format!(
                "endpoint type {} (this answer is type {})",
                e.ep_type, be.ep_type
            ));
        }
        if e.protocol != 0 && e.protocol != be.protocol {
            return refuse(format!("protocol {}", e.protocol));
        }
        if e.protocol_version > be.protocol_version {
            return refuse(format!("protocol_version {}", e.protocol_version));
        }
        at_most("max_msg_size", e.max_msg_size, be.max_msg_size)?;
        for (n, c) in [("tx_ctx_cnt", e.tx_ctx_cnt), ("rx_ctx_cnt", e.rx_ctx_cnt)] {
            if c == fi::FI_SHARED_CONTEXT as usize {
                return refuse(format!("{n} FI_SHARED_CONTEXT: no shared contexts"));
            }
            at_most(n, c, 1)?;
        }
        if e.auth_key_size != 0 {
            return refuse("endpoint auth_key: the cluster key is FI_CLUSTERNET_KEY_FILE");
        }
        // A requested tag format is kept when it uses only the provider's
        // bits; otherwise the provider's comes back (fi_endpoint(3)). From
        // API 2.0 a value below FI_TAG_MAX_FORMAT names a format
        // (FI_TAG_MPI 1, FI_TAG_CCL 2): both fit the provider's 63 bits,
        // so they are kept too, which says the provider serves them.
        if e.mem_tag_format != 0
            && be.mem_tag_format != 0
            && e.mem_tag_format & !be.mem_tag_format == 0
        {
            o.mem_tag_format = e.mem_tag_format;
        }
    }
    if let Some(t) = &h.tx {
        subset("tx_attr caps", t.caps, bt.caps)?;
        subset("tx_attr msg_order", t.msg_order, bt.msg_order)?;
        subset("tx_attr comp_order", t.comp_order, bt.comp_order)?;
        subset("tx_attr mode needed", bt.mode, t.mode | h.mode)?;
        at_most("tx inject_size", t.inject_size, bt.inject_size)?;
        at_most("tx size", t.size, bt.size)?;
        at_most("tx iov_limit", t.iov_limit, bt.iov_limit)?;
        at_most("tx rma_iov_limit", t.rma_iov_limit, bt.rma_iov_limit)?;
        let o = out.tx.as_mut().expect("base has tx_attr");
        o.caps = pick_caps(t.caps, bt.caps) & pick_caps(h.caps, bt.caps);
        if t.op_flags != 0 {
            o.op_flags = t.op_flags;
        }
    } else if let Some(o) = out.tx.as_mut() {
        o.caps = pick_caps(h.caps, bt.caps);
    }
    if let Some(r) = &h.rx {
        subset("rx_attr caps", r.caps, br.caps)?;
        subset("rx_attr msg_order", r.msg_order, br.msg_order)?;
        subset("rx_attr comp_order", r.comp_order, br.comp_order)?;
        subset("rx_attr mode needed", br.mode, r.mode | h.mode)?;
        at_most("rx size", r.size, br.size)?;
        at_most("rx iov_limit", r.iov_limit, br.iov_limit)?;
        let o = out.rx.as_mut().expect("base has rx_attr");
        o.caps = pick_caps(r.caps, br.caps) & pick_caps(h.caps, br.caps);
        if r.op_flags != 0 {
            o.op_flags = r.op_flags;
        }
    } else if let Some(o) = out.rx.as_mut() {
        o.caps = pick_caps(h.caps, br.caps);
    }
    if let Some(d) = &h.domain {
        let o = out.domain.as_mut().expect("base has domain_attr");
        if let Some(n) = &d.name {
            if Some(n) != bd.name.as_ref() {
                return refuse(format!("domain {n:?}"));
            }
        }
        // FI_THREAD_SAFE (every object locks) serves every threading level.
        o.threading = pick_enum(
            "threading",
            d.threading,
            bd.threading,
            &[
                fi::FI_THREAD_SAFE,
                fi::FI_THREAD_FID,
                fi::FI_THREAD_DOMAIN,
                fi::FI_THREAD_COMPLETION,
                fi::FI_THREAD_ENDPOINT,
            ],
        )?;
        // From API 2.0 `data_progress` is `progress`, for control and data
        // both, and may be FI_PROGRESS_CONTROL_UNIFIED: manual progress by
        // a caller that serializes its calls, which a provider with
        // thread-safe control calls and any data progress serves.
        let unified: &[u32] = if version >= fi_version(2, 0) {
            &[FI_PROGRESS_CONTROL_UNIFIED]
        } else {
            &[]
        };
        let control = [&[fi::FI_PROGRESS_AUTO, fi::FI_PROGRESS_MANUAL][..], unified].concat();
        o.control_progress = pick_enum(
            "control_progress",
            d.control_progress,
            bd.control_progress,
            &control,
        )?;
        let data = if bd.data_progress == fi::FI_PROGRESS_AUTO {
            [&[fi::FI_PROGRESS_AUTO, fi::FI_PROGRESS_MANUAL][..], unified].concat()
        } else {
            [&[fi::FI_PROGRESS_MANUAL][..], unified].concat()
        };
        o.data_progress = pick_enum("data_progress", d.data_progress, bd.data_progress, &data)?;
        o.resource_mgmt = pick_enum(
            "resource_mgmt",
            d.resource_mgmt,
            bd.resource_mgmt,
            &[fi::FI_RM_ENABLED, fi::FI_RM_DISABLED],
        )?;
        o.av_type = pick_enum(
            "av_type",
            d.av_type,
            bd.av_type,
            &[fi::FI_AV_MAP, fi::FI_AV_TABLE],
        )?;
        at_most("cq_data_size", d.cq_data_size, bd.cq_data_size)?;
        at_most("cq_cnt", d.cq_cnt, bd.cq_cnt)?;
        at_most("ep_cnt", d.ep_cnt, bd.ep_cnt)?;
        at_most("domain tx_ctx_cnt", d.tx_ctx_cnt, bd.tx_ctx_cnt)?;
        at_most("domain rx_ctx_cnt", d.rx_ctx_cnt, bd.rx_ctx_cnt)?;
        at_most("max_ep_tx_ctx", d.max_ep_tx_ctx, bd.max_ep_tx_ctx)?;
        at_most("max_ep_rx_ctx", d.max_ep_rx_ctx, bd.max_ep_rx_ctx)?;
        at_most("max_ep_stx_ctx", d.max_ep_stx_ctx, bd.max_ep_stx_ctx)?;
        at_most("max_ep_srx_ctx", d.max_ep_srx_ctx, bd.max_ep_srx_ctx)?;
        at_most("cntr_cnt (counters)", d.cntr_cnt, bd.cntr_cnt)?;
        at_most("mr_cnt (memory registrations)", d.mr_cnt, bd.mr_cnt)?;
        subset("domain caps", d.caps, bd.caps)?;
        subset("domain mode needed", bd.mode, d.mode | h.mode)?;
        if d.auth_key_size != 0 || d.max_ep_auth_key > bd.max_ep_auth_key {
            return refuse("domain auth_key: the cluster key is FI_CLUSTERNET_KEY_FILE");
        }
        if d.max_group_id > bd.max_group_id {
            return refuse(format!(
                "max_group_id {}: no peer groups (fi_av(3) group ids)",
                d.max_group_id
            ));
        }
        // 0: the caller asks for no particular range.
        for (what, want, have) in [
            ("max_cntr_value", d.max_cntr_value, bd.max_cntr_value),
            (
                "max_err_cntr_value",
                d.max_err_cntr_value,
                bd.max_err_cntr_value,
            ),
        ] {
            if want > have {
                return refuse(format!("{what} {want:#x} exceeds the provider's {have:#x}"));
            }
        }
        // mr_mode: the bits the application supports; this provider needs
        // none (no registration on any path), so 0 answers every hint.
        o.mr_mode = bd.mr_mode;
    }
    if let Some(f) = &h.fabric {
        if let Some(n) = &f.name {
            if Some(n) != bf.name.as_ref() {
                return refuse(format!("fabric {n:?}"));
            }
        }
        if f.prov_version > bf.prov_version {
            return refuse(format!("provider version {:#x}", f.prov_version));
        }
    }
    Ok(out)
}

fn accepts_format(hint: u32, base: u32) -> bool {
    hint == fi::FI_FORMAT_UNSPEC
        || hint == base
        || (base == fi::FI_SOCKADDR_IN && hint == fi::FI_SOCKADDR)
}

fn parts(i: &Info) -> (&TxAttr, &RxAttr, &EpAttr, &DomainAttr, &FabricAttr) {
    (
        i.tx.as_ref().expect("base has tx_attr"),
        i.rx.as_ref().expect("base has rx_attr"),
        i.ep.as_ref().expect("base has ep_attr"),
        i.domain.as_ref().expect("base has domain_attr"),
        i.fabric.as_ref().expect("base has fabric_attr"),
    )
}
