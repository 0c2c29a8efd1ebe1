//! The provider itself (`struct fi_provider`, fi_provider(3)) and the entry
//! point libfabric calls after loading `libclusternet-fi.so`, which learns
//! the loading core's API version (`crate::abi`).

use std::cell::UnsafeCell;
use std::ffi::{CStr, CString};
use std::panic::catch_unwind;
use std::ptr;

use super::fabric;
use crate::abi::{self, BINDINGS_VERSION};
use crate::config::PARAMS;
use crate::fi::*;
use crate::limits::PROV_VERSION;

/// The provider's name: libfabric looks for `lib<name>-fi.so`, matches
/// `FI_PROVIDER` and Open MPI's `mtl_ofi_provider_include` against it, and
/// derives the variables' prefix `FI_CLUSTERNET_` from it.
const NAME: &CStr = c"clusternet";

/// The `struct fi_provider`: libfabric writes its `context` (its own
/// bookkeeping), so it lives in an `UnsafeCell`.
struct ProviderCell(UnsafeCell<fi_provider>);

// SAFETY: libfabric writes `context` once while registering the provider
// (single-threaded inside fi_ini, before any other call reaches us); after
// that the struct is only read, by libfabric and through the address
// `fi_prov_ini` hands to `super::set_provider`.
unsafe impl Sync for ProviderCell {}

static PROVIDER: ProviderCell = ProviderCell(UnsafeCell::new(fi_provider {
    version: PROV_VERSION,
    // fi_prov_ini declares the loading core's version instead.
    fi_version: BINDINGS_VERSION,
    context: fi_context {
        internal: [ptr::null_mut(); 4],
    },
    name: NAME.as_ptr(),
    getinfo: Some(fabric::getinfo),
    fabric: Some(fabric::fabric_open),
    cleanup: Some(cleanup),
}));

/// The entry point libfabric resolves with dlsym after dlopen of
/// `libclusternet-fi.so` (`FI_EXT_INI`, rdma/providers/fi_prov.h): asks
/// the loading core for its API version (`fi_version()`, libfabric.so's
/// export since 1.0) and declares it as the provider's `fi_version`
/// (`crate::abi::declared_version`), registers the configuration
/// variables and returns the provider. From here on the module's log and
/// parameter calls find the provider, and the safe modules' warnings go
/// to libfabric's log. A core of an unknown major version gets NULL: the
/// provider does not register where it does not know the layouts.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    let prov = PROVIDER.0.get();
    super::set_provider(prov);
    // SAFETY: fi_version takes nothing and returns the core's constant.
    let core = unsafe { fi_version() };
    let Some(declared) = abi::declared_version(core) else {
        super::log(FI_LOG_WARN, FI_LOG_CORE, || {
            format!(
                "libfabric {}.{} loaded clusternet, which knows the layouts of libfabric 1.x \
                 and 2.x only: not registering",
                core >> 16,
                core & 0xffff
            )
        });
        return ptr::null_mut();
    };
    crate::abi::set_core_version(core);
    // SAFETY: libfabric calls fi_prov_ini once, single-threaded inside
    // fi_ini, before it registers (and reads) the provider; nothing else
    // reads the struct yet.
    unsafe { (*prov).fi_version = declared };
    let r = catch_unwind(|| {
        for p in PARAMS {
            let (Ok(name), Ok(help)) = (CString::new(p.name), CString::new(p.help)) else {
                continue;
            };
            // SAFETY: prov is the static provider; name, the "%s" format
            // and help are NUL-terminated strings alive for the call
            // (libfabric copies them); the format consumes exactly the one
            // string argument given.
            unsafe {
                fi_param_define(
                    prov,
                    name.as_ptr(),
                    FI_PARAM_STRING,
                    c"%s".as_ptr(),
                    help.as_ptr(),
                );
            }
        }
    });
    if r.is_err() {
        return ptr::null_mut();
    }
    crate::log::set_sink(super::log_warn);
    prov
}

/// `fi_provider::cleanup`, called before libfabric dlcloses the provider
/// (fi_fini): waits for the service threads of closed endpoints that are
/// still returning, so that no thread runs the library's code after it is
/// unmapped (runtime::join_exiting). A panic is caught, as everywhere.
unsafe extern "C" fn cleanup() {
    let _ = catch_unwind(runtime::join_exiting);
}
