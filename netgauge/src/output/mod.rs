//! Machine-readable outputs beside the text report: CSV (`--csv FILE`, or
//! `-o FILE.csv`).

pub mod csv;
pub mod json;
pub mod pivot;
pub mod plot;
pub mod progress;
pub mod raw;

/// This machine's host name (gethostname(2)), or `?` when it cannot be read.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into())
}
