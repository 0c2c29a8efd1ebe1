//! The endpoint's data path: the message table (fi_msg(3), both endpoint
//! types) and the tagged table (fi_tagged(3), FI_EP_RDM). Buffers are
//! checked and turned into slices here; the work is in
//! [`crate::rdm::RdmEp`] and [`crate::dgram::DgramEp`].

use std::ffi::c_void;

use comm::tagged::PeekMode;
use comm::RecvBuf;

use super::guard;
use super::objects::the_ep;
use super::sys::*;
use crate::dgram::SendMode;
use crate::domain::Endpoint;
use crate::error::{FiError, FiResult};
use crate::limits::MSG_TAG;
use crate::rdm::OpFlags;

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
fn raw(ptr: *mut u8, len: usize) -> FiResult<Box<dyn RecvBuf>> {
    if len > 0 && ptr.is_null() {
        return Err(FiError::inval(format!("NULL buffer of {len} bytes")));
    }
    Ok(Box::new(RawBuf { ptr, len }))
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
unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> FiResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(FiError::inval(format!("NULL buffer of {len} bytes")));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

/// The endpoint `e`.
///
/// # Safety
/// `e` is NULL or a live endpoint fid of ours (the class is checked).
unsafe fn ep<'a>(e: *mut fid_ep) -> FiResult<&'a Endpoint> {
    // SAFETY: the caller's contract.
    unsafe { the_ep(e as *const c_void) }
}

/// The RDM endpoint `e` (the tagged table is only set on those).
///
/// # Safety
/// As [`ep`].
unsafe fn rdm<'a>(e: *mut fid_ep) -> FiResult<&'a crate::rdm::RdmEp> {
    // SAFETY: the caller's contract.
    match unsafe { ep(e) }? {
        Endpoint::Rdm(r) => Ok(r),
        Endpoint::Dgram(_) => Err(FiError::nosys("tagged messages on FI_EP_DGRAM")),
    }
}

fn ctx(c: *mut c_void) -> u64 {
    c as usize as u64
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

// --- fi_msg ---

pub(super) static MSG_OPS: fi_ops_msg = fi_ops_msg {
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
/// `e` as [`ep`]; `ptr` valid for `len` bytes until the receive completes.
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
    match unsafe { ep(e) }? {
        Endpoint::Dgram(d) => d.post_recv(buf, ctx(context), flags)?,
        Endpoint::Rdm(r) => {
            let f = flags.map_or(OpFlags::Default, OpFlags::Flags);
            r.recv(buf, src, MSG_TAG, 0, ctx(context), f)?
        }
    }
    Ok(0)
}

/// Sends untagged.
///
/// # Safety
/// `e` as [`ep`].
unsafe fn send(
    e: *mut fid_ep,
    data: &[u8],
    dest: u64,
    cq_data: Option<u64>,
    context: *mut c_void,
    flags: OpFlags,
) -> FiResult<isize> {
    // SAFETY: the caller's contract.
    match unsafe { ep(e) }? {
        Endpoint::Dgram(d) => {
            if cq_data.is_some() {
                return Err(FiError::nosys("remote CQ data on FI_EP_DGRAM"));
            }
            let mode = match flags {
                OpFlags::Default => SendMode::Default,
                OpFlags::Flags(f) => SendMode::Flags(f),
                OpFlags::Inject => SendMode::Inject,
            };
            d.send(data, dest, ctx(context), mode)?
        }
        Endpoint::Rdm(r) => r.send(data, dest, MSG_TAG, cq_data, ctx(context), flags)?,
    }
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

// --- fi_tagged (FI_EP_RDM) ---

pub(super) static TAGGED_OPS: fi_ops_tagged = fi_ops_tagged {
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
    r.send(data, dest, tag, cq_data, ctx(context), flags)?;
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
