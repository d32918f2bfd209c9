//! Where the control-plane binaries are. `tools/k8s/build.sh` builds them into a version-keyed
//! cache outside the clone; this module only finds them.

use std::path::{Path, PathBuf};

use crate::Error;

/// The Kubernetes release the binaries are built from. Must match `K8S_VERSION` in
/// tools/k8s/build.sh and the k8s-openapi feature in the root Cargo.toml.
pub const K8S_VERSION: &str = "v1.37.2";

/// The OCI tools' cache directory name, as tools/oci/build.sh writes it (versions of the
/// distribution registry and of oras).
pub const OCI_TOOLS: &str = "registry-v3.1.2-oras-v1.3.6";

/// The cosign release tools/cosign/build.sh builds (must match `COSIGN_VERSION` there).
pub const COSIGN_VERSION: &str = "v2.6.5";

/// The toxiproxy release tools/toxiproxy/build.sh builds (must match `TOXIPROXY_VERSION` there).
pub const TOXIPROXY_VERSION: &str = "v2.5.0";

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

    /// The OCI tools' directory: `$RECONHOST_CACHE/oci/<versions>` (tools/oci/build.sh).
    pub fn oci_dir() -> PathBuf {
        Self::dir()
            .parent()
            .and_then(Path::parent)
            .map(|cache| cache.join("oci").join(OCI_TOOLS))
            .unwrap_or_default()
    }

    /// A control-plane binary that only some set-ups use (kube-scheduler, kwok).
    pub fn optional(binary: &'static str) -> Result<PathBuf, Error> {
        found(Self::dir().join(binary), binary)
    }

    /// An OCI tool (`registry`, `oras`), built by tools/oci/build.sh (`make tools`).
    pub fn oci_tool(binary: &'static str) -> Result<PathBuf, Error> {
        found(Self::oci_dir().join(binary), binary)
    }

    /// helm, built with the control plane from the same Go module (tools/k8s/build.sh).
    pub fn helm() -> Result<PathBuf, Error> {
        found(Self::dir().join("helm"), "helm")
    }

    /// cosign, built by tools/cosign/build.sh (`make tools`) into
    /// `$RECONHOST_CACHE/cosign/<version>`.
    pub fn cosign() -> Result<PathBuf, Error> {
        let cache = Self::dir()
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        found(
            cache.join("cosign").join(COSIGN_VERSION).join("cosign"),
            "cosign",
        )
    }

    /// toxiproxy's server, built by tools/toxiproxy/build.sh (`make tools`) into
    /// `$RECONHOST_CACHE/toxiproxy/<version>`.
    pub fn toxiproxy() -> Result<PathBuf, Error> {
        let cache = Self::dir()
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let path = cache.join("toxiproxy").join(TOXIPROXY_VERSION);
        found(path.join("toxiproxy-server"), "toxiproxy-server")
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
