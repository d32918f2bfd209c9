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
//! - a change of the revision that serves it: a new version of the plugin (every parent), a
//!   rollout's step, promotion or rollback (the parents that move), once, at low priority.
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
pub mod converge;
pub mod deps;
mod dispatch;
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
mod routing;
pub mod schema;
pub mod shadow;
pub mod standing;
pub mod trigger;
pub mod wiring;
pub mod workers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub use self::context::Context;
use self::dispatch::Work;
use self::queue::{Backoff, Priority, WorkQueue};
pub use self::revision::{Revision, Spec};
use self::route::{Assignment, Route};
pub use self::routing::Stage;
use self::trigger::Trigger;
pub use self::wiring::{PrepareError, Wiring, same_kind};
use self::workers::{StopHandle, stop_signal};
use crate::cache::{GroupKind, ObjectKey};
use crate::keys::RevisionId;

/// Which revision serves which parents, as the workers read it at each dequeue.
type Routes = Arc<RwLock<Option<Arc<Route<Arc<Revision>>>>>>;

/// The controller of one parent kind.
pub struct Controller {
    /// The plugin's name: the controller's name in metrics and logs, its field manager and its
    /// finalizer. Fixed for the controller's life (a plugin that renames itself is a new one).
    name: String,
    parent: GroupKind,
    /// Whether the plugin decorates its parents rather than owning them.
    decorator: bool,
    ctx: Context,
    queue: WorkQueue<ObjectKey>,
    /// The route now; read by the workers and the resync task.
    route: Routes,
    /// The worker pool and whether it is suspended. An async lock: swaps, suspends and stops
    /// wait for a pool or a revision to drain while holding it, so they happen one at a time.
    pools: Mutex<Pools>,
    /// The number of the last revision prepared.
    revisions: AtomicU64,
    /// The resync period now: the stable revision's, else the host's `--sync-period`.
    sync_period: watch::Sender<Duration>,
    resync: JoinHandle<()>,
    /// The last count of the parents owned ([`Controller::owned`]).
    owned: std::sync::Mutex<Option<OwnedCount>>,
    /// The last count of how the parents stand ([`Controller::standing`]).
    tally: std::sync::Mutex<standing::Tally<Arc<Revision>>>,
}

/// A count of the parents a ring member owns, and what it was counted against: it holds
/// while the route (and with it the assignment) and the parents' keys stay as they were. A
/// member reports the count at every reading of the ring, every retry period, and counting
/// hashes every cached parent's key: about 1.4 ms at 9,000 parents, each 2 s, which held back
/// a member at a small CPU quota (docs/BENCHMARKS.md, *Side by side*).
struct OwnedCount {
    /// The route counted under; a weak pointer keeps its address from being reused.
    route: std::sync::Weak<Route<Arc<Revision>>>,
    /// The parents' [`crate::cache::store::Store::key_set`] counted.
    key_set: u64,
    owned: usize,
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
    pub fn new(name: &str, parent: GroupKind, decorator: bool, ctx: Context) -> Self {
        let queue = WorkQueue::new(ctx.metrics.queue(name), Backoff::default());
        let route: Routes = Arc::default();
        let sync_period = watch::Sender::new(ctx.sync_period);
        let resync = {
            let (queue, route) = (queue.clone(), route.clone());
            let keys = move || {
                let route = route.read().expect("route lock poisoned");
                let Some(route) = route.as_ref() else {
                    return Vec::new();
                };
                let wiring = route.stable.wiring();
                let mut keys = wiring.parents().store().keys();
                keys.retain(|key| route.assignment.owns(key));
                let now = Instant::now();
                for key in &keys {
                    wiring.triggers().record(key, Trigger::Resync, now);
                }
                keys
            };
            tokio::spawn(resync(queue, keys, sync_period.subscribe()))
        };
        Self {
            name: name.to_owned(),
            parent,
            decorator,
            ctx,
            queue,
            route,
            pools: Mutex::new(Pools::default()),
            revisions: AtomicU64::new(0),
            sync_period,
            resync,
            owned: std::sync::Mutex::new(None),
            tally: std::sync::Mutex::default(),
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

    /// Whether the plugin decorates its parents rather than owning them.
    pub fn decorates(&self) -> bool {
        self.decorator
    }

    /// The revision serving every parent outside a rollout's share.
    pub fn current(&self) -> Option<Arc<Revision>> {
        self.route
            .read()
            .expect("route lock poisoned")
            .as_ref()
            .map(|r| r.stable.clone())
    }

    /// How many parents are cached (selected or not).
    pub fn parents(&self) -> usize {
        self.current()
            .map_or(0, |r| r.wiring().parents().store().len())
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
            && self.owns_any()
            && let Some(current) = self.current()
        {
            pools.running = Some(self.start_pool(current.spec().concurrency));
        }
    }

    /// Follows a change of the parents this replica owns (leadership is the case of all or
    /// none; see [`crate::shard`] for the rest), which the caller has already published in
    /// the context. Takes no lock a swap holds, so a ring member's rounds never wait on a
    /// plugin's upgrade; [`Controller::staff`] then starts or stops the pool.
    ///
    /// Keys no longer owned are skipped from the next dequeue on; those in flight finish
    /// ([`Controller::moving`] says when none is left), and what is remembered of them is
    /// forgotten. Parents gained are queued, after the memory kept of them (from when this
    /// replica last owned them) is forgotten: another replica has reconciled them since. Those
    /// whose spec changed past what was reconciled go ahead of those at rest
    /// ([`standing::behind`]).
    pub fn assign(&self, assignment: &Assignment) {
        let before = {
            let mut route = self.route.write().expect("route lock poisoned");
            let now = route.clone();
            now.map(|now| {
                let mut next = Route::clone(&now);
                next.assignment = assignment.clone();
                *route = Some(Arc::new(next));
                (now.assignment.clone(), now.stable.wiring().clone())
            })
        };
        let Some((before, wiring)) = before else {
            return;
        };
        let now = Instant::now();
        let (mut gained, mut lost) = (0, 0);
        for key in wiring.parents().store().keys() {
            match (before.owns(&key), assignment.owns(&key)) {
                (false, true) => {
                    gained += 1;
                    wiring.forget(&key);
                    wiring.triggers().record(&key, Trigger::Route, now);
                    let priority = self.gained_priority(&wiring, &key);
                    self.queue.add(key, priority);
                }
                (true, false) => {
                    lost += 1;
                    if !self.queue.is_processing(&key) {
                        wiring.forget(&key);
                    }
                }
                _ => {}
            }
        }
        self.ctx.metrics.shard_moved("gained", gained);
        self.ctx.metrics.shard_moved("lost", lost);
    }

    /// Makes the pool follow the assignment: owning nothing any more stops reconciling at
    /// once, without waiting for in-flight reconciles (a replica loses everything only when it
    /// lost its lease, and their writes could race the next owner's; with sharding the
    /// client's fence refuses them anyway); owning parents starts the pool unless suspended.
    pub async fn staff(&self) {
        let mut pools = self.pools.lock().await;
        if !self.owns_any() {
            if let Some(pool) = pools.running.take() {
                pool.stop.stop();
                pool.task.abort();
            }
        } else if pools.running.is_none()
            && !pools.suspended
            && let Some(current) = self.current()
        {
            pools.running = Some(self.start_pool(current.spec().concurrency));
        }
    }

    /// How many reconciles are in flight for parents this replica no longer owns: a replica
    /// says it has let them go only once this is zero.
    pub fn moving(&self) -> usize {
        let route = self.route.read().expect("route lock poisoned");
        let Some(route) = route.as_ref() else {
            return 0;
        };
        self.queue
            .processing()
            .iter()
            .filter(|key| !route.assignment.owns(key))
            .count()
    }

    /// How many reconciles are in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.processing().len()
    }

    /// How many cached parents this replica owns: counted again only when the route or the
    /// set of parents changed since the last count.
    pub fn owned(&self) -> usize {
        let Some(route) = self.route.read().expect("route lock poisoned").clone() else {
            return 0;
        };
        let store = route.stable.wiring().parents().store();
        let claims = match &route.assignment {
            Assignment::All => return store.len(),
            Assignment::Nothing => return 0,
            Assignment::Shard(claims) => claims,
        };
        // Read before counting: a key that comes meanwhile makes the next call count again.
        let key_set = store.key_set();
        let mut last = self.owned.lock().expect("owned lock poisoned");
        if let Some(last) = last.as_ref()
            && last.key_set == key_set
            && std::ptr::eq(last.route.as_ptr(), Arc::as_ptr(&route))
        {
            return last.owned;
        }
        let owned = store.count_keys(|key| claims.owns(key));
        *last = Some(OwnedCount {
            route: Arc::downgrade(&route),
            key_set,
            owned,
        });
        owned
    }

    fn owns_any(&self) -> bool {
        !self.ctx.assignment.borrow().is_nothing()
    }

    fn assignment(&self) -> Assignment {
        self.ctx.assignment.borrow().clone()
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
/// period never resyncs. A new period starts counting when it is set.
async fn resync(
    queue: WorkQueue<ObjectKey>,
    keys: impl Fn() -> Vec<ObjectKey>,
    mut period: watch::Receiver<Duration>,
) {
    loop {
        let every = *period.borrow_and_update();
        let wait = async {
            if every.is_zero() {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(jittered(every)).await;
        };
        tokio::select! {
            () = wait => {}
            changed = period.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
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
        let period = watch::Sender::new(Duration::from_secs(100));
        let task = tokio::spawn(resync(queue.clone(), keys, period.subscribe()));
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
        let period = watch::Sender::new(Duration::ZERO);
        let task = tokio::spawn(resync(
            queue.clone(),
            || vec![ObjectKey::new("a", "x")],
            period.subscribe(),
        ));
        tokio::time::sleep(Duration::from_secs(100_000)).await;
        assert!(queue.is_empty());
        queue.shutdown();
        task.await.expect("resync ends with the queue");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_sync_period_should_apply_from_when_it_is_set() {
        let metrics = QueueMetrics::detached();
        let queue = WorkQueue::new(metrics.clone(), Backoff::default());
        let period = watch::Sender::new(Duration::ZERO);
        let task = tokio::spawn(resync(
            queue.clone(),
            || vec![ObjectKey::new("a", "x")],
            period.subscribe(),
        ));
        tokio::time::sleep(Duration::from_secs(1000)).await;
        period.send_replace(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert_eq!(
            metrics.adds.get(),
            1,
            "resynced once, 10-11 s after the change"
        );
        // Back to never: nothing more, however long.
        period.send_replace(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(100_000)).await;
        assert_eq!(metrics.adds.get(), 1);
        queue.shutdown();
        task.await.expect("resync ends with the queue");
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
