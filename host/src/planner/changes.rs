//! Which fields make a child "changed": the planner's own test ([`super::is_subset`] of the
//! apply body in the observed object, and [`owned::covers`] of what the plugin's field manager
//! applied before), made once, field by field down to [`DEPTH`] levels, so its answer is also
//! what a changed child's trace shows (`spec.replicas`, `data.round`) at no second diff.
//!
//! The walk allocates nothing for a field that holds (a steady state compares every child on
//! every resync): a path becomes a string only when it is one of the first [`MAX_SHOWN`].

use std::fmt;

use serde_json::Value;

use super::{is_subset, owned, unset};

/// How deep a changed field is named: two levels (`spec.replicas`, `metadata.labels`,
/// `data.round`). Below that a field is one change however much of it differs, which keeps
/// the names short and the walk no deeper than the subset test goes anyway.
pub const DEPTH: usize = 2;

/// How many changed fields are named; the count goes on beyond. A trace attribute is for a
/// person to read, and a ConfigMap rewritten whole would otherwise list every key.
pub const MAX_SHOWN: usize = 5;

/// The fields in which an apply body and the object it would be applied to differ.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The first [`MAX_SHOWN`] paths, dotted, in the body's order; a field the plugin's field
    /// manager applied before and the body no longer sets ends in ` (removed)`.
    shown: Vec<String>,
    /// How many there are in all.
    count: usize,
}

impl Changes {
    /// Whether nothing differs: the child is unchanged.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// How many fields differ.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The first [`MAX_SHOWN`] of them.
    pub fn shown(&self) -> &[String] {
        &self.shown
    }

    fn add(&mut self, at: &[&str], suffix: &str) {
        self.count += 1;
        if self.shown.len() < MAX_SHOWN {
            let path = match at {
                [] => "(the object)".to_owned(),
                _ => at.join("."),
            };
            self.shown.push(path + suffix);
        }
    }
}

/// `spec.replicas, data.round`, then `, +N more` beyond [`MAX_SHOWN`].
impl fmt::Display for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown.join(", "))?;
        if self.count > self.shown.len() {
            write!(f, ", +{} more", self.count - self.shown.len())?;
        }
        Ok(())
    }
}

/// What applying `body` to `observed` would change: the fields of `body` that `observed` does
/// not hold (as [`is_subset`] judges) and, with `owned` (the `fieldsV1` the plugin's manager
/// applied), the fields it applied before and `body` no longer sets (as [`owned::covers`]
/// judges). Empty exactly when the planner would call the child unchanged.
pub fn changes(body: &Value, observed: &Value, owned: Option<&Value>) -> Changes {
    let mut changes = Changes::default();
    differing(body, observed, &[], &mut changes);
    if let Some(owned) = owned {
        removed(owned, body, &[], &mut changes);
    }
    changes
}

/// `at` extended by `name`, on the stack.
fn deeper<'a>(at: &[&'a str], name: &'a str) -> ([&'a str; DEPTH], usize) {
    let mut next = [""; DEPTH];
    next[..at.len()].copy_from_slice(at);
    next[at.len()] = name;
    (next, at.len() + 1)
}

fn differing<'a>(body: &'a Value, observed: &Value, at: &[&'a str], out: &mut Changes) {
    let (Value::Object(fields), Value::Object(held)) = (body, observed) else {
        if !is_subset(body, observed) {
            out.add(at, "");
        }
        return;
    };
    for (name, value) in fields {
        let (next, len) = deeper(at, name);
        match held.get(name) {
            Some(o) if len < DEPTH && value.is_object() => differing(value, o, &next[..len], out),
            Some(o) if !is_subset(value, o) => out.add(&next[..len], ""),
            Some(_) => {}
            None if !unset(value) => out.add(&next[..len], ""),
            None => {}
        }
    }
}

/// The fields `owned` names that `body` does not set, as [`owned::covers`] walks them.
fn removed<'a>(owned: &'a Value, body: &Value, at: &[&'a str], out: &mut Changes) {
    let Some(steps) = owned.as_object() else {
        return;
    };
    for (step, below) in steps {
        let Some(field) = step.strip_prefix("f:") else {
            // Under an object, a list step means the list became an object: covers says so.
            if owned::is_list_step(step) {
                out.add(at, " (removed)");
            }
            continue;
        };
        let (next, len) = deeper(at, field);
        match body.get(field) {
            Some(v) if v.is_null() => out.add(&next[..len], " (removed)"),
            Some(v) if len < DEPTH && v.is_object() => removed(below, v, &next[..len], out),
            Some(v) if !owned::covers(below, v) => out.add(&next[..len], " (removed)"),
            Some(_) => {}
            None => out.add(&next[..len], " (removed)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: u32, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}})
    }

    fn stored(replicas: u32, image: &str) -> Value {
        let mut o = deployment(replicas, image);
        o["metadata"]["uid"] = json!("u-1");
        o["metadata"]["resourceVersion"] = json!("7");
        o["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        o
    }

    #[test]
    fn changes_should_name_each_differing_field_two_levels_down() {
        let c = changes(&deployment(3, "nginx:1.28"), &stored(2, "nginx:1.27"), None);
        assert_eq!(c.shown(), ["spec.replicas", "spec.template"]);
        assert_eq!(c.count(), 2);
        assert_eq!(c.to_string(), "spec.replicas, spec.template");
    }

    #[test]
    fn changes_should_be_empty_exactly_when_the_body_is_a_subset() {
        let cases = [
            (deployment(2, "nginx:1.27"), stored(2, "nginx:1.27")),
            (deployment(3, "nginx:1.27"), stored(2, "nginx:1.27")),
            (
                json!({"metadata": {"name": "x"}, "data": {}}),
                json!({"metadata": {"name": "x"}}),
            ),
            (
                json!({"metadata": {"name": "x"}, "data": {"k": null}}),
                json!({"metadata": {"name": "x"}}),
            ),
            (
                json!({"metadata": {"name": "x"}, "data": {"k": "v"}}),
                json!({"metadata": {"name": "x"}}),
            ),
            (
                json!({"spec": {"ports": [1, 2]}}),
                json!({"spec": {"ports": [1]}}),
            ),
            (json!({"spec": {"n": 1}}), json!({"spec": {"n": 1.0}})),
            (json!({"kind": "A"}), json!({"kind": "B"})),
        ];
        for (body, observed) in cases {
            assert_eq!(
                changes(&body, &observed, None).is_empty(),
                is_subset(&body, &observed),
                "{body} in {observed}"
            );
        }
    }

    #[test]
    fn a_field_the_plugin_no_longer_sets_should_be_named_removed() {
        let owned = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                           "f:spec": {"f:replicas": {}, "f:paused": {},
                                      "f:template": {"f:spec": {"f:containers": {}}}}});
        let body = deployment(2, "nginx:1.27");
        let c = changes(&body, &stored(2, "nginx:1.27"), Some(&owned));
        assert_eq!(c.shown(), ["spec.paused (removed)"]);
        assert!(
            !owned::covers(&owned, &body),
            "the planner's own test agrees"
        );
        let kept = json!({"f:spec": {"f:replicas": {}}});
        assert!(changes(&body, &stored(2, "nginx:1.27"), Some(&kept)).is_empty());
        assert!(owned::covers(&kept, &body));
    }

    #[test]
    fn changes_beyond_the_few_shown_should_still_be_counted() {
        let many: serde_json::Map<String, Value> =
            (0..8).map(|i| (format!("k{i}"), json!("new"))).collect();
        let body = json!({"metadata": {"name": "m"}, "data": many});
        let c = changes(&body, &json!({"metadata": {"name": "m"}, "data": {}}), None);
        assert_eq!(c.count(), 8);
        assert_eq!(c.shown().len(), MAX_SHOWN);
        assert_eq!(
            c.to_string(),
            "data.k0, data.k1, data.k2, data.k3, data.k4, +3 more"
        );
    }
}
