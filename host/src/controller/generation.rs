//! One version of a plugin wired to the caches: its informers (acquired, so their watches run),
//! the handlers that turn changes into keys of the controller's queue, and the reconciler with
//! its per-version memory, one [`ParentBook`] (failures for good, applied bodies, fight
//! breakers, dependencies, per parent).
//!
//! A controller swaps generations (an upgrade, a changed config or limits) without losing its
//! queue: the next generation is prepared beside the running one, waits for its own caches, and
//! only then takes over. Dropping a generation unregisters its handlers and releases its
//! informers; a kind no generation uses any more stops being watched.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::Context;
use super::applier::Applier;
use super::book::ParentBook;
use super::queue::{Priority, WorkQueue};
use super::reconciler::{Parts, Reconciler, places};
use super::schema::{self, ParentSchema, WatchHandle};
use crate::cache::{
    CacheReader, DiscoveryError, GroupKind, Informer, InformerRef, Meta, ObjectKey, ReadGuard,
    Registration, ResolvedKind,
};
use crate::identity::{Identity, impersonating};
use crate::model::{KindRef, group_of};
use crate::planner::StatusFields;
use crate::runtime::Plugin;
use crate::selector::Selector;

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
    /// The ServiceAccount the plugin acts as: its writes are made as it, its reads limited to
    /// what it may read. `None` (the static `--plugin` mode) acts as the host.
    pub identity: Option<Identity>,
    /// The parents it reconciles (empty: all of the kind).
    pub parent_selector: Selector,
    /// The namespaces it reconciles parents in (`None`: every one).
    pub parent_namespaces: Option<BTreeSet<String>>,
}

/// Why a generation could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A kind the plugin uses is not served.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// A namespaced parent's plugin declares a cluster-scoped child kind.
    #[error(
        "child kind {child} is cluster-scoped, but the parent kind {parent} is namespaced: a namespaced parent's children live in its namespace"
    )]
    ClusterScopedChild {
        /// The child kind.
        child: GroupKind,
        /// The parent kind.
        parent: GroupKind,
    },
    /// The parent is a built-in kind and the operator has not allowed that.
    #[error(
        "parent kind {parent} is not a custom resource: a plugin for it would put its finalizer and status on every such object in the cluster; the host's operator allows this with --allow-builtin-parents"
    )]
    BuiltinParent {
        /// The parent kind.
        parent: GroupKind,
    },
    /// Asking whether the parent is a custom resource failed.
    #[error("looking up the CustomResourceDefinition of {parent}: {source}")]
    Lookup {
        /// The parent kind.
        parent: GroupKind,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
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
    /// Kept for its `Drop`: the watch on the parent kind's CRD.
    _schema: Option<WatchHandle>,
}

impl Generation {
    /// Resolves the plugin's kinds, acquires their informers (starting watches that nobody runs
    /// yet) and registers the handlers that feed `queue`. Handlers registered on a running
    /// informer are replayed its cache, so nothing that happened before is missed.
    pub async fn prepare(
        spec: Spec,
        ctx: &Context,
        queue: &WorkQueue<ObjectKey>,
    ) -> Result<Self, PrepareError> {
        let (informers, metrics) = (&ctx.informers, &ctx.metrics);
        // Writes for the plugin are the plugin's: the API server judges its ServiceAccount.
        let client = match &spec.identity {
            Some(identity) => impersonating(&ctx.client, identity),
            None => ctx.client.clone(),
        };
        let guard = spec.identity.clone().map(|identity| ReadGuard {
            identity,
            access: ctx.access.clone(),
            namespaces: spec.parent_namespaces.clone(),
        });
        let info = spec.plugin.info().clone();
        // A confined plugin's kinds are watched only where it works: the host's share of its
        // RBAC is granted only there.
        let scope = spec.parent_namespaces.as_ref();
        let parents = informers.acquire_in(&info.parent, scope).await?;
        let crd = schema::crd_of(&ctx.client, parents.kind())
            .await
            .map_err(|source| PrepareError::Lookup {
                parent: parents.group_kind(),
                source,
            })?;
        if crd.is_none() && !ctx.allow_builtin_parents {
            return Err(PrepareError::BuiltinParent {
                parent: parents.group_kind(),
            });
        }
        let fields = crd.as_ref().map_or_else(StatusFields::all, |crd| {
            StatusFields::from_crd(crd, &parents.kind().resource.version)
        });
        let status_schema = Arc::new(ParentSchema::new(&parents.kind().resource.kind, fields));
        let mut children = Vec::new();
        for kind in &info.children {
            let child = informers.acquire_in(kind, scope).await?;
            if parents.kind().namespaced && !child.kind().namespaced {
                return Err(PrepareError::ClusterScopedChild {
                    child: child.group_kind(),
                    parent: parents.group_kind(),
                });
            }
            children.push(child);
        }
        let mut reads = Vec::new();
        for kind in &info.reads {
            reads.push(informers.acquire_in(kind, scope).await?);
        }

        let book = Arc::new(ParentBook::default());
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
        // A child or a read object that changes is a new input: a parent that failed for good
        // on the old one is tried again.
        for child in &children {
            let (queue, book) = (queue.clone(), book.clone());
            let parent_kind = parent_kind.clone();
            registrations.push(child.on_change(move |change| {
                for object in [change.old, change.new].into_iter().flatten() {
                    if let Some(owner) = controller_of(&object.meta, &parent_kind, namespaced) {
                        book.input_changed(&owner);
                        queue.add(owner, priority(change.initial));
                    }
                }
            }));
        }
        for read in &reads {
            let (queue, book) = (queue.clone(), book.clone());
            let kind = read.group_kind();
            registrations.push(read.on_change(move |change| {
                let (old, new) = (change.old.map(|c| &c.meta), change.new.map(|c| &c.meta));
                for parent in book.deps().readers_of(&kind, old, new) {
                    book.input_changed(&parent);
                    queue.add(parent, Priority::Normal);
                }
            }));
        }

        // A CRD that comes to declare (or drops) the host's fields changes every parent's
        // status, failed ones included.
        let schema_watch = crd.is_some().then(|| {
            let (queue, book) = (queue.clone(), book.clone());
            let replayed = Arc::clone(&parents);
            schema::watch(
                ctx.client.clone(),
                parents.kind(),
                status_schema.clone(),
                move || {
                    book.all_inputs_changed();
                    for key in replayed.store().keys() {
                        queue.add(key, Priority::Low);
                    }
                },
            )
        });

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
            reader: Arc::new(CacheReader::new(reads.iter().map(|r| Arc::clone(r)), guard)),
            book,
            applier,
            metrics: metrics.plugin(&info.name),
            selector: spec.parent_selector.clone(),
            namespaces: spec.parent_namespaces.clone(),
            bounds: places::Bounds {
                watched: ctx
                    .informers
                    .confined(spec.parent_namespaces.as_ref())
                    .or_else(|| {
                        ctx.informers
                            .namespace()
                            .map(|ns| BTreeSet::from([ns.to_owned()]))
                    }),
                protected: ctx.protected_namespaces.clone(),
                lease: ctx.lease.clone(),
            },
            guest_memory: ctx.guest_memory.clone(),
            schema: status_schema,
            fights: ctx.fights,
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
            _schema: schema_watch,
        })
    }

    /// Completes once every informer the plugin uses holds its first list.
    pub async fn wait_synced(&self) {
        futures::future::join_all(self.informers.iter().map(|i| i.wait_synced())).await;
    }

    /// A kind the API server refuses to let the host list or watch, and its message.
    pub fn forbidden(&self) -> Option<(GroupKind, String)> {
        self.informers
            .iter()
            .find_map(|i| i.forbidden().map(|m| (i.group_kind(), m)))
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

    /// The kinds as discovery resolved them: the parent, the children, the reads.
    pub fn kinds(&self) -> (ResolvedKind, Vec<ResolvedKind>, Vec<ResolvedKind>) {
        let info = self.spec.plugin.info();
        let resolved = |k: &KindRef| {
            self.informers
                .iter()
                .find(|i| i.group_kind() == GroupKind::from(k))
                .map(|i| i.kind().clone())
        };
        (
            self.parents().kind().clone(),
            info.children.iter().filter_map(resolved).collect(),
            info.reads.iter().filter_map(resolved).collect(),
        )
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
