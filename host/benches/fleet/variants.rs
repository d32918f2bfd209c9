//! The fleet's plugins and CRDs: `Variant(i, build)` is webapp's logic under the kind `Appii` of
//! [`GROUP`], built from host/benches/fleet/plugin into `<plugin dir>/fleet/fleet-ii.wasm`
//! (a directory of their own, apart from the plugins `make plugins` builds), from
//! `runtime-lean-webapp` into `fleet-lean/`, or copied from `$FLEET_BASELINE/fleet-ii.wasm`
//! (components of another commit, built the same way) into `fleet-baseline/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use reconhost::runtime::{Limits, Plugin, Runtime, RuntimeConfig};
use serde_json::json;

/// The API group of every fleet kind.
pub const GROUP: &str = "fleet.bench.reconhost.dev";

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Where a fleet's components come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Build {
    /// webapp's logic through the SDK (host/benches/fleet/plugin), built from this checkout.
    Sdk,
    /// The lean plugin (`runtime-lean-webapp`: webapp's logic on the raw contract, without the
    /// SDK), built from this checkout.
    Lean,
    /// Components built elsewhere (another commit's fleet plugin), copied from the directory
    /// `FLEET_BASELINE` names.
    Baseline,
}

impl Build {
    /// How the benchmark's output names it.
    pub fn label(self) -> &'static str {
        match self {
            Build::Sdk => "SDK",
            Build::Lean => "lean",
            Build::Baseline => "baseline",
        }
    }

    /// The directory under the plugin directory that holds its components.
    fn dir(self) -> &'static str {
        match self {
            Build::Sdk => "fleet",
            Build::Lean => "fleet-lean",
            Build::Baseline => "fleet-baseline",
        }
    }
}

/// One member of the fleet: its number, and what its component is built from.
#[derive(Debug, Clone, Copy)]
pub struct Variant(pub usize, pub Build);

impl Variant {
    /// The parent kind, `App07`.
    pub fn kind(&self) -> String {
        format!("App{:02}", self.0)
    }

    /// Its plural, `app07s`.
    pub fn plural(&self) -> String {
        format!("app{:02}s", self.0)
    }

    /// The plugin's name and its file's stem, `fleet-07`.
    pub fn plugin_name(&self) -> String {
        format!("fleet-{:02}", self.0)
    }

    /// Its component, as a name under the plugin directory without `.wasm`.
    pub fn component_name(&self) -> String {
        format!("{}/{}", self.1.dir(), self.plugin_name())
    }

    fn component(&self) -> PathBuf {
        plugin_dir().join(format!("{}.wasm", self.component_name()))
    }
}

fn plugin_dir() -> PathBuf {
    std::env::var_os("RECONHOST_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(ROOT).join("target/plugins"))
}

/// The newest modification time of the files the variants are built from.
fn sources_changed() -> SystemTime {
    fn newest(path: &Path) -> SystemTime {
        let meta = std::fs::metadata(path).expect("a fleet source");
        if meta.is_dir() {
            std::fs::read_dir(path)
                .unwrap()
                .flatten()
                .map(|e| newest(&e.path()))
                .max()
                .unwrap_or(SystemTime::UNIX_EPOCH)
        } else {
            meta.modified().unwrap()
        }
    }
    [
        "plugins/sdk",
        "plugins/examples/webapp/src",
        "plugins/examples/webapp/Cargo.toml",
        "host/benches/fleet/plugin/src",
        "host/benches/fleet/plugin/Cargo.toml",
        "plugins/test-plugins/runtime-lean-webapp",
    ]
    .iter()
    .map(|p| newest(&Path::new(ROOT).join(p)))
    .max()
    .unwrap()
}

/// Builds every variant whose component is missing or older than its sources: one cargo build
/// per kind (the kind is a build-time constant), each relinking only the small fleet crate.
pub fn build(fleet: &[Variant]) {
    let changed = sources_changed();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(ROOT).join("target"))
        .join("fleet-plugin");
    let manifest = Path::new(ROOT).join("host/benches/fleet/plugin/Cargo.toml");
    for variant in fleet {
        let out = variant.component();
        if variant.1 == Build::Baseline {
            let from = PathBuf::from(
                std::env::var_os("FLEET_BASELINE")
                    .expect("FLEET_BASELINE: the baseline's directory"),
            )
            .join(format!("{}.wasm", variant.plugin_name()));
            std::fs::create_dir_all(out.parent().expect("a directory")).unwrap();
            std::fs::copy(&from, &out)
                .unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
            continue;
        }
        let fresh = std::fs::metadata(&out)
            .and_then(|m| m.modified())
            .is_ok_and(|built| built >= changed);
        if fresh {
            continue;
        }
        // The lean variants are the test plugin itself, built in the plugins workspace.
        let (manifest, crate_name) = if variant.1 == Build::Lean {
            (
                Path::new(ROOT).join("plugins/test-plugins/runtime-lean-webapp/Cargo.toml"),
                "runtime_lean_webapp",
            )
        } else {
            (manifest.clone(), "fleet_webapp")
        };
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"])
            .arg("--manifest-path")
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &target)
            .env("FLEET_API_VERSION", format!("{GROUP}/v1alpha1"))
            .env("FLEET_KIND", variant.kind())
            .env("FLEET_NAME", variant.plugin_name())
            .status()
            .expect("running cargo");
        assert!(status.success(), "building {}", variant.plugin_name());
        std::fs::create_dir_all(out.parent().expect("a directory")).unwrap();
        std::fs::copy(
            target.join(format!("wasm32-wasip2/release/{crate_name}.wasm")),
            &out,
        )
        .unwrap();
    }
}

/// webapp's CRD under each variant's kind.
pub async fn install_crds(client: &kube::Client, fleet: &[Variant]) {
    let template =
        std::fs::read_to_string(Path::new(ROOT).join("plugins/examples/webapp/crd.yaml"))
            .expect("webapp's CRD");
    let template: serde_json::Value = serde_saphyr::from_str(&template).expect("webapp's CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for variant in fleet {
        let mut crd = template.clone();
        let (kind, plural) = (variant.kind(), variant.plural());
        crd["metadata"] = json!({"name": format!("{plural}.{GROUP}")});
        crd["spec"]["group"] = json!(GROUP);
        crd["spec"]["names"] = json!({
            "kind": kind, "listKind": format!("{kind}List"),
            "plural": plural, "singular": kind.to_lowercase(),
        });
        let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("creating the CRD for {kind}: {e}"),
        }
    }
    for variant in fleet {
        let name = format!("{}.{GROUP}", variant.plural());
        reconhost_tests::support::eventually(Duration::from_secs(60), &name, || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let crd = crds.get(&name).await.ok()?;
                let established = crd
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            }
        })
        .await;
    }
}

/// Compiles every variant into the compiled-code cache the host reads (`RECONHOST_CACHE`), so
/// the host's start measures loading, not compiling.
pub fn precompile(fleet: &[Variant]) {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("a runtime");
    for variant in fleet {
        let bytes = std::fs::read(variant.component()).unwrap();
        Plugin::load_with_warm(
            &runtime,
            &variant.plugin_name(),
            &bytes,
            Limits::default(),
            0,
        )
        .unwrap_or_else(|e| panic!("compiling {}: {e}", variant.plugin_name()));
    }
}
