//! Machine-readable outputs beside the text report: CSV (`--csv FILE`, or
//! `-o FILE.csv`); and [`print()`], the one way results reach stdout.

use std::io::{self, Write as _};

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

/// Writes `text` to stdout and flushes it.
///
/// Errors: `BrokenPipe` when the reader closed stdout (`netgauge ... |
/// head`): callers return it, which removes the virtual cluster on the way
/// out, and `main` ends quietly (Rust ignores SIGPIPE, so `println!` would
/// panic instead).
pub fn print(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    let r = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    if let Err(e) = &r {
        if e.kind() == io::ErrorKind::BrokenPipe {
            STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    r
}

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`print()`] found stdout closed by its reader (as opposed to a
/// socket's `BrokenPipe`).
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::SeqCst)
}

/// [`print()`] with a line break after `line`.
pub fn println(line: &str) -> io::Result<()> {
    print(&format!("{line}\n"))
}
