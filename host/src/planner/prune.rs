//! A plugin's status cut to what the parent kind's structural schema declares.
//!
//! The API server prunes fields a CRD's schema does not declare from what a client writes with
//! an update or a merge patch; Metacontroller writes status that way, so a plugin moved from it
//! may copy a field a CRD written for an older Kubernetes lacks (`terminatingReplicas` from a
//! ReplicaSet's status, say). Server-side apply refuses the whole body for one such field, so
//! the host prunes first, as the API server would, and says what it dropped.
//!
//! What counts as declared follows the structural-schema rules: `properties`,
//! `additionalProperties`, `x-kubernetes-preserve-unknown-fields` (anything below it), and an
//! embedded resource's `apiVersion`, `kind` and `metadata`. `allOf`/`anyOf`/`oneOf` cannot
//! declare a field the structural part does not, so they are not looked at. Nor are types: as
//! in the API server, an object keeps only the fields its schema declares, whatever type that
//! schema gives, and validation refuses what is left of the wrong type.

use serde_json::{Map, Value};

/// How many dropped paths one status reports, so that a plugin inventing keys cannot make the
/// report (and what the host remembers of it) grow without bound.
pub const MAX_DROPPED: usize = 16;

/// How much of a key a dropped path shows.
const MAX_KEY: usize = 64;

/// A schema that declares nothing.
static NOTHING: Value = Value::Null;

/// A place in a structural schema: a declared subschema, or anything at all (below
/// `x-kubernetes-preserve-unknown-fields`).
#[derive(Clone, Copy)]
pub(super) enum Node<'a> {
    Declared(&'a Value),
    Anything,
}

impl<'a> Node<'a> {
    /// The schema of the object field `name`, if it may be written.
    pub(super) fn field(self, name: &str) -> Option<Node<'a>> {
        let Node::Declared(schema) = self else {
            return Some(Node::Anything);
        };
        if let Some(field) = schema["properties"].get(name) {
            return Some(Node::Declared(field));
        }
        match &schema["additionalProperties"] {
            Value::Object(_) => return Some(Node::Declared(&schema["additionalProperties"])),
            Value::Bool(true) => return Some(Node::Anything),
            _ => {}
        }
        if schema["x-kubernetes-embedded-resource"] == true
            && matches!(name, "apiVersion" | "kind" | "metadata")
        {
            return Some(Node::Anything);
        }
        (schema["x-kubernetes-preserve-unknown-fields"] == true).then_some(Node::Anything)
    }

    /// The schema of an array's items, if it is an array.
    pub(super) fn items(self) -> Option<Node<'a>> {
        match self {
            Node::Anything => Some(Node::Anything),
            Node::Declared(schema) if schema["type"] == "array" => {
                Some(schema.get("items").map_or(Node::Anything, Node::Declared))
            }
            Node::Declared(_) => None,
        }
    }

    /// Whether `name` is one of the schema's own `properties` rather than a key of a map.
    fn names(self, name: &str) -> bool {
        matches!(self, Node::Declared(schema) if schema["properties"].get(name).is_some())
    }
}

/// Removes from `status` (the plugin's, without the host's fields) every field `schema` (the
/// kind's status schema) does not declare. Returns where they were, as `status.a.b` with `[]`
/// for the items of a list and `*` for the keys of a map, each once and at most
/// [`MAX_DROPPED`] of them.
pub fn prune(schema: &Value, status: &mut Map<String, Value>) -> Vec<String> {
    let mut dropped = Vec::new();
    prune_object(Node::Declared(schema), status, "status", &mut dropped);
    dropped
}

fn prune_object(node: Node, object: &mut Map<String, Value>, at: &str, dropped: &mut Vec<String>) {
    if matches!(node, Node::Anything) {
        return;
    }
    object.retain(|key, value| match node.field(key) {
        Some(field) => {
            let step = if node.names(key) { shown(key) } else { "*" };
            prune_value(field, value, &format!("{at}.{step}"), dropped);
            true
        }
        None => {
            note(dropped, format!("{at}.{}", shown(key)));
            false
        }
    });
}

fn prune_value(node: Node, value: &mut Value, at: &str, dropped: &mut Vec<String>) {
    match value {
        Value::Object(object) => prune_object(node, object, at, dropped),
        Value::Array(items) => {
            // A list where the schema declares none: its objects have no declared fields.
            let item = node.items().unwrap_or(Node::Declared(&NOTHING));
            let at = format!("{at}[]");
            for value in items {
                prune_value(item, value, &at, dropped);
            }
        }
        _ => {}
    }
}

fn note(dropped: &mut Vec<String>, path: String) {
    if dropped.len() < MAX_DROPPED && !dropped.contains(&path) {
        dropped.push(path);
    }
}

fn shown(key: &str) -> &str {
    match key.char_indices().nth(MAX_KEY) {
        Some((end, _)) => &key[..end],
        None => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pruned(schema: Value, status: Value) -> (Value, Vec<String>) {
        let Value::Object(mut status) = status else {
            panic!("a status is an object")
        };
        let dropped = prune(&schema, &mut status);
        (Value::Object(status), dropped)
    }

    #[test]
    fn undeclared_fields_should_be_dropped_at_every_depth_and_named() {
        let schema = json!({"type": "object", "properties": {
            "phase": {"type": "string"},
            "active": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
        }});
        let (status, dropped) = pruned(
            schema,
            json!({"phase": "Green", "colour": "blue",
                   "active": {"replicas": 3, "terminatingReplicas": 1}}),
        );
        assert_eq!(status, json!({"phase": "Green", "active": {"replicas": 3}}));
        assert_eq!(
            dropped,
            ["status.active.terminatingReplicas", "status.colour"]
        );
    }

    #[test]
    fn list_items_should_be_pruned_and_named_once() {
        let schema = json!({"type": "object", "properties": {"history": {"type": "array",
            "items": {"type": "object", "properties": {"phase": {"type": "string"}}}}}});
        let (status, dropped) = pruned(
            schema,
            json!({"history": [{"phase": "Blue", "at": 1}, {"phase": "Green", "at": 2}]}),
        );
        assert_eq!(
            status,
            json!({"history": [{"phase": "Blue"}, {"phase": "Green"}]})
        );
        assert_eq!(dropped, ["status.history[].at"]);
    }

    #[test]
    fn preserved_and_open_maps_should_keep_what_is_below() {
        let schema = json!({"type": "object", "properties": {
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                     "properties": {"typed": {"type": "object", "properties": {}}}},
            "byZone": {"type": "object", "additionalProperties": {"type": "object",
                       "properties": {"ready": {"type": "integer"}}}},
            "any": {"type": "object", "additionalProperties": true},
        }});
        let (status, dropped) = pruned(
            schema,
            json!({"free": {"x": {"y": 1}, "typed": {"z": 1}},
                   "byZone": {"a": {"ready": 1, "extra": 2}},
                   "any": {"k": {"deep": true}}}),
        );
        assert_eq!(
            status,
            json!({"free": {"x": {"y": 1}, "typed": {}},
                   "byZone": {"a": {"ready": 1}}, "any": {"k": {"deep": true}}})
        );
        assert_eq!(dropped, ["status.byZone.*.extra", "status.free.typed.z"]);
    }

    #[test]
    fn an_embedded_resource_should_keep_its_type_and_metadata() {
        let schema = json!({"type": "object", "properties": {"template": {"type": "object",
            "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        let (status, dropped) = pruned(
            schema,
            json!({"template": {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p"}, "spec": {"a": 1}, "other": 1}}),
        );
        assert_eq!(
            status,
            json!({"template": {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p"}, "spec": {"a": 1}}})
        );
        assert_eq!(dropped, ["status.template.other"]);
    }

    #[test]
    fn a_status_of_no_declared_fields_should_lose_them_all() {
        let (status, dropped) = pruned(json!({"type": "object"}), json!({"a": 1, "b": [1]}));
        assert_eq!(status, json!({}));
        assert_eq!(dropped, ["status.a", "status.b"]);
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let (status, dropped) = pruned(schema, json!({"n": {"not": "a number"}}));
        // An object where an integer is declared has no declared fields: pruned to empty, as the
        // API server would, and then refused by validation.
        assert_eq!(status, json!({"n": {}}));
        assert_eq!(dropped, ["status.n.not"]);
        let (status, dropped) = pruned(
            json!({"type": "object", "properties": {"s": {"type": "string"}}}),
            json!({"s": [{"x": 1}, 2]}),
        );
        assert_eq!(status, json!({"s": [{}, 2]}));
        assert_eq!(dropped, ["status.s[].x"]);
    }

    #[test]
    fn invented_keys_should_be_reported_within_bounds() {
        let many: Map<String, Value> = (0..100)
            .map(|i| (format!("{i}{}", "k".repeat(200)), json!(i)))
            .collect();
        let (status, dropped) = pruned(json!({"type": "object"}), Value::Object(many));
        assert_eq!(status, json!({}));
        assert_eq!(dropped.len(), MAX_DROPPED);
        assert!(dropped.iter().all(|p| p.len() <= "status.".len() + MAX_KEY));
    }
}
