//! The provider's entry points (`getinfo`, `fabric`), and the fabric,
//! event queue and domain objects (fi_fabric(3), fi_eq(3), fi_domain(3)).

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use super::sys::*;
use super::{alloc, fi_ops_with, fid_of, free, guard, info, neg, obj, opt_str, put, Obj};
use crate::domain::{Domain, Fabric};
use crate::error::FiError;
use crate::{getinfo as gi, link, nic};

pub(super) type FabricObj = Obj<fid_fabric, Arc<Fabric>>;
pub(super) type DomainObj = Obj<fid_domain, Arc<Domain>>;
type EqObj = Obj<fid_eq, Arc<Fabric>>;

/// `fi_provider::getinfo`.
pub(super) unsafe extern "C" fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    out: *mut *mut fi_info,
) -> c_int {
    guard("fi_getinfo", || {
        // SAFETY: libfabric passes NULL or valid strings and hints
        // (fi_getinfo(3)), alive for the call.
        let (node, service, hints) =
            unsafe { (opt_str(node), opt_str(service), info::read(hints)) };
        let config = super::config()?;
        let nics = nic::candidates(&config)?;
        let keyed = link::keyed(&config)?;
        let list = gi::getinfo(
            version,
            node.as_deref(),
            service.as_deref(),
            flags,
            hints.as_ref(),
            &config,
            keyed,
            &nics,
        )?;
        let head = info::write_list(&list)?;
        // SAFETY: libfabric passes a valid `struct fi_info **`.
        unsafe { put(out, head) }?;
        Ok(0)
    })
}

static FABRIC_FI_OPS: fi_ops = fi_ops_with(fabric_close, None, None);

static FABRIC_OPS: fi_ops_fabric = fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(domain_open),
    passive_ep: Some(no_passive_ep),
    eq_open: Some(eq_open),
    wait_open: Some(no_wait_open),
    trywait: Some(no_trywait),
    domain2: None,
};

/// `fi_provider::fabric` (fi_fabric(3)).
pub(super) unsafe extern "C" fn fabric_open(
    attr: *mut fi_fabric_attr,
    out: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard("fi_fabric", || {
        // SAFETY: libfabric's fi_fabric checked attr and its name non-NULL.
        let attr = unsafe { attr.as_ref() }.ok_or_else(|| FiError::inval("NULL fabric attr"))?;
        // SAFETY: the name is a NUL-terminated string (checked non-NULL by
        // fi_fabric; opt_str checks again).
        let name = unsafe { opt_str(attr.name) };
        let fabric = Fabric::open(name.as_deref(), super::config()?)?;
        let p = alloc(FabricObj {
            fid: fid_fabric {
                fid: fid_of(FI_CLASS_FABRIC, context, &FABRIC_FI_OPS),
                ops: &FABRIC_OPS as *const _ as *mut _,
                api_version: attr.api_version,
            },
            inner: fabric,
        });
        // SAFETY: libfabric passes a valid `struct fid_fabric **`.
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    guard("fi_close(fabric)", || {
        // SAFETY: f is the fid of a fabric we opened (class checked).
        unsafe {
            free::<fid_fabric, Arc<Fabric>>(f, FI_CLASS_FABRIC, |fab| {
                (Arc::strong_count(fab) > 1)
                    .then(|| "close the fabric's domains and event queues first".into())
            })
        }
    })
}

unsafe extern "C" fn no_passive_ep(
    _f: *mut fid_fabric,
    _i: *mut fi_info,
    _p: *mut *mut fid_pep,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_wait_open(
    _f: *mut fid_fabric,
    _a: *mut fi_wait_attr,
    _w: *mut *mut fid_wait,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_trywait(_f: *mut fid_fabric, _fids: *mut *mut fid, _n: c_int) -> c_int {
    neg(FI_ENOSYS)
}

// The event queue: endpoints of this provider report no events (no
// connections, no asynchronous AV inserts), so reads find nothing. It
// exists because applications open one with every fabric (fi_pingpong).

static EQ_FI_OPS: fi_ops = fi_ops_with(eq_close, None, None);

static EQ_OPS: fi_ops_eq = fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

unsafe extern "C" fn eq_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    out: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    guard("fi_eq_open", || {
        // SAFETY: fabric is a fid this provider handed out (class checked).
        let f: &FabricObj = unsafe { obj(fabric as *const c_void, FI_CLASS_FABRIC) }?;
        // SAFETY: attr is NULL or valid (fi_eq(3)).
        if let Some(a) = unsafe { attr.as_ref() } {
            if !a.wait_set.is_null() || a.wait_obj == FI_WAIT_SET {
                return Err(FiError::nosys("wait sets"));
            }
        }
        let p = alloc(EqObj {
            fid: fid_eq {
                fid: fid_of(FI_CLASS_EQ, context, &EQ_FI_OPS),
                ops: &EQ_OPS as *const _ as *mut _,
            },
            inner: f.inner.clone(),
        });
        // SAFETY: a valid `struct fid_eq **` (fi_eq(3)).
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of an EQ we opened (class checked).
    guard("fi_close(eq)", || unsafe {
        free::<fid_eq, Arc<Fabric>>(f, FI_CLASS_EQ, |_| None)
    })
}

unsafe extern "C" fn eq_read(
    _e: *mut fid_eq,
    _ev: *mut u32,
    _b: *mut c_void,
    _l: usize,
    _f: u64,
) -> isize {
    -(FI_EAGAIN as isize)
}

unsafe extern "C" fn eq_readerr(_e: *mut fid_eq, _b: *mut fi_eq_err_entry, _f: u64) -> isize {
    -(FI_EAGAIN as isize)
}

unsafe extern "C" fn eq_write(
    _e: *mut fid_eq,
    _ev: u32,
    _b: *const c_void,
    _l: usize,
    _f: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}

unsafe extern "C" fn eq_sread(
    _e: *mut fid_eq,
    _ev: *mut u32,
    _b: *mut c_void,
    _l: usize,
    _t: c_int,
    _f: u64,
) -> isize {
    // No event will ever come: waiting would only hang the caller.
    -(FI_EAGAIN as isize)
}

unsafe extern "C" fn eq_strerror(
    _e: *mut fid_eq,
    _n: c_int,
    _d: *const c_void,
    _b: *mut c_char,
    _l: usize,
) -> *const c_char {
    c"clusternet: event queues carry no events".as_ptr()
}

// The domain.

static DOMAIN_FI_OPS: fi_ops = fi_ops_with(domain_close, None, None);

static DOMAIN_OPS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(super::av::av_open),
    cq_open: Some(super::cq::cq_open),
    endpoint: Some(super::ep::endpoint),
    scalable_ep: Some(no_scalable_ep),
    cntr_open: Some(no_cntr_open),
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

unsafe extern "C" fn domain_open(
    fabric: *mut fid_fabric,
    i: *mut fi_info,
    out: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard("fi_domain", || {
        // SAFETY: fabric is a fid this provider handed out (class checked).
        let f: &FabricObj = unsafe { obj(fabric as *const c_void, FI_CLASS_FABRIC) }?;
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

unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
    guard("fi_close(domain)", || {
        // SAFETY: f is the fid of a domain we opened (class checked).
        unsafe {
            free::<fid_domain, Arc<Domain>>(f, FI_CLASS_DOMAIN, |d| {
                (Arc::strong_count(d) > 1)
                    .then(|| "close the domain's endpoints, CQs and address vectors first".into())
            })
        }
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

unsafe extern "C" fn no_cntr_open(
    _d: *mut fid_domain,
    _a: *mut fi_cntr_attr,
    _c: *mut *mut fid_cntr,
    _x: *mut c_void,
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
