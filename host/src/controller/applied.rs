//! What the host last applied to each child, to recognise a child that already holds the
//! desired state although it does not look like it.
//!
//! The planner compares the apply body with the object as the API server returns it, and the
//! server normalises some values on the way in: quantities (`cpu: "0.5"` is stored as `500m`,
//! `memory: 1024Mi` as `1Gi`), some durations and defaults written in another form. A child
//! with such a field never looks unchanged, so it would be applied again on every reconcile of
//! its parent — a no-op for the server, but a request each time, and the steady state would not
//! be free. The host therefore remembers, per child, a hash of the body it applied and the
//! resourceVersion the server answered. While the child is still at that version (nobody has
//! written it since) and the plugin asks for the same body, there is nothing to send.
//!
//! The memory is in-process: a restarted host applies such a child once more, then knows it.
//! Entries live as long as the parent's children do; a reconcile keeps only the children it
//! observed or wrote, and a deleted parent drops them all (with its page of the
//! [`ParentBook`](super::book::ParentBook)).

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};

use serde_json::Value;

use super::applier::Written;
use crate::cache::GroupKind;
use crate::planner::{self, Action, Plan};
use kube::Resource as _;

/// One parent's children: child UID → what was applied to it and the version that produced.
#[derive(Debug, Default)]
pub struct Applied {
    children: HashMap<String, Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// Hash of the apply body (canonical JSON text).
    body: u64,
    /// The child's resourceVersion in the API server's answer.
    version: String,
}

impl Applied {
    /// Turns updates into no-ops where the observed child is still exactly what the host made
    /// of the same body. `observed` are the children the plan was made against.
    pub fn settle(&self, plan: &mut Plan, observed: &[Value]) {
        let children = &self.children;
        for child in plan
            .children
            .iter_mut()
            .filter(|c| c.action == Action::Update)
        {
            let current = observed
                .iter()
                .find(|o| planner::same_object(o, &child.kind, &child.namespace, &child.name));
            let Some(current) = current else { continue };
            let meta = &current["metadata"];
            let remembered = meta["uid"].as_str().and_then(|uid| children.get(uid));
            if remembered.is_some_and(|e| {
                meta["resourceVersion"] == e.version.as_str() && e.body == hash(&child.object)
            }) {
                child.action = Action::Unchanged;
            }
        }
    }

    /// Whether `observed`, a child the plan updates with `body`, was last written by the host
    /// with this same body and has been written by someone else since: the plugin's intent is
    /// unchanged, another writer's is not. The fight breaker's first question.
    pub fn rewritten(&self, body: &Value, observed: &Value) -> bool {
        let meta = &observed["metadata"];
        let remembered = meta["uid"].as_str().and_then(|uid| self.children.get(uid));
        remembered
            .is_some_and(|e| meta["resourceVersion"] != e.version.as_str() && e.body == hash(body))
    }

    /// Records what a successful apply of `plan` wrote, and forgets children that are neither
    /// observed nor written any more.
    pub fn record(&mut self, plan: &Plan, observed: &[Value], written: &[Written]) {
        let children = &mut self.children;
        for w in written {
            let Some(sent) = plan.children.iter().find(|c| {
                !matches!(c.action, Action::Delete | Action::Recreate)
                    && c.name == w.object.meta().name.as_deref().unwrap_or("")
                    && c.namespace == w.object.meta().namespace.as_deref().unwrap_or("")
                    && GroupKind::from(&c.kind) == w.kind
            }) else {
                continue;
            };
            let (Some(uid), Some(version)) = (w.object.uid(), w.object.resource_version()) else {
                continue;
            };
            let entry = Entry {
                body: hash(&sent.object),
                version: version.to_owned(),
            };
            children.insert(uid.to_owned(), entry);
        }
        let live = |uid: &String| {
            observed
                .iter()
                .any(|o| o["metadata"]["uid"] == uid.as_str())
                || written.iter().any(|w| w.object.uid() == Some(uid.as_str()))
        };
        children.retain(|uid, _| live(uid));
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }
}

/// A hash of a body's canonical JSON text (serde_json writes object keys in a fixed order).
fn hash(body: &Value) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.to_string().hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KindRef;
    use crate::planner::ChildPlan;
    use serde_json::json;

    fn body(cpu: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
               "spec": {"hard": {"cpu": cpu}}})
    }

    /// The child as the API server stores it: the quantity normalised.
    fn stored(version: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ResourceQuota",
               "metadata": {"name": "q", "uid": "u-q", "resourceVersion": version},
               "spec": {"hard": {"cpu": "500m"}}})
    }

    fn plan_with(action: Action, object: Value) -> Plan {
        Plan {
            children: vec![ChildPlan {
                action,
                kind: KindRef::new("v1", "ResourceQuota"),
                namespace: String::new(),
                name: "q".into(),
                object,
                uid: None,
                wave: 0,
                why: None,
                changes: Default::default(),
            }],
            status: None,
            finalizer: None,
            dropped: Vec::new(),
            metadata: None,
        }
    }

    fn written(object: Value) -> Written {
        Written {
            kind: crate::cache::GroupKind {
                group: String::new(),
                kind: "ResourceQuota".into(),
            },
            object: crate::cache::Watched::from(object),
        }
    }

    #[test]
    fn a_normalised_child_at_the_version_the_host_wrote_should_be_unchanged() {
        let mut applied = Applied::default();
        let first = plan_with(Action::Create, body("0.5"));
        applied.record(&first, &[], &[written(stored("7"))]);

        let mut again = plan_with(Action::Update, body("0.5"));
        applied.settle(&mut again, &[stored("7")]);
        assert_eq!(again.children[0].action, Action::Unchanged);
    }

    #[test]
    fn a_child_written_since_or_a_new_body_should_still_be_updated() {
        let mut applied = Applied::default();
        applied.record(
            &plan_with(Action::Create, body("0.5")),
            &[],
            &[written(stored("7"))],
        );
        let mut someone_wrote = plan_with(Action::Update, body("0.5"));
        applied.settle(&mut someone_wrote, &[stored("8")]);
        assert_eq!(someone_wrote.children[0].action, Action::Update);
        let mut new_body = plan_with(Action::Update, body("1"));
        applied.settle(&mut new_body, &[stored("7")]);
        assert_eq!(new_body.children[0].action, Action::Update);
        let mut other_parent = plan_with(Action::Update, body("0.5"));
        Applied::default().settle(&mut other_parent, &[stored("7")]);
        assert_eq!(other_parent.children[0].action, Action::Update);
    }

    #[test]
    fn only_the_same_body_written_over_by_someone_else_should_count_as_rewritten() {
        let mut applied = Applied::default();
        applied.record(
            &plan_with(Action::Create, body("0.5")),
            &[],
            &[written(stored("7"))],
        );
        assert!(applied.rewritten(&body("0.5"), &stored("8")));
        assert!(
            !applied.rewritten(&body("0.5"), &stored("7")),
            "nobody wrote since"
        );
        assert!(
            !applied.rewritten(&body("1"), &stored("8")),
            "the plugin wants more"
        );
        assert!(!Applied::default().rewritten(&body("0.5"), &stored("8")));
    }

    #[test]
    fn children_gone_should_be_forgotten() {
        let mut applied = Applied::default();
        let plan = plan_with(Action::Create, body("0.5"));
        applied.record(&plan, &[], &[written(stored("7"))]);
        assert!(!applied.is_empty());
        // A later reconcile that neither observed nor wrote the child.
        applied.record(&plan_with(Action::Unchanged, body("0.5")), &[], &[]);
        assert!(applied.is_empty());
    }
}
