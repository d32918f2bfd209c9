//! `reconhost run`: the long-running host process.
//!
//! Start-up: connect, load every plugin (a plugin that does not load stops the start with its
//! error: a static list is a deployment mistake, better caught at once), resolve each plugin's
//! kinds and wire its controller, start the shared informers, serve the probes and metrics, and
//! report ready once every cache holds its first list.
//!
//! Shutdown (SIGTERM or SIGINT): readiness goes false, the queues stop handing out work, and
//! in-flight reconciles get `--graceful-shutdown-seconds` to finish; then the watches stop.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use kube::config::KubeConfigOptions;
use tokio::sync::{Semaphore, watch};
use tracing::{info, warn};

use crate::cli::RunArgs;
use crate::controller::Controller;
use crate::controller::informer::Informers;
use crate::metrics::Metrics;
use crate::runtime::{Limits, Plugin, Runtime, RuntimeConfig};

/// Runs the host until `shutdown` completes.
pub async fn run(
    args: RunArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let client = client(&args).await?;
    let version = client
        .apiserver_version()
        .await
        .context("asking the API server for its version")?;
    info!(server = %version.git_version, "connected to the API server");

    let runtime = Runtime::new(RuntimeConfig::default())?;
    let plugins = load_plugins(&runtime, &args.plugins).await?;
    let metrics = Metrics::new();
    let informers = Arc::new(Informers::new(client.clone(), args.namespace.clone()));
    let mut controllers = Vec::new();
    for plugin in plugins {
        let name = plugin.info().name.clone();
        let controller = Controller::new(
            plugin,
            serde_json::json!({}),
            &informers,
            client.clone(),
            &metrics,
        )
        .await
        .with_context(|| format!("starting the controller of plugin {name}"))?;
        controllers.push(Arc::new(controller));
    }
    let watches = informers.start();

    let (stop, stopped) = watch::channel(false);
    let ready = Arc::new(AtomicBool::new(false));
    let probes = serve_probes(&args, ready.clone(), stopped.clone()).await?;
    let metrics_server = serve_metrics(&args, metrics.clone(), stopped.clone()).await?;
    {
        let (ready, informers) = (ready.clone(), informers.clone());
        tokio::spawn(async move {
            while !informers.all_synced() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            info!(objects = informers.cached_objects(), "caches synced; ready");
            ready.store(true, Ordering::Relaxed);
        });
    }

    let global = Arc::new(Semaphore::new(usize::from(args.max_total_reconciles)));
    let mut pools = Vec::new();
    for controller in &controllers {
        let controller = controller.clone();
        let global = global.clone();
        let workers = usize::from(args.max_concurrent_reconciles);
        let controller_metrics = metrics.controller(controller.name());
        let sync_period = args.sync_period;
        pools.push(tokio::spawn(async move {
            controller
                .run(workers, global, controller_metrics, sync_period)
                .await;
        }));
    }
    info!(plugins = controllers.len(), "host running");

    shutdown.await;
    ready.store(false, Ordering::Relaxed);
    for controller in &controllers {
        controller.queue().shutdown();
    }
    let grace = Duration::from_secs(args.graceful_shutdown_seconds);
    let drained = tokio::time::timeout(grace, futures::future::join_all(pools)).await;
    if drained.is_err() {
        warn!(
            seconds = grace.as_secs(),
            "in-flight reconciles did not finish in time"
        );
    }
    for task in watches {
        task.abort();
    }
    let _ = stop.send(true);
    let _ = tokio::join!(probes, metrics_server);
    info!("shut down");
    Ok(())
}

async fn load_plugins(
    runtime: &Runtime,
    paths: &[std::path::PathBuf],
) -> anyhow::Result<Vec<Plugin>> {
    let mut plugins: Vec<Plugin> = Vec::new();
    for path in paths {
        let (runtime, path) = (runtime.clone(), path.clone());
        let plugin = tokio::task::spawn_blocking(move || load_plugin(&runtime, &path)).await??;
        let info = plugin.info();
        if let Some(other) = plugins
            .iter()
            .find(|p| p.info().name == info.name || p.info().parent == info.parent)
        {
            anyhow::bail!(
                "plugins {} and {} both claim the name {:?} or the parent kind {}",
                other.info().name,
                info.name,
                info.name,
                info.parent
            );
        }
        info!(plugin = %info.name, version = %info.version, parent = %info.parent,
              provenance = ?plugin.provenance(), "plugin loaded");
        plugins.push(plugin);
    }
    Ok(plugins)
}

fn load_plugin(runtime: &Runtime, path: &Path) -> anyhow::Result<Plugin> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading plugin {}", path.display()))?;
    let origin = path.display().to_string();
    Ok(Plugin::load(runtime, &origin, &bytes, Limits::default())?)
}

async fn serve_probes(
    args: &RunArgs,
    ready: Arc<AtomicBool>,
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
                let ready = ready.load(Ordering::Relaxed);
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
    if args.metrics_bind_address == "0" {
        return Ok(tokio::spawn(async {}));
    }
    let address = &args.metrics_bind_address;
    let listener = tokio::net::TcpListener::bind(address.as_str())
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

async fn client(args: &RunArgs) -> anyhow::Result<kube::Client> {
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig or in-cluster config")?,
    };
    // Named in the API server's audit log and request metrics, as kube-controller-manager and
    // controller-runtime managers are, so an operator can tell the host's requests apart.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    kube::Client::try_from(config).context("building the Kubernetes client")
}

/// The User-Agent of every request the host makes.
const USER_AGENT: &str = concat!("reconhost/", env!("CARGO_PKG_VERSION"));

/// Completes on SIGTERM or SIGINT, whichever comes first.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT received, shutting down"),
    }
}
