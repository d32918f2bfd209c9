//! Tail sampling inside the host: the spans of a trace wait until its root span ends, and a
//! reconcile that changed nothing and did not fail is dropped whole. A steady state reconciles
//! every parent on each resync; exporting those would bury the reconciles that did something
//! and cost a collector far more than they are worth. Only the root knows the outcome (its
//! [`OUTCOME`] attribute, recorded when the reconcile wrote or failed), and it ends last.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

/// The root span's attribute saying what the reconcile came to: `changed` or `failed`; absent
/// when it changed nothing.
pub const OUTCOME: &str = "outcome";

/// Traces held at once; beyond, spans pass straight on (a trace may then be kept partly).
const MAX_TRACES: usize = 4096;

/// Spans held per trace; beyond, the trace's further spans pass straight on.
const MAX_SPANS: usize = 512;

/// Passes a trace on to `next` when its root ends, unless the root is a reconcile that changed
/// nothing and did not fail. The span standing for a reconcile's cause (a root of its own,
/// [`super::CAUSE`]) goes with the reconcile that links to it.
#[derive(Debug)]
pub struct DropUnchanged<P> {
    next: P,
    held: Mutex<HashMap<TraceId, Vec<SpanData>>>,
    causes: Mutex<HashMap<SpanId, SpanData>>,
}

impl<P> DropUnchanged<P> {
    /// Holds spans for `next`.
    pub fn new(next: P) -> Self {
        Self {
            next,
            held: Mutex::default(),
            causes: Mutex::default(),
        }
    }
}

fn kept(root: &SpanData) -> bool {
    root.name != "reconcile" || root.attributes.iter().any(|kv| kv.key.as_str() == OUTCOME)
}

impl<P: SpanProcessor> SpanProcessor for DropUnchanged<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.next.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let trace = span.span_context.trace_id();
        let mut held = self.held.lock().expect("span hold lock poisoned");
        if span.parent_span_id != SpanId::INVALID {
            let room = held.len() < MAX_TRACES || held.contains_key(&trace);
            match held.entry(trace).or_default() {
                spans if room && spans.len() < MAX_SPANS => spans.push(span),
                _ => {
                    drop(held);
                    self.next.on_end(span);
                }
            }
            return;
        }
        let spans = held.remove(&trace).unwrap_or_default();
        drop(held);
        if span.name == super::CAUSE {
            let mut causes = self.causes.lock().expect("span hold lock poisoned");
            if causes.len() < MAX_TRACES {
                causes.insert(span.span_context.span_id(), span);
            }
            return;
        }
        let causes: Vec<SpanData> = {
            let mut held = self.causes.lock().expect("span hold lock poisoned");
            span.links
                .iter()
                .filter_map(|link| held.remove(&link.span_context.span_id()))
                .collect()
        };
        if kept(&span) {
            for other in causes.into_iter().chain(spans) {
                self.next.on_end(other);
            }
            self.next.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.next.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.next.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.next.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use opentelemetry::KeyValue;
    use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::*;

    /// Keeps what reaches it.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<String>>>);

    impl SpanProcessor for Kept {
        fn on_start(&self, _span: &mut Span, _cx: &Context) {}
        fn on_end(&self, span: SpanData) {
            self.0.lock().unwrap().push(span.name.into_owned());
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    /// A reconcile's trace: a root with a call and a read below it, the root marked with
    /// `outcome` if given.
    fn reconcile(provider: &SdkTracerProvider, outcome: Option<&'static str>) {
        let tracer = provider.tracer("test");
        let root = tracer.start("reconcile");
        let cx = Context::current_with_span(root);
        let mut call = tracer.start_with_context("plugin.call", &cx);
        let read_cx = cx.with_span(tracer.start_with_context("read.get", &cx));
        read_cx.span().end();
        call.end();
        if let Some(outcome) = outcome {
            cx.span().set_attribute(KeyValue::new(OUTCOME, outcome));
        }
        cx.span().end();
    }

    #[test]
    fn a_reconcile_that_changed_nothing_should_be_dropped_whole_and_others_kept_whole() {
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(DropUnchanged::new(kept.clone()))
            .build();
        reconcile(&provider, None);
        assert!(
            kept.0.lock().unwrap().is_empty(),
            "an unchanged reconcile was exported"
        );
        reconcile(&provider, Some("changed"));
        reconcile(&provider, Some("failed"));
        let names = kept.0.lock().unwrap().clone();
        assert_eq!(
            names,
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
        // Another root (not a reconcile) passes as it is.
        provider.tracer("test").start("lifecycle").end();
        assert_eq!(kept.0.lock().unwrap().last().unwrap(), "lifecycle");
    }

    #[test]
    fn a_cause_should_go_with_the_reconcile_that_links_to_it() {
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(DropUnchanged::new(kept.clone()))
            .build();
        let tracer = provider.tracer("test");
        for outcome in [None, Some("changed")] {
            let mut cause = tracer.start(super::super::CAUSE);
            cause.end();
            let link = opentelemetry::trace::Link::with_context(cause.span_context().clone());
            let mut root = tracer
                .span_builder("reconcile")
                .with_links(vec![link])
                .start(&tracer);
            if let Some(outcome) = outcome {
                root.set_attribute(KeyValue::new(OUTCOME, outcome));
            }
            root.end();
        }
        assert_eq!(
            kept.0.lock().unwrap().clone(),
            [super::super::CAUSE, "reconcile"],
            "the unchanged reconcile's cause dropped with it, the changed one's kept"
        );
    }
}
