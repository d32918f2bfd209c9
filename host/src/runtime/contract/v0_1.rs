//! `reconhost:plugin@0.1.x`: the host's request into this version's types, and its answers
//! back into the host's.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::Answer;
use crate::model::{
    Condition, ConditionStatus, Event, EventType, KindRef, PluginError, PluginInfo,
    ReconcileRequest,
};
use crate::runtime::bindings::v0_1::{Reconciler, ReconcilerPre, types};
use crate::runtime::state::State;

/// This version's instance factory.
pub type Pre = ReconcilerPre<State>;

/// This version's instance.
pub type Instance = Reconciler;

/// Type-checks an instance factory against this version's world.
pub fn new_pre(pre: InstancePre<State>) -> wasmtime::Result<Pre> {
    ReconcilerPre::new(pre)
}

/// `info()`, in the host's terms.
pub fn info(instance: &Instance, store: &mut Store<State>) -> wasmtime::Result<PluginInfo> {
    let info = instance.call_info(store)?;
    let kind = |k: types::KindRef| KindRef {
        api_version: k.api_version,
        kind: k.kind,
    };
    Ok(PluginInfo {
        name: info.name,
        version: info.version,
        parent: kind(info.parent),
        children: info.children.into_iter().map(kind).collect(),
        reads: info.reads.into_iter().map(kind).collect(),
        finalizer: info.finalizer,
        strategies: Default::default(),
        ignore_status_changes: false,
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

fn answer(r: types::Response) -> Answer {
    Answer {
        children: r.children.into_iter().map(Into::into).collect(),
        status: r.status,
        conditions: r
            .conditions
            .into_iter()
            .map(|c| Condition {
                type_: c.type_,
                status: match c.status {
                    types::ConditionStatus::True => ConditionStatus::True,
                    types::ConditionStatus::False => ConditionStatus::False,
                    types::ConditionStatus::Unknown => ConditionStatus::Unknown,
                },
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
        parent_metadata: None,
    }
}
