//! Readiness checks on observed children: for the children of a wave
//! ([`Response::child_in_wave`](crate::Response::child_in_wave)) and for the rolling update
//! methods ([`UpdateStrategy::status_check`](crate::UpdateStrategy::status_check)).

use serde::Serialize;

use crate::wit::reconhost::plugin::types as wit;
use crate::{ConditionStatus, Object};

/// One readiness check on an observed child.
///
/// Besides the checks a plugin asks for, every child is ready only once it is not being
/// deleted and, where it reports `status.observedGeneration`, that has caught up with
/// `metadata.generation` (so a status from before the last write never counts).
///
/// ```
/// use reconhost_sdk::{Check, Comparison, ConditionStatus, Operand};
///
/// let available = Check::condition("Available", ConditionStatus::True);
/// let running = Check::equals("status.phase", "Running");
/// let three = Check::field("spec.replicas", Comparison::Equal, Operand::value(3));
/// let scaled = Check::field(
///     "status.readyReplicas",
///     Comparison::AtLeast,
///     Operand::Field("spec.replicas".into()),
/// );
/// # let _ = (available, running, three, scaled);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// `status.conditions[]` has an entry of this type with this status.
    Condition {
        /// CamelCase type, e.g. `Available`.
        type_: String,
        /// The status it must have.
        status: ConditionStatus,
    },
    /// A field of the observed child compared with a value or another field.
    Field {
        /// Dotted path from the object's root, e.g. `status.phase`; a numeric segment indexes
        /// an array.
        path: String,
        /// How the field compares with the operand.
        comparison: Comparison,
        /// What the field is compared with.
        operand: Operand,
    },
}

/// How a field compares with its operand (see [`Check::Field`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// Equal as JSON values (numbers by value). A missing field is `null`.
    Equal,
    /// Not equal as JSON values.
    NotEqual,
    /// Both are numbers and the field is greater than or equal. Never true for a missing field
    /// or a non-number.
    AtLeast,
    /// Both are numbers and the field is less than or equal. Never true for a missing field or
    /// a non-number.
    AtMost,
}

/// What a field is compared with (see [`Check::Field`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A JSON value as its text, e.g. `Operand::value("Running")`, `Operand::value(3)` or
    /// `Operand::Value(json!(true).into())`.
    Value(Object),
    /// Another field of the same object, as a dotted path (e.g. `spec.replicas`).
    Field(String),
}

impl Check {
    /// The child carries a condition of this type with this status, e.g.
    /// `Check::condition("Available", ConditionStatus::True)`.
    pub fn condition(type_: &str, status: ConditionStatus) -> Self {
        Self::Condition {
            type_: type_.to_owned(),
            status,
        }
    }

    /// The field at `path` (dotted, from the object's root) compares with `operand`.
    pub fn field(path: &str, comparison: Comparison, operand: Operand) -> Self {
        Self::Field {
            path: path.to_owned(),
            comparison,
            operand,
        }
    }

    /// The field at `path` equals `value` as JSON, e.g. `Check::equals("status.phase",
    /// "Running")`.
    ///
    /// # Panics
    /// If `value` does not serialize to JSON (see [`Operand::value`]).
    pub fn equals(path: &str, value: impl Serialize) -> Self {
        Self::field(path, Comparison::Equal, Operand::value(value))
    }

    pub(crate) fn to_wit(&self) -> wit::ReadyCheck {
        match self {
            Self::Condition { type_, status } => wit::ReadyCheck::Condition(wit::ConditionCheck {
                type_: type_.clone(),
                status: status.to_wit(),
            }),
            Self::Field {
                path,
                comparison,
                operand,
            } => wit::ReadyCheck::Field(wit::FieldCheck {
                path: path.clone(),
                comparison: comparison.to_wit(),
                operand: operand.to_wit(),
            }),
        }
    }
}

impl Comparison {
    fn to_wit(self) -> wit::Comparison {
        match self {
            Self::Equal => wit::Comparison::Equal,
            Self::NotEqual => wit::Comparison::NotEqual,
            Self::AtLeast => wit::Comparison::AtLeast,
            Self::AtMost => wit::Comparison::AtMost,
        }
    }
}

impl Operand {
    /// A JSON value: a string, a number, a boolean, a `json!` value, anything serializable.
    ///
    /// # Panics
    /// If `value` does not serialize to JSON, which cannot happen for strings, numbers,
    /// booleans, plain structs or `serde_json::Value`.
    pub fn value(value: impl Serialize) -> Self {
        Self::Value(Object::to_json(&value).expect("an operand serializes to JSON"))
    }

    fn to_wit(&self) -> wit::Operand {
        match self {
            Self::Value(value) => wit::Operand::Value(value.json().to_owned()),
            Self::Field(path) => wit::Operand::Field(path.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(path: &str, comparison: wit::Comparison, operand: wit::Operand) -> wit::ReadyCheck {
        wit::ReadyCheck::Field(wit::FieldCheck {
            path: path.into(),
            comparison,
            operand,
        })
    }

    #[test]
    fn a_condition_check_should_name_type_and_status() {
        assert_eq!(
            Check::condition("Available", ConditionStatus::False).to_wit(),
            wit::ReadyCheck::Condition(wit::ConditionCheck {
                type_: "Available".into(),
                status: wit::ConditionStatus::False,
            })
        );
    }

    #[test]
    fn a_value_operand_should_cross_as_json_text() {
        assert_eq!(
            Check::equals("status.phase", "Running").to_wit(),
            field(
                "status.phase",
                wit::Comparison::Equal,
                wit::Operand::Value("\"Running\"".into())
            )
        );
        assert_eq!(
            Check::equals("status.ready", true).to_wit(),
            field(
                "status.ready",
                wit::Comparison::Equal,
                wit::Operand::Value("true".into())
            )
        );
        assert_eq!(
            Check::field(
                "status.readyReplicas",
                Comparison::AtMost,
                Operand::Value(json!(3).into())
            )
            .to_wit(),
            field(
                "status.readyReplicas",
                wit::Comparison::AtMost,
                wit::Operand::Value("3".into())
            )
        );
        assert_eq!(
            Check::equals("status.owner", json!({"a": [1, null]})).to_wit(),
            field(
                "status.owner",
                wit::Comparison::Equal,
                wit::Operand::Value(r#"{"a":[1,null]}"#.into())
            )
        );
    }

    #[test]
    fn a_field_operand_should_cross_as_its_path() {
        assert_eq!(
            Check::field(
                "status.readyReplicas",
                Comparison::AtLeast,
                Operand::Field("spec.replicas".into())
            )
            .to_wit(),
            field(
                "status.readyReplicas",
                wit::Comparison::AtLeast,
                wit::Operand::Field("spec.replicas".into())
            )
        );
    }

    #[test]
    fn every_comparison_should_map_to_its_contract_case() {
        for (comparison, expected) in [
            (Comparison::Equal, wit::Comparison::Equal),
            (Comparison::NotEqual, wit::Comparison::NotEqual),
            (Comparison::AtLeast, wit::Comparison::AtLeast),
            (Comparison::AtMost, wit::Comparison::AtMost),
        ] {
            assert_eq!(comparison.to_wit(), expected, "{comparison:?}");
        }
    }
}
