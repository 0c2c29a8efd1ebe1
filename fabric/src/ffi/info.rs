//! `struct fi_info` to and from [`crate::attr::Info`]. Answers are
//! allocated with `fi_dupinfo(NULL)` and their strings and addresses with
//! malloc, so that the application frees them with `fi_freeinfo`.
//!
//! `struct fi_domain_attr` has the fields 1.17 has, and after them those
//! the loading core's version appended (`crate::abi::DomainTail`): each is
//! written and read through its own offset in `crate::abi::DomainAttr2`,
//! only where the core allocated it.

use std::ffi::{c_char, c_void, CStr, CString};
use std::mem::offset_of;
use std::ptr;

use crate::abi::core_version;
use crate::abi::{DomainAttr2, DomainTail};
use crate::attr::{DomainAttr, EpAttr, FabricAttr, Info, RxAttr, TxAttr};
use crate::error::{FiError, FiResult};
use crate::fi::*;

/// A C string field, `None` for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn string(p: *const c_char) -> Option<String> {
    // SAFETY: the caller's contract; NULL checked first.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `len` bytes at `p`, `None` for NULL or 0.
///
/// # Safety
/// `p` is NULL or valid for `len` bytes.
unsafe fn bytes(p: *const c_void, len: usize) -> Option<Vec<u8>> {
    if p.is_null() || len == 0 {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(p as *const u8, len) }.to_vec())
}

/// Reads one `struct fi_info` (not its `next`).
///
/// # Safety
/// `p` is NULL or a valid `struct fi_info` whose attribute pointers are
/// NULL or valid, as fi_getinfo(3) requires of hints.
pub(super) unsafe fn read(p: *const fi_info) -> Option<Info> {
    // SAFETY: the caller's contract; NULL checked by as_ref.
    let i = unsafe { p.as_ref() }?;
    // SAFETY: each attribute pointer is NULL or valid by the caller's
    // contract, and as_ref checks NULL (the same for the four below).
    let tx = unsafe { i.tx_attr.as_ref() }.map(|t| TxAttr {
        caps: t.caps,
        mode: t.mode,
        op_flags: t.op_flags,
        msg_order: t.msg_order,
        comp_order: t.comp_order,
        inject_size: t.inject_size,
        size: t.size,
        iov_limit: t.iov_limit,
        rma_iov_limit: t.rma_iov_limit,
    });
    // SAFETY: as for tx_attr above.
    let rx = unsafe { i.rx_attr.as_ref() }.map(|r| RxAttr {
        caps: r.caps,
        mode: r.mode,
        op_flags: r.op_flags,
        msg_order: r.msg_order,
        comp_order: r.comp_order,
        total_buffered_recv: r.total_buffered_recv,
        size: r.size,
        iov_limit: r.iov_limit,
    });
    // SAFETY: as for tx_attr above.
    let ep = unsafe { i.ep_attr.as_ref() }.map(|e| EpAttr {
        ep_type: e.type_,
        protocol: e.protocol,
        protocol_version: e.protocol_version,
        max_msg_size: e.max_msg_size,
        msg_prefix_size: e.msg_prefix_size,
        max_order_raw_size: e.max_order_raw_size,
        max_order_war_size: e.max_order_war_size,
        max_order_waw_size: e.max_order_waw_size,
        mem_tag_format: e.mem_tag_format,
        tx_ctx_cnt: e.tx_ctx_cnt,
        rx_ctx_cnt: e.rx_ctx_cnt,
        auth_key_size: e.auth_key_size,
    });
    // SAFETY: as for tx_attr above.
    let domain = unsafe { i.domain_attr.as_ref() }.map(|d| DomainAttr {
        // SAFETY: a domain name is NULL or a NUL-terminated string.
        name: unsafe { string(d.name) },
        threading: d.threading,
        control_progress: d.control_progress,
        data_progress: d.data_progress,
        resource_mgmt: d.resource_mgmt,
        av_type: d.av_type,
        mr_mode: d.mr_mode,
        mr_key_size: d.mr_key_size,
        cq_data_size: d.cq_data_size,
        cq_cnt: d.cq_cnt,
        ep_cnt: d.ep_cnt,
        tx_ctx_cnt: d.tx_ctx_cnt,
        rx_ctx_cnt: d.rx_ctx_cnt,
        max_ep_tx_ctx: d.max_ep_tx_ctx,
        max_ep_rx_ctx: d.max_ep_rx_ctx,
        max_ep_stx_ctx: d.max_ep_stx_ctx,
        max_ep_srx_ctx: d.max_ep_srx_ctx,
        cntr_cnt: d.cntr_cnt,
        mr_iov_limit: d.mr_iov_limit,
        caps: d.caps,
        mode: d.mode,
        auth_key_size: d.auth_key_size,
        max_err_data: d.max_err_data,
        mr_cnt: d.mr_cnt,
        tclass: d.tclass,
        // The appended fields: read_hints reads those the caller has.
        ..DomainAttr::default()
    });
    // SAFETY: as for tx_attr above.
    let fabric = unsafe { i.fabric_attr.as_ref() }.map(|f| FabricAttr {
        // SAFETY: fabric and provider names are NULL or NUL-terminated.
        name: unsafe { string(f.name) },
        // SAFETY: as the name.
        prov_name: unsafe { string(f.prov_name) },
        prov_version: f.prov_version,
        api_version: f.api_version,
    });
    Some(Info {
        caps: i.caps,
        mode: i.mode,
        addr_format: i.addr_format,
        // SAFETY: addresses are NULL or valid for their lengths.
        src_addr: unsafe { bytes(i.src_addr, i.src_addrlen) },
        // SAFETY: as src_addr.
        dest_addr: unsafe { bytes(i.dest_addr, i.dest_addrlen) },
        has_handle: !i.handle.is_null(),
        tx,
        rx,
        ep,
        domain,
        fabric,
    })
}

/// Reads hints (as [`read`]) given for API `version`, with the appended
/// `fi_domain_attr` fields that both the loading core and that version
/// have (a caller asking for an older version may pass an older, shorter
/// struct; one asking for a newer version than the core's is refused by
/// the core before it reaches a provider).
///
/// # Safety
/// As [`read`]; the domain attribute struct is as long as the layout of
/// the core's version (`fi_allocinfo`) or of `version`, whichever is
/// shorter.
pub(super) unsafe fn read_hints(p: *const fi_info, version: u32) -> Option<Info> {
    // SAFETY: the caller's contract.
    let mut info = unsafe { read(p) }?;
    let tail = DomainTail::of(core_version()).and(DomainTail::of(version));
    // SAFETY: p is non-NULL (read returned Some) and valid.
    let d = unsafe { (*p).domain_attr };
    if let (Some(a), false) = (info.domain.as_mut(), d.is_null()) {
        // SAFETY: d is the caller's domain attributes, which hold the
        // fields `tail` lists (the caller's contract).
        unsafe { read_tail(d, a, tail) };
    }
    Some(info)
}

/// The address of the appended field at `offset` (of [`DomainAttr2`]) of
/// the domain attributes at `d`.
///
/// # Safety
/// `d` points to domain attributes that extend past `offset` by the
/// field's size.
unsafe fn tail_field<T>(d: *const fi_domain_attr, offset: usize) -> *mut T {
    // SAFETY: the caller's contract: the field lies inside d's allocation
    // (every offset of DomainAttr2 is aligned for its field, and the
    // struct's base is malloc-aligned).
    unsafe { (d as *mut u8).add(offset).cast::<T>() }
}

/// Reads the appended fields `tail` lists into `a`.
///
/// # Safety
/// `d` holds the fields `tail` lists.
unsafe fn read_tail(d: *const fi_domain_attr, a: &mut DomainAttr, tail: DomainTail) {
    // SAFETY: each field touched is one `tail` lists, which d holds.
    unsafe {
        if tail.max_ep_auth_key {
            a.max_ep_auth_key =
                tail_field::<usize>(d, offset_of!(DomainAttr2, max_ep_auth_key)).read();
        }
        if tail.max_group_id {
            a.max_group_id = tail_field::<u32>(d, offset_of!(DomainAttr2, max_group_id)).read();
        }
        if tail.max_cntr_value {
            a.max_cntr_value = tail_field::<u64>(d, offset_of!(DomainAttr2, max_cntr_value)).read();
            a.max_err_cntr_value =
                tail_field::<u64>(d, offset_of!(DomainAttr2, max_err_cntr_value)).read();
        }
    }
}

/// Writes the appended fields `tail` lists from `a`.
///
/// # Safety
/// `d` holds the fields `tail` lists and is writable.
unsafe fn write_tail(d: *mut fi_domain_attr, a: &DomainAttr, tail: DomainTail) {
    // SAFETY: each field touched is one `tail` lists, which d holds.
    unsafe {
        if tail.max_ep_auth_key {
            tail_field::<usize>(d, offset_of!(DomainAttr2, max_ep_auth_key))
                .write(a.max_ep_auth_key);
        }
        if tail.max_group_id {
            tail_field::<u32>(d, offset_of!(DomainAttr2, max_group_id)).write(a.max_group_id);
        }
        if tail.max_cntr_value {
            tail_field::<u64>(d, offset_of!(DomainAttr2, max_cntr_value)).write(a.max_cntr_value);
            tail_field::<u64>(d, offset_of!(DomainAttr2, max_err_cntr_value))
                .write(a.max_err_cntr_value);
        }
    }
}

/// A malloc'ed copy of `s` (fi_freeinfo frees it).
fn c_string(s: &str) -> FiResult<*mut c_char> {
    let c = CString::new(s).map_err(|_| FiError::inval("string with a NUL byte"))?;
    // SAFETY: c is a NUL-terminated string alive for the call.
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        return Err(FiError::new(FI_ENOMEM, "strdup"));
    }
    Ok(p)
}

/// A malloc'ed copy of `b` (fi_freeinfo frees it).
fn c_bytes(b: &[u8]) -> FiResult<*mut c_void> {
    // SAFETY: malloc of a positive size; NULL is checked below.
    let p = unsafe { libc::malloc(b.len().max(1)) };
    if p.is_null() {
        return Err(FiError::new(FI_ENOMEM, "malloc"));
    }
    // SAFETY: p holds at least b.len() bytes and does not overlap b.
    unsafe { ptr::copy_nonoverlapping(b.as_ptr(), p as *mut u8, b.len()) };
    Ok(p)
}

/// Fills `p` (from `fi_dupinfo(NULL)`: every attribute struct allocated and
/// zeroed, in the layout of the core, whose appended domain fields `tail`
/// lists) from `i`.
///
/// # Safety
/// `p` is a valid `struct fi_info` from fi_dupinfo(NULL) of a core with
/// the domain fields `tail` lists.
unsafe fn fill(p: *mut fi_info, i: &Info, tail: DomainTail) -> FiResult<()> {
    // SAFETY: the caller's contract (non-NULL, attribute structs allocated).
    let o = unsafe { &mut *p };
    o.caps = i.caps;
    o.mode = i.mode;
    o.addr_format = i.addr_format;
    if let Some(a) = &i.src_addr {
        o.src_addr = c_bytes(a)?;
        o.src_addrlen = a.len();
    }
    if let Some(a) = &i.dest_addr {
        o.dest_addr = c_bytes(a)?;
        o.dest_addrlen = a.len();
    }
    let missing = || FiError::new(FI_ENOMEM, "fi_dupinfo left an attribute NULL");
    if let Some(t) = &i.tx {
        // SAFETY: fi_dupinfo(NULL) allocated every attribute struct;
        // as_mut checks NULL anyway.
        let d = unsafe { o.tx_attr.as_mut() }.ok_or_else(missing)?;
        d.caps = t.caps;
        d.mode = t.mode;
        d.op_flags = t.op_flags;
        d.msg_order = t.msg_order;
        d.comp_order = t.comp_order;
        d.inject_size = t.inject_size;
        d.size = t.size;
        d.iov_limit = t.iov_limit;
        d.rma_iov_limit = t.rma_iov_limit;
    }
    if let Some(r) = &i.rx {
        // SAFETY: fi_dupinfo(NULL) allocated every attribute struct;
        // as_mut checks NULL anyway.
        let d = unsafe { o.rx_attr.as_mut() }.ok_or_else(missing)?;
        d.caps = r.caps;
        d.mode = r.mode;
        d.op_flags = r.op_flags;
        d.msg_order = r.msg_order;
        d.comp_order = r.comp_order;
        d.total_buffered_recv = r.total_buffered_recv;
        d.size = r.size;
        d.iov_limit = r.iov_limit;
    }
    if let Some(e) = &i.ep {
        // SAFETY: fi_dupinfo(NULL) allocated every attribute struct;
        // as_mut checks NULL anyway.
        let d = unsafe { o.ep_attr.as_mut() }.ok_or_else(missing)?;
        d.type_ = e.ep_type;
        d.protocol = e.protocol;
        d.protocol_version = e.protocol_version;
        d.max_msg_size = e.max_msg_size;
        d.msg_prefix_size = e.msg_prefix_size;
        d.max_order_raw_size = e.max_order_raw_size;
        d.max_order_war_size = e.max_order_war_size;
        d.max_order_waw_size = e.max_order_waw_size;
        d.mem_tag_format = e.mem_tag_format;
        d.tx_ctx_cnt = e.tx_ctx_cnt;
        d.rx_ctx_cnt = e.rx_ctx_cnt;
    }
    if let Some(a) = &i.domain {
        // SAFETY: fi_dupinfo(NULL) allocated every attribute struct;
        // as_mut checks NULL anyway.
        let d = unsafe { o.domain_attr.as_mut() }.ok_or_else(missing)?;
        if let Some(n) = &a.name {
            d.name = c_string(n)?;
        }
        d.threading = a.threading;
        d.control_progress = a.control_progress;
        d.data_progress = a.data_progress;
        d.resource_mgmt = a.resource_mgmt;
        d.av_type = a.av_type;
        d.mr_mode = a.mr_mode;
        d.mr_key_size = a.mr_key_size;
        d.cq_data_size = a.cq_data_size;
        d.cq_cnt = a.cq_cnt;
        d.ep_cnt = a.ep_cnt;
        d.tx_ctx_cnt = a.tx_ctx_cnt;
        d.rx_ctx_cnt = a.rx_ctx_cnt;
        d.max_ep_tx_ctx = a.max_ep_tx_ctx;
        d.max_ep_rx_ctx = a.max_ep_rx_ctx;
        d.max_ep_stx_ctx = a.max_ep_stx_ctx;
        d.max_ep_srx_ctx = a.max_ep_srx_ctx;
        d.cntr_cnt = a.cntr_cnt;
        d.mr_iov_limit = a.mr_iov_limit;
        d.caps = a.caps;
        d.mode = a.mode;
        d.max_err_data = a.max_err_data;
        d.mr_cnt = a.mr_cnt;
        d.tclass = a.tclass;
        // SAFETY: the domain attributes come from the core's fi_dupinfo,
        // which has the fields `tail` lists (the caller's contract).
        unsafe { write_tail(d, a, tail) };
    }
    if let Some(f) = &i.fabric {
        // SAFETY: as above.
        let d = unsafe { o.fabric_attr.as_mut() }.ok_or_else(missing)?;
        if let Some(n) = &f.name {
            d.name = c_string(n)?;
        }
        // prov_name stays NULL: libfabric's core writes it (fabric.c).
        d.prov_version = f.prov_version;
        d.api_version = f.api_version;
    }
    Ok(())
}

/// The answers as a `next`-linked list of `struct fi_info`, in the layout
/// of the loading core.
///
/// Errors: `FI_ENOMEM` (nothing is leaked: a partial list is freed).
pub(super) fn write_list(list: &[Info]) -> FiResult<*mut fi_info> {
    let appended = DomainTail::of(core_version());
    let mut head: *mut fi_info = ptr::null_mut();
    let mut tail: *mut fi_info = ptr::null_mut();
    for i in list {
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with every
        // attribute struct (fi_getinfo(3), "fi_allocinfo").
        let p = unsafe { fi_dupinfo(ptr::null()) };
        if p.is_null() {
            // SAFETY: head is NULL or a list this function built.
            unsafe { fi_freeinfo(head) };
            return Err(FiError::new(FI_ENOMEM, "fi_dupinfo"));
        }
        if tail.is_null() {
            head = p;
        } else {
            // SAFETY: tail is the last fi_info of the list built so far.
            unsafe { (*tail).next = p };
        }
        tail = p;
        // SAFETY: p is from the loading core's fi_dupinfo(NULL), whose
        // domain attributes have the fields of its version.
        if let Err(e) = unsafe { fill(p, i, appended) } {
            // SAFETY: head is a list of fi_dupinfo'd infos whose malloc'ed
            // fields fi_freeinfo frees.
            unsafe { fi_freeinfo(head) };
            return Err(e);
        }
    }
    Ok(head)
}
