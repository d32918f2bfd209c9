//! `reconhost run`: the long-running host process.
//!
//! Today this connects to the cluster, confirms the API server answers, serves the health probes
//! and waits for a shutdown signal. The control loop (informers, queue, plugins, applier) plugs in
//! here as it lands; see docs/ARCHITECTURE.md for what exists.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use kube::config::KubeConfigOptions;
use tracing::info;

use crate::cli::RunArgs;

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

    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(args.health_probe_bind_address)
        .await
        .with_context(|| {
            format!(
                "binding the health probe address {}",
                args.health_probe_bind_address
            )
        })?;
    info!(address = %listener.local_addr()?, "serving /healthz and /readyz");
    let probes = {
        let ready = ready.clone();
        Router::new()
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
            )
    };
    // Nothing is cached yet, so the host is ready as soon as it has reached the API server.
    ready.store(true, Ordering::Relaxed);
    axum::serve(listener, probes)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving the health probes")?;
    info!("shut down");
    Ok(())
}

async fn client(args: &RunArgs) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
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
    kube::Client::try_from(config).context("building the Kubernetes client")
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
