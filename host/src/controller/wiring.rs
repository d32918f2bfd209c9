//! The wiring of one controller's parent kind: its informers and the handlers that turn their
//! changes into keys of the controller's queue, the parent kind's status schema, and what is
//! shared by every revision that serves the kind (the [`ParentBook`], the write pace).
//!
//! A wiring outlives the plugin's revisions: a revision [`Wiring::attach`]es the child and read
//! kinds it declares, and the wiring holds each kind's informer and handler as long as some
//! revision uses it ([`Wire`], shared through `Arc`). A kind no revision uses any more is
//! released, and stops being watched once nothing else in the host uses it. The parent kind's
//! informer belongs to the wiring itself. A wiring is made for one set of namespaces (the
//! plugin's `spec.namespaces`): a revision confined elsewhere gets a wiring of its own.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use super::Context;
use super::book::ParentBook;
use super::converge::Converge;
use super::pace::{self, Pace};
use super::queue::{Priority, WorkQueue};
use super::route::Assignment;
use super::schema::{self, ParentSchema, WatchHandle};
use super::trigger::{Seen, Trigger, Triggers};
use crate::cache::{
    Change, DiscoveryError, GroupKind, Informer, InformerRef, Informers, Meta, ObjectKey,
    Registration,
};
use crate::metrics::PluginMetrics;
use crate::model::{KindRef, group_of};
use crate::planner::StatusFields;

/// Why a controller could not be wired to its kinds.
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

/// What a kind is to the revisions that attach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Objects the plugin creates, owned by their parent: a change wakes the owner.
    Child,
    /// Objects the plugin reads: a change wakes the parents whose last reconcile read it.
    Read,
}

/// The controller's queue as the watches feed it: a key goes in only if this replica owns the
/// parent now. With sharding, every replica receives every watch event, and most of them are
/// other replicas' parents: noting their trigger and queueing them, only for a worker to take
/// each off the queue and skip it, spent turns of the replica's CPU quota on nothing (a replica
/// converging at its quota used 90 % of it for its own parents; see docs/BENCHMARKS.md).
///
/// Nothing is lost to the filter: a handler runs after the cache holds the change, and the
/// supervisor publishes an assignment before the controller walks the cache for the parents
/// it gained. A key refused under the old assignment was cached before that walk, which
/// queues it; one cached after the publication is judged by the new assignment.
#[derive(Clone)]
struct Inbox {
    queue: WorkQueue<ObjectKey>,
    assignment: tokio::sync::watch::Receiver<Assignment>,
}

impl Inbox {
    fn owns(&self, key: &ObjectKey) -> bool {
        self.assignment.borrow().owns(key)
    }

    fn add(&self, key: ObjectKey, priority: Priority) {
        self.queue.add(key, priority);
    }
}

/// One kind's informer with its handler into the queue, held while a revision uses it.
pub struct Wire {
    informer: InformerRef,
    /// Kept for its `Drop`: the handler feeding the controller's queue.
    _registration: Registration,
}

impl Wire {
    /// The kind's informer.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }
}

/// The wiring of one parent kind.
pub struct Wiring {
    parents: InformerRef,
    scope: Option<BTreeSet<String>>,
    schema: Arc<ParentSchema>,
    book: Arc<ParentBook>,
    pace: Pace<ObjectKey>,
    /// New generations seen and not yet converged.
    converge: Arc<Converge>,
    /// Why each queued parent was queued, while traces are exported.
    triggers: Arc<Triggers>,
    metrics: PluginMetrics,
    /// The controller's queue, behind this replica's assignment.
    inbox: Inbox,
    informers: Informers,
    wires: Mutex<HashMap<(Role, GroupKind), Weak<Wire>>>,
    /// Whether a change of nothing but a parent's status leaves it unqueued (the serving
    /// plugin asked so).
    ignore_status: Arc<AtomicBool>,
    /// Whether a CustomResourceDefinition serves the parent kind (not a built-in kind).
    crd: bool,
    /// Kept for their `Drop`: the parent kind's handler and the watch on its CRD.
    _parent_handler: Registration,
    _schema: Option<WatchHandle>,
}

impl Wiring {
    /// Acquires the parent kind's informer (confined to `scope`), checks that the kind is one a
    /// plugin may reconcile, and registers the handler that queues a parent when it changes.
    /// Handlers registered on a running informer are replayed its cache, so nothing that
    /// happened before is missed.
    pub async fn new(
        plugin: &str,
        parent: &KindRef,
        scope: Option<BTreeSet<String>>,
        ctx: &Context,
        queue: &WorkQueue<ObjectKey>,
    ) -> Result<Self, PrepareError> {
        let parents = ctx.informers.acquire_in(parent, scope.as_ref()).await?;
        if let Some(sieve) = ctx.informers.sieve() {
            sieve.parent_kind(parents.group_kind(), parents.kind().namespaced);
        }
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
        let book = Arc::new(ParentBook::default());
        let ignore_status = Arc::new(AtomicBool::new(false));
        let converge = Arc::new(Converge::default());
        let triggers = Arc::new(Triggers::default());
        let inbox = Inbox {
            queue: queue.clone(),
            assignment: ctx.assignment.clone(),
        };
        let parent_handler = {
            let (inbox, ignore_status) = (inbox.clone(), ignore_status.clone());
            let (converge, triggers) = (converge.clone(), triggers.clone());
            let kind = parents.kind().resource.kind.clone();
            parents.on_change(move |change| {
                let Some(object) = change.new.or(change.old) else {
                    return;
                };
                if !inbox.owns(&object.meta.key) {
                    return;
                }
                // A generation first seen while watching starts its time to converge.
                if let Some(new) = change.new
                    && !change.initial
                    && change
                        .old
                        .is_none_or(|old| old.meta.generation != new.meta.generation)
                {
                    converge.seen(&new.meta.key, new.meta.generation, Instant::now());
                }
                let Some(priority) = parent_priority(change, ignore_status.load(Ordering::Relaxed))
                else {
                    return;
                };
                let cause = || {
                    if change.initial {
                        Trigger::Initial
                    } else {
                        Trigger::Parent(Seen::of(&kind, object))
                    }
                };
                triggers.record_with(&object.meta.key, cause, Instant::now());
                inbox.add(object.meta.key.clone(), priority);
            })
        };
        // A CRD that comes to declare (or drops) the host's fields changes every parent's
        // status, failed ones included.
        let schema_watch = crd.is_some().then(|| {
            let (inbox, book, triggers) = (inbox.clone(), book.clone(), triggers.clone());
            let replayed = Arc::clone(&parents);
            schema::watch(
                ctx.client.clone(),
                parents.kind(),
                status_schema.clone(),
                move || {
                    book.all_inputs_changed();
                    for key in replayed.store().keys() {
                        if inbox.owns(&key) {
                            triggers.record(&key, Trigger::Route, Instant::now());
                            inbox.add(key, Priority::Low);
                        }
                    }
                },
            )
        });
        Ok(Self {
            parents,
            scope,
            schema: status_schema,
            book,
            pace: Pace::new(pace::Bounds::default()),
            converge,
            triggers,
            metrics: ctx.metrics.plugin(plugin),
            inbox,
            informers: ctx.informers.clone(),
            wires: Mutex::default(),
            ignore_status,
            crd: crd.is_some(),
            _parent_handler: parent_handler,
            _schema: schema_watch,
        })
    }

    /// The wire of `kind` in `role`, shared with every revision that attached it; acquires the
    /// informer and registers its handler if no revision holds it now.
    pub async fn attach(&self, role: Role, kind: &KindRef) -> Result<Arc<Wire>, PrepareError> {
        let group_kind = GroupKind::from(kind);
        let slot = (role, group_kind);
        if let Some(wire) = self.live(&slot) {
            return Ok(wire);
        }
        let informer = match role {
            Role::Child => {
                self.informers
                    .acquire_children_in(kind, self.scope.as_ref())
                    .await?
            }
            Role::Read => self.informers.acquire_in(kind, self.scope.as_ref()).await?,
        };
        if role == Role::Child && self.parents.kind().namespaced && !informer.kind().namespaced {
            return Err(PrepareError::ClusterScopedChild {
                child: informer.group_kind(),
                parent: self.parents.group_kind(),
            });
        }
        let mut wires = self.wires.lock().expect("wiring lock poisoned");
        // Another revision may have attached it while discovery ran.
        if let Some(wire) = wires.get(&slot).and_then(Weak::upgrade) {
            return Ok(wire);
        }
        let registration = match role {
            Role::Child => self.child_handler(&informer),
            Role::Read => self.read_handler(&informer),
        };
        let wire = Arc::new(Wire {
            informer,
            _registration: registration,
        });
        wires.retain(|_, w| w.strong_count() > 0);
        wires.insert(slot, Arc::downgrade(&wire));
        Ok(wire)
    }

    fn live(&self, slot: &(Role, GroupKind)) -> Option<Arc<Wire>> {
        let wires = self.wires.lock().expect("wiring lock poisoned");
        wires.get(slot).and_then(Weak::upgrade)
    }

    /// A child that changes wakes its owner; it is a new input, so a parent that failed for
    /// good on the old one is tried again.
    fn child_handler(&self, informer: &Arc<Informer>) -> Registration {
        let (inbox, book) = (self.inbox.clone(), self.book.clone());
        let triggers = self.triggers.clone();
        let parent_kind = self.parents.group_kind();
        let namespaced = self.parents.kind().namespaced;
        let kind = informer.kind().resource.kind.clone();
        informer.on_change(move |change| {
            for object in [change.old, change.new].into_iter().flatten() {
                if let Some(owner) = controller_of(&object.meta, &parent_kind, namespaced)
                    && inbox.owns(&owner)
                {
                    book.input_changed(&owner);
                    let seen = || Trigger::Child(Seen::of(&kind, change.new.unwrap_or(object)));
                    triggers.record_with(&owner, seen, Instant::now());
                    inbox.add(owner, priority(change.initial, reports_only(change)));
                }
            }
        })
    }

    /// A read object that changes wakes the parents whose last reconcile read it.
    fn read_handler(&self, informer: &Arc<Informer>) -> Registration {
        let (inbox, book) = (self.inbox.clone(), self.book.clone());
        let triggers = self.triggers.clone();
        let kind = informer.group_kind();
        let kind_name = informer.kind().resource.kind.clone();
        informer.on_change(move |change| {
            let (old, new) = (change.old.map(|c| &c.meta), change.new.map(|c| &c.meta));
            for parent in book.deps().readers_of(&kind, old, new) {
                if !inbox.owns(&parent) {
                    continue;
                }
                book.input_changed(&parent);
                if let Some(object) = change.new.or(change.old) {
                    let seen = || Trigger::Dependency(Seen::of(&kind_name, object));
                    triggers.record_with(&parent, seen, Instant::now());
                }
                inbox.add(parent, Priority::Normal);
            }
        })
    }

    /// Whether a CustomResourceDefinition serves the parent kind (not a built-in kind).
    pub fn has_crd(&self) -> bool {
        self.crd
    }

    /// Whether a change of nothing but a parent's status leaves it unqueued from now on.
    pub fn ignore_status_changes(&self, ignore: bool) {
        self.ignore_status.store(ignore, Ordering::Relaxed);
    }

    /// The parent kind's informer.
    pub fn parents(&self) -> &Arc<Informer> {
        &self.parents
    }

    /// The namespaces the wiring watches parents and children in (`None`: all the host does).
    pub fn scope(&self) -> Option<&BTreeSet<String>> {
        self.scope.as_ref()
    }

    /// Which of the host's status fields the parent kind admits.
    pub fn schema(&self) -> &Arc<ParentSchema> {
        &self.schema
    }

    /// Everything remembered per parent.
    pub fn book(&self) -> &Arc<ParentBook> {
        &self.book
    }

    /// The generations seen and not yet converged.
    pub fn converge(&self) -> &Converge {
        &self.converge
    }

    /// Why each queued parent was queued.
    pub fn triggers(&self) -> &Triggers {
        &self.triggers
    }

    /// How fast the plugin's writes may go, whichever revision makes them.
    pub fn pace(&self) -> &Pace<ObjectKey> {
        &self.pace
    }

    /// Drops what is remembered of a parent no revision reconciles any more: it is gone, or
    /// left the selection.
    pub fn forget(&self, key: &ObjectKey) {
        if self
            .book
            .forget(key)
            .is_some_and(|page| !page.fights.is_empty())
        {
            self.metrics
                .contested(self.book.count(|p| p.fights.contested()));
        }
        self.pace.forget(key);
        self.converge.forget(key);
        self.triggers.forget(key);
    }
}

/// How urgent the work a parent's or a child's change makes is: low for the first list, status
/// for a change that `reports` (asks for nothing new), normal for the rest.
fn priority(initial: bool, reports: bool) -> Priority {
    match (initial, reports) {
        (true, _) => Priority::Low,
        (false, true) => Priority::Status,
        (false, false) => Priority::Normal,
    }
}

/// The priority of a parent's own change, or `None` for a change left unqueued: one in its
/// status alone while `ignoring_status`. The host's own write coming back asks for nothing new;
/// whether another change does is told from the whole object, once.
fn parent_priority(change: &Change<'_>, ignoring_status: bool) -> Option<Priority> {
    let status_only = (ignoring_status || !change.written)
        && match (change.old, change.new) {
            (Some(old), Some(new)) => new.changed_only_in_status(old),
            _ => false,
        };
    if status_only && ignoring_status {
        return None;
    }
    Some(priority(change.initial, change.written || status_only))
}

/// Whether a child's change asks its parent for nothing new: the host's own write coming back,
/// or a change of a kind that keeps a generation in which the generation, the labels and the
/// controller stayed (a status reported, such as the Deployment controller's). Told from the
/// metadata alone, as every child event of every parent comes this way; a change to a child's
/// annotations alone counts as a report too, and is reconciled all the same, after the
/// changes that ask.
fn reports_only(change: &Change<'_>) -> bool {
    if change.written {
        return true;
    }
    let (Some(old), Some(new)) = (change.old, change.new) else {
        return false;
    };
    let (old, new) = (&old.meta, &new.meta);
    new.generation > 0
        && new.generation == old.generation
        && new.controller() == old.controller()
        && new.labels().eq(old.labels())
}

/// The key of the object's controller owner if that owner is of the parent kind. A namespaced
/// owner lives in the object's namespace; a cluster-scoped one in none.
fn controller_of(object: &Meta, parent: &GroupKind, namespaced: bool) -> Option<ObjectKey> {
    let owner = object.controller()?;
    if group_of(owner.api_version) != parent.group || owner.kind != parent.kind {
        return None;
    }
    let namespace = if namespaced {
        object.key.namespace.as_str()
    } else {
        ""
    };
    Some(ObjectKey::new(namespace, owner.name))
}

/// Whether two kinds name the same kind (any version of it).
pub fn same_kind(a: &KindRef, b: &KindRef) -> bool {
    GroupKind::from(a) == GroupKind::from(b)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::cache::Cached;

    fn deployment(generation: i64, app: &str, ready: i64) -> Cached {
        Cached::new(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "team", "uid": "u1",
                "resourceVersion": ready.to_string(),
                "generation": generation, "labels": {"app": app},
                "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp",
                                     "name": "web", "uid": "p1", "controller": true}],
            },
            "status": {"readyReplicas": ready},
        }))
    }

    fn change<'a>(old: Option<&'a Cached>, new: Option<&'a Cached>, written: bool) -> Change<'a> {
        Change {
            old,
            new,
            initial: false,
            written,
        }
    }

    #[test]
    fn a_child_change_should_be_status_work_only_when_it_asks_for_nothing_new() {
        let before = deployment(1, "web", 0);
        let ready = deployment(1, "web", 1);
        let respecced = deployment(2, "web", 1);
        let relabelled = deployment(1, "other", 1);
        let mut orphaned = deployment(1, "web", 1);
        let mut value: Value = orphaned.value();
        value["metadata"]["ownerReferences"] = json!([]);
        orphaned = Cached::new(value);
        let mut unversioned = deployment(0, "web", 0);
        let asks = |c: Change<'_>| priority(c.initial, reports_only(&c));

        assert_eq!(
            asks(change(Some(&before), Some(&ready), false)),
            Priority::Status
        );
        assert_eq!(
            asks(change(None, Some(&before), true)),
            Priority::Status,
            "its own create coming back"
        );
        for (what, new) in [
            ("a new generation", &respecced),
            ("other labels", &relabelled),
            ("another controller", &orphaned),
        ] {
            assert_eq!(
                asks(change(Some(&before), Some(new), false)),
                Priority::Normal,
                "{what}"
            );
        }
        assert_eq!(
            asks(change(None, Some(&before), false)),
            Priority::Normal,
            "created by someone"
        );
        assert_eq!(
            asks(change(Some(&before), None, false)),
            Priority::Normal,
            "deleted"
        );
        let value = unversioned.value();
        unversioned = Cached::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": value["metadata"].clone(), "data": {"a": "b"}}));
        let changed = Cached::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": value["metadata"].clone(), "data": {"a": "c"}}));
        assert_eq!(
            asks(change(Some(&unversioned), Some(&changed), false)),
            Priority::Normal,
            "a kind without a generation cannot tell"
        );
        let initial = Change {
            initial: true,
            ..change(Some(&before), Some(&respecced), false)
        };
        assert_eq!(asks(initial), Priority::Low);
    }

    fn webapp(generation: i64, image: &str, observed: i64) -> Cached {
        Cached::new(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "web", "namespace": "team", "uid": "p1",
                         "resourceVersion": (generation * 10 + observed).to_string(),
                         "generation": generation},
            "spec": {"image": image},
            "status": {"observedGeneration": observed},
        }))
    }

    #[test]
    fn a_parent_change_should_be_status_work_when_it_is_a_report_or_the_hosts_own_write() {
        let (v1, synced) = (webapp(1, "a", 0), webapp(1, "a", 1));
        let changed = webapp(2, "b", 1);
        let both = |c: &Change<'_>| (parent_priority(c, false), parent_priority(c, true));
        assert_eq!(
            both(&change(Some(&v1), Some(&synced), true)),
            (Some(Priority::Status), None),
            "its own status write: status work, or nothing while status changes are ignored"
        );
        assert_eq!(
            both(&change(Some(&v1), Some(&synced), false)),
            (Some(Priority::Status), None),
            "another writer's status"
        );
        assert_eq!(
            both(&change(Some(&synced), Some(&changed), false)),
            (Some(Priority::Normal), Some(Priority::Normal)),
            "a new spec"
        );
        assert_eq!(
            both(&change(None, Some(&v1), false)),
            (Some(Priority::Normal), Some(Priority::Normal)),
            "created"
        );
        assert_eq!(
            both(&change(Some(&v1), None, false)),
            (Some(Priority::Normal), Some(Priority::Normal)),
            "deleted"
        );
    }
}
