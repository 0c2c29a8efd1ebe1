//! Tracing spans, as esp's connections carry them: the state of every
//! communicator makes a `tracing` span when it is made (`comm`: rank and
//! size; a tagged endpoint's `comm_tagged`: its peer table's capacity),
//! entered wherever the state is worked on: the communicator's and the
//! tagged endpoint's calls and waits, and the CTP upper-layer callbacks
//! (`layer.rs`), whichever thread runs them. The events inside (state
//! changes, grants, losses, suspicion and failure of peers) then say
//! whose they are. A span made while no subscriber listened is disabled:
//! entering it costs one branch, and a subscriber installed later sees
//! the events without it.

use tracing::Span;

/// Runs `$body` inside `$st.span` when the span is enabled; a disabled
/// span costs one branch: the guard lives in the cold [`traced`] (a guard,
/// even of a disabled span, costs tens of instructions per call on the hot
/// path and keeps the callers from being inlined).
macro_rules! in_span {
    ($st:ident, $body:expr) => {
        if $st.span.is_disabled() {
            $body
        } else {
            let span = $st.span.clone();
            $crate::span::traced(span, || $body)
        }
    };
}

/// Runs `f` with `span` entered (the slow path of `in_span!`).
#[cold]
#[inline(never)]
pub(crate) fn traced<R>(span: Span, f: impl FnOnce() -> R) -> R {
    let _entered = span.entered();
    f()
}
