//! The completion queue object (fi_cq(3)) over [`crate::cq::Cq`]: entries
//! written in the format the CQ was opened with; reads drive the bound
//! endpoints first (manual progress).

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::objects::{the_cq, CqInner, CqObj, DomainObj, CQ_FI_OPS, DOMAIN_FI_OPS};
use super::{alloc, fid_of, guard, obj, put};
use crate::attr::fi_version;
use crate::cq::{Completion, Cq, ErrCompletion, Read};
use crate::error::{prov_errno_str, FiError, FiResult};
use crate::fi::*;

static CQ_OPS: fi_ops_cq = fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

/// `fi_cq_open`.
pub(super) unsafe extern "C" fn cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    out: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    guard("fi_cq_open", || {
        // SAFETY: domain is a fid this provider handed out (class checked).
        let d: &DomainObj =
            unsafe { obj(domain as *const c_void, FI_CLASS_DOMAIN, &DOMAIN_FI_OPS) }?;
        // SAFETY: attr is a valid fi_cq_attr (fi_cq(3) requires one).
        let a = unsafe { attr.as_ref() }.ok_or_else(|| FiError::inval("NULL cq attr"))?;
        let format = match a.format {
            FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_CONTEXT,
            f @ (FI_CQ_FORMAT_CONTEXT | FI_CQ_FORMAT_MSG | FI_CQ_FORMAT_DATA
            | FI_CQ_FORMAT_TAGGED) => f,
            f => return Err(FiError::nosys(&format!("CQ format {f}"))),
        };
        match a.wait_obj {
            FI_WAIT_NONE | FI_WAIT_UNSPEC => {}
            w => {
                return Err(FiError::nosys(&format!(
                    "CQ wait object {w} (use FI_WAIT_NONE or FI_WAIT_UNSPEC)"
                )))
            }
        }
        if a.flags & FI_AFFINITY != 0 || a.wait_cond != FI_CQ_COND_NONE {
            return Err(FiError::nosys("CQ signaling vectors and wait conditions"));
        }
        let p = alloc(CqObj {
            fid: fid_cq {
                fid: fid_of(FI_CLASS_CQ, context, &CQ_FI_OPS),
                ops: &CQ_OPS as *const _ as *mut _,
            },
            inner: CqInner {
                domain: d.inner.clone(),
                cq: Arc::new(Cq::new(a.size)),
                format,
                err_data: Mutex::new(Vec::new()),
                strerror: Mutex::new(CString::default()),
                api_version: d.inner.fabric.api_version,
                last: Mutex::new(None),
                signaled: AtomicBool::new(false),
            },
        });
        // SAFETY: a valid `struct fid_cq **` (fi_cq(3)).
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

/// Writes completion `c` as entry `i` of `buf` in `format`.
///
/// # Safety
/// `buf` holds at least `i + 1` entries of `format`.
unsafe fn write_entry(buf: *mut c_void, i: usize, format: fi_cq_format, c: &Completion) {
    let ctx = c.context as usize as *mut c_void;
    let b = c.buf as usize as *mut c_void;
    // SAFETY: buf is an array of the format's entry type with room for
    // entry i (the caller's contract), whichever arm runs.
    unsafe {
        match format {
            FI_CQ_FORMAT_MSG => (buf as *mut fi_cq_msg_entry).add(i).write(fi_cq_msg_entry {
                op_context: ctx,
                flags: c.flags,
                len: c.len,
            }),
            FI_CQ_FORMAT_DATA => (buf as *mut fi_cq_data_entry)
                .add(i)
                .write(fi_cq_data_entry {
                    op_context: ctx,
                    flags: c.flags,
                    len: c.len,
                    buf: b,
                    data: c.data,
                }),
            FI_CQ_FORMAT_TAGGED => {
                (buf as *mut fi_cq_tagged_entry)
                    .add(i)
                    .write(fi_cq_tagged_entry {
                        op_context: ctx,
                        flags: c.flags,
                        len: c.len,
                        buf: b,
                        data: c.data,
                        tag: c.tag,
                    })
            }
            _ => (buf as *mut fi_cq_entry)
                .add(i)
                .write(fi_cq_entry { op_context: ctx }),
        }
    }
}

/// One read: progress, then up to `count` entries into `buf` (and their
/// sources into `src`). Returns the count, `-FI_EAGAIN` or `-FI_EAVAIL`.
///
/// # Safety
/// `buf` holds `count` entries of the CQ's format; `src` is NULL or holds
/// `count` addresses.
unsafe fn read_into(
    c: &CqInner,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> FiResult<isize> {
    // A read of nothing still progresses (fabtests and MPI libraries read
    // 0 entries to drive the provider while a send answers FI_EAGAIN).
    c.cq.progress();
    if count == 0 {
        return Ok(0);
    }
    if buf.is_null() {
        return Err(FiError::inval("NULL completion buffer"));
    }
    let r = c.cq.read(count, |i, e| {
        // SAFETY: buf and src hold count > i entries (the caller's
        // contract).
        unsafe {
            write_entry(buf, i, c.format, e);
            if !src.is_null() {
                src.add(i).write(e.src);
            }
        }
    });
    match r {
        Read::Entries(n) => Ok(n as isize),
        Read::ErrorAvailable => Ok(-(FI_EAVAIL as isize)),
        Read::Empty => Ok(-(FI_EAGAIN as isize)),
    }
}

unsafe extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: cq is a fid this provider handed out; buf holds count
    // entries (fi_cq(3)).
    guard("fi_cq_read", || unsafe {
        read_into(the_cq(cq)?, buf, count, std::ptr::null_mut())
    })
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> isize {
    // SAFETY: as cq_read; src holds count addresses.
    guard("fi_cq_readfrom", || unsafe {
        read_into(the_cq(cq)?, buf, count, src)
    })
}

unsafe extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    guard("fi_cq_readerr", || {
        // SAFETY: cq is a fid this provider handed out (class and table
        // checked).
        let c = unsafe { the_cq(cq) }?;
        if buf.is_null() {
            return Err(FiError::inval("NULL error entry"));
        }
        let Some(e) = c.cq.read_err() else {
            return Ok(-(FI_EAGAIN as isize));
        };
        // SAFETY: fi_cq(3): buf is an error entry of the layout of the
        // caller's API version (remembered by the CQ), its err_data
        // holding err_data_size bytes when that is nonzero (API >= 1.5).
        unsafe { fill_err(c, buf, e) };
        Ok(1)
    })
}

/// Fills the caller's error entry `out` from `e`, writing no further than
/// its layout reaches: callers of API version < 1.5 pass the shorter
/// `fi_cq_err_entry_1_0` (libfabric's include/ofi_abi.h), which ends with
/// `err_data` and has no `err_data_size`. `err_data` gets only what the
/// entry carries (most carry nothing, as libfabric's own providers' do):
/// copied into the caller's buffer when it offers one (API >= 1.5,
/// `err_data_size` > 0; at most that many bytes), else pointed at the CQ's
/// own copy, valid until the next read (fi_cq(3)). The message stays for
/// `fi_cq_strerror`.
///
/// # Safety
/// `out` is valid for writes of the fields of `fi_cq_err_entry_1_0`, and
/// of a whole `fi_cq_err_entry` when `c.api_version` >= 1.5; then, when
/// its `err_data_size` is nonzero, `err_data` is valid for that many bytes.
unsafe fn fill_err(c: &CqInner, out: *mut fi_cq_err_entry, e: ErrCompletion) {
    use std::ptr::{addr_of, addr_of_mut, null_mut};
    let v15 = c.api_version >= fi_version(1, 5);
    let offered = if v15 && !e.data.is_empty() {
        // SAFETY: with API >= 1.5 the entry has both fields (the caller's
        // contract); err_data is read only to keep the caller's buffer.
        unsafe {
            let room = addr_of!((*out).err_data_size).read();
            let buf = addr_of!((*out).err_data).read();
            (room > 0 && !buf.is_null()).then_some((buf as *mut u8, room))
        }
    } else {
        None
    };
    // SAFETY: every field up to err_data is in both layouts (the caller's
    // contract); writes through raw field pointers, no reference to a
    // struct that may be the shorter one.
    unsafe {
        addr_of_mut!((*out).op_context).write(e.base.context as usize as *mut c_void);
        addr_of_mut!((*out).flags).write(e.base.flags);
        addr_of_mut!((*out).len).write(e.base.len);
        addr_of_mut!((*out).buf).write(e.base.buf as usize as *mut c_void);
        addr_of_mut!((*out).data).write(e.base.data);
        addr_of_mut!((*out).tag).write(e.base.tag);
        addr_of_mut!((*out).olen).write(e.olen);
        addr_of_mut!((*out).err).write(e.err as c_int);
        addr_of_mut!((*out).prov_errno).write(e.prov as c_int);
    }
    let size = match offered {
        Some((buf, room)) => {
            let n = room.min(e.data.len());
            // SAFETY: the caller's buffer holds room >= n bytes.
            unsafe { std::ptr::copy_nonoverlapping(e.data.as_ptr(), buf, n) };
            n
        }
        None => {
            let mut d = c.err_data.lock().unwrap_or_else(|p| p.into_inner());
            d.clone_from(&e.data);
            let p = if d.is_empty() {
                null_mut()
            } else {
                d.as_mut_ptr() as *mut c_void
            };
            // SAFETY: err_data is in both layouts.
            unsafe { addr_of_mut!((*out).err_data).write(p) };
            d.len()
        }
    };
    if v15 {
        // SAFETY: a 1.5 entry has err_data_size (the caller's contract).
        unsafe { addr_of_mut!((*out).err_data_size).write(size) };
    }
    *c.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((e.prov as i32, e.msg));
}

/// `fi_cq_sread`: reads, waiting up to `timeout` ms (negative: forever)
/// while nothing is there: in the endpoint's own wait (the runtime driver's,
/// with the configured wait policy) when one endpoint is bound, else by
/// yielding the CPU between reads.
///
/// # Safety
/// As [`read_into`].
unsafe fn sread_into(
    c: &CqInner,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    timeout: c_int,
) -> FiResult<isize> {
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        // SAFETY: the caller's contract.
        let r = unsafe { read_into(c, buf, count, src) }?;
        if r != -(FI_EAGAIN as isize) {
            return Ok(r);
        }
        if c.signaled.swap(false, Ordering::AcqRel) {
            return Ok(-(FI_ECANCELED as isize));
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(-(FI_EAGAIN as isize));
        }
        // At most 100 ms per wait, so that fi_cq_signal is seen.
        let slice = deadline.map_or(Duration::from_millis(100), |d| {
            (d - now).min(Duration::from_millis(100))
        });
        if !c.cq.wait_source(slice) {
            std::thread::yield_now();
        }
    }
}

unsafe extern "C" fn cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: as cq_read.
    guard("fi_cq_sread", || unsafe {
        sread_into(the_cq(cq)?, buf, count, std::ptr::null_mut(), timeout)
    })
}

unsafe extern "C" fn cq_sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: as cq_readfrom.
    guard("fi_cq_sreadfrom", || unsafe {
        sread_into(the_cq(cq)?, buf, count, src, timeout)
    })
}

unsafe extern "C" fn cq_signal(cq: *mut fid_cq) -> c_int {
    guard("fi_cq_signal", || {
        // SAFETY: cq is a fid this provider handed out.
        unsafe { the_cq(cq) }?
            .signaled
            .store(true, Ordering::Release);
        Ok(0)
    })
}

unsafe extern "C" fn cq_strerror(
    cq: *mut fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: cq is a fid this provider handed out (class checked);
        // buf is NULL or holds len bytes (fi_cq(3)).
        unsafe { strerror_into(cq, prov_errno, buf, len) }
    });
    r.unwrap_or(c"clusternet: fi_cq_strerror failed".as_ptr())
}

/// fi_cq_strerror's text: the description of `prov_errno`, with the last
/// error's message when it had that number; into `buf` when given, else
/// kept in the CQ until the next call.
///
/// # Safety
/// `cq` is NULL or a live CQ fid of ours; `buf` is NULL or holds `len`
/// bytes.
unsafe fn strerror_into(
    cq: *mut fid_cq,
    prov_errno: c_int,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: the caller's contract.
    let Ok(c) = (unsafe { the_cq(cq) }) else {
        return c"clusternet: fi_cq_strerror on an invalid CQ".as_ptr();
    };
    let mut s = prov_errno_str(prov_errno).to_string();
    if let Some((n, m)) = &*c.last.lock().unwrap_or_else(|p| p.into_inner()) {
        if *n == prov_errno {
            s = format!("{s}: {m}");
        }
    }
    let cs = CString::new(s.replace('\0', " ")).unwrap_or_default();
    if !buf.is_null() && len > 0 {
        let b = cs.as_bytes();
        let n = b.len().min(len - 1);
        // SAFETY: buf holds len > n bytes (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), buf as *mut u8, n);
            buf.add(n).write(0);
        }
        return buf;
    }
    let mut keep = c.strerror.lock().unwrap_or_else(|p| p.into_inner());
    *keep = cs;
    keep.as_ptr()
}
