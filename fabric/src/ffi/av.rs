//! The address vector object (fi_av(3)) over [`crate::av::Av`].

use std::ffi::{c_char, c_int, c_void};
use std::net::SocketAddrV4;
use std::sync::Arc;

use super::buf::slice_len;
use super::objects::{the_av, AvInner, AvObj, DomainObj, AV_FI_OPS, DOMAIN_FI_OPS};
use super::{alloc, fid_of, guard, neg, obj, opt_str, put};
use crate::addr::{resolve_ipv4, AddrFormat, Name};
use crate::av::{Av, AvKind, FI_ADDR_NOTAVAIL};
use crate::error::{FiError, FiResult};
use crate::fi::*;

static AV_OPS: fi_ops_av = fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: Some(av_insertsym),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: None,
};

/// `fi_av_open`.
pub(super) unsafe extern "C" fn av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    out: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    guard("fi_av_open", || {
        // SAFETY: domain is a fid this provider handed out (class checked).
        let d: &DomainObj =
            unsafe { obj(domain as *const c_void, FI_CLASS_DOMAIN, &DOMAIN_FI_OPS) }?;
        // SAFETY: attr is NULL or valid (fi_av(3)).
        let kind = match unsafe { attr.as_ref() } {
            None => AvKind::Map,
            Some(a) => {
                if !a.name.is_null() {
                    return Err(FiError::nosys("named (shared) address vectors"));
                }
                if a.flags & FI_EVENT != 0 {
                    return Err(FiError::nosys("asynchronous address vectors (FI_EVENT)"));
                }
                if a.rx_ctx_bits != 0 {
                    return Err(FiError::nosys("rx_ctx_bits (scalable endpoints)"));
                }
                match a.type_ {
                    FI_AV_TABLE => AvKind::Table,
                    FI_AV_MAP | FI_AV_UNSPEC => AvKind::Map,
                    t => return Err(FiError::inval(format!("av type {t}"))),
                }
            }
        };
        let p = alloc(AvObj {
            fid: fid_av {
                fid: fid_of(FI_CLASS_AV, context, &AV_FI_OPS),
                ops: &AV_OPS as *const _ as *mut _,
            },
            inner: AvInner {
                domain: d.inner.clone(),
                av: Arc::new(Av::new(d.inner.format, kind, d.inner.key)),
            },
        });
        // SAFETY: a valid `struct fid_av **` (fi_av(3)).
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

/// Writes per-address results: `fi_addr[i]` (when given) and, with
/// FI_SYNC_ERR, the error codes into `context` (an `int` array); returns
/// how many succeeded.
///
/// # Safety
/// `fi_addr` is NULL or valid for `r.len()` writes; with FI_SYNC_ERR
/// `context` is valid for `r.len()` `int` writes.
unsafe fn report(
    r: &[FiResult<u64>],
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    let mut ok = 0;
    for (i, x) in r.iter().enumerate() {
        let (a, e) = match x {
            Ok(a) => {
                ok += 1;
                (*a, 0)
            }
            Err(e) => {
                super::log(FI_LOG_WARN, FI_LOG_AV, || {
                    format!("fi_av_insert: {}", e.msg)
                });
                if e.prov == crate::error::ProvErrno::Mismatch {
                    // A job that cannot work: said where its user looks
                    // (MPI libraries report only a failed fi_av_insert).
                    crate::log::once_on_stderr(&format!("fi_av_insert: {}", e.msg));
                }
                (FI_ADDR_NOTAVAIL, e.code as c_int)
            }
        };
        if !fi_addr.is_null() {
            // SAFETY: valid for r.len() entries (the caller's contract).
            unsafe { fi_addr.add(i).write(a) };
        }
        if flags & FI_SYNC_ERR != 0 && !context.is_null() {
            // SAFETY: with FI_SYNC_ERR, context is an int array of r.len()
            // entries (fi_av(3)).
            unsafe { (context as *mut c_int).add(i).write(e) };
        }
    }
    ok
}

unsafe extern "C" fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard("fi_av_insert", || {
        if flags & FI_AV_USER_ID != 0 {
            return Err(FiError::nosys("FI_AV_USER_ID"));
        }
        // SAFETY: av is a fid this provider handed out.
        let av = unsafe { the_av(av) }?;
        if count == 0 {
            return Ok(0);
        }
        if addr.is_null() {
            return Err(FiError::inval("NULL address buffer"));
        }
        let len = slice_len(count, av.format.len(), "addresses")?;
        // SAFETY: fi_av(3): addr holds `count` addresses of the provider's
        // format, packed: count * len bytes (checked to fit isize).
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        let r = av.insert_packed(bytes, count)?;
        // SAFETY: fi_addr is NULL or an array of count entries, context an
        // int array of count entries with FI_SYNC_ERR (fi_av(3)).
        Ok(unsafe { report(&r, fi_addr, flags, context) })
    })
}

/// A name from fi_av_insertsvc's node and service.
fn parse_svc(format: AddrFormat, node: &str, service: &str) -> FiResult<Name> {
    let port: u16 = service
        .parse()
        .map_err(|_| FiError::inval(format!("service {service:?} is not a port number")))?;
    match format {
        AddrFormat::Edp => {
            let mac = node
                .parse()
                .map_err(|_| FiError::inval(format!("node {node:?} is not a MAC address")))?;
            let n = Name::Edp { mac, port };
            format.decode(&n.encode())
        }
        AddrFormat::Udp => {
            let ip = resolve_ipv4(node).ok_or_else(|| {
                FiError::inval(format!(
                    "node {node:?} is neither an IPv4 address nor a host name with one"
                ))
            })?;
            Ok(Name::Udp(SocketAddrV4::new(ip, port)))
        }
    }
}

unsafe extern "C" fn av_insertsvc(
    av: *mut fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard("fi_av_insertsvc", || {
        // SAFETY: av is a fid this provider handed out; node and service are
        // NULL or NUL-terminated strings (fi_av(3)).
        let (av, node, service) = unsafe { (the_av(av)?, opt_str(node), opt_str(service)) };
        let (Some(node), Some(service)) = (node, service) else {
            return Err(FiError::inval("fi_av_insertsvc needs a node and a service"));
        };
        let r = [parse_svc(av.format, &node, &service)
            .and_then(|n| av.insert(n, crate::addr::NameInfo::default()))];
        // SAFETY: fi_addr is NULL or valid for one entry, context an int
        // with FI_SYNC_ERR.
        Ok(unsafe { report(&r, fi_addr, flags, context) })
    })
}

unsafe extern "C" fn av_insertsym(
    _av: *mut fid_av,
    _node: *const c_char,
    _nodecnt: usize,
    _service: *const c_char,
    _svccnt: usize,
    _fi_addr: *mut fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    _flags: u64,
) -> c_int {
    guard("fi_av_remove", || {
        // SAFETY: av is a fid this provider handed out.
        let av = unsafe { the_av(av) }?;
        if count == 0 {
            return Ok(0);
        }
        if fi_addr.is_null() {
            return Err(FiError::inval("NULL fi_addr array"));
        }
        slice_len(count, std::mem::size_of::<fi_addr_t>(), "fi_addr_t entries")?;
        // SAFETY: fi_addr holds count entries (fi_av(3)), whose size fits
        // isize (checked).
        let addrs = unsafe { std::slice::from_raw_parts(fi_addr, count) };
        av.remove(addrs)?;
        Ok(0)
    })
}

unsafe extern "C" fn av_lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard("fi_av_lookup", || {
        // SAFETY: av is a fid this provider handed out.
        let av = unsafe { the_av(av) }?;
        let (name, info) = av.lookup_info(fi_addr)?;
        let name = name.encode_with(&info);
        // SAFETY: addrlen is a valid in/out size_t (fi_av(3)).
        let cap = unsafe { addrlen.as_ref() }
            .copied()
            .ok_or_else(|| FiError::inval("NULL addrlen"))?;
        let n = cap.min(name.len());
        if n > 0 && !addr.is_null() {
            // SAFETY: addr holds cap >= n bytes (fi_av(3)).
            unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), addr as *mut u8, n) };
        }
        // SAFETY: as above.
        unsafe { put(addrlen, name.len()) }?;
        Ok(0)
    })
}

unsafe extern "C" fn av_straddr(
    av: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    let r = guard("fi_av_straddr", || {
        // SAFETY: av is a fid this provider handed out.
        let av = unsafe { the_av(av) }?;
        if addr.is_null() || buf.is_null() || len.is_null() {
            return Err(FiError::inval("NULL argument"));
        }
        // SAFETY: addr holds one address of the provider's format.
        let b = unsafe { std::slice::from_raw_parts(addr as *const u8, av.format.len()) };
        let s = match av.format.decode(b) {
            Ok(n) => n.to_string(),
            Err(_) => format!("fi_clusternet://invalid/{}", hex(b)),
        };
        // SAFETY: len is a valid in/out size_t; buf holds *len bytes.
        let cap = unsafe { *len };
        if cap > 0 {
            let n = s.len().min(cap - 1);
            // SAFETY: buf holds cap > n bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
                buf.add(n).write(0);
            }
        }
        // SAFETY: as above.
        unsafe { len.write(s.len() + 1) };
        Ok(0isize)
    });
    if r == 0 {
        buf
    } else {
        std::ptr::null()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
