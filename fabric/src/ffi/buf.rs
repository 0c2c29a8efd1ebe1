//! The application's buffers on the data path (fi_msg(3), fi_tagged(3)):
//! checked and turned into slices here, for the tables of both endpoint
//! types.

use std::ffi::c_void;

use comm::RecvBuf;

use crate::error::{FiError, FiResult};
use crate::fi::*;

/// A receive buffer the application posted: a pointer and a length that
/// stay valid until the receive completes (fi_msg(3): "the buffer must
/// remain valid until the operation completes").
struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer belongs to the posted receive until its completion;
// libfabric's contract forbids the application to touch it meanwhile, so
// moving the handle to the thread that progresses the endpoint (a caller,
// or the runtime's service thread) is sound.
unsafe impl Send for RawBuf {}

impl RecvBuf for RawBuf {
    fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 || self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: ptr is valid for len bytes and exclusively the receive's
        // until it completes (see the type's documentation); the borrow
        // lives no longer than &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// The receive buffer `ptr`/`len`.
pub(super) fn raw(ptr: *mut u8, len: usize) -> FiResult<Box<dyn RecvBuf>> {
    if len > 0 && ptr.is_null() {
        return Err(FiError::inval(format!("NULL buffer of {len} bytes")));
    }
    Ok(Box::new(RawBuf { ptr, len }))
}

/// The one buffer of an iovec array of `count` (0 or 1) entries.
///
/// # Safety
/// `iov` is NULL (count 0) or holds `count` valid iovecs.
pub(super) unsafe fn one_iov(iov: *const iovec, count: usize) -> FiResult<(*mut u8, usize)> {
    match count {
        0 => Ok((std::ptr::null_mut(), 0)),
        1 => {
            // SAFETY: the caller's contract; NULL checked by as_ref.
            let v = unsafe { iov.as_ref() }.ok_or_else(|| FiError::inval("NULL iov"))?;
            Ok((v.iov_base as *mut u8, v.iov_len))
        }
        n => Err(FiError::inval(format!("{n} iovecs: iov_limit is 1"))),
    }
}

/// The bytes of a send buffer.
///
/// # Safety
/// `buf` is valid for `len` bytes for the call (or `len` is 0).
pub(super) unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> FiResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(FiError::inval(format!("NULL buffer of {len} bytes")));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

/// A context pointer as the endpoints keep it.
pub(super) fn ctx(c: *mut c_void) -> u64 {
    c as usize as u64
}
