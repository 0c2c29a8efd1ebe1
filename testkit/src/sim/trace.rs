//! Per-node trace capture: a `tracing` subscriber per simulation whose
//! layer files each event under the node whose span (`node{node=i ..}`)
//! encloses it, keeping the last lines of each node, and the printing of
//! those lines when a test fails.
//!
//! Without `SIM_TRACE` the capture keeps events at DEBUG and up and no
//! protocol span (their context is the node's); `SIM_TRACE` is an
//! `EnvFilter` (e.g. `trace`, `esp=trace,debug`) for events and spans.
//!
//! Printing happens from a panic hook (installed once, chained before the
//! previous hook, so it runs even where that one aborts, as libFuzzer's
//! does) for every simulation alive on the panicking thread and the last
//! one it dropped; and from the drop of a simulation while its thread
//! panics, when the hook did not run (a scoped hook replaced it).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Level, Metadata, Span, Subscriber};
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use super::SimClock;

/// Target of the node spans and of the simulator's own events.
const TARGET: &str = "testkit::sim";
/// What the capture keeps without `SIM_TRACE`.
const DEFAULT_SETTING: &str = " unset: events at DEBUG and up, no protocol spans";
/// Default lines kept per node (`SIM_TRACE_LINES`).
const DEFAULT_LINES: usize = 500;

/// A handle on a simulation's tracing: its subscriber and one span per
/// node. Cheap to clone.
#[derive(Clone)]
pub struct Tracer {
    dispatch: Dispatch,
    spans: Arc<[Span]>,
    shared: Option<Arc<Shared>>,
}

impl fmt::Debug for Tracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracer")
            .field("nodes", &self.spans.len())
            .field("captures", &self.shared.is_some())
            .finish()
    }
}

impl Tracer {
    /// Runs `f` in node `i`'s span under the simulation's subscriber: its
    /// events are node `i`'s, spans it creates belong to the simulation.
    pub fn in_node<R>(&self, i: usize, f: impl FnOnce() -> R) -> R {
        tracing::dispatcher::with_default(&self.dispatch, || self.spans[i].in_scope(f))
    }

    /// Runs `f` under the simulation's subscriber, outside any node.
    pub fn in_sim<R>(&self, f: impl FnOnce() -> R) -> R {
        tracing::dispatcher::with_default(&self.dispatch, f)
    }

    /// The lines kept for node `i` (`None`: events outside any node),
    /// oldest first; empty when this simulation captures nothing.
    pub fn lines(&self, node: Option<usize>) -> Vec<String> {
        let Some(s) = &self.shared else {
            return Vec::new();
        };
        let rings = s.rings.lock().unwrap_or_else(|e| e.into_inner());
        let ring = &rings[node.unwrap_or(s.names.len())];
        ring.lines.iter().cloned().collect()
    }

    /// Prints every node's kept lines to stderr now.
    pub fn print(&self) {
        if let Some(s) = &self.shared {
            s.print("");
        }
    }

    pub(super) fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }

    pub(super) fn span(&self, i: usize) -> &Span {
        &self.spans[i]
    }
}

/// Prints the traces of its simulation if the thread panics while it is
/// alive, and leaves them to the panic hook once dropped.
pub(super) struct TraceGuard(Option<Arc<Shared>>);

impl Drop for TraceGuard {
    fn drop(&mut self) {
        let Some(s) = self.0.take() else {
            return;
        };
        let failed = std::thread::panicking() && !s.printed.swap(true, Ordering::SeqCst);
        if failed || std::env::var("SIM_TRACE_PRINT").as_deref() == Ok("1") {
            s.print("");
        }
        let _ = THREAD.try_with(|t| {
            let mut t = t.borrow_mut();
            t.live
                .retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(&s)));
            t.last = Some(s);
        });
    }
}

/// The simulations of one thread that the panic hook prints.
#[derive(Default)]
struct ThreadSims {
    live: Vec<Weak<Shared>>,
    /// The last one dropped, until the thread makes a new one.
    last: Option<Arc<Shared>>,
}

thread_local! {
    static THREAD: RefCell<ThreadSims> = RefCell::new(ThreadSims::default());
}

static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let sims: Vec<(Arc<Shared>, &str)> = THREAD
                .try_with(|t| {
                    let Ok(mut t) = t.try_borrow_mut() else {
                        return Vec::new();
                    };
                    let mut v: Vec<_> = t
                        .last
                        .take()
                        .map(|s| (s, " (dropped)"))
                        .into_iter()
                        .collect();
                    v.extend(t.live.iter().filter_map(Weak::upgrade).map(|s| (s, "")));
                    v
                })
                .unwrap_or_default();
            for (s, note) in sims {
                if !s.printed.swap(true, Ordering::SeqCst) {
                    s.print(note);
                }
            }
            previous(info);
        }));
    });
}

/// The tracing of a new simulation of nodes `names` on `clock`.
pub(super) fn start(clock: &SimClock, names: &[String]) -> (Tracer, TraceGuard) {
    let current = tracing::dispatcher::get_default(Dispatch::clone);
    let setting = std::env::var("SIM_TRACE").ok();
    let (dispatch, shared) = if !current.is::<tracing::subscriber::NoSubscriber>() {
        // The test installed its own subscriber: trace into it.
        (current, None)
    } else if setting.as_deref().map(str::trim) == Some("off") {
        (Dispatch::none(), None)
    } else {
        let (filter, setting) = match setting.as_deref().map(EnvFilter::try_new) {
            None => (Choice::Events, DEFAULT_SETTING.to_string()),
            Some(Ok(f)) => {
                let own = format!("{TARGET}=debug").parse().expect("a directive");
                (
                    Choice::Env(Box::new(f.add_directive(own))),
                    format!("={}", setting.unwrap_or_default()),
                )
            }
            Some(Err(e)) => (
                Choice::Events,
                format!("{DEFAULT_SETTING} (={setting:?} is invalid: {e})"),
            ),
        };
        let cap = std::env::var("SIM_TRACE_LINES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_LINES);
        let shared = Arc::new(Shared {
            names: names.to_vec(),
            setting,
            cap,
            rings: Mutex::new((0..=names.len()).map(|_| Ring::default()).collect()),
            printed: AtomicBool::new(false),
        });
        let layer = Capture {
            shared: shared.clone(),
            clock: clock.clone(),
        };
        let subscriber = tracing_subscriber::registry().with(layer.with_filter(filter));
        install_hook();
        let _ = THREAD.try_with(|t| {
            let mut t = t.borrow_mut();
            t.last = None;
            t.live.retain(|w| w.strong_count() > 0);
            t.live.push(Arc::downgrade(&shared));
        });
        (Dispatch::new(subscriber), Some(shared))
    };
    let spans: Arc<[Span]> = tracing::dispatcher::with_default(&dispatch, || {
        names
            .iter()
            .enumerate()
            .map(|(i, name)| tracing::info_span!(target: TARGET, "node", node = i as u64, name = %name))
            .collect()
    });
    let guard = TraceGuard(shared.clone());
    (
        Tracer {
            dispatch,
            spans,
            shared,
        },
        guard,
    )
}

/// The kept lines of every node of one simulation.
struct Shared {
    names: Vec<String>,
    /// The filter in force, for the header.
    setting: String,
    /// Lines kept per node.
    cap: usize,
    /// One ring per node, then one for events outside any node.
    rings: Mutex<Vec<Ring>>,
    printed: AtomicBool,
}

#[derive(Default)]
struct Ring {
    lines: VecDeque<String>,
    total: u64,
}

impl Shared {
    fn push(&self, node: Option<usize>, line: String) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let i = node.unwrap_or(self.names.len()).min(self.names.len());
        let ring = &mut rings[i];
        if ring.lines.len() >= self.cap {
            ring.lines.pop_front();
        }
        ring.lines.push_back(line);
        ring.total += 1;
    }

    fn print(&self, note: &str) {
        // try_lock: the panic may have come from inside the capture layer.
        let Ok(rings) = self.rings.try_lock() else {
            eprintln!("testkit::sim: traces busy, not printed");
            return;
        };
        let mut out = String::new();
        for (i, ring) in rings.iter().enumerate() {
            let name = match self.names.get(i) {
                Some(n) => format!("node {i} `{n}`"),
                None if ring.total == 0 => continue,
                None => "outside any node".to_string(),
            };
            let kept = ring.lines.len() as u64;
            let _ = writeln!(
                out,
                "==== testkit::sim{note}: trace of {name}: {}{} events (SIM_TRACE{}; virtual time) ====",
                if kept < ring.total { format!("last {kept} of ") } else { String::new() },
                ring.total,
                self.setting
            );
            for l in &ring.lines {
                let _ = writeln!(out, "{l}");
            }
        }
        let _ = writeln!(out, "==== testkit::sim{note}: end of traces ====");
        eprint!("{out}");
    }
}

/// The capture's filter: without `SIM_TRACE`, events at DEBUG and up and
/// only the node spans (a protocol's own spans, entered on every call,
/// would cost more than the events); with it, its `EnvFilter`.
enum Choice {
    Events,
    Env(Box<EnvFilter>),
}

impl Choice {
    fn events(meta: &Metadata<'_>) -> bool {
        if meta.is_span() {
            meta.target() == TARGET
        } else {
            *meta.level() <= Level::DEBUG
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Filter<S> for Choice {
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        match self {
            Choice::Events => Self::events(meta),
            Choice::Env(f) => Filter::<S>::enabled(&**f, meta, cx),
        }
    }
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        match self {
            Choice::Events if Self::events(meta) => Interest::always(),
            Choice::Events => Interest::never(),
            Choice::Env(f) => Filter::<S>::callsite_enabled(&**f, meta),
        }
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        match self {
            Choice::Events => Some(LevelFilter::DEBUG),
            Choice::Env(f) => Filter::<S>::max_level_hint(&**f),
        }
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Choice::Env(f) = self {
            Filter::<S>::on_new_span(&**f, attrs, id, ctx);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Choice::Env(f) = self {
            Filter::<S>::on_record(&**f, id, values, ctx);
        }
    }
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Choice::Env(f) = self {
            Filter::<S>::on_enter(&**f, id, ctx);
        }
    }
    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Choice::Env(f) = self {
            Filter::<S>::on_exit(&**f, id, ctx);
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Choice::Env(f) = self {
            Filter::<S>::on_close(&**f, id, ctx);
        }
    }
}

/// The node index a node span carries.
struct NodeIndex(usize);

/// A span's fields, formatted.
struct SpanFields(String);

/// The capture layer.
struct Capture {
    shared: Arc<Shared>,
    clock: SimClock,
}

/// Formats fields as `message k=v k=v`; remembers a `node` field.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
    node: Option<u64>,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "node" {
            self.node = Some(value);
        }
        self.record_debug(field, &value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let sep = if self.rest.is_empty() { "" } else { " " };
            let _ = write!(self.rest, "{sep}{}={value:?}", field.name());
        }
    }
}

fn timestamp(t: Duration) -> String {
    format!("{:>4}.{:06}s", t.as_secs(), t.subsec_micros())
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut f = Fields::default();
        attrs.record(&mut f);
        let mut ext = span.extensions_mut();
        if attrs.metadata().target() == TARGET && attrs.metadata().name() == "node" {
            if let Some(i) = f.node {
                ext.insert(NodeIndex(i as usize));
            }
        }
        ext.insert(SpanFields(f.rest));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut f = Fields::default();
        values.record(&mut f);
        let mut ext = span.extensions_mut();
        if let Some(SpanFields(s)) = ext.get_mut::<SpanFields>() {
            if !s.is_empty() && !f.rest.is_empty() {
                s.push(' ');
            }
            s.push_str(&f.rest);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut node = None;
        let mut context = String::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(NodeIndex(i)) = ext.get::<NodeIndex>() {
                    node = Some(*i);
                    context.clear();
                    continue;
                }
                let fields = ext.get::<SpanFields>().map_or("", |f| f.0.as_str());
                let _ = write!(context, "{}{{{fields}}}: ", span.name());
            }
        }
        let mut f = Fields::default();
        event.record(&mut f);
        let meta = event.metadata();
        let sep = if f.message.is_empty() || f.rest.is_empty() {
            ""
        } else {
            " "
        };
        let line = format!(
            "{} {:>5} {}: {context}{}{sep}{}",
            timestamp(self.clock.elapsed()),
            meta.level(),
            meta.target(),
            f.message,
            f.rest
        );
        self.shared.push(node, line);
    }
}
