//! Parents whose last reconcile failed for good (a permanent plugin error, or a write the API
//! server rejected as invalid), so they are not retried with the same inputs.
//!
//! They are retried as soon as any input changes, as any other reconcile would be: the parent's
//! spec (its generation), labels or annotations; a child (the handlers forget the parent when
//! one changes); an object the reconcile read. The host's own writes to the parent (the
//! failure shown on its status, its finalizer) are not inputs and do not wake it.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Mutex;

use serde_json::Value;

use crate::cache::ObjectKey;

/// The parents that failed for good, with the inputs they failed on.
#[derive(Default)]
pub struct Permanent {
    failed: Mutex<HashMap<ObjectKey, Inputs>>,
}

#[derive(Debug, PartialEq, Eq)]
struct Inputs {
    uid: String,
    generation: i64,
    /// Labels and annotations, hashed.
    metadata: u64,
}

impl Permanent {
    /// Remembers that `parent` failed for good as it is now.
    pub fn remember(&self, key: &ObjectKey, parent: &Value) {
        self.lock().insert(key.clone(), inputs(parent));
    }

    /// Whether `parent` failed for good with the inputs it has now. Asked before every
    /// reconcile, so the inputs are only worked out for a parent that did fail.
    pub fn holds(&self, key: &ObjectKey, parent: &Value) -> bool {
        self.lock()
            .get(key)
            .is_some_and(|failed| *failed == inputs(parent))
    }

    /// Forgets the failure of `key`: an input changed, or it went through.
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    /// Forgets every failure: the parent kind's schema changed.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Inputs>> {
        self.failed.lock().expect("permanent-failure lock poisoned")
    }
}

fn inputs(parent: &Value) -> Inputs {
    let meta = &parent["metadata"];
    let mut hasher = DefaultHasher::new();
    meta["labels"].to_string().hash(&mut hasher);
    meta["annotations"].to_string().hash(&mut hasher);
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
        let (failed, key) = (Permanent::default(), ObjectKey::new("ns", "p"));
        failed.remember(&key, &parent());
        assert!(failed.holds(&key, &parent()));

        // The host's own writes: a failure condition, a finalizer, a new resourceVersion.
        let mut written = parent();
        written["status"] = json!({"conditions": [{"type": "Synced", "status": "False"}]});
        written["metadata"]["finalizers"] = json!(["reconhost.dev/p"]);
        written["metadata"]["resourceVersion"] = json!("11");
        assert!(failed.holds(&key, &written));

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
            assert!(!failed.holds(&key, &changed), "{change}");
        }
        failed.forget(&key);
        assert!(!failed.holds(&key, &parent()));
    }
}
