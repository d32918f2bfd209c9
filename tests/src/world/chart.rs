//! The install suites' tools: helm and kubectl from the tool cache, the chart, its releases,
//! and the cluster-wide objects a release shares with the identity suite's policy.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::binaries::Binaries;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::World;

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/charts/reconhost")
}

/// The checkout's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// helm from the tool cache.
pub fn helm_binary() -> PathBuf {
    Binaries::tool("helm").unwrap_or_else(|e| panic!("{e}"))
}

/// A program on PATH, or a failure that says how to install it.
pub fn on_path(program: &str, package: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{program} is not installed: apt-get install {package} (.ci/run does)")
        })
}

/// Runs `program` with `args` and `stdin`: stdout, or stderr as the error.
pub fn output(program: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    let input = stdin.unwrap_or("").to_owned();
    let mut pipe = child.stdin.take().expect("a stdin pipe");
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("waiting for the command");
    writer
        .join()
        .expect("the stdin writer")
        .expect("writing stdin");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!(
            "{} {args:?} failed ({}): {}{}",
            program.display(),
            out.status,
            text(&out.stderr),
            text(&out.stdout)
        ))
    }
}

/// Like [`output`], failing the test on an error.
pub fn must(program: &Path, args: &[&str], stdin: Option<&str>) -> String {
    output(program, args, stdin).unwrap_or_else(|e| panic!("{e}"))
}

/// helm as the administrator of the test cluster.
pub fn helm(world: &World, args: &[&str]) -> Result<String, String> {
    let kubeconfig = world.cluster.kubeconfig().display().to_string();
    let mut all = vec!["--kubeconfig", &kubeconfig];
    all.extend_from_slice(args);
    output(&helm_binary(), &all, None)
}

/// kubectl as the administrator of the test cluster.
pub fn kubectl(world: &World, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let kubectl = Binaries::locate().unwrap_or_else(|e| panic!("{e}")).kubectl;
    let kubeconfig = world.cluster.kubeconfig().display().to_string();
    let mut all = vec!["--kubeconfig", &kubeconfig];
    all.extend_from_slice(args);
    output(&kubectl, &all, stdin)
}

/// `helm template` of the chart as release `release` in `namespace` with these `--set`s:
/// the YAML text, or helm's error.
pub fn template(release: &str, namespace: &str, sets: &[&str]) -> Result<String, String> {
    let chart = chart_dir().display().to_string();
    let mut args = vec!["template", release, &chart, "--namespace", namespace];
    for set in sets {
        args.extend(["--set", set]);
    }
    output(&helm_binary(), &args, None)
}

/// The objects of a YAML stream.
pub fn objects(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("parsing YAML: {e}\n{yaml}"))
        .into_iter()
        .filter(|o| o.is_object())
        .collect()
}

/// The object of `kind` named `name` among `objects`.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// An API of cluster-scoped objects of `api_version` (`group/version`, or `v1`).
pub fn cluster_api(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
    )
}

/// The chart's admission policy's name (fixed: there is one per cluster).
pub const POLICY: &str = "reconcileplugins.reconhost.dev-serviceaccount";

/// Removes the admission policy another suite applied without helm, so that a release can own
/// it (helm refuses to adopt objects it did not create).
pub async fn clear_policy(client: &kube::Client) {
    for (kind, plural) in [
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    ] {
        let api = cluster_api(client, "admissionregistration.k8s.io/v1", kind, plural);
        match api.delete(POLICY, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("removing {kind} {POLICY}: {e}"),
        }
    }
}
