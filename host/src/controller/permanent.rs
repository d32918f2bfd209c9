//! Parents whose last reconcile failed for good (a permanent plugin error, or a write the API
//! server rejected as invalid), so they are not retried with the same inputs.
//!
//! They are retried as soon as any input changes, as any other reconcile would be: the parent's
//! spec (its generation), labels or annotations; a child (the handlers forget the parent when
//! one changes); an object the reconcile read. The host's own writes to the parent (the
//! failure shown on its status, its finalizer) are not inputs and do not wake it.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use serde_json::Value;

/// Whether a parent failed for good, and with what inputs: one page of the
/// [`ParentBook`](super::book::ParentBook).
#[derive(Debug, Default)]
pub struct Permanent(Option<Inputs>);

#[derive(Debug, PartialEq, Eq)]
struct Inputs {
    uid: String,
    generation: i64,
    /// Labels and annotations, hashed.
    metadata: u64,
}

impl Permanent {
    /// Remembers that `parent` failed for good as it is now.
    pub fn remember(&mut self, parent: &Value) {
        self.0 = Some(inputs(parent));
    }

    /// Whether `parent` failed for good with the inputs it has now. Asked before every
    /// reconcile, so the inputs are only worked out for a parent that did fail.
    pub fn holds(&self, parent: &Value) -> bool {
        self.0
            .as_ref()
            .is_some_and(|failed| *failed == inputs(parent))
    }

    /// Forgets the failure: an input changed, or it went through.
    pub fn forget(&mut self) {
        self.0 = None;
    }

    /// Whether no failure is remembered.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

fn inputs(parent: &Value) -> Inputs {
    let meta = &parent["metadata"];
    let mut hasher = DefaultHasher::new();
    meta["labels"].to_string().hash(&mut hasher);
    // The host's own record of the failure is not an input: a parent with only that
    // annotation hashes as one with none.
    let mut annotations = meta["annotations"].clone();
    if let Some(map) = annotations.as_object_mut() {
        map.remove(crate::model::record::LAST_RECONCILE);
        if map.is_empty() {
            annotations = Value::Null;
        }
    }
    annotations.to_string().hash(&mut hasher);
    Inputs {
        uid: meta["uid"].as_str().unwrap_or("").to_owned(),
        generation: meta["generation"].as_i64().unwrap_or(0),
        metadata: hasher.finish(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parent() -> Value {
        json!({"metadata": {"name": "p", "uid": "u-1", "generation": 2, "labels": {"a": "1"},
               "resourceVersion": "10"}, "status": {}})
    }

    #[test]
    fn a_failure_should_hold_until_an_input_changes() {
        let mut failed = Permanent::default();
        failed.remember(&parent());
        assert!(failed.holds(&parent()));

        // The host's own writes: a failure condition, a finalizer, a new resourceVersion.
        let mut written = parent();
        written["status"] = json!({"conditions": [{"type": "Synced", "status": "False"}]});
        written["metadata"]["finalizers"] = json!(["reconhost.dev/p"]);
        written["metadata"]["resourceVersion"] = json!("11");
        assert!(failed.holds(&written));

        for change in [
            json!({"generation": 3}),
            json!({"labels": {"a": "2"}}),
            json!({"annotations": {"x": "y"}}),
            json!({"uid": "u-2"}),
        ] {
            let mut changed = parent();
            for (k, v) in change.as_object().unwrap() {
                changed["metadata"][k] = v.clone();
            }
            assert!(!failed.holds(&changed), "{change}");
        }
        failed.forget();
        assert!(!failed.holds(&parent()));
        assert!(failed.is_empty());
    }
}
