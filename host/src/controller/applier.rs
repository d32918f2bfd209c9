//! The applier: carries out a plan against the API server, and nothing else.
//!
//! - Children go through server-side apply under the plugin's field manager, forced: the plugin
//!   owns the fields it declares, so a field someone else changed is put back, and fields other
//!   managers own (defaults, other controllers) are left alone.
//! - Deletes carry the observed UID as a precondition, so a newer object of the same name is
//!   never removed by mistake.
//! - Status goes through the status subresource (the main resource when the kind has none).
//! - The finalizer is added before anything is created, so a parent deleted right after its first
//!   reconcile still gets its cleanup, and removed last. Finalizer patches carry the observed
//!   resourceVersion: a concurrent change is a 409, and the parent is reconciled again.
//! - Events go through events.k8s.io via kube-runtime's recorder, which aggregates repeats into
//!   a series instead of writing a new Event each time.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use kube::runtime::events::{self, Recorder, Reporter};
use serde_json::{Value, json};
use tracing::{Instrument as _, debug, warn};

use crate::cache::{GroupKind, ResolvedKind, Watched};
use crate::metrics::PluginMetrics;
use crate::model::MAX_EVENT_NOTE;
use crate::model::{Event, EventType, PluginInfo, printable};
use crate::planner::{Action, ChildPlan, FinalizerAction, Plan};

/// What the API server says of an applied field its schema does not declare.
const UNDECLARED_FIELD: &str = "field not declared in schema";

/// The field manager of the host's record on a parent ([`crate::model::record`]): not
/// `reconhost/<plugin>`, whose applies to the parent's metadata would otherwise remove it.
pub const RECORD_MANAGER: &str = "reconhost-record";

/// An API call the applier made failed.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {target}: {}", said(.source))]
pub struct ApplyError {
    /// What the applier was doing: apply, delete, status, finalizer.
    pub verb: &'static str,
    /// The object, `Kind namespace/name`.
    pub target: String,
    /// What the API server (or the connection) said.
    #[source]
    pub source: kube::Error,
}

/// What the API server said, as a person reads it: its message, code and reason, without the
/// whole `Status` (which would not fit in an event's note).
fn said(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} ({} {})", status.message, status.code, status.reason)
        }
        other => other.to_string(),
    }
}

impl ApplyError {
    /// Whether trying again can succeed without a change to the plugin's output: conflicts,
    /// throttling, server errors, broken connections, and a refusal by RBAC (403), which a
    /// grant heals without touching the parent. A rejection of what the plugin asked for
    /// (invalid, unknown kind, a field the kind's schema does not declare) fails the same way
    /// every time.
    pub fn is_retryable(&self) -> bool {
        match &self.source {
            // Server-side apply reports a field outside the schema as a 500 (kubernetes#139253).
            // In a child, the plugin's field fails the same way every time. A status is pruned
            // to the CRD's schema first, so there it means the API server's apply schema is
            // still behind a CRD update (seen within 100 ms of one): it will not be for long.
            kube::Error::Api(status) if status.message.contains(UNDECLARED_FIELD) => {
                self.verb == "status"
            }
            kube::Error::Api(status) => {
                matches!(status.code, 403 | 409 | 429) || status.code >= 500 || status.code == 0
            }
            _ => true,
        }
    }

    /// Whether the write was refused because the child's namespace does not exist or is being
    /// deleted: that child fails, the parent's other children and its status are still written.
    pub fn is_namespace_gone(&self) -> bool {
        match &self.source {
            kube::Error::Api(s) if s.code == 404 => {
                s.message.starts_with("namespaces \"") && s.message.ends_with("not found")
            }
            kube::Error::Api(s) if s.code == 403 => {
                s.message.contains("because it is being terminated")
            }
            _ => false,
        }
    }

    /// Whether the API server refused the write because the object changed meanwhile.
    pub fn is_conflict(&self) -> bool {
        matches!(&self.source, kube::Error::Api(s) if s.code == 409)
    }

    /// The HTTP status, or `network` for failures without one: the metrics label.
    pub fn code(&self) -> String {
        match &self.source {
            kube::Error::Api(status) => status.code.to_string(),
            _ => "network".to_owned(),
        }
    }
}

/// An object as the API server returned it after a write, for the caches.
#[derive(Debug)]
pub struct Written {
    /// Its kind.
    pub kind: GroupKind,
    /// The object.
    pub object: Watched,
}

/// What carrying out a plan came to.
#[derive(Debug, Default)]
pub struct Outcome {
    /// What the API server answered to each write, for the caches.
    pub written: Vec<Written>,
    /// Children that could not be written because their namespace is missing or terminating.
    pub failed: Vec<ApplyError>,
}

/// Applies plans for one plugin.
pub struct Applier {
    client: kube::Client,
    info: PluginInfo,
    patch: PatchParams,
    parent: ResolvedKind,
    children: HashMap<GroupKind, ResolvedKind>,
    recorder: Recorder,
    metrics: PluginMetrics,
}

impl Applier {
    /// An applier for `info`'s plugin, with the resolved parent and child kinds.
    pub fn new(
        client: kube::Client,
        info: PluginInfo,
        parent: ResolvedKind,
        children: HashMap<GroupKind, ResolvedKind>,
        metrics: PluginMetrics,
    ) -> Self {
        let reporter = Reporter {
            controller: format!("reconhost.dev/{}", info.name),
            instance: std::env::var("HOSTNAME")
                .ok()
                .map(|h| format!("{}-{h}", info.name)),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            patch: PatchParams::apply(&info.field_manager()).force(),
            client,
            info,
            parent,
            children,
            metrics,
        }
    }

    /// Carries out `plan` for `parent`: finalizer added, children applied and deleted, status
    /// written, finalizer removed — stopping at the first failure, except that a child whose
    /// namespace is missing or terminating fails alone: the others are still written, and the
    /// status is what `on_failed` makes of the failures (the planned one with the error shown,
    /// say), the finalizer kept.
    pub async fn apply(
        &self,
        parent: &Value,
        plan: &Plan,
        on_failed: impl FnOnce(&[ApplyError]) -> Option<Value>,
    ) -> Result<Outcome, ApplyError> {
        let mut outcome = Outcome::default();
        let parent_kind = self.parent.group_kind();
        let parent_written = |object: Option<Watched>, outcome: &mut Outcome| {
            if let Some(object) = object {
                outcome.written.push(Written {
                    kind: parent_kind.clone(),
                    object,
                });
            }
        };
        if plan.finalizer == Some(FinalizerAction::Add) {
            let object = self.finalizer(parent, FinalizerAction::Add).await?;
            parent_written(object, &mut outcome);
        }
        // A plan that writes nothing makes no span per child: its reconcile is exported only
        // if it failed or sent events, and the spans of every other would be made to be
        // dropped (half the reconciles of a busy controller are the echo of its own writes).
        let traced = !plan.is_noop();
        for child in &plan.children {
            // What it changes, as the planner found it (formatted only when the span is made).
            let span = if traced {
                tracing::debug_span!(target: "reconhost::trace", "child",
                    action = ?child.action, target = %child.target(), wave = child.wave,
                    why = child.why.as_deref().unwrap_or(""), changed = %Changed(child),
                    changed_count = changed_count(child))
            } else {
                tracing::Span::none()
            };
            match self.child(child).instrument(span).await {
                Ok(Some(object)) => outcome.written.push(Written {
                    kind: GroupKind::from(&child.kind),
                    object,
                }),
                Ok(None) => {}
                Err(error) if error.is_namespace_gone() => outcome.failed.push(error),
                Err(error) => return Err(error),
            }
        }
        // The finalizer's removal is a patch at the parent's resourceVersion: after a metadata
        // write, at the version that write made.
        let mut latest = None;
        if let Some(metadata) = &plan.metadata {
            let span = tracing::debug_span!(target: "reconhost::trace", "parent.metadata");
            let object = self.metadata(parent, metadata).instrument(span).await?;
            latest = Some(object.as_value().clone());
            parent_written(Some(object), &mut outcome);
        }
        let status = if outcome.failed.is_empty() {
            plan.status.clone()
        } else {
            on_failed(&outcome.failed)
        };
        let releasing =
            plan.finalizer == Some(FinalizerAction::Remove) && outcome.failed.is_empty();
        if let Some(status) = &status {
            let span = tracing::debug_span!(target: "reconhost::trace", "status");
            match self.status(parent, status).instrument(span).await {
                Ok(object) => parent_written(Some(object), &mut outcome),
                // The parent is going: its cleanup is done, and a status it cannot hold must
                // not keep it from being deleted.
                Err(error) if releasing => {
                    warn!(plugin = %self.info.name, %error,
                          "writing the status of a finalized parent failed; removing the finalizer all the same");
                }
                Err(error) => return Err(error),
            }
        }
        if releasing {
            let at = latest.as_ref().unwrap_or(parent);
            let object = self.finalizer(at, FinalizerAction::Remove).await?;
            parent_written(object, &mut outcome);
        }
        Ok(outcome)
    }

    async fn child(&self, child: &ChildPlan) -> Result<Option<Watched>, ApplyError> {
        let namespace = child.namespace.as_str();
        let action = match child.action {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Recreate => "recreate",
            Action::Unchanged => "unchanged",
            Action::Kept => "kept",
            Action::Waiting => "waiting",
        };
        self.metrics.apply(action);
        if !child.action.sends() {
            return Ok(None);
        }
        let target = child.target();
        let Some(kind) = self.children.get(&GroupKind::from(&child.kind)) else {
            // Validation only lets declared kinds through, and every declared kind is resolved.
            unreachable!("child kind {} was not resolved", child.kind);
        };
        let api = self.api(kind, namespace);
        let deletes = matches!(child.action, Action::Delete | Action::Recreate);
        let result = if deletes {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: child.uid.clone(),
                    resource_version: None,
                }),
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            match api.delete(&child.name, &params).await {
                Ok(_) => Ok(None),
                // Already gone: what was wanted.
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                Err(e) => Err(e),
            }
        } else {
            api.patch(&child.name, &self.patch, &Patch::Apply(&child.object))
                .await
                .map(Some)
        };
        debug!(plugin = %self.info.name, %target, action, "child");
        let verb = if deletes { "delete" } else { "apply" };
        result.map_err(|source| self.failed(verb, target, source))
    }

    /// The child as the API server has it now, with every manager's `managedFields` (the cache
    /// keeps only the host's): read when the fight breaker must know who else wrote it. `None`
    /// if it cannot be read (gone, or the plugin's account may not get it).
    pub async fn live(&self, child: &ChildPlan) -> Option<Value> {
        let kind = self.children.get(&GroupKind::from(&child.kind))?;
        // As a `DynamicObject`: a `Watched` keeps only reconhost's managedFields entries.
        let api: Api<DynamicObject> = self.api(kind, &child.namespace);
        match api.get(&child.name).await {
            Ok(object) => serde_json::to_value(object).ok(),
            Err(error) => {
                debug!(plugin = %self.info.name, target = %child.target(), %error,
                       "reading a rewritten child failed");
                None
            }
        }
    }

    /// Applies the labels and annotations the plugin sets on the parent, under its field manager
    /// and without force: a key another manager owns with another value is a conflict the
    /// plugin is told of, never taken over.
    async fn metadata(&self, parent: &Value, metadata: &Value) -> Result<Watched, ApplyError> {
        let name = parent["metadata"]["name"].as_str().unwrap_or("");
        let namespace = parent["metadata"]["namespace"].as_str().unwrap_or("");
        let mut meta = metadata.clone();
        meta["name"] = json!(name);
        let body = json!({
            "apiVersion": self.parent.resource.api_version,
            "kind": self.parent.resource.kind,
            "metadata": meta,
        });
        let target = format!(
            "{} {}",
            self.parent.resource.kind,
            crate::model::object_ref(parent)
        );
        let params = PatchParams::apply(&self.info.field_manager());
        self.api(&self.parent, namespace)
            .patch(name, &params, &Patch::Apply(&body))
            .await
            .map_err(|source| self.failed("metadata", target, source))
    }

    /// Sets one annotation of the host's own on the parent (a merge patch of that key alone,
    /// under the field manager [`RECORD_MANAGER`], apart from what the plugin applies); returns
    /// the parent as the API server now has it.
    pub async fn annotate(
        &self,
        parent: &Value,
        key: &str,
        value: &str,
    ) -> Result<Watched, ApplyError> {
        let name = parent["metadata"]["name"].as_str().unwrap_or("");
        let namespace = parent["metadata"]["namespace"].as_str().unwrap_or("");
        let patch = json!({"metadata": {"annotations": {key: value}}});
        let params = PatchParams {
            field_manager: Some(RECORD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let target = format!(
            "{} {}",
            self.parent.resource.kind,
            crate::model::object_ref(parent)
        );
        self.api(&self.parent, namespace)
            .patch(name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|source| self.failed("annotate", target, source))
    }

    /// Writes the parent's status; returns the parent as the API server now has it.
    pub async fn status(&self, parent: &Value, status: &Value) -> Result<Watched, ApplyError> {
        let name = parent["metadata"]["name"].as_str().unwrap_or("");
        let namespace = parent["metadata"]["namespace"].as_str().unwrap_or("");
        let body = json!({
            "apiVersion": self.parent.resource.api_version,
            "kind": self.parent.resource.kind,
            "metadata": {"name": name},
            "status": status,
        });
        let api = self.api(&self.parent, namespace);
        let result = if self.parent.has_status {
            api.patch_status(name, &self.patch, &Patch::Apply(&body))
                .await
        } else {
            api.patch(name, &self.patch, &Patch::Apply(&body)).await
        };
        let target = format!(
            "{} {}",
            self.parent.resource.kind,
            crate::model::object_ref(parent)
        );
        result.map_err(|source| self.failed("status", target, source))
    }

    async fn finalizer(
        &self,
        parent: &Value,
        action: FinalizerAction,
    ) -> Result<Option<Watched>, ApplyError> {
        let name = parent["metadata"]["name"].as_str().unwrap_or("");
        let namespace = parent["metadata"]["namespace"].as_str().unwrap_or("");
        let ours = self.info.finalizer_name();
        let mut finalizers: Vec<Value> = parent["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match action {
            FinalizerAction::Add => finalizers.push(json!(ours)),
            FinalizerAction::Remove => finalizers.retain(|f| f != ours.as_str()),
        }
        // A merge patch with the observed resourceVersion: the API server refuses it (409) if
        // someone changed the list meanwhile, instead of dropping their finalizer.
        let patch = json!({"metadata": {
            "resourceVersion": parent["metadata"]["resourceVersion"],
            "finalizers": finalizers,
        }});
        let api = self.api(&self.parent, namespace);
        let target = format!(
            "{} {}",
            self.parent.resource.kind,
            crate::model::object_ref(parent)
        );
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(object) => Ok(Some(object)),
            // Removing from a parent that is already gone is done.
            Err(kube::Error::Api(s)) if s.code == 404 && action == FinalizerAction::Remove => {
                Ok(None)
            }
            Err(source) => Err(self.failed("finalizer", target, source)),
        }
    }

    /// Records events on the parent. A failure is logged and counted, not returned: an event
    /// that cannot be written must not fail a reconcile whose writes succeeded.
    pub async fn events(&self, parent: &Value, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        let meta = &parent["metadata"];
        let reference = ObjectReference {
            api_version: Some(self.parent.resource.api_version.clone()),
            kind: Some(self.parent.resource.kind.clone()),
            name: meta["name"].as_str().map(str::to_owned),
            namespace: meta["namespace"].as_str().map(str::to_owned),
            uid: meta["uid"].as_str().map(str::to_owned),
            ..ObjectReference::default()
        };
        for event in events {
            let record = events::Event {
                type_: match event.type_ {
                    EventType::Normal => events::EventType::Normal,
                    EventType::Warning => events::EventType::Warning,
                },
                reason: event.reason.clone(),
                // The host's own notes (several failures joined, say) are cut as the plugin's
                // are: events.k8s.io refuses a note of 1 kB or more.
                note: Some(printable(&event.message, MAX_EVENT_NOTE)),
                action: "Reconcile".to_owned(),
                secondary: None,
            };
            let span = tracing::debug_span!(target: "reconhost::trace", "event",
                reason = %event.reason);
            if let Err(error) = self
                .recorder
                .publish(&record, &reference)
                .instrument(span)
                .await
            {
                let code = match &error {
                    kube::Error::Api(s) => s.code.to_string(),
                    _ => "network".to_owned(),
                };
                self.metrics.api_error("event", &code);
                warn!(plugin = %self.info.name, parent = %crate::model::object_ref(parent),
                      reason = %event.reason, %error, "recording an event failed");
            }
        }
    }

    fn api<K>(&self, kind: &ResolvedKind, namespace: &str) -> Api<K>
    where
        K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>,
    {
        if kind.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource)
        } else {
            Api::all_with(self.client.clone(), &kind.resource)
        }
    }

    fn failed(&self, verb: &'static str, target: String, source: kube::Error) -> ApplyError {
        let error = ApplyError {
            verb,
            target,
            source,
        };
        self.metrics.api_error(verb, &error.code());
        error
    }
}

/// A child span's `changed`: the fields an update changes (the planner's [`ChildPlan::changes`],
/// the first few and how many more), or what became of a child with nothing sent: `created`,
/// `deleted`, `unchanged`, or `skipped` (kept by its update strategy, or waiting for its
/// wave), with the fields it would change.
struct Changed<'a>(&'a ChildPlan);

impl std::fmt::Display for Changed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let changes = &self.0.changes;
        match self.0.action {
            Action::Create => f.write_str("created"),
            Action::Delete => f.write_str("deleted"),
            // Also an update the host's memory of what it applied found already done.
            Action::Unchanged => f.write_str("unchanged"),
            Action::Update | Action::Recreate => write!(f, "{changes}"),
            Action::Kept | Action::Waiting if changes.is_empty() => f.write_str("skipped"),
            Action::Kept | Action::Waiting => write!(f, "skipped: {changes}"),
        }
    }
}

/// A child span's `changed_count`: how many fields its body changes or would change; 0 for a
/// child created, deleted or unchanged.
fn changed_count(child: &ChildPlan) -> u64 {
    match child.action {
        Action::Update | Action::Recreate | Action::Kept | Action::Waiting => {
            child.changes.count() as u64
        }
        Action::Create | Action::Delete | Action::Unchanged => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, reason: &str, message: &str) -> ApplyError {
        let status = kube::core::Status {
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
            ..Default::default()
        };
        ApplyError {
            verb: "apply",
            target: "ConfigMap team-a/web".to_owned(),
            source: kube::Error::Api(Box::new(status)),
        }
    }

    #[test]
    fn a_child_span_should_say_what_changed_or_why_nothing_was_sent() {
        let body = json!({"metadata": {"name": "web"}, "data": {"a": "2", "b": "1"}});
        let held = json!({"metadata": {"name": "web"}, "data": {"a": "1", "b": "1"}});
        let child = |action| ChildPlan {
            action,
            kind: crate::model::KindRef::new("v1", "ConfigMap"),
            namespace: "team-a".into(),
            name: "web".into(),
            object: body.clone(),
            uid: None,
            wave: 0,
            why: None,
            changes: crate::planner::changes::changes(&body, &held, None),
        };
        let said = |action| {
            let child = child(action);
            (Changed(&child).to_string(), changed_count(&child))
        };
        assert_eq!(said(Action::Update), ("data.a".to_owned(), 1));
        assert_eq!(said(Action::Waiting), ("skipped: data.a".to_owned(), 1));
        assert_eq!(said(Action::Unchanged), ("unchanged".to_owned(), 0));
        assert_eq!(said(Action::Create), ("created".to_owned(), 0));
    }

    #[test]
    fn a_refusal_should_read_as_the_api_servers_message() {
        let error = refused(404, "NotFound", "namespaces \"team-a\" not found");
        assert_eq!(
            error.to_string(),
            "apply ConfigMap team-a/web: namespaces \"team-a\" not found (404 NotFound)"
        );
    }

    #[test]
    fn only_a_missing_or_terminating_namespace_should_fail_a_child_alone() {
        let gone = [
            refused(404, "NotFound", "namespaces \"team-a\" not found"),
            refused(
                403,
                "Forbidden",
                "configmaps \"web\" is forbidden: unable to create new content in namespace team-a because it is being terminated",
            ),
        ];
        assert!(gone.iter().all(ApplyError::is_namespace_gone));
        let others = [
            refused(404, "NotFound", "configmaps \"web\" not found"),
            refused(
                403,
                "Forbidden",
                "configmaps \"web\" is forbidden: User \"system:serviceaccount:p:a\" cannot patch resource",
            ),
            refused(422, "Invalid", "ConfigMap \"web\" is invalid"),
        ];
        assert!(!others.iter().any(ApplyError::is_namespace_gone));
    }

    #[test]
    fn an_undeclared_field_in_a_child_should_not_be_retried_although_it_is_a_500() {
        let error = refused(
            500,
            "InternalError",
            ".data.colour: field not declared in schema",
        );
        assert!(!error.is_retryable());
        assert!(refused(500, "InternalError", "etcd timeout").is_retryable());
    }

    #[test]
    fn an_undeclared_field_in_a_pruned_status_should_be_retried_as_the_api_server_catching_up() {
        for field in [".status.conditions", ".status.phase"] {
            let error = ApplyError {
                verb: "status",
                ..refused(
                    500,
                    "InternalError",
                    &format!(
                        "failed to create typed patch object (/two; test.reconhost.dev/v1, Kind=Legacy): {field}: field not declared in schema"
                    ),
                )
            };
            assert!(error.is_retryable(), "{field}");
        }
    }
}
