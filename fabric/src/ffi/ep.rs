//! What the tables of both endpoint types share (fi_endpoint(3),
//! fi_cm(3)): the `fi_ops_ep` and `fi_ops_cm` tables around each type's
//! own cancel and getname, what fi_ep_bind binds, and the answers of
//! fi_cancel and fi_getname. Each type's tables are in `rdm` and `dgram`
//! (prov/tcp's xnet_rdm.c beside xnet_ep.c); `domain` opens endpoints.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::cntr::the_cntr;
use super::neg;
use super::objects::{av_of, cq_of};
use crate::av::Av;
use crate::cq::Cq;
use crate::error::{FiError, FiResult};
use crate::fi::*;

/// `fi_cancel` of an endpoint type.
pub(super) type CancelFn = unsafe extern "C" fn(fid_t, *mut c_void) -> isize;

/// `fi_getname` of an endpoint type.
pub(super) type GetnameFn = unsafe extern "C" fn(fid_t, *mut c_void, *mut usize) -> c_int;

/// The `fi_ops_ep` table of an endpoint type with `cancel`: options and
/// contexts are not offered.
pub(super) const fn ep_ops(cancel: CancelFn) -> fi_ops_ep {
    fi_ops_ep {
        size: std::mem::size_of::<fi_ops_ep>(),
        cancel: Some(cancel),
        getopt: Some(ep_getopt),
        setopt: Some(ep_setopt),
        tx_ctx: Some(no_tx_ctx),
        rx_ctx: Some(no_rx_ctx),
        rx_size_left: Some(no_size_left),
        tx_size_left: Some(no_size_left),
    }
}

/// The `fi_ops_cm` table of an endpoint type with `getname`: connectionless
/// endpoints, so the rest answers FI_ENOSYS.
pub(super) const fn cm_ops(getname: GetnameFn) -> fi_ops_cm {
    fi_ops_cm {
        size: std::mem::size_of::<fi_ops_cm>(),
        setname: Some(cm_setname),
        getname: Some(getname),
        getpeer: Some(cm_getpeer),
        connect: Some(cm_connect),
        listen: Some(cm_listen),
        accept: Some(cm_accept),
        reject: Some(cm_reject),
        shutdown: Some(cm_shutdown),
        join: Some(cm_join),
    }
}

/// What fi_ep_bind binds to an endpoint.
pub(super) enum Bind<'a> {
    /// An address vector.
    Av(&'a Arc<Av>),
    /// A completion queue (the flags say for which directions).
    Cq(&'a Arc<Cq>),
    /// An event queue (nothing of these endpoints reports to one), or a
    /// counter bound for RMA events (these endpoints have none): nothing
    /// to record.
    Inert,
}

/// The events a counter may be bound for: RMA reads and writes, which
/// these endpoints (no FI_RMA) never have, so a count stays exact.
const CNTR_EVENTS: u64 = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

/// The object `b` that fi_ep_bind names with `flags`.
///
/// Errors: `FI_ENOSYS` for a counter bound for sends or receives,
/// `FI_EINVAL` for NULL and other classes.
///
/// # Safety
/// `b` is NULL or a live fid (its class is checked before it is used as
/// an AV, a CQ or a counter of ours).
pub(super) unsafe fn bind_target<'a>(b: *mut fid, flags: u64) -> FiResult<Bind<'a>> {
    // SAFETY: NULL checked by as_ref; a non-NULL fid is live.
    let class = unsafe { b.as_ref() }
        .ok_or_else(|| FiError::inval("NULL fid to bind"))?
        .fclass as u32;
    match class {
        // SAFETY: b is a live fid of ours (the class is checked again).
        FI_CLASS_AV => Ok(Bind::Av(unsafe { av_of(b) }?)),
        // SAFETY: b is a live fid of ours (the class is checked again).
        FI_CLASS_CQ => Ok(Bind::Cq(unsafe { cq_of(b) }?)),
        FI_CLASS_EQ => Ok(Bind::Inert),
        FI_CLASS_CNTR => {
            // SAFETY: b is a live fid (the class and table are checked).
            unsafe { the_cntr(b) }?;
            if flags & !CNTR_EVENTS != 0 {
                return Err(FiError::nosys(&format!(
                    "counting sends and receives (fi_ep_bind of a counter with flags {flags:#x}): \
                     bind a CQ for those; counters count RMA events only (none here)"
                )));
            }
            Ok(Bind::Inert)
        }
        c => Err(FiError::inval(format!(
            "cannot bind a fid of class {c} to an endpoint"
        ))),
    }
}

/// fi_cancel's answer: whether a posted receive had that context.
pub(super) fn cancelled(found: bool) -> FiResult<isize> {
    if found {
        Ok(0)
    } else {
        Err(FiError::new(
            FI_ENOENT,
            "no posted receive with that context",
        ))
    }
}

/// fi_getname's answer: `name` (its bytes) into `addr`, its length into
/// `addrlen`.
///
/// # Safety
/// `addrlen` is NULL or a valid in/out `size_t`; `addr` is NULL or holds
/// `*addrlen` bytes (fi_cm(3)).
pub(super) unsafe fn put_name(
    name: &[u8],
    addr: *mut c_void,
    addrlen: *mut usize,
) -> FiResult<c_int> {
    // SAFETY: addrlen is a valid in/out size_t (the caller's contract);
    // NULL checked by as_ref.
    let cap = unsafe { addrlen.as_ref() }
        .copied()
        .ok_or_else(|| FiError::inval("NULL addrlen"))?;
    // SAFETY: as above.
    unsafe { super::put(addrlen, name.len()) }?;
    if cap < name.len() || addr.is_null() {
        return Err(FiError::new(
            FI_ETOOSMALL,
            format!("the name has {} bytes, the buffer {cap}", name.len()),
        ));
    }
    // SAFETY: addr holds cap >= name.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), addr as *mut u8, name.len()) };
    Ok(0)
}

unsafe extern "C" fn ep_getopt(
    _f: fid_t,
    _level: c_int,
    _name: c_int,
    _val: *mut c_void,
    _len: *mut usize,
) -> c_int {
    neg(FI_ENOPROTOOPT)
}

unsafe extern "C" fn ep_setopt(
    _f: fid_t,
    _level: c_int,
    _name: c_int,
    _val: *const c_void,
    _len: usize,
) -> c_int {
    neg(FI_ENOPROTOOPT)
}

unsafe extern "C" fn no_tx_ctx(
    _s: *mut fid_ep,
    _i: c_int,
    _a: *mut fi_tx_attr,
    _e: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_rx_ctx(
    _s: *mut fid_ep,
    _i: c_int,
    _a: *mut fi_rx_attr,
    _e: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_size_left(_e: *mut fid_ep) -> isize {
    -(FI_ENOSYS as isize)
}

unsafe extern "C" fn cm_setname(_f: fid_t, _a: *mut c_void, _l: usize) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn cm_getpeer(_e: *mut fid_ep, _a: *mut c_void, _l: *mut usize) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn cm_connect(
    _e: *mut fid_ep,
    _a: *const c_void,
    _p: *const c_void,
    _l: usize,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn cm_listen(_p: *mut fid_pep) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn cm_accept(_e: *mut fid_ep, _p: *const c_void, _l: usize) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn cm_reject(_p: *mut fid_pep, _h: fid_t, _q: *const c_void, _l: usize) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn cm_shutdown(_e: *mut fid_ep, _f: u64) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn cm_join(
    _e: *mut fid_ep,
    _a: *const c_void,
    _f: u64,
    _m: *mut *mut fid_mc,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}
