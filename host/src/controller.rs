//! The control loop of one parent kind: informers feed the kind's work queue; a pool of workers
//! takes keys, and for each the [`route`] decides which revision of the plugin serves it; that
//! revision's reconciler calls the plugin, plans and applies.
//!
//! Data flows one way: informers ([`crate::cache`]) → [`queue`] → [`workers`] → [`route`] →
//! [`reconciler`] → planner → [`applier`] → API server. [`deps`] turns what a reconcile read
//! into the keys to wake when those objects change.
//!
//! What wakes a parent:
//! - a change to the parent itself (initial list and relists at low priority);
//! - a change to an object whose controller ownerReference points at it (its children);
//! - a change to an object its last reconcile read with `get` or `list`;
//! - its own `requeue-after`, and backoff after a failure;
//! - a new revision of the plugin (every parent, once, at low priority).
//!
//! A [`Controller`] outlives the revisions of its plugin. It owns the queue, one worker pool,
//! the [`Wiring`] of its kinds (informers, handlers, the per-parent [`book::ParentBook`]) and
//! the [`Route`]. [`Controller::swap`] routes every parent to a new [`Revision`] at once (queued
//! keys stay; a key in flight finishes on the old revision and cannot start on the new one
//! until it has, since the queue never leases a key twice), then waits for the old revision to
//! drain; [`Controller::suspend`] stops taking keys while they keep queueing, and
//! [`Controller::stop`] stops in order: no new work, in-flight reconciles finish (bounded by
//! the grace period), then the revision's wires and informers are released.

pub mod applied;
pub mod applier;
pub mod book;
pub mod context;
pub mod deps;
pub mod fight;
pub mod guest_memory;
pub mod health;
pub mod pace;
pub mod permanent;
pub mod queue;
pub mod reconciler;
pub mod referee;
pub mod revision;
pub mod route;
pub mod schema;
pub mod shadow;
pub mod wiring;
pub mod workers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tracing::{Instrument as _, debug, info, warn};

pub use self::context::Context;
use self::queue::{Backoff, Priority, WorkQueue};
pub use self::revision::{Revision, Spec};
use self::route::{Assignment, Decision, Route, Selection, Share};
pub use self::wiring::{PrepareError, Wiring, same_kind};
use self::workers::{Next, StopHandle, stop_signal};
use crate::cache::{Cached, GroupKind, ObjectKey};
use crate::keys::RevisionId;
use crate::model::Parent;

/// Which revision serves which parents, as the workers read it at each dequeue.
type Routes = Arc<RwLock<Option<Arc<Route<Arc<Revision>>>>>>;

/// The controller of one parent kind.
pub struct Controller {
    /// The plugin's name: the controller's name in metrics and logs, its field manager and its
    /// finalizer. Fixed for the controller's life (a plugin that renames itself is a new one).
    name: String,
    parent: GroupKind,
    ctx: Context,
    queue: WorkQueue<ObjectKey>,
    /// The route now; read by the workers and the resync task.
    route: Routes,
    /// The worker pool and whether it is suspended. An async lock: swaps, suspends and stops
    /// wait for a pool or a revision to drain while holding it, so they happen one at a time.
    pools: Mutex<Pools>,
    /// The number of the last revision prepared.
    revisions: AtomicU64,
    resync: JoinHandle<()>,
}

#[derive(Default)]
struct Pools {
    running: Option<Pool>,
    suspended: bool,
}

/// A running worker pool.
struct Pool {
    stop: StopHandle,
    task: JoinHandle<()>,
    workers: usize,
}

impl Controller {
    /// A controller for `parent` under the plugin name `name`, with an empty queue and no
    /// revision yet: nothing is reconciled until the first [`Controller::swap`].
    pub fn new(name: &str, parent: GroupKind, ctx: Context) -> Self {
        let queue = WorkQueue::new(ctx.metrics.queue(name), Backoff::default());
        let route: Routes = Arc::default();
        let resync = {
            let (queue, route) = (queue.clone(), route.clone());
            let keys = move || {
                let route = route.read().expect("route lock poisoned");
                route
                    .as_ref()
                    .map(|r| r.stable.wiring().parents().store().keys())
                    .unwrap_or_default()
            };
            tokio::spawn(resync(queue, keys, ctx.sync_period))
        };
        Self {
            name: name.to_owned(),
            parent,
            ctx,
            queue,
            route,
            pools: Mutex::new(Pools::default()),
            revisions: AtomicU64::new(0),
            resync,
        }
    }

    /// The plugin's name, which is also the controller's.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parent kind.
    pub fn parent(&self) -> &GroupKind {
        &self.parent
    }

    /// The queue.
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.queue
    }

    /// The revision serving every parent outside a rollout's share.
    pub fn current(&self) -> Option<Arc<Revision>> {
        self.route
            .read()
            .expect("route lock poisoned")
            .as_ref()
            .map(|r| r.stable.clone())
    }

    /// Prepares a revision of `spec` (see [`Revision::prepare`]) on the wiring of the serving
    /// revision, or on a new one if there is none or `spec` confines the plugin to other
    /// namespaces. It serves nothing until swapped in.
    pub async fn prepare(&self, spec: Spec) -> Result<Revision, PrepareError> {
        let id = RevisionId(self.revisions.fetch_add(1, Ordering::Relaxed) + 1);
        let wiring = match self.current() {
            Some(current) if current.wiring().scope() == spec.parent_namespaces.as_ref() => {
                current.wiring().clone()
            }
            _ => Arc::new(
                Wiring::new(
                    &self.name,
                    &spec.plugin.info().parent,
                    spec.parent_namespaces.clone(),
                    &self.ctx,
                    &self.queue,
                )
                .await?,
            ),
        };
        Revision::prepare(id, spec, wiring, &self.ctx).await
    }

    /// Routes every parent to `next`. Its caches must have synced (the caller waits, so the
    /// old revision serves meanwhile). A key in flight on the old revision finishes there (the
    /// queue never leases a key twice) and nothing queued is lost; the old revision is waited
    /// for (bounded by the grace period, after which its reconciles give up and are retried on
    /// `next`). Then every parent is queued at low priority, so each is reconciled once by the
    /// new code even if nothing changes. A rollout in progress ends with it. Returns the
    /// revision that was replaced.
    pub async fn swap(&self, next: Revision) -> Option<Arc<Revision>> {
        let next = Arc::new(next);
        let selection = selection_of(&next);
        let assignment = self.assignment();
        let old = self
            .reroute(|_| Some(Route::to(next.clone(), assignment, selection)))
            .await;
        old.map(|r| r.stable.clone())
    }

    /// Makes `candidate` the rollout's candidate at `stage`: called beside the stable revision
    /// on every parent it serves (shadow), or serving a share of the parents. A candidate
    /// already there is replaced (its parents go back to stable first). The parents that change
    /// revisions are queued, so each is reconciled once by its new revision. Without a stable
    /// revision the candidate simply serves everything.
    pub async fn stage(&self, candidate: Arc<Revision>, stage: Stage) {
        let assignment = self.assignment();
        self.reroute(|now| {
            let Some(now) = now else {
                return Some(Route::to(
                    candidate.clone(),
                    assignment,
                    selection_of(&candidate),
                ));
            };
            let mut next = now.clone();
            next.candidate = None;
            next.shadow = None;
            match stage {
                Stage::Shadow => next.shadow = Some(candidate.clone()),
                Stage::Share(share) => next.candidate = Some((candidate.clone(), share)),
            }
            Some(next)
        })
        .await;
    }

    /// Makes the candidate the stable revision, serving every parent; the old stable one drains.
    /// Returns the revision that was replaced, if there was a candidate to promote.
    pub async fn promote(&self) -> Option<Arc<Revision>> {
        let (candidate, _) = self.candidate()?;
        self.swap_to(candidate).await
    }

    /// Ends the rollout: every parent goes back to the stable revision, the candidate drains.
    /// Returns it, if there was one.
    pub async fn abort(&self) -> Option<Arc<Revision>> {
        let (candidate, _) = self.candidate()?;
        self.reroute(|now| {
            let mut next = now?.clone();
            next.candidate = None;
            next.shadow = None;
            Some(next)
        })
        .await;
        Some(candidate)
    }

    /// The rollout's candidate and its stage, if a rollout is in progress.
    pub fn candidate(&self) -> Option<(Arc<Revision>, Stage)> {
        let route = self.route.read().expect("route lock poisoned");
        let route = route.as_ref()?;
        match (&route.candidate, &route.shadow) {
            (Some((candidate, share)), _) => Some((candidate.clone(), Stage::Share(*share))),
            (None, Some(shadow)) => Some((shadow.clone(), Stage::Shadow)),
            (None, None) => None,
        }
    }

    /// How many parents the rollout's candidate has at its stage now: those it shadows, or
    /// those it serves. Reads every cached parent; a rollout asks once per step.
    pub fn parents_at_stage(&self) -> u64 {
        let Some(route) = self.route.read().expect("route lock poisoned").clone() else {
            return 0;
        };
        let store = route.stable.wiring().parents().store();
        let mut count = 0;
        for key in store.keys() {
            let Some(cached) = store.get(&key.namespace, &key.name) else {
                continue;
            };
            let parent =
                Parent::from_text(cached.json()).unwrap_or_else(|| Parent::from(Value::Null));
            let counted = match route.decide(&key, &parent) {
                Decision::Serve { revision, shadow } => {
                    shadow.is_some()
                        || route
                            .candidate
                            .as_ref()
                            .is_some_and(|(c, _)| Arc::ptr_eq(c, &revision))
                }
                _ => false,
            };
            count += u64::from(counted);
        }
        count
    }

    async fn swap_to(&self, next: Arc<Revision>) -> Option<Arc<Revision>> {
        let (selection, assignment) = (selection_of(&next), self.assignment());
        let old = self
            .reroute(|_| Some(Route::to(next.clone(), assignment, selection)))
            .await;
        old.map(|r| r.stable.clone())
    }

    /// Replaces the route with what `change` makes of it, then: the pool follows the stable
    /// revision's concurrency (replaced only if that changed); every revision that served and
    /// no longer does is drained (bounded by the grace period); every parent whose revision
    /// changed is queued at low priority. Returns the route that was replaced.
    async fn reroute(
        &self,
        change: impl FnOnce(Option<&Route<Arc<Revision>>>) -> Option<Route<Arc<Revision>>>,
    ) -> Option<Arc<Route<Arc<Revision>>>> {
        let mut pools = self.pools.lock().await;
        let (old, new) = {
            let mut route = self.route.write().expect("route lock poisoned");
            let Some(new) = change(route.as_deref()).map(Arc::new) else {
                return route.clone();
            };
            (route.replace(new.clone()), new)
        };
        if !pools.suspended && self.leads() {
            let workers = new.stable.spec().concurrency;
            if pools.running.as_ref().is_none_or(|p| p.workers != workers) {
                let replaced = pools.running.replace(self.start_pool(workers));
                if let Some(pool) = replaced {
                    pool.stop.stop();
                    self.drain_pool(pool).await;
                }
            }
        }
        if let Some(old) = &old {
            for gone in old.revisions() {
                if !new.revisions().any(|r| Arc::ptr_eq(r, gone)) {
                    self.drain(gone).await;
                }
            }
        }
        drop(pools);
        let store = new.stable.wiring().parents().store();
        let mut moved = 0usize;
        for key in store.keys() {
            let changed = match (&old, store.get(&key.namespace, &key.name)) {
                (Some(old), Some(parent)) => {
                    let (was, is) = (old.serving(&parent.meta.uid), new.serving(&parent.meta.uid));
                    !Arc::ptr_eq(was, is) || shadowed(old, was) != shadowed(&new, is)
                }
                _ => true,
            };
            if changed {
                moved += 1;
                self.queue.add(key, Priority::Low);
            }
        }
        debug!(controller = %self.name, parents = moved, "parents queued for their new revision");
        old
    }

    /// Stops taking keys (they keep queueing); in-flight reconciles finish. Idempotent.
    pub async fn suspend(&self) {
        let mut pools = self.pools.lock().await;
        pools.suspended = true;
        if let Some(pool) = pools.running.take() {
            pool.stop.stop();
            self.drain_pool(pool).await;
        }
    }

    /// Takes keys again after [`Controller::suspend`]. Idempotent.
    pub async fn resume(&self) {
        let mut pools = self.pools.lock().await;
        pools.suspended = false;
        if pools.running.is_none()
            && self.leads()
            && let Some(current) = self.current()
        {
            pools.running = Some(self.start_pool(current.spec().concurrency));
        }
    }

    /// Follows a change of leadership, which is the assignment of every parent or none: a new
    /// leader starts its pool (unless suspended); a replica that lost the lease stops
    /// reconciling at once, without waiting for in-flight reconciles, whose writes could now
    /// race the new leader's.
    pub async fn lead(&self, leading: bool) {
        let mut pools = self.pools.lock().await;
        let assignment = if leading {
            Assignment::All
        } else {
            Assignment::Nothing
        };
        {
            let mut route = self.route.write().expect("route lock poisoned");
            if let Some(now) = route.as_ref() {
                let mut next = Route::clone(now);
                next.assignment = assignment;
                *route = Some(Arc::new(next));
            }
        }
        if leading {
            if pools.running.is_none()
                && !pools.suspended
                && let Some(current) = self.current()
            {
                pools.running = Some(self.start_pool(current.spec().concurrency));
            }
        } else if let Some(pool) = pools.running.take() {
            pool.stop.stop();
            pool.task.abort();
        }
    }

    fn leads(&self) -> bool {
        *self.ctx.leading.borrow()
    }

    fn assignment(&self) -> Assignment {
        if self.leads() {
            Assignment::All
        } else {
            Assignment::Nothing
        }
    }

    /// Whether the controller is suspended.
    pub async fn is_suspended(&self) -> bool {
        self.pools.lock().await.suspended
    }

    /// Stops in order: no new work, in-flight reconciles finish (bounded by the grace period),
    /// the queue shuts down, and the revision's wires and informers are released.
    pub async fn stop(&self) {
        let mut pools = self.pools.lock().await;
        pools.suspended = true;
        if let Some(pool) = pools.running.take() {
            pool.stop.stop();
            self.drain_pool(pool).await;
        }
        self.queue.shutdown();
        self.resync.abort();
        self.route.write().expect("route lock poisoned").take();
        info!(controller = %self.name, parent = %self.parent, "controller stopped");
    }

    fn start_pool(&self, workers: usize) -> Pool {
        let (stop, signal) = stop_signal();
        let (route, name) = (self.route.clone(), self.name.clone());
        let handler = move |key: ObjectKey| {
            // Decided under the route's lock: a revision being swapped out either counts this
            // reconcile before the swap waits for it to drain, or is not chosen at all.
            let work = match route.read().expect("route lock poisoned").as_ref() {
                Some(route) => Work::of(route, key),
                None => Work::Nothing,
            };
            work.run(name.clone())
        };
        let task = tokio::spawn(workers::run(
            self.queue.clone(),
            workers,
            self.ctx.global.clone(),
            self.ctx.metrics.controller(&self.name),
            signal,
            handler,
        ));
        Pool {
            stop,
            task,
            workers,
        }
    }

    /// Waits for a stopped pool's in-flight reconciles, at most the grace period; after that
    /// they are aborted.
    async fn drain_pool(&self, mut pool: Pool) {
        let grace = self.ctx.grace;
        if tokio::time::timeout(grace, &mut pool.task).await.is_err() {
            warn!(controller = %self.name, seconds = grace.as_secs(),
                  "in-flight reconciles did not finish in time; aborting them");
            pool.task.abort();
        }
    }

    /// Waits for the reconciles still serving on a revision no longer routed to, at most the
    /// grace period; after that they give up, and their parents are retried on what serves
    /// them now.
    async fn drain(&self, revision: &Revision) {
        let grace = self.ctx.grace;
        if tokio::time::timeout(grace, revision.drained())
            .await
            .is_err()
        {
            warn!(controller = %self.name, revision = %revision.id(), seconds = grace.as_secs(),
                  "in-flight reconciles of the replaced revision did not finish in time; aborting them");
            revision.retire();
            revision.drained().await;
        }
    }
}

/// Where a rollout's candidate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Called beside the stable revision on the same inputs; its plans are only compared.
    Shadow,
    /// Serving this share of the parents.
    Share(Share),
}

/// The parents a revision's spec selects.
fn selection_of(revision: &Revision) -> Selection {
    Selection {
        selector: revision.spec().parent_selector.clone(),
        namespaces: revision.spec().parent_namespaces.clone(),
    }
}

/// Whether `serving`, on `route`, has a shadow called beside it.
fn shadowed(route: &Route<Arc<Revision>>, serving: &Arc<Revision>) -> bool {
    route.shadow.is_some() && Arc::ptr_eq(serving, &route.stable)
}

/// What a worker does with one key, decided at dequeue.
enum Work {
    /// No route: the controller is stopping.
    Nothing,
    /// The parent is not in the cache: it was deleted, and the garbage collector removes the
    /// children through their ownerReference.
    Gone(Arc<Wiring>, ObjectKey),
    /// Not this replica's.
    Skip,
    /// The plugin does not reconcile it.
    Release(revision::Serving, Arc<Revision>, ObjectKey, Parent),
    /// Reconcile it, calling a shadow revision beside.
    Serve(
        revision::Serving,
        Arc<Revision>,
        Option<Arc<Revision>>,
        ObjectKey,
        Arc<Cached>,
        Parent,
    ),
}

impl Work {
    fn of(route: &Route<Arc<Revision>>, key: ObjectKey) -> Self {
        let wiring = route.stable.wiring();
        let Some(cached) = wiring.parents().store().get(&key.namespace, &key.name) else {
            return Work::Gone(wiring.clone(), key);
        };
        // The parent's cached text goes to the plugin as it is; the parsed value serves the
        // host's own decisions.
        let parent = Parent::from_text(cached.json()).unwrap_or_else(|| Parent::from(Value::Null));
        match route.decide(&key, &parent) {
            Decision::Skip => Work::Skip,
            Decision::Release(revision) => Work::Release(revision.enter(), revision, key, parent),
            Decision::Serve { revision, shadow } => {
                Work::Serve(revision.enter(), revision, shadow, key, cached, parent)
            }
        }
    }

    async fn run(self, plugin: String) -> Next {
        match self {
            Work::Nothing | Work::Skip => Next::Done,
            Work::Gone(wiring, key) => {
                wiring.forget(&key);
                debug!(%plugin, parent = %key, "parent is gone");
                Next::Done
            }
            Work::Release(_serving, revision, key, parent) => {
                let span = span(&plugin, &key, &revision);
                revision
                    .reconciler()
                    .unselected(&key, &parent)
                    .instrument(span)
                    .await
            }
            Work::Serve(_serving, revision, shadow, key, cached, parent) => {
                let span = span(&plugin, &key, &revision);
                let shadow = shadow.as_ref().map(|s| s.reconciler());
                let reconcile = revision
                    .reconciler()
                    .reconcile(&key, &cached, parent, shadow)
                    .instrument(span);
                tokio::select! {
                    biased;
                    next = reconcile => next,
                    () = revision.retired() => Next::Retry,
                }
            }
        }
    }
}

/// The span of one reconcile: what the plugin logs names the plugin, the parent and the digest
/// of the code.
fn span(plugin: &str, key: &ObjectKey, revision: &Revision) -> tracing::Span {
    tracing::info_span!("reconcile", plugin = %plugin, parent = %key,
        digest = %short(revision.plugin().digest()), revision = %revision.id())
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.resync.abort();
    }
}

/// The first 12 hex digits of a digest, for logs.
pub fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
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

    #[test]
    fn short_should_cut_a_digest_to_twelve_hex_digits() {
        assert_eq!(short("sha256:0123456789abcdef"), "0123456789ab");
        assert_eq!(short("abc"), "abc");
    }
}
