//! The control loop: informers feed a work queue per plugin; workers reconcile one parent at a
//! time through the plugin, the planner and the applier.
//!
//! Data flows one way: [`informer`] → [`queue`] → [`workers`] → [`reconciler`] → planner →
//! [`applier`] → API server. [`deps`] turns what a reconcile read into the keys to wake when those
//! objects change.
//!
//! What wakes a parent:
//! - a change to the parent itself (initial list and relists at low priority);
//! - a change to an object whose controller ownerReference points at it (its children);
//! - a change to an object its last reconcile read with `get` or `list`;
//! - its own `requeue-after`, and backoff after a failure.

pub mod applied;
pub mod applier;
pub mod cached;
pub mod deps;
pub mod informer;
pub mod queue;
pub mod reconciler;
pub mod store;
pub mod workers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;

use self::applier::Applier;
use self::deps::Dependencies;
use self::informer::{
    CacheReader, DiscoveryError, GroupKind, Informer, Informers, Meta, ObjectKey,
};
use self::queue::{Backoff, Priority, WorkQueue};
use self::reconciler::{Parts, Reconciler};
use crate::metrics::Metrics;
use crate::runtime::Plugin;

/// One plugin's controller: its queue and the kinds it uses, wired to the shared informers.
pub struct Controller {
    name: String,
    queue: WorkQueue<ObjectKey>,
    reconciler: Arc<Reconciler>,
    /// Every informer the plugin uses (parent, children, reads). Workers start only once all
    /// have their first list: before that a missing child may just not be listed yet.
    informers: Vec<Arc<Informer>>,
}

impl Controller {
    /// Resolves the plugin's kinds, creates (or shares) their informers and registers the
    /// handlers that turn changes into queue keys. Nothing runs until [`Controller::run`] and
    /// [`Informers::start`].
    pub async fn new(
        plugin: Plugin,
        config: Value,
        informers: &Informers,
        client: kube::Client,
        metrics: &Metrics,
    ) -> Result<Self, DiscoveryError> {
        let info = plugin.info().clone();
        let parents = informers.informer(&info.parent).await?;
        let mut children = Vec::new();
        for kind in &info.children {
            children.push(informers.informer(kind).await?);
        }
        let mut reads = Vec::new();
        for kind in &info.reads {
            reads.push(informers.informer(kind).await?);
        }

        let queue = WorkQueue::new(metrics.queue(&info.name), Backoff::default());
        let deps = Arc::new(Dependencies::default());
        let parent_kind = GroupKind::from(&info.parent);

        {
            let queue = queue.clone();
            parents.on_change(move |change| {
                if let Some(object) = change.new.or(change.old) {
                    queue.add(object.meta.key.clone(), priority(change.initial));
                }
            });
        }
        let namespaced = parents.kind().namespaced;
        for child in &children {
            let queue = queue.clone();
            let parent_kind = parent_kind.clone();
            child.on_change(move |change| {
                for object in [change.old, change.new].into_iter().flatten() {
                    if let Some(owner) = controller_of(&object.meta, &parent_kind, namespaced) {
                        queue.add(owner, priority(change.initial));
                    }
                }
            });
        }
        for read in &reads {
            let queue = queue.clone();
            let deps = deps.clone();
            let kind = kind_of(read);
            read.on_change(move |change| {
                let (old, new) = (change.old.map(|c| &c.meta), change.new.map(|c| &c.meta));
                for parent in deps.readers_of(&kind, old, new) {
                    queue.add(parent, Priority::Normal);
                }
            });
        }

        let applier = Applier::new(
            client,
            info.clone(),
            parents.kind().clone(),
            children
                .iter()
                .map(|i| (kind_of(i), i.kind().clone()))
                .collect::<HashMap<_, _>>(),
            metrics.plugin(&info.name),
        );
        let informers = std::iter::once(&parents)
            .chain(&children)
            .chain(&reads)
            .cloned()
            .collect();
        let reconciler = Reconciler::new(Parts {
            plugin,
            config,
            parents,
            children,
            reader: Arc::new(CacheReader::new(reads)),
            deps,
            applier,
            metrics: metrics.plugin(&info.name),
        });
        Ok(Self {
            name: info.name,
            queue,
            reconciler: Arc::new(reconciler),
            informers,
        })
    }

    /// The plugin's name, which is also the controller's.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The queue, to shut it down.
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.queue
    }

    /// Waits until every informer the plugin uses holds its first list, then runs `workers`
    /// workers, each also holding one of the `global` permits while it reconciles, until the
    /// queue is shut down and in-flight work has finished.
    ///
    /// Reconciling earlier would be wrong, not just early: a child whose kind is not listed yet
    /// looks missing and would be applied again (controller-runtime and kube-runtime wait for
    /// their caches too). Keys queued meanwhile wait in the queue. There is no time limit: a
    /// watch that cannot list (say, RBAC forbids it) keeps retrying, logs why, and keeps
    /// `/readyz` false.
    ///
    /// Every `sync_period` (zero: never) all parents are queued again at low priority.
    pub async fn run(
        &self,
        workers: usize,
        global: Arc<Semaphore>,
        metrics: crate::metrics::ControllerMetrics,
        sync_period: Duration,
    ) {
        let synced = futures::future::join_all(self.informers.iter().map(|i| i.wait_synced()));
        tokio::select! {
            _ = synced => {}
            () = self.queue.closed() => return,
        }
        tracing::debug!(controller = %self.name, "caches synced; starting workers");
        let reconciler = self.reconciler.clone();
        let parents = self.informers[0].clone();
        tokio::join!(
            workers::run(
                self.queue.clone(),
                workers,
                global,
                metrics,
                move |key: ObjectKey| {
                    let reconciler = reconciler.clone();
                    async move { reconciler.reconcile(&key).await }
                },
            ),
            resync(
                self.queue.clone(),
                move || parents.store().keys(),
                sync_period
            ),
        );
    }
}

/// Queues every key `keys` gives at low priority once per `period` (plus up to 10 % jitter,
/// so hosts started together do not resync in step), until the queue is shut down. A zero
/// period never resyncs.
async fn resync(queue: WorkQueue<ObjectKey>, keys: impl Fn() -> Vec<ObjectKey>, period: Duration) {
    if period.is_zero() {
        return;
    }
    loop {
        tokio::select! {
            () = tokio::time::sleep(jittered(period)) => {}
            () = queue.closed() => return,
        }
        let keys = keys();
        tracing::debug!(parents = keys.len(), "resync");
        for key in keys {
            queue.add(key, Priority::Low);
        }
    }
}

/// `period` stretched by a random fraction of up to 10 %, as controller-runtime's SyncPeriod.
fn jittered(period: Duration) -> Duration {
    use std::hash::BuildHasher as _;
    // A fresh RandomState is seeded from the OS: enough randomness for a jitter.
    let random = std::collections::hash_map::RandomState::new().hash_one(());
    let fraction = (random >> 11) as f64 / (1u64 << 53) as f64;
    period.mul_f64(1.0 + 0.1 * fraction)
}

fn priority(initial: bool) -> Priority {
    if initial {
        Priority::Low
    } else {
        Priority::Normal
    }
}

fn kind_of(informer: &Informer) -> GroupKind {
    let r = &informer.kind().resource;
    GroupKind {
        group: r.group.clone(),
        kind: r.kind.clone(),
    }
}

/// The key of the object's controller owner if that owner is of the parent kind. A namespaced
/// owner lives in the object's namespace; a cluster-scoped one in none.
fn controller_of(object: &Meta, parent: &GroupKind, namespaced: bool) -> Option<ObjectKey> {
    let owner = object.controller.as_ref()?;
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    if group != parent.group || owner.kind != parent.kind {
        return None;
    }
    let namespace = if namespaced {
        object.key.namespace.as_str()
    } else {
        ""
    };
    Some(ObjectKey::new(namespace, owner.name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::QueueMetrics;

    #[tokio::test(start_paused = true)]
    async fn resync_should_queue_every_parent_at_low_priority_once_per_period() {
        let metrics = QueueMetrics::detached();
        let queue = WorkQueue::new(metrics.clone(), Backoff::default());
        let keys = || vec![ObjectKey::new("a", "x"), ObjectKey::new("a", "y")];
        let task = tokio::spawn(resync(queue.clone(), keys, Duration::from_secs(100)));
        tokio::time::sleep(Duration::from_secs(99)).await;
        assert_eq!(queue.len(), 0, "nothing before the period");
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(metrics.depth_low.get(), 2, "both parents, at low priority");
        assert_eq!(metrics.depth_normal.get(), 0);
        queue.shutdown();
        task.await.expect("resync ends with the queue");
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_sync_period_should_never_resync() {
        let queue = WorkQueue::new(QueueMetrics::detached(), Backoff::default());
        resync(
            queue.clone(),
            || vec![ObjectKey::new("a", "x")],
            Duration::ZERO,
        )
        .await;
        tokio::time::sleep(Duration::from_secs(100_000)).await;
        assert!(queue.is_empty());
    }

    #[test]
    fn jitter_should_stay_within_ten_percent() {
        let period = Duration::from_secs(36_000);
        for _ in 0..100 {
            let j = jittered(period);
            assert!(j >= period && j <= period.mul_f64(1.1), "{j:?}");
        }
    }
}
