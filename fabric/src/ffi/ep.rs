//! The endpoint object (fi_endpoint(3)) with its control and CM tables
//! (fi_cm(3)), over [`crate::rdm::RdmEp`] or [`crate::dgram::DgramEp`];
//! the data path (fi_msg(3), fi_tagged(3)) is in `msg`.

use std::ffi::{c_int, c_void};

use super::objects::{av_of, cq_of, the_ep, DomainObj, EpInner, EpObj};
use super::sys::*;
use super::{alloc, fi_ops_with, fid_of, free, guard, info, neg, obj, put};
use crate::domain::Endpoint;
use crate::error::FiError;

static EP_FI_OPS: fi_ops = fi_ops_with(ep_close, Some(ep_bind), Some(ep_control));

static EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(ep_cancel),
    getopt: Some(ep_getopt),
    setopt: Some(ep_setopt),
    tx_ctx: Some(no_tx_ctx),
    rx_ctx: Some(no_rx_ctx),
    rx_size_left: Some(no_size_left),
    tx_size_left: Some(no_size_left),
};

static CM_OPS: fi_ops_cm = fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: Some(cm_setname),
    getname: Some(cm_getname),
    getpeer: Some(cm_getpeer),
    connect: Some(cm_connect),
    listen: Some(cm_listen),
    accept: Some(cm_accept),
    reject: Some(cm_reject),
    shutdown: Some(cm_shutdown),
    join: Some(cm_join),
};

/// `fi_endpoint`.
pub(super) unsafe extern "C" fn endpoint(
    domain: *mut fid_domain,
    i: *mut fi_info,
    out: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard("fi_endpoint", || {
        // SAFETY: domain is a fid this provider handed out (class checked).
        let d: &DomainObj = unsafe { obj(domain as *const c_void, FI_CLASS_DOMAIN) }?;
        // SAFETY: i is NULL or an fi_info (fi_endpoint(3)).
        let i = unsafe { info::read(i) }.ok_or_else(|| FiError::inval("NULL info"))?;
        let ep = d.inner.endpoint(&i)?;
        let tagged = match ep {
            Endpoint::Rdm(_) => &super::msg::TAGGED_OPS as *const _ as *mut _,
            Endpoint::Dgram(_) => std::ptr::null_mut(),
        };
        let p = alloc(EpObj {
            fid: fid_ep {
                fid: fid_of(FI_CLASS_EP, context, &EP_FI_OPS),
                ops: &EP_OPS as *const _ as *mut _,
                cm: &CM_OPS as *const _ as *mut _,
                msg: &super::msg::MSG_OPS as *const _ as *mut _,
                tagged,
                // Not offered (no FI_RMA, FI_ATOMIC or FI_COLLECTIVE in
                // the caps, nor FI_TAGGED on FI_EP_DGRAM): NULL, as
                // libfabric's own providers leave them.
                rma: std::ptr::null_mut(),
                atomic: std::ptr::null_mut(),
                collective: std::ptr::null_mut(),
            },
            inner: EpInner {
                domain: d.inner.clone(),
                ep,
            },
        });
        // SAFETY: a valid `struct fid_ep **` (fi_endpoint(3)).
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    guard("fi_close(ep)", || {
        // SAFETY: f is the fid of an endpoint we opened (class checked).
        if let Endpoint::Rdm(r) = unsafe { the_ep(f as *const c_void) }? {
            // Messages sent go out before the socket does.
            r.flush();
            // The endpoint's counters (FI_LOG_LEVEL=info shows them).
            for line in r.counters() {
                super::log(FI_LOG_INFO, FI_LOG_EP_DATA, || line);
            }
        }
        // SAFETY: as above.
        unsafe { free::<fid_ep, EpInner>(f, FI_CLASS_EP, |_| None) }
    })
}

unsafe extern "C" fn ep_bind(f: *mut fid, b: *mut fid, flags: u64) -> c_int {
    guard("fi_ep_bind", || {
        // SAFETY: f is an endpoint fid of ours; b a fid of ours or NULL
        // (checked by class below).
        let ep = unsafe { the_ep(f as *const c_void) }?;
        // SAFETY: NULL checked by as_ref; a non-NULL fid is live.
        let class = unsafe { b.as_ref() }
            .ok_or_else(|| FiError::inval("NULL fid to bind"))?
            .fclass as u32;
        match class {
            FI_CLASS_AV => {
                // SAFETY: b is a live fid of ours (the class is checked again).
                let av = unsafe { av_of(b) }?.clone();
                match ep {
                    Endpoint::Rdm(r) => r.bind_av(av)?,
                    Endpoint::Dgram(d) => d.bind_av(av)?,
                }
            }
            FI_CLASS_CQ => {
                // SAFETY: b is a live fid of ours (the class is checked again).
                let cq = unsafe { cq_of(b) }?.clone();
                match ep {
                    Endpoint::Rdm(r) => r.bind_cq(cq, flags)?,
                    Endpoint::Dgram(d) => d.bind_cq(cq, flags)?,
                }
            }
            // Nothing of this endpoint reports to an event queue.
            FI_CLASS_EQ => {}
            FI_CLASS_CNTR => return Err(FiError::nosys("counters")),
            c => {
                return Err(FiError::inval(format!(
                    "cannot bind a fid of class {c} to an endpoint"
                )))
            }
        }
        Ok(0)
    })
}

unsafe extern "C" fn ep_control(f: *mut fid, cmd: c_int, _arg: *mut c_void) -> c_int {
    guard("fi_control(ep)", || {
        // SAFETY: f is an endpoint fid of ours (class checked).
        let ep = unsafe { the_ep(f as *const c_void) }?;
        match cmd as u32 {
            FI_ENABLE => {
                match ep {
                    Endpoint::Rdm(r) => r.enable()?,
                    Endpoint::Dgram(d) => d.enable()?,
                }
                Ok(0)
            }
            c => Err(FiError::nosys(&format!("endpoint control command {c}"))),
        }
    })
}

unsafe extern "C" fn ep_cancel(f: fid_t, context: *mut c_void) -> isize {
    guard("fi_cancel", || {
        // SAFETY: f is an endpoint fid of ours (class checked).
        let ep = unsafe { the_ep(f as *const c_void) }?;
        let found = match ep {
            Endpoint::Rdm(r) => r.cancel(context as usize as u64),
            Endpoint::Dgram(d) => d.cancel(context as usize as u64),
        };
        if found {
            Ok(0)
        } else {
            Err(FiError::new(
                FI_ENOENT,
                "no posted receive with that context",
            ))
        }
    })
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

unsafe extern "C" fn cm_getname(f: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard("fi_getname", || {
        // SAFETY: f is an endpoint fid of ours (class checked).
        let name = match unsafe { the_ep(f as *const c_void) }? {
            Endpoint::Rdm(r) => r.name(),
            Endpoint::Dgram(d) => d.name(),
        }
        .encode();
        // SAFETY: addrlen is a valid in/out size_t (fi_cm(3)).
        let cap = unsafe { addrlen.as_ref() }
            .copied()
            .ok_or_else(|| FiError::inval("NULL addrlen"))?;
        // SAFETY: as above.
        unsafe { put(addrlen, name.len()) }?;
        if cap < name.len() || addr.is_null() {
            return Err(FiError::new(
                FI_ETOOSMALL,
                format!("the name has {} bytes, the buffer {cap}", name.len()),
            ));
        }
        // SAFETY: addr holds cap >= name.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), addr as *mut u8, name.len()) };
        Ok(0)
    })
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
