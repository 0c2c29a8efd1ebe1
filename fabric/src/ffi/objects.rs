//! The objects this provider hands to C (each an [`Obj`]: libfabric's
//! `fid_*` struct, then ours), how a table function finds one behind a
//! `struct fid *`, and the generic table (`struct fi_ops`, whose `close`
//! frees the object) of each class but the endpoints': the table is what
//! proves a fid ours (`super::obj`). A leaf of the C side: the modules with
//! the other tables (fabric, eq, domain, av, cq, rdm, dgram) all take
//! their types from here.

use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use super::{fi_ops_with, free, guard, obj, Obj};
use crate::av::Av;
use crate::cq::Cq;
use crate::domain::{Domain, Fabric};
use crate::error::FiResult;
use crate::fi::*;

/// A fabric (fi_fabric(3)).
pub(super) type FabricObj = Obj<fid_fabric, Arc<Fabric>>;

/// What an event queue object holds: its fabric (kept open while the
/// queue is) and the queue.
pub(super) struct EqInner {
    #[allow(dead_code)]
    pub fabric: Arc<Fabric>,
    pub eq: crate::eq::EventQueue,
}

/// An event queue (fi_eq(3)).
pub(super) type EqObj = Obj<fid_eq, EqInner>;

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
    /// The last error entry's `err_data` bytes when the caller offered no
    /// buffer: `err_data` of `fi_cq_readerr` points here (valid until the
    /// next read).
    pub err_data: Mutex<Vec<u8>>,
    /// The fabric's API version: the layout of the caller's error entries.
    pub api_version: u32,
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
    // SAFETY: the caller's contract; the class and the table are checked.
    let o: &AvObj = unsafe { obj(av as *const c_void, FI_CLASS_AV, &AV_FI_OPS) }?;
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
    // SAFETY: the caller's contract; the class and the table are checked.
    let o: &CqObj = unsafe { obj(cq as *const c_void, FI_CLASS_CQ, &CQ_FI_OPS) }?;
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
    let o: &EpObj<E> = unsafe { obj(f, FI_CLASS_EP, ops) }?;
    Ok(&o.inner.ep)
}

/// The generic table of fabrics.
pub(super) static FABRIC_FI_OPS: fi_ops = fi_ops_with(fabric_close, None, None);

/// The generic table of event queues.
pub(super) static EQ_FI_OPS: fi_ops = fi_ops_with(eq_close, None, None);

/// The generic table of domains.
pub(super) static DOMAIN_FI_OPS: fi_ops = fi_ops_with(domain_close, None, None);

/// The generic table of address vectors.
pub(super) static AV_FI_OPS: fi_ops = fi_ops_with(av_close, None, None);

/// The generic table of completion queues (no wait objects: `control`
/// answers FI_ENOSYS).
pub(super) static CQ_FI_OPS: fi_ops = fi_ops_with(cq_close, None, None);

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    guard("fi_close(fabric)", || {
        // SAFETY: f is the fid of a fabric we opened (class and table
        // checked).
        unsafe {
            free::<fid_fabric, Arc<Fabric>>(f, FI_CLASS_FABRIC, &FABRIC_FI_OPS, |fab| {
                (Arc::strong_count(fab) > 1)
                    .then(|| "close the fabric's domains and event queues first".into())
            })
        }
    })
}

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of an EQ we opened (class and table checked).
    guard("fi_close(eq)", || unsafe {
        free::<fid_eq, EqInner>(f, FI_CLASS_EQ, &EQ_FI_OPS, |_| None)
    })
}

unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
    guard("fi_close(domain)", || {
        // SAFETY: f is the fid of a domain we opened (class and table
        // checked).
        unsafe {
            free::<fid_domain, Arc<Domain>>(f, FI_CLASS_DOMAIN, &DOMAIN_FI_OPS, |d| {
                (Arc::strong_count(d) > 1)
                    .then(|| "close the domain's endpoints, CQs and address vectors first".into())
            })
        }
    })
}

unsafe extern "C" fn av_close(f: *mut fid) -> c_int {
    guard("fi_close(av)", || {
        // SAFETY: f is the fid of an AV we opened (class and table
        // checked).
        unsafe {
            free::<fid_av, AvInner>(f, FI_CLASS_AV, &AV_FI_OPS, |a| {
                (Arc::strong_count(&a.av) > 1)
                    .then(|| "close the endpoints bound to it first".into())
            })
        }
    })
}

unsafe extern "C" fn cq_close(f: *mut fid) -> c_int {
    guard("fi_close(cq)", || {
        // SAFETY: f is the fid of a CQ we opened (class and table
        // checked).
        unsafe {
            free::<fid_cq, CqInner>(f, FI_CLASS_CQ, &CQ_FI_OPS, |c| {
                (Arc::strong_count(&c.cq) > 1)
                    .then(|| "close the endpoints bound to it first".into())
            })
        }
    })
}
