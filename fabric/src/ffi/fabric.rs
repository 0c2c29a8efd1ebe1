//! The provider's entry points (`getinfo`, `fabric`) and the fabric object
//! (fi_fabric(3)), whose table opens domains and event queues.

use std::ffi::{c_char, c_int, c_void};

use super::domain::domain_open;
use super::eq::eq_open;
use super::objects::{FabricObj, FABRIC_FI_OPS};
use super::{alloc, fid_of, guard, info, neg, opt_str, put};
use crate::domain::Fabric;
use crate::error::FiError;
use crate::fi::*;
use crate::{getinfo as gi, link, nic};

/// `fi_provider::getinfo`.
pub(super) unsafe extern "C" fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    out: *mut *mut fi_info,
) -> c_int {
    guard("fi_getinfo", || {
        // SAFETY: libfabric passes NULL or valid strings and hints
        // (fi_getinfo(3)), alive for the call, the hints in the layout of
        // the requested version or of the core's.
        let (node, service, hints) = unsafe {
            (
                opt_str(node),
                opt_str(service),
                info::read_hints(hints, version),
            )
        };
        let config = super::config()?;
        let nics = nic::candidates(&config)?;
        let keyed = link::keyed(&config)?;
        let list = gi::getinfo(
            version,
            node.as_deref(),
            service.as_deref(),
            flags,
            hints.as_ref(),
            &config,
            keyed,
            &nics,
        )?;
        let head = info::write_list(&list)?;
        // SAFETY: libfabric passes a valid `struct fi_info **`.
        unsafe { put(out, head) }?;
        Ok(0)
    })
}

static FABRIC_OPS: fi_ops_fabric = fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(domain_open),
    passive_ep: Some(no_passive_ep),
    eq_open: Some(eq_open),
    wait_open: Some(no_wait_open),
    trywait: Some(no_trywait),
    domain2: None,
};

/// `fi_provider::fabric` (fi_fabric(3)).
pub(super) unsafe extern "C" fn fabric_open(
    attr: *mut fi_fabric_attr,
    out: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard("fi_fabric", || {
        // SAFETY: libfabric's fi_fabric checked attr and its name non-NULL.
        let attr = unsafe { attr.as_ref() }.ok_or_else(|| FiError::inval("NULL fabric attr"))?;
        // SAFETY: the name is a NUL-terminated string (checked non-NULL by
        // fi_fabric; opt_str checks again).
        let name = unsafe { opt_str(attr.name) };
        let fabric = Fabric::open(name.as_deref(), super::config()?, attr.api_version)?;
        let p = alloc(FabricObj {
            fid: fid_fabric {
                fid: fid_of(FI_CLASS_FABRIC, context, &FABRIC_FI_OPS),
                ops: &FABRIC_OPS as *const _ as *mut _,
                api_version: attr.api_version,
            },
            inner: fabric,
        });
        // SAFETY: libfabric passes a valid `struct fid_fabric **`.
        unsafe { put(out, p) }?;
        Ok(0)
    })
}

unsafe extern "C" fn no_passive_ep(
    _f: *mut fid_fabric,
    _i: *mut fi_info,
    _p: *mut *mut fid_pep,
    _c: *mut c_void,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_wait_open(
    _f: *mut fid_fabric,
    _a: *mut fi_wait_attr,
    _w: *mut *mut fid_wait,
) -> c_int {
    neg(FI_ENOSYS)
}

unsafe extern "C" fn no_trywait(_f: *mut fid_fabric, _fids: *mut *mut fid, _n: c_int) -> c_int {
    neg(FI_ENOSYS)
}
