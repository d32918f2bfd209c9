//! `reconhost:plugin@0.2.x`: the host's request into this version's types, and its answers
//! back into the host's. 0.2 is 0.1 plus update strategies per child kind, waves and readiness
//! checks per child, parent metadata and `ignore-status-changes`.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::{Answer, AnsweredChild};
use crate::model::{
    Comparison, Condition, ConditionStatus, Event, EventType, KindRef, Operand, ParentMetadata,
    PluginError, PluginInfo, ReadyCheck, ReconcileRequest, Strategies, UpdateMethod,
    UpdateStrategy,
};
use crate::runtime::bindings::v0_2::{Reconciler, ReconcilerPre, types};
use crate::runtime::state::State;

/// This version's instance factory.
pub type Pre = ReconcilerPre<State>;

/// This version's instance.
pub type Instance = Reconciler;

/// Type-checks an instance factory against this version's world.
pub fn new_pre(pre: InstancePre<State>) -> wasmtime::Result<Pre> {
    ReconcilerPre::new(pre)
}

fn kind(k: types::KindRef) -> KindRef {
    KindRef {
        api_version: k.api_version,
        kind: k.kind,
    }
}

/// `info()`, in the host's terms. A status check whose value is not JSON fails the load, naming
/// where it is.
pub fn info(instance: &Instance, store: &mut Store<State>) -> wasmtime::Result<PluginInfo> {
    let info = instance.call_info(store)?;
    let mut children = Vec::with_capacity(info.children.len());
    let mut strategies = Vec::new();
    for (i, child) in info.children.into_iter().enumerate() {
        let k = kind(child.kind);
        let strategy = child.update_strategy;
        let status_checks = strategy
            .status_checks
            .into_iter()
            .enumerate()
            .map(|(j, c)| {
                parsed(check(c)).map_err(|e| {
                    wasmtime::format_err!(
                        "plugin-info children[{i}].update-strategy.status-checks[{j}]: {e}"
                    )
                })
            })
            .collect::<wasmtime::Result<Vec<_>>>()?;
        let strategy = UpdateStrategy {
            method: method(strategy.method),
            status_checks,
        };
        if strategy != UpdateStrategy::default() {
            strategies.push((k.clone(), strategy));
        }
        children.push(k);
    }
    Ok(PluginInfo {
        name: info.name,
        version: info.version,
        parent: kind(info.parent),
        children,
        reads: info.reads.into_iter().map(kind).collect(),
        finalizer: info.finalizer,
        strategies: Strategies(strategies),
        ignore_status_changes: info.ignore_status_changes,
    })
}

/// `reconcile(request)`, in the host's terms.
pub fn reconcile(
    instance: &Instance,
    store: &mut Store<State>,
    request: &ReconcileRequest,
) -> wasmtime::Result<Result<Answer, PluginError>> {
    let wit = types::Request {
        parent: request.parent.text().to_owned(),
        children: request.children.clone(),
        config: request.config.to_string(),
        finalizing: request.finalizing,
    };
    Ok(match instance.call_reconcile(store, &wit)? {
        Ok(response) => Ok(answer(response)),
        Err(types::Error::Transient(m)) => Err(PluginError::Transient(m)),
        Err(types::Error::Permanent(m)) => Err(PluginError::Permanent(m)),
    })
}

fn method(m: types::UpdateMethod) -> UpdateMethod {
    match m {
        types::UpdateMethod::InPlace => UpdateMethod::InPlace,
        types::UpdateMethod::OnDelete => UpdateMethod::OnDelete,
        types::UpdateMethod::Recreate => UpdateMethod::Recreate,
        types::UpdateMethod::RollingInPlace => UpdateMethod::RollingInPlace,
        types::UpdateMethod::RollingRecreate => UpdateMethod::RollingRecreate,
    }
}

fn condition_status(s: types::ConditionStatus) -> ConditionStatus {
    match s {
        types::ConditionStatus::True => ConditionStatus::True,
        types::ConditionStatus::False => ConditionStatus::False,
        types::ConditionStatus::Unknown => ConditionStatus::Unknown,
    }
}

/// A check as answered, its value still JSON text.
fn check(c: types::ReadyCheck) -> ReadyCheck<String> {
    match c {
        types::ReadyCheck::Condition(c) => ReadyCheck::Condition {
            type_: c.type_,
            status: condition_status(c.status),
        },
        types::ReadyCheck::Field(f) => ReadyCheck::Field {
            path: f.path,
            comparison: match f.comparison {
                types::Comparison::Equal => Comparison::Equal,
                types::Comparison::NotEqual => Comparison::NotEqual,
                types::Comparison::AtLeast => Comparison::AtLeast,
                types::Comparison::AtMost => Comparison::AtMost,
            },
            operand: match f.operand {
                types::Operand::Value(v) => Operand::Value(v),
                types::Operand::Field(p) => Operand::Field(p),
            },
        },
    }
}

/// A check with its value parsed, or why it cannot be.
pub(crate) fn parsed(c: ReadyCheck<String>) -> Result<ReadyCheck, String> {
    Ok(match c {
        ReadyCheck::Condition { type_, status } => ReadyCheck::Condition { type_, status },
        ReadyCheck::Field {
            path,
            comparison,
            operand,
        } => ReadyCheck::Field {
            path,
            comparison,
            operand: match operand {
                Operand::Value(text) => {
                    Operand::Value(serde_json::from_str(&text).map_err(|e| {
                        format!(
                            "the value {:?} is not JSON: {e}",
                            crate::model::printable(&text, 64)
                        )
                    })?)
                }
                Operand::Field(p) => Operand::Field(p),
            },
        },
    })
}

fn answer(r: types::Response) -> Answer {
    Answer {
        children: r
            .children
            .into_iter()
            .map(|c| AnsweredChild {
                object: c.object,
                wave: c.wave,
                ready_when: c.ready_when.into_iter().map(check).collect(),
            })
            .collect(),
        status: r.status,
        conditions: r
            .conditions
            .into_iter()
            .map(|c| Condition {
                type_: c.type_,
                status: condition_status(c.status),
                reason: c.reason,
                message: c.message,
            })
            .collect(),
        events: r
            .events
            .into_iter()
            .map(|e| Event {
                type_: match e.type_ {
                    types::EventType::Normal => EventType::Normal,
                    types::EventType::Warning => EventType::Warning,
                },
                reason: e.reason,
                message: e.message,
            })
            .collect(),
        requeue_after_ms: r.requeue_after_ms,
        finalized: r.finalized,
        parent_metadata: r.parent_metadata.map(|m| ParentMetadata {
            labels: m.labels.into_iter().collect(),
            annotations: m.annotations.into_iter().collect(),
        }),
    }
}
