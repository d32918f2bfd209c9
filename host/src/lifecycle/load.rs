//! Getting a ReconcilePlugin's component to a loaded [`Plugin`]: fetched, verified against the
//! pinned digest, and compiled (or found compiled in the cache).
//!
//! A ReconcilePlugin whose status already says it serves the pinned digest (the host wrote that
//! after verifying the bytes) is loaded straight from the compiled-code cache, without fetching:
//! a restarted host resumes its plugins even while a registry is down. Anything else fetches, so
//! knowing a digest the host happens to have compiled for someone else is not a way around the
//! source.
//!
//! Compiling is CPU-bound and can take tens of seconds for a Python or JavaScript component, so
//! it runs on blocking threads, a bounded number at a time ([`Loader::new`]); loading from the
//! cache is a memory map and is not queued behind compiles.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;

use super::Failure;
use crate::api::Source;
use crate::metrics::Metrics;
use crate::runtime::{Limits, LoadError, Plugin, Runtime};
use crate::source::Sources;

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Obtained {
    /// From the compiled-code cache: neither fetched nor compiled.
    Cached,
    /// Fetched from its source and compiled (or found compiled after fetching).
    Fetched,
}

/// Loads components.
#[derive(Clone)]
pub struct Loader {
    runtime: Runtime,
    sources: Sources,
    compiles: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl Loader {
    /// A loader compiling at most `concurrent_compiles` components at once.
    pub fn new(
        runtime: Runtime,
        sources: Sources,
        concurrent_compiles: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            runtime,
            sources,
            compiles: Arc::new(Semaphore::new(concurrent_compiles.max(1))),
            metrics,
        }
    }

    /// The bounds every compile runs under.
    pub fn compile_budget(&self) -> &crate::runtime::CompileBudget {
        self.runtime.compile_budget()
    }

    /// The component `source` pins, loaded under `limits`; `namespace` is the plugin's. With
    /// `verified` (the resource already served this digest), the compiled-code cache is used
    /// without fetching when it has the digest.
    pub async fn load(
        &self,
        origin: &str,
        source: &Source,
        namespace: &str,
        limits: Limits,
        verified: bool,
    ) -> Result<(Plugin, Obtained), Failure> {
        let hex = source
            .digest
            .strip_prefix("sha256:")
            .unwrap_or(&source.digest)
            .to_owned();
        if verified && self.runtime.cache().contains(&hex) {
            let (runtime, origin_owned, hex, cached_limits) = (
                self.runtime.clone(),
                origin.to_owned(),
                hex.clone(),
                limits.clone(),
            );
            let start = Instant::now();
            let loaded = tokio::task::spawn_blocking(move || {
                Plugin::load_cached(&runtime, &origin_owned, &hex, cached_limits)
            })
            .await
            .map_err(|e| Failure::host(format!("loading thread failed: {e}")))?;
            match loaded {
                Some(Ok(plugin)) => {
                    self.metrics.compile_seconds("cached", start.elapsed());
                    return Ok((plugin, Obtained::Cached));
                }
                Some(Err(error)) => return Err(Failure::load(&error)),
                // Unusable after all (another wasmtime build): fetch and compile again.
                None => {}
            }
        }
        let fetched = self
            .sources
            .fetch(source, namespace)
            .await
            .map_err(|e| Failure::source(&e))?;
        self.metrics.fetch_seconds(fetched.kind, fetched.elapsed);
        let _permit = self
            .compiles
            .acquire()
            .await
            .map_err(|_| Failure::host("the compiler pool is closed".into()))?;
        let (runtime, origin) = (self.runtime.clone(), origin.to_owned());
        tracing::info!(plugin = %origin, digest = %source.digest, "compiling");
        let start = Instant::now();
        let plugin = tokio::task::spawn_blocking(move || {
            Plugin::load(&runtime, &origin, &fetched.bytes, limits)
        })
        .await
        .map_err(|e| Failure::host(format!("compiling thread failed: {e}")))?
        .map_err(|e: LoadError| Failure::load(&e))?;
        self.metrics
            .compile_seconds(plugin.provenance().label(), start.elapsed());
        Ok((plugin, Obtained::Fetched))
    }
}
