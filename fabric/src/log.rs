//! Warnings of the safe modules for libfabric's log (FI_LOG_LEVEL=warn
//! shows them). A leaf: the C side installs the sink, its `fi_log` writer,
//! when libfabric loads the provider (`fi_prov_ini`); until then (the
//! rlib's tests) a warning goes nowhere.

use std::sync::OnceLock;

/// Where warnings go.
static SINK: OnceLock<fn(&str)> = OnceLock::new();

/// Sends warnings to `sink` from now on (the first call wins: the provider
/// is initialised once per process).
pub(crate) fn set_sink(sink: fn(&str)) {
    let _ = SINK.set(sink);
}

/// A warning in libfabric's log.
pub(crate) fn warn(msg: &str) {
    if let Some(sink) = SINK.get() {
        sink(msg);
    }
}

/// A failure the job cannot recover from and the user must fix (a
/// cluster key mismatch), logged already: also written to the standard
/// error, once per process, since MPI libraries report only that the call
/// failed.
pub(crate) fn once_on_stderr(msg: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("clusternet: {msg}");
    }
}
