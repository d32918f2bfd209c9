//! The control loop of one parent kind: informers feed the kind's work queue; a pool of workers
//! reconciles one parent at a time through the plugin, the planner and the applier.
//!
//! Data flows one way: informers ([`crate::cache`]) → [`queue`] → [`workers`] → [`reconciler`] →
//! planner → [`applier`] → API server. [`deps`] turns what a reconcile read into the keys to wake
//! when those objects change.
//!
//! What wakes a parent:
//! - a change to the parent itself (initial list and relists at low priority);
//! - a change to an object whose controller ownerReference points at it (its children);
//! - a change to an object its last reconcile read with `get` or `list`;
//! - its own `requeue-after`, and backoff after a failure;
//! - a new version of the plugin (every parent, once, at low priority).
//!
//! A [`Controller`] outlives the versions of its plugin: it owns the queue, and runs one
//! [`Generation`] at a time. [`Controller::swap`] replaces the running generation atomically
//! (queued keys stay; a key in flight finishes on the old code and cannot start on the new one
//! until it has), [`Controller::suspend`] stops taking keys while they keep queueing, and
//! [`Controller::stop`] stops in order: no new work, in-flight reconciles finish (bounded by the
//! grace period), then the generation's handlers and informers are released.

pub mod applied;
pub mod applier;
pub mod book;
pub mod context;
pub mod deps;
pub mod fight;
pub mod generation;
pub mod guest_memory;
pub mod pace;
pub mod permanent;
pub mod queue;
pub mod reconciler;
pub mod referee;
pub mod schema;
pub mod workers;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tracing::{Instrument as _, info, warn};

pub use self::context::Context;
pub use self::generation::{Generation, PrepareError, Spec};
use self::queue::{Backoff, Priority, WorkQueue};
use self::workers::{StopHandle, stop_signal};
use crate::cache::{GroupKind, ObjectKey};

/// The controller of one parent kind.
pub struct Controller {
    /// The plugin's name: the controller's name in metrics and logs, its field manager and its
    /// finalizer. Fixed for the controller's life (a plugin that renames itself is a new one).
    name: String,
    parent: GroupKind,
    ctx: Context,
    queue: WorkQueue<ObjectKey>,
    /// The generation serving now; read by the resync task.
    current: Arc<RwLock<Option<Arc<Generation>>>>,
    /// The worker pool and whether it is suspended. An async lock: swaps, suspends and stops
    /// wait for a pool to drain while holding it, so they happen one at a time.
    pools: Mutex<Pools>,
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
}

impl Controller {
    /// A controller for `parent` under the plugin name `name`, with an empty queue and no
    /// generation yet: nothing is reconciled until the first [`Controller::swap`].
    pub fn new(name: &str, parent: GroupKind, ctx: Context) -> Self {
        let queue = WorkQueue::new(ctx.metrics.queue(name), Backoff::default());
        let current: Arc<RwLock<Option<Arc<Generation>>>> = Arc::default();
        let resync = {
            let (queue, current) = (queue.clone(), current.clone());
            let keys = move || {
                let current = current.read().expect("generation lock poisoned");
                current
                    .as_ref()
                    .map(|g| g.parents().store().keys())
                    .unwrap_or_default()
            };
            tokio::spawn(resync(queue, keys, ctx.sync_period))
        };
        Self {
            name: name.to_owned(),
            parent,
            ctx,
            queue,
            current,
            pools: Mutex::new(Pools::default()),
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

    /// The generation serving now.
    pub fn current(&self) -> Option<Arc<Generation>> {
        self.current
            .read()
            .expect("generation lock poisoned")
            .clone()
    }

    /// Prepares a generation of `spec` on this controller's queue (see
    /// [`Generation::prepare`]); it serves nothing until swapped in.
    pub async fn prepare(&self, spec: Spec) -> Result<Generation, PrepareError> {
        Generation::prepare(spec, &self.ctx, &self.queue).await
    }

    /// Makes `next` the serving generation. Its caches must have synced (the caller waits, so
    /// the old code serves meanwhile). The new pool starts before the old one is told to stop:
    /// the queue never leases a key twice, so a key in flight on the old code waits for it to
    /// finish, and nothing queued is lost. Once the old pool has drained (bounded by the grace
    /// period), every parent is queued at low priority, so each is reconciled once by the new
    /// code even if nothing changes. Returns the generation that was replaced.
    pub async fn swap(&self, next: Generation) -> Option<Arc<Generation>> {
        let next = Arc::new(next);
        let mut pools = self.pools.lock().await;
        let old_pool = pools.running.take();
        let old = self
            .current
            .write()
            .expect("generation lock poisoned")
            .replace(next.clone());
        if !pools.suspended && self.leads() {
            pools.running = Some(self.start_pool(&next));
        }
        if let Some(pool) = old_pool {
            pool.stop.stop();
            self.drain(pool).await;
        }
        drop(pools);
        for key in next.parents().store().keys() {
            self.queue.add(key, Priority::Low);
        }
        old
    }

    /// Stops taking keys (they keep queueing); in-flight reconciles finish. Idempotent.
    pub async fn suspend(&self) {
        let mut pools = self.pools.lock().await;
        pools.suspended = true;
        if let Some(pool) = pools.running.take() {
            pool.stop.stop();
            self.drain(pool).await;
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
            pools.running = Some(self.start_pool(&current));
        }
    }

    /// Follows a change of leadership: a new leader starts its pool (unless suspended); a
    /// replica that lost the lease stops reconciling at once, without waiting for in-flight
    /// reconciles, whose writes could now race the new leader's.
    pub async fn lead(&self, leading: bool) {
        let mut pools = self.pools.lock().await;
        if leading {
            if pools.running.is_none()
                && !pools.suspended
                && let Some(current) = self.current()
            {
                pools.running = Some(self.start_pool(&current));
            }
        } else if let Some(pool) = pools.running.take() {
            pool.stop.stop();
            pool.task.abort();
        }
    }

    fn leads(&self) -> bool {
        *self.ctx.leading.borrow()
    }

    /// Whether the controller is suspended.
    pub async fn is_suspended(&self) -> bool {
        self.pools.lock().await.suspended
    }

    /// Stops in order: no new work, in-flight reconciles finish (bounded by the grace period),
    /// the queue shuts down, and the generation's handlers and informers are released.
    pub async fn stop(&self) {
        let mut pools = self.pools.lock().await;
        pools.suspended = true;
        if let Some(pool) = pools.running.take() {
            pool.stop.stop();
            self.drain(pool).await;
        }
        self.queue.shutdown();
        self.resync.abort();
        self.current
            .write()
            .expect("generation lock poisoned")
            .take();
        info!(controller = %self.name, parent = %self.parent, "controller stopped");
    }

    fn start_pool(&self, generation: &Arc<Generation>) -> Pool {
        let (stop, signal) = stop_signal();
        let reconciler = generation.reconciler().clone();
        let plugin = generation.plugin().clone();
        let name = self.name.clone();
        let handler = move |key: ObjectKey| {
            let reconciler = reconciler.clone();
            let span = tracing::info_span!("reconcile", plugin = %name, parent = %key,
                digest = %short(plugin.digest()));
            async move { reconciler.reconcile(&key).await }.instrument(span)
        };
        let task = tokio::spawn(workers::run(
            self.queue.clone(),
            generation.spec().concurrency,
            self.ctx.global.clone(),
            self.ctx.metrics.controller(&self.name),
            signal,
            handler,
        ));
        Pool { stop, task }
    }

    /// Waits for a stopped pool's in-flight reconciles, at most the grace period; after that
    /// they are aborted.
    async fn drain(&self, mut pool: Pool) {
        let grace = self.ctx.grace;
        if tokio::time::timeout(grace, &mut pool.task).await.is_err() {
            warn!(controller = %self.name, seconds = grace.as_secs(),
                  "in-flight reconciles did not finish in time; aborting them");
            pool.task.abort();
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
