//! The plugin contract versions this host implements, behind one enum. Everything that
//! depends on a version is here: which version a component was built against ([`Contract`]),
//! its type-checked instance factory ([`Pre`]) and instances ([`Instance`]), and the
//! conversions between the version's WIT types and the host's own ([`crate::model`] and
//! [`Answer`]), one module per version (Spin's and Zed's shape). The bindings are in
//! `bindings`, the version's host imports in `state`. A second version is a new variant and a
//! new module here; nothing outside `runtime/` changes.

mod v0_1;
mod v0_2;

pub(crate) use v0_2::parsed;

use wasmtime::Store;
use wasmtime::component::{Component, InstancePre};

use super::state::State;
use crate::model::{
    Condition, Event, ParentMetadata, PluginError, PluginInfo, ReadyCheck, ReconcileRequest,
};

/// The contract versions this host implements, as people read them.
pub const SUPPORTED: &str = "reconhost:plugin@0.1.x, reconhost:plugin@0.2.x";

/// A contract version the host implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// `reconhost:plugin@0.1.x`.
    V0_1,
    /// `reconhost:plugin@0.2.x`: update strategies, waves, parent metadata.
    V0_2,
}

/// A component built against a contract version the host does not implement: the version it
/// names (`reconhost:plugin@<version>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl Contract {
    /// The version a component imports or exports (`reconhost:plugin/...@<version>` names),
    /// with the exact version it names; a component that names none is taken for 0.1.0 (it
    /// fails to link next, as not a reconciler).
    pub fn of(names: &[String]) -> Result<(Self, String), Unsupported> {
        let mut found = None;
        for name in names {
            let Some(rest) = name.strip_prefix("reconhost:plugin/") else {
                continue;
            };
            let version = rest.split_once('@').map_or("", |(_, v)| v);
            let contract = match version {
                v if v.starts_with("0.1.") => Contract::V0_1,
                v if v.starts_with("0.2.") => Contract::V0_2,
                "" => return Err(Unsupported("reconhost:plugin@<unversioned>".to_owned())),
                v => return Err(Unsupported(format!("reconhost:plugin@{v}"))),
            };
            match &found {
                None => found = Some((contract, format!("reconhost:plugin@{version}"))),
                // One component, one contract: imports of one version and exports of another
                // would not link against either world.
                Some((first, named)) if *first != contract => {
                    return Err(Unsupported(format!(
                        "{named} and reconhost:plugin@{version} together"
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(found.unwrap_or_else(|| (Contract::V0_1, "reconhost:plugin@0.1.0".to_owned())))
    }
}

/// What a reconcile answered, in the host's terms but not yet validated: the children and
/// status as the plugin wrote them (JSON text), its conditions and events as given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The desired children, one each.
    pub children: Vec<AnsweredChild>,
    /// The desired status, JSON text, if any.
    pub status: Option<String>,
    /// Conditions to merge into the parent's status.
    pub conditions: Vec<Condition>,
    /// Events to record on the parent.
    pub events: Vec<Event>,
    /// Reconcile again after this many milliseconds.
    pub requeue_after_ms: Option<u64>,
    /// With `finalizing`: cleanup is done.
    pub finalized: bool,
    /// Labels and annotations for the parent (0.2), keys and values as given.
    pub parent_metadata: Option<ParentMetadata>,
}

/// One desired child as answered: the object as JSON text, its wave and its readiness checks
/// with values as JSON text (0.1 children are wave 0 with no checks).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnsweredChild {
    /// The object, JSON text.
    pub object: String,
    /// Its wave.
    pub wave: u32,
    /// What makes it ready.
    pub ready_when: Vec<ReadyCheck<String>>,
}

impl From<String> for AnsweredChild {
    fn from(object: String) -> Self {
        Self {
            object,
            ..Self::default()
        }
    }
}

/// A component's type-checked instance factory, for the version it was built against.
pub enum Pre {
    /// 0.1.
    V0_1(v0_1::Pre),
    /// 0.2.
    V0_2(v0_2::Pre),
}

/// One instance's entry points.
pub enum Instance {
    /// 0.1.
    V0_1(v0_1::Instance),
    /// 0.2.
    V0_2(v0_2::Instance),
}

impl Pre {
    /// Type-checks `pre` against `contract`'s world.
    pub fn new(contract: Contract, pre: InstancePre<State>) -> wasmtime::Result<Self> {
        match contract {
            Contract::V0_1 => Ok(Pre::V0_1(v0_1::new_pre(pre)?)),
            Contract::V0_2 => Ok(Pre::V0_2(v0_2::new_pre(pre)?)),
        }
    }

    /// A new instance in `store`.
    pub fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Instance> {
        match self {
            Pre::V0_1(pre) => Ok(Instance::V0_1(pre.instantiate(store)?)),
            Pre::V0_2(pre) => Ok(Instance::V0_2(pre.instantiate(store)?)),
        }
    }
}

impl Instance {
    /// The plugin's `info()`.
    pub fn info(&self, store: &mut Store<State>) -> wasmtime::Result<PluginInfo> {
        match self {
            Instance::V0_1(i) => v0_1::info(i, store),
            Instance::V0_2(i) => v0_2::info(i, store),
        }
    }

    /// The plugin's `reconcile(request)`: its answer or its own error (the outer result is a
    /// trap or the host's failure).
    pub fn reconcile(
        &self,
        store: &mut Store<State>,
        request: &ReconcileRequest,
    ) -> wasmtime::Result<Result<Answer, PluginError>> {
        match self {
            Instance::V0_1(i) => v0_1::reconcile(i, store, request),
            Instance::V0_2(i) => v0_2::reconcile(i, store, request),
        }
    }
}

/// The names a component imports and exports, to tell its contract by.
pub fn names(engine: &wasmtime::Engine, component: &Component) -> Vec<String> {
    let ty = component.component_type();
    ty.imports(engine)
        .map(|(name, _)| name.to_owned())
        .chain(ty.exports(engine).map(|(name, _)| name.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_should_be_told_by_the_names_a_component_uses() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Contract::of(&names(&[
                "wasi:io/streams@0.2.0",
                "reconhost:plugin/host@0.1.2"
            ])),
            Ok((Contract::V0_1, "reconhost:plugin@0.1.2".to_owned()))
        );
        assert_eq!(
            Contract::of(&names(&["reconhost:plugin/host@0.2.0"])),
            Ok((Contract::V0_2, "reconhost:plugin@0.2.0".to_owned()))
        );
        assert_eq!(
            Contract::of(&names(&["reconhost:plugin/host@99.0.0"])),
            Err(Unsupported("reconhost:plugin@99.0.0".to_owned()))
        );
        assert_eq!(
            Contract::of(&names(&[
                "reconhost:plugin/host@0.1.0",
                "reconhost:plugin/types@0.2.0"
            ])),
            Err(Unsupported(
                "reconhost:plugin@0.1.0 and reconhost:plugin@0.2.0 together".to_owned()
            ))
        );
        assert_eq!(
            Contract::of(&names(&["reconhost:plugin/host"])),
            Err(Unsupported("reconhost:plugin@<unversioned>".to_owned()))
        );
        assert_eq!(
            Contract::of(&names(&["wasi:cli/run@0.2.0"])),
            Ok((Contract::V0_1, "reconhost:plugin@0.1.0".to_owned())),
            "naming none: fails to link next, as not a reconciler"
        );
    }
}
