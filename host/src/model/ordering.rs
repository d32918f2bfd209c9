//! What a 0.2 plugin declares about order: how existing children of a kind change
//! ([`UpdateStrategy`]), which wave a child belongs to and what makes it ready ([`ReadyCheck`]).
//! The planner's [`sequence`](mod@crate::planner::sequence) acts on them.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::{ConditionStatus, KindRef};

/// How a field compares with its operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Comparison {
    /// Equal as JSON values, numbers by value; a missing field is `null`.
    Equal,
    /// Not equal as JSON values.
    NotEqual,
    /// Both numbers, the field greater than or equal.
    AtLeast,
    /// Both numbers, the field less than or equal.
    AtMost,
}

/// What a field is compared with: a JSON value (`V` is the text as a plugin answered it until
/// validation parses it) or another field of the same object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Operand<V = Value> {
    /// A value.
    Value(V),
    /// A dotted path in the same object.
    Field(String),
}

/// One readiness check on an observed child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ReadyCheck<V = Value> {
    /// `status.conditions[]` has this type with this status.
    Condition {
        /// The condition type.
        #[serde(rename = "type")]
        type_: String,
        /// The status it must have.
        status: ConditionStatus,
    },
    /// A field compared with a value or another field.
    Field {
        /// Dotted path from the object's root; a numeric segment indexes an array.
        path: String,
        /// How.
        comparison: Comparison,
        /// With what.
        operand: Operand<V>,
    },
}

/// How the host changes an existing child that differs from the desired one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub enum UpdateMethod {
    /// Server-side apply onto the existing child.
    #[default]
    InPlace,
    /// Never change an existing child.
    OnDelete,
    /// Delete it; the next reconcile creates it anew.
    Recreate,
    /// In place, one child of the kind at a time.
    RollingInPlace,
    /// Recreate, one child of the kind at a time.
    RollingRecreate,
}

impl UpdateMethod {
    /// Whether children of the kind change one at a time.
    pub fn is_rolling(self) -> bool {
        matches!(self, Self::RollingInPlace | Self::RollingRecreate)
    }

    /// Whether a change is made by deleting the child.
    pub fn recreates(self) -> bool {
        matches!(self, Self::Recreate | Self::RollingRecreate)
    }
}

/// The update strategy of one child kind.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// The method.
    pub method: UpdateMethod,
    /// For the rolling methods: what makes an up-to-date child ready.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub status_checks: Vec<ReadyCheck>,
}

/// The strategies a plugin declared, by child kind; kinds not named change in place.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Strategies(pub Vec<(KindRef, UpdateStrategy)>);

impl Strategies {
    /// The strategy of `kind`.
    pub fn of(&self, kind: &KindRef) -> Option<&UpdateStrategy> {
        self.0
            .iter()
            .find(|(k, _)| k.matches(&kind.api_version, &kind.kind))
            .map(|(_, s)| s)
    }

    /// Whether every kind changes in place (0.1 plugins, and most 0.2 ones).
    pub fn all_in_place(&self) -> bool {
        self.0
            .iter()
            .all(|(_, s)| s.method == UpdateMethod::InPlace)
    }
}

/// Labels and annotations a plugin sets on its parent under its own field manager.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ParentMetadata {
    /// Labels, by key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations, by key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}
