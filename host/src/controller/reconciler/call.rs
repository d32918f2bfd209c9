//! The plugin call of a reconcile, and of a shadow revision beside it: a fresh instance on a
//! blocking thread, under the guest-memory budget, counted in the revision's health; and the
//! comparison of a shadow's plan with the stable revision's.

use std::sync::Arc;

use serde_json::Value;
use tracing::{Instrument as _, debug, warn};

use super::Reconciler;
use crate::cache::{CallReader, ObjectKey};
use crate::controller::health::DIFFS_PER_PARENT;
use crate::controller::{shadow, short};
use crate::model::{self, ReconcileRequest};
use crate::planner;
use crate::runtime::{CallError, ObjectReader, Outcome, Plugin};

impl Reconciler {
    /// Calls the plugin on `request` in a fresh instance, with a reader bound to its identity.
    /// `None` if the call's thread failed (it is logged).
    pub(super) async fn call(
        &self,
        key: &ObjectKey,
        request: Arc<ReconcileRequest>,
    ) -> Option<(Result<Outcome, CallError>, Arc<CallReader>)> {
        let plugin = self.plugin.clone();
        let call_reader = Arc::new(self.reader.for_call(&key.namespace));
        let reader: Arc<dyn ObjectReader> = call_reader.clone();
        // The call runs on a blocking thread; it stays inside this reconcile's span, so what the
        // plugin logs names the plugin, the parent and the digest of the code. The result comes
        // back as soon as it exists: that thread then tears the instance down and makes the
        // next one, off this reconcile's path. `response_bytes` is the response as the plugin
        // wrote it (JSON text and strings, [`Outcome::response_bytes`]), measured anyway for
        // its limit.
        let span = tracing::debug_span!(target: "reconhost::trace", "plugin.call",
            digest = self.plugin.digest(), contract = self.plugin.contract(),
            deadline_ms = u64::try_from(self.plugin.limits().deadline.as_millis()).unwrap_or(u64::MAX),
            elapsed_ms = tracing::field::Empty, memory_peak_bytes = tracing::field::Empty,
            response_bytes = tracing::field::Empty, children = tracing::field::Empty,
            error = tracing::field::Empty);
        let call_span = span.clone();
        // Entered under it: the call's span exists only while traces are exported (or
        // RUST_LOG asks for it), and the plugin's log lines must name the reconcile either way.
        let reconcile = tracing::Span::current();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The instance may grow to the plugin's memory limit: reserved from the budget all
        // calls share until the result is back (not through the writes that follow).
        let memory = self.guest_memory.reserve(self.plugin.limits().memory).await;
        // Detached: the result comes through the oneshot; a panic drops the sender.
        drop(tokio::task::spawn_blocking(move || {
            let _reconcile = reconcile.enter();
            let _span = span.enter();
            plugin.reconcile_then(&request, reader, |result| {
                let _ = tx.send(result);
            });
        }));
        let result = rx.await;
        drop(memory);
        if let Ok(result) = &result {
            match result {
                Ok(outcome) => {
                    let elapsed = u64::try_from(outcome.elapsed.as_millis()).unwrap_or(u64::MAX);
                    call_span.record("elapsed_ms", elapsed);
                    call_span.record("memory_peak_bytes", outcome.memory_peak as u64);
                    call_span.record("response_bytes", outcome.response_bytes as u64);
                    call_span.record("children", outcome.desired.children.len() as u64);
                }
                Err(error) => {
                    call_span.record("error", tracing::field::display(error));
                }
            }
        }
        self.health.called();
        match result {
            Ok(result) => Some((result, call_reader)),
            Err(_) => {
                warn!(plugin = %self.plugin.info().name, parent = %key, "plugin call thread failed");
                None
            }
        }
    }

    /// Calls this revision as the shadow of another on the same request (inside a `shadow`
    /// span naming its digest), without asking for what its reads were refused: nothing it
    /// does may change what the host knows.
    pub(super) async fn call_as_shadow(
        &self,
        key: &ObjectKey,
        request: Arc<ReconcileRequest>,
    ) -> Option<Result<Outcome, CallError>> {
        let span = tracing::info_span!("shadow", digest = %short(self.plugin.digest()),
            revision = %self.book.revision());
        let (result, _) = self.call(key, request).instrument(span).await?;
        Some(result)
    }

    /// Plans this shadow revision's answer `result` against the observed children the stable
    /// revision planned against, and counts how the two plans differ. Writes nothing,
    /// anywhere: not the cluster, not the book, not what the parent read.
    pub(super) fn compare(
        &self,
        key: &ObjectKey,
        request: &ReconcileRequest,
        observed: &[Value],
        stable: (&Plugin, &model::Desired),
        result: Result<Outcome, CallError>,
    ) {
        let fields = self.status_fields();
        let now = model::now();
        let plan = |plugin: &Plugin, desired: &model::Desired| {
            planner::plan(
                plugin.info(),
                &fields,
                &request.parent,
                desired,
                observed,
                &now,
            )
        };
        let (count, shown) = match result {
            Ok(outcome) => shadow::compare(
                &plan(stable.0, stable.1),
                &plan(&self.plugin, &outcome.desired),
                &request.parent["status"],
                DIFFS_PER_PARENT,
            ),
            Err(error) => {
                self.health.failed(&error.kind);
                let failed = shadow::Difference {
                    target: "call".into(),
                    field: String::new(),
                    stable: Some("succeeded".into()),
                    candidate: Some(error.kind.to_string()),
                };
                (1, vec![failed])
            }
        };
        if count > 0 {
            debug!(plugin = %self.plugin.info().name, parent = %key, differences = count,
                   first = %shown[0], "the shadow revision would do otherwise");
        }
        self.health.shadowed(key, count, shown);
    }
}
