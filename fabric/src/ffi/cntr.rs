//! The counter object (fi_cntr(3)) over [`crate::cntr::Cntr`]: opened by
//! the domain's `cntr_open`, bound to endpoints for the RMA events they
//! never have (`ep`'s `bind_target`), moved by the application alone.

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use super::objects::DOMAIN_FI_OPS;
use super::{alloc, fi_ops_with, fid_of, free, guard, obj, put, Obj};
use crate::cntr::{Cntr, Waited};
use crate::domain::Domain;
use crate::error::{FiError, FiResult};
use crate::fi::*;

/// What a counter object holds: its domain (kept open while the counter
/// is) and the counter.
pub(super) struct CntrInner {
    #[allow(dead_code)]
    domain: Arc<Domain>,
    cntr: Cntr,
}

/// A counter (fi_cntr(3)).
type CntrObj = Obj<fid_cntr, CntrInner>;

static CNTR_FI_OPS: fi_ops = fi_ops_with(cntr_close, None, None);

static CNTR_OPS: fi_ops_cntr = fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};

/// `fi_cntr_open` (the domain's `cntr_open`): counts of completions
/// (FI_CNTR_EVENTS_COMP), waited on without a wait object of the
/// caller's (FI_WAIT_NONE or FI_WAIT_UNSPEC).
pub(super) unsafe extern "C" fn cntr_open(
    domain: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    out: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    guard("fi_cntr_open", || {
        // SAFETY: domain is NULL or a live fid; the class and the table
        // are checked before it is used as a domain of ours.
        let d: &Obj<fid_domain, Arc<Domain>> =
            unsafe { obj(domain as *const c_void, FI_CLASS_DOMAIN, &DOMAIN_FI_OPS) }?;
        // SAFETY: attr is NULL or a valid fi_cntr_attr (fi_cntr(3)).
        let a = unsafe { attr.as_ref() }.ok_or_else(|| FiError::inval("NULL counter attr"))?;
        if a.events != FI_CNTR_EVENTS_COMP {
            return Err(FiError::nosys(&format!(
                "counter events {} (counters count completions, FI_CNTR_EVENTS_COMP)",
                a.events
            )));
        }
        match a.wait_obj {
            FI_WAIT_NONE | FI_WAIT_UNSPEC => {}
            w => {
                return Err(FiError::nosys(&format!(
                    "counter wait object {w} (use FI_WAIT_NONE or FI_WAIT_UNSPEC)"
                )))
            }
        }
        if !a.wait_set.is_null() || a.flags != 0 {
            return Err(FiError::nosys("counter wait sets and flags"));
        }
        let p = alloc(CntrObj {
            fid: fid_cntr {
                fid: fid_of(FI_CLASS_CNTR, context, &CNTR_FI_OPS),
                ops: &CNTR_OPS as *const _ as *mut _,
            },
            inner: CntrInner {
                domain: d.inner.clone(),
                cntr: Cntr::new(),
            },
        });
        // SAFETY: a valid `struct fid_cntr **` (fi_cntr(3)).
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

/// The counter behind `f`.
///
/// # Safety
/// `f` is NULL or a live fid (the class and the table are checked before
/// it is used as a counter of ours).
pub(super) unsafe fn the_cntr<'a, P>(f: *mut P) -> FiResult<&'a Cntr> {
    // SAFETY: the caller's contract; CNTR_FI_OPS is the generic table of
    // counters alone.
    let o: &CntrObj = unsafe { obj(f as *const c_void, FI_CLASS_CNTR, &CNTR_FI_OPS) }?;
    Ok(&o.inner.cntr)
}

unsafe extern "C" fn cntr_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of a counter we opened (class and table
    // checked). Endpoints bound to it keep no reference: nothing of
    // theirs moves it.
    guard("fi_close(cntr)", || unsafe {
        free::<fid_cntr, CntrInner>(f, FI_CLASS_CNTR, &CNTR_FI_OPS, |_| None)
    })
}

/// `fi_cntr_read` and `fi_cntr_readerr` return a count, with no room for
/// an error: an invalid counter reads 0 (and the log says why).
fn count(what: &str, f: impl FnOnce() -> FiResult<u64>) -> u64 {
    let mut v = 0;
    let _: c_int = guard(what, || {
        v = f()?;
        Ok(0)
    });
    v
}

unsafe extern "C" fn cntr_read(c: *mut fid_cntr) -> u64 {
    // SAFETY: c is a fid of ours (class and table checked).
    count("fi_cntr_read", || Ok(unsafe { the_cntr(c) }?.read()))
}

unsafe extern "C" fn cntr_readerr(c: *mut fid_cntr) -> u64 {
    // SAFETY: as cntr_read.
    count("fi_cntr_readerr", || Ok(unsafe { the_cntr(c) }?.read_err()))
}

/// Runs `f` on the counter behind `c`: 0, or -FI_EINVAL for a fid that is
/// not a counter of ours.
///
/// # Safety
/// As [`the_cntr`].
unsafe fn with(what: &str, c: *mut fid_cntr, f: impl FnOnce(&Cntr)) -> c_int {
    guard(what, || {
        // SAFETY: the caller's contract.
        f(unsafe { the_cntr(c) }?);
        Ok(0)
    })
}

unsafe extern "C" fn cntr_add(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: c is a fid of ours (class and table checked).
    unsafe { with("fi_cntr_add", c, |k| k.add(v)) }
}

unsafe extern "C" fn cntr_set(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: as cntr_add.
    unsafe { with("fi_cntr_set", c, |k| k.set(v)) }
}

unsafe extern "C" fn cntr_adderr(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: as cntr_add.
    unsafe { with("fi_cntr_adderr", c, |k| k.add_err(v)) }
}

unsafe extern "C" fn cntr_seterr(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: as cntr_add.
    unsafe { with("fi_cntr_seterr", c, |k| k.set_err(v)) }
}

/// `fi_cntr_wait`: 0 at the threshold, -FI_ETIMEDOUT after `timeout` ms
/// (negative: no limit), -FI_EAVAIL when the error count changed.
unsafe extern "C" fn cntr_wait(c: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    guard("fi_cntr_wait", || {
        // SAFETY: c is a fid of ours (class and table checked).
        let k = unsafe { the_cntr(c) }?;
        let limit = u64::try_from(timeout).ok().map(Duration::from_millis);
        match k.wait(threshold, limit) {
            Waited::Reached => Ok(0),
            Waited::Error => Err(FiError::new(FI_EAVAIL, "the counter's error count changed")),
            Waited::TimedOut => Err(FiError::new(
                FI_ETIMEDOUT,
                format!("the counter stayed below {threshold} for {timeout} ms"),
            )),
        }
    })
}
