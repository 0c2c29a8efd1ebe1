//! The endpoint object (fi_endpoint(3)) with its control, CM and message
//! tables (fi_cm(3), fi_msg(3)) over [`crate::dgram::DgramEp`].

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::fabric::DomainObj;
use super::sys::*;
use super::{alloc, fi_ops_with, fid_of, free, guard, info, neg, obj, put, Obj};
use crate::dgram::{DgramEp, RecvBuf, SendMode};
use crate::domain::Domain;
use crate::error::{FiError, FiResult};

/// What an endpoint object holds.
pub(super) struct EpInner {
    #[allow(dead_code)]
    domain: Arc<Domain>,
    ep: Arc<DgramEp>,
}

type EpObj = Obj<fid_ep, EpInner>;

/// A receive buffer the application posted: a pointer and a length that
/// stay valid until the receive completes (fi_msg(3): "the buffer must
/// remain valid until the operation completes").
struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer belongs to the posted receive until its completion;
// libfabric's contract forbids the application to touch it meanwhile, so
// moving the handle to the thread that progresses the endpoint is sound.
unsafe impl Send for RawBuf {}

impl RecvBuf for RawBuf {
    fn bytes(&mut self) -> &mut [u8] {
        if self.len == 0 || self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: ptr is valid for len bytes and exclusively the receive's
        // until it completes (see the type's documentation); the returned
        // borrow lives no longer than &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn addr(&self) -> u64 {
        self.ptr as usize as u64
    }
}

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
        let ep = d.inner.dgram_endpoint(&i)?;
        let p = alloc(EpObj {
            fid: fid_ep {
                fid: fid_of(FI_CLASS_EP, context, &EP_FI_OPS),
                ops: &EP_OPS as *const _ as *mut _,
                cm: &CM_OPS as *const _ as *mut _,
                msg: &MSG_OPS as *const _ as *mut _,
                // Not offered (no FI_RMA, FI_TAGGED, FI_ATOMIC or
                // FI_COLLECTIVE in the endpoint's caps): NULL, as
                // libfabric's own providers leave them.
                rma: std::ptr::null_mut(),
                tagged: std::ptr::null_mut(),
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

/// The endpoint behind `f`.
///
/// # Safety
/// `f` is NULL or a fid this provider handed out, not yet closed.
unsafe fn the_ep<'a>(f: *const c_void) -> FiResult<&'a Arc<DgramEp>> {
    // SAFETY: the caller's contract; the class is checked.
    let o: &EpObj = unsafe { obj(f, FI_CLASS_EP) }?;
    Ok(&o.inner.ep)
}

unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of an endpoint we opened (class checked).
    guard("fi_close(ep)", || unsafe {
        free::<fid_ep, EpInner>(f, FI_CLASS_EP, |_| None)
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
                let av = unsafe { super::av::av_of(b) }?;
                ep.bind_av(av.clone())?
            }
            FI_CLASS_CQ => {
                // SAFETY: b is a live fid of ours (the class is checked again).
                let cq = unsafe { super::cq::cq_of(b) }?;
                ep.bind_cq(cq.clone(), flags)?
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
                ep.enable()?;
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
        if ep.cancel(context as usize as u64) {
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
        let name = unsafe { the_ep(f as *const c_void) }?.name().encode();
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

/// The one buffer of an iovec array of `count` (0 or 1) entries.
///
/// # Safety
/// `iov` is NULL (count 0) or holds `count` valid iovecs.
unsafe fn one_iov(iov: *const iovec, count: usize) -> FiResult<(*mut u8, usize)> {
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
unsafe fn send_bytes<'a>(buf: *const c_void, len: usize) -> FiResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(FiError::inval(format!("NULL buffer of {len} bytes")));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

fn post(
    ep: &DgramEp,
    ptr: *mut u8,
    len: usize,
    context: *mut c_void,
    flags: Option<u64>,
) -> FiResult<isize> {
    if len > 0 && ptr.is_null() {
        return Err(FiError::inval(format!("NULL buffer of {len} bytes")));
    }
    ep.post_recv(
        Box::new(RawBuf { ptr, len }),
        context as usize as u64,
        flags,
    )?;
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
    guard("fi_recv", || {
        // SAFETY: e is an endpoint fid of ours (class checked); buf stays
        // valid until the receive completes (fi_msg(3)).
        let ep = unsafe { the_ep(e as *const c_void) }?;
        post(ep, buf as *mut u8, len, context, None)
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
        // SAFETY: as msg_recv; iov holds count iovecs.
        let (ep, (p, l)) = unsafe { (the_ep(e as *const c_void)?, one_iov(iov, count)?) };
        post(ep, p, l, context, None)
    })
}

unsafe extern "C" fn msg_recvmsg(e: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard("fi_recvmsg", || {
        // SAFETY: as msg_recvv; msg is a valid fi_msg (fi_msg(3)).
        let ep = unsafe { the_ep(e as *const c_void) }?;
        // SAFETY: as above; NULL checked by as_ref.
        let m = unsafe { msg.as_ref() }.ok_or_else(|| FiError::inval("NULL msg"))?;
        // SAFETY: m.msg_iov holds m.iov_count iovecs.
        let (p, l) = unsafe { one_iov(m.msg_iov, m.iov_count) }?;
        post(ep, p, l, m.context, Some(flags))
    })
}

/// Sends `data` on endpoint `e`.
///
/// # Safety
/// `e` is NULL or a fid this provider handed out, not yet closed.
unsafe fn send(
    e: *mut fid_ep,
    data: FiResult<&[u8]>,
    dest: fi_addr_t,
    context: *mut c_void,
    mode: SendMode,
) -> FiResult<isize> {
    // SAFETY: the caller's contract (the class is checked).
    let ep = unsafe { the_ep(e as *const c_void) }?;
    ep.send(data?, dest, context as usize as u64, mode)?;
    Ok(0)
}

unsafe extern "C" fn msg_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: buf holds len bytes for the call (fi_msg(3)).
    guard("fi_send", || unsafe {
        send(e, send_bytes(buf, len), dest, context, SendMode::Default)
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
        // SAFETY: iov holds count iovecs, each buffer valid for the call.
        let data =
            unsafe { one_iov(iov, count).and_then(|(p, l)| send_bytes(p as *const c_void, l)) };
        // SAFETY: e is the endpoint fid the caller passed.
        unsafe { send(e, data, dest, context, SendMode::Default) }
    })
}

unsafe extern "C" fn msg_sendmsg(e: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard("fi_sendmsg", || {
        // SAFETY: msg is a valid fi_msg (fi_msg(3)); NULL checked.
        let m = unsafe { msg.as_ref() }.ok_or_else(|| FiError::inval("NULL msg"))?;
        if flags & FI_REMOTE_CQ_DATA != 0 {
            return Err(FiError::nosys("remote CQ data on FI_EP_DGRAM"));
        }
        // SAFETY: m.msg_iov holds m.iov_count iovecs valid for the call.
        let data = unsafe {
            one_iov(m.msg_iov, m.iov_count).and_then(|(p, l)| send_bytes(p as *const c_void, l))
        };
        // SAFETY: e is the endpoint fid the caller passed.
        unsafe { send(e, data, m.addr, m.context, SendMode::Flags(flags)) }
    })
}

unsafe extern "C" fn msg_inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
) -> isize {
    // SAFETY: buf holds len bytes for the call (fi_msg(3)).
    guard("fi_inject", || unsafe {
        send(
            e,
            send_bytes(buf, len),
            dest,
            std::ptr::null_mut(),
            SendMode::Inject,
        )
    })
}

unsafe extern "C" fn msg_senddata(
    _e: *mut fid_ep,
    _buf: *const c_void,
    _len: usize,
    _desc: *mut c_void,
    _data: u64,
    _dest: fi_addr_t,
    _context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}

unsafe extern "C" fn msg_injectdata(
    _e: *mut fid_ep,
    _buf: *const c_void,
    _len: usize,
    _data: u64,
    _dest: fi_addr_t,
) -> isize {
    -(FI_ENOSYS as isize)
}
