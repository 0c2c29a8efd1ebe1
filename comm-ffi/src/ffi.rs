//! The C ABI (the crate's one module with `unsafe`, audited: every pointer
//! C passes is checked for null and turned into a reference or slice here,
//! with the invariant stated at each block; everything else is in safe
//! `handle`). cbindgen generates include/comm.h from this file and the ABI's numbers
//! in `codes.rs` (re-exported here).
//!
//! Conventions: functions return `COMM_OK` (0) or a negative `COMM_ERR_*`
//! code, `comm_init_*` a handle or NULL; after an error,
//! `comm_last_error()` gives the message (per thread). No Rust panic
//! crosses the boundary: one becomes `COMM_ERR_PANIC`. A handle may be used
//! from one thread at a time (like an MPI communicator without
//! MPI_THREAD_MULTIPLE); `comm_finalize` frees it.
//!
//! Source: the thesis's Open MPI port (ch. 6) used the stack through a C
//! interface the same way; names follow MPI's (rank, size, tag, status,
//! ANY_SOURCE/ANY_TAG, barrier, bcast, allreduce).
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

pub use crate::codes::*;
use crate::handle::{FfiError, FlowOp, Handle};

/// An opaque communicator handle.
pub struct CommHandle(Handle);

/// What a receive got (MPI_Status).
#[repr(C)]
pub struct CommStatus {
    /// The sender's rank.
    pub source: c_int,
    /// The message's tag.
    pub tag: c_int,
    /// The message's length in bytes (also when truncated).
    pub len: usize,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(e: FfiError) -> c_int {
    let msg = CString::new(e.msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = msg);
    e.code
}

/// Runs `f`, turning its error or panic into a code and the last error.
fn guard(f: impl FnOnce() -> Result<c_int, FfiError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => fail(e),
        Err(_) => fail(FfiError {
            code: COMM_ERR_PANIC,
            msg: "a panic inside comm (a bug; please report it)".into(),
            truncated: None,
        }),
    }
}

/// # Safety
/// `c` is NULL or a handle from `comm_init_*` not yet finalized, used by
/// one thread at a time.
unsafe fn handle<'a>(c: *const CommHandle) -> Result<&'a Handle, FfiError> {
    // SAFETY: the caller's contract above; NULL is checked by as_ref.
    unsafe { c.as_ref() }
        .map(|h| &h.0)
        .ok_or_else(|| FfiError::arg("NULL communicator handle"))
}

/// # Safety
/// `p` is NULL (only with `len` 0) or points to `len` readable bytes that
/// stay valid and unchanged for the call.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], FfiError> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(FfiError::arg(format!("NULL buffer of {len} bytes")));
    }
    // SAFETY: non-null, and the caller guarantees len readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// # Safety
/// `p` is NULL (only with `len` 0) or points to `len` writable bytes that
/// nothing else accesses during the call.
unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], FfiError> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(FfiError::arg(format!("NULL buffer of {len} bytes")));
    }
    // SAFETY: non-null, and the caller guarantees len exclusive bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// # Safety
/// `p` is NULL (only with `n` 0) or points to `n` writable, aligned `T`s
/// that nothing else accesses during the call.
unsafe fn elems_mut<'a, T>(p: *mut T, n: usize) -> Result<&'a mut [T], FfiError> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(FfiError::arg(format!("NULL array of {n} elements")));
    }
    // SAFETY: non-null, and the caller guarantees n aligned exclusive T.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
unsafe fn text(p: *const c_char, what: &str) -> Result<String, FfiError> {
    if p.is_null() {
        return Err(FfiError::arg(format!("NULL {what}")));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(str::to_string)
        .map_err(|_| FfiError::arg(format!("{what} is not UTF-8")))
}

/// # Safety
/// `addrs` is NULL or points to `size` string pointers, each as in [`text`].
unsafe fn addresses(addrs: *const *const c_char, size: c_int) -> Result<Vec<String>, FfiError> {
    let n = usize::try_from(size)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| FfiError::arg(format!("size {size}: need at least one rank")))?;
    if addrs.is_null() {
        return Err(FfiError::arg("NULL address list"));
    }
    // SAFETY: non-null, and the caller guarantees `size` elements.
    let list = unsafe { std::slice::from_raw_parts(addrs, n) };
    list.iter()
        .enumerate()
        // SAFETY: each element is a string pointer per the contract.
        .map(|(i, &p)| unsafe { text(p, &format!("address of rank {i}")) })
        .collect()
}

fn init(f: impl FnOnce() -> Result<Handle, FfiError>) -> *mut CommHandle {
    let mut out = std::ptr::null_mut();
    guard(|| {
        out = Box::into_raw(Box::new(CommHandle(f()?)));
        Ok(COMM_OK)
    });
    out
}

/// Joins as `rank` the communicator of `size` ranks over CTP on UDP;
/// `addrs[i]` is rank i's "IP:PORT" (this rank binds `addrs[rank]`).
/// Returns NULL on error (see `comm_last_error`).
///
/// # Safety
/// `addrs` points to `size` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn comm_init_udp(
    rank: c_int,
    size: c_int,
    addrs: *const *const c_char,
) -> *mut CommHandle {
    // SAFETY: forwarded contract.
    init(|| Handle::udp(rank, &unsafe { addresses(addrs, size) }?))
}

/// As `comm_init_udp` over CTP on EDP on interface `iface` (needs
/// CAP_NET_RAW); `addrs[i]` is rank i's "MAC/PORT".
///
/// # Safety
/// `iface` is a NUL-terminated string; `addrs` as in `comm_init_udp`.
#[no_mangle]
pub unsafe extern "C" fn comm_init_edp(
    iface: *const c_char,
    rank: c_int,
    size: c_int,
    addrs: *const *const c_char,
) -> *mut CommHandle {
    init(|| {
        // SAFETY: forwarded contract.
        let iface = unsafe { text(iface, "interface name") }?;
        // SAFETY: forwarded contract.
        Handle::edp(&iface, rank, &unsafe { addresses(addrs, size) }?)
    })
}

/// This process's rank (MPI_Comm_rank), or a negative error code.
///
/// # Safety
/// `c` is a live handle (see the module docs).
#[no_mangle]
pub unsafe extern "C" fn comm_rank(c: *const CommHandle) -> c_int {
    // SAFETY: forwarded contract.
    guard(|| Ok(unsafe { handle(c) }?.rank() as c_int))
}

/// The number of ranks (MPI_Comm_size), or a negative error code.
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_size(c: *const CommHandle) -> c_int {
    // SAFETY: forwarded contract.
    guard(|| Ok(unsafe { handle(c) }?.size() as c_int))
}

/// Sends `len` bytes at `buf` to `dest` with `tag` (0..2^31-1); returns
/// when the message is confirmed by the peer's endpoint (MPI_Send).
///
/// # Safety
/// `c` is a live handle; `buf` holds `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn comm_send(
    c: *const CommHandle,
    dest: c_int,
    tag: c_int,
    buf: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let (h, data) = unsafe { (handle(c)?, bytes(buf, len)?) };
        h.send(dest, tag, data)?;
        Ok(COMM_OK)
    })
}

/// Receives the next message matching `source` and `tag` (or
/// `COMM_ANY_SOURCE` / `COMM_ANY_TAG`) into `buf` of `cap` bytes, in MPI's
/// order (MPI_Recv); fills `*status` when not NULL. A longer message
/// returns `COMM_ERR_TRUNCATED` with its first `cap` bytes in `buf`.
///
/// # Safety
/// `c` is a live handle; `buf` holds `cap` writable bytes; `status` is NULL
/// or points to a writable `CommStatus`.
#[no_mangle]
pub unsafe extern "C" fn comm_recv(
    c: *const CommHandle,
    source: c_int,
    tag: c_int,
    buf: *mut c_void,
    cap: usize,
    status: *mut CommStatus,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let (h, out) = unsafe { (handle(c)?, bytes_mut(buf, cap)?) };
        let (got, result) = match h.recv(source, tag, out) {
            Ok(st) => ((st.source, st.tag, st.len), Ok(COMM_OK)),
            Err(e) => match e.truncated {
                Some(t) => (t, Err(e)),
                None => return Err(e),
            },
        };
        // SAFETY: NULL or a writable CommStatus per the contract.
        if let Some(s) = unsafe { status.as_mut() } {
            *s = CommStatus {
                source: got.0 as c_int,
                tag: got.1 as c_int,
                len: got.2,
            };
        }
        result
    })
}

/// Blocks until every rank called it (MPI_Barrier).
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_barrier(c: *const CommHandle) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        unsafe { handle(c) }?.barrier()?;
        Ok(COMM_OK)
    })
}

/// Broadcasts `len` bytes of `buf` from `root` into every rank's `buf` (of
/// the same `len`) (MPI_Bcast).
///
/// # Safety
/// `c` is a live handle; `buf` holds `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn comm_bcast(
    c: *const CommHandle,
    root: c_int,
    buf: *mut c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let (h, b) = unsafe { (handle(c)?, bytes_mut(buf, len)?) };
        h.bcast(root, b)?;
        Ok(COMM_OK)
    })
}

/// From now on `comm_bcast` goes over MAK reliable multicast: this rank
/// joins MAK group `group` (group MAC 03:4d:41:4b:hh:ll) at EDP port
/// `port`. Collective: every rank calls it with the same values before the
/// next broadcast. Returns `COMM_ERR_ARG` for a communicator over UDP,
/// `COMM_ERR_IO` when the port is taken, `COMM_ERR_OTHER` when already
/// enabled.
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_enable_multicast_bcast(
    c: *const CommHandle,
    group: u16,
    port: u16,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        unsafe { handle(c) }?.enable_multicast_bcast(group, port)?;
        Ok(COMM_OK)
    })
}

/// Replaces each of the `count` integers at `values` by its sum over all
/// ranks (MPI_Allreduce with MPI_SUM on MPI_INT64_T; wrapping).
///
/// # Safety
/// `c` is a live handle; `values` holds `count` writable `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn comm_allreduce_sum_i64(
    c: *const CommHandle,
    values: *mut i64,
    count: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let (h, v) = unsafe { (handle(c)?, elems_mut(values, count)?) };
        h.allreduce_i64(v)?;
        Ok(COMM_OK)
    })
}

/// As `comm_allreduce_sum_i64` for `double` (summed in rank order at the
/// root, so every rank gets the same bits).
///
/// # Safety
/// `c` is a live handle; `values` holds `count` writable `double`.
#[no_mangle]
pub unsafe extern "C" fn comm_allreduce_sum_f64(
    c: *const CommHandle,
    values: *mut f64,
    count: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let (h, v) = unsafe { (handle(c)?, elems_mut(values, count)?) };
        h.allreduce_f64(v)?;
        Ok(COMM_OK)
    })
}

fn flow(c: *const CommHandle, peer: c_int, op: FlowOp) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract of the public callers.
        unsafe { handle(c) }?.flow(peer, op)?;
        Ok(COMM_OK)
    })
}

/// ULFC `through`: asks `peer` for the largest window it can grant us
/// (the flow-control library paper; notes-mak-ulfc.md).
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_through(c: *const CommHandle, peer: c_int) -> c_int {
    flow(c, peer, FlowOp::Through)
}

/// ULFC `rapid`: asks `peer` for a small window (response priority).
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_rapid(c: *const CommHandle, peer: c_int) -> c_int {
    flow(c, peer, FlowOp::Rapid)
}

/// Back to an equal share of `peer`'s receive budget (not in the paper).
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_normal(c: *const CommHandle, peer: c_int) -> c_int {
    flow(c, peer, FlowOp::Normal)
}

/// ULFC explicit disconnect: writes to `peer` fail with
/// `COMM_ERR_DISCONNECTED` until `comm_reconnect`; data accepted before is
/// kept and delivered once after it.
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_disconnect(c: *const CommHandle, peer: c_int) -> c_int {
    flow(c, peer, FlowOp::Disconnect)
}

/// ULFC reconnect after `comm_disconnect`.
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_reconnect(c: *const CommHandle, peer: c_int) -> c_int {
    flow(c, peer, FlowOp::Reconnect)
}

/// ULFC sequence reset toward `peer` (refused while messages to it are
/// queued or unconfirmed).
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_reset_seq(c: *const CommHandle, peer: c_int) -> c_int {
    flow(c, peer, FlowOp::ResetSeq)
}

/// ULFC `getdestbuf`: the window `peer` granted us, bytes (negative: an
/// error code).
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_dest_buf(c: *const CommHandle, peer: c_int) -> i64 {
    let mut out = 0i64;
    let rc = guard(|| {
        // SAFETY: forwarded contract.
        out = unsafe { handle(c) }?.dest_buf(peer)? as i64;
        Ok(COMM_OK)
    });
    if rc == COMM_OK {
        out
    } else {
        i64::from(rc)
    }
}

/// ULFC `state`: a `COMM_STATE_*` value, or a negative error code.
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn comm_state(c: *const CommHandle, peer: c_int) -> c_int {
    // SAFETY: forwarded contract.
    guard(|| unsafe { handle(c) }?.state(peer))
}

/// Waits up to `timeout_ms` for this rank's messages to be confirmed and
/// for every rank to arrive (flush, barrier), then frees the handle, also
/// on error (MPI_Finalize). NULL is accepted and does nothing.
///
/// # Safety
/// `c` is NULL or a live handle, not used again after this call.
#[no_mangle]
pub unsafe extern "C" fn comm_finalize(c: *mut CommHandle, timeout_ms: u32) -> c_int {
    if c.is_null() {
        return COMM_OK;
    }
    // SAFETY: a pointer from Box::into_raw in `init`, given back once.
    let h = unsafe { Box::from_raw(c) };
    guard(move || {
        h.0.finalize(Duration::from_millis(u64::from(timeout_ms)))?;
        Ok(COMM_OK)
    })
}

/// The message of this thread's last error ("" before any), valid until
/// this thread's next call into the library.
#[no_mangle]
pub extern "C" fn comm_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
