//! Field ownership: whether an apply body still sets every field the plugin's field manager owns.
//!
//! Server-side apply removes a field from an object when the manager that applied it stops
//! sending it. The planner's subset test alone cannot see that case (an object that still holds a
//! field the plugin no longer wants is a superset of the desired body), so a child whose desired
//! state lost a field would be judged unchanged and keep the stale field forever — the bug behind
//! crossplane/crossplane#6863 and metacontroller/metacontroller#1177. The API server records what
//! each manager owns in `metadata.managedFields[].fieldsV1`; comparing that set with the body
//! catches the removal without any state in the host, so it also works after a restart.
//!
//! `fieldsV1` is structured-merge-diff's path set: each key names one step — `f:<field>` (a map
//! field), `k:<json>` (a list element identified by its key fields), `v:<json>` (a set element),
//! `i:<n>` (a list index) — and `.` marks the node itself as owned.
//!
//! The check errs towards "still covered": a false "removed" would send the same apply on every
//! reconcile and break the zero-writes steady state, while a missed removal is the old behaviour.
//! So key fields absent from the body count as matching (the server defaults some, such as a
//! port's `protocol`), and unknown step kinds are ignored.

use serde_json::Value;

/// The `fieldsV1` that `manager` owns on `object` through apply (not through a subresource), if
/// it has applied the object.
pub fn applied_by<'a>(object: &'a Value, manager: &str) -> Option<&'a Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|entry| {
            entry["manager"] == manager
                && entry["operation"] == "Apply"
                && entry["subresource"].as_str().unwrap_or("").is_empty()
        })
        .map(|entry| &entry["fieldsV1"])
}

/// Whether every field in the path set `owned` is still set in `body`.
pub fn covers(owned: &Value, body: &Value) -> bool {
    let Some(steps) = owned.as_object() else {
        return true;
    };
    steps.iter().all(|(step, below)| {
        if step == "." {
            return true;
        }
        if let Some(field) = step.strip_prefix("f:") {
            return body
                .get(field)
                .is_some_and(|v| !v.is_null() && covers(below, v));
        }
        let Some(items) = body.as_array() else {
            // A list step where the body has no list: the whole list went away.
            return !is_list_step(step);
        };
        if let Some(key) = step.strip_prefix("k:") {
            let Ok(Value::Object(key)) = serde_json::from_str::<Value>(key) else {
                return true;
            };
            return items.iter().any(|item| {
                key.iter()
                    .all(|(k, v)| item.get(k).is_none_or(|iv| same_value(iv, v)))
                    && covers(below, item)
            });
        }
        if let Some(value) = step.strip_prefix("v:") {
            let Ok(value) = serde_json::from_str::<Value>(value) else {
                return true;
            };
            return items.iter().any(|item| same_value(item, &value));
        }
        if let Some(index) = step.strip_prefix("i:") {
            let Ok(index) = index.parse::<usize>() else {
                return true;
            };
            return items.get(index).is_some_and(|item| covers(below, item));
        }
        true
    })
}

/// Whether a `fieldsV1` step names a list element (`k:`, `v:`, `i:`) rather than a field.
pub fn is_list_step(step: &str) -> bool {
    ["k:", "v:", "i:"].iter().any(|p| step.starts_with(p))
}

/// JSON equality with numbers compared by value (`1` and `1.0` are the same port).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the API server records for a Deployment applied with one container and a port
    /// (protocol defaulted), labels, and an ownerReference.
    fn deployment_fields() -> Value {
        json!({
            "f:metadata": {
                "f:labels": {".": {}, "f:app": {}},
                "f:ownerReferences": {".": {}, "k:{\"uid\":\"u-1\"}": {}}
            },
            "f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"app\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}
                        }}
                    }
                }}}
            }
        })
    }

    fn deployment_body() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"},
                         "ownerReferences": [{"uid": "u-1", "controller": true}]},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx", "ports": [{"containerPort": 8080}]}
            ]}}}
        })
    }

    #[test]
    fn the_body_that_was_applied_should_cover_its_fields() {
        assert!(covers(&deployment_fields(), &deployment_body()));
    }

    #[test]
    fn a_dropped_map_field_should_not_be_covered() {
        let mut body = deployment_body();
        body["metadata"]["labels"] = json!({});
        assert!(!covers(&deployment_fields(), &body));
        let mut body = deployment_body();
        body["spec"].as_object_mut().unwrap().remove("replicas");
        assert!(!covers(&deployment_fields(), &body));
        let mut body = deployment_body();
        body["spec"]["replicas"] = Value::Null;
        assert!(!covers(&deployment_fields(), &body), "null is no value");
    }

    #[test]
    fn a_dropped_or_rekeyed_list_element_should_not_be_covered() {
        let mut body = deployment_body();
        body["spec"]["template"]["spec"]["containers"][0]["name"] = json!("main");
        assert!(!covers(&deployment_fields(), &body));
        let mut body = deployment_body();
        body["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([]);
        assert!(!covers(&deployment_fields(), &body));
        let mut body = deployment_body();
        body["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("UDP");
        assert!(
            !covers(&deployment_fields(), &body),
            "a key field that differs"
        );
    }

    #[test]
    fn set_and_index_steps_should_be_checked() {
        let owned = json!({"f:finalizers": {"v:\"a\"": {}}, "f:args": {"i:1": {}}});
        assert!(covers(
            &owned,
            &json!({"finalizers": ["b", "a"], "args": ["x", "y"]})
        ));
        assert!(!covers(
            &owned,
            &json!({"finalizers": ["b"], "args": ["x", "y"]})
        ));
        assert!(!covers(
            &owned,
            &json!({"finalizers": ["a"], "args": ["x"]})
        ));
        assert!(!covers(
            &owned,
            &json!({"finalizers": "a", "args": ["x", "y"]})
        ));
    }

    #[test]
    fn only_the_managers_own_apply_entry_should_count() {
        let object = json!({"metadata": {"managedFields": [
            {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:data": {"f:x": {}}}},
            {"manager": "reconhost/p", "operation": "Apply", "subresource": "status",
             "fieldsV1": {"f:status": {}}},
            {"manager": "reconhost/p", "operation": "Apply", "fieldsV1": {"f:data": {"f:k": {}}}}
        ]}});
        assert_eq!(
            applied_by(&object, "reconhost/p"),
            Some(&json!({"f:data": {"f:k": {}}}))
        );
        assert_eq!(applied_by(&object, "reconhost/q"), None);
        assert_eq!(applied_by(&json!({"metadata": {}}), "reconhost/p"), None);
    }
}
