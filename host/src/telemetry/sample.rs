//! Head sampling of a reconcile's trace, decided once per reconcile and used by everything that
//! would do work for it. The decision is drawn when the parent's first cause since its last
//! reconcile is seen ([`draw_sampled`], by the controller's triggers), so that the cause of a
//! reconcile that will not be traced is never made; it is handed to the reconcile when it
//! begins ([`super::decide`]), and drawn there for a reconcile that came with no cause held.
//! The trace recorder's per-layer filter ([`Sampled`]) lets the root (`reconcile`) through as
//! decided, and the spans below it only when their root was: a reconcile that is not sampled
//! costs the recorder nothing, and its debug spans are not even made unless `RUST_LOG` asks
//! for them.

use std::sync::OnceLock;

use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

/// The name of a reconcile's root span, where its trace is sampled.
pub const ROOT: &str = "reconcile";

/// The process's sampling ratio, set once when tracing is set up.
static RATIO: OnceLock<Ratio> = OnceLock::new();

/// Draws whether the next reconcile of a parent is traced, at the ratio tracing was set up
/// with (every one when none was).
pub fn draw_sampled() -> bool {
    RATIO.get().copied().unwrap_or(Ratio::ALL).draw()
}

/// Sets the ratio [`draw_sampled`] draws at; the first call wins.
pub(super) fn set_ratio(ratio: f64) {
    let _ = RATIO.set(Ratio::new(ratio));
}

/// A sampling probability, as a bound on a uniform draw.
#[derive(Debug, Clone, Copy)]
struct Ratio {
    /// Kept when a uniform draw over `u64` falls below this; `None`: always.
    below: Option<u64>,
}

impl Ratio {
    const ALL: Self = Self { below: None };

    fn new(ratio: f64) -> Self {
        let below = (ratio < 1.0).then(|| {
            // The float-to-int cast saturates, and 0 keeps nothing.
            (ratio.max(0.0) * u64::MAX as f64) as u64
        });
        Self { below }
    }

    fn draw(self) -> bool {
        match self.below {
            None => true,
            // A span id is 64 random bits from the SDK's own generator (a thread-local RNG).
            Some(below) => {
                u64::from_be_bytes(RandomIdGenerator::default().new_span_id().to_bytes()) < below
            }
        }
    }
}

/// Lets through the spans of [`super::TARGET`]: a root as its reconcile's decision says (drawn
/// with probability `ratio` when there is none), any other only inside a root that was let
/// through.
#[derive(Debug)]
pub struct Sampled {
    ratio: Ratio,
}

impl Sampled {
    /// Samples undecided roots with probability `ratio` (0 to 1).
    pub fn new(ratio: f64) -> Self {
        Self {
            ratio: Ratio::new(ratio),
        }
    }

    fn draw(&self) -> bool {
        self.ratio.draw()
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
        let decided = super::decision();
        if meta.name() == ROOT {
            return decided.unwrap_or_else(|| {
                let sampled = self.draw();
                super::decide(Some(sampled));
                sampled
            });
        }
        // Inside a reconcile that is not traced, without looking at its spans.
        if decided == Some(false) {
            return false;
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
