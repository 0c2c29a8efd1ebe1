//! The application's buffers on the data path (fi_msg(3), fi_tagged(3)):
//! checked and turned into slices here, for the tables of both endpoint
//! types.

use std::ffi::c_void;

use comm::{RecvBuf, SendBuf};

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

/// Bytes of `count` items of `size` bytes each, refused (`FI_EINVAL`)
/// beyond `isize::MAX`: no buffer is that large (`slice::from_raw_parts`'s
/// bound), so such a count is a caller's error, not a size to trust.
pub(super) fn slice_len(count: usize, size: usize, what: &str) -> FiResult<usize> {
    count
        .checked_mul(size)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            FiError::inval(format!(
                "{count} {what} of {size} bytes: more than any buffer holds"
            ))
        })
}

/// The receive buffer `ptr`/`len`.
///
/// Errors: `FI_EINVAL` for NULL with a length, or a length above
/// `isize::MAX`.
pub(super) fn raw(ptr: *mut u8, len: usize) -> FiResult<Box<dyn RecvBuf>> {
    slice_len(len, 1, "bytes")?;
    if len > 0 && ptr.is_null() {
        return Err(FiError::inval(format!("NULL buffer of {len} bytes")));
    }
    Ok(Box::new(RawBuf { ptr, len }))
}

/// A send buffer the application handed over with a send that completes
/// (not an inject): valid until the send completes (fi_msg(3), fi_tagged(3):
/// "the buffer must remain valid until the operation completes").
pub(super) struct RawSend {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the buffer belongs to the send until its completion; the
// application may not change or free it meanwhile, and the provider only
// reads it, from whichever thread progresses the endpoint.
unsafe impl Send for RawSend {}

impl SendBuf for RawSend {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 || self.ptr.is_null() {
            return &[];
        }
        // SAFETY: ptr is valid for len bytes until the send completes,
        // and the core drops this handle before it queues that completion
        // (comm's rendezvous: when the receiver has pulled the bytes, or
        // once CTP cancelled them); the borrow lives no longer than &self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The application's send buffer `data`, kept by the send until it
/// completes (a long message is then pulled from it without a copy; a
/// short one is copied, and this handle is never boxed).
///
/// # Safety
/// `data` is the buffer of a send that will complete (not an inject), valid
/// until that completion.
pub(super) unsafe fn keep(data: &[u8]) -> RawSend {
    RawSend {
        ptr: data.as_ptr(),
        len: data.len(),
    }
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
/// Errors: as [`raw`].
///
/// # Safety
/// `buf` is valid for `len` bytes for the call (or `len` is 0).
pub(super) unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> FiResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    slice_len(len, 1, "bytes")?;
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
