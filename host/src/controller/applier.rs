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
use kube::runtime::events::{self, Recorder, Reporter};
use serde_json::{Value, json};
use tracing::{debug, warn};

use crate::cache::{GroupKind, ResolvedKind};
use crate::metrics::PluginMetrics;
use crate::model::{Event, EventType, PluginInfo};
use crate::planner::{Action, ChildPlan, FinalizerAction, Plan};

/// An API call the applier made failed.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {target}: {source}")]
pub struct ApplyError {
    /// What the applier was doing: apply, delete, status, finalizer.
    pub verb: &'static str,
    /// The object, `Kind namespace/name`.
    pub target: String,
    /// What the API server (or the connection) said.
    #[source]
    pub source: kube::Error,
}

impl ApplyError {
    /// Whether trying again can succeed without a change to the plugin's output: conflicts,
    /// throttling, server errors, broken connections, and a refusal by RBAC (403), which a
    /// grant heals without touching the parent. A rejection of what the plugin asked for
    /// (invalid, unknown kind) fails the same way every time.
    pub fn is_retryable(&self) -> bool {
        match &self.source {
            kube::Error::Api(status) => {
                matches!(status.code, 403 | 409 | 429) || status.code >= 500 || status.code == 0
            }
            _ => true,
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
    pub object: DynamicObject,
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
    /// written, finalizer removed — stopping at the first failure. Returns what the API server
    /// answered to each write, so the caller can bring its caches up to date.
    pub async fn apply(&self, parent: &Value, plan: &Plan) -> Result<Vec<Written>, ApplyError> {
        let mut written = Vec::new();
        let parent_kind = self.parent.group_kind();
        let parent_written = |object: Option<DynamicObject>, written: &mut Vec<Written>| {
            if let Some(object) = object {
                written.push(Written {
                    kind: parent_kind.clone(),
                    object,
                });
            }
        };
        if plan.finalizer == Some(FinalizerAction::Add) {
            let object = self.finalizer(parent, FinalizerAction::Add).await?;
            parent_written(object, &mut written);
        }
        let namespace = parent["metadata"]["namespace"].as_str().unwrap_or("");
        for child in &plan.children {
            if let Some(object) = self.child(namespace, child).await? {
                written.push(Written {
                    kind: GroupKind::from(&child.kind),
                    object,
                });
            }
        }
        if let Some(status) = &plan.status {
            let object = self.status(parent, status).await?;
            parent_written(Some(object), &mut written);
        }
        if plan.finalizer == Some(FinalizerAction::Remove) {
            let object = self.finalizer(parent, FinalizerAction::Remove).await?;
            parent_written(object, &mut written);
        }
        Ok(written)
    }

    async fn child(
        &self,
        namespace: &str,
        child: &ChildPlan,
    ) -> Result<Option<DynamicObject>, ApplyError> {
        let action = match child.action {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Unchanged => "unchanged",
        };
        self.metrics.apply(action);
        if child.action == Action::Unchanged {
            return Ok(None);
        }
        let target = format!("{} {namespace}/{}", child.kind.kind, child.name);
        let Some(kind) = self.children.get(&GroupKind::from(&child.kind)) else {
            // Validation only lets declared kinds through, and every declared kind is resolved.
            unreachable!("child kind {} was not resolved", child.kind);
        };
        let api = self.api(kind, namespace);
        let result = if child.action == Action::Delete {
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
        let verb = if child.action == Action::Delete {
            "delete"
        } else {
            "apply"
        };
        result.map_err(|source| self.failed(verb, target, source))
    }

    /// Writes the parent's status; returns the parent as the API server now has it.
    pub async fn status(
        &self,
        parent: &Value,
        status: &Value,
    ) -> Result<DynamicObject, ApplyError> {
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
    ) -> Result<Option<DynamicObject>, ApplyError> {
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
                note: Some(event.message.clone()),
                action: "Reconcile".to_owned(),
                secondary: None,
            };
            if let Err(error) = self.recorder.publish(&record, &reference).await {
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

    fn api(&self, kind: &ResolvedKind, namespace: &str) -> Api<DynamicObject> {
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
