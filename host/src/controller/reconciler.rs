//! The reconciler: one parent key in, one [`Next`] out. Gathers the parent and its children from
//! the caches, calls the plugin in a fresh instance on a blocking thread, plans, applies, and
//! reports failures on the parent (the `Synced` condition and a Warning event).
//!
//! Failures are sorted three ways:
//! - a permanent plugin error, or an API rejection of what the plugin asked for (invalid,
//!   forbidden): shown on the parent and not retried until the parent's generation changes;
//! - anything else from the plugin (transient errors, deadlines, traps, invalid responses):
//!   shown on the parent and retried with per-key backoff, so a plugin fixed by an upgrade, or
//!   an input that gets fixed, recovers;
//! - a retryable API error (throttling, 5xx, connection loss): shown on the parent and retried
//!   with backoff; a 409 conflict, the normal result of racing another writer, is retried
//!   without being shown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tracing::{debug, info, warn};

use super::applied::Applied;
use super::applier::{Applier, ApplyError, Written};
use super::deps::Dependencies;
use super::workers::Next;
use crate::cache::{CacheReader, Cached, Informer, ObjectKey};
use crate::metrics::PluginMetrics;
use crate::model::{self, Event, EventType, ReconcileRequest, object_ref};
use crate::planner::{self, Action};
use crate::runtime::{CallError, CallErrorKind, ObjectReader, Plugin};

/// Reconciles the parents of one plugin.
pub struct Reconciler {
    plugin: Plugin,
    config: Value,
    parents: Arc<Informer>,
    children: Vec<Arc<Informer>>,
    reader: Arc<CacheReader>,
    deps: Arc<Dependencies>,
    applier: Applier,
    metrics: PluginMetrics,
    /// Parents whose last reconcile failed for good: UID and the generation that failed.
    permanent: Mutex<HashMap<ObjectKey, (String, i64)>>,
    /// What was last applied to each child, for children the API server normalised.
    applied: Applied,
}

/// What the reconciler is built from.
pub struct Parts {
    /// The plugin.
    pub plugin: Plugin,
    /// Its configuration.
    pub config: Value,
    /// The informer of the parent kind.
    pub parents: Arc<Informer>,
    /// The informers of the child kinds.
    pub children: Vec<Arc<Informer>>,
    /// The reader over the kinds the plugin may read.
    pub reader: Arc<CacheReader>,
    /// Where reads are recorded.
    pub deps: Arc<Dependencies>,
    /// The applier.
    pub applier: Applier,
    /// The plugin's metrics.
    pub metrics: PluginMetrics,
}

impl Reconciler {
    /// A reconciler from its parts.
    pub fn new(parts: Parts) -> Self {
        Self {
            plugin: parts.plugin,
            config: parts.config,
            parents: parts.parents,
            children: parts.children,
            reader: parts.reader,
            deps: parts.deps,
            applier: parts.applier,
            metrics: parts.metrics,
            permanent: Mutex::new(HashMap::new()),
            applied: Applied::default(),
        }
    }

    /// Reconciles one parent.
    pub async fn reconcile(&self, key: &ObjectKey) -> Next {
        let name = &self.plugin.info().name;
        let Some(cached) = self.parents.store().get(&key.namespace, &key.name) else {
            // Deleted: the garbage collector removes the children through their ownerReference.
            self.deps.forget(key);
            self.applied.forget(key);
            self.permanent_lock().remove(key);
            debug!(plugin = %name, parent = %key, "parent is gone");
            return Next::Done;
        };
        let parent = cached.value();
        let meta = &parent["metadata"];
        let uid = cached.meta.uid.clone();
        let generation = meta["generation"].as_i64().unwrap_or(0);
        if self.permanent_lock().get(key) == Some(&(uid.clone(), generation)) {
            debug!(plugin = %name, parent = %key, generation, "permanent failure; waiting for a change");
            return Next::Done;
        }
        let info = self.plugin.info();
        let deleting = model::is_deleting(&parent);
        let has_finalizer = info.holds_finalizer(&parent);
        if deleting && !has_finalizer {
            return Next::Done;
        }
        if deleting && !info.finalizer {
            // An earlier version of the plugin asked for a finalizer and this one does not:
            // there is no cleanup to wait for, so the parent is released without a call.
            return self.release(key, &parent).await;
        }
        // The plugin gets the children's cached text as it is; the planner compares against
        // them parsed, with the host's own managedFields entries.
        let children: Vec<Arc<Cached>> = self
            .children
            .iter()
            .flat_map(|i| i.store().controlled_by(&uid))
            .collect();
        let observed: Vec<Value> = children.iter().map(|c| c.observed()).collect();
        let request = ReconcileRequest {
            children: children.iter().map(|c| c.json().to_owned()).collect(),
            parent,
            config: self.config.clone(),
            finalizing: deleting,
        };

        let plugin = self.plugin.clone();
        let reader: Arc<dyn ObjectReader> = self.reader.clone();
        // The call runs on a blocking thread; it stays inside this reconcile's span, so what the
        // plugin logs names the plugin, the parent and the digest of the code.
        let span = tracing::Span::current();
        let call = tokio::task::spawn_blocking(move || {
            let _span = span.enter();
            let result = plugin.reconcile(&request, reader);
            (request, result)
        })
        .await;
        let (request, result) = match call {
            Ok(done) => done,
            Err(e) => {
                warn!(plugin = %name, parent = %key, error = %e, "plugin call thread failed");
                return Next::Retry;
            }
        };
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => return self.call_failed(key, &request.parent, error).await,
        };
        self.metrics.call_seconds(outcome.elapsed);
        self.metrics.memory_peak(outcome.memory_peak);
        self.deps.record(key, &outcome.reads);

        let mut plan = planner::plan(
            self.plugin.info(),
            &request.parent,
            &outcome.desired,
            &observed,
            &model::now(),
        );
        self.applied.settle(key, &mut plan, &observed);
        match self.applier.apply(&request.parent, &plan).await {
            Ok(written) => {
                self.applied.record(key, &plan, &observed, &written);
                self.observe(written);
            }
            Err(error) => return self.apply_failed(key, &request.parent, error).await,
        }
        self.applier
            .events(&request.parent, &outcome.desired.events)
            .await;
        self.permanent_lock().remove(key);
        let changes = plan
            .children
            .iter()
            .filter(|c| c.action != Action::Unchanged)
            .count();
        if changes > 0 || plan.status.is_some() || plan.finalizer.is_some() {
            info!(plugin = %name, parent = %key, children = changes,
                  status = plan.status.is_some(), finalizer = ?plan.finalizer, "reconciled");
        } else {
            debug!(plugin = %name, parent = %key, "up to date");
        }
        match outcome.desired.requeue_after {
            Some(after) => Next::RequeueAfter(after),
            None => Next::Done,
        }
    }

    async fn call_failed(&self, key: &ObjectKey, parent: &Value, error: CallError) -> Next {
        let label = error.kind.label();
        self.metrics.error(label);
        if matches!(error.kind, CallErrorKind::Plugin(_)) {
            // The plugin's own error often names a missing or wrong input; what it read wakes
            // the parent when that input changes. Other failures say nothing about what was
            // read, so the previous record stands.
            self.deps.record(key, &error.reads);
        }
        let message = error.kind.to_string();
        warn!(plugin = %error.plugin, parent = %key, kind = label, error = %message, "reconcile failed");
        self.report(parent, "ReconcileError", &message).await;
        if error.kind.is_permanent() {
            self.remember_permanent(key, parent);
            Next::Terminal
        } else {
            Next::Retry
        }
    }

    async fn apply_failed(&self, key: &ObjectKey, parent: &Value, error: ApplyError) -> Next {
        let name = &self.plugin.info().name;
        if error.is_conflict() {
            // Racing another writer; the next attempt sees its change.
            debug!(plugin = %name, parent = %key, %error, "conflict; retrying");
            return Next::Retry;
        }
        let message = error.to_string();
        warn!(plugin = %name, parent = %key, error = %message, retrying = error.is_retryable(),
              "applying the desired state failed");
        self.report(parent, "ApplyError", &message).await;
        if error.is_retryable() {
            Next::Retry
        } else {
            self.remember_permanent(key, parent);
            Next::Terminal
        }
    }

    /// Removes the host's finalizer from a parent being deleted, without calling the plugin.
    async fn release(&self, key: &ObjectKey, parent: &Value) -> Next {
        let plan = planner::Plan {
            children: Vec::new(),
            status: None,
            finalizer: Some(planner::FinalizerAction::Remove),
        };
        match self.applier.apply(parent, &plan).await {
            Ok(written) => {
                self.observe(written);
                info!(plugin = %self.plugin.info().name, parent = %key,
                      "released: the plugin no longer asks for a finalizer");
                Next::Done
            }
            Err(error) => self.apply_failed(key, parent, error).await,
        }
    }

    /// Shows a failure on the parent: `Synced=False` with the message, and a Warning event.
    async fn report(&self, parent: &Value, reason: &str, message: &str) {
        if let Some(status) = planner::failure_status(parent, reason, message, &model::now()) {
            match self.applier.status(parent, &status).await {
                Ok(object) => self.parents.observe_write(object),
                Err(error) => {
                    warn!(plugin = %self.plugin.info().name, parent = %object_ref(parent),
                                    %error, "writing the failure condition failed")
                }
            }
        }
        let event = Event {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            message: message.to_owned(),
        };
        self.applier.events(parent, &[event]).await;
    }

    /// Brings the caches up to date with what the API server answered to our writes.
    fn observe(&self, written: Vec<Written>) {
        for Written { kind, object } in written {
            let informer = std::iter::once(&self.parents)
                .chain(&self.children)
                .find(|i| i.group_kind() == kind);
            if let Some(informer) = informer {
                informer.observe_write(object);
            }
        }
    }

    fn remember_permanent(&self, key: &ObjectKey, parent: &Value) {
        let meta = &parent["metadata"];
        let uid = meta["uid"].as_str().unwrap_or("").to_owned();
        let generation = meta["generation"].as_i64().unwrap_or(0);
        self.permanent_lock().insert(key.clone(), (uid, generation));
    }

    fn permanent_lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, (String, i64)>> {
        self.permanent
            .lock()
            .expect("permanent-failure lock poisoned")
    }
}
