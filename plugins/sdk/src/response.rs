//! The output of one reconcile, and plugin errors.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::wit::reconhost::plugin::types as wit;
use crate::{Check, Object};

/// The desired state of one parent. Build it with the chained methods.
///
/// ```
/// use reconhost_sdk::{Check, ConditionStatus, Response, json};
///
/// let response = Response::new()
///     // Wave 0: the database, ready once its pod says so.
///     .child_in_wave(
///         0,
///         json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db"}}),
///         [Check::condition("Ready", ConditionStatus::True)],
///     )
///     // Wave 1: created or changed only once the database is ready.
///     .child_in_wave(
///         1,
///         json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"}}),
///         [],
///     )
///     .parent_label("example.com/tier", "web")
///     .ready(false, "Starting", "waiting for the database")
///     .requeue_after_ms(30_000);
/// assert_eq!(response.children[1].wave, 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    /// The desired children. An observed child missing from this list is deleted.
    pub children: Vec<Child>,
    /// The desired `status` of the parent (a JSON object), `None` to leave it unchanged. The
    /// host sets `status.observedGeneration` and `status.conditions`.
    pub status: Option<Object>,
    /// Conditions to merge into the parent's `status.conditions`, by type.
    pub conditions: Vec<Condition>,
    /// Events to record on the parent.
    pub events: Vec<Event>,
    /// Reconcile this parent again after this many milliseconds even if nothing changes.
    pub requeue_after_ms: Option<u64>,
    /// With [`Request::finalizing`](crate::Request::finalizing): cleanup is done and the host
    /// may remove its finalizer.
    pub finalized: bool,
    /// Labels and annotations to set on the parent, `None` to set none (any the plugin set
    /// before are removed then).
    pub parent_metadata: Option<ParentMetadata>,
}

/// One desired child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// The child: a partial object as for server-side apply (only the fields the plugin cares
    /// about), with `apiVersion`, `kind` (a declared child kind) and `metadata.name`. The host
    /// sets `metadata.namespace` to the parent's namespace and the parent as controller
    /// ownerReference; a child that names another namespace or carries
    /// `metadata.ownerReferences` is rejected.
    pub object: Object,
    /// Its wave: the host creates or changes children of wave n+1 only once every child of
    /// waves up to n exists as desired and is ready. 0 for children with no order.
    pub wave: u32,
    /// What makes this child ready, for the waves after its own (besides the checks every
    /// child gets, see [`Check`]).
    pub ready_when: Vec<Check>,
}

/// Labels and annotations the plugin sets on the parent (for a decorator, the object it
/// decorates), applied under the plugin's own field manager: only these keys are the plugin's;
/// a key it stops setting is removed, and nothing else of the parent changes. Keys under
/// `reconhost.dev/` are the host's and refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentMetadata {
    /// Labels, by key.
    pub labels: BTreeMap<String, String>,
    /// Annotations, by key.
    pub annotations: BTreeMap<String, String>,
}

/// Status of a condition, as in Kubernetes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

/// A condition on the parent's status (`status.conditions`), merged by type. The host sets
/// `lastTransitionTime` (moved only when the status changes) and `observedGeneration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// CamelCase type, e.g. `Ready`.
    pub type_: String,
    /// Its status.
    pub status: ConditionStatus,
    /// CamelCase reason, e.g. `DeploymentAvailable`.
    pub reason: String,
    /// Message for people.
    pub message: String,
}

/// Kubernetes event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something needs attention.
    Warning,
}

/// An Event about the parent. The host records it through events.k8s.io and aggregates
/// repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason, e.g. `Created`.
    pub reason: String,
    /// Message for people.
    pub message: String,
}

impl Response {
    /// An empty response: no children (so any observed child is deleted), status untouched.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a desired child in wave 0 with no readiness checks of its own: any serializable
    /// type (a struct of the fields the plugin owns, a `json!` value, a k8s-openapi object),
    /// written straight to JSON text.
    ///
    /// # Panics
    /// If `child` does not serialize to JSON, which cannot happen for plain structs,
    /// k8s-openapi types or `serde_json::Value`.
    #[must_use]
    pub fn child(self, child: impl Serialize) -> Self {
        self.child_in_wave(0, child, [])
    }

    /// Adds a desired child in a wave, with what makes it ready. The host creates or changes
    /// the children of wave n+1 only once every child of waves up to n exists as desired and
    /// passes its `ready_when` checks (and the checks every child gets, see [`Check`]).
    ///
    /// # Panics
    /// If `child` does not serialize to JSON, which cannot happen for plain structs,
    /// k8s-openapi types or `serde_json::Value`.
    #[must_use]
    pub fn child_in_wave(
        mut self,
        wave: u32,
        child: impl Serialize,
        ready_when: impl IntoIterator<Item = Check>,
    ) -> Self {
        self.children.push(Child {
            object: Object::to_json(&child).expect("a child serializes to JSON"),
            wave,
            ready_when: ready_when.into_iter().collect(),
        });
        self
    }

    /// Sets the desired status of the parent (the host adds observedGeneration and conditions).
    ///
    /// # Panics
    /// If `status` does not serialize to JSON.
    #[must_use]
    pub fn status(mut self, status: impl Serialize) -> Self {
        self.status = Some(Object::to_json(&status).expect("a status serializes to JSON"));
        self
    }

    /// Adds a condition.
    #[must_use]
    pub fn condition(
        mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> Self {
        self.conditions.push(Condition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        });
        self
    }

    /// Adds the `Ready` condition, True or False.
    #[must_use]
    pub fn ready(self, ready: bool, reason: &str, message: &str) -> Self {
        let status = if ready {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        self.condition("Ready", status, reason, message)
    }

    /// Adds a Normal event.
    #[must_use]
    pub fn event(self, reason: &str, message: &str) -> Self {
        self.push_event(EventType::Normal, reason, message)
    }

    /// Adds a Warning event.
    #[must_use]
    pub fn warning(self, reason: &str, message: &str) -> Self {
        self.push_event(EventType::Warning, reason, message)
    }

    fn push_event(mut self, type_: EventType, reason: &str, message: &str) -> Self {
        self.events.push(Event {
            type_,
            reason: reason.into(),
            message: message.into(),
        });
        self
    }

    /// Asks to be called again after `ms` milliseconds, even if nothing changes.
    #[must_use]
    pub fn requeue_after_ms(mut self, ms: u64) -> Self {
        self.requeue_after_ms = Some(ms);
        self
    }

    /// Reports that cleanup is done (answer to [`crate::Request::finalizing`]).
    #[must_use]
    pub fn finalized(mut self) -> Self {
        self.finalized = true;
        self
    }

    /// Sets a label on the parent (see [`ParentMetadata`]). Keys under `reconhost.dev/` are
    /// refused by the host.
    #[must_use]
    pub fn parent_label(mut self, key: &str, value: &str) -> Self {
        self.parent_metadata
            .get_or_insert_default()
            .labels
            .insert(key.into(), value.into());
        self
    }

    /// Sets an annotation on the parent (see [`ParentMetadata`]). Keys under `reconhost.dev/`
    /// are refused by the host.
    #[must_use]
    pub fn parent_annotation(mut self, key: &str, value: &str) -> Self {
        self.parent_metadata
            .get_or_insert_default()
            .annotations
            .insert(key.into(), value.into());
        self
    }

    pub(crate) fn into_wit(self) -> wit::Response {
        wit::Response {
            children: self.children.into_iter().map(Child::into_wit).collect(),
            status: self.status.map(Object::into_json),
            conditions: self
                .conditions
                .into_iter()
                .map(|c| wit::Condition {
                    type_: c.type_,
                    status: c.status.to_wit(),
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            events: self
                .events
                .into_iter()
                .map(|e| wit::Event {
                    type_: match e.type_ {
                        EventType::Normal => wit::EventType::Normal,
                        EventType::Warning => wit::EventType::Warning,
                    },
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
            requeue_after_ms: self.requeue_after_ms,
            finalized: self.finalized,
            parent_metadata: self.parent_metadata.map(|m| wit::MetadataPatch {
                labels: m.labels.into_iter().collect(),
                annotations: m.annotations.into_iter().collect(),
            }),
        }
    }
}

impl Child {
    fn into_wit(self) -> wit::DesiredChild {
        wit::DesiredChild {
            object: self.object.into_json(),
            wave: self.wave,
            ready_when: self.ready_when.iter().map(Check::to_wit).collect(),
        }
    }
}

impl ConditionStatus {
    pub(crate) fn to_wit(self) -> wit::ConditionStatus {
        match self {
            Self::True => wit::ConditionStatus::True,
            Self::False => wit::ConditionStatus::False,
            Self::Unknown => wit::ConditionStatus::Unknown,
        }
    }
}

/// Why a reconcile failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// May work later: retried with backoff.
    Transient(String),
    /// Will not work until the parent changes: not retried until then.
    Permanent(String),
}

impl Error {
    /// A transient error.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::Transient(message.into())
    }

    /// A permanent error.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::Permanent(message.into())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transient(m) => write!(f, "transient: {m}"),
            Self::Permanent(m) => write!(f, "permanent: {m}"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn config_map(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    }

    #[test]
    fn an_empty_response_should_leave_everything_unset() {
        assert_eq!(
            Response::new().into_wit(),
            wit::Response {
                children: vec![],
                status: None,
                conditions: vec![],
                events: vec![],
                requeue_after_ms: None,
                finalized: false,
                parent_metadata: None,
            }
        );
    }

    #[test]
    fn children_should_keep_their_order_waves_and_checks() {
        let response = Response::new()
            .child(config_map("plain"))
            .child_in_wave(
                2,
                config_map("late"),
                [
                    Check::condition("Ready", ConditionStatus::True),
                    Check::equals("data.ok", "yes"),
                ],
            )
            .child_in_wave(1, config_map("early"), Vec::new())
            .into_wit();
        let children: Vec<_> = response
            .children
            .iter()
            .map(|c| (serde_json::from_str::<Value>(&c.object).unwrap(), c.wave))
            .collect();
        assert_eq!(
            children,
            [
                (config_map("plain"), 0),
                (config_map("late"), 2),
                (config_map("early"), 1)
            ]
        );
        assert!(response.children[0].ready_when.is_empty());
        assert!(response.children[2].ready_when.is_empty());
        assert_eq!(
            response.children[1].ready_when,
            [
                wit::ReadyCheck::Condition(wit::ConditionCheck {
                    type_: "Ready".into(),
                    status: wit::ConditionStatus::True,
                }),
                wit::ReadyCheck::Field(wit::FieldCheck {
                    path: "data.ok".into(),
                    comparison: wit::Comparison::Equal,
                    operand: wit::Operand::Value("\"yes\"".into()),
                }),
            ]
        );
    }

    #[test]
    fn conditions_and_events_should_carry_their_enums() {
        let response = Response::new()
            .ready(true, "Up", "all up")
            .ready(false, "Down", "all down")
            .condition("Synced", ConditionStatus::Unknown, "Pending", "")
            .event("Created", "made it")
            .warning("Slow", "took long")
            .into_wit();
        let statuses: Vec<_> = response
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
            .collect();
        assert_eq!(
            statuses,
            [
                ("Ready", wit::ConditionStatus::True, "Up"),
                ("Ready", wit::ConditionStatus::False, "Down"),
                ("Synced", wit::ConditionStatus::Unknown, "Pending"),
            ]
        );
        assert_eq!(
            response.events,
            [
                wit::Event {
                    type_: wit::EventType::Normal,
                    reason: "Created".into(),
                    message: "made it".into(),
                },
                wit::Event {
                    type_: wit::EventType::Warning,
                    reason: "Slow".into(),
                    message: "took long".into(),
                },
            ]
        );
    }

    #[test]
    fn status_requeue_and_finalized_should_cross_as_they_are() {
        let response = Response::new()
            .status(json!({"phase": "Live"}))
            .requeue_after_ms(1500)
            .finalized()
            .into_wit();
        assert_eq!(response.status.as_deref(), Some(r#"{"phase":"Live"}"#));
        assert_eq!(response.requeue_after_ms, Some(1500));
        assert!(response.finalized);
    }

    #[test]
    fn parent_labels_and_annotations_should_become_a_sorted_metadata_patch() {
        let response = Response::new();
        assert_eq!(response.parent_metadata, None);
        let response = response
            .parent_label("b", "2")
            .parent_annotation("note", "hi")
            .parent_label("a", "1")
            .parent_label("b", "3");
        assert_eq!(
            response.clone().into_wit().parent_metadata,
            Some(wit::MetadataPatch {
                labels: vec![("a".into(), "1".into()), ("b".into(), "3".into())],
                annotations: vec![("note".into(), "hi".into())],
            })
        );
        let only_annotation = Response::new().parent_annotation("note", "hi");
        assert_eq!(
            only_annotation.parent_metadata,
            Some(ParentMetadata {
                labels: BTreeMap::new(),
                annotations: BTreeMap::from([("note".into(), "hi".into())]),
            })
        );
    }
}
