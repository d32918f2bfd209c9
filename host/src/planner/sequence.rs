//! Order within a plan (contract 0.2): update strategies per child kind and waves of children.
//! Runs after the plan is settled (the host's memory of what it applied, the fight referee), so
//! a change that is no change is never turned into a deletion or a wait.
//!
//! - `OnDelete`: a differing child is [`Action::Kept`] as it is.
//! - `Recreate`: a differing child is deleted ([`Action::Recreate`]); the reconcile that sees it
//!   gone creates it (a missing child is always created).
//! - Rolling methods: one differing child of the kind at a time, and only while every child of
//!   the kind that is up to date passes the strategy's status checks and none is being created
//!   or deleted; the others are [`Action::Waiting`].
//! - Waves: a child of wave n+1 is created or changed only once every child of the waves up to n
//!   is up to date (or kept) and ready by its checks; until then it is [`Action::Waiting`].
//!   Deletions of children no longer desired are not ordered.
//!
//! Every child is ready only when it is not being deleted and, if it reports
//! `status.observedGeneration`, that has caught up with `metadata.generation`: a status from
//! before the last write never counts.

use serde_json::Value;

use super::{Action, ChildPlan, Plan, same_object};
use crate::model::{
    Comparison, ConditionStatus, Desired, Operand, PluginInfo, ReadyCheck, UpdateMethod,
};

/// Orders `plan` (made from `desired` against `observed`): turns the changes that must wait or
/// not happen into [`Action::Waiting`] and [`Action::Kept`], and changes a recreating kind's
/// updates into [`Action::Recreate`]. Returns why the first waiting child waits, if any does.
pub fn order(
    plan: &mut Plan,
    info: &PluginInfo,
    desired: &Desired,
    observed: &[Value],
) -> Option<String> {
    let waved = desired.children.iter().any(|c| c.wave > 0);
    if !waved && info.strategies.all_in_place() {
        return None;
    }
    let n = desired.children.len();
    debug_assert!(
        plan.children[..n]
            .iter()
            .zip(&desired.children)
            .all(|(p, d)| p.name == d.name && p.namespace == d.namespace),
        "the plan lists the desired children first, in order"
    );
    let found: Vec<Option<&Value>> = plan.children[..n]
        .iter()
        .map(|c| {
            observed
                .iter()
                .find(|o| same_object(o, &c.kind, &c.namespace, &c.name))
        })
        .collect();
    for (kind, strategy) in &info.strategies.0 {
        let of_kind: Vec<usize> = (0..n)
            .filter(|&i| plan.children[i].kind.matches(&kind.api_version, &kind.kind))
            .collect();
        let method = strategy.method;
        if method.is_rolling() {
            roll(plan, &of_kind, &found, method, &strategy.status_checks);
            continue;
        }
        for &i in &of_kind {
            let child = &mut plan.children[i];
            if child.action != Action::Update {
                continue;
            }
            match method {
                UpdateMethod::OnDelete => {
                    child.hold(
                        Action::Kept,
                        "OnDelete: an existing child is not changed".into(),
                    );
                }
                UpdateMethod::Recreate => recreate(child, found[i]),
                UpdateMethod::InPlace
                | UpdateMethod::RollingInPlace
                | UpdateMethod::RollingRecreate => {}
            }
        }
    }
    if waved {
        waves(plan, desired, &found);
    }
    plan.children
        .iter()
        .find(|c| c.action == Action::Waiting)
        .and_then(|c| c.why.clone())
}

/// One differing child of a rolling kind goes, if the kind is steady; the rest wait.
fn roll(
    plan: &mut Plan,
    of_kind: &[usize],
    found: &[Option<&Value>],
    method: UpdateMethod,
    checks: &[ReadyCheck],
) {
    let pending: Vec<usize> = of_kind
        .iter()
        .copied()
        .filter(|&i| plan.children[i].action == Action::Update)
        .collect();
    let Some((&first, rest)) = pending.split_first() else {
        return;
    };
    let unsteady = of_kind.iter().find_map(|&i| {
        let child = &plan.children[i];
        match (child.action, found[i]) {
            (Action::Create, _) => Some(format!("{} is being created", child.target())),
            (Action::Unchanged | Action::Kept, Some(object)) => ready(object, checks)
                .err()
                .map(|why| format!("{} is {why}", child.target())),
            (Action::Update, Some(object)) if is_deleting(object) => {
                Some(format!("{} is being deleted", child.target()))
            }
            _ => None,
        }
    });
    if let Some(why) = unsteady {
        for &i in &pending {
            let kind = plan.children[i].kind.kind.clone();
            plan.children[i].hold(
                Action::Waiting,
                format!("rolling update of {kind} paused: {why}"),
            );
        }
        return;
    }
    let turn = plan.children[first].target();
    if method.recreates() {
        recreate(&mut plan.children[first], found[first]);
    }
    for &i in rest {
        plan.children[i].hold(
            Action::Waiting,
            format!("rolling update: one at a time, {turn} first"),
        );
    }
}

/// A differing child of a recreating kind is deleted, unless it already is being deleted.
fn recreate(child: &mut ChildPlan, observed: Option<&Value>) {
    let Some(object) = observed else { return };
    if is_deleting(object) {
        child.hold(Action::Waiting, "being deleted, to be created anew".into());
        return;
    }
    child.action = Action::Recreate;
    child.uid = object["metadata"]["uid"].as_str().map(str::to_owned);
}

/// Holds every change of a wave after the first one that is not done and ready.
fn waves(plan: &mut Plan, desired: &Desired, found: &[Option<&Value>]) {
    let mut numbers: Vec<u32> = desired.children.iter().map(|c| c.wave).collect();
    numbers.sort_unstable();
    numbers.dedup();
    let mut blocked: Option<String> = None;
    for wave in numbers {
        let members =
            || (0..desired.children.len()).filter(move |&i| desired.children[i].wave == wave);
        if let Some(why) = &blocked {
            for i in members() {
                if matches!(
                    plan.children[i].action,
                    Action::Create | Action::Update | Action::Recreate
                ) {
                    plan.children[i].hold(Action::Waiting, why.clone());
                }
            }
            continue;
        }
        blocked = members().find_map(|i| {
            let child = &plan.children[i];
            let clause = match (child.action, found[i]) {
                (Action::Unchanged | Action::Kept, Some(object)) => {
                    format!(
                        "is {}",
                        ready(object, &desired.children[i].ready_when).err()?
                    )
                }
                (Action::Create, _) => "is being created".to_owned(),
                (Action::Waiting, _) => format!("waits: {}", child.why.as_deref().unwrap_or("")),
                _ => "is being changed".to_owned(),
            };
            Some(format!(
                "waits for wave {wave}: {} {clause}",
                child.target()
            ))
        });
    }
}

fn is_deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// Whether `object` is ready by `checks` (and what every object needs), or why not.
pub fn ready(object: &Value, checks: &[ReadyCheck]) -> Result<(), String> {
    if is_deleting(object) {
        return Err("being deleted".into());
    }
    if let (Some(observed), Some(generation)) = (
        object["status"]["observedGeneration"].as_i64(),
        object["metadata"]["generation"].as_i64(),
    ) && observed < generation
    {
        return Err(format!(
            "not ready: status.observedGeneration {observed} is behind generation {generation}"
        ));
    }
    checks.iter().try_for_each(|check| passes(object, check))
}

fn passes(object: &Value, check: &ReadyCheck) -> Result<(), String> {
    match check {
        ReadyCheck::Condition { type_, status } => {
            let found = object["status"]["conditions"]
                .as_array()
                .and_then(|all| all.iter().find(|c| c["type"] == type_.as_str()));
            match found {
                Some(c) if c["status"] == status.as_str() => Ok(()),
                Some(c) => Err(format!(
                    "not ready: condition {type_} is {}, not {}",
                    c["status"].as_str().unwrap_or("unset"),
                    status.as_str()
                )),
                None if *status == ConditionStatus::Unknown => Ok(()),
                None => Err(format!("not ready: it has no condition {type_}")),
            }
        }
        ReadyCheck::Field {
            path,
            comparison,
            operand,
        } => {
            let left = at(object, path);
            let (right, named) = match operand {
                Operand::Value(v) => (v.clone(), v.to_string()),
                Operand::Field(other) => {
                    let v = at(object, other);
                    (v.clone(), format!("{other} ({v})"))
                }
            };
            let number = |v: &Value| v.as_f64();
            let holds = match comparison {
                Comparison::Equal => same(&left, &right),
                Comparison::NotEqual => !same(&left, &right),
                Comparison::AtLeast => {
                    matches!((number(&left), number(&right)), (Some(a), Some(b)) if a >= b)
                }
                Comparison::AtMost => {
                    matches!((number(&left), number(&right)), (Some(a), Some(b)) if a <= b)
                }
            };
            let op = match comparison {
                Comparison::Equal => "equal to",
                Comparison::NotEqual => "other than",
                Comparison::AtLeast => "at least",
                Comparison::AtMost => "at most",
            };
            if holds {
                Ok(())
            } else {
                Err(format!("not ready: {path} is {left}, not {op} {named}"))
            }
        }
    }
}

/// The value at a dotted path, `null` where there is none.
fn at(object: &Value, path: &str) -> Value {
    let mut here = object;
    for step in path.split('.') {
        here = match here {
            Value::Object(map) => map.get(step).unwrap_or(&Value::Null),
            Value::Array(items) => step
                .parse::<usize>()
                .ok()
                .and_then(|i| items.get(i))
                .unwrap_or(&Value::Null),
            _ => &Value::Null,
        };
    }
    here.clone()
}

/// Equal as JSON, numbers by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}
