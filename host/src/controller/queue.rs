//! The work queue: client-go's semantics with controller-runtime's priority queue on top.
//!
//! - One entry per key. Adding a key that is waiting for its turn does nothing but raise its
//!   priority; adding a key that waits on a delay makes it ready now (one entry, unlike
//!   client-go's delaying queue, where it would run now and again later).
//! - A key is never handed out twice at once. Adds while its lease is held collapse into one
//!   more run after the lease is dropped.
//! - `add_after` keeps the earlier of two ready times; `add_rate_limited` delays by the key's
//!   own backoff (5 ms doubling to 1000 s), which `forget` resets, and at least by what the
//!   queue's token bucket allows (10 retries a second after a burst of 100: client-go's default
//!   controller rate limiter), so a plugin failing on every parent cannot flood the API server
//!   with retries.
//! - Normal work (a change that asks for something: a new generation, a create, a delete) is
//!   served before status work (a change that only reports: a status, the host's own write
//!   coming back), and both before low-priority work (initial list, resync). Once
//!   [`STARVATION_LIMIT`] keys were handed out from above a lower tier since its last one, that
//!   tier's oldest ready key goes next, so a steady stream of events cannot starve the initial
//!   list (controller-runtime's priority queue can: kubernetes-sigs/controller-runtime#3496),
//!   nor a stream of changes the status work.
//!
//! There is no background task: `get` sleeps until the earliest delayed key is due or an add
//! wakes it. Time is tokio's, so tests run with paused time.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::metrics::QueueMetrics;

/// Hand-outs from above a lower tier since its last one after which that tier's oldest ready
/// key is served.
///
/// Eight keeps events well ahead (low work gets at most one slot in nine while events keep
/// coming, so an event waits behind at most one low item per eight of its peers), yet a
/// 10,000-object initial list still drains at a ninth of the worker throughput under a
/// continuous event storm instead of never, which is what starves in controller-runtime.
/// With all three tiers busy, low work gets one slot in nine and status work one in ten.
pub const STARVATION_LIMIT: u32 = 8;

/// How urgent an add is. `Low` orders below `Status` below `Normal`, so `max` picks the more
/// urgent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    /// Initial list and resync: the object may not have changed (controller-runtime's
    /// `handler.LowPriority`, reported as `priority="-100"`).
    Low,
    /// A change that asks for nothing new: a status reported (the parent's, or a child's),
    /// or the host's own write coming back (`priority="-50"`). The parent is reconciled again
    /// all the same (its output may depend on it), after the changes that do ask.
    Status,
    /// A watch event that changes what is asked, a dependency, a retry or a requeue
    /// (`priority="0"`).
    Normal,
}

/// The tiers, lowest first: index `Priority as usize`.
const TIERS: [Priority; 3] = [Priority::Low, Priority::Status, Priority::Normal];

/// Per-key exponential backoff: `base · 2^failures`, capped at `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The delay after the first failure.
    pub base: Duration,
    /// The largest delay, however many failures.
    pub max: Duration,
}

impl Default for Backoff {
    /// client-go's and controller-runtime's: 5 ms doubling to 1000 s (reached after 18 failures).
    fn default() -> Self {
        Self {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
        }
    }
}

impl Backoff {
    /// The delay after `failures` earlier failures. Integer arithmetic, so 5 ms doubles to
    /// exactly 10 ms, and saturating, so a key that failed a billion times waits `max`.
    pub fn delay(&self, failures: u32) -> Duration {
        self.base
            .saturating_mul(2u32.saturating_pow(failures))
            .min(self.max)
    }
}

/// A token bucket: `rate` tokens a second, at most `burst` saved up. Each retry takes one; one
/// that finds none waits for its turn.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    /// Tokens added per second.
    pub rate: f64,
    /// Most tokens held.
    pub burst: f64,
}

impl Default for Bucket {
    /// client-go's `DefaultControllerRateLimiter` bucket: 10 per second, burst 100.
    fn default() -> Self {
        Self {
            rate: 10.0,
            burst: 100.0,
        }
    }
}

/// The bucket's state: tokens left (negative when retries already wait for future ones) as of
/// `at`.
struct Tokens {
    left: f64,
    at: Instant,
}

impl Tokens {
    /// Takes a token; returns how long until it is there.
    fn reserve(&mut self, bucket: &Bucket, now: Instant) -> Duration {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * bucket.rate;
        self.left = (self.left + earned).min(bucket.burst) - 1.0;
        self.at = now;
        if self.left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.left / bucket.rate)
        }
    }
}

/// A queue of keys. Cheap to clone; clones share the queue.
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// What every handle and lease points at.
struct Shared<K> {
    /// All queue state behind one lock, as client-go's `sync.Cond`: every operation is a few
    /// map and deque operations, so contention stays short.
    state: Mutex<State<K>>,
    /// Wakes `get` callers on an add, a new earlier delay, or shutdown.
    notify: Notify,
    /// Wakes [`WorkQueue::track_unfinished_work`] when a key starts processing.
    working: Notify,
    /// True once the queue is shut down, for waiters other than `get` (a `Notify` permit taken
    /// by them would be lost to a `get` caller).
    closed: watch::Sender<bool>,
    metrics: QueueMetrics,
    backoff: Backoff,
    bucket: Bucket,
}

struct State<K> {
    /// Ready keys in FIFO order per priority, each tagged with the sequence number it was
    /// queued under. Raising a key's priority pushes a new entry and leaves the old one stale
    /// (its number no longer matches `ready`); stale entries are skipped when popped.
    deques: [VecDeque<(K, u64)>; 3],
    /// The authoritative set of ready keys: priority, sequence number, and when it became
    /// ready (for `workqueue_queue_duration_seconds`). A key is never both ready and processing
    /// (nor ready and delayed); a processing key may also wait on a delay.
    ready: HashMap<K, (Priority, u64, Instant)>,
    /// Ready keys per priority (index `Priority as usize`), kept so depth is O(1).
    depth: [i64; 3],
    /// Keys handed out and not yet done, with when they were handed out.
    processing: HashMap<K, Instant>,
    /// Processing keys added again meanwhile (client-go's dirty set): made ready when their
    /// lease drops, at the highest priority they were added with.
    again: HashMap<K, Priority>,
    /// Delayed keys ordered by ready time, and each delayed key's entry in it.
    waiting: BTreeSet<(Instant, u64, K)>,
    waiting_at: HashMap<K, (Instant, u64)>,
    /// Failures per key since it was last forgotten; only keys that failed are present.
    failures: HashMap<K, u32>,
    /// For the starvation guard, per tier below normal (index `Priority as usize`): hand-outs
    /// from a tier above it since its last one.
    streak: [u32; 2],
    /// The retry bucket.
    tokens: Tokens,
    /// Source of the sequence numbers above; a u64 cannot wrap in practice.
    seq: u64,
    shut_down: bool,
}

/// A key handed out by [`WorkQueue::get`]. While it lives no one else gets the key; dropping
/// it is client-go's `Done`.
pub struct Lease<K: Clone + Eq + Hash + Ord> {
    key: K,
    shared: Arc<Shared<K>>,
}

impl<K: Clone + Eq + Hash + Ord> Lease<K> {
    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Clone + Eq + Hash + Ord> Drop for Lease<K> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if let Some(started) = state.processing.remove(&self.key) {
            let held = Instant::now().saturating_duration_since(started);
            self.shared
                .metrics
                .work_duration
                .observe(held.as_secs_f64());
        }
        if let Some(priority) = state.again.remove(&self.key)
            && !state.shut_down
        {
            self.shared
                .make_ready(&mut state, self.key.clone(), priority);
        }
    }
}

impl<K: Clone + Eq + Hash + Ord> Shared<K> {
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().expect("work queue lock poisoned")
    }

    /// Makes a key that is neither ready nor processing ready, cancelling any delay.
    fn make_ready(&self, state: &mut State<K>, key: K, priority: Priority) {
        if let Some((at, seq)) = state.waiting_at.remove(&key) {
            state.waiting.remove(&(at, seq, key.clone()));
        }
        state.seq += 1;
        let seq = state.seq;
        state
            .ready
            .insert(key.clone(), (priority, seq, Instant::now()));
        state.deque(priority).push_back((key, seq));
        state.depth[priority as usize] += 1;
        self.metrics.adds.inc();
        self.set_depth(state);
        self.notify.notify_one();
    }

    fn add(&self, state: &mut State<K>, key: K, priority: Priority) {
        if state.shut_down {
            return;
        }
        if state.processing.contains_key(&key) {
            let again = state.again.entry(key.clone()).or_insert(priority);
            *again = (*again).max(priority);
            // It runs again as soon as the lease drops; a pending delay would be a second entry.
            if let Some((at, seq)) = state.waiting_at.remove(&key) {
                state.waiting.remove(&(at, seq, key));
            }
            return;
        }
        let Some(&(current, _, since)) = state.ready.get(&key) else {
            self.make_ready(state, key, priority);
            return;
        };
        if current >= priority {
            return;
        }
        // Raise it: a fresh entry at the back of its new tier's queue, keeping when it became
        // ready so queue duration covers the whole wait.
        state.seq += 1;
        let seq = state.seq;
        state.ready.insert(key.clone(), (priority, seq, since));
        state.deque(priority).push_back((key, seq));
        state.depth[current as usize] -= 1;
        state.depth[priority as usize] += 1;
        self.set_depth(state);
        self.notify.notify_one();
    }

    /// `workqueue_depth` counts ready keys only, as controller-runtime's priority queue does: a
    /// delayed key is counted when its delay ends.
    fn set_depth(&self, state: &State<K>) {
        self.metrics
            .depth_low
            .set(state.depth[Priority::Low as usize]);
        self.metrics
            .depth_status
            .set(state.depth[Priority::Status as usize]);
        self.metrics
            .depth_normal
            .set(state.depth[Priority::Normal as usize]);
    }

    /// Makes delayed keys whose time has come ready. Retries and requeues are normal work.
    fn promote_due(&self, state: &mut State<K>, now: Instant) {
        while let Some((at, seq, key)) = state.waiting.first().cloned() {
            if at > now {
                break;
            }
            state.waiting.remove(&(at, seq, key.clone()));
            state.waiting_at.remove(&key);
            self.add(state, key, Priority::Normal);
        }
    }

    /// Hands out the next ready key, applying the starvation guard.
    fn pop(&self, state: &mut State<K>) -> Option<K> {
        // A starved tier first (the lowest, if two are), then the most urgent.
        let streak = state.streak;
        let starved = [Priority::Low, Priority::Status]
            .into_iter()
            .filter(|&p| streak[p as usize] >= STARVATION_LIMIT);
        let urgent = TIERS.into_iter().rev();
        let (key, priority, since) = starved.chain(urgent).find_map(|p| state.pop_ready(p))?;
        for below in [Priority::Low, Priority::Status] {
            let streak = &mut state.streak[below as usize];
            if priority == below {
                *streak = 0;
            } else if priority > below {
                *streak = streak.saturating_add(1);
            }
        }
        let now = Instant::now();
        self.metrics
            .queue_duration
            .observe(now.saturating_duration_since(since).as_secs_f64());
        state.processing.insert(key.clone(), now);
        self.working.notify_one();
        self.set_depth(state);
        Some(key)
    }
}

impl<K: Clone + Eq + Hash + Ord> State<K> {
    fn deque(&mut self, priority: Priority) -> &mut VecDeque<(K, u64)> {
        &mut self.deques[priority as usize]
    }

    /// The oldest live entry of one priority, removed from the ready set.
    fn pop_ready(&mut self, priority: Priority) -> Option<(K, Priority, Instant)> {
        while let Some((key, seq)) = self.deque(priority).pop_front() {
            if let Some(&(p, current, since)) = self.ready.get(&key)
                && current == seq
            {
                self.ready.remove(&key);
                self.depth[p as usize] -= 1;
                return Some((key, p, since));
            }
        }
        None
    }
}

impl<K: Clone + Eq + Hash + Ord + Send + 'static> WorkQueue<K> {
    /// An empty queue reporting to `metrics`, retrying failed keys with `backoff`.
    pub fn new(metrics: QueueMetrics, backoff: Backoff) -> Self {
        let state = State {
            deques: Default::default(),
            ready: HashMap::new(),
            depth: [0; 3],
            processing: HashMap::new(),
            again: HashMap::new(),
            waiting: BTreeSet::new(),
            waiting_at: HashMap::new(),
            failures: HashMap::new(),
            streak: [0; 2],
            tokens: Tokens {
                left: Bucket::default().burst,
                at: Instant::now(),
            },
            seq: 0,
            shut_down: false,
        };
        let shared = Shared {
            state: Mutex::new(state),
            notify: Notify::new(),
            working: Notify::new(),
            closed: watch::Sender::new(false),
            metrics,
            backoff,
            bucket: Bucket::default(),
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Makes `key` ready now (cancelling a pending delay), or raises its priority if it is
    /// ready already, or marks it for one more run if it is being processed. Ignored after
    /// shutdown.
    pub fn add(&self, key: K, priority: Priority) {
        let mut state = self.shared.lock();
        self.shared.add(&mut state, key, priority);
    }

    /// Makes `key` ready after `delay`, unless it is ready (or due to run again) already or
    /// waits on an earlier time. Counted in `workqueue_retries_total`, as client-go does.
    pub fn add_after(&self, key: K, delay: Duration) {
        let mut state = self.shared.lock();
        if state.shut_down {
            return;
        }
        self.shared.metrics.retries.inc();
        if delay.is_zero() {
            self.shared.add(&mut state, key, Priority::Normal);
            return;
        }
        if state.ready.contains_key(&key) || state.again.contains_key(&key) {
            return;
        }
        let at = Instant::now() + delay;
        if let Some(&(current, seq)) = state.waiting_at.get(&key) {
            if current <= at {
                return;
            }
            state.waiting.remove(&(current, seq, key.clone()));
        }
        state.seq += 1;
        let seq = state.seq;
        state.waiting.insert((at, seq, key.clone()));
        state.waiting_at.insert(key, (at, seq));
        // An idle `get` may be sleeping until a later time, or not at all.
        self.shared.notify.notify_one();
    }

    /// Delays `key` by its backoff, or longer if the retry bucket is empty, and counts one more
    /// failure for it.
    pub fn add_rate_limited(&self, key: K) {
        let delay = {
            let mut state = self.shared.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            let backoff = self.shared.backoff.delay(*failures);
            *failures = failures.saturating_add(1);
            let turn = state.tokens.reserve(&self.shared.bucket, Instant::now());
            backoff.max(turn)
        };
        self.add_after(key, delay);
    }

    /// Resets `key`'s backoff. Without it a key's failures are remembered forever, so every
    /// success must forget (client-go: "Remember to call Forget!").
    pub fn forget(&self, key: &K) {
        self.shared.lock().failures.remove(key);
    }

    /// The keys handed out and not yet done.
    pub fn processing(&self) -> Vec<K> {
        self.shared.lock().processing.keys().cloned().collect()
    }

    /// Whether `key` is handed out and not yet done.
    pub fn is_processing(&self, key: &K) -> bool {
        self.shared.lock().processing.contains_key(key)
    }

    #[cfg(test)]
    /// How many times `key` has failed since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.shared.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Waits for the next key; `None` once the queue is shut down, even if keys are left (they
    /// are the informers' to re-add on the next start).
    pub async fn get(&self) -> Option<Lease<K>> {
        loop {
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            // Registered before the state is read, so an add or shutdown in between is not missed.
            notified.as_mut().enable();
            let next_due = {
                let mut state = self.shared.lock();
                if state.shut_down {
                    return None;
                }
                self.shared.promote_due(&mut state, Instant::now());
                if let Some(key) = self.shared.pop(&mut state) {
                    if !state.ready.is_empty() {
                        // This call may have taken the wake-up meant for another key.
                        self.shared.notify.notify_one();
                    }
                    let shared = self.shared.clone();
                    return Some(Lease { key, shared });
                }
                state.waiting.first().map(|(at, _, _)| *at)
            };
            match next_due {
                Some(at) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Stops handing out keys: every waiting and later `get` returns `None` and adds are
    /// ignored. Held leases may still finish; the worker pool waits for them.
    pub fn shutdown(&self) {
        self.shared.lock().shut_down = true;
        self.shared.notify.notify_waiters();
        self.shared.closed.send_replace(true);
    }

    /// Completes once the queue is shut down.
    pub async fn closed(&self) {
        let mut closed = self.shared.closed.subscribe();
        // The sender lives as long as the queue, so the wait ends only by becoming true.
        let _ = closed.wait_for(|c| *c).await;
    }

    #[cfg(test)]
    /// Ready plus delayed keys (not those being processed).
    pub fn len(&self) -> usize {
        let state = self.shared.lock();
        state.ready.len() + state.waiting_at.len()
    }

    #[cfg(test)]
    /// Whether no key is ready or delayed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets `workqueue_unfinished_work_seconds` (the summed age of the held leases) and
    /// `workqueue_longest_running_processor_seconds`, which show a stuck reconcile before it
    /// ends; [`WorkQueue::track_unfinished_work`] calls it every 500 ms while keys are
    /// processing, as client-go's queue does (always).
    pub fn update_unfinished_work(&self) {
        let state = self.shared.lock();
        let now = Instant::now();
        let (total, longest) = state
            .processing
            .values()
            .map(|started| now.saturating_duration_since(*started).as_secs_f64())
            .fold((0.0, 0.0f64), |(t, l), age| (t + age, l.max(age)));
        self.shared.metrics.unfinished.set(total);
        self.shared.metrics.longest.set(longest);
    }

    /// Calls [`WorkQueue::update_unfinished_work`] every `period` while keys are processing,
    /// and once more when the last one is done; while none is, it waits without waking, so a
    /// host with many idle controllers is not woken twice a second for each. Never returns.
    pub async fn track_unfinished_work(&self, period: Duration) {
        loop {
            self.update_unfinished_work();
            let idle = self.shared.lock().processing.is_empty();
            if idle {
                // A key taken after the look above left a permit: no start is missed.
                self.shared.working.notified().await;
            }
            tokio::time::sleep(period).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue<K: Clone + Eq + Hash + Ord + Send + 'static>() -> WorkQueue<K> {
        WorkQueue::new(QueueMetrics::detached(), Backoff::default())
    }

    /// The next key, failing the test if none is ready within a (virtual) minute.
    async fn next<K: Clone + Eq + Hash + Ord + Send + 'static>(q: &WorkQueue<K>) -> Lease<K> {
        tokio::time::timeout(Duration::from_secs(60), q.get())
            .await
            .expect("a key within a minute")
            .expect("the queue is open")
    }

    /// Whether no key is ready right now (a lease taken while checking is dropped).
    async fn nothing_ready<K: Clone + Eq + Hash + Ord + Send + 'static>(q: &WorkQueue<K>) -> bool {
        tokio::time::timeout(Duration::from_millis(1), q.get())
            .await
            .is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn add_should_keep_one_entry_per_key_in_fifo_order() {
        let q = queue();
        q.add("a", Priority::Normal);
        q.add("b", Priority::Normal);
        q.add("a", Priority::Normal);
        q.add("c", Priority::Normal);
        assert_eq!(q.len(), 3);
        assert_eq!(*next(&q).await.key(), "a");
        assert_eq!(*next(&q).await.key(), "b");
        assert_eq!(*next(&q).await.key(), "c");
        assert!(nothing_ready(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn lease_should_collapse_adds_while_held_into_one_more_run() {
        let q = queue();
        q.add("a", Priority::Normal);
        let lease = next(&q).await;
        for _ in 0..5 {
            q.add("a", Priority::Low);
            q.add("a", Priority::Normal);
        }
        assert!(nothing_ready(&q).await, "a is held");
        drop(lease);
        let again = next(&q).await;
        assert_eq!(*again.key(), "a");
        drop(again);
        assert!(nothing_ready(&q).await, "exactly one more run");
    }

    #[tokio::test(start_paused = true)]
    async fn add_should_make_a_delayed_key_ready_now_and_cancel_the_delay() {
        let q = queue();
        q.add_after("a", Duration::from_secs(10));
        assert!(nothing_ready(&q).await);
        q.add("a", Priority::Normal);
        assert_eq!(q.len(), 1);
        drop(next(&q).await);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(nothing_ready(&q).await, "the delay was cancelled, not kept");
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_should_keep_the_earlier_time_and_ignore_ready_keys() {
        let q = queue();
        let start = Instant::now();
        q.add_after("a", Duration::from_secs(5));
        q.add_after("a", Duration::from_secs(50));
        q.add_after("a", Duration::from_secs(2));
        assert_eq!(q.len(), 1);
        drop(next(&q).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert!(nothing_ready(&q).await);

        q.add("b", Priority::Normal);
        q.add_after("b", Duration::from_secs(1));
        drop(next(&q).await);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            nothing_ready(&q).await,
            "add_after of a ready key is a no-op"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn delay_firing_while_held_should_run_the_key_once_after() {
        let q = queue();
        q.add("a", Priority::Normal);
        let lease = next(&q).await;
        q.add_after("a", Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(nothing_ready(&q).await, "still held");
        drop(lease);
        drop(next(&q).await);
        assert!(nothing_ready(&q).await, "once, not twice");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_should_double_from_5_ms_to_1000_s_and_reset_on_forget() {
        let q = queue();
        let mut delays = Vec::new();
        for _ in 0..6 {
            let start = Instant::now();
            q.add_rate_limited("a");
            drop(next(&q).await);
            delays.push(start.elapsed());
        }
        let ms = Duration::from_millis;
        assert_eq!(delays, [ms(5), ms(10), ms(20), ms(40), ms(80), ms(160)]);
        assert_eq!(q.num_requeues(&"a"), 6);
        let backoff = Backoff::default();
        assert_eq!(backoff.delay(17), ms(655_360));
        assert_eq!(backoff.delay(18), Duration::from_secs(1000));
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(1000));

        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        let start = Instant::now();
        q.add_rate_limited("a");
        drop(next(&q).await);
        assert_eq!(start.elapsed(), ms(5));
    }

    #[tokio::test(start_paused = true)]
    async fn normal_add_should_raise_a_low_key() {
        let q = queue();
        q.add("a", Priority::Low);
        q.add("b", Priority::Normal);
        q.add("a", Priority::Normal);
        q.add("a", Priority::Low);
        assert_eq!(q.len(), 2);
        assert_eq!(*next(&q).await.key(), "b");
        assert_eq!(*next(&q).await.key(), "a");
        assert!(nothing_ready(&q).await, "the stale low entry is skipped");
    }

    #[tokio::test(start_paused = true)]
    async fn low_priority_should_go_after_normal_but_not_starve() {
        let q = queue::<u32>();
        q.add(1000, Priority::Low);
        q.add(1001, Priority::Low);
        for k in 0..20 {
            q.add(k, Priority::Normal);
        }
        // Sustained normal load: every hand-out is replaced by a fresh normal key, so normal
        // work never runs out (the controller-runtime#3496 pattern).
        let mut fresh = 20..;
        let mut low_at = Vec::new();
        for position in 1..=40 {
            let lease = next(&q).await;
            if *lease.key() >= 1000 {
                low_at.push((position, *lease.key()));
            } else {
                q.add(fresh.next().expect("endless"), Priority::Normal);
            }
        }
        let n = STARVATION_LIMIT + 1;
        assert_eq!(
            low_at,
            [(n, 1000), (2 * n, 1001)],
            "FIFO among low, one per {n}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn status_work_should_go_between_normal_and_low_and_be_raised_by_normal() {
        let q = queue();
        q.add("initial", Priority::Low);
        q.add("echo", Priority::Status);
        q.add("spec", Priority::Normal);
        q.add("report", Priority::Status);
        q.add("report", Priority::Low);
        q.add("initial-raised", Priority::Low);
        q.add("initial-raised", Priority::Status);
        q.add("echo-then-spec", Priority::Status);
        q.add("echo-then-spec", Priority::Normal);
        let mut order = Vec::new();
        for _ in 0..6 {
            order.push(*next(&q).await.key());
        }
        assert_eq!(
            order,
            [
                "spec",
                "echo-then-spec",
                "echo",
                "report",
                "initial-raised",
                "initial"
            ]
        );
        assert!(
            nothing_ready(&q).await,
            "raised keys' old entries are skipped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_tier_below_normal_should_get_its_turn_under_sustained_load() {
        let q = queue::<u32>();
        // Keys 0.. normal, 1000.. status, 2000.. low; the first two tiers are refilled as
        // they are served, so neither ever runs out.
        for k in 0..20 {
            q.add(k, Priority::Normal);
        }
        for k in 1000..1020 {
            q.add(k, Priority::Status);
        }
        q.add(2000, Priority::Low);
        q.add(2001, Priority::Low);
        let (mut normal, mut status) = (20.., 1020..);
        let mut served = Vec::new();
        for _ in 0..40 {
            let key = *next(&q).await.key();
            served.push(key / 1000);
            match key {
                0..1000 => q.add(normal.next().expect("endless"), Priority::Normal),
                1000..2000 => q.add(status.next().expect("endless"), Priority::Status),
                _ => {}
            }
        }
        let at = |tier: u32| {
            served
                .iter()
                .enumerate()
                .filter(|(_, t)| **t == tier)
                .map(|(i, _)| i + 1)
                .collect::<Vec<_>>()
        };
        let n = STARVATION_LIMIT as usize + 1;
        assert_eq!(
            at(2),
            [n, 2 * n],
            "low: one in nine, status counting as above it"
        );
        assert_eq!(
            at(1),
            [n + 1, 2 * n + 2, 3 * n + 2, 4 * n + 2],
            "status: after eight above it, low's turn not counted; one in nine once low drained"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn closed_should_complete_on_shutdown_without_taking_a_get_wake_up() {
        let q = queue::<&str>();
        let closed = tokio::spawn({
            let q = q.clone();
            async move { q.closed().await }
        });
        let getter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await.map(|lease| *lease.key()) }
        });
        tokio::task::yield_now().await;
        q.add("a", Priority::Normal);
        assert_eq!(
            getter.await.expect("getter"),
            Some("a"),
            "the add woke `get`"
        );
        assert!(!closed.is_finished(), "an add does not close the queue");
        q.shutdown();
        closed.await.expect("closed completes");
    }

    #[tokio::test(start_paused = true)]
    async fn depth_should_count_ready_keys_per_priority() {
        let registry = crate::metrics::Metrics::new();
        let metrics = registry.queue("q");
        let q = WorkQueue::new(metrics.clone(), Backoff::default());
        q.add("a", Priority::Low);
        q.add("b", Priority::Low);
        q.add("c", Priority::Normal);
        q.add_after("d", Duration::from_secs(1));
        assert_eq!(
            (metrics.depth_normal.get(), metrics.depth_low.get()),
            (1, 2)
        );
        q.add("b", Priority::Normal);
        assert_eq!(
            (metrics.depth_normal.get(), metrics.depth_low.get()),
            (2, 1)
        );
        let c = next(&q).await;
        assert_eq!(
            (metrics.depth_normal.get(), metrics.depth_low.get()),
            (1, 1)
        );
        assert_eq!(
            metrics.adds.get(),
            3,
            "the raise and the delay are not adds"
        );
        assert_eq!(metrics.retries.get(), 1);
        drop(c);
        let text = registry.encode();
        for observed in ["queue", "work"] {
            let count = format!(
                r#"workqueue_{observed}_duration_seconds_count{{name="q",controller="q"}} 1"#
            );
            assert!(text.contains(&count), "{count} missing from:\n{text}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_should_wake_every_waiter_with_none() {
        let q = queue::<&str>();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await.is_none() })
            })
            .collect();
        tokio::task::yield_now().await;
        q.shutdown();
        for w in waiters {
            assert!(w.await.expect("waiter task"));
        }
        q.add("a", Priority::Normal);
        assert!(q.get().await.is_none());
        assert!(q.is_empty(), "adds after shutdown are ignored");
    }

    #[tokio::test(start_paused = true)]
    async fn unfinished_work_should_add_up_held_leases() {
        let metrics = QueueMetrics::detached();
        let q = WorkQueue::new(metrics.clone(), Backoff::default());
        q.add("a", Priority::Normal);
        q.add("b", Priority::Normal);
        let a = next(&q).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _b = next(&q).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        q.update_unfinished_work();
        assert_eq!(metrics.unfinished.get(), 4.0);
        assert_eq!(metrics.longest.get(), 3.0);
        drop(a);
        q.update_unfinished_work();
        assert_eq!(metrics.unfinished.get(), 1.0, "only b is still held");
    }

    #[tokio::test(start_paused = true)]
    async fn unfinished_work_should_be_tracked_only_while_keys_are_processing() {
        let metrics = QueueMetrics::detached();
        let q = WorkQueue::new(metrics.clone(), Backoff::default());
        let tracker = {
            let q = q.clone();
            tokio::spawn(async move { q.track_unfinished_work(Duration::from_millis(500)).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        // A mark the tracker would overwrite if it woke while nothing is processing.
        metrics.unfinished.set(42.0);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            metrics.unfinished.get(),
            42.0,
            "an idle queue was looked at"
        );

        q.add("a", Priority::Normal);
        let a = next(&q).await;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            metrics.unfinished.get() >= 1.0,
            "a key held for 1.2 s shows {} s of unfinished work",
            metrics.unfinished.get()
        );
        drop(a);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            metrics.unfinished.get(),
            0.0,
            "nothing is processing any more"
        );
        assert_eq!(metrics.longest.get(), 0.0);
        tracker.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn retries_past_the_burst_should_wait_for_the_bucket() {
        let q = queue::<u32>();
        let start = Instant::now();
        for key in 0..150 {
            q.add_rate_limited(key);
        }
        let mut ready_at = Vec::new();
        for _ in 0..150 {
            let lease = next(&q).await;
            ready_at.push(start.elapsed());
            drop(lease);
        }
        // The first 100 retries go after their 5 ms backoff; the other 50 at 10 a second.
        assert!(
            ready_at[99] < Duration::from_millis(50),
            "{:?}",
            ready_at[99]
        );
        let last = ready_at[149];
        assert!(
            last >= Duration::from_secs(5) && last < Duration::from_secs(6),
            "the 150th retry waits for 50 tokens at 10 a second: {last:?}"
        );
    }
}
