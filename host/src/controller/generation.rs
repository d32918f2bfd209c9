//! One version of a plugin wired to the caches: its informers (acquired, so their watches run),
//! the handlers that turn changes into keys of the controller's queue, and the reconciler with
//! its per-version memory (permanent failures, applied bodies, dependencies).
//!
//! A controller swaps generations (an upgrade, a changed config or limits) without losing its
//! queue: the next generation is prepared beside the running one, waits for its own caches, and
//! only then takes over. Dropping a generation unregisters its handlers and releases its
//! informers; a kind no generation uses any more stops being watched.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::applier::Applier;
use super::deps::Dependencies;
use super::queue::{Priority, WorkQueue};
use super::reconciler::{Parts, Reconciler};
use crate::cache::{
    CacheReader, DiscoveryError, GroupKind, Informer, InformerRef, Informers, Meta, ObjectKey,
    Registration,
};
use crate::metrics::Metrics;
use crate::model::{KindRef, group_of};
use crate::runtime::Plugin;

/// What a generation is made of: the things a ReconcilePlugin's spec (or a `--plugin` file)
/// decides.
#[derive(Clone)]
pub struct Spec {
    /// The loaded plugin (its code, its limits).
    pub plugin: Plugin,
    /// Its configuration, handed to every call.
    pub config: Value,
    /// How many of its parents may be reconciled at once.
    pub concurrency: usize,
}

/// One running version of a plugin.
pub struct Generation {
    spec: Spec,
    reconciler: Arc<Reconciler>,
    /// Every informer the plugin uses, the parent's first. Workers start only once all have
    /// their first list: before that a missing child may just not be listed yet.
    informers: Vec<InformerRef>,
    /// Kept for their `Drop`: the handlers feeding the controller's queue.
    _registrations: Vec<Registration>,
}

impl Generation {
    /// Resolves the plugin's kinds, acquires their informers (starting watches that nobody runs
    /// yet) and registers the handlers that feed `queue`. Handlers registered on a running
    /// informer are replayed its cache, so nothing that happened before is missed.
    pub async fn prepare(
        spec: Spec,
        informers: &Informers,
        client: kube::Client,
        metrics: &Metrics,
        queue: &WorkQueue<ObjectKey>,
    ) -> Result<Self, DiscoveryError> {
        let info = spec.plugin.info().clone();
        let parents = informers.acquire(&info.parent).await?;
        let mut children = Vec::new();
        for kind in &info.children {
            children.push(informers.acquire(kind).await?);
        }
        let mut reads = Vec::new();
        for kind in &info.reads {
            reads.push(informers.acquire(kind).await?);
        }

        let deps = Arc::new(Dependencies::default());
        let parent_kind = GroupKind::from(&info.parent);
        let namespaced = parents.kind().namespaced;
        let mut registrations = Vec::new();
        {
            let queue = queue.clone();
            registrations.push(parents.on_change(move |change| {
                if let Some(object) = change.new.or(change.old) {
                    queue.add(object.meta.key.clone(), priority(change.initial));
                }
            }));
        }
        for child in &children {
            let queue = queue.clone();
            let parent_kind = parent_kind.clone();
            registrations.push(child.on_change(move |change| {
                for object in [change.old, change.new].into_iter().flatten() {
                    if let Some(owner) = controller_of(&object.meta, &parent_kind, namespaced) {
                        queue.add(owner, priority(change.initial));
                    }
                }
            }));
        }
        for read in &reads {
            let queue = queue.clone();
            let deps = deps.clone();
            let kind = read.group_kind();
            registrations.push(read.on_change(move |change| {
                let (old, new) = (change.old.map(|c| &c.meta), change.new.map(|c| &c.meta));
                for parent in deps.readers_of(&kind, old, new) {
                    queue.add(parent, Priority::Normal);
                }
            }));
        }

        let applier = Applier::new(
            client,
            info.clone(),
            parents.kind().clone(),
            children
                .iter()
                .map(|i| (i.group_kind(), i.kind().clone()))
                .collect::<HashMap<_, _>>(),
            metrics.plugin(&info.name),
        );
        let reconciler = Reconciler::new(Parts {
            plugin: spec.plugin.clone(),
            config: spec.config.clone(),
            parents: Arc::clone(&parents),
            children: children.iter().map(|c| Arc::clone(c)).collect(),
            reader: Arc::new(CacheReader::new(reads.iter().map(|r| Arc::clone(r)))),
            deps,
            applier,
            metrics: metrics.plugin(&info.name),
        });
        let informers = std::iter::once(parents)
            .chain(children)
            .chain(reads)
            .collect();
        Ok(Self {
            spec,
            reconciler: Arc::new(reconciler),
            informers,
            _registrations: registrations,
        })
    }

    /// Completes once every informer the plugin uses holds its first list.
    pub async fn wait_synced(&self) {
        futures::future::join_all(self.informers.iter().map(|i| i.wait_synced())).await;
    }

    /// The kinds whose first list is not cached yet.
    pub fn unsynced(&self) -> Vec<GroupKind> {
        let mut kinds: Vec<GroupKind> = self
            .informers
            .iter()
            .filter(|i| !i.is_synced())
            .map(|i| i.group_kind())
            .collect();
        kinds.dedup();
        kinds
    }

    /// What the generation was made of.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.spec.plugin
    }

    /// The reconciler.
    pub fn reconciler(&self) -> &Arc<Reconciler> {
        &self.reconciler
    }

    /// The parent kind's informer.
    pub fn parents(&self) -> &Arc<Informer> {
        &self.informers[0]
    }
}

fn priority(initial: bool) -> Priority {
    if initial {
        Priority::Low
    } else {
        Priority::Normal
    }
}

/// The key of the object's controller owner if that owner is of the parent kind. A namespaced
/// owner lives in the object's namespace; a cluster-scoped one in none.
fn controller_of(object: &Meta, parent: &GroupKind, namespaced: bool) -> Option<ObjectKey> {
    let owner = object.controller.as_ref()?;
    if group_of(&owner.api_version) != parent.group || owner.kind != parent.kind {
        return None;
    }
    let namespace = if namespaced {
        object.key.namespace.as_str()
    } else {
        ""
    };
    Some(ObjectKey::new(namespace, owner.name.as_str()))
}

/// Whether two kinds name the same kind (any version of it).
pub fn same_kind(a: &KindRef, b: &KindRef) -> bool {
    GroupKind::from(a) == GroupKind::from(b)
}
