//! What a test sees of the running control plane: clients for it (as the administrator or as an
//! impersonated identity) and its audit log.
//!
//! `make test` starts one control plane for the whole run and passes its kubeconfig in
//! `RECONHOST_KUBECONFIG`; tests isolate themselves with their own namespaces. A test run without
//! it fails with [`Error::NoCluster`], which says how to start one — it is never skipped.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::Error;
use crate::audit::AuditLog;

/// The control plane a test runs against.
#[derive(Debug, Clone)]
pub struct TestCluster {
    kubeconfig: PathBuf,
}

impl TestCluster {
    /// The control plane named by `RECONHOST_KUBECONFIG`.
    pub fn from_env() -> Result<Self, Error> {
        let path = std::env::var_os("RECONHOST_KUBECONFIG").ok_or(Error::NoCluster)?;
        Ok(Self {
            kubeconfig: PathBuf::from(path),
        })
    }

    /// The control plane whose kubeconfig is at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self {
            kubeconfig: path.into(),
        }
    }

    /// The administrator kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The audit log of write requests, beside the kubeconfig in the run directory.
    pub fn audit_log(&self) -> AuditLog {
        AuditLog::new(self.kubeconfig.with_file_name("audit.log"))
    }

    /// The endpoint of the control plane's trace receiver (`http://127.0.0.1:<port>`), for a
    /// host's `--otlp-endpoint`.
    pub fn otlp_endpoint(&self) -> Result<String, Error> {
        let path = self.kubeconfig.with_file_name("otlp");
        std::fs::read_to_string(&path)
            .map(|address| format!("http://{}", address.trim()))
            .map_err(|source| Error::Io {
                what: format!("reading {}", path.display()),
                source,
            })
    }

    /// Every span the control plane's trace receiver got so far.
    pub fn spans(&self) -> Vec<crate::otlp::SpanRecord> {
        crate::otlp::spans(&self.kubeconfig.with_file_name("traces.jsonl"))
    }

    /// The loopback OCI registry's address (`127.0.0.1:<port>`), written beside the kubeconfig
    /// by a control plane started with one.
    pub fn registry(&self) -> Result<String, Error> {
        std::fs::read_to_string(self.kubeconfig.with_file_name("registry")).map_err(|source| {
            Error::Io {
                what:
                    "reading the registry address (is the control plane started with a registry?)"
                        .into(),
                source,
            }
        })
    }

    /// A client authenticated as the administrator (group `system:masters`).
    pub async fn client(&self) -> Result<kube::Client, Error> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// A client that impersonates `user` (and, if given, `groups`), as the host does for a plugin:
    /// the administrator authenticates and RBAC then judges the impersonated identity. For a
    /// service account user (`system:serviceaccount:<ns>:<name>`) the API server adds the
    /// service-account groups itself.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Result<kube::Client, Error> {
        let mut config = config_from_kubeconfig(&self.kubeconfig).await?;
        config.auth_info.impersonate = Some(user.to_owned());
        if !groups.is_empty() {
            config.auth_info.impersonate_groups =
                Some(groups.iter().map(|g| (*g).to_owned()).collect());
        }
        kube::Client::try_from(config).map_err(|source| Error::Kube {
            what: "building an impersonating client".into(),
            source,
        })
    }
}

/// Loads a kubeconfig file into a client configuration.
pub async fn config_from_kubeconfig(path: &Path) -> Result<kube::Config, Error> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Io {
        what: format!("reading kubeconfig {}", path.display()),
        source: std::io::Error::other(e.to_string()),
    })?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Io {
            what: format!("loading kubeconfig {}", path.display()),
            source: std::io::Error::other(e.to_string()),
        })
}

/// A client for the kubeconfig at `path`.
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, Error> {
    let config = config_from_kubeconfig(path).await?;
    kube::Client::try_from(config).map_err(|source| Error::Kube {
        what: format!("building a client from {}", path.display()),
        source,
    })
}
