//! The domain object (fi_domain(3)): its table opens the address
//! vectors, completion queues, counters and endpoints; memory
//! registration and the rest answer FI_ENOSYS.

use std::ffi::{c_int, c_void};

use super::av::av_open;
use super::cntr::cntr_open;
use super::cq::cq_open;
use super::objects::{DomainObj, FabricObj, DOMAIN_FI_OPS, FABRIC_FI_OPS};
use super::{alloc, dgram, fid_of, guard, info, neg, obj, put, rdm};
use crate::domain::{Domain, Endpoint};
use crate::error::FiError;
use crate::fi::*;

static DOMAIN_OPS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(av_open),
    cq_open: Some(cq_open),
    endpoint: Some(endpoint),
    scalable_ep: Some(no_scalable_ep),
    cntr_open: Some(cntr_open),
    poll_open: Some(no_poll_open),
    stx_ctx: Some(no_stx_ctx),
    srx_ctx: Some(no_srx_ctx),
    query_atomic: Some(no_query_atomic),
    query_collective: Some(no_query_collective),
    endpoint2: None,
};

static MR_OPS: fi_ops_mr = fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(no_mr_reg),
    regv: Some(no_mr_regv),
    regattr: Some(no_mr_regattr),
};

/// `fi_domain` (the fabric's `domain`).
pub(super) unsafe extern "C" fn domain_open(
    fabric: *mut fid_fabric,
    i: *mut fi_info,
    out: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard("fi_domain", || {
        // SAFETY: fabric is a fid this provider handed out (class checked).
        let f: &FabricObj =
            unsafe { obj(fabric as *const c_void, FI_CLASS_FABRIC, &FABRIC_FI_OPS) }?;
        // SAFETY: i is NULL or an fi_info from fi_getinfo (fi_domain(3)).
        let i = unsafe { info::read(i) }.ok_or_else(|| FiError::inval("NULL info"))?;
        let d = Domain::open(f.inner.clone(), &i)?;
        let p = alloc(DomainObj {
            fid: fid_domain {
                fid: fid_of(FI_CLASS_DOMAIN, context, &DOMAIN_FI_OPS),
                ops: &DOMAIN_OPS as *const _ as *mut _,
                mr: &MR_OPS as *const _ as *mut _,
            },
            inner: d,
        });
        // SAFETY: a valid `struct fid_domain **` (fi_domain(3)).
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

/// `fi_endpoint`: the endpoint of the type the fi_info names, handed to C
/// with that type's tables (`rdm`, `dgram`), as prov/tcp's xnet_open_ep.
unsafe extern "C" fn endpoint(
    domain: *mut fid_domain,
    i: *mut fi_info,
    out: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard("fi_endpoint", || {
        // SAFETY: domain is a fid this provider handed out (class checked).
        let d: &DomainObj =
            unsafe { obj(domain as *const c_void, FI_CLASS_DOMAIN, &DOMAIN_FI_OPS) }?;
        // SAFETY: i is NULL or an fi_info (fi_endpoint(3)).
        let i = unsafe { info::read(i) }.ok_or_else(|| FiError::inval("NULL info"))?;
        let p = match d.inner.endpoint(&i)? {
            Endpoint::Rdm(r) => rdm::open(d.inner.clone(), r, context),
            Endpoint::Dgram(g) => dgram::open(d.inner.clone(), g, context),
        };
        // SAFETY: a valid `struct fid_ep **` (fi_endpoint(3)).
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

unsafe extern "C" fn no_scalable_ep(
    _d: *mut fid_domain,
    _i: *mut fi_info,
    _e: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_poll_open(
    _d: *mut fid_domain,
    _a: *mut fi_poll_attr,
    _p: *mut *mut fid_poll,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_stx_ctx(
    _d: *mut fid_domain,
    _a: *mut fi_tx_attr,
    _s: *mut *mut fid_stx,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_srx_ctx(
    _d: *mut fid_domain,
    _a: *mut fi_rx_attr,
    _e: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_query_atomic(
    _d: *mut fid_domain,
    _t: fi_datatype,
    _o: fi_op,
    _a: *mut fi_atomic_attr,
    _f: u64,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_query_collective(
    _d: *mut fid_domain,
    _o: fi_collective_op,
    _a: *mut fi_collective_attr,
    _f: u64,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_mr_reg(
    _f: *mut fid,
    _b: *const c_void,
    _l: usize,
    _a: u64,
    _o: u64,
    _k: u64,
    _fl: u64,
    _m: *mut *mut fid_mr,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_mr_regv(
    _f: *mut fid,
    _i: *const iovec,
    _n: usize,
    _a: u64,
    _o: u64,
    _k: u64,
    _fl: u64,
    _m: *mut *mut fid_mr,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_mr_regattr(
    _f: *mut fid,
    _a: *const fi_mr_attr,
    _fl: u64,
    _m: *mut *mut fid_mr,
) -> c_int {
    neg(FI_ENOSYS)
}
