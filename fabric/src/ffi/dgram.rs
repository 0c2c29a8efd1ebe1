//! The FI_EP_DGRAM endpoint object (fi_endpoint(3)) over
//! [`crate::dgram::DgramEp`]: its control and CM tables (fi_cm(3)) and its
//! message table (fi_msg(3)); no tagged table (FI_TAGGED is not offered
//! on datagrams), and no remote CQ data. The tables say the type: every
//! function here reaches a `DgramEp`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::buf::{bytes, ctx, one_iov, raw};
use super::ep::{bind_target, cancelled, cm_ops, ep_ops, put_name, Bind};
use super::objects::{the_ep, EpInner, EpObj};
use super::{alloc, fi_ops_with, fid_of, free, guard};
use crate::dgram::{DgramEp, SendMode};
use crate::domain::Domain;
use crate::error::{FiError, FiResult};
use crate::fi::*;

static DGRAM_FI_OPS: fi_ops = fi_ops_with(dgram_close, Some(dgram_bind), Some(dgram_control));

static DGRAM_EP_OPS: fi_ops_ep = ep_ops(dgram_cancel);

static DGRAM_CM_OPS: fi_ops_cm = cm_ops(dgram_getname);

/// The object handed to C for the FI_EP_DGRAM endpoint `ep` of `domain`,
/// with `context` (fi_endpoint).
pub(super) fn open(domain: Arc<Domain>, ep: Arc<DgramEp>, context: *mut c_void) -> *mut fid_ep {
    alloc(EpObj {
        fid: fid_ep {
            fid: fid_of(FI_CLASS_EP, context, &DGRAM_FI_OPS),
            ops: &DGRAM_EP_OPS as *const _ as *mut _,
            cm: &DGRAM_CM_OPS as *const _ as *mut _,
            msg: &MSG_OPS as *const _ as *mut _,
            // Not offered (no FI_TAGGED, FI_RMA, FI_ATOMIC or
            // FI_COLLECTIVE in the caps): NULL, as libfabric's own
            // providers leave them.
            tagged: std::ptr::null_mut(),
            rma: std::ptr::null_mut(),
            atomic: std::ptr::null_mut(),
            collective: std::ptr::null_mut(),
        },
        inner: EpInner { domain, ep },
    })
}

/// The DGRAM endpoint behind `f`.
///
/// # Safety
/// `f` is NULL or a live fid of ours (the class and the table are
/// checked).
unsafe fn dgram<'a, P>(f: *mut P) -> FiResult<&'a Arc<DgramEp>> {
    // SAFETY: the caller's contract; DGRAM_FI_OPS is the generic table of
    // DGRAM endpoints alone (see `open`).
    unsafe { the_ep(f as *const c_void, &DGRAM_FI_OPS) }
}

unsafe extern "C" fn dgram_close(f: *mut fid) -> c_int {
    guard("fi_close(ep)", || {
        // SAFETY: f is the fid of an endpoint we opened (class and table
        // checked).
        unsafe { free::<fid_ep, EpInner<DgramEp>>(f, FI_CLASS_EP, &DGRAM_FI_OPS, |_| None) }
    })
}

unsafe extern "C" fn dgram_bind(f: *mut fid, b: *mut fid, flags: u64) -> c_int {
    guard("fi_ep_bind", || {
        // SAFETY: f is an endpoint fid of ours (class and table checked);
        // b a fid of ours or NULL (checked by class).
        let (d, b) = unsafe { (dgram(f)?, bind_target(b, flags)?) };
        match b {
            Bind::Av(av) => d.bind_av(av.clone())?,
            Bind::Cq(cq) => d.bind_cq(cq.clone(), flags)?,
            Bind::Inert => {}
        }
        Ok(0)
    })
}

unsafe extern "C" fn dgram_control(f: *mut fid, cmd: c_int, _arg: *mut c_void) -> c_int {
    guard("fi_control(ep)", || {
        // SAFETY: f is an endpoint fid of ours (class and table checked).
        let d = unsafe { dgram(f) }?;
        match cmd as u32 {
            FI_ENABLE => {
                d.enable()?;
                Ok(0)
            }
            c => Err(FiError::nosys(&format!("endpoint control command {c}"))),
        }
    })
}

unsafe extern "C" fn dgram_cancel(f: fid_t, context: *mut c_void) -> isize {
    guard("fi_cancel", || {
        // SAFETY: f is an endpoint fid of ours (class and table checked).
        let d = unsafe { dgram(f) }?;
        cancelled(d.cancel(ctx(context)))
    })
}

unsafe extern "C" fn dgram_getname(f: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard("fi_getname", || {
        // SAFETY: f is an endpoint fid of ours (class and table checked);
        // addrlen and addr are as fi_cm(3) says.
        unsafe { put_name(&dgram(f)?.name_bytes(), addr, addrlen) }
    })
}

// --- fi_msg ---

static MSG_OPS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

/// Posts a receive: the next datagram, from any source.
///
/// # Safety
/// `e` as [`dgram`]; `ptr` valid for `len` bytes until the receive
/// completes.
unsafe fn post(
    e: *mut fid_ep,
    ptr: *mut u8,
    len: usize,
    context: *mut c_void,
    flags: Option<u64>,
) -> FiResult<isize> {
    let buf = raw(ptr, len)?;
    // SAFETY: the caller's contract.
    let d = unsafe { dgram(e) }?;
    d.post_recv(buf, ctx(context), flags)?;
    Ok(0)
}

/// Sends a datagram; remote CQ data is not offered.
///
/// # Safety
/// `e` as [`dgram`].
unsafe fn send(
    e: *mut fid_ep,
    data: &[u8],
    dest: u64,
    cq_data: Option<u64>,
    context: *mut c_void,
    mode: SendMode,
) -> FiResult<isize> {
    // SAFETY: the caller's contract.
    let d = unsafe { dgram(e) }?;
    if cq_data.is_some() {
        return Err(FiError::nosys("remote CQ data on FI_EP_DGRAM"));
    }
    d.send(data, dest, ctx(context), mode)?;
    Ok(0)
}

unsafe extern "C" fn msg_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    _src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: e is an endpoint fid of ours (checked); buf stays valid until
    // the receive completes (fi_msg(3)).
    guard("fi_recv", || unsafe {
        post(e, buf as *mut u8, len, context, None)
    })
}

unsafe extern "C" fn msg_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    _src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard("fi_recvv", || {
        // SAFETY: iov holds count iovecs (fi_msg(3)); as msg_recv.
        unsafe {
            let (p, l) = one_iov(iov, count)?;
            post(e, p, l, context, None)
        }
    })
}

unsafe extern "C" fn msg_recvmsg(e: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard("fi_recvmsg", || {
        // SAFETY: msg is a valid fi_msg (fi_msg(3)); NULL checked.
        let m = unsafe { msg.as_ref() }.ok_or_else(|| FiError::inval("NULL msg"))?;
        // SAFETY: m.msg_iov holds m.iov_count iovecs; as msg_recv.
        unsafe {
            let (p, l) = one_iov(m.msg_iov, m.iov_count)?;
            post(e, p, l, m.context, Some(flags))
        }
    })
}

unsafe extern "C" fn msg_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: buf holds len bytes for the call (fi_msg(3)); e as post.
    guard("fi_send", || unsafe {
        send(e, bytes(buf, len)?, dest, None, context, SendMode::Default)
    })
}

unsafe extern "C" fn msg_sendv(
    e: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard("fi_sendv", || {
        // SAFETY: iov holds count iovecs whose buffers are valid for the
        // call; e as post.
        unsafe {
            let (p, l) = one_iov(iov, count)?;
            send(
                e,
                bytes(p as *const c_void, l)?,
                dest,
                None,
                context,
                SendMode::Default,
            )
        }
    })
}

unsafe extern "C" fn msg_sendmsg(e: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard("fi_sendmsg", || {
        // SAFETY: msg is a valid fi_msg (fi_msg(3)); NULL checked.
        let m = unsafe { msg.as_ref() }.ok_or_else(|| FiError::inval("NULL msg"))?;
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        // SAFETY: m.msg_iov holds m.iov_count iovecs valid for the call.
        unsafe {
            let (p, l) = one_iov(m.msg_iov, m.iov_count)?;
            send(
                e,
                bytes(p as *const c_void, l)?,
                m.addr,
                data,
                m.context,
                SendMode::Flags(flags),
            )
        }
    })
}

unsafe extern "C" fn msg_inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
) -> isize {
    // SAFETY: buf holds len bytes for the call (fi_msg(3)); e as post.
    guard("fi_inject", || unsafe {
        send(
            e,
            bytes(buf, len)?,
            dest,
            None,
            std::ptr::null_mut(),
            SendMode::Inject,
        )
    })
}

unsafe extern "C" fn msg_senddata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: as msg_send.
    guard("fi_senddata", || unsafe {
        send(
            e,
            bytes(buf, len)?,
            dest,
            Some(data),
            context,
            SendMode::Default,
        )
    })
}

unsafe extern "C" fn msg_injectdata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
) -> isize {
    // SAFETY: as msg_inject.
    guard("fi_injectdata", || unsafe {
        send(
            e,
            bytes(buf, len)?,
            dest,
            Some(data),
            std::ptr::null_mut(),
            SendMode::Inject,
        )
    })
}
