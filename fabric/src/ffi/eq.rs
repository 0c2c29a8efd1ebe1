//! The event queue (fi_eq(3)): endpoints of this provider report no
//! events (no connections, no asynchronous AV inserts), so reads find
//! nothing. It exists because applications open one with every fabric
//! (fi_pingpong).

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use super::objects::{EqObj, FabricObj};
use super::{alloc, fi_ops_with, fid_of, free, guard, obj, put};
use crate::domain::Fabric;
use crate::error::FiError;
use crate::fi::*;

static EQ_FI_OPS: fi_ops = fi_ops_with(eq_close, None, None);

static EQ_OPS: fi_ops_eq = fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

/// `fi_eq_open` (the fabric's `eq_open`).
pub(super) unsafe extern "C" fn eq_open(
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
    // SAFETY: f is the fid of an EQ we opened (class and table checked).
    guard("fi_close(eq)", || unsafe {
        free::<fid_eq, Arc<Fabric>>(f, FI_CLASS_EQ, &EQ_FI_OPS, |_| None)
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
