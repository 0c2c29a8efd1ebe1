//! The event queue object (fi_eq(3)) over [`crate::eq::EventQueue`]:
//! endpoints of this provider report no events (no connections, no
//! asynchronous AV inserts), so an EQ holds what the application writes
//! (fi_pingpong and the fabtests open one with every fabric).

use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;

use super::buf::bytes;
use super::objects::{EqInner, EqObj, FabricObj, EQ_FI_OPS, FABRIC_FI_OPS};
use super::{alloc, fid_of, guard, obj, put};
use crate::eq::EventQueue;
use crate::error::{FiError, FiResult};
use crate::fi::*;

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
        let f: &FabricObj =
            unsafe { obj(fabric as *const c_void, FI_CLASS_FABRIC, &FABRIC_FI_OPS) }?;
        // SAFETY: attr is NULL or valid (fi_eq(3)).
        if let Some(a) = unsafe { attr.as_ref() } {
            if !a.wait_set.is_null() || a.wait_obj == FI_WAIT_SET {
                return Err(FiError::nosys("wait sets"));
            }
        }
        // SAFETY: attr is NULL or valid (fi_eq(3)).
        let (size, flags) = unsafe { attr.as_ref() }.map_or((0, 0), |a| (a.size, a.flags));
        let p = alloc(EqObj {
            fid: fid_eq {
                fid: fid_of(FI_CLASS_EQ, context, &EQ_FI_OPS),
                ops: &EQ_OPS as *const _ as *mut _,
            },
            inner: EqInner {
                fabric: f.inner.clone(),
                eq: EventQueue::new(size, flags & FI_WRITE != 0),
            },
        });
        // SAFETY: a valid `struct fid_eq **` (fi_eq(3)).
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

/// The event queue behind `e`.
///
/// # Safety
/// `e` is NULL or a live fid (class and table are checked).
unsafe fn the_eq<'a>(e: *mut fid_eq) -> FiResult<&'a EventQueue> {
    // SAFETY: the caller's contract.
    let o: &EqObj = unsafe { obj(e as *const c_void, FI_CLASS_EQ, &EQ_FI_OPS) }?;
    Ok(&o.inner.eq)
}

/// One read into `ev`/`buf` (`len` bytes); `wait` as
/// [`EventQueue::read`]. Returns the event's length.
///
/// # Safety
/// `e` as [`the_eq`]; `ev` is NULL or valid for a write; `buf` is valid
/// for `len` bytes.
unsafe fn read_event(
    e: *mut fid_eq,
    ev: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
    wait: Option<Option<Duration>>,
) -> FiResult<isize> {
    // SAFETY: the caller's contract.
    let eq = unsafe { the_eq(e) }?;
    super::buf::slice_len(len, 1, "bytes")?;
    if len > 0 && buf.is_null() {
        return Err(FiError::inval("NULL event buffer"));
    }
    let event = eq.read(len, flags & FI_PEEK != 0, wait)?;
    // SAFETY: ev is NULL or valid; buf holds len >= data.len() bytes
    // (read checked the length).
    unsafe {
        if !ev.is_null() {
            ev.write(event.event);
        }
        if !event.data.is_empty() {
            std::ptr::copy_nonoverlapping(event.data.as_ptr(), buf as *mut u8, event.data.len());
        }
    }
    Ok(event.data.len() as isize)
}

unsafe extern "C" fn eq_read(
    e: *mut fid_eq,
    ev: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    // SAFETY: fi_eq(3): e is an EQ, ev an event word, buf len bytes.
    guard("fi_eq_read", || unsafe {
        read_event(e, ev, buf, len, flags, None)
    })
}

unsafe extern "C" fn eq_readerr(e: *mut fid_eq, buf: *mut fi_eq_err_entry, _f: u64) -> isize {
    guard("fi_eq_readerr", || {
        // SAFETY: e is NULL or a live fid (checked).
        unsafe { the_eq(e) }?;
        if buf.is_null() {
            return Err(FiError::inval("NULL error entry"));
        }
        // Nothing this provider does fails asynchronously.
        Ok(-(FI_EAGAIN as isize))
    })
}

unsafe extern "C" fn eq_write(
    e: *mut fid_eq,
    ev: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    guard("fi_eq_write", || {
        // SAFETY: e is NULL or a live fid (checked); buf holds len bytes
        // for the call (fi_eq(3)).
        let (eq, data) = unsafe { (the_eq(e)?, bytes(buf, len)?) };
        Ok(eq.write(ev, data)? as isize)
    })
}

unsafe extern "C" fn eq_sread(
    e: *mut fid_eq,
    ev: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    // A negative timeout waits without limit (fi_eq(3)).
    let wait = Some((timeout >= 0).then(|| Duration::from_millis(timeout as u64)));
    // SAFETY: as eq_read.
    guard("fi_eq_sread", || unsafe {
        read_event(e, ev, buf, len, flags, wait)
    })
}

unsafe extern "C" fn eq_strerror(
    _e: *mut fid_eq,
    _n: c_int,
    _d: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    let msg = c"clusternet: event queues carry no error events";
    if !buf.is_null() && len > 0 {
        let b = msg.to_bytes();
        let n = b.len().min(len - 1);
        // SAFETY: buf holds len > n bytes (fi_eq(3)).
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), buf as *mut u8, n);
            buf.add(n).write(0);
        }
        return buf;
    }
    msg.as_ptr()
}
