//! Tracing spans, as esp's connections carry them: every [`Sender`],
//! [`Receiver`] and socket member (`socket::GroupCore`) makes a `tracing`
//! span when it is made (`mak_sender`: group and own id; `mak_receiver`:
//! group, own id and source; `mak_member`: group, own id, name and
//! carrier) and enters it in its entry points (frames and timeouts in,
//! frames out, sends, membership changes), so the events inside (losses,
//! NAKs, retransmissions, silent members, state changes) say whose they
//! are. A span made while no subscriber listened is disabled: entering it
//! costs one branch, and a subscriber installed later sees the events
//! without it.
//!
//! [`Sender`]: crate::Sender
//! [`Receiver`]: crate::Receiver

use tracing::Span;

/// Runs `$body` inside `$self.span` when the span is enabled; a disabled
/// span costs one branch: the guard lives in the cold [`traced`] (a guard,
/// even of a disabled span, costs tens of instructions per call on the hot
/// path and keeps the entry points from being inlined). With `state`, a
/// change of `$self.state()` across the call is a trace event.
macro_rules! in_span {
    ($self:ident, $body:expr) => {
        if $self.span.is_disabled() {
            $body
        } else {
            let span = $self.span.clone();
            $crate::span::traced(span, || $body)
        }
    };
    ($self:ident, state, $body:expr) => {
        if $self.span.is_disabled() {
            $body
        } else {
            let span = $self.span.clone();
            $crate::span::traced(span, || {
                let from = $self.state();
                let r = $body;
                let to = $self.state();
                if from != to {
                    tracing::trace!(?from, ?to, "MAK state");
                }
                r
            })
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
