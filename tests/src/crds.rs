//! The custom resource definitions every control plane starts with: the examples' and the test
//! plugins'. They are installed before kube-controller-manager starts, because its garbage
//! collector discovers new kinds only every 30 s, and children of a kind it does not know yet
//! are not collected when their parent goes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use crate::Error;

/// The repository's CRD files: the host's own (`deploy/crds/*.yaml`), the examples'
/// (`plugins/examples/*/crd.yaml`) and the test plugins' (`tests/crds/*.yaml`).
pub fn bundled() -> Vec<PathBuf> {
    // The checkout to read them from: `RECONHOST_ROOT` (the Makefile sets it), else the one this
    // binary was built from. A binary built by another checkout that shares the target
    // directory would otherwise install that checkout's CRDs.
    let root = std::env::var_os("RECONHOST_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let mut files = Vec::new();
    let mut add = |dir: PathBuf, pick: &dyn Fn(&Path) -> Option<PathBuf>| {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut found: Vec<PathBuf> =
                entries.flatten().filter_map(|e| pick(&e.path())).collect();
            found.sort();
            files.extend(found);
        }
    };
    add(root.join("deploy/crds"), &|p| {
        (p.extension().is_some_and(|e| e == "yaml")).then(|| p.to_path_buf())
    });
    add(root.join("plugins/examples"), &|p| {
        Some(p.join("crd.yaml")).filter(|f| f.is_file())
    });
    add(root.join("tests/crds"), &|p| {
        (p.extension().is_some_and(|e| e == "yaml")).then(|| p.to_path_buf())
    });
    files
}

/// Applies each CRD (server-side, so it is idempotent) and waits until all are Established.
pub async fn install(client: &kube::Client, files: &[PathBuf]) -> Result<(), Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let params = PatchParams::apply("reconhost-tests").force();
    let mut names = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).map_err(|source| Error::Io {
            what: format!("reading {}", file.display()),
            source,
        })?;
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
            .map_err(|e| Error::Setup(format!("parsing {}: {e}", file.display())))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|e| {
                Error::Setup(format!(
                    "installing CRD {name} from {}: {e}",
                    file.display()
                ))
            })?;
        names.push(name);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in names {
        loop {
            let established = api.get(&name).await.ok().is_some_and(|crd| {
                crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
            });
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Setup(format!(
                    "CRD {name} did not become Established in 60 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
