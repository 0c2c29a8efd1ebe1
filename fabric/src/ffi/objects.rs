//! The objects this provider hands to C (each an [`Obj`]: libfabric's
//! `fid_*` struct, then ours), and how a table function finds one behind
//! a `struct fid *`. A leaf of the C side: the modules with the tables
//! (fabric, eq, domain, av, cq, rdm, dgram) all take their types from
//! here.

use std::ffi::{c_void, CString};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use super::{obj, obj_with, Obj};
use crate::av::Av;
use crate::cq::Cq;
use crate::domain::{Domain, Fabric};
use crate::error::FiResult;
use crate::fi::*;

/// A fabric (fi_fabric(3)).
pub(super) type FabricObj = Obj<fid_fabric, Arc<Fabric>>;

/// An event queue (fi_eq(3)): it holds its fabric.
pub(super) type EqObj = Obj<fid_eq, Arc<Fabric>>;

/// A domain (fi_domain(3)).
pub(super) type DomainObj = Obj<fid_domain, Arc<Domain>>;

/// What an address vector object holds: its domain (kept open while the
/// vector is) and the vector.
pub(super) struct AvInner {
    #[allow(dead_code)]
    pub domain: Arc<Domain>,
    pub av: Arc<Av>,
}

/// An address vector (fi_av(3)).
pub(super) type AvObj = Obj<fid_av, AvInner>;

/// What a CQ object holds.
pub(super) struct CqInner {
    #[allow(dead_code)]
    pub domain: Arc<Domain>,
    pub cq: Arc<Cq>,
    pub format: fi_cq_format,
    /// The last error entry's message, NUL-terminated: `err_data` of
    /// `fi_cq_readerr` points here (valid until the next read).
    pub err_data: Mutex<Vec<u8>>,
    /// fi_cq_strerror's answer (valid until its next call).
    pub strerror: Mutex<CString>,
    /// The last error read: (prov_errno, message).
    pub last: Mutex<Option<(i32, String)>>,
    pub signaled: AtomicBool,
}

/// A completion queue (fi_cq(3)).
pub(super) type CqObj = Obj<fid_cq, CqInner>;

/// What an endpoint object holds: its domain (kept open while the
/// endpoint is) and the endpoint, of the type `E` its tables serve
/// (`crate::rdm::RdmEp`, `crate::dgram::DgramEp`).
pub(super) struct EpInner<E> {
    #[allow(dead_code)]
    pub domain: Arc<Domain>,
    pub ep: Arc<E>,
}

/// An endpoint (fi_endpoint(3)) of type `E`.
pub(super) type EpObj<E> = Obj<fid_ep, EpInner<E>>;

/// The address vector behind `av`.
///
/// # Safety
/// `av` is NULL or a fid this provider handed out, not yet closed.
pub(super) unsafe fn the_av<'a>(av: *mut fid_av) -> FiResult<&'a Arc<Av>> {
    // SAFETY: the caller's contract; the class is checked.
    let o: &AvObj = unsafe { obj(av as *const c_void, FI_CLASS_AV) }?;
    Ok(&o.inner.av)
}

/// The address vector `f` names (for fi_ep_bind).
///
/// # Safety
/// As [`obj`].
pub(super) unsafe fn av_of<'a>(f: *mut fid) -> FiResult<&'a Arc<Av>> {
    // SAFETY: the caller's contract.
    unsafe { the_av(f as *mut fid_av) }
}

/// The CQ object behind `cq`.
///
/// # Safety
/// `cq` is NULL or a fid this provider handed out, not yet closed.
pub(super) unsafe fn the_cq<'a>(cq: *mut fid_cq) -> FiResult<&'a CqInner> {
    // SAFETY: the caller's contract; the class is checked.
    let o: &CqObj = unsafe { obj(cq as *const c_void, FI_CLASS_CQ) }?;
    Ok(&o.inner)
}

/// The CQ `f` names (for fi_ep_bind).
///
/// # Safety
/// As [`obj`].
pub(super) unsafe fn cq_of<'a>(f: *mut fid) -> FiResult<&'a Arc<Cq>> {
    // SAFETY: the caller's contract.
    Ok(&unsafe { the_cq(f as *mut fid_cq) }?.cq)
}

/// The endpoint of type `E` behind `f`, whose generic table is `ops`.
///
/// # Safety
/// `f` is NULL or a fid this provider handed out, not yet closed; `ops`
/// is the generic table this provider gives the endpoints of type `E`,
/// and those alone.
pub(super) unsafe fn the_ep<'a, E>(f: *const c_void, ops: &'static fi_ops) -> FiResult<&'a Arc<E>> {
    // SAFETY: the caller's contract; the class and the table are checked.
    let o: &EpObj<E> = unsafe { obj_with(f, FI_CLASS_EP, ops) }?;
    Ok(&o.inner.ep)
}
