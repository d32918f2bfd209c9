//! reconhost: a Kubernetes controller host that runs reconcile logic as sandboxed WebAssembly
//! components.
//!
//! The host owns everything that is the same for every controller (watching, caching, queueing,
//! retrying, applying); a plugin computes the desired state of one custom resource kind from the
//! observed state. docs/ARCHITECTURE.md maps the stages to modules.
//!
//! # Layout
//!
//! - [`cli`]: the command line, parsed once in `main`.
//! - [`controller`]: the control loop (informers, queue, workers, reconciler, applier).
//! - [`metrics`]: Prometheus metrics under controller-runtime's names plus `reconhost_*`.
//! - [`model`]: the host's types for what crosses the plugin boundary.
//! - [`planner`]: desired versus observed gives actions (pure).
//! - [`render`]: `reconhost render`, a plugin run offline on files.
//! - [`runtime`]: the sandboxed WebAssembly runtime; start here for plugins.
//! - [`selector`]: Kubernetes label selectors.
//! - [`run`]: the long-running host process (`reconhost run`) and its shutdown flow.
//! - [`telemetry`]: logging set-up (human locally, JSON in a cluster).

pub mod cli;
pub mod controller;
pub mod metrics;
pub mod model;
pub mod planner;
pub mod render;
pub mod run;
pub mod runtime;
pub mod selector;
pub mod telemetry;
