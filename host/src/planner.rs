//! The planner: desired state versus observed state gives the actions to take. A pure function
//! (no I/O, no clock: the time is an argument), so the live host and `reconhost render` plan
//! identically and every rule is unit-tested without a cluster.
//!
//! Rules:
//! - Each desired child of a namespaced parent gets the parent's namespace; a cluster-scoped
//!   parent's children keep the namespace they name (none, for cluster-scoped kinds). Every
//!   child gets the parent as controller ownerReference (the host's, never the plugin's).
//! - A child is matched to the observed one of the same kind, namespace and name.
//! - A desired child with no observed counterpart is created; one whose every desired field
//!   already holds in the observed object, and that still sets every field the plugin's field
//!   manager owns ([`owned`]), is unchanged (nothing is sent, so a steady state makes no
//!   writes); otherwise it is updated (server-side apply, which also removes the fields the
//!   plugin no longer sets).
//! - An observed child that is not desired is deleted, with its UID as precondition.
//! - Status: the plugin's status, pruned to what the kind's schema declares ([`prune`]), plus
//!   `observedGeneration` plus conditions merged by type; `lastTransitionTime` moves only when a
//!   condition's status changes. The host adds its own `Synced` condition (True after a
//!   successful reconcile, False with the error after a failed one).
//! - A decorator ([`StatusFields::decorator`]) gets none of the host's fields on the object it
//!   decorates, only what the plugin asks for where the kind declares it; its children carry
//!   [`DECORATOR_LABEL`] (which no owner's child may), and it holds a finalizer only while it
//!   attaches something.
//! - Order (contract 0.2, [`mod@sequence`]): update strategies per child kind and waves turn some
//!   changes into deletions, waits or nothing; while a child waits, `Synced` is False with the
//!   reason `Progressing` and why.
//! - Parent metadata (0.2): the labels and annotations the plugin sets on its parent are applied
//!   under its field manager when the parent does not hold them, or when it holds keys the
//!   plugin set before and no longer does (so that the apply removes them).

pub mod changes;
pub mod owned;
pub mod prune;
pub mod sequence;
pub mod status_fields;

use serde::Serialize;
use serde_json::{Map, Value, json};

pub use self::changes::Changes;
pub use self::status_fields::StatusFields;
use crate::model::{Condition, ConditionStatus, Desired, KindRef, PluginInfo, printable};
use crate::model::{DECORATOR_LABEL, MAX_CONDITION_MESSAGE, SYNCED};

/// What to do with one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Apply a child that does not exist yet.
    Create,
    /// Apply a child whose observed state differs from the desired.
    Update,
    /// Delete an observed child that is no longer desired.
    Delete,
    /// Delete a differing child so that a later reconcile creates it anew (update strategy
    /// `Recreate`).
    Recreate,
    /// Nothing to send.
    Unchanged,
    /// A differing child left as it is (update strategy `OnDelete`).
    Kept,
    /// A change that waits for its turn: a wave before it, or a rolling update.
    Waiting,
}

impl Action {
    /// Whether the action writes to the API server.
    pub fn sends(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Update | Self::Delete | Self::Recreate
        )
    }
}

/// The plan for one child.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChildPlan {
    /// The action.
    pub action: Action,
    /// The child's kind.
    pub kind: KindRef,
    /// Its namespace (empty for a cluster-scoped kind).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// For create/update/unchanged: the apply body (desired fields, namespace, ownerReference).
    /// For delete: the observed object.
    pub object: Value,
    /// For delete and recreate: the observed UID, sent as precondition so a newer object of
    /// the same name is never deleted by mistake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The child's wave (0.2).
    #[serde(skip_serializing_if = "is_zero")]
    pub wave: u32,
    /// For kept and waiting: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// For a desired child matched to an observed one: the fields its body would change,
    /// empty when it holds already. Set by [`plan`] and kept when the action changes later
    /// (held back by a strategy or a wave, or found unchanged by the host's memory of what it
    /// applied), so a trace can say what an update changes or a held child would. Not part of
    /// the plan's output (`render`, the record on the parent).
    #[serde(skip)]
    pub changes: Changes,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What to do with the finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FinalizerAction {
    /// Add the host's finalizer to the parent.
    Add,
    /// Remove it: the plugin reported `finalized`, or no longer asks for a finalizer.
    Remove,
}

/// The plan for one parent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// One entry per desired or observed child, desired ones first in the plugin's order.
    pub children: Vec<ChildPlan>,
    /// The new parent status, if it differs from the observed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// A change to the finalizer, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<FinalizerAction>,
    /// Fields of the plugin's status the parent kind's schema does not declare, left out of
    /// `status` ([`prune::prune`]'s paths).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// The labels and annotations to apply to the parent (0.2), as an apply body's `metadata`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl ChildPlan {
    /// Holds the child's change back as `action`, saying why.
    pub fn hold(&mut self, action: Action, why: String) {
        self.action = action;
        self.why = Some(why);
    }

    /// The child as messages name it: `Kind namespace/name`, or `Kind name` without a
    /// namespace.
    pub fn target(&self) -> String {
        match self.namespace.as_str() {
            "" => format!("{} {}", self.kind.kind, self.name),
            namespace => format!("{} {namespace}/{}", self.kind.kind, self.name),
        }
    }
}

impl Plan {
    /// Whether the plan sends anything at all.
    pub fn is_noop(&self) -> bool {
        self.status.is_none()
            && self.finalizer.is_none()
            && self.metadata.is_none()
            && self.children.iter().all(|c| !c.action.sends())
    }
}

/// Plans one parent. `fields` are the host's status fields the parent kind admits; `now` is an
/// RFC 3339 timestamp used for new condition transitions.
pub fn plan(
    info: &PluginInfo,
    fields: &StatusFields,
    parent: &Value,
    desired: &Desired,
    observed: &[Value],
    now: &str,
) -> Plan {
    let namespace = parent["metadata"]["namespace"].as_str().unwrap_or("");
    let owner = owner_reference(parent);
    let manager = info.field_manager();
    let mut children = Vec::with_capacity(desired.children.len());
    let mut matched = vec![false; observed.len()];
    for child in &desired.children {
        let mut body = child.body.clone();
        let meta = body["metadata"]
            .as_object_mut()
            .expect("validated: metadata is an object");
        if !namespace.is_empty() {
            meta.insert("namespace".into(), json!(namespace));
        }
        meta.insert("ownerReferences".into(), json!([owner]));
        // The label is the host's: set on a decorator's children, never on another's.
        match (fields.decorator, meta.get_mut("labels")) {
            (true, Some(Value::Object(labels))) => {
                labels.insert(DECORATOR_LABEL.into(), json!(info.name));
            }
            (true, _) => {
                meta.insert("labels".into(), json!({ DECORATOR_LABEL: info.name }));
            }
            (false, Some(Value::Object(labels))) => {
                labels.remove(DECORATOR_LABEL);
            }
            (false, _) => {}
        }
        let (kind, name) = (child.kind.clone(), child.name.clone());
        let child_namespace = child.namespace.clone();
        let found = observed
            .iter()
            .position(|o| same_object(o, &kind, &child_namespace, &name));
        let (action, changes) = match found {
            None => (Action::Create, Changes::default()),
            Some(i) => {
                matched[i] = true;
                let owned = owned::applied_by(&observed[i], &manager);
                let changes = changes::changes(&body, &observed[i], owned);
                if changes.is_empty() {
                    (Action::Unchanged, changes)
                } else {
                    (Action::Update, changes)
                }
            }
        };
        children.push(ChildPlan {
            action,
            kind,
            namespace: child_namespace,
            name,
            object: body,
            uid: None,
            wave: child.wave,
            why: None,
            changes,
        });
    }
    for (o, _) in observed.iter().zip(&matched).filter(|(_, m)| !**m) {
        children.push(ChildPlan {
            action: Action::Delete,
            kind: kind_of(o),
            namespace: namespace_of(o).to_owned(),
            name: o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            object: o.clone(),
            uid: o["metadata"]["uid"].as_str().map(str::to_owned),
            wave: 0,
            why: None,
            changes: Changes::default(),
        });
    }

    let current_status = parent.get("status").cloned().unwrap_or(Value::Null);
    let (status, dropped) = if fields.decorator {
        decorator_status(parent, desired, &current_status, fields, now)
    } else {
        let (new_status, dropped) = status(parent, desired, &current_status, fields, now);
        (
            (new_status != current_status).then_some(new_status),
            dropped,
        )
    };

    let has_finalizer = info.holds_finalizer(parent);
    let finalizer = if !info.finalizer {
        // Left by an earlier version of the plugin that asked for one; nothing waits on it.
        has_finalizer.then_some(FinalizerAction::Remove)
    } else if crate::model::is_deleting(parent) {
        (has_finalizer && desired.finalized).then_some(FinalizerAction::Remove)
    } else if fields.decorator && desired.children.is_empty() {
        // A decorator holds a finalizer only where it attaches something; it lets go once
        // what it attached is gone.
        (has_finalizer && observed.is_empty()).then_some(FinalizerAction::Remove)
    } else {
        (!has_finalizer).then_some(FinalizerAction::Add)
    };
    Plan {
        children,
        status,
        finalizer,
        dropped,
        // A parent being deleted is only released: its finalizer's removal is a patch at its
        // resourceVersion, which a metadata write just before would make stale.
        metadata: (!crate::model::is_deleting(parent))
            .then(|| parent_metadata(parent, desired, &manager))
            .flatten(),
    }
}

/// The `metadata` to apply to the parent for the labels and annotations the plugin sets: when
/// the parent lacks one, or holds one the plugin set before and no longer does.
fn parent_metadata(parent: &Value, desired: &Desired, manager: &str) -> Option<Value> {
    let mut meta = Map::new();
    if let Some(wanted) = &desired.parent_metadata {
        if !wanted.labels.is_empty() {
            meta.insert("labels".into(), json!(wanted.labels));
        }
        if !wanted.annotations.is_empty() {
            meta.insert("annotations".into(), json!(wanted.annotations));
        }
    }
    let body = json!({ "metadata": meta });
    let owned = owned::applied_by(parent, manager).filter(|fields| {
        let m = &fields["f:metadata"];
        m.get("f:labels").is_some() || m.get("f:annotations").is_some()
    });
    let holds = is_subset(&body, parent) && owned.is_none_or(|fields| owned::covers(fields, &body));
    (!holds).then_some(Value::Object(meta))
}

/// Orders `plan` by update strategies and waves ([`sequence::order`]); while a change waits,
/// the status planned shows `Synced=False` with the reason `Progressing` and why.
pub fn sequence(
    plan: &mut Plan,
    info: &PluginInfo,
    fields: &StatusFields,
    parent: &Value,
    desired: &Desired,
    observed: &[Value],
    now: &str,
) {
    let Some(why) = sequence::order(plan, info, desired, observed) else {
        return;
    };
    let base = plan
        .status
        .clone()
        .unwrap_or_else(|| parent["status"].clone());
    let status = with_failure(parent, &base, "Progressing", &why, fields, now);
    plan.status = (status != parent["status"]).then_some(status);
}

/// The controller ownerReference pointing at `parent`.
pub fn owner_reference(parent: &Value) -> Value {
    json!({
        "apiVersion": parent["apiVersion"],
        "kind": parent["kind"],
        "name": parent["metadata"]["name"],
        "uid": parent["metadata"]["uid"].as_str().unwrap_or(""),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn kind_of(object: &Value) -> KindRef {
    KindRef::new(
        object["apiVersion"].as_str().unwrap_or(""),
        object["kind"].as_str().unwrap_or(""),
    )
}

/// An object's namespace; empty when it has none.
pub fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or("")
}

/// Whether `observed` is the object of `kind` named `name` in `namespace`.
pub fn same_object(observed: &Value, kind: &KindRef, namespace: &str, name: &str) -> bool {
    kind.matches(
        observed["apiVersion"].as_str().unwrap_or(""),
        observed["kind"].as_str().unwrap_or(""),
    ) && observed["metadata"]["name"] == name
        && namespace_of(observed) == namespace
}

/// Whether every field of `desired` holds in `observed`: objects recursively (fields the
/// API server added or defaulted do not count as differences), arrays element by element with
/// equal length, numbers by value.
pub fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => d.iter().all(|(k, v)| match o.get(k) {
            Some(ov) => is_subset(v, ov),
            None => unset(v),
        }),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(a, b)| is_subset(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

/// Whether a desired value missing from the observed object is no difference: null, or empty
/// (the API server drops empty maps and lists).
fn unset(v: &Value) -> bool {
    v.is_null()
        || v.as_object().is_some_and(Map::is_empty)
        || v.as_array().is_some_and(Vec::is_empty)
}

/// The host's `Synced` condition.
pub fn synced(ok: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: SYNCED.to_owned(),
        status: if ok {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason: reason.to_owned(),
        // The host's own messages (API errors, several failed children) are cut as the
        // plugin's are.
        message: printable(message, MAX_CONDITION_MESSAGE),
    }
}

/// The status to write after a failed reconcile: the current status with `Synced` set to False
/// and everything else kept, or `None` if that is already what the parent shows or the kind
/// has no conditions to show it in.
pub fn failure_status(
    parent: &Value,
    reason: &str,
    message: &str,
    fields: &StatusFields,
    now: &str,
) -> Option<Value> {
    if fields.decorator {
        // A decorator's failures show as events only: the object is not its to mark.
        return None;
    }
    fields.conditions.as_ref()?;
    let current = parent.get("status").cloned().unwrap_or(Value::Null);
    let status = with_failure(parent, &current, reason, message, fields, now);
    (status != current).then_some(status)
}

/// `status` (the one about to be written, or the current one) with `Synced` set to False, where
/// the kind has conditions; the transition time counts from the parent's current status.
pub fn with_failure(
    parent: &Value,
    status: &Value,
    reason: &str,
    message: &str,
    fields: &StatusFields,
    now: &str,
) -> Value {
    let Some(admitted) = fields.conditions.as_deref().filter(|_| !fields.decorator) else {
        return status.clone();
    };
    let current = parent.get("status").cloned().unwrap_or(Value::Null);
    let mut with = status.as_object().cloned().unwrap_or_default();
    let failed = [synced(false, reason, message)];
    let conditions = merge_conditions(parent, &current, status, &failed, admitted, now);
    with.insert("conditions".into(), Value::Array(conditions));
    Value::Object(with)
}

/// The full status the host writes: the plugin's fields as far as the kind declares them,
/// observedGeneration, merged conditions (the last two as far as the kind admits them); and
/// where the plugin's fields the kind does not declare were.
fn status(
    parent: &Value,
    desired: &Desired,
    current: &Value,
    fields: &StatusFields,
    now: &str,
) -> (Value, Vec<String>) {
    let (mut status, dropped) = match (&desired.status, current) {
        (Some(Value::Object(s)), _) => {
            let mut status = s.clone();
            let dropped = fields.prune(&mut status);
            (status, dropped)
        }
        // No status from the plugin: keep what is there, so conditions can still be updated.
        (None, Value::Object(c)) => (c.clone(), Vec::new()),
        _ => (Map::new(), Vec::new()),
    };
    if let Some(generation) = parent["metadata"]["generation"].as_i64()
        && fields.observed_generation
    {
        status.insert("observedGeneration".into(), json!(generation));
    }
    let Some(condition_fields) = fields.conditions.as_deref() else {
        return (Value::Object(status), dropped);
    };
    let mut conditions = desired.conditions.clone();
    if !conditions.iter().any(|c| c.type_ == SYNCED) {
        conditions.push(synced(true, "ReconcileSuccess", ""));
    }
    let merged = merge_conditions(parent, current, current, &conditions, condition_fields, now);
    status.insert("conditions".into(), Value::Array(merged));
    (Value::Object(status), dropped)
}

/// What a decorator writes in the status of an object it does not own: only the plugin's fields
/// (as far as the kind declares them) and the plugin's conditions (where the kind has them),
/// applied under its own field manager beside the owner's; `None` when the plugin asks for
/// nothing or the object already holds it. Never the host's own fields.
fn decorator_status(
    parent: &Value,
    desired: &Desired,
    current: &Value,
    fields: &StatusFields,
    now: &str,
) -> (Option<Value>, Vec<String>) {
    let (mut mine, dropped) = match &desired.status {
        Some(Value::Object(s)) => {
            let mut status = s.clone();
            let dropped = fields.prune(&mut status);
            (status, dropped)
        }
        _ => (Map::new(), Vec::new()),
    };
    if let Some(admitted) = fields.conditions.as_deref()
        && !desired.conditions.is_empty()
    {
        let merged = merge_conditions(
            parent,
            current,
            &Value::Null,
            &desired.conditions,
            admitted,
            now,
        );
        mine.insert("conditions".into(), Value::Array(merged));
    }
    let mine = Value::Object(mine);
    let wanted = mine.as_object().is_some_and(|m| !m.is_empty()) && !is_subset(&mine, current);
    (wanted.then_some(mine), dropped)
}

/// The conditions of `base` with `conditions` merged in by type, each with the fields the kind
/// admits. `lastTransitionTime` is kept from `current` (the parent's status) unless the status
/// of that type changed.
fn merge_conditions(
    parent: &Value,
    current: &Value,
    base: &Value,
    conditions: &[Condition],
    admitted: &[&str],
    now: &str,
) -> Vec<Value> {
    let old: Vec<Value> = current["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut merged: Vec<Value> = base["conditions"].as_array().cloned().unwrap_or_default();
    for c in conditions {
        let previous = old.iter().find(|o| o["type"] == c.type_.as_str());
        let transition = match previous {
            Some(p) if p["status"] == c.status.as_str() => p["lastTransitionTime"].clone(),
            _ => json!(now),
        };
        let mut entry = json!({
            "type": c.type_, "status": c.status.as_str(), "reason": c.reason, "message": c.message,
            "lastTransitionTime": transition,
        });
        if let Some(generation) = parent["metadata"]["generation"].as_i64() {
            entry["observedGeneration"] = json!(generation);
        }
        if let Value::Object(fields) = &mut entry {
            fields.retain(|k, _| admitted.contains(&k.as_str()));
        }
        match merged.iter_mut().find(|m| m["type"] == c.type_.as_str()) {
            Some(slot) => *slot = entry,
            None => merged.push(entry),
        }
    }
    merged
}

#[cfg(test)]
mod tests;
