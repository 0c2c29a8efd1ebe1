//! [`Lines`]: a `tracing_subscriber` writer that keeps what a fmt layer
//! writes, for tests that check which span an event was logged in.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Collects what a `tracing_subscriber::fmt` layer writes (cheap to clone;
/// the clones share one buffer). `with_writer(lines.clone())`.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Lines {
    type Writer = Lines;
    fn make_writer(&'a self) -> Lines {
        self.clone()
    }
}

impl Lines {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// Whether one line contains both `span` (a span's name and fields as
    /// the fmt layer prints them) and `what` (the event's text).
    pub fn has(&self, span: &str, what: &str) -> bool {
        self.text()
            .lines()
            .any(|l| l.contains(span) && l.contains(what))
    }
}
