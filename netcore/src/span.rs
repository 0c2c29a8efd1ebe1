//! Entering a protocol object's `tracing` span at no cost when nobody
//! listens: one implementation for esp's connections, mak's members and
//! comm's communicators (quinn-proto enters a span per connection the same
//! way).
//!
//! An object makes its span when it is made; a span made while no
//! subscriber listened is disabled, and [`in_span!`](crate::in_span)
//! then costs one branch: the guard lives in the cold [`traced`] (a guard,
//! even of a disabled span, costs tens of instructions per call on the hot
//! path and keeps the entry points from being inlined). A subscriber
//! installed later sees the events without the span.

use tracing::Span;

#[doc(hidden)]
pub use tracing as __tracing;

/// Runs `$body` inside `$obj.span` (a `tracing::Span` field) when the span
/// is enabled. With `state`, a change of `$obj.state()` across the call is
/// also a trace event (`from`, `to`, the message `$what`).
///
/// ```
/// struct Conn { span: tracing::Span, n: u32 }
/// impl Conn {
///     fn on_frame(&mut self) -> u32 {
///         netcore::in_span!(self, { self.n += 1; self.n })
///     }
/// }
/// let mut c = Conn { span: tracing::Span::none(), n: 0 };
/// assert_eq!(c.on_frame(), 1);
/// ```
#[macro_export]
macro_rules! in_span {
    ($obj:ident, $body:expr) => {
        if $obj.span.is_disabled() {
            $body
        } else {
            let span = $obj.span.clone();
            $crate::span::traced(span, || $body)
        }
    };
    ($obj:ident, state $what:literal, $body:expr) => {
        if $obj.span.is_disabled() {
            $body
        } else {
            let span = $obj.span.clone();
            $crate::span::traced(span, || {
                let from = $obj.state();
                let r = $body;
                let to = $obj.state();
                if from != to {
                    $crate::span::__tracing::trace!(?from, ?to, $what);
                }
                r
            })
        }
    };
}

/// Runs `f` with `span` entered (the slow path of [`in_span!`](crate::in_span)).
#[cold]
#[inline(never)]
pub fn traced<R>(span: Span, f: impl FnOnce() -> R) -> R {
    let _entered = span.entered();
    f()
}
