//! The W3C `traceparent` of the current span on a request to the API server, so that the API
//! server's spans for it (its tracing is stable since Kubernetes 1.34) join, or link to, the
//! reconcile that made it.

use http::header::{HeaderName, HeaderValue};

/// Adds the current span's trace context to `headers`, when traces are exported and the span
/// is part of a sampled trace.
pub fn inject(headers: &mut http::HeaderMap) {
    if !super::enabled() {
        return;
    }
    if let Some(value) = traceparent(&tracing::Span::current()) {
        headers.insert(HeaderName::from_static("traceparent"), value);
    }
}

/// Version 00, the trace, the span, sampled: the only flag a sampled trace sets.
fn traceparent(span: &tracing::Span) -> Option<HeaderValue> {
    let (trace, span) = super::record::with_open(span, |open| (open.trace_id, open.span_id))?;
    HeaderValue::try_from(format!("00-{trace}-{span}-01")).ok()
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::telemetry::record::tests::Kept;
    use crate::telemetry::{Recorder, Sampled, TARGET};

    #[test]
    fn a_request_should_name_the_span_it_is_made_in_and_its_trace() {
        super::super::enable_for_tests();
        let kept = Kept::default();
        // A log layer that takes every span, so that spans outside the trace exist too.
        let logs = tracing_subscriber::fmt::layer().with_writer(std::io::sink);
        let subscriber = tracing_subscriber::registry()
            .with(logs)
            .with(Recorder::new(std::sync::Arc::new(kept.clone())).with_filter(Sampled::new(1.0)));
        tracing::subscriber::with_default(subscriber, || {
            let root = tracing::info_span!(target: TARGET, "reconcile", outcome = "changed");
            let _root = root.enter();
            let child = tracing::debug_span!(target: TARGET, "status");
            let mut headers = http::HeaderMap::new();
            child.in_scope(|| inject(&mut headers));
            drop(child);
            let mut untraced = http::HeaderMap::new();
            let other = tracing::info_span!("not.traced");
            assert!(!other.is_disabled(), "the log layer keeps it");
            other.in_scope(|| inject(&mut untraced));
            drop(other);
            drop(_root);
            drop(root);

            let spans = kept.spans();
            let status = spans.iter().find(|s| s.name == "status").expect("status");
            let expected = format!(
                "00-{}-{}-01",
                status.span_context.trace_id(),
                status.span_context.span_id()
            );
            assert_eq!(headers["traceparent"], expected.as_str());
            assert_eq!(expected.len(), 55, "{expected}");
            // A span outside the trace's target, inside the reconcile: its nearest traced span.
            let reconcile = spans.iter().find(|s| s.name == "reconcile").unwrap();
            assert_eq!(
                untraced["traceparent"],
                format!(
                    "00-{}-{}-01",
                    reconcile.span_context.trace_id(),
                    reconcile.span_context.span_id()
                )
                .as_str()
            );
        });
        let mut outside = http::HeaderMap::new();
        inject(&mut outside);
        assert!(outside.is_empty(), "no trace, no header: {outside:?}");
    }
}
