//! Logging and tracing set-up. `RUST_LOG` filters log lines as usual; the default shows the
//! host's own info lines and warnings from dependencies.
//!
//! Tracing is off unless an OTLP endpoint is configured (`--otlp-endpoint`, or the standard
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`). Then every reconcile
//! is one trace: the spans of target [`TARGET`] (the reconcile, the plugin call and its reads,
//! each child written, the status, the events) go to an OpenTelemetry layer, sampled at the
//! root before the other spans exist ([`Sampled`]), and a reconcile that changed nothing and
//! did not fail is not exported ([`mod@drop`]). Every request to the API server carries the
//! current span's `traceparent` ([`propagate`]), so the API server's own spans join the
//! reconcile's trace; the requests of a reconcile that was not sampled carry none.

mod drop;
#[cfg(feature = "heap-profile")]
pub mod heap;
pub mod propagate;
mod sample;

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::cli::{LogFormat, TraceArgs};

pub use self::drop::{DropUnchanged, OUTCOME};
pub use self::sample::Sampled;

/// The target of the spans a trace is made of.
pub const TARGET: &str = "reconhost::trace";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether traces are exported (requests then carry `traceparent`).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP protocol asked for is not the one the host speaks.
    #[error(
        "OTEL_EXPORTER_OTLP_PROTOCOL={0}: the host exports traces over OTLP/gRPC only (grpc); point it at a collector's gRPC port (4317)"
    )]
    Protocol(String),
    /// The exporter could not be built (a malformed endpoint).
    #[error("setting up the OTLP exporter for {endpoint}: {source}")]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// Why.
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// What must outlive the program's work: flushes the traces still batched when shut down.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is still batched; call before exiting.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "flushing the last traces failed");
        }
    }
}

/// Installs the global tracing subscriber, with an OpenTelemetry layer when `tracing` names an
/// endpoint. Call once, first thing in `main`, inside the Tokio runtime (the gRPC exporter
/// runs on it).
pub fn init(format: LogFormat, tracing: &TraceArgs) -> Result<Telemetry, TelemetryError> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,reconhost=info"));
    let fmt = tracing_subscriber::fmt::layer();
    let fmt = match format {
        LogFormat::Human => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    let Some(endpoint) = endpoint(tracing) else {
        registry.init();
        return Ok(Telemetry::default());
    };
    let ratio = ratio(tracing);
    let provider = provider(&endpoint)?;
    // For the spans made with their own times (the wait in the queue, the cause).
    opentelemetry::global::set_tracer_provider(provider.clone());
    let tracer = provider.tracer("reconhost");
    // The layer's defaults do work on every span that no reader of these traces needs, and a
    // reconcile's spans are entered at every poll of its future: activating the span's
    // OpenTelemetry context on each enter (the host asks a span for its context where it needs
    // one: `propagate`, `trace_id`, `caused_by`), busy and idle times (two clock reads per
    // enter and exit), thread ids and names, and source locations as attributes.
    // docs/BENCHMARKS.md has what they cost.
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_context_activation(false)
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        .with_filter(Sampled::new(ratio));
    registry.with(otel).init();
    ENABLED.store(true, Ordering::Relaxed);
    tracing::info!(%endpoint, "exporting a trace per reconcile over OTLP");
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// Gives a reconcile's root `span` what caused it: a `trigger` span (its own trace, held and
/// exported with the reconcile) that the root links to with `attributes`, and a `queue` span,
/// the root's first child, for the wait from `since` (when the cause took effect) until now.
///
/// Inside a worker's reconcile ([`timed`]) both are made only once [`outcome`] says the trace
/// will be exported: half the reconciles of a busy controller change nothing, and their cause
/// would be made only to be dropped. Elsewhere (a test's reconcile) they are made at once.
pub fn caused_by(
    span: &tracing::Span,
    since: Instant,
    attributes: impl FnOnce() -> Vec<KeyValue> + Send + 'static,
) {
    if !enabled() {
        return;
    }
    // A reconcile not sampled is never exported: its cause would wait for it in the drop
    // processor for ever.
    let context = span.context();
    if !context.span().span_context().is_sampled() {
        return;
    }
    let mut cause = Some(Cause {
        attributes: Box::new(attributes),
        since,
        dequeued: Instant::now(),
    });
    let _ = RECONCILE.try_with(|slot| slot.borrow_mut().cause = cause.take());
    if let Some(cause) = cause {
        cause.make(span, &context);
    }
}

/// What caused a reconcile, until its trace is known to be exported.
struct Cause {
    attributes: Box<dyn FnOnce() -> Vec<KeyValue> + Send>,
    since: Instant,
    dequeued: Instant,
}

impl Cause {
    /// Makes the `trigger` span, the root's link to it and the `queue` span below `context`,
    /// the root's.
    fn make(self, span: &tracing::Span, context: &opentelemetry::Context) {
        use opentelemetry::trace::{Span as _, Tracer as _};
        let tracer = opentelemetry::global::tracer("reconhost");
        let now = SystemTime::now();
        let at = |instant: Instant| now.checked_sub(instant.elapsed()).unwrap_or(now);
        let (start, dequeued) = (at(self.since), at(self.dequeued));
        let attributes = (self.attributes)();
        // A root: the cause has a trace of its own, which the reconcile links to.
        let mut cause = tracer
            .span_builder(CAUSE)
            .with_start_time(start)
            .with_attributes(attributes.clone())
            .start_with_context(&tracer, &opentelemetry::Context::new());
        cause.end_with_timestamp(start);
        span.add_link_with_attributes(cause.span_context().clone(), attributes);
        let mut wait = tracer
            .span_builder("queue")
            .with_start_time(start)
            .start_with_context(&tracer, context);
        wait.end_with_timestamp(dequeued);
    }
}

/// The current span's trace id (hex), when traces are exported and this one is sampled: the
/// exemplar that ties a histogram's bucket to a trace.
pub fn trace_id() -> Option<String> {
    trace_id_of(&tracing::Span::current())
}

/// `span`'s trace id (hex), when traces are exported and this one is sampled.
fn trace_id_of(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let context = span.context();
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_sampled()
        .then(|| span_context.trace_id().to_string())
}

/// What a worker's reconcile ([`timed`]) keeps for its trace.
#[derive(Default)]
struct Slot {
    /// Its cause, made into spans if the trace is exported ([`caused_by`]).
    cause: Option<Cause>,
    /// Its trace, once [`outcome`] has said that it will be exported.
    exported: Option<String>,
}

tokio::task_local! {
    /// The trace of the reconcile a worker is timing ([`timed`]).
    static RECONCILE: RefCell<Slot>;
}

/// Records on a reconcile's root `span` what it came to, `changed` or `failed` ([`OUTCOME`]):
/// its trace is then exported ([`mod@drop`]), with its cause ([`caused_by`]). The trace also
/// becomes the exemplar of the reconcile's time, for the worker timing it ([`timed`]); a
/// reconcile that neither wrote nor failed names none, since its trace is dropped.
pub fn outcome(span: &tracing::Span, outcome: &'static str) {
    span.record(OUTCOME, outcome);
    if !enabled() {
        return;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if !span_context.is_sampled() {
        return;
    }
    let id = span_context.trace_id().to_string();
    // Outside a worker's reconcile (a test's) there is no one to tell.
    let cause = RECONCILE
        .try_with(|slot| {
            let mut slot = slot.borrow_mut();
            slot.exported = Some(id);
            slot.cause.take()
        })
        .ok()
        .flatten();
    if let Some(cause) = cause {
        cause.make(span, &context);
    }
}

/// Runs `work`, one reconcile, and gives its output with the trace id that [`outcome`] named
/// inside it, if any. The reconcile's span is made inside `work` (the worker pool is generic
/// over what it runs), so the id comes back through a task-local slot rather than the output.
/// With tracing off, only `work`.
pub async fn timed<F: Future>(work: F) -> (F::Output, Option<String>) {
    if !enabled() {
        return (work.await, None);
    }
    let scoped = RECONCILE.scope(RefCell::new(Slot::default()), work);
    let mut scoped = std::pin::pin!(scoped);
    let output = scoped.as_mut().await;
    let id = scoped
        .as_mut()
        .take_value()
        .and_then(|slot| slot.into_inner().exported);
    (output, id)
}

/// The name of the span that stands for what caused a reconcile.
pub const CAUSE: &str = "trigger";

/// Marks traces exported for tests of code that records only then.
#[cfg(test)]
pub fn enable_for_tests() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// The endpoint from the flag, else the standard variables; none: tracing off.
fn endpoint(tracing: &TraceArgs) -> Option<String> {
    tracing
        .otlp_endpoint
        .clone()
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").ok())
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
        .filter(|e| !e.is_empty())
}

/// The sampling ratio from the flag, else `OTEL_TRACES_SAMPLER_ARG`, else every reconcile.
fn ratio(tracing: &TraceArgs) -> f64 {
    tracing
        .trace_sampling_ratio
        .or_else(|| std::env::var("OTEL_TRACES_SAMPLER_ARG").ok()?.parse().ok())
        .unwrap_or(1.0)
        .clamp(0.0, 1.0)
}

fn provider(endpoint: &str) -> Result<SdkTracerProvider, TelemetryError> {
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    if !protocol.is_empty() && protocol != "grpc" {
        return Err(TelemetryError::Protocol(protocol));
    }
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|source| TelemetryError::Exporter {
            endpoint: endpoint.to_owned(),
            source,
        })?;
    let batch = BatchSpanProcessor::builder(exporter).build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(DropUnchanged::new(batch))
        // Sampled at the root, before the layer sees a span ([`Sampled`]): what reaches the
        // SDK is a sampled reconcile's, or the cause and wait made for one.
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(Resource::builder().with_service_name("reconhost").build())
        .build())
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[tokio::test]
    async fn a_reconcile_that_will_be_exported_should_name_its_trace_to_its_timer() {
        enable_for_tests();
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let _default = tracing::subscriber::set_default(subscriber);
        let root =
            || tracing::info_span!(target: TARGET, "reconcile", outcome = tracing::field::Empty);

        let (span, named) = timed(async {
            let span = root();
            outcome(&span, "changed");
            span
        })
        .await;
        let named = named.expect("the trace of a reconcile that wrote");
        assert_eq!(named.len(), 32, "{named}");
        assert_eq!(span.in_scope(trace_id).as_deref(), Some(named.as_str()));

        let ((), unnamed) = timed(async {
            let _nothing_written = root();
        })
        .await;
        assert_eq!(
            unnamed, None,
            "a reconcile that is not exported names no trace"
        );
    }
}
