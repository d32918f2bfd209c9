//! Prometheus metrics under controller-runtime's names, so dashboards and alerts written for Go
//! operators work unchanged, plus `reconhost_*` for what only this host has (plugin calls,
//! applies, API errors).
//!
//! Each stage gets label-bound handles ([`ControllerMetrics`], [`QueueMetrics`],
//! [`PluginMetrics`]) once, so the hot path never looks up a label set. The label `controller`
//! (and the work queue's `name`) is the plugin's name.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;
type ExemplarHistograms =
    Family<Labels, HistogramWithExemplars<Labels>, fn() -> HistogramWithExemplars<Labels>>;

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Reconcile time and time to converge, in the reconcile buckets, each bucket with the trace of
/// its last observation that named one (OpenMetrics exemplars) while traces are exported.
fn reconcile_histogram() -> HistogramWithExemplars<Labels> {
    HistogramWithExemplars::new(RECONCILE_BUCKETS.into_iter())
}

/// client-go's work-queue buckets: 10 ns to 1000 s, ×10.
fn queue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 12))
}

/// Plugin calls take from ~10 µs (a trivial plugin on a pre-instantiated component) to the
/// deadline (2 s by default, configurable). Doubling from 10 µs reaches 10.5 s in 21 buckets:
/// each bucket is one factor of two, fine enough to see the hot path move, and a raised
/// deadline still lands in a finite bucket. controller-runtime's reconcile buckets start at
/// 5 ms, which would put every healthy call in the first bucket.
fn call_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 2.0, 21))
}

/// The host's metrics registry.
pub struct Metrics {
    registry: Registry,
    reconcile_total: Family<Labels, Counter>,
    reconcile_errors: Family<Labels, Counter>,
    terminal_errors: Family<Labels, Counter>,
    panics: Family<Labels, Counter>,
    reconcile_time: ExemplarHistograms,
    active_workers: Family<Labels, Gauge>,
    max_concurrent: Family<Labels, Gauge>,
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    queue_duration: Histograms,
    work_duration: Histograms,
    retries: Family<Labels, Counter>,
    unfinished: Family<Labels, FloatGauge>,
    longest: Family<Labels, FloatGauge>,
    call_seconds: Histograms,
    plugin_errors: Family<Labels, Counter>,
    memory_peak: Family<Labels, Gauge>,
    applies: Family<Labels, Counter>,
    api_errors: Family<Labels, Counter>,
    fights: Family<Labels, Counter>,
    paced: Family<Labels, Counter>,
    status_dropped: Family<Labels, Counter>,
    reviews_paced: Family<Labels, Counter>,
    contested: Family<Labels, Gauge>,
    finalize_timeouts: Family<Labels, Counter>,
    rest_requests: Family<Labels, Counter>,
    swaps: Family<Labels, Counter>,
    rollouts: Family<Labels, Counter>,
    rollout_share: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    revisions: Family<Labels, Gauge>,
    plugin_states: Family<Labels, Gauge>,
    fetch_seconds: Histograms,
    compile_seconds: Histograms,
    time_to_converge: ExemplarHistograms,
    shard_members: Gauge,
    shard_children: Family<Labels, Gauge>,
    shard_owned: Family<Labels, Gauge>,
    shard_moved: Family<Labels, Counter>,
    shard_handover: Histogram,
}

/// Fetches and compiles take from a millisecond (a cached Rust plugin) to a minute (an 18 MB
/// Python component compiled cold on a busy machine): doubling from 1 ms reaches 131 s.
fn load_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-3, 2.0, 18))
}

/// The states a plugin can be in, as `reconhost_plugins{state}` reports them.
pub const PLUGIN_STATES: [&str; 4] = ["ready", "suspended", "failed", "loading"];

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Metrics {
    /// A registry with every family registered (and no samples until a controller is added).
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let h = |f: fn() -> Histogram| Histograms::new_with_constructor(f);
        let m = Self {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            terminal_errors: Family::default(),
            panics: Family::default(),
            reconcile_time: ExemplarHistograms::new_with_constructor(reconcile_histogram),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: h(queue_histogram),
            work_duration: h(queue_histogram),
            retries: Family::default(),
            unfinished: Family::default(),
            longest: Family::default(),
            call_seconds: h(call_histogram),
            time_to_converge: ExemplarHistograms::new_with_constructor(reconcile_histogram),
            plugin_errors: Family::default(),
            memory_peak: Family::default(),
            applies: Family::default(),
            api_errors: Family::default(),
            fights: Family::default(),
            paced: Family::default(),
            status_dropped: Family::default(),
            reviews_paced: Family::default(),
            contested: Family::default(),
            finalize_timeouts: Family::default(),
            rest_requests: Family::default(),
            swaps: Family::default(),
            rollouts: Family::default(),
            rollout_share: Family::default(),
            revisions: Family::default(),
            plugin_states: Family::default(),
            fetch_seconds: h(load_histogram),
            compile_seconds: h(load_histogram),
            shard_members: Gauge::default(),
            shard_children: Family::default(),
            shard_owned: Family::default(),
            shard_moved: Family::default(),
            // From 10 ms (a move with nothing in flight) doubling to 164 s (reconciles that
            // run to the grace period).
            shard_handover: Histogram::new(exponential_buckets(0.01, 2.0, 15)),
            registry: Registry::default(),
        };
        // prometheus-client appends `_total` to counters itself.
        let r = &mut registry;
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            m.reconcile_total.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            m.reconcile_errors.clone(),
        );
        r.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            m.terminal_errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            m.panics.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            m.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            m.active_workers.clone(),
        );
        r.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            m.max_concurrent.clone(),
        );
        r.register(
            "workqueue_depth",
            "Current depth of workqueue",
            m.depth.clone(),
        );
        r.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            m.adds.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            m.queue_duration.clone(),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            m.work_duration.clone(),
        );
        r.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            m.retries.clone(),
        );
        r.register("workqueue_unfinished_work_seconds", "How many seconds of work has been done that is in progress and hasn't been observed by work_duration", m.unfinished.clone());
        r.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            m.longest.clone(),
        );
        r.register(
            "reconhost_plugin_call_seconds",
            "Time in one plugin call, including response validation",
            m.call_seconds.clone(),
        );
        r.register(
            "reconhost_time_to_converge_seconds",
            "Time from a parent's new generation being seen to a reconcile at that generation going through with nothing left waiting",
            m.time_to_converge.clone(),
        );
        r.register(
            "reconhost_plugin_errors",
            "Failed plugin calls by kind of failure",
            m.plugin_errors.clone(),
        );
        r.register(
            "reconhost_plugin_memory_peak_bytes",
            "Largest linear memory a call of the plugin reached",
            m.memory_peak.clone(),
        );
        r.register(
            "reconhost_apply",
            "Children planned, by action (create, update, delete, unchanged)",
            m.applies.clone(),
        );
        r.register(
            "reconhost_api_errors",
            "Failed API calls by the applier, by verb and HTTP status",
            m.api_errors.clone(),
        );
        r.register(
            "reconhost_controller_fights",
            "Times the fight breaker stopped re-applying a child another field manager keeps changing",
            m.fights.clone(),
        );
        r.register(
            "reconhost_writes_paced",
            "Reconciles whose writes waited because the plugin or the parent wrote too often",
            m.paced.clone(),
        );
        r.register(
            "reconhost_status_fields_dropped",
            "Fields of a plugin's status that the parent kind's schema does not declare, dropped from the status written (up to 16 named per write)",
            m.status_dropped.clone(),
        );
        r.register(
            "reconhost_access_reviews_paced",
            "SubjectAccessReviews that waited because the plugin's ServiceAccount asked too many",
            m.reviews_paced.clone(),
        );
        r.register(
            "reconhost_contested_children",
            "Children whose fight breaker has tripped and not yet closed",
            m.contested.clone(),
        );
        r.register(
            "reconhost_finalize_timeouts",
            "Parents whose finalizer the host removed because the plugin's cleanup passed its finalize timeout",
            m.finalize_timeouts.clone(),
        );
        r.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            m.rest_requests.clone(),
        );
        r.register(
            "reconhost_plugin_swaps",
            "Plugin installs and upgrades, by result (installed, upgraded, failed)",
            m.swaps.clone(),
        );
        r.register(
            "reconhost_rollout_transitions",
            "Progressive rollout transitions by plugin and result (step, promoted, rolled_back, aborted)",
            m.rollouts.clone(),
        );
        r.register(
            "reconhost_rollout_share_percent",
            "The share of a plugin's parents its rollout candidate serves, in percent",
            m.rollout_share.clone(),
        );
        r.register(
            "reconhost_revision_outcomes",
            "What a plugin's stable and candidate revisions did since each was prepared, by outcome (calls, failed_calls, errors, synced_false, fights, shadowed, diverged)",
            m.revisions.clone(),
        );
        r.register(
            "reconhost_plugins",
            "ReconcilePlugins by state (ready, suspended, failed, loading)",
            m.plugin_states.clone(),
        );
        r.register(
            "reconhost_plugin_fetch_seconds",
            "Time to fetch and verify a plugin's component, by source (configmap, oci)",
            m.fetch_seconds.clone(),
        );
        r.register(
            "reconhost_plugin_compile_seconds",
            "Time to compile a component or load it from the compiled-code cache, by provenance",
            m.compile_seconds.clone(),
        );
        r.register(
            "reconhost_shard_members",
            "Live members of this replica's ring, itself included, as it last read their Leases (0 without sharding)",
            m.shard_members.clone(),
        );
        r.register(
            "reconhost_shard_cached_children",
            "Children in this replica's caches, whole (its parents') or as stubs (other replicas' parents': metadata only), by form",
            m.shard_children.clone(),
        );
        r.register(
            "reconhost_shard_parents_owned",
            "Cached parents this replica reconciles, per plugin",
            m.shard_owned.clone(),
        );
        r.register(
            "reconhost_shard_moved_parents",
            "Parents that changed owner at this replica, by direction (gained, lost)",
            m.shard_moved.clone(),
        );
        r.register(
            "reconhost_shard_handover_seconds",
            "Time from deciding to leave parents to the other members to publishing it: the drain of their in-flight reconciles",
            m.shard_handover.clone(),
        );
        for result in ["installed", "upgraded", "failed"] {
            let _ = m.swaps.get_or_create(&labels(&[("result", result)]));
        }
        // At 0 from the start, also for a host that runs `--plugin` files and no
        // ReconcilePlugins: the chart's alert on plugins not Ready compares against them.
        for state in PLUGIN_STATES {
            let _ = m.plugin_states.get_or_create(&labels(&[("state", state)]));
        }
        Arc::new(Self { registry, ..m })
    }

    /// Handles for one controller; pre-initialises its result counters to 0, like
    /// controller-runtime, so rates exist before the first error.
    pub fn controller(&self, name: &str) -> ControllerMetrics {
        let c = labels(&[("controller", name)]);
        let result = |r: &str| {
            self.reconcile_total
                .get_or_create_owned(&labels(&[("controller", name), ("result", r)]))
        };
        // controller-runtime's `result="requeue"` (a bare requeue) has no counterpart here (a
        // plugin asks for a delay), but dashboards built for it expect the series.
        result("requeue");
        ControllerMetrics {
            success: result("success"),
            error: result("error"),
            requeue_after: result("requeue_after"),
            errors: self.reconcile_errors.get_or_create_owned(&c),
            terminal: self.terminal_errors.get_or_create_owned(&c),
            panics: self.panics.get_or_create_owned(&c),
            time: self.reconcile_time.get_or_create_owned(&c),
            active: self.active_workers.get_or_create_owned(&c),
            max_concurrent: self.max_concurrent.get_or_create_owned(&c),
        }
    }

    /// Handles for one controller's work queue.
    pub fn queue(&self, name: &str) -> QueueMetrics {
        let l = labels(&[("name", name), ("controller", name)]);
        let depth = |p: &str| {
            self.depth.get_or_create_owned(&labels(&[
                ("name", name),
                ("controller", name),
                ("priority", p),
            ]))
        };
        QueueMetrics {
            depth_normal: depth("0"),
            depth_status: depth("-50"),
            depth_low: depth("-100"),
            adds: self.adds.get_or_create_owned(&l),
            queue_duration: self.queue_duration.get_or_create_owned(&l),
            work_duration: self.work_duration.get_or_create_owned(&l),
            retries: self.retries.get_or_create_owned(&l),
            unfinished: self.unfinished.get_or_create_owned(&l),
            longest: self.longest.get_or_create_owned(&l),
        }
    }

    /// Handles for one plugin's calls and applies.
    pub fn plugin(&self, name: &str) -> PluginMetrics {
        let p = labels(&[("plugin", name)]);
        for action in [
            "create",
            "update",
            "delete",
            "recreate",
            "unchanged",
            "kept",
            "waiting",
        ] {
            self.applies
                .get_or_create_owned(&labels(&[("plugin", name), ("action", action)]));
        }
        // Every kind of failure at 0, as controller-runtime does for its results: a rate (the
        // chart's trap alert, the dashboard's failures) needs the series before the first
        // failure.
        for kind in crate::runtime::CallErrorKind::LABELS {
            self.plugin_errors
                .get_or_create_owned(&labels(&[("plugin", name), ("kind", kind)]));
        }
        PluginMetrics {
            name: name.to_owned(),
            call_seconds: self.call_seconds.get_or_create_owned(&p),
            time_to_converge: self.time_to_converge.get_or_create_owned(&p),
            memory_peak: self.memory_peak.get_or_create_owned(&p),
            errors: self.plugin_errors.clone(),
            applies: self.applies.clone(),
            api_errors: self.api_errors.clone(),
            fights: self.fights.get_or_create_owned(&p),
            paced: self.paced.get_or_create_owned(&p),
            status_dropped: self.status_dropped.get_or_create_owned(&p),
            contested: self.contested.get_or_create_owned(&p),
            // Created at 0 with the plugin, so that an alert on its increase has a series to
            // compare before the first timeout.
            finalize_timeouts: self.finalize_timeouts.get_or_create_owned(&p),
        }
    }

    /// A SubjectAccessReview for `service_account` waited for its budget.
    pub fn review_paced(&self, service_account: &str) {
        self.reviews_paced
            .get_or_create(&vec![(
                "service_account".to_owned(),
                service_account.to_owned(),
            )])
            .inc();
    }

    /// Counts one response of the API server (each attempt, retries included) by status code,
    /// method and host, as client-go's `rest_client_requests_total`.
    pub fn rest_request(&self, code: &str, method: &str, host: &str) {
        self.rest_requests
            .get_or_create(&labels(&[
                ("code", code),
                ("method", method),
                ("host", host),
            ]))
            .inc();
    }

    /// Records a reading of the ring: its live members and the parents owned per plugin.
    pub fn shard(&self, members: usize, owned: &[(String, usize)]) {
        self.shard_members
            .set(i64::try_from(members).unwrap_or(i64::MAX));
        for (plugin, count) in owned {
            self.shard_owned
                .get_or_create_owned(&labels(&[("plugin", plugin)]))
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// Records how many children the caches hold whole and as stubs.
    pub fn shard_children(&self, whole: usize, stubs: usize) {
        for (form, count) in [("whole", whole), ("stub", stubs)] {
            self.shard_children
                .get_or_create_owned(&labels(&[("form", form)]))
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Counts parents that moved to (`gained`) or from (`lost`) this replica.
    pub fn shard_moved(&self, direction: &str, parents: usize) {
        self.shard_moved
            .get_or_create_owned(&labels(&[("direction", direction)]))
            .inc_by(parents as u64);
    }

    /// Records how long a handover's drain took.
    pub fn shard_handover(&self, elapsed: Duration) {
        self.shard_handover.observe(elapsed.as_secs_f64());
    }

    /// Handles for plugin installs and upgrades.
    pub fn swaps(&self) -> SwapMetrics {
        let result = |r: &str| self.swaps.get_or_create_owned(&labels(&[("result", r)]));
        SwapMetrics {
            installed: result("installed"),
            upgraded: result("upgraded"),
            failed: result("failed"),
        }
    }

    /// Counts a rollout transition of `plugin` (`step`, `promoted`, `rolled_back`, `aborted`).
    pub fn rollout(&self, plugin: &str, result: &str) {
        self.rollouts
            .get_or_create_owned(&labels(&[("plugin", plugin), ("result", result)]))
            .inc();
    }

    /// Sets the candidate's share of `plugin`'s parents.
    pub fn rollout_share(&self, plugin: &str, percent: f64) {
        self.rollout_share
            .get_or_create_owned(&labels(&[("plugin", plugin)]))
            .set(percent);
    }

    /// Sets what `plugin`'s revision in `role` (`stable`, `candidate`) did since it was
    /// prepared.
    pub fn revision(&self, plugin: &str, role: &str, health: &crate::controller::health::Snapshot) {
        let outcomes = [
            ("calls", health.calls),
            ("failed_calls", health.failed_calls),
            ("errors", health.errors),
            ("synced_false", health.synced_false),
            ("fights", health.fights),
            ("shadowed", health.shadowed),
            ("diverged", health.diverged),
        ];
        for (outcome, value) in outcomes {
            self.revisions
                .get_or_create_owned(&labels(&[
                    ("plugin", plugin),
                    ("role", role),
                    ("outcome", outcome),
                ]))
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    /// Sets `reconhost_plugins{state}` from a count per state (see [`PLUGIN_STATES`]).
    pub fn plugin_states(&self, counts: &[(&str, i64)]) {
        for state in PLUGIN_STATES {
            let count = counts
                .iter()
                .find(|(s, _)| *s == state)
                .map_or(0, |(_, c)| *c);
            self.plugin_states
                .get_or_create(&labels(&[("state", state)]))
                .set(count);
        }
    }

    /// Records how long fetching a component took, by source.
    pub fn fetch_seconds(&self, source: &str, elapsed: Duration) {
        self.fetch_seconds
            .get_or_create(&labels(&[("source", source)]))
            .observe(elapsed.as_secs_f64());
    }

    /// Records how long compiling (or loading from the cache) took, by provenance.
    pub fn compile_seconds(&self, provenance: &str, elapsed: Duration) {
        self.compile_seconds
            .get_or_create(&labels(&[("provenance", provenance)]))
            .observe(elapsed.as_secs_f64());
    }

    /// Every metric in the Prometheus text format (OpenMetrics flavour, which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Counters of plugin installs and upgrades.
#[derive(Clone, Debug)]
pub struct SwapMetrics {
    /// A new controller started.
    pub installed: Counter,
    /// A running controller took a new generation.
    pub upgraded: Counter,
    /// An install or upgrade failed (the old generation, if any, kept serving).
    pub failed: Counter,
}

/// Label-bound handles of one controller.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    /// `result="success"`.
    pub success: Counter,
    /// `result="error"`.
    pub error: Counter,
    /// `result="requeue_after"`.
    pub requeue_after: Counter,
    /// `controller_runtime_reconcile_errors_total`.
    pub errors: Counter,
    /// `controller_runtime_terminal_reconcile_errors_total`.
    pub terminal: Counter,
    /// `controller_runtime_reconcile_panics_total`: recovered handler panics (also errors).
    pub panics: Counter,
    /// `controller_runtime_reconcile_time_seconds` ([`ControllerMetrics::reconciled`]).
    pub time: HistogramWithExemplars<Labels>,
    /// `controller_runtime_active_workers`.
    pub active: Gauge,
    /// `controller_runtime_max_concurrent_reconciles`.
    pub max_concurrent: Gauge,
}

impl ControllerMetrics {
    /// Records how long a reconcile took, with the trace it was exported in, if any (the
    /// bucket's exemplar).
    pub fn reconciled(&self, elapsed: Duration, trace_id: Option<String>) {
        let exemplar = trace_id.map(|id| labels(&[("trace_id", &id)]));
        self.time.observe(elapsed.as_secs_f64(), exemplar, None);
    }

    #[cfg(test)]
    /// Handles in a registry of their own that nothing encodes, so the worker pool can be
    /// tested without a host.
    pub fn detached() -> Self {
        Metrics::new().controller("test")
    }
}

/// Label-bound handles of one work queue.
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    /// `workqueue_depth{priority="0"}`.
    pub depth_normal: Gauge,
    /// `workqueue_depth{priority="-50"}`: status work ([`crate::controller::queue::Priority::Status`]).
    pub depth_status: Gauge,
    /// `workqueue_depth{priority="-100"}`.
    pub depth_low: Gauge,
    /// `workqueue_adds_total`.
    pub adds: Counter,
    /// `workqueue_queue_duration_seconds`.
    pub queue_duration: Histogram,
    /// `workqueue_work_duration_seconds`.
    pub work_duration: Histogram,
    /// `workqueue_retries_total`.
    pub retries: Counter,
    /// `workqueue_unfinished_work_seconds`.
    pub unfinished: FloatGauge,
    /// `workqueue_longest_running_processor_seconds`.
    pub longest: FloatGauge,
}

impl QueueMetrics {
    #[cfg(test)]
    /// Handles in a registry of their own that nothing encodes, so the queue can be tested
    /// without a host.
    pub fn detached() -> Self {
        Metrics::new().queue("test")
    }
}

/// Label-bound handles of one plugin.
#[derive(Clone, Debug)]
pub struct PluginMetrics {
    name: String,
    call_seconds: Histogram,
    time_to_converge: HistogramWithExemplars<Labels>,
    memory_peak: Gauge,
    errors: Family<Labels, Counter>,
    applies: Family<Labels, Counter>,
    api_errors: Family<Labels, Counter>,
    fights: Counter,
    paced: Counter,
    status_dropped: Counter,
    contested: Gauge,
    finalize_timeouts: Counter,
}

impl PluginMetrics {
    /// Records the duration of a call that returned (failed calls are counted by [`Self::error`]).
    pub fn call_seconds(&self, elapsed: Duration) {
        self.call_seconds.observe(elapsed.as_secs_f64());
    }

    /// Records how long a parent's generation took from being seen to converged, with the
    /// trace of the reconcile that converged it, if it is exported.
    pub fn converged(&self, elapsed: Duration, trace_id: Option<String>) {
        let exemplar = trace_id.map(|id| labels(&[("trace_id", &id)]));
        self.time_to_converge
            .observe(elapsed.as_secs_f64(), exemplar, None);
    }

    /// Records a call's memory high-water mark; the gauge keeps the largest seen. `fetch_max`,
    /// because calls of one plugin finish concurrently and a get-then-set could lower it.
    pub fn memory_peak(&self, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.memory_peak.inner().fetch_max(bytes, Ordering::Relaxed);
    }

    /// Counts a failed call by its kind label (`deadline`, `trap`, `permanent`, ...).
    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&labels(&[("plugin", &self.name), ("kind", kind)]))
            .inc();
    }

    /// Counts one planned child action.
    pub fn apply(&self, action: &str) {
        self.applies
            .get_or_create(&labels(&[("plugin", &self.name), ("action", action)]))
            .inc();
    }

    /// Counts a trip of the fight breaker.
    pub fn fight(&self) {
        self.fights.inc();
    }

    /// Counts a reconcile whose writes had to wait for the write pace.
    pub fn paced(&self) {
        self.paced.inc();
    }

    /// Counts fields dropped from a status written, because the parent kind does not declare
    /// them.
    pub fn status_dropped(&self, fields: usize) {
        self.status_dropped
            .inc_by(u64::try_from(fields).unwrap_or(u64::MAX));
    }

    /// Sets how many of the plugin's children are contested.
    pub fn contested(&self, children: usize) {
        self.contested
            .set(i64::try_from(children).unwrap_or(i64::MAX));
    }

    /// Counts a parent released because the plugin's cleanup passed its finalize timeout.
    pub fn finalize_timeout(&self) {
        self.finalize_timeouts.inc();
    }

    /// Counts a failed API call.
    pub fn api_error(&self, verb: &str, code: &str) {
        self.api_errors
            .get_or_create(&labels(&[
                ("plugin", &self.name),
                ("verb", verb),
                ("code", code),
            ]))
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_should_carry_controller_runtime_and_reconhost_names() {
        let m = Metrics::new();
        let c = m.controller("webapp");
        c.success.inc();
        c.errors.inc();
        c.terminal.inc();
        c.panics.inc();
        c.reconciled(Duration::from_millis(20), Some("4bf92f3577b34da6".into()));
        c.active.inc();
        c.max_concurrent.set(4);
        let q = m.queue("webapp");
        q.depth_normal.set(3);
        q.adds.inc();
        q.queue_duration.observe(1e-3);
        q.work_duration.observe(2e-3);
        q.retries.inc();
        q.unfinished.set(1.5);
        q.longest.set(0.5);
        let p = m.plugin("webapp");
        p.call_seconds(Duration::from_micros(90));
        p.error("deadline");
        p.memory_peak(2 << 20);
        p.memory_peak(1 << 20);
        p.apply("create");
        p.api_error("apply", "409");
        let text = m.encode();
        for expected in [
            r#"controller_runtime_reconcile_total{controller="webapp",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="webapp",result="error"} 0"#,
            r#"controller_runtime_reconcile_total{controller="webapp",result="requeue"} 0"#,
            r#"controller_runtime_reconcile_total{controller="webapp",result="requeue_after"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="webapp"} 1"#,
            r#"controller_runtime_terminal_reconcile_errors_total{controller="webapp"} 1"#,
            r#"controller_runtime_reconcile_panics_total{controller="webapp"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_bucket{le="0.025",controller="webapp"} 1 # {trace_id="4bf92f3577b34da6"} 0.02"#,
            r#"controller_runtime_reconcile_time_seconds_bucket{le="60.0",controller="webapp"} 1"#,
            r#"controller_runtime_active_workers{controller="webapp"} 1"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="webapp"} 4"#,
            r#"workqueue_depth{name="webapp",controller="webapp",priority="0"} 3"#,
            r#"workqueue_depth{name="webapp",controller="webapp",priority="-100"} 0"#,
            r#"workqueue_adds_total{name="webapp",controller="webapp"} 1"#,
            r#"workqueue_queue_duration_seconds_bucket{le="1e-8",name="webapp",controller="webapp"} 0"#,
            r#"workqueue_queue_duration_seconds_bucket{le="1000.0",name="webapp",controller="webapp"} 1"#,
            r#"workqueue_work_duration_seconds_count{name="webapp",controller="webapp"} 1"#,
            r#"workqueue_retries_total{name="webapp",controller="webapp"} 1"#,
            r#"workqueue_unfinished_work_seconds{name="webapp",controller="webapp"} 1.5"#,
            r#"workqueue_longest_running_processor_seconds{name="webapp",controller="webapp"} 0.5"#,
            r#"reconhost_plugin_call_seconds_bucket{le="0.00016",plugin="webapp"} 1"#,
            r#"reconhost_plugin_errors_total{plugin="webapp",kind="deadline"} 1"#,
            r#"reconhost_plugin_memory_peak_bytes{plugin="webapp"} 2097152"#,
            r#"reconhost_apply_total{plugin="webapp",action="create"} 1"#,
            r#"reconhost_apply_total{plugin="webapp",action="update"} 0"#,
            r#"reconhost_apply_total{plugin="webapp",action="delete"} 0"#,
            r#"reconhost_apply_total{plugin="webapp",action="unchanged"} 0"#,
            r#"reconhost_api_errors_total{plugin="webapp",verb="apply",code="409"} 1"#,
            r#"reconhost_finalize_timeouts_total{plugin="webapp"} 0"#,
            r#"reconhost_plugin_errors_total{plugin="webapp",kind="trap"} 0"#,
            r#"reconhost_plugins{state="failed"} 0"#,
            "# TYPE controller_runtime_reconcile_time_seconds histogram",
            "# TYPE workqueue_depth gauge",
            "# TYPE workqueue_adds counter",
        ] {
            assert!(text.contains(expected), "{expected} missing from:\n{text}");
        }
    }

    #[test]
    fn buckets_should_match_controller_runtime() {
        let m = Metrics::new();
        m.controller("c").reconciled(Duration::from_secs(1), None);
        m.queue("c").queue_duration.observe(1.0);
        let text = m.encode();
        let bounds = |name: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
                .map(|l| l.split('"').nth(1).unwrap_or_default().to_owned())
                .collect()
        };
        let reconcile = bounds("controller_runtime_reconcile_time_seconds");
        assert_eq!(reconcile.len(), RECONCILE_BUCKETS.len() + 1, "plus +Inf");
        assert_eq!(reconcile.first().map(String::as_str), Some("0.005"));
        let queue = bounds("workqueue_queue_duration_seconds");
        assert_eq!(queue.len(), 13, "12 bounds, 1e-8 to 1e3, plus +Inf");
        assert_eq!(queue[11], "1000.0");
    }
}
