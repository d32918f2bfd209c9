//! Logging and tracing set-up. `RUST_LOG` filters log lines as usual; the default shows the
//! host's own info lines and warnings from dependencies.
//!
//! Tracing is off unless an OTLP endpoint is configured (`--otlp-endpoint`, or the standard
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`). Then every reconcile
//! is one trace: the spans of target [`TARGET`] (the reconcile, the plugin call and its reads,
//! each child written, the status, the events), sampled once per reconcile when its first
//! cause is seen ([`draw_sampled`], [`decide`]; [`Sampled`] lets them through), are recorded
//! by [`Recorder`], which hands a trace to the SDK's batch processor and OTLP exporter when its
//! root ends, unless the reconcile changed nothing and did not fail. Every request to the API
//! server carries the current span's `traceparent` ([`propagate`]), so the API server's own
//! spans join the reconcile's trace; the requests of a reconcile that was not sampled carry
//! none.

#[cfg(feature = "heap-profile")]
pub mod heap;
pub mod propagate;
mod record;
mod sample;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanProcessor as _};
use tracing_log::{AsLog as _, log};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::cli::{LogFormat, TraceArgs};

pub use self::record::{OUTCOME, Recorder};
pub use self::sample::{Sampled, draw_sampled};

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
    processor: Option<Arc<BatchSpanProcessor>>,
}

impl Telemetry {
    /// Exports what is still batched; call before exiting.
    pub fn shutdown(self) {
        if let Some(processor) = self.processor
            && let Err(error) = processor.shutdown()
        {
            tracing::warn!(%error, "flushing the last traces failed");
        }
    }
}

/// Installs the global tracing subscriber, with the trace [`Recorder`] when `tracing` names an
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
    let logged = filter.max_level_hint();
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    let Some(endpoint) = endpoint(tracing) else {
        registry.init();
        return Ok(Telemetry::default());
    };
    let ratio = ratio(tracing);
    sample::set_ratio(ratio);
    let processor = Arc::new(processor(&endpoint)?);
    let recorder = Recorder::new(processor.clone()).with_filter(Sampled::new(ratio));
    registry.with(recorder).init();
    cap_log_records(logged);
    ENABLED.store(true, Ordering::Relaxed);
    tracing::info!(%endpoint, "exporting a trace per reconcile over OTLP");
    Ok(Telemetry {
        processor: Some(processor),
    })
}

/// Caps the level at which dependencies' `log` records (rustls, wasmtime, cranelift) are made
/// at what the log filter shows. `init` bridges them into tracing at the subscriber's level, and
/// the recorder's debug spans raise that to debug; but the recorder takes no `log` record, so
/// each debug record would be made and offered to both filters only to be turned away.
fn cap_log_records(logged: Option<tracing::level_filters::LevelFilter>) {
    // Never above what `init` set: the subscriber's own maximum.
    log::set_max_level(log_level(logged).min(log::max_level()));
}

/// The `log` level that shows what a filter whose level hint is `logged` shows.
fn log_level(logged: Option<tracing::level_filters::LevelFilter>) -> log::LevelFilter {
    // No hint: the filter may want anything.
    logged.map_or(log::LevelFilter::Trace, |level| level.as_log())
}

/// Gives a reconcile's root `span` what caused it: a `trigger` span (its own trace, exported
/// with the reconcile) that the root links to with `attributes`, and a `queue` span, the
/// root's first child, for the wait from `since` (when the cause took effect) until now.
///
/// Both are made only when the root ends and its trace is exported: half the reconciles of a
/// busy controller change nothing, and their cause would be made only to be dropped.
pub fn caused_by(
    span: &tracing::Span,
    since: Instant,
    attributes: impl FnOnce() -> Vec<KeyValue> + Send + Sync + 'static,
) {
    if !enabled() {
        return;
    }
    // A reconcile not sampled has no record to hold its cause, and makes none.
    record::with_open_mut(span, move |open| {
        if let Some(trace) = open.trace() {
            trace.cause = Some(Cause {
                attributes: Box::new(attributes),
                since,
                dequeued: Instant::now(),
            });
        }
    });
}

/// What caused a reconcile, until its trace is known to be exported.
struct Cause {
    attributes: Box<dyn FnOnce() -> Vec<KeyValue> + Send + Sync>,
    since: Instant,
    dequeued: Instant,
}

/// The current span's trace id (hex), when traces are exported and this one is sampled: the
/// exemplar that ties a histogram's bucket to a trace.
pub fn trace_id() -> Option<String> {
    trace_id_of(&tracing::Span::current())
}

/// `span`'s trace id (hex), when traces are exported and this one is sampled.
fn trace_id_of(span: &tracing::Span) -> Option<String> {
    if !enabled() || decision() == Some(false) {
        return None;
    }
    record::with_open(span, |open| open.trace_id.to_string())
}

tokio::task_local! {
    /// What a worker's reconcile ([`timed`]) knows of its trace.
    static RECONCILE: Reconcile;
}

/// A reconcile's trace, as the worker running it sees it.
#[derive(Default)]
struct Reconcile {
    /// Whether it is traced, once decided ([`decide`]).
    sampled: Cell<Option<bool>>,
    /// Its trace id, once [`outcome`] has said that it will be exported.
    exported: RefCell<Option<String>>,
}

/// Hands the reconcile that is beginning its sampling decision (drawn with its first cause,
/// [`draw_sampled`]), before its root span is made; `None` leaves it to be drawn at the root.
/// Inside a reconcile that is not traced, the exemplars and the sampling filter then skip
/// looking for its trace. Outside a worker's reconcile (a test's), nothing.
pub fn decide(sampled: Option<bool>) {
    let _ = RECONCILE.try_with(|reconcile| reconcile.sampled.set(sampled));
}

/// The sampling decision of the worker's reconcile on this task, if one was made.
fn decision() -> Option<bool> {
    RECONCILE
        .try_with(|reconcile| reconcile.sampled.get())
        .ok()
        .flatten()
}

/// Records on a reconcile's root `span` what it came to, `changed` or `failed` ([`OUTCOME`]):
/// its trace is then exported, with its cause ([`caused_by`]). The trace also becomes the
/// exemplar of the reconcile's time, for the worker timing it ([`timed`]); a reconcile that
/// neither wrote nor failed names none, since its trace is dropped.
pub fn outcome(span: &tracing::Span, outcome: &'static str) {
    span.record(OUTCOME, outcome);
    let Some(id) = trace_id_of(span) else {
        return;
    };
    // Outside a worker's reconcile (a test's) there is no one to tell.
    let _ = RECONCILE.try_with(|reconcile| *reconcile.exported.borrow_mut() = Some(id));
}

/// Runs `work`, one reconcile, and gives its output with the trace id that [`outcome`] named
/// inside it, if any. The reconcile's span is made inside `work` (the worker pool is generic
/// over what it runs), so the id comes back through a task-local slot rather than the output.
/// With tracing off, only `work`.
pub async fn timed<F: Future>(work: F) -> (F::Output, Option<String>) {
    if !enabled() {
        return (work.await, None);
    }
    let scoped = RECONCILE.scope(Reconcile::default(), work);
    let mut scoped = std::pin::pin!(scoped);
    let output = scoped.as_mut().await;
    let id = scoped
        .as_mut()
        .take_value()
        .and_then(|reconcile| reconcile.exported.into_inner());
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

fn processor(endpoint: &str) -> Result<BatchSpanProcessor, TelemetryError> {
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
    let mut batch = BatchSpanProcessor::builder(exporter).build();
    // The resource a tracer provider would give it: `service.name`, the SDK's own attributes
    // and `OTEL_RESOURCE_ATTRIBUTES`.
    batch.set_resource(&Resource::builder().with_service_name("reconhost").build());
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[test]
    fn dependencies_log_records_should_be_made_at_the_level_the_log_filter_shows() {
        let level = |directives: &str| log_level(EnvFilter::new(directives).max_level_hint());
        // The default filter, whatever the recorder's debug spans raise the subscriber to.
        assert_eq!(level("warn,reconhost=info"), log::LevelFilter::Info);
        assert_eq!(
            level("warn,reconhost=info,rustls=debug"),
            log::LevelFilter::Debug
        );
        assert_eq!(level("trace"), log::LevelFilter::Trace);
        assert_eq!(level("off"), log::LevelFilter::Off);
    }

    #[tokio::test]
    async fn a_reconcile_that_will_be_exported_should_name_its_trace_to_its_timer() {
        enable_for_tests();
        let kept = record::tests::Kept::default();
        let subscriber = tracing_subscriber::registry()
            .with(Recorder::new(std::sync::Arc::new(kept.clone())).with_filter(Sampled::new(1.0)));
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
        drop(span);
        let exported = kept.names();
        assert_eq!(exported, ["reconcile"], "the one that wrote, once");
    }

    #[tokio::test]
    async fn a_reconcile_should_be_traced_as_decided_before_it_began() {
        enable_for_tests();
        let kept = record::tests::Kept::default();
        // Left to itself, this filter would trace no reconcile.
        let subscriber = tracing_subscriber::registry()
            .with(Recorder::new(std::sync::Arc::new(kept.clone())).with_filter(Sampled::new(0.0)));
        let _default = tracing::subscriber::set_default(subscriber);
        let reconcile = |sampled| {
            timed(async move {
                decide(Some(sampled));
                let span = tracing::info_span!(target: TARGET, "reconcile",
                    outcome = tracing::field::Empty);
                let inner = span.in_scope(|| {
                    let _call = tracing::debug_span!(target: TARGET, "plugin.call");
                    trace_id()
                });
                outcome(&span, "changed");
                inner
            })
        };

        let (inner, exported) = reconcile(true).await;
        assert_eq!(
            inner, exported,
            "the trace named inside is the one exported"
        );
        assert!(exported.is_some(), "decided traced");
        assert_eq!(kept.names(), ["plugin.call", "reconcile"]);

        let (inner, exported) = reconcile(false).await;
        assert_eq!((inner, exported), (None, None), "decided not traced");
        assert_eq!(kept.names().len(), 2, "nothing more exported");
    }
}
