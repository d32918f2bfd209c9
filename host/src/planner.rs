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
//! - Status: the plugin's status plus `observedGeneration` plus conditions merged by type;
//!   `lastTransitionTime` moves only when a condition's status changes. The host adds its own
//!   `Synced` condition (True after a successful reconcile, False with the error after a failed one).

pub mod owned;
pub mod prune;
pub mod status_fields;

use serde::Serialize;
use serde_json::{Map, Value, json};

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
    /// Nothing to send.
    Unchanged,
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
    /// For delete: the observed UID, sent as precondition so a newer object of the same name
    /// is never deleted by mistake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
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
}

impl ChildPlan {
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
            && self.children.iter().all(|c| c.action == Action::Unchanged)
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
        let action = match found {
            None => Action::Create,
            Some(i) => {
                matched[i] = true;
                let owned_kept = owned::applied_by(&observed[i], &manager)
                    .is_none_or(|fields| owned::covers(fields, &body));
                if owned_kept && is_subset(&body, &observed[i]) {
                    Action::Unchanged
                } else {
                    Action::Update
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
    }
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
            None => {
                v.is_null()
                    || v.as_object().is_some_and(Map::is_empty)
                    || v.as_array().is_some_and(Vec::is_empty)
            }
        }),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(a, b)| is_subset(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
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
mod tests {
    use super::*;

    fn info() -> PluginInfo {
        PluginInfo {
            name: "webapp".into(),
            version: "0.1.0".into(),
            parent: KindRef::new("examples.reconhost.dev/v1alpha1", "WebApp"),
            children: vec![KindRef::new("v1", "ConfigMap")],
            reads: vec![],
            finalizer: false,
        }
    }

    fn parent() -> Value {
        json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "web", "namespace": "a", "uid": "u-1", "generation": 3}})
    }

    fn cm(name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
    }

    fn observed(name: &str, data: Value) -> Value {
        let mut o = cm(name, data);
        o["metadata"] = json!({"name": name, "namespace": "a", "uid": format!("uid-{name}"), "resourceVersion": "7",
                               "ownerReferences": [owner_reference(&parent())]});
        o
    }

    /// What `validate` makes of these children of a parent in namespace `a`.
    fn desired(children: Vec<Value>) -> Desired {
        let children = children
            .into_iter()
            .map(|body| crate::model::DesiredChild {
                kind: kind_of(&body),
                namespace: match namespace_of(&body) {
                    "" => "a".to_owned(),
                    ns => ns.to_owned(),
                },
                name: body["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                body,
            })
            .collect();
        Desired {
            children,
            ..Desired::default()
        }
    }

    #[test]
    fn missing_child_should_be_created_with_namespace_and_owner() {
        let plan = plan(
            &info(),
            &StatusFields::all(),
            &parent(),
            &desired(vec![cm("x", json!({"k": "v"}))]),
            &[],
            "T0",
        );
        let child = &plan.children[0];
        assert_eq!(child.action, Action::Create);
        assert_eq!(child.object["metadata"]["namespace"], "a");
        let owner = &child.object["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                owner["uid"].as_str(),
                owner["controller"].as_bool(),
                owner["kind"].as_str()
            ),
            (Some("u-1"), Some(true), Some("WebApp"))
        );
    }

    #[test]
    fn child_matching_the_observed_should_be_unchanged_despite_server_fields() {
        let plan = plan(
            &info(),
            &StatusFields::all(),
            &parent(),
            &desired(vec![cm("x", json!({"k": "v"}))]),
            &[observed("x", json!({"k": "v"}))],
            "T0",
        );
        assert_eq!(plan.children[0].action, Action::Unchanged);
    }

    #[test]
    fn changed_child_should_be_updated_and_undesired_child_deleted_with_its_uid() {
        let obs = [
            observed("x", json!({"k": "old"})),
            observed("gone", json!({})),
        ];
        let plan = plan(
            &info(),
            &StatusFields::all(),
            &parent(),
            &desired(vec![cm("x", json!({"k": "new"}))]),
            &obs,
            "T0",
        );
        assert_eq!(plan.children[0].action, Action::Update);
        assert_eq!(plan.children[1].action, Action::Delete);
        assert_eq!(plan.children[1].name, "gone");
        assert_eq!(plan.children[1].uid.as_deref(), Some("uid-gone"));
    }

    #[test]
    fn child_that_lost_a_field_the_plugin_applied_should_be_updated() {
        let mut obs = observed("x", json!({"k": "v", "gone": "w"}));
        obs["metadata"]["managedFields"] = json!([{
            "manager": "reconhost/webapp", "operation": "Apply", "apiVersion": "v1",
            "fieldsV1": {"f:data": {".": {}, "f:k": {}, "f:gone": {}},
                         "f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"u-1\"}": {}}}}
        }]);
        let now_desired = desired(vec![cm("x", json!({"k": "v"}))]);
        let plan_after_removal = plan(
            &info(),
            &StatusFields::all(),
            &parent(),
            &now_desired,
            &[obs.clone()],
            "T0",
        );
        assert_eq!(plan_after_removal.children[0].action, Action::Update);
        let both = desired(vec![cm("x", json!({"k": "v", "gone": "w"}))]);
        let steady = plan(
            &info(),
            &StatusFields::all(),
            &parent(),
            &both,
            &[obs],
            "T0",
        );
        assert_eq!(steady.children[0].action, Action::Unchanged);
    }

    #[test]
    fn steady_state_should_plan_nothing() {
        let mut d = desired(vec![cm("x", json!({"k": "v"}))]);
        d.conditions.push(Condition {
            type_: "Ready".into(),
            status: ConditionStatus::True,
            reason: "Ok".into(),
            message: "m".into(),
        });
        d.status = Some(json!({"readyReplicas": 1}));
        let first = plan(&info(), &StatusFields::all(), &parent(), &d, &[], "T0");
        let mut p = parent();
        p["status"] = first.status.clone().unwrap();
        let second = plan(
            &info(),
            &StatusFields::all(),
            &p,
            &d,
            &[observed("x", json!({"k": "v"}))],
            "T1",
        );
        assert!(second.is_noop(), "{second:?}");
    }

    #[test]
    fn transition_time_should_move_only_when_the_condition_status_changes() {
        let cond = |s| Condition {
            type_: "Ready".into(),
            status: s,
            reason: "R".into(),
            message: "m".into(),
        };
        let mut d = desired(vec![]);
        d.conditions.push(cond(ConditionStatus::False));
        let mut p = parent();
        p["status"] = plan(&info(), &StatusFields::all(), &p, &d, &[], "T0")
            .status
            .unwrap();
        d.conditions[0].message = "other message".into();
        let same = plan(&info(), &StatusFields::all(), &p, &d, &[], "T1")
            .status
            .unwrap();
        assert_eq!(same["conditions"][0]["lastTransitionTime"], "T0");
        assert_eq!(same["conditions"][0]["message"], "other message");
        d.conditions[0] = cond(ConditionStatus::True);
        let flipped = plan(&info(), &StatusFields::all(), &p, &d, &[], "T2")
            .status
            .unwrap();
        assert_eq!(flipped["conditions"][0]["lastTransitionTime"], "T2");
        assert_eq!(flipped["observedGeneration"], 3);
    }

    #[test]
    fn a_cluster_scoped_parents_children_should_be_told_apart_by_namespace() {
        let parent = json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
                            "metadata": {"name": "web", "uid": "u-1", "generation": 1}});
        let quota = |ns: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "q", "namespace": ns}, "data": {"k": "v"}})
        };
        let seen = |ns: &str| {
            let mut o = quota(ns);
            o["metadata"]["uid"] = json!(format!("u-{ns}"));
            o["metadata"]["ownerReferences"] = json!([owner_reference(&parent)]);
            o
        };
        let p = plan(
            &info(),
            &StatusFields::all(),
            &parent,
            &desired(vec![quota("a"), quota("b")]),
            &[seen("b"), seen("c")],
            "T0",
        );
        let actions: Vec<_> = p
            .children
            .iter()
            .map(|c| (c.action, c.namespace.as_str()))
            .collect();
        assert_eq!(
            actions,
            vec![
                (Action::Create, "a"),
                (Action::Unchanged, "b"),
                (Action::Delete, "c")
            ]
        );
        assert_eq!(p.children[2].uid.as_deref(), Some("u-c"));
        assert_eq!(p.children[0].object["metadata"]["namespace"], "a");
    }

    #[test]
    fn a_failure_over_a_planned_status_should_keep_the_earlier_transition() {
        let mut p = parent();
        p["status"] =
            failure_status(&p, "ApplyError", "first", &StatusFields::all(), "T0").unwrap();
        let mut d = desired(vec![]);
        d.status = Some(json!({"phase": "New"}));
        let planned = plan(&info(), &StatusFields::all(), &p, &d, &[], "T1")
            .status
            .unwrap();
        let failed = with_failure(
            &p,
            &planned,
            "ChildFailed",
            "ns gone",
            &StatusFields::all(),
            "T1",
        );
        assert_eq!(
            failed["phase"], "New",
            "the plugin's status is still written"
        );
        let synced = &failed["conditions"][0];
        assert_eq!(
            (&synced["status"], &synced["reason"]),
            (&json!("False"), &json!("ChildFailed"))
        );
        assert_eq!(synced["lastTransitionTime"], "T0", "still False since T0");
    }

    #[test]
    fn a_kind_without_the_hosts_status_fields_should_still_get_the_plugins_status() {
        let none = StatusFields {
            observed_generation: false,
            conditions: None,
            schema: None,
            decorator: false,
        };
        let mut d = desired(vec![]);
        d.status = Some(json!({"phase": "Ready"}));
        let status = plan(&info(), &none, &parent(), &d, &[], "T0").status;
        assert_eq!(status, Some(json!({"phase": "Ready"})));
        let mut p = parent();
        p["status"] = json!({"phase": "Ready"});
        assert_eq!(
            plan(&info(), &none, &p, &d, &[], "T1").status,
            None,
            "steady"
        );
        assert_eq!(failure_status(&p, "ApplyError", "boom", &none, "T1"), None);
    }

    #[test]
    fn the_plugins_undeclared_status_fields_should_be_dropped_and_named_without_churn() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object"},
            "status": {"type": "object", "properties": {
                "phase": {"type": "string"},
                "active": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                "observedGeneration": {"type": "integer"},
            }},
        }});
        let fields = StatusFields::from_schema(&schema);
        let mut d = desired(vec![]);
        d.status = Some(json!({"phase": "Green",
                               "active": {"replicas": 2, "terminatingReplicas": 1}}));
        let first = plan(&info(), &fields, &parent(), &d, &[], "T0");
        assert_eq!(
            first.status,
            Some(json!({"phase": "Green", "active": {"replicas": 2}, "observedGeneration": 3}))
        );
        assert_eq!(first.dropped, ["status.active.terminatingReplicas"]);
        // The API server holds the pruned status: the same answer again writes nothing.
        let mut p = parent();
        p["status"] = first.status.unwrap();
        let again = plan(&info(), &fields, &p, &d, &[], "T1");
        assert_eq!(again.status, None, "steady");
        assert_eq!(again.dropped, ["status.active.terminatingReplicas"]);
    }

    fn decorator_info() -> PluginInfo {
        PluginInfo {
            name: "services".into(),
            finalizer: true,
            ..info()
        }
    }

    #[test]
    fn a_decorator_on_a_built_in_kind_should_write_no_status_and_label_its_children() {
        let fields = StatusFields::all().for_decorator(false);
        let mut target = parent();
        target["status"] = json!({"readyReplicas": 1});
        let mut d = desired(vec![cm("web-0", json!({}))]);
        d.status = Some(json!({"decorated": true}));
        d.conditions = vec![synced(true, "Fine", "")];
        let plan = plan(&decorator_info(), &fields, &target, &d, &[], "T0");
        assert_eq!(
            plan.status, None,
            "nothing of the host's, nothing undeclared"
        );
        assert_eq!(
            plan.finalizer,
            Some(FinalizerAction::Add),
            "it attaches something"
        );
        assert_eq!(
            plan.children[0].object["metadata"]["labels"],
            json!({DECORATOR_LABEL: "services"})
        );
        assert_eq!(
            failure_status(&target, "ReconcileError", "boom", &fields, "T0"),
            None,
            "failures show as events only"
        );
    }

    #[test]
    fn a_decorator_should_hold_its_finalizer_only_while_it_attaches_something() {
        let fields = StatusFields::all().for_decorator(false);
        let mut target = parent();
        target["metadata"]["finalizers"] = json!(["reconhost.dev/services"]);
        let nothing = desired(vec![]);
        let attached = observed("web-0", json!({}));
        assert_eq!(
            plan(&decorator_info(), &fields, &parent(), &nothing, &[], "T").finalizer,
            None,
            "an object it does not decorate gets no finalizer"
        );
        let still = plan(
            &decorator_info(),
            &fields,
            &target,
            &nothing,
            &[attached],
            "T",
        );
        assert_eq!(still.finalizer, None, "kept until what it attached is gone");
        assert_eq!(still.children[0].action, Action::Delete);
        assert_eq!(
            plan(&decorator_info(), &fields, &target, &nothing, &[], "T").finalizer,
            Some(FinalizerAction::Remove)
        );
    }

    #[test]
    fn a_decorators_status_should_be_only_what_the_plugin_asks_for_and_the_crd_declares() {
        let schema = json!({"type": "object", "properties": {"status": {"type": "object",
            "properties": {"decorated": {"type": "boolean"}, "replicas": {"type": "integer"},
                           "conditions": {"type": "array", "items": {"type": "object",
                               "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}}}});
        let fields = StatusFields::from_schema(&schema).for_decorator(true);
        let mut target = parent();
        target["status"] = json!({"replicas": 3});
        let mut d = desired(vec![]);
        d.status = Some(json!({"decorated": true, "undeclared": 1}));
        d.conditions = vec![synced(true, "Fine", "")];
        let first = plan(&decorator_info(), &fields, &target, &d, &[], "T0");
        assert_eq!(
            first.status,
            Some(json!({"decorated": true, "conditions": [{"type": "Synced", "status": "True"}]})),
            "its own fields beside the owner's, no observedGeneration"
        );
        assert_eq!(first.dropped, ["status.undeclared"]);
        target["status"] = json!({"replicas": 3, "decorated": true,
                                  "conditions": [{"type": "Synced", "status": "True"}]});
        assert_eq!(
            plan(&decorator_info(), &fields, &target, &d, &[], "T1").status,
            None,
            "held already"
        );
    }

    #[test]
    fn an_owners_children_should_not_carry_the_decorator_label() {
        let forged = cm("web", json!({}));
        let mut forged = forged;
        forged["metadata"]["labels"] = json!({DECORATOR_LABEL: "services", "app": "web"});
        let plan = plan(
            &info(),
            &StatusFields::all(),
            &parent(),
            &desired(vec![forged]),
            &[],
            "T",
        );
        assert_eq!(
            plan.children[0].object["metadata"]["labels"],
            json!({"app": "web"})
        );
    }

    #[test]
    fn conditions_should_carry_only_the_fields_the_kind_declares() {
        let some = StatusFields {
            observed_generation: false,
            conditions: Some(vec!["type", "status", "message"]),
            schema: None,
            decorator: false,
        };
        let status = plan(&info(), &some, &parent(), &desired(vec![]), &[], "T0")
            .status
            .unwrap();
        assert_eq!(
            status,
            json!({"conditions": [{"type": "Synced", "status": "True", "message": ""}]})
        );
        let failed = failure_status(&parent(), "ApplyError", "boom", &some, "T0").unwrap();
        assert_eq!(
            failed,
            json!({"conditions": [{"type": "Synced", "status": "False", "message": "boom"}]})
        );
    }

    #[test]
    fn finalizer_should_be_added_and_removed_only_after_finalized() {
        let mut i = info();
        i.finalizer = true;
        assert_eq!(
            plan(
                &i,
                &StatusFields::all(),
                &parent(),
                &desired(vec![]),
                &[],
                "T"
            )
            .finalizer,
            Some(FinalizerAction::Add)
        );
        let mut p = parent();
        p["metadata"]["finalizers"] = json!(["reconhost.dev/webapp"]);
        p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            plan(&i, &StatusFields::all(), &p, &desired(vec![]), &[], "T").finalizer,
            None
        );
        let mut done = desired(vec![]);
        done.finalized = true;
        assert_eq!(
            plan(&i, &StatusFields::all(), &p, &done, &[], "T").finalizer,
            Some(FinalizerAction::Remove)
        );
    }

    #[test]
    fn finalizer_left_by_an_earlier_version_should_be_removed() {
        let i = info();
        assert!(!i.finalizer, "this version asks for none");
        let mut p = parent();
        p["metadata"]["finalizers"] = json!(["other.example/keep", "reconhost.dev/webapp"]);
        assert_eq!(
            plan(&i, &StatusFields::all(), &p, &desired(vec![]), &[], "T").finalizer,
            Some(FinalizerAction::Remove)
        );
        p["metadata"]["finalizers"] = json!(["other.example/keep"]);
        assert_eq!(
            plan(&i, &StatusFields::all(), &p, &desired(vec![]), &[], "T").finalizer,
            None
        );
    }

    #[test]
    fn subset_should_compare_arrays_exactly_and_numbers_by_value() {
        assert!(is_subset(
            &json!({"a": [1, {"b": 2}]}),
            &json!({"a": [1.0, {"b": 2, "c": 3}], "z": 1})
        ));
        assert!(!is_subset(&json!({"a": [1]}), &json!({"a": [1, 2]})));
        assert!(!is_subset(&json!({"a": "x"}), &json!({})));
        assert!(is_subset(&json!({"a": {}}), &json!({})));
    }
}
