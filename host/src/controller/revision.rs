//! One revision of a plugin: its code and what it was given (config, limits, identity), the
//! reconciler bound to that identity, and the wires of the kinds it declares. A revision holds
//! no informer of its own and no memory of parents: those belong to the controller's
//! [`Wiring`], which outlives revisions.
//!
//! A revision counts the reconciles it is serving, so a controller that routes its parents to
//! another one can wait for it to drain, and tell the rest to give up after the grace period.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::Context;
use super::applier::Applier;
use super::book::Pages;
use super::health::Health;
use super::reconciler::{Parts, Reconciler, places};
use super::wiring::{PrepareError, Role, Wire, Wiring};
use crate::cache::{CacheReader, GroupKind, Informer, ReadGuard, ResolvedKind};
use crate::identity::{Identity, impersonating};
use crate::keys::RevisionId;
use crate::model::KindRef;
use crate::runtime::Plugin;
use crate::selector::Selector;

/// What a revision is made of: the things a ReconcilePlugin's spec (or a `--plugin` file)
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
    /// How often every parent is queued again though nothing changed (zero: never); `None`
    /// takes the host's `--sync-period`. The stable revision's applies.
    pub resync: Option<Duration>,
    /// Whether a change of nothing but a parent's status leaves it unqueued. The stable
    /// revision's applies.
    pub ignore_parent_status: bool,
    /// The orphans (objects without a controller) it may adopt as children, by their labels;
    /// `None`: none.
    pub adopt: Option<Selector>,
    /// Set when the plugin decorates objects it does not own: which of them, by their
    /// annotations (empty: every one the parent selector selects).
    pub decorator: Option<Selector>,
}

/// One version of a plugin, ready to serve its controller's parents.
pub struct Revision {
    id: RevisionId,
    spec: Spec,
    wiring: Arc<Wiring>,
    reconciler: Reconciler,
    /// The child kinds' wires, then the read kinds'; kept so the wiring keeps watching them.
    wires: Vec<Arc<Wire>>,
    /// How it behaves.
    health: Arc<Health>,
    /// Reconciles serving now; `retired` tells them to give up.
    serving: watch::Sender<usize>,
    retired: watch::Sender<bool>,
}

impl Revision {
    /// Attaches the kinds `spec`'s plugin declares to `wiring` and builds the reconciler bound
    /// to its identity. Serves nothing until its controller routes parents to it.
    pub async fn prepare(
        id: RevisionId,
        spec: Spec,
        wiring: Arc<Wiring>,
        ctx: &Context,
    ) -> Result<Self, PrepareError> {
        let info = spec.plugin.info().clone();
        let mut children = Vec::new();
        for kind in &info.children {
            children.push(wiring.attach(Role::Child, kind).await?);
        }
        let mut reads = Vec::new();
        for kind in &info.reads {
            reads.push(wiring.attach(Role::Read, kind).await?);
        }
        // Writes for the plugin are the plugin's: the API server judges its ServiceAccount. The
        // audit log tells this revision's requests from another's by their User-Agent.
        let agent = format!(
            "plugin/{}@{}",
            info.name,
            super::short(spec.plugin.digest())
        );
        let client = crate::client::acting_for(&ctx.client, &agent);
        let client = match &spec.identity {
            Some(identity) => impersonating(&client, identity),
            None => client,
        };
        let guard = spec.identity.clone().map(|identity| ReadGuard {
            identity,
            access: ctx.access.clone(),
            namespaces: spec.parent_namespaces.clone(),
        });
        let health = Arc::new(Health::default());
        let applier = Applier::new(
            client,
            info.clone(),
            wiring.parents().kind().clone(),
            children
                .iter()
                .map(|w| (w.informer().group_kind(), w.informer().kind().clone()))
                .collect::<HashMap<_, _>>(),
            ctx.metrics.plugin(&info.name),
        );
        let reconciler = Reconciler::new(Parts {
            adopt: spec.adopt.clone(),
            decorator: spec.decorator.is_some(),
            plugin: spec.plugin.clone(),
            config: spec.config.clone(),
            wiring: wiring.clone(),
            children: children.iter().map(|w| Arc::clone(w.informer())).collect(),
            reader: Arc::new(CacheReader::new(
                reads.iter().map(|w| Arc::clone(w.informer())),
                guard,
            )),
            book: Pages::new(wiring.book().clone(), id),
            applier,
            metrics: ctx.metrics.plugin(&info.name),
            bounds: places::Bounds {
                watched: ctx.informers.confined(wiring.scope()).or_else(|| {
                    ctx.informers
                        .namespace()
                        .map(|ns| BTreeSet::from([ns.to_owned()]))
                }),
                protected: ctx.protected_namespaces.clone(),
                lease: ctx.lease.clone(),
            },
            guest_memory: ctx.guest_memory.clone(),
            fights: ctx.fights,
            health: health.clone(),
        });
        Ok(Self {
            id,
            spec,
            wiring,
            reconciler,
            wires: children.into_iter().chain(reads).collect(),
            health,
            serving: watch::Sender::new(0),
            retired: watch::Sender::new(false),
        })
    }

    /// The revision's number within its controller.
    pub fn id(&self) -> RevisionId {
        self.id
    }

    /// What the revision was made of.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.spec.plugin
    }

    /// The wiring it is attached to.
    pub fn wiring(&self) -> &Arc<Wiring> {
        &self.wiring
    }

    /// The reconciler.
    pub fn reconciler(&self) -> &Reconciler {
        &self.reconciler
    }

    /// How it has behaved since it was prepared.
    pub fn health(&self) -> &Health {
        &self.health
    }

    fn informers(&self) -> impl Iterator<Item = &Arc<Informer>> {
        std::iter::once(self.wiring.parents()).chain(self.wires.iter().map(|w| w.informer()))
    }

    /// Completes once every informer the plugin uses holds its first list: before that a
    /// missing child may just not be listed yet.
    pub async fn wait_synced(&self) {
        futures::future::join_all(self.informers().map(|i| i.wait_synced())).await;
    }

    /// A kind the API server refuses to let the host list or watch, and its message.
    pub fn forbidden(&self) -> Option<(GroupKind, String)> {
        self.informers()
            .find_map(|i| i.forbidden().map(|m| (i.group_kind(), m)))
    }

    /// The kinds whose first list is not cached yet.
    pub fn unsynced(&self) -> Vec<GroupKind> {
        let mut kinds: Vec<GroupKind> = self
            .informers()
            .filter(|i| !i.is_synced())
            .map(|i| i.group_kind())
            .collect();
        kinds.dedup();
        kinds
    }

    /// The kinds as discovery resolved them: the parent, the children, the reads.
    pub fn kinds(&self) -> (ResolvedKind, Vec<ResolvedKind>, Vec<ResolvedKind>) {
        let info = self.spec.plugin.info();
        let resolved = |k: &KindRef| {
            self.informers()
                .find(|i| i.group_kind() == GroupKind::from(k))
                .map(|i| i.kind().clone())
        };
        (
            self.wiring.parents().kind().clone(),
            info.children.iter().filter_map(resolved).collect(),
            info.reads.iter().filter_map(resolved).collect(),
        )
    }

    /// Counts a reconcile this revision serves until the guard drops.
    pub fn enter(self: &Arc<Self>) -> Serving {
        self.serving.send_modify(|n| *n += 1);
        Serving(self.clone())
    }

    /// Completes when this revision's reconciles must give up (see [`Revision::retire`]).
    pub async fn retired(&self) {
        let _ = self.retired.subscribe().wait_for(|r| *r).await;
    }

    /// Completes once no reconcile is serving on this revision.
    pub async fn drained(&self) {
        let _ = self.serving.subscribe().wait_for(|n| *n == 0).await;
    }

    /// Tells the reconciles still serving on this revision to give up: they end as failures,
    /// retried on whatever serves their parent next.
    pub fn retire(&self) {
        self.retired.send_replace(true);
    }
}

/// A reconcile in progress on a revision; dropping it says so.
pub struct Serving(Arc<Revision>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.send_modify(|n| *n -= 1);
    }
}
