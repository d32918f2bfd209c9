//! Head sampling at the root of a reconcile's trace, as the trace recorder's per-layer filter
//! ([`super::Recorder`]). The root (`reconcile`) is drawn when it is made, and the spans below
//! it reach the recorder only when their root did: a reconcile that is not sampled costs the
//! recorder nothing, and its debug spans are not even made unless `RUST_LOG` asks for them.

use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

/// The name of a reconcile's root span, where its trace is sampled.
pub const ROOT: &str = "reconcile";

/// Lets through the spans of [`super::TARGET`]: a root with probability `ratio`, any other
/// only inside a root that was let through.
#[derive(Debug)]
pub struct Sampled {
    /// A root is kept when a uniform draw over `u64` falls below this; `None`: every root.
    below: Option<u64>,
    ids: RandomIdGenerator,
}

impl Sampled {
    /// Samples roots with probability `ratio` (0 to 1).
    pub fn new(ratio: f64) -> Self {
        let below = (ratio < 1.0).then(|| {
            // The float-to-int cast saturates, and 0 keeps nothing.
            (ratio.max(0.0) * u64::MAX as f64) as u64
        });
        Self {
            below,
            ids: RandomIdGenerator::default(),
        }
    }

    fn draw(&self) -> bool {
        match self.below {
            None => true,
            // A span id is 64 random bits from the SDK's own generator (a thread-local RNG).
            Some(below) => u64::from_be_bytes(self.ids.new_span_id().to_bytes()) < below,
        }
    }
}

impl<S> Filter<S> for Sampled
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        if !meta.is_span() || meta.target() != super::TARGET {
            return false;
        }
        if meta.name() == ROOT {
            return self.draw();
        }
        // The context is this filter's: the current span, or the nearest one above it, that
        // this filter let through; only spans of a sampled reconcile are.
        cx.lookup_current().is_some()
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if meta.is_span() && meta.target() == super::TARGET {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    // The spans of a trace are info (the root) and debug. The hint raises the level every
    // callsite in the process is checked at, dependencies' included: trace would send their
    // trace-level `log` records through the filters (+0.6 % CPU per reconcile against +0.2 %
    // at debug, measured beside a host without the layer).
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::DEBUG)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::span;
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::telemetry::TARGET;

    /// Names the spans that reach it.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<&'static str>>>);

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Seen {
        fn on_new_span(
            &self,
            attrs: &span::Attributes<'_>,
            _id: &span::Id,
            _cx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            self.0.lock().unwrap().push(attrs.metadata().name());
        }
    }

    fn reconcile() {
        let root = tracing::info_span!(target: TARGET, "reconcile");
        let _root = root.enter();
        let call = tracing::debug_span!(target: TARGET, "plugin.call");
        let _read = call.in_scope(|| tracing::debug_span!(target: TARGET, "read.get"));
        let _other = tracing::info_span!("not.traced");
    }

    fn seen(ratio: f64) -> Vec<&'static str> {
        let seen = Seen::default();
        let subscriber =
            tracing_subscriber::registry().with(seen.clone().with_filter(Sampled::new(ratio)));
        tracing::subscriber::with_default(subscriber, || {
            reconcile();
            // Outside a reconcile, a span of the target belongs to no trace.
            let _alone = tracing::debug_span!(target: TARGET, "read.get");
        });
        seen.0.lock().unwrap().clone()
    }

    #[test]
    fn a_sampled_root_should_bring_its_spans_and_an_unsampled_one_none() {
        assert_eq!(seen(1.0), ["reconcile", "plugin.call", "read.get"]);
        assert_eq!(seen(0.0), Vec::<&str>::new());
    }

    #[test]
    fn roots_should_be_sampled_at_the_ratio() {
        let sampled = Sampled::new(0.25);
        let kept = (0..40_000).filter(|_| sampled.draw()).count();
        assert!((9_000..11_000).contains(&kept), "{kept} of 40000 at 0.25");
    }
}
