//! The layer that makes a sampled reconcile's trace: each span of [`super::TARGET`] that the
//! sampling filter lets through is kept as a few plain values in its registry slot (its ids,
//! start, attributes as typed OpenTelemetry values), closed spans are gathered in their root,
//! and when the root closes the whole trace goes to the SDK's span processor as finished
//! [`SpanData`] — or nowhere, when the reconcile changed nothing and did not fail. A steady
//! state reconciles every parent on each resync; exporting those would bury the reconciles
//! that did something and cost a collector far more than they are worth, and only the root
//! knows the outcome (its [`OUTCOME`] attribute, recorded when the reconcile wrote or failed).
//!
//! Why not `tracing-opentelemetry`: its layer starts an SDK span for every span it sees (a
//! builder, then a context for each parent with children, a lock per span, the SDK's span on
//! close), and an unchanged reconcile's spans were made only to be dropped by a processor that
//! held every trace until its root ended. Measured beside this layer, that machinery was about
//! four of full sampling's nine points of CPU (docs/BENCHMARKS.md, *The trace recorder*). The
//! ids are drawn here, so a request made inside a span can name it in its `traceparent` before
//! the span is exported ([`super::propagate`]); what leaves the process is the SDK's: its batch
//! processor and the OTLP exporter.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{
    IdGenerator as _, RandomIdGenerator, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Registry;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The root span's attribute saying what the reconcile came to: `changed` or `failed`; absent
/// when it changed nothing.
pub const OUTCOME: &str = "outcome";

/// Finished spans a trace holds; beyond, they are counted on the root (`spans_dropped`).
const MAX_SPANS: usize = 512;

/// A span of a sampled reconcile, while it is open (in its registry slot).
pub(super) struct Open {
    pub(super) trace_id: TraceId,
    pub(super) span_id: SpanId,
    parent: SpanId,
    /// The root's registry id; `None` for the root itself, which holds the [`Trace`].
    root: Option<Id>,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    status: Status,
    trace: Option<Box<Trace>>,
}

impl Open {
    /// What the root holds for the trace; `None` below the root.
    pub(super) fn trace(&mut self) -> Option<&mut Trace> {
        self.trace.as_deref_mut()
    }
}

/// What a root holds until it closes.
#[derive(Default)]
pub(super) struct Trace {
    #[allow(
        clippy::vec_box,
        reason = "a vector of whole records passes 1 KiB after a handful, and glibc sweeps \
                  all its fast bins (`malloc_consolidate`) before every allocation that large"
    )]
    done: Vec<Box<Closed>>,
    dropped: u32,
    /// Its [`OUTCOME`] was recorded: the trace is exported.
    kept: bool,
    /// What caused the reconcile, made into spans only if the trace is exported.
    pub(super) cause: Option<super::Cause>,
}

/// A span of the trace that closed: made into `SpanData` only if the trace is exported.
struct Closed {
    span: Open,
    name: &'static str,
    end: SystemTime,
}

/// Records the spans that reach it (give it [`super::Sampled`] as its filter) and hands each
/// kept trace to `processor` when its root closes.
pub struct Recorder<P> {
    processor: Arc<P>,
    scope: InstrumentationScope,
    ids: RandomIdGenerator,
}

impl<P> Recorder<P> {
    /// Records for `processor` (shared: whoever shuts the program down flushes it).
    pub fn new(processor: Arc<P>) -> Self {
        Self {
            processor,
            scope: InstrumentationScope::builder("reconhost").build(),
            ids: RandomIdGenerator::default(),
        }
    }
}

impl<S, P> Layer<S> for Recorder<P>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    P: SpanProcessor + 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        // The context is the filter's: the parent is the nearest span above that it let
        // through, a span of the same sampled trace.
        let (trace_id, parent, root, trace) = match span.parent() {
            Some(parent) => {
                let extensions = parent.extensions();
                let Some(above) = extensions.get::<Open>() else {
                    return;
                };
                let root = above.root.clone().unwrap_or_else(|| parent.id());
                (above.trace_id, above.span_id, Some(root), None)
            }
            None => (
                self.ids.new_trace_id(),
                SpanId::INVALID,
                None,
                // Room for a reconcile that writes a few children, in one allocation.
                Some(Box::new(Trace {
                    done: Vec::with_capacity(16),
                    ..Trace::default()
                })),
            ),
        };
        let mut open = Open {
            trace_id,
            span_id: self.ids.new_span_id(),
            parent,
            root,
            start: SystemTime::now(),
            attributes: Vec::with_capacity(attrs.fields().len()),
            status: Status::Unset,
            trace,
        };
        attrs.record(&mut Values {
            span: &mut open,
            fresh: true,
        });
        span.extensions_mut().insert(open);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions_mut().get_mut::<Open>()
        {
            values.record(&mut Values {
                span: open,
                fresh: false,
            });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let name = span.metadata().name();
        let end = SystemTime::now();
        let Some(root) = &open.root else {
            return self.finish(open, name, end);
        };
        // A span's parents outlive it in the registry, so its root is still open.
        let Some(root) = ctx.span(root) else {
            return;
        };
        let mut extensions = root.extensions_mut();
        let Some(trace) = extensions.get_mut::<Open>().and_then(Open::trace) else {
            return;
        };
        if trace.done.len() < MAX_SPANS {
            trace.done.push(Box::new(Closed {
                span: open,
                name,
                end,
            }));
        } else {
            trace.dropped += 1;
        }
    }
}

impl<P: SpanProcessor> Recorder<P> {
    /// The root closed: the trace goes to the processor if the reconcile wrote or failed.
    fn finish(&self, mut root: Open, name: &'static str, end: SystemTime) {
        let Some(trace) = root.trace.take() else {
            return;
        };
        if !trace.kept {
            return;
        }
        let Trace {
            done,
            dropped,
            cause,
            ..
        } = *trace;
        if dropped > 0 {
            root.attributes
                .push(KeyValue::new("spans_dropped", i64::from(dropped)));
        }
        let mut links = Vec::new();
        if let Some(cause) = cause {
            let (since, dequeued) = (cause.since, cause.dequeued);
            let (trigger, link) = self.cause(cause);
            links.push(link);
            self.processor.on_end(trigger);
            let queue = Open {
                trace_id: root.trace_id,
                span_id: self.ids.new_span_id(),
                parent: root.span_id,
                root: None,
                start: system_time(since),
                attributes: Vec::new(),
                status: Status::Unset,
                trace: None,
            };
            let queue = self.data(queue, "queue", system_time(dequeued), Vec::new());
            self.processor.on_end(queue);
        }
        for closed in done {
            let Closed { span, name, end } = *closed;
            self.processor
                .on_end(self.data(span, name, end, Vec::new()));
        }
        self.processor.on_end(self.data(root, name, end, links));
    }

    /// The span standing for what caused the reconcile: a root of its own trace, at the moment
    /// the cause took effect, and the reconcile's link to it.
    fn cause(&self, cause: super::Cause) -> (SpanData, Link) {
        let at = system_time(cause.since);
        let attributes = (cause.attributes)();
        let trigger = Open {
            trace_id: self.ids.new_trace_id(),
            span_id: self.ids.new_span_id(),
            parent: SpanId::INVALID,
            root: None,
            start: at,
            attributes: attributes.clone(),
            status: Status::Unset,
            trace: None,
        };
        let link = Link::new(context(trigger.trace_id, trigger.span_id), attributes, 0);
        (self.data(trigger, super::CAUSE, at, Vec::new()), link)
    }

    fn data(&self, span: Open, name: &'static str, end: SystemTime, links: Vec<Link>) -> SpanData {
        let mut all = SpanLinks::default();
        all.links = links;
        SpanData {
            span_context: context(span.trace_id, span.span_id),
            parent_span_id: span.parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: span.start,
            end_time: end,
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: all,
            status: span.status,
            instrumentation_scope: self.scope.clone(),
        }
    }
}

fn context(trace_id: TraceId, span_id: SpanId) -> SpanContext {
    SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    )
}

/// The wall-clock time of `instant`, a moment in the past.
fn system_time(instant: Instant) -> SystemTime {
    let now = SystemTime::now();
    now.checked_sub(instant.elapsed()).unwrap_or(now)
}

/// Runs `f` on the recorded span nearest `span` (itself, or the closest span above it that is
/// part of a sampled trace); `None` when there is none or the subscriber is not the registry.
pub(super) fn with_open<R>(span: &tracing::Span, f: impl FnOnce(&Open) -> R) -> Option<R> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        // Read locks only: requests and exemplars look on every reconcile, sampled or not.
        for span in registry.span(id)?.scope() {
            if let Some(open) = span.extensions().get::<Open>() {
                return Some(f(open));
            }
        }
        None
    })
    .flatten()
}

/// [`with_open`], for `f` to change the record.
pub(super) fn with_open_mut<R>(span: &tracing::Span, f: impl FnOnce(&mut Open) -> R) -> Option<R> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let span = registry
            .span(id)?
            .scope()
            .find(|span| span.extensions().get::<Open>().is_some())?;
        let mut extensions = span.extensions_mut();
        extensions.get_mut::<Open>().map(f)
    })
    .flatten()
}

/// Turns a span's fields into attributes, typed as OpenTelemetry keeps them.
struct Values<'a> {
    span: &'a mut Open,
    /// The span's first values: each field once, none recorded before.
    fresh: bool,
}

impl Values<'_> {
    fn push(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name == OUTCOME {
            if value.as_str() == "failed" {
                self.span.status = Status::error("the reconcile failed");
            }
            if let Some(trace) = self.span.trace() {
                trace.kept = true;
            }
        } else if name == "error" {
            self.span.status = Status::error(value.as_str().into_owned());
        }
        let attributes = &mut self.span.attributes;
        // A field recorded again replaces its value.
        let earlier = if self.fresh {
            None
        } else {
            attributes.iter_mut().find(|kv| kv.key.as_str() == name)
        };
        match earlier {
            Some(kv) => kv.value = value,
            None => attributes.push(KeyValue::new(name, value)),
        }
    }
}

impl Visit for Values<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value.to_owned().into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let value = i64::try_from(value).map_or_else(|_| value.to_string().into(), Value::from);
        self.push(field, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, value.to_string().into());
    }

    // `%` fields arrive here too, their Debug being their Display.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, format!("{value:?}").into());
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use opentelemetry::Context as OtelContext;
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::Span;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::telemetry::{Sampled, TARGET};

    /// Keeps what reaches it, in order.
    #[derive(Debug, Clone, Default)]
    pub struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl Kept {
        pub fn spans(&self) -> Vec<SpanData> {
            self.0.lock().unwrap().clone()
        }

        pub fn names(&self) -> Vec<String> {
            self.spans()
                .into_iter()
                .map(|s| s.name.into_owned())
                .collect()
        }
    }

    impl SpanProcessor for Kept {
        fn on_start(&self, _span: &mut Span, _cx: &OtelContext) {}
        fn on_end(&self, span: SpanData) {
            self.0.lock().unwrap().push(span);
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
            Ok(())
        }
        fn set_resource(&mut self, _resource: &Resource) {}
    }

    /// Runs `f` under a registry with the recorder, sampling every reconcile.
    fn recorded(f: impl FnOnce()) -> Kept {
        crate::telemetry::enable_for_tests();
        let kept = Kept::default();
        let subscriber = tracing_subscriber::registry()
            .with(Recorder::new(Arc::new(kept.clone())).with_filter(Sampled::new(1.0)));
        tracing::subscriber::with_default(subscriber, f);
        kept
    }

    /// A reconcile's trace: a root with a call and a read below it, the root marked with
    /// `outcome` if given.
    fn reconcile(outcome: Option<&'static str>) {
        let root =
            tracing::info_span!(target: TARGET, "reconcile", outcome = tracing::field::Empty);
        root.in_scope(|| {
            let call = tracing::debug_span!(target: TARGET, "plugin.call", children = 2_u64);
            call.in_scope(|| {
                let _read = tracing::debug_span!(target: TARGET, "read.get", name = %"web");
            });
        });
        if let Some(outcome) = outcome {
            crate::telemetry::outcome(&root, outcome);
        }
    }

    fn by_name<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} in {spans:#?}"))
    }

    #[test]
    fn a_reconcile_that_changed_nothing_should_be_dropped_whole_and_others_kept_whole() {
        let kept = recorded(|| reconcile(None));
        assert!(
            kept.spans().is_empty(),
            "an unchanged reconcile was exported"
        );

        let kept = recorded(|| {
            reconcile(Some("changed"));
            reconcile(Some("failed"));
        });
        assert_eq!(
            kept.names(),
            [
                "read.get",
                "plugin.call",
                "reconcile",
                "read.get",
                "plugin.call",
                "reconcile"
            ],
            "children first, then the root, of each kept trace"
        );
        let spans = kept.spans();
        let (changed, failed) = (&spans[..3], &spans[3..]);
        assert_eq!(by_name(changed, "reconcile").status, Status::Unset);
        assert!(
            matches!(by_name(failed, "reconcile").status, Status::Error { .. }),
            "{:?}",
            by_name(failed, "reconcile").status
        );
    }

    #[test]
    fn the_spans_of_a_trace_should_chain_by_their_ids_and_keep_typed_attributes() {
        let spans = recorded(|| reconcile(Some("changed"))).spans();
        let (root, call, read) = (
            by_name(&spans, "reconcile"),
            by_name(&spans, "plugin.call"),
            by_name(&spans, "read.get"),
        );
        let trace = root.span_context.trace_id();
        assert!(root.span_context.is_valid() && root.span_context.is_sampled());
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        assert_eq!(call.span_context.trace_id(), trace);
        assert_eq!(read.span_context.trace_id(), trace);
        assert_eq!(call.parent_span_id, root.span_context.span_id());
        assert_eq!(read.parent_span_id, call.span_context.span_id());
        assert!(root.start_time <= call.start_time && call.end_time <= root.end_time);
        let attribute = |span: &SpanData, key: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(attribute(call, "children"), Some(Value::I64(2)));
        assert_eq!(attribute(read, "name"), Some(Value::from("web")));
        assert_eq!(attribute(root, OUTCOME), Some(Value::from("changed")));
    }

    #[test]
    fn an_error_recorded_later_should_replace_the_empty_field_and_mark_the_span_failed() {
        let spans = recorded(|| {
            let root = tracing::info_span!(target: TARGET, "reconcile", outcome = "failed");
            root.in_scope(|| {
                let call = tracing::debug_span!(target: TARGET, "plugin.call",
                    error = tracing::field::Empty);
                call.record("error", "trapped: out of fuel");
                call.record("error", "deadline passed");
            });
        })
        .spans();
        let call = by_name(&spans, "plugin.call");
        assert_eq!(call.attributes.len(), 1, "{:?}", call.attributes);
        assert_eq!(call.attributes[0].value, Value::from("deadline passed"));
        assert_eq!(call.status, Status::error("deadline passed"));
    }

    #[test]
    fn a_cause_should_be_exported_with_the_reconcile_that_links_to_it_and_only_then() {
        let since = Instant::now();
        let spans = recorded(|| {
            for outcome in [None, Some("changed")] {
                let root = tracing::info_span!(target: TARGET, "reconcile",
                    outcome = tracing::field::Empty);
                crate::telemetry::caused_by(&root, since, || {
                    vec![KeyValue::new("trigger", "parent")]
                });
                if let Some(outcome) = outcome {
                    crate::telemetry::outcome(&root, outcome);
                }
            }
        })
        .spans();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            [super::super::CAUSE, "queue", "reconcile"],
            "the unchanged reconcile's cause dropped with it, the changed one's kept"
        );
        let (trigger, queue, root) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(trigger.parent_span_id, SpanId::INVALID, "a root of its own");
        assert_ne!(
            trigger.span_context.trace_id(),
            root.span_context.trace_id()
        );
        assert_eq!(root.links.len(), 1);
        assert_eq!(root.links[0].span_context, trigger.span_context);
        assert_eq!(
            root.links[0].attributes,
            [KeyValue::new("trigger", "parent")]
        );
        assert_eq!(queue.parent_span_id, root.span_context.span_id());
        assert_eq!(queue.span_context.trace_id(), root.span_context.trace_id());
        assert!(queue.start_time <= queue.end_time && queue.end_time <= root.end_time);
    }
}
