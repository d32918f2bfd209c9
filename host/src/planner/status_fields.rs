//! Which of the host's own status fields a parent kind lets it write, read off the kind's
//! CustomResourceDefinition.
//!
//! The host adds `status.observedGeneration` and `status.conditions` to the plugin's status. Many
//! CRDs written for other controllers declare neither, and server-side apply refuses a body
//! with a field the schema does not declare (a 500, "field not declared in schema") as a whole:
//! the plugin's own status would never be written. So the host writes only what the schema
//! declares (or leaves open with `x-kubernetes-preserve-unknown-fields`), down to the fields of a
//! condition.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::prune::{self, Node};

/// The fields of a condition the host writes, in the order of `metav1.Condition`.
pub const CONDITION_FIELDS: [&str; 6] = [
    "type",
    "status",
    "observedGeneration",
    "lastTransitionTime",
    "reason",
    "message",
];

/// The host's fields a parent kind's status schema admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusFields {
    /// `status.observedGeneration`.
    pub observed_generation: bool,
    /// `status.conditions`, as the fields of a condition the schema admits (a subset of
    /// [`CONDITION_FIELDS`]); `None` when conditions cannot be written at all, including a
    /// condition schema without `type` or `status`.
    pub conditions: Option<Vec<&'static str>>,
    /// The status schema the plugin's own fields are pruned to ([`prune`]); `None` when
    /// anything goes (no schema, or one that preserves unknown fields at `status`).
    pub schema: Option<Arc<Value>>,
    /// The plugin decorates the parent rather than owning it: the host writes none of its own
    /// fields there (no `observedGeneration`, no `Synced`), only what the plugin asks for.
    pub decorator: bool,
}

impl StatusFields {
    /// Every field: a kind without a CRD schema to go by (a built-in kind, `reconhost render`).
    pub fn all() -> Self {
        Self {
            observed_generation: true,
            conditions: Some(CONDITION_FIELDS.to_vec()),
            schema: None,
            decorator: false,
        }
    }

    /// What a decorator may write on the objects it decorates: none of the host's fields, and
    /// the plugin's status and conditions only as far as the kind's CRD declares them; without
    /// a CRD (a built-in kind) nothing at all, since nothing declares what the status may hold.
    pub fn for_decorator(self, crd: bool) -> Self {
        Self {
            observed_generation: false,
            conditions: if crd { self.conditions } else { None },
            schema: if crd {
                self.schema
            } else {
                Some(Arc::new(Value::Null))
            },
            decorator: true,
        }
    }

    /// The fields the schema of `version` in `crd` (a CustomResourceDefinition as JSON) admits.
    /// A version the CRD does not list, or lists without a schema, admits everything: the API
    /// server is then the judge, as before.
    pub fn from_crd(crd: &Value, version: &str) -> Self {
        let schema = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == version)
            .and_then(|v| v["schema"].get("openAPIV3Schema"));
        match schema {
            Some(schema) => Self::from_schema(schema),
            None => Self::all(),
        }
    }

    /// The fields an object's OpenAPI v3 schema (the `openAPIV3Schema` of a CRD version) admits.
    pub fn from_schema(schema: &Value) -> Self {
        let status = Node::Declared(schema).field("status");
        let observed_generation = status.and_then(|s| s.field("observedGeneration")).is_some();
        let conditions = status
            .and_then(|s| s.field("conditions"))
            .and_then(Node::items)
            .and_then(|item| {
                let fields: Vec<&'static str> = CONDITION_FIELDS
                    .into_iter()
                    .filter(|f| item.field(f).is_some())
                    .collect();
                (fields.contains(&"type") && fields.contains(&"status")).then_some(fields)
            });
        let schema = match status {
            // Open below `status` and naming nothing there: nothing to prune.
            Some(Node::Declared(status))
                if status["x-kubernetes-preserve-unknown-fields"] == true
                    && status.get("properties").is_none() =>
            {
                None
            }
            Some(Node::Declared(status)) => Some(Arc::new(status.clone())),
            // A status the schema does not declare at all has no fields to keep.
            None => Some(Arc::new(Value::Null)),
            Some(Node::Anything) => None,
        };
        Self {
            observed_generation,
            conditions,
            schema,
            decorator: false,
        }
    }

    /// Drops from the plugin's `status` what the schema does not declare; returns where.
    pub fn prune(&self, status: &mut Map<String, Value>) -> Vec<String> {
        match &self.schema {
            Some(schema) => prune::prune(schema, status),
            None => Vec::new(),
        }
    }

    /// What the schema lacks, for the one message that says so; `None` when nothing.
    pub fn missing(&self) -> Option<String> {
        let mut missing = Vec::new();
        if !self.observed_generation {
            missing.push("status.observedGeneration".to_owned());
        }
        match &self.conditions {
            None => missing.push("status.conditions".to_owned()),
            Some(fields) => missing.extend(
                CONDITION_FIELDS
                    .into_iter()
                    .filter(|f| !fields.contains(f))
                    .map(|f| format!("status.conditions[].{f}")),
            ),
        }
        (!missing.is_empty()).then(|| missing.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with_status(status: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object"}, "status": status}})
    }

    fn condition_schema(fields: &[&str]) -> Value {
        let properties: serde_json::Map<String, Value> = fields
            .iter()
            .map(|f| ((*f).to_owned(), json!({"type": "string"})))
            .collect();
        json!({"type": "array", "items": {"type": "object", "properties": properties}})
    }

    #[test]
    fn a_status_declaring_both_fields_should_admit_everything() {
        let schema = with_status(json!({"type": "object", "properties": {
            "observedGeneration": {"type": "integer"},
            "conditions": condition_schema(&CONDITION_FIELDS),
        }}));
        let fields = StatusFields::from_schema(&schema);
        assert!(fields.observed_generation);
        assert_eq!(fields.conditions, StatusFields::all().conditions);
        assert_eq!(fields.missing(), None);
        assert_eq!(StatusFields::all().missing(), None);
    }

    #[test]
    fn a_status_of_other_fields_should_admit_neither() {
        let schema =
            with_status(json!({"type": "object", "properties": {"phase": {"type": "string"}}}));
        let fields = StatusFields::from_schema(&schema);
        assert!(!fields.observed_generation);
        assert_eq!(fields.conditions, None);
        assert_eq!(
            fields.missing().as_deref(),
            Some("status.observedGeneration, status.conditions")
        );
    }

    #[test]
    fn no_status_at_all_should_admit_neither() {
        let fields = StatusFields::from_schema(&json!({"type": "object", "properties": {}}));
        assert!(!fields.observed_generation);
        assert_eq!(fields.conditions, None);
    }

    #[test]
    fn preserved_unknown_fields_should_admit_everything_below() {
        let open =
            with_status(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(StatusFields::from_schema(&open), StatusFields::all());
        let root = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        assert_eq!(StatusFields::from_schema(&root), StatusFields::all());
    }

    #[test]
    fn a_condition_schema_should_limit_the_fields_written() {
        let schema = with_status(json!({"type": "object", "properties": {
            "conditions": condition_schema(&["type", "status", "reason", "message"]),
        }}));
        let fields = StatusFields::from_schema(&schema);
        assert_eq!(
            fields.conditions,
            Some(vec!["type", "status", "reason", "message"])
        );
        assert_eq!(
            fields.missing().as_deref(),
            Some(
                "status.observedGeneration, status.conditions[].observedGeneration, status.conditions[].lastTransitionTime"
            )
        );
    }

    #[test]
    fn conditions_without_type_or_status_or_not_a_list_should_not_be_written() {
        for conditions in [
            condition_schema(&["status", "reason"]),
            condition_schema(&["type", "message"]),
            json!({"type": "string"}),
        ] {
            let schema =
                with_status(json!({"type": "object", "properties": {"conditions": conditions}}));
            assert_eq!(StatusFields::from_schema(&schema).conditions, None);
        }
    }

    #[test]
    fn the_plugins_fields_should_be_pruned_to_the_status_schema_only_where_there_is_one() {
        let mut status = serde_json::Map::new();
        status.insert("phase".into(), json!("Ready"));
        status.insert("colour".into(), json!("blue"));
        let declared =
            with_status(json!({"type": "object", "properties": {"phase": {"type": "string"}}}));
        let mut pruned = status.clone();
        assert_eq!(
            StatusFields::from_schema(&declared).prune(&mut pruned),
            ["status.colour"]
        );
        assert_eq!(Value::Object(pruned), json!({"phase": "Ready"}));

        let open =
            with_status(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        for fields in [StatusFields::from_schema(&open), StatusFields::all()] {
            let mut kept = status.clone();
            assert!(fields.prune(&mut kept).is_empty());
            assert_eq!(kept, status);
        }

        let undeclared = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
        let mut emptied = status.clone();
        assert_eq!(
            StatusFields::from_schema(&undeclared).prune(&mut emptied),
            ["status.colour", "status.phase"]
        );
        assert!(emptied.is_empty());
    }

    #[test]
    fn the_crd_version_asked_for_should_be_the_one_read() {
        let crd = json!({"spec": {"versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": with_status(json!({"type": "object"}))}},
            {"name": "v2", "schema": {"openAPIV3Schema": with_status(json!({"type": "object", "properties": {
                "observedGeneration": {"type": "integer"}}}))}},
        ]}});
        assert!(!StatusFields::from_crd(&crd, "v1").observed_generation);
        assert!(StatusFields::from_crd(&crd, "v2").observed_generation);
        assert_eq!(StatusFields::from_crd(&crd, "v3"), StatusFields::all());
    }
}
