//! A real, local Kubernetes control plane for reconhost's tests and demo (envtest, for Rust), and
//! the integration suites that run against it.
//!
//! [`ControlPlane::start`] launches etcd, kube-apiserver and kube-controller-manager, built from
//! the Kubernetes Go modules by `tools/k8s/build.sh`, on free loopback ports, and stops them again
//! when dropped. The `reconhost-cluster` binary wraps it for `make cluster-up`, `make test` and
//! `make run`; tests reach the running instance through [`TestCluster::from_env`].
//!
//! # Layout
//!
//! - [`control_plane`]: start-up order, flags, readiness, kubeconfig, shutdown.
//! - [`crds`]: the example and test CRDs every control plane starts with.
//! - [`host`]: a `reconhost run` process for the control-loop tests, its logs and metrics.
//! - [`process`]: child processes that cannot outlive the harness.
//! - [`registry`]: run directories and the clean-up of instances a killed run left behind.
//! - [`pki`]: the per-run CA and certificates.
//! - [`binaries`]: where the built control-plane binaries are.
//! - [`audit`]: reading the API server's audit log, to count the writes a test caused.
//! - [`cluster`]: what a test uses: a client for the running instance and its audit log.
//! - [`support`]: per-test namespaces and bounded waiting.
//! - [`workloads`]: the fake node that kwok runs pods on (for `make run`).
//! - [`cgroup`]: a memory limit and a CPU quota for a host, as a container's.
//! - [`hostile`]: crafted components that attack whatever processes them.
//! - [`world`]: what reconhost's integration suites and cluster benchmarks share: [`world::World`]
//!   (a test's namespace, its hosts and typed helpers), ReconcilePlugins, the chart, the image,
//!   and the fault suite's load.

pub mod audit;
pub mod bench;
pub mod binaries;
pub mod cgroup;
pub mod cluster;
pub mod control_plane;
pub mod crds;
pub mod host;
pub mod hostile;
pub mod otlp;
pub mod pki;
pub mod process;
pub mod registry;
pub mod support;
pub mod toxiproxy;
pub mod workloads;
pub mod world;

pub use audit::{AuditEvent, AuditLog};
pub use cluster::TestCluster;
pub use control_plane::{ControlPlane, Options, Stop};

use std::path::PathBuf;

/// Everything that can go wrong while starting, using or stopping a control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// The step that failed, naming the file or program.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A Go-built tool (the control plane, kwok, helm, the OCI tools, toxiproxy, cosign) is
    /// missing.
    #[error("{binary} not found at {path}: build the tools with `make tools` (tools/k8s/build.sh)")]
    MissingBinary {
        /// The binary's name.
        binary: &'static str,
        /// Where it was expected.
        path: PathBuf,
    },
    /// Generating a certificate or key failed.
    #[error("generating the {what}: {source}")]
    Certificate {
        /// Which certificate or key.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: rcgen::Error,
    },
    /// A component exited while it should be running.
    #[error("{component} exited ({status}); last lines of {}:\n{tail}", log.display())]
    Exited {
        /// The component's name.
        component: &'static str,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// A component did not become ready in time.
    #[error("{component} was not ready after {seconds} s; last lines of {}:\n{tail}", log.display())]
    NotReady {
        /// The component's name.
        component: &'static str,
        /// How long the harness waited.
        seconds: u64,
        /// Its log file.
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// Another live process owns an instance of this name.
    #[error("control plane {name:?} is already running (pid {pid}, {})", dir.display())]
    InUse {
        /// The instance name.
        name: String,
        /// Its run directory.
        dir: PathBuf,
        /// The owning process.
        pid: u32,
    },
    /// Talking to the API server failed.
    #[error("{what}: {source}")]
    Kube {
        /// The step that failed.
        what: String,
        /// The underlying error.
        #[source]
        source: kube::Error,
    },
    /// A test was started without a running control plane.
    #[error(
        "no control plane: RECONHOST_KUBECONFIG is not set; run the tests with `make test`, or start one with `make cluster-up` and export RECONHOST_KUBECONFIG=<the printed path>"
    )]
    NoCluster,
    /// Installing what every control plane starts with failed.
    #[error("setting up the control plane: {0}")]
    Setup(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
