//! `reconhost run`: the long-running host process.
//!
//! Start-up: connect; build the runtime, the shared informers and the [`Supervisor`]; then
//! either
//! - the static mode (`--plugin` files): load every file and install it (a file that does not
//!   load stops the start with its error: a static list is a deployment mistake, better caught
//!   at once), and with `--watch` reload a file when it changes; or
//! - the dynamic mode (no `--plugin`): reconcile ReconcilePlugin resources ([`Lifecycle`]),
//!   where one plugin that fails only fails itself.
//!
//! How the replica shares the parents with others (alone, elected, or a member of a sharding
//! ring) is [`replicas`]'s.
//!
//! `/readyz` is true once the start-up set is serving: every file's plugin has synced, or every
//! ReconcilePlugin of the first list has been reconciled once.
//!
//! Shutdown (SIGTERM or SIGINT): readiness goes false, no reconcile starts any more, and
//! in-flight reconciles get `--graceful-shutdown-seconds` to finish; then the leader's Lease is
//! released (or the ring member's deleted) and the watches stop.

mod replicas;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use tokio::sync::{Semaphore, watch};
use tracing::{info, warn};

use crate::cache::{Informers, Sieve};
use crate::cli::RunArgs;
use crate::controller::guest_memory::{self, GuestMemory};
use crate::controller::workers::stop_signal;
use crate::controller::{Context, Spec};
use crate::identity::access::Access;
use crate::lifecycle::load::Loader;
use crate::lifecycle::{Defaults, Lifecycle};
use crate::metrics::Metrics;
use crate::runtime::{Limits, Runtime};
use crate::source::{SourceConfig, Sources};
use crate::supervisor::Supervisor;
use replicas::{Replication, SERVICE_ACCOUNT_NAMESPACE};

/// Runs the host until `shutdown` completes.
pub async fn run(
    args: RunArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    let replication = Replication::of(&args)?;
    // With sharding every write waits on the fence; the ring's own Lease writes go through a
    // client without it.
    let instrumented = |fence| crate::client::Instrumented {
        metrics: metrics.clone(),
        request_timeout: args.request_timeout,
        fence,
    };
    let client = crate::client::client(
        args.kubeconfig.as_deref(),
        Some(instrumented(replication.fence())),
    )
    .await?;
    let lease_client =
        crate::client::client(args.kubeconfig.as_deref(), Some(instrumented(None))).await?;
    let version = client
        .apiserver_version()
        .await
        .context("asking the API server for its version")?;
    info!(server = %version.git_version, "connected to the API server");

    let runtime = Runtime::new(
        args.compile
            .runtime_config()
            .context("finding this executable to compile plugins in")?,
    )?;
    let grace = Duration::from_secs(args.graceful_shutdown_seconds);
    let (stop_election, election_stop) = stop_signal();
    let (leads, owns) = replication.at_start();
    let (leading_tx, leading) = watch::channel(leads);
    let (assignment_tx, assignment) = watch::channel(owns);
    // A ring member caches whole only its own parents' children; a standby of leader election
    // keeps everything, to take over warm.
    let sieve = replication.fence().is_some().then(|| {
        let assignment = assignment.clone();
        Arc::new(Sieve::new(move |parent| assignment.borrow().keeps(parent)))
    });
    let informers = Informers::new(
        client.clone(),
        args.namespace.clone(),
        args.watch_timeout,
        sieve,
    );
    let lease = replication.leases();
    let guest_budget =
        guest_memory::budget(args.max_guest_memory_mib, guest_memory::container_limit());
    info!(
        budget_mib = guest_budget.map(|b| b >> 20),
        "guest memory: calls reserve their plugin's memory limit from this budget"
    );
    // The host's own namespace (in a cluster) and its Lease's: no plugin's child is their
    // Namespace object, nor the Lease.
    let protected_namespaces = std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .ok()
        .map(|ns| ns.trim().to_owned())
        .into_iter()
        .chain(lease.as_ref().map(|l| l.namespace.clone()))
        .filter(|ns| !ns.is_empty())
        .collect();
    let access = Arc::new(Access::new(client.clone()).with_metrics(metrics.clone()));
    let ctx = Context {
        informers: informers.clone(),
        client: client.clone(),
        metrics: metrics.clone(),
        global: Arc::new(Semaphore::new(usize::from(args.max_total_reconciles))),
        sync_period: args.sync_period,
        grace,
        access: access.clone(),
        allow_builtin_parents: args.allow_builtin_parents,
        fights: args.fight_policy(),
        leading,
        assignment,
        protected_namespaces,
        lease,
        guest_memory: GuestMemory::new(guest_budget),
    };
    let supervisor = Arc::new(Supervisor::new(ctx, args.cache_sync_timeout, assignment_tx));
    // What `/readyz` says; a ring member joins only once it is true.
    let ready = Arc::new(watch::Sender::new(false));
    let replicating = replication.start(
        client.clone(),
        lease_client,
        &supervisor,
        leading_tx,
        ready.subscribe(),
        election_stop,
    );
    let concurrency = usize::from(args.max_concurrent_reconciles);

    let (stop, stopped) = watch::channel(false);
    let probes = serve_probes(&args, ready.clone(), stopped.clone()).await?;
    let metrics_server = serve_metrics(&args, metrics.clone(), stopped.clone()).await?;

    let (stop_lifecycle, lifecycle_stop) = stop_signal();
    let mut background = Vec::new();
    // What a first pass or a convergence freed goes back to the system once it is over.
    background.push(tokio::spawn(crate::trim::after_bursts(
        Duration::from_secs(2),
        lifecycle_stop.clone(),
    )));
    if args.plugins.is_empty() {
        // Plugins with identities: a revoked grant must stop working before its cached answer
        // would expire.
        background.push(tokio::spawn(crate::identity::bindings::forget_on_change(
            client.clone(),
            access,
            lifecycle_stop.clone(),
        )));
        let sources = Sources::new(
            client.clone(),
            &SourceConfig {
                insecure_registries: args.insecure_registries.clone(),
                max_bytes: args.max_plugin_bytes,
                trusted_keys: trusted_keys(&args.plugin_public_keys)?,
            },
        );
        let loader = Loader::new(
            runtime.clone(),
            sources,
            usize::from(args.max_concurrent_compiles),
            metrics.clone(),
        );
        let defaults = Defaults {
            limits: Limits::default().child_finalizers(args.allow_child_finalizers),
            concurrency,
            selector: args.plugin_selector.clone(),
        };
        let (supervisor, ready) = (supervisor.clone(), ready.clone());
        background.push(tokio::spawn(async move {
            let (lifecycle, _registration) =
                start_lifecycle(&informers, supervisor, loader, defaults, metrics).await;
            let mut initial = lifecycle.ready();
            tokio::spawn(async move {
                if initial.wait_for(|r| *r).await.is_ok() {
                    info!("every installed plugin has been reconciled once; ready");
                    ready.send_replace(true);
                }
            });
            lifecycle.run(lifecycle_stop).await;
        }));
        info!("host running; plugins come from ReconcilePlugin resources");
    } else {
        let static_limits = Limits::default().child_finalizers(args.allow_child_finalizers);
        for path in &args.plugins {
            let plugin = crate::source::file::load(&runtime, path, static_limits.clone()).await?;
            // The static mode is the operator's own list: its plugins act as the host.
            let spec = Spec {
                plugin,
                config: serde_json::json!({}),
                concurrency,
                identity: None,
                parent_selector: args.parent_selector.clone(),
                parent_namespaces: None,
                resync: None,
                ignore_parent_status: false,
                adopt: None,
                decorator: None,
            };
            supervisor
                .apply(&owner_of(path), spec)
                .await
                .with_context(|| format!("starting plugin {}", path.display()))?;
        }
        ready.send_replace(true);
        info!(
            plugins = supervisor.len(),
            objects = informers.cached_objects(),
            "caches synced; ready"
        );
        if args.watch {
            for path in &args.plugins {
                background.push(tokio::spawn(crate::watch::reload_on_change(
                    path.clone(),
                    owner_of(path),
                    runtime.clone(),
                    supervisor.clone(),
                    crate::watch::Settings {
                        concurrency,
                        limits: static_limits.clone(),
                        parent_selector: args.parent_selector.clone(),
                    },
                    lifecycle_stop.clone(),
                )));
            }
        }
    }

    shutdown.await;
    ready.send_replace(false);
    stop_lifecycle.stop();
    supervisor.shutdown().await;
    // Released only once nothing reconciles any more, so the next leader never overlaps.
    stop_election.stop();
    if let Some(task) = replicating {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    for task in background {
        if tokio::time::timeout(grace, task).await.is_err() {
            warn!("a background task did not stop in time");
        }
    }
    let _ = stop.send(true);
    let _ = tokio::join!(probes, metrics_server);
    info!("shut down");
    Ok(())
}

/// Starts the ReconcilePlugin controller, retrying while its CRD is not installed: the host
/// is useless without it, but exiting would only make a crash loop of a missing install step.
async fn start_lifecycle(
    informers: &Informers,
    supervisor: Arc<Supervisor>,
    loader: Loader,
    defaults: Defaults,
    metrics: Arc<Metrics>,
) -> (Arc<Lifecycle>, crate::cache::Registration) {
    let mut delay = Duration::from_secs(1);
    loop {
        match Lifecycle::start(
            informers,
            supervisor.clone(),
            loader.clone(),
            defaults.clone(),
            metrics.clone(),
        )
        .await
        {
            Ok(started) => return started,
            Err(error) => {
                warn!(%error, "cannot watch ReconcilePlugins (is the CRD installed? `reconhost crds | kubectl apply -f -`); retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// The operator's signing keys, from their PEM files.
fn trusted_keys(files: &[PathBuf]) -> anyhow::Result<Vec<crate::source::signature::PublicKey>> {
    files
        .iter()
        .map(|file| {
            let pem = std::fs::read_to_string(file)
                .with_context(|| format!("reading --plugin-public-key {}", file.display()))?;
            crate::source::signature::PublicKey::from_pem(&pem)
                .with_context(|| format!("--plugin-public-key {}", file.display()))
        })
        .collect()
}

/// The supervisor owner of a `--plugin` file.
fn owner_of(path: &Path) -> String {
    format!("file {}", path.display())
}

async fn serve_probes(
    args: &RunArgs,
    ready: Arc<watch::Sender<bool>>,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let address = args.health_probe_bind_address;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding the health probe address {address}"))?;
    info!(address = %listener.local_addr()?, "serving /healthz and /readyz");
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = *ready.borrow();
                async move {
                    if ready {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        );
    Ok(tokio::spawn(serve(listener, router, stopped)))
}

async fn serve_metrics(
    args: &RunArgs,
    metrics: Arc<Metrics>,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let Some(address) = args.metrics_bind_address else {
        return Ok(tokio::spawn(async {}));
    };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding the metrics address {address}"))?;
    info!(address = %listener.local_addr()?, "serving /metrics");
    let router = Router::new().route(
        "/metrics",
        get(move || {
            let body = metrics.encode();
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    body,
                )
            }
        }),
    );
    Ok(tokio::spawn(serve(listener, router, stopped)))
}

async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    mut stopped: watch::Receiver<bool>,
) {
    let until_stopped = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    if let Err(error) = axum::serve(listener, router)
        .with_graceful_shutdown(until_stopped)
        .await
    {
        warn!(%error, "HTTP server failed");
    }
}

/// Completes on SIGTERM or SIGINT, whichever comes first.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT received, shutting down"),
    }
}
