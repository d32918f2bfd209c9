//! What a shadow revision would have done differently: the plans of the stable revision and of
//! the candidate, made from the same request against the same observed state, compared field by
//! field. Pure; the reconciler calls it and the rollout counts what it finds.
//!
//! What is compared is what each would leave in the cluster: for every child, the body it
//! applies (or its absence, when it deletes or does not want the child); the parent's status as
//! it would be after the write (the observed status when a plan leaves it alone); whether the
//! parent keeps the host's finalizer. Two plans that only differ in whether a write is needed
//! cannot differ here, since both start from the same observed state.

use serde_json::Value;

use crate::planner::{Action, FinalizerAction, Plan};

/// The longest value shown in a difference; longer ones are cut (the rest is in the objects).
const MAX_VALUE: usize = 200;

/// One field on which the two revisions disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The child as messages name it (`Kind namespace/name`), or `status`, or `finalizer`.
    pub target: String,
    /// The field, as a path from the object's root (`.spec.replicas`); empty for the whole
    /// object.
    pub field: String,
    /// What the stable revision leaves there (`None`: nothing, the field or object is absent).
    pub stable: Option<String>,
    /// What the candidate leaves there.
    pub candidate: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".to_owned());
        write!(
            f,
            "{}{}: stable {}, candidate {}",
            self.target,
            self.field,
            show(&self.stable),
            show(&self.candidate)
        )
    }
}

/// The differences between `stable`'s and `candidate`'s plans for a parent whose observed
/// status is `observed_status`, at most `limit` of them (the count of those found is not
/// bounded by it: see the return's first element).
pub fn compare(
    stable: &Plan,
    candidate: &Plan,
    observed_status: &Value,
    limit: usize,
) -> (usize, Vec<Difference>) {
    let mut found = Found {
        count: 0,
        shown: Vec::new(),
        limit,
    };
    let targets = stable
        .children
        .iter()
        .chain(&candidate.children)
        .map(|c| c.target());
    let mut seen = std::collections::BTreeSet::new();
    for target in targets {
        if !seen.insert(target.clone()) {
            continue;
        }
        let a = wanted(stable, &target);
        let b = wanted(candidate, &target);
        found.values(&target, "", a, b);
    }
    let status = |plan: &Plan| {
        plan.status
            .clone()
            .unwrap_or_else(|| observed_status.clone())
    };
    found.values(
        "status",
        "",
        Some(&status(stable)),
        Some(&status(candidate)),
    );
    let keeps = |plan: &Plan| plan.finalizer != Some(FinalizerAction::Remove);
    if stable.finalizer != candidate.finalizer && keeps(stable) != keeps(candidate) {
        let say = |plan: &Plan| Some(if keeps(plan) { "kept" } else { "removed" }.to_owned());
        found.push("finalizer", "", say(stable), say(candidate));
    }
    (found.count, found.shown)
}

/// The body a plan leaves for the child `target`, if it leaves one.
fn wanted<'a>(plan: &'a Plan, target: &str) -> Option<&'a Value> {
    plan.children
        .iter()
        .find(|c| c.target() == target && c.action != Action::Delete)
        .map(|c| &c.object)
}

struct Found {
    count: usize,
    shown: Vec<Difference>,
    limit: usize,
}

impl Found {
    fn values(&mut self, target: &str, path: &str, a: Option<&Value>, b: Option<&Value>) {
        match (a, b) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for key in keys {
                    self.values(target, &format!("{path}.{key}"), a.get(key), b.get(key));
                }
            }
            (a, b) if a == b => {}
            (a, b) => self.push(target, path, a.map(show), b.map(show)),
        }
    }

    fn push(&mut self, target: &str, path: &str, a: Option<String>, b: Option<String>) {
        self.count += 1;
        if self.shown.len() < self.limit {
            self.shown.push(Difference {
                target: target.to_owned(),
                field: path.to_owned(),
                stable: a,
                candidate: b,
            });
        }
    }
}

fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= MAX_VALUE {
        return text;
    }
    let mut end = MAX_VALUE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KindRef;
    use crate::planner::ChildPlan;
    use serde_json::json;

    fn child(action: Action, name: &str, object: Value) -> ChildPlan {
        ChildPlan {
            action,
            kind: KindRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            namespace: "ns".into(),
            name: name.into(),
            object,
            uid: None,
            wave: 0,
            why: None,
            changes: Default::default(),
        }
    }

    fn plan(children: Vec<ChildPlan>, status: Option<Value>) -> Plan {
        Plan {
            children,
            status,
            finalizer: None,
            dropped: Vec::new(),
            metadata: None,
        }
    }

    #[test]
    fn the_same_outcome_should_show_no_difference_whatever_the_actions() {
        let body = json!({"data": {"a": "1"}});
        let stable = plan(vec![child(Action::Unchanged, "x", body.clone())], None);
        let candidate = plan(
            vec![child(Action::Update, "x", body)],
            Some(json!({"ready": true})),
        );
        assert_eq!(
            compare(&stable, &candidate, &json!({"ready": true}), 5),
            (0, vec![]),
            "a status equal to the observed one is what the stable plan leaves too"
        );
    }

    #[test]
    fn differences_should_name_the_child_the_field_and_both_values() {
        let stable = plan(
            vec![
                child(Action::Create, "x", json!({"data": {"a": "1", "b": "2"}})),
                child(Action::Delete, "old", json!({"data": {}})),
            ],
            Some(json!({"phase": "Ready"})),
        );
        let candidate = plan(
            vec![
                child(Action::Create, "x", json!({"data": {"a": "9", "b": "2"}})),
                child(Action::Unchanged, "old", json!({"data": {}})),
            ],
            Some(json!({"phase": "Pending"})),
        );
        let (count, shown) = compare(&stable, &candidate, &Value::Null, 10);
        assert_eq!(count, 3);
        assert_eq!(
            shown.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                r#"ConfigMap ns/x.data.a: stable "1", candidate "9""#,
                r#"ConfigMap ns/old: stable (absent), candidate {"data":{}}"#,
                r#"status.phase: stable "Ready", candidate "Pending""#,
            ]
        );
        let (count, shown) = compare(&stable, &candidate, &Value::Null, 1);
        assert_eq!((count, shown.len()), (3, 1), "all counted, the first shown");
    }

    #[test]
    fn a_finalizer_kept_by_one_and_removed_by_the_other_should_differ() {
        let mut stable = plan(vec![], None);
        let mut candidate = plan(vec![], None);
        stable.finalizer = Some(FinalizerAction::Remove);
        let (count, shown) = compare(&stable, &candidate, &Value::Null, 5);
        assert_eq!(count, 1);
        assert_eq!(
            shown[0].to_string(),
            "finalizer: stable removed, candidate kept"
        );
        candidate.finalizer = Some(FinalizerAction::Remove);
        assert_eq!(compare(&stable, &candidate, &Value::Null, 5).0, 0);
    }

    #[test]
    fn long_values_should_be_cut() {
        let long = "é".repeat(300);
        let stable = plan(vec![], Some(json!({"m": long})));
        let candidate = plan(vec![], Some(json!({"m": "short"})));
        let (_, shown) = compare(&stable, &candidate, &Value::Null, 5);
        let value = shown[0].stable.as_ref().expect("a value");
        assert!(value.len() <= MAX_VALUE + '…'.len_utf8() && value.ends_with('…'));
    }
}
