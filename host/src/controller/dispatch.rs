//! What a worker does with the key it took: the route's decision, made under the route's lock
//! so that a revision being swapped out either counts the reconcile before the swap waits for
//! it, or is not chosen at all; then the reconcile, the release, or nothing.

use std::sync::Arc;

use serde_json::Value;
use tracing::{Instrument as _, debug};

use super::revision::{self, Revision};
use super::route::{Decision, Route};
use super::short;
use super::trigger::{Held, Trigger};
use super::wiring::Wiring;
use super::workers::Next;
use crate::cache::{Cached, ObjectKey};
use crate::model::Parent;

/// What a worker does with one key, decided at dequeue.
pub(super) enum Work {
    /// No route: the controller is stopping.
    Nothing,
    /// The parent is not in the cache: it was deleted, and the garbage collector removes the
    /// children through their ownerReference.
    Gone(Arc<Wiring>, ObjectKey),
    /// Not this replica's.
    Skip,
    /// The plugin does not reconcile it.
    Release(revision::Serving, Arc<Revision>, ObjectKey, Parent),
    /// Reconcile it, calling a shadow revision beside.
    Serve(
        revision::Serving,
        Arc<Revision>,
        Option<Arc<Revision>>,
        ObjectKey,
        Arc<Cached>,
        Parent,
    ),
}

impl Work {
    pub(super) fn of(route: &Route<Arc<Revision>>, key: ObjectKey) -> Self {
        let wiring = route.stable.wiring();
        if !route.owns(&key) {
            // Another replica's since it was queued (the handlers queue only what this replica
            // owns): what was remembered of it goes, and its text is not parsed.
            wiring.converge().forget(&key);
            return Work::Skip;
        }
        let Some(cached) = wiring.parents().store().get(&key.namespace, &key.name) else {
            return Work::Gone(wiring.clone(), key);
        };
        // The parent's cached text goes to the plugin as it is; the parsed value serves the
        // host's own decisions.
        let parent = Parent::from_text(&cached.json()).unwrap_or_else(|| Parent::from(Value::Null));
        match route.decide(&key, &parent) {
            Decision::Skip => Work::Skip,
            // Released with the host's own managedFields: they say which labels and annotations
            // the plugin set on it, to be given up.
            Decision::Release(revision) => {
                let parent = if cached.has_managed_fields() {
                    Parent::from(cached.observed())
                } else {
                    parent
                };
                Work::Release(revision.enter(), revision, key, parent)
            }
            Decision::Serve { revision, shadow } => {
                Work::Serve(revision.enter(), revision, shadow, key, cached, parent)
            }
        }
    }

    pub(super) async fn run(self, plugin: String) -> Next {
        match self {
            Work::Nothing | Work::Skip => Next::Done,
            Work::Gone(wiring, key) => {
                wiring.forget(&key);
                debug!(%plugin, parent = %key, "parent is gone");
                Next::Done
            }
            Work::Release(_serving, revision, key, parent) => {
                let span = begin(&plugin, &key, &revision);
                let next = revision
                    .reconciler()
                    .unselected(&key, &parent)
                    .instrument(span.clone())
                    .await;
                failed_if(&span, &next, &revision, &key);
                next
            }
            Work::Serve(_serving, revision, shadow, key, cached, parent) => {
                let span = begin(&plugin, &key, &revision);
                let shadow = shadow.as_ref().map(|s| s.reconciler());
                let reconcile = revision
                    .reconciler()
                    .reconcile(&key, &cached, parent, shadow)
                    .instrument(span.clone());
                let next = tokio::select! {
                    biased;
                    next = reconcile => next,
                    () = revision.retired() => Next::Retry,
                };
                failed_if(&span, &next, &revision, &key);
                next
            }
        }
    }
}

/// The span of one reconcile: what the plugin logs names the plugin, the parent and the digest
/// of the code.
///
/// It is also the root of the reconcile's trace (target [`crate::telemetry::TARGET`]), whose
/// `outcome` says whether it wrote (`changed`) or failed (`failed`); one that did neither is
/// not exported.
fn span(plugin: &str, key: &ObjectKey, revision: &Revision) -> tracing::Span {
    tracing::info_span!(target: "reconhost::trace", "reconcile", plugin = %plugin, parent = %key,
        digest = %short(revision.plugin().digest()), revision = %revision.id(),
        contract = revision.plugin().contract(), outcome = tracing::field::Empty)
}

/// Marks the reconcile's span failed when it ended in an error, and remembers that a retry or
/// a requeue-after will be why the parent comes back (unless something else brings it first).
fn failed_if(span: &tracing::Span, next: &Next, revision: &Revision, key: &ObjectKey) {
    let now = std::time::Instant::now();
    let triggers = revision.wiring().triggers();
    match next {
        Next::Retry | Next::Terminal => {
            crate::telemetry::outcome(span, "failed");
            if matches!(next, Next::Retry) {
                triggers.record(key, Trigger::Retry, now);
            }
        }
        Next::RequeueAfter(after) => triggers.record(key, Trigger::RequeueAfter, now + *after),
        Next::Done => {}
    }
}

/// The reconcile's span, traced as decided when its first cause was seen, and given that
/// cause and its wait in the queue.
fn begin(plugin: &str, key: &ObjectKey, revision: &Revision) -> tracing::Span {
    let held = revision.wiring().triggers().take(key);
    crate::telemetry::decide(held.as_ref().map(Held::sampled));
    let span = span(plugin, key, revision);
    if let Some(Held::Cause(trigger, since)) = held {
        crate::telemetry::caused_by(&span, since, move || trigger.attributes());
    }
    span
}
