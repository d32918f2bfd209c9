//! Where the Go-built tools are: the control plane, and the tools the tests run beside it (kwok,
//! helm, the registry, oras, toxiproxy, cosign). `tools/k8s/build.sh` builds them all from one Go
//! module into a cache outside the clone, keyed by the Kubernetes release; this module only
//! finds them.

use std::path::{Path, PathBuf};

use crate::Error;

/// The Kubernetes release the binaries are built from. Must match `K8S_VERSION` in
/// tools/k8s/build.sh and the k8s-openapi feature in the root Cargo.toml.
pub const K8S_VERSION: &str = "v1.37.2";

/// Paths of the built control-plane binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// etcd, at the version this Kubernetes release pins.
    pub etcd: PathBuf,
    /// kube-apiserver.
    pub kube_apiserver: PathBuf,
    /// kube-controller-manager (garbage collector and namespace controller).
    pub kube_controller_manager: PathBuf,
    /// kubectl, for people; the tests use the kube crate.
    pub kubectl: PathBuf,
}

impl Binaries {
    /// The cache directory: `$RECONHOST_K8S_BIN`, else `$RECONHOST_CACHE/k8s/<version>`, else
    /// `$HOME/.cache/reconhost/k8s/<version>`.
    pub fn dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("RECONHOST_K8S_BIN") {
            return PathBuf::from(dir);
        }
        let cache = std::env::var_os("RECONHOST_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("/root"));
                home.join(".cache/reconhost")
            });
        cache.join("k8s").join(K8S_VERSION)
    }

    /// A tool beside the four binaries every control plane needs ([`Binaries::locate`]):
    /// kube-scheduler, kwok, helm, the OCI tools (`registry`, `oras`), `toxiproxy-server`,
    /// `cosign`.
    pub fn tool(binary: &'static str) -> Result<PathBuf, Error> {
        found(Self::dir().join(binary), binary)
    }

    /// Finds every binary, or names the first one missing.
    pub fn locate() -> Result<Self, Error> {
        let dir = Self::dir();
        let find = |binary: &'static str| -> Result<PathBuf, Error> {
            let path = dir.join(binary);
            if is_executable(&path) {
                Ok(path)
            } else {
                Err(Error::MissingBinary { binary, path })
            }
        };
        Ok(Self {
            etcd: find("etcd")?,
            kube_apiserver: find("kube-apiserver")?,
            kube_controller_manager: find("kube-controller-manager")?,
            kubectl: find("kubectl")?,
        })
    }
}

fn found(path: PathBuf, binary: &'static str) -> Result<PathBuf, Error> {
    if is_executable(&path) {
        Ok(path)
    } else {
        Err(Error::MissingBinary { binary, path })
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
