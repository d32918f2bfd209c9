//! The worker pool of one controller: a bounded number of workers take keys from its queue, each
//! also holding one permit of the host-wide semaphore while it reconciles.
//!
//! A worker takes its key first and its permit second: an idle worker never sits on a permit
//! another plugin could use. tokio's semaphore hands out permits in FIFO order, so a plugin with
//! a deep backlog takes its turn with the others instead of starving them.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::error;

use super::queue::WorkQueue;
use crate::metrics::ControllerMetrics;

/// What to do with a key after its reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Succeeded: reset its backoff.
    Done,
    /// Succeeded, and the plugin asked to be called again after this long.
    RequeueAfter(Duration),
    /// Failed: retry after the key's backoff.
    Retry,
    /// Failed for good: do not retry until something changes.
    Terminal,
}

/// How often the unfinished-work gauges are refreshed (client-go's period).
const UNFINISHED_WORK_PERIOD: Duration = Duration::from_millis(500);

/// Runs `workers` workers on `queue` until it is shut down and every in-flight reconcile has
/// finished. A panic in `handler` counts as a failure to retry (controller-runtime's
/// `RecoverPanic`), not as the end of the worker.
pub async fn run<K, F, Fut>(
    queue: WorkQueue<K>,
    workers: usize,
    global: Arc<Semaphore>,
    metrics: ControllerMetrics,
    handler: F,
) where
    K: Clone + Eq + Hash + Ord + std::fmt::Debug + Send + Sync + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Next> + Send + 'static,
{
    metrics
        .max_concurrent
        .set(i64::try_from(workers).unwrap_or(i64::MAX));
    let handler = Arc::new(handler);
    let ticker = {
        let queue = queue.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(UNFINISHED_WORK_PERIOD).await;
                queue.update_unfinished_work();
            }
        })
    };
    let mut pool = JoinSet::new();
    for _ in 0..workers.max(1) {
        pool.spawn(worker(
            queue.clone(),
            global.clone(),
            metrics.clone(),
            handler.clone(),
        ));
    }
    while pool.join_next().await.is_some() {}
    ticker.abort();
}

async fn worker<K, F, Fut>(
    queue: WorkQueue<K>,
    global: Arc<Semaphore>,
    metrics: ControllerMetrics,
    handler: Arc<F>,
) where
    K: Clone + Eq + Hash + Ord + std::fmt::Debug + Send + Sync + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Next> + Send + 'static,
{
    while let Some(lease) = queue.get().await {
        let Ok(_permit) = global.acquire().await else {
            return; // the semaphore was closed: the host is going away
        };
        let key = lease.key().clone();
        metrics.active.inc();
        let start = Instant::now();
        let next = match tokio::spawn(handler(key.clone())).await {
            Ok(next) => next,
            Err(e) => {
                error!(key = ?key, error = %e, "reconcile panicked; retrying with backoff");
                Next::Retry
            }
        };
        metrics.time.observe(start.elapsed().as_secs_f64());
        metrics.active.dec();
        match next {
            Next::Done => {
                queue.forget(&key);
                metrics.success.inc();
            }
            Next::RequeueAfter(after) => {
                queue.forget(&key);
                queue.add_after(key, after);
                metrics.requeue_after.inc();
            }
            Next::Retry => {
                queue.add_rate_limited(key);
                metrics.error.inc();
                metrics.errors.inc();
            }
            Next::Terminal => {
                queue.forget(&key);
                metrics.error.inc();
                metrics.errors.inc();
                metrics.terminal.inc();
            }
        }
        drop(lease);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::controller::queue::{Backoff, Priority};
    use crate::metrics::QueueMetrics;

    fn queue() -> WorkQueue<u32> {
        WorkQueue::new(QueueMetrics::detached(), Backoff::default())
    }

    /// Counts concurrent handlers and remembers the highest count.
    #[derive(Default)]
    struct Gauge {
        now: AtomicUsize,
        max: AtomicUsize,
    }

    impl Gauge {
        fn enter(&self) {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(now, Ordering::SeqCst);
        }
        fn leave(&self) {
            self.now.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn slow(
        gauges: Vec<Arc<Gauge>>,
        done: Arc<AtomicUsize>,
    ) -> impl Fn(u32) -> futures::future::BoxFuture<'static, Next> + Send + Sync + 'static {
        move |_| {
            let (gauges, done) = (gauges.clone(), done.clone());
            Box::pin(async move {
                gauges.iter().for_each(|g| g.enter());
                tokio::time::sleep(Duration::from_millis(100)).await;
                gauges.iter().for_each(|g| g.leave());
                done.fetch_add(1, Ordering::SeqCst);
                Next::Done
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_should_be_bounded_per_controller_and_in_total() {
        let total = Arc::new(Gauge::default());
        let (a, b) = (Arc::new(Gauge::default()), Arc::new(Gauge::default()));
        let global = Arc::new(Semaphore::new(3));
        let done = Arc::new(AtomicUsize::new(0));
        let (qa, qb) = (queue(), queue());
        for k in 0..20 {
            qa.add(k, Priority::Normal);
            qb.add(k, Priority::Normal);
        }
        let pa = tokio::spawn(run(
            qa.clone(),
            2,
            global.clone(),
            ControllerMetrics::detached(),
            slow(vec![a.clone(), total.clone()], done.clone()),
        ));
        let pb = tokio::spawn(run(
            qb.clone(),
            4,
            global.clone(),
            ControllerMetrics::detached(),
            slow(vec![b.clone(), total.clone()], done.clone()),
        ));
        while done.load(Ordering::SeqCst) < 40 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        qa.shutdown();
        qb.shutdown();
        pa.await.unwrap();
        pb.await.unwrap();
        assert_eq!(a.max.load(Ordering::SeqCst), 2);
        assert!(b.max.load(Ordering::SeqCst) <= 3);
        assert_eq!(total.max.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_controller_should_not_starve_another() {
        let global = Arc::new(Semaphore::new(2));
        let busy_done = Arc::new(AtomicUsize::new(0));
        let (busy, quiet) = (queue(), queue());
        for k in 0..1000 {
            busy.add(k, Priority::Normal);
        }
        let pool = tokio::spawn(run(
            busy.clone(),
            8,
            global.clone(),
            ControllerMetrics::detached(),
            slow(vec![], busy_done.clone()),
        ));
        tokio::time::sleep(Duration::from_millis(250)).await;
        let quiet_done = Arc::new(AtomicUsize::new(0));
        quiet.add(1, Priority::Normal);
        let quiet_pool = tokio::spawn(run(
            quiet.clone(),
            1,
            global.clone(),
            ControllerMetrics::detached(),
            slow(vec![], quiet_done.clone()),
        ));
        while quiet_done.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let behind = 1000 - busy_done.load(Ordering::SeqCst);
        assert!(
            behind > 900,
            "the quiet controller got its turn while {behind} busy keys waited"
        );
        busy.shutdown();
        quiet.shutdown();
        pool.await.unwrap();
        quiet_pool.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn retry_should_back_off_and_requeue_after_should_wait() {
        let q = queue();
        let times = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let seen = times.clone();
        let handler = move |_: u32| {
            let seen = seen.clone();
            async move {
                let mut t = seen.lock().unwrap();
                t.push(start.elapsed().as_millis());
                if t.len() < 4 {
                    Next::Retry
                } else if t.len() == 4 {
                    Next::RequeueAfter(Duration::from_secs(3))
                } else {
                    Next::Done
                }
            }
        };
        q.add(7, Priority::Normal);
        let pool = tokio::spawn(run(
            q.clone(),
            1,
            Arc::new(Semaphore::new(1)),
            ControllerMetrics::detached(),
            handler,
        ));
        while times.lock().unwrap().len() < 5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shutdown();
        pool.await.unwrap();
        let t = times.lock().unwrap().clone();
        let gaps: Vec<u128> = t.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, [5, 10, 20, 3000], "attempts at {t:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_should_be_retried_and_shutdown_should_wait_for_in_flight_work() {
        let q = queue();
        let calls = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let (c, f) = (calls.clone(), finished.clone());
        let handler = move |_: u32| {
            let (c, f) = (c.clone(), f.clone());
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("a plugin bug");
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Next::Done
            }
        };
        q.add(1, Priority::Normal);
        let metrics = ControllerMetrics::detached();
        let pool = tokio::spawn(run(
            q.clone(),
            1,
            Arc::new(Semaphore::new(1)),
            metrics.clone(),
            handler,
        ));
        while calls.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shutdown();
        pool.await.unwrap();
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "the in-flight call finished before run returned"
        );
        assert_eq!(metrics.errors.get(), 1);
        assert_eq!(metrics.success.get(), 1);
    }
}
