//! reconhost: a Kubernetes controller host that runs reconcile logic as sandboxed WebAssembly
//! components.
//!
//! The host owns everything that is the same for every controller (watching, caching, queueing,
//! retrying, applying); a plugin computes the desired state of one custom resource kind from the
//! observed state. docs/ARCHITECTURE.md maps the stages to modules.
//!
//! # Where to start reading
//!
//! The process starts in [`run::run`]: it builds the [`runtime`], the shared informers
//! ([`cache`]) and the [`supervisor`], and then installs plugins from files or from
//! ReconcilePlugin resources ([`lifecycle`]). One reconcile goes: informer change →
//! [`controller::queue`] → [`controller::workers`] → [`controller::reconciler`] (gather from
//! the caches, call the plugin in a fresh instance) → [`planner`] → [`controller::applier`] →
//! API server.
//!
//! # Layout
//!
//! - [`cli`]: the command line, parsed once in `main`.
//! - [`client`]: the host's Kubernetes client (retries throttled requests, counts responses).
//! - [`run`]: the long-running host process (`reconhost run`) and its shutdown flow.
//! - [`supervisor`]: the running controllers, added, swapped and removed while the host runs.
//! - [`lifecycle`]: the ReconcilePlugin controller (install, upgrade, suspend, uninstall).
//! - [`leader`]: leader election among replicas (only the leader reconciles).
//! - [`api`]: the ReconcilePlugin resource's types; the CRD is generated from them.
//! - [`source`]: fetching components from ConfigMaps and OCI registries, verified by digest.
//! - [`identity`]: acting as each plugin's ServiceAccount (impersonated writes, authorized
//!   reads, the RBAC a plugin needs).
//! - [`controller`]: the control loop of one parent kind and its revisions.
//! - [`cache`]: the shared informers and their caches.
//! - [`planner`]: desired versus observed gives actions (pure).
//! - [`runtime`]: the sandboxed WebAssembly runtime.
//! - [`model`]: the host's types for what crosses the plugin boundary.
//! - [`metrics`]: Prometheus metrics under controller-runtime's names plus `reconhost_*`.
//! - [`render`]: `reconhost render`, a plugin run offline on files.
//! - [`inspect`]: `reconhost trace` and `reconhost status` (also `kubectl reconhost`), read
//!   back from the cluster.
//! - [`publish`]: `reconhost plugin install | manifest | push`.
//! - [`watch`]: `reconhost run --watch`, reloading a plugin file when it changes.
//! - [`selector`]: Kubernetes label selectors.
//! - [`trim`]: giving the allocator's free pages back after a list or a burst of reconciles.
//! - [`telemetry`]: logging set-up (human locally, JSON in a cluster).

#![allow(
    rustdoc::private_intra_doc_links,
    reason = "the crate is the host, not a library for others: its docs are a map of the internals for the people who work on them, built with --document-private-items (make lint)"
)]

pub mod api;
pub(crate) mod bucket;
pub(crate) mod cache;
pub mod cli;
pub(crate) mod client;
pub(crate) mod controller;
pub(crate) mod identity;
pub mod init;
pub mod inspect;
pub(crate) mod keys;
pub(crate) mod leader;
pub(crate) mod lifecycle;
pub(crate) mod metrics;
pub mod model;
pub mod planner;
pub mod publish;
pub mod render;
pub mod run;
pub mod runtime;
pub(crate) mod selector;
pub(crate) mod shard;
pub(crate) mod source;
pub(crate) mod supervisor;
pub mod telemetry;
pub(crate) mod trim;
pub(crate) mod watch;

/// Makes ring the process's TLS provider. The registry client's TLS stack asks for a
/// process-wide provider (the host builds it without one, to keep a single crypto library);
/// calling this more than once is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
