//! The FI_EP_RDM endpoint object (fi_endpoint(3)) over
//! [`crate::rdm::RdmEp`]: its control and CM tables (fi_cm(3)) and its
//! data path, the message table (fi_msg(3)) and the tagged table
//! (fi_tagged(3)), as prov/tcp's xnet_rdm.c. The tables say the type:
//! every function here reaches an `RdmEp`. Untagged messages are tagged
//! messages with [`MSG_TAG`] set.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use comm::tagged::PeekMode;

use super::buf::{bytes, ctx, keep, one_iov, raw};
use super::ep::{bind_target, cancelled, cm_ops, ep_ops, put_name, Bind};
use super::objects::{the_ep, EpInner, EpObj};
use super::{alloc, fi_ops_with, fid_of, free, guard};
use crate::domain::Domain;
use crate::error::{FiError, FiResult};
use crate::fi::*;
use crate::limits::MSG_TAG;
use crate::rdm::{OpFlags, RdmEp};

static RDM_FI_OPS: fi_ops = fi_ops_with(rdm_close, Some(rdm_bind), Some(rdm_control));

static RDM_EP_OPS: fi_ops_ep = ep_ops(rdm_cancel);

static RDM_CM_OPS: fi_ops_cm = cm_ops(rdm_getname);

/// The object handed to C for the FI_EP_RDM endpoint `ep` of `domain`,
/// with `context` (fi_endpoint).
pub(super) fn open(domain: Arc<Domain>, ep: Arc<RdmEp>, context: *mut c_void) -> *mut fid_ep {
    alloc(EpObj {
        fid: fid_ep {
            fid: fid_of(FI_CLASS_EP, context, &RDM_FI_OPS),
            ops: &RDM_EP_OPS as *const _ as *mut _,
            cm: &RDM_CM_OPS as *const _ as *mut _,
            msg: &MSG_OPS as *const _ as *mut _,
            tagged: &TAGGED_OPS as *const _ as *mut _,
            // Not offered (no FI_RMA, FI_ATOMIC or FI_COLLECTIVE in the
            // caps): NULL, as libfabric's own providers leave them.
            rma: std::ptr::null_mut(),
            atomic: std::ptr::null_mut(),
            collective: std::ptr::null_mut(),
        },
        inner: EpInner { domain, ep },
    })
}

/// The RDM endpoint behind `f`.
///
/// # Safety
/// `f` is NULL or a live fid of ours (the class and the table are
/// checked).
unsafe fn rdm<'a, P>(f: *mut P) -> FiResult<&'a Arc<RdmEp>> {
    // SAFETY: the caller's contract; RDM_FI_OPS is the generic table of
    // RDM endpoints alone (see `open`).
    unsafe { the_ep(f as *const c_void, &RDM_FI_OPS) }
}

unsafe extern "C" fn rdm_close(f: *mut fid) -> c_int {
    guard("fi_close(ep)", || {
        // SAFETY: f is the fid of an endpoint we opened (class and table
        // checked).
        let r = unsafe { rdm(f) }?;
        // Messages sent go out before the socket does.
        r.flush();
        // The endpoint's counters (FI_LOG_LEVEL=info shows them).
        for line in r.counters() {
            super::log(FI_LOG_INFO, FI_LOG_EP_DATA, || line);
        }
        // SAFETY: as above.
        unsafe { free::<fid_ep, EpInner<RdmEp>>(f, FI_CLASS_EP, &RDM_FI_OPS, |_| None) }
    })
}

unsafe extern "C" fn rdm_bind(f: *mut fid, b: *mut fid, flags: u64) -> c_int {
    guard("fi_ep_bind", || {
        // SAFETY: f is an endpoint fid of ours (class and table checked);
        // b a fid of ours or NULL (checked by class).
        let (r, b) = unsafe { (rdm(f)?, bind_target(b, flags)?) };
        match b {
            Bind::Av(av) => r.bind_av(av.clone())?,
            Bind::Cq(cq) => r.bind_cq(cq.clone(), flags)?,
            Bind::Inert => {}
        }
        Ok(0)
    })
}

unsafe extern "C" fn rdm_control(f: *mut fid, cmd: c_int, _arg: *mut c_void) -> c_int {
    guard("fi_control(ep)", || {
        // SAFETY: f is an endpoint fid of ours (class and table checked).
        let r = unsafe { rdm(f) }?;
        match cmd as u32 {
            FI_ENABLE => {
                r.enable()?;
                Ok(0)
            }
            c => Err(FiError::nosys(&format!("endpoint control command {c}"))),
        }
    })
}

unsafe extern "C" fn rdm_cancel(f: fid_t, context: *mut c_void) -> isize {
    guard("fi_cancel", || {
        // SAFETY: f is an endpoint fid of ours (class and table checked).
        let r = unsafe { rdm(f) }?;
        cancelled(r.cancel(ctx(context)))
    })
}

unsafe extern "C" fn rdm_getname(f: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard("fi_getname", || {
        // SAFETY: f is an endpoint fid of ours (class and table checked);
        // addrlen and addr are as fi_cm(3) says.
        unsafe { put_name(&rdm(f)?.name_bytes(), addr, addrlen) }
    })
}

/// Tags the application may use: none with the bit FI_MSG reserves.
fn check_tag(tag: u64) -> FiResult<()> {
    if tag & MSG_TAG != 0 {
        return Err(FiError::inval(format!(
            "tag {tag:#x} uses bit 63, which mem_tag_format reserves"
        )));
    }
    Ok(())
}

// --- fi_msg: tagged messages with MSG_TAG ---

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

/// Posts an untagged receive.
///
/// # Safety
/// `e` as [`rdm`]; `ptr` valid for `len` bytes until the receive
/// completes.
unsafe fn post(
    e: *mut fid_ep,
    ptr: *mut u8,
    len: usize,
    src: u64,
    context: *mut c_void,
    flags: Option<u64>,
) -> FiResult<isize> {
    let buf = raw(ptr, len)?;
    // SAFETY: the caller's contract.
    let r = unsafe { rdm(e) }?;
    let f = flags.map_or(OpFlags::Default, OpFlags::Flags);
    r.recv(buf, src, MSG_TAG, 0, ctx(context), f)?;
    Ok(0)
}

/// Sends untagged.
///
/// # Safety
/// `e` as [`rdm`].
unsafe fn send(
    e: *mut fid_ep,
    data: &[u8],
    dest: u64,
    cq_data: Option<u64>,
    context: *mut c_void,
    flags: OpFlags,
) -> FiResult<isize> {
    // SAFETY: the caller's contract.
    let r = unsafe { rdm(e) }?;
    // SAFETY: `data` is the application's buffer, valid until the send
    // completes (fi_msg(3)); `send_buf` copies an inject's.
    let buf = unsafe { keep(data) };
    r.send_buf(buf, dest, MSG_TAG, cq_data, ctx(context), flags)?;
    Ok(0)
}

unsafe extern "C" fn msg_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: e is an endpoint fid of ours (checked); buf stays valid until
    // the receive completes (fi_msg(3)).
    guard("fi_recv", || unsafe {
        post(e, buf as *mut u8, len, src, context, None)
    })
}

unsafe extern "C" fn msg_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard("fi_recvv", || {
        // SAFETY: iov holds count iovecs (fi_msg(3)); as msg_recv.
        unsafe {
            let (p, l) = one_iov(iov, count)?;
            post(e, p, l, src, context, None)
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
            post(e, p, l, m.addr, m.context, Some(flags))
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
        send(e, bytes(buf, len)?, dest, None, context, OpFlags::Default)
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
                OpFlags::Default,
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
                OpFlags::Flags(flags),
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
            OpFlags::Inject,
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
            OpFlags::Default,
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
            OpFlags::Inject,
        )
    })
}

// --- fi_tagged ---

static TAGGED_OPS: fi_ops_tagged = fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(t_recv),
    recvv: Some(t_recvv),
    recvmsg: Some(t_recvmsg),
    send: Some(t_send),
    sendv: Some(t_sendv),
    sendmsg: Some(t_sendmsg),
    inject: Some(t_inject),
    senddata: Some(t_senddata),
    injectdata: Some(t_injectdata),
};

/// Posts a tagged receive (the reserved bit never matches: it is cleared
/// from `ignore`).
///
/// # Safety
/// As [`post`].
#[allow(clippy::too_many_arguments)]
unsafe fn t_post(
    e: *mut fid_ep,
    ptr: *mut u8,
    len: usize,
    src: u64,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    flags: OpFlags,
) -> FiResult<isize> {
    check_tag(tag)?;
    // SAFETY: the caller's contract.
    let r = unsafe { rdm(e) }?;
    r.recv(
        raw(ptr, len)?,
        src,
        tag,
        ignore & !MSG_TAG,
        ctx(context),
        flags,
    )?;
    Ok(0)
}

/// Sends tagged.
///
/// # Safety
/// As [`send`].
unsafe fn t_send_bytes(
    e: *mut fid_ep,
    data: &[u8],
    dest: u64,
    tag: u64,
    cq_data: Option<u64>,
    context: *mut c_void,
    flags: OpFlags,
) -> FiResult<isize> {
    check_tag(tag)?;
    // SAFETY: the caller's contract.
    let r = unsafe { rdm(e) }?;
    // SAFETY: `data` is the application's buffer, valid until the send
    // completes (fi_tagged(3)); `send_buf` copies an inject's.
    let buf = unsafe { keep(data) };
    r.send_buf(buf, dest, tag, cq_data, ctx(context), flags)?;
    Ok(0)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: as msg_recv.
    guard("fi_trecv", || unsafe {
        t_post(
            e,
            buf as *mut u8,
            len,
            src,
            tag,
            ignore,
            context,
            OpFlags::Default,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_trecvv", || {
        // SAFETY: as msg_recvv.
        unsafe {
            let (p, l) = one_iov(iov, count)?;
            t_post(e, p, l, src, tag, ignore, context, OpFlags::Default)
        }
    })
}

/// fi_trecvmsg: a receive, or with FI_PEEK a probe (FI_CLAIM: keep the
/// message for this context; FI_DISCARD: drop it), or with FI_CLAIM alone
/// the receive (FI_DISCARD: the drop) of the message claimed with this
/// context (fi_tagged(3)).
unsafe extern "C" fn t_recvmsg(e: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    guard("fi_trecvmsg", || {
        // SAFETY: msg is a valid fi_msg_tagged (fi_tagged(3)); NULL checked.
        let m = unsafe { msg.as_ref() }.ok_or_else(|| FiError::inval("NULL msg"))?;
        check_tag(m.tag)?;
        if flags & FI_MULTI_RECV != 0 {
            return Err(FiError::nosys("FI_MULTI_RECV"));
        }
        // SAFETY: e as post.
        let r = unsafe { rdm(e) }?;
        let ignore = m.ignore & !MSG_TAG;
        if flags & FI_PEEK != 0 {
            let mode = if flags & FI_CLAIM != 0 {
                PeekMode::Claim
            } else if flags & FI_DISCARD != 0 {
                PeekMode::Discard
            } else {
                PeekMode::Peek
            };
            r.peek(m.addr, m.tag, ignore, ctx(m.context), mode)?;
            return Ok(0);
        }
        if flags & FI_CLAIM != 0 {
            let buf = if flags & FI_DISCARD != 0 {
                None
            } else {
                // SAFETY: m.msg_iov holds m.iov_count iovecs whose buffers
                // stay valid until the receive completes.
                let (p, l) = unsafe { one_iov(m.msg_iov, m.iov_count) }?;
                Some(raw(p, l)?)
            };
            r.claimed(ctx(m.context), buf)?;
            return Ok(0);
        }
        if flags & FI_DISCARD != 0 {
            return Err(FiError::inval("FI_DISCARD needs FI_PEEK or FI_CLAIM"));
        }
        // SAFETY: as above.
        let (p, l) = unsafe { one_iov(m.msg_iov, m.iov_count) }?;
        r.recv(
            raw(p, l)?,
            m.addr,
            m.tag,
            ignore,
            ctx(m.context),
            OpFlags::Flags(flags),
        )?;
        Ok(0)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: as msg_send.
    guard("fi_tsend", || unsafe {
        t_send_bytes(
            e,
            bytes(buf, len)?,
            dest,
            tag,
            None,
            context,
            OpFlags::Default,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_sendv(
    e: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_tsendv", || {
        // SAFETY: as msg_sendv.
        unsafe {
            let (p, l) = one_iov(iov, count)?;
            t_send_bytes(
                e,
                bytes(p as *const c_void, l)?,
                dest,
                tag,
                None,
                context,
                OpFlags::Default,
            )
        }
    })
}

unsafe extern "C" fn t_sendmsg(e: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    guard("fi_tsendmsg", || {
        // SAFETY: msg is a valid fi_msg_tagged (fi_tagged(3)); NULL checked.
        let m = unsafe { msg.as_ref() }.ok_or_else(|| FiError::inval("NULL msg"))?;
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        // SAFETY: m.msg_iov holds m.iov_count iovecs valid for the call.
        unsafe {
            let (p, l) = one_iov(m.msg_iov, m.iov_count)?;
            t_send_bytes(
                e,
                bytes(p as *const c_void, l)?,
                m.addr,
                m.tag,
                data,
                m.context,
                OpFlags::Flags(flags),
            )
        }
    })
}

unsafe extern "C" fn t_inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    // SAFETY: as msg_inject.
    guard("fi_tinject", || unsafe {
        t_send_bytes(
            e,
            bytes(buf, len)?,
            dest,
            tag,
            None,
            std::ptr::null_mut(),
            OpFlags::Inject,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_senddata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: as msg_send.
    guard("fi_tsenddata", || unsafe {
        t_send_bytes(
            e,
            bytes(buf, len)?,
            dest,
            tag,
            Some(data),
            context,
            OpFlags::Default,
        )
    })
}

unsafe extern "C" fn t_injectdata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    // SAFETY: as msg_inject.
    guard("fi_tinjectdata", || unsafe {
        t_send_bytes(
            e,
            bytes(buf, len)?,
            dest,
            tag,
            Some(data),
            std::ptr::null_mut(),
            OpFlags::Inject,
        )
    })
}
