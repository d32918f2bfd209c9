//! The worker pool of one controller: a bounded number of workers take keys from its queue, each
//! also holding one permit of the host-wide semaphore while it reconciles.
//!
//! A worker takes its key first and its permit second, so an idle worker never sits on a permit
//! another plugin could use. tokio's semaphore is fair: permits go to waiters in FIFO order, so
//! a plugin with a deep backlog (and a waiter per worker) takes its turn with the others rather
//! than winning every free permit; a quiet plugin's next reconcile waits at most for the waiters
//! already in line, not for the busy plugin's backlog.
//!
//! Stopping: a pool stops when its [`Stop`] signal fires or its queue is shut down. Idle workers
//! return at once; a worker in the middle of a reconcile finishes it, applies the result and then
//! returns. Keys still queued stay in the queue, so another pool on the same queue (the next
//! version of the plugin, or the same one after a suspend) picks them up, and because the queue
//! never hands out a key that is still leased, a key in flight in the stopping pool cannot start
//! in the new one until it has finished. [`run`] returns once every worker has, which is the
//! graceful drain; the caller bounds it with a timeout. Dropping the [`run`] future instead
//! aborts the workers and their reconciles.

use std::any::Any;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::error;

use super::queue::{Priority, WorkQueue};
use crate::metrics::ControllerMetrics;

/// What to do with a key after its reconcile (controller-runtime's `reconcileHandler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Succeeded: reset its backoff. Counted as `result="success"`.
    Done,
    /// Succeeded, and the plugin asked to be called again after this long: reset the backoff
    /// and add it after the delay. Counted as `result="requeue_after"`.
    RequeueAfter(Duration),
    /// Failed: retry after the key's backoff. Counted as `result="error"`.
    Retry,
    /// Failed for good (controller-runtime's `TerminalError`): reset the backoff and do not
    /// retry until something adds the key again. Counted as an error and a terminal error.
    Terminal,
}

/// Tells a pool to stop taking keys. Fires when [`StopHandle::stop`] is called or the handle is
/// dropped.
#[derive(Clone)]
pub struct Stop(watch::Receiver<bool>);

/// The sending side of a [`Stop`].
pub struct StopHandle(watch::Sender<bool>);

/// A new stop signal and its handle.
pub fn stop_signal() -> (StopHandle, Stop) {
    let (tx, rx) = watch::channel(false);
    (StopHandle(tx), Stop(rx))
}

impl StopHandle {
    /// Fires the signal.
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

impl Stop {
    /// Completes once the signal has fired.
    pub async fn stopped(&mut self) {
        // An error means the handle is gone, which counts as stopping.
        let _ = self.0.wait_for(|s| *s).await;
    }
}

/// How often the unfinished-work gauges are refreshed (client-go's period).
const UNFINISHED_WORK_PERIOD: Duration = Duration::from_millis(500);

/// Runs `workers` workers on `queue` until `stop` fires or the queue is shut down, and every
/// in-flight reconcile has finished; `0` counts as one.
///
/// A panic in `handler` counts as [`Next::Retry`] (controller-runtime's `RecoverPanic`,
/// default on) rather than ending the worker. The handler runs inside its worker under
/// `catch_unwind` rather than in a task of its own: a spawned handler would outlive its worker
/// if the pool were aborted, and run on after its lease had released the key to someone else.
pub async fn run<K, F, Fut>(
    queue: WorkQueue<K>,
    workers: usize,
    global: Arc<Semaphore>,
    metrics: ControllerMetrics,
    stop: Stop,
    handler: F,
) where
    K: Clone + Eq + Hash + Ord + std::fmt::Debug + Send + Sync + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Next> + Send + 'static,
{
    let workers = workers.max(1);
    metrics
        .max_concurrent
        .set(i64::try_from(workers).unwrap_or(i64::MAX));
    let handler = Arc::new(handler);
    let mut pool = JoinSet::new();
    for _ in 0..workers {
        pool.spawn(worker(
            queue.clone(),
            global.clone(),
            metrics.clone(),
            stop.clone(),
            handler.clone(),
        ));
    }
    let tracker = queue.track_unfinished_work(UNFINISHED_WORK_PERIOD);
    tokio::pin!(tracker);
    loop {
        tokio::select! {
            joined = pool.join_next() => match joined {
                None => break,
                // A worker only ends early on a bug outside the handler; the others go on.
                Some(Err(e)) => error!(error = %e, "reconcile worker failed"),
                Some(Ok(())) => {}
            },
            () = &mut tracker => {}
        }
    }
    queue.update_unfinished_work();
}

async fn worker<K, F, Fut>(
    queue: WorkQueue<K>,
    global: Arc<Semaphore>,
    metrics: ControllerMetrics,
    mut stop: Stop,
    handler: Arc<F>,
) where
    K: Clone + Eq + Hash + Ord + std::fmt::Debug + Send + Sync + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Next> + Send + 'static,
{
    loop {
        // `get` is cancel-safe: a key is taken and leased in one step, or not at all.
        let lease = tokio::select! {
            biased;
            () = stop.stopped() => return,
            lease = queue.get() => match lease {
                Some(lease) => lease,
                None => return,
            },
        };
        let key = lease.key().clone();
        let permit = tokio::select! {
            biased;
            permit = global.acquire() => permit,
            () = stop.stopped() => {
                // Stopped while waiting for a turn: the key goes back to the queue (marked to run
                // again when the lease drops) for whoever serves the queue next.
                queue.add(key, Priority::Normal);
                return;
            }
        };
        let Ok(permit) = permit else {
            return; // the semaphore was closed: the host is going away
        };
        metrics.active.inc();
        let start = Instant::now();
        // Calling the handler inside the async block catches a panic while creating the future
        // as well as while polling it. Unwind safety: after a panic the future is dropped and
        // nothing it borrowed is reused; the queue's lock is never held across the call.
        let call = AssertUnwindSafe(async { handler(key.clone()).await });
        // The reconcile names its trace if it is exported: the exemplar of its time.
        let (next, trace_id) = crate::telemetry::timed(call.catch_unwind()).await;
        let next = match next {
            Ok(next) => next,
            Err(panic) => {
                let panic = panic_message(&*panic);
                error!(key = ?key, panic, "reconcile panicked; retrying with backoff");
                metrics.panics.inc();
                Next::Retry
            }
        };
        metrics.reconciled(start.elapsed(), trace_id);
        crate::trim::worked();
        metrics.active.dec();
        drop(permit);
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
        // Done only after the result is applied (controller-runtime defers Done too): the key's
        // backoff bookkeeping happens while no other worker can hold the key.
        drop(lease);
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::controller::queue::{Backoff, Priority};
    use crate::metrics::QueueMetrics;

    /// A stop signal that never fires.
    fn running() -> Stop {
        let (handle, stop) = stop_signal();
        std::mem::forget(handle);
        stop
    }

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

    /// A handler that takes 100 ms, counted in `gauges`, and then counts itself `done`.
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

    /// Sleeps in 1 ms steps of paused time until `done` holds.
    async fn until(done: impl Fn() -> bool) {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
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
        let metrics = ControllerMetrics::detached();
        let pa = tokio::spawn(run(
            qa.clone(),
            2,
            global.clone(),
            metrics.clone(),
            running(),
            slow(vec![a.clone(), total.clone()], done.clone()),
        ));
        let pb = tokio::spawn(run(
            qb.clone(),
            4,
            global.clone(),
            ControllerMetrics::detached(),
            running(),
            slow(vec![b.clone(), total.clone()], done.clone()),
        ));
        until(|| done.load(Ordering::SeqCst) == 40).await;
        qa.shutdown();
        qb.shutdown();
        pa.await.expect("pool a");
        pb.await.expect("pool b");
        assert_eq!(a.max.load(Ordering::SeqCst), 2, "pool a's 2 workers");
        assert!(b.max.load(Ordering::SeqCst) <= 3, "pool b within the total");
        assert_eq!(total.max.load(Ordering::SeqCst), 3, "the 3 global permits");
        assert_eq!(metrics.max_concurrent.get(), 2);
        assert_eq!(metrics.active.get(), 0);
        assert_eq!(metrics.success.get(), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_controller_should_not_starve_another() {
        let global = Arc::new(Semaphore::new(2));
        let busy_done = Arc::new(AtomicUsize::new(0));
        let (busy, quiet) = (queue(), queue());
        for k in 0..1000 {
            busy.add(k, Priority::Normal);
        }
        // More workers than permits: the busy pool always has waiters on the semaphore.
        let pool = tokio::spawn(run(
            busy.clone(),
            8,
            global.clone(),
            ControllerMetrics::detached(),
            running(),
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
            running(),
            slow(vec![], quiet_done.clone()),
        ));
        until(|| quiet_done.load(Ordering::SeqCst) == 1).await;
        let behind = 1000 - busy_done.load(Ordering::SeqCst);
        assert!(
            behind > 900,
            "the quiet controller waited until only {behind} busy keys were left"
        );
        busy.shutdown();
        quiet.shutdown();
        pool.await.expect("busy pool");
        quiet_pool.await.expect("quiet pool");
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
                let mut t = seen.lock().expect("test lock");
                t.push(start.elapsed().as_millis());
                match t.len() {
                    1..=3 => Next::Retry,
                    4 => Next::RequeueAfter(Duration::from_secs(3)),
                    5 => Next::Retry,
                    _ => Next::Done,
                }
            }
        };
        q.add(7, Priority::Normal);
        let metrics = ControllerMetrics::detached();
        let pool = tokio::spawn(run(
            q.clone(),
            1,
            Arc::new(Semaphore::new(1)),
            metrics.clone(),
            running(),
            handler,
        ));
        until(|| times.lock().expect("test lock").len() == 6).await;
        q.shutdown();
        pool.await.expect("pool");
        let t = times.lock().expect("test lock").clone();
        let gaps: Vec<u128> = t.windows(2).map(|w| w[1] - w[0]).collect();
        // 5, 10, 20 ms of backoff; the requeue waits 3 s and resets the backoff to 5 ms.
        assert_eq!(gaps, [5, 10, 20, 3000, 5], "attempts at {t:?}");
        assert_eq!(q.num_requeues(&7), 0, "success forgets");
        assert_eq!(
            (metrics.error.get(), metrics.errors.get()),
            (4, 4),
            "four retries"
        );
        assert_eq!(metrics.requeue_after.get(), 1);
        assert_eq!(metrics.success.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn terminal_should_count_an_error_and_not_retry() {
        let q = queue();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let handler = move |_: u32| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Next::Terminal }
        };
        q.add(1, Priority::Normal);
        let metrics = ControllerMetrics::detached();
        let pool = tokio::spawn(run(
            q.clone(),
            1,
            Arc::new(Semaphore::new(1)),
            metrics.clone(),
            running(),
            handler,
        ));
        tokio::time::sleep(Duration::from_secs(2000)).await;
        q.shutdown();
        pool.await.expect("pool");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(metrics.terminal.get(), 1);
        assert_eq!(metrics.errors.get(), 1);
        assert_eq!(metrics.error.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_should_count_as_a_retry() {
        let q = queue();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let handler = move |_: u32| {
            let first = c.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                assert!(!first, "a plugin bug");
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
            running(),
            handler,
        ));
        until(|| calls.load(Ordering::SeqCst) == 2).await;
        tokio::task::yield_now().await;
        q.shutdown();
        pool.await.expect("the pool survives the panic");
        assert_eq!(metrics.panics.get(), 1);
        assert_eq!(metrics.errors.get(), 1);
        assert_eq!(metrics.success.get(), 1, "retried after the backoff");
        assert_eq!(metrics.active.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_should_wait_for_in_flight_work() {
        let q = queue();
        let (started, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (s, f) = (started.clone(), finished.clone());
        let handler = move |_: u32| {
            let (s, f) = (s.clone(), f.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(5)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Next::Done
            }
        };
        q.add(1, Priority::Normal);
        q.add(2, Priority::Normal);
        let start = Instant::now();
        let pool = tokio::spawn(run(
            q.clone(),
            1,
            Arc::new(Semaphore::new(1)),
            ControllerMetrics::detached(),
            running(),
            handler,
        ));
        until(|| started.load(Ordering::SeqCst) == 1).await;
        q.shutdown();
        pool.await.expect("pool");
        assert_eq!(finished.load(Ordering::SeqCst), 1, "key 1 finished");
        assert_eq!(started.load(Ordering::SeqCst), 1, "key 2 never started");
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "run returned when key 1 did"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_pool_should_hand_its_keys_to_the_next_without_overlap() {
        let q = queue();
        for k in 0..6 {
            q.add(k, Priority::Normal);
        }
        /// (pool, key, start ms, end ms) of one reconcile.
        type Run = (char, u32, u128, u128);
        let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
        let start = Instant::now();
        let handler = |pool: char| {
            let (runs, q) = (runs.clone(), q.clone());
            move |key: u32| {
                let (runs, q) = (runs.clone(), q.clone());
                async move {
                    let began = start.elapsed().as_millis();
                    // Key 0 keeps changing while it is reconciled: one more run each time.
                    if key == 0 && began < 300 {
                        q.add(0, Priority::Normal);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let ended = start.elapsed().as_millis();
                    runs.lock()
                        .expect("test lock")
                        .push((pool, key, began, ended));
                    Next::Done
                }
            }
        };
        let global = Arc::new(Semaphore::new(8));
        let (stop_a, stop) = stop_signal();
        let a = tokio::spawn(run(
            q.clone(),
            2,
            global.clone(),
            ControllerMetrics::detached(),
            stop,
            handler('a'),
        ));
        tokio::time::sleep(Duration::from_millis(150)).await;
        // The swap: the new pool starts, then the old one is told to stop.
        let (stop_b, stop) = stop_signal();
        let b = tokio::spawn(run(
            q.clone(),
            2,
            global.clone(),
            ControllerMetrics::detached(),
            stop,
            handler('b'),
        ));
        stop_a.stop();
        a.await.expect("pool a drains");
        until(|| q.is_empty() && runs.lock().expect("test lock").len() >= 8).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop_b.stop();
        b.await.expect("pool b");

        let runs = runs.lock().expect("test lock").clone();
        let done: std::collections::BTreeSet<u32> = runs.iter().map(|r| r.1).collect();
        assert_eq!(done.len(), 6, "every key ran: {runs:?}");
        assert!(
            runs.iter().filter(|r| r.0 == 'a').all(|r| r.2 < 150),
            "the old pool started nothing after it was stopped: {runs:?}"
        );
        for x in &runs {
            for y in &runs {
                let overlap = x.1 == y.1 && x != y && x.2 < y.3 && y.2 < x.3;
                assert!(!overlap, "key {} ran twice at once: {x:?} {y:?}", x.1);
            }
        }
        let last_of_0 = runs.iter().filter(|r| r.1 == 0).max_by_key(|r| r.2);
        assert_eq!(
            last_of_0.map(|r| r.0),
            Some('b'),
            "the re-add made while the old pool held key 0 ran on the new pool: {runs:?}"
        );
    }
}
