//! The W3C `traceparent` of the current span on a request to the API server, so that the API
//! server's spans for it (its tracing is stable since Kubernetes 1.34) join, or link to, the
//! reconcile that made it.

use opentelemetry::propagation::{Injector, TextMapPropagator as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

struct Headers<'a>(&'a mut http::HeaderMap);

impl Injector for Headers<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Adds the current span's trace context to `headers`, when traces are exported and the span
/// is part of one.
pub fn inject(headers: &mut http::HeaderMap) {
    if !super::enabled() {
        return;
    }
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut Headers(headers));
}
