//! `reconhost render` on each example's fixtures, as the examples' READMEs show it.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn plugin(name: &str) -> String {
    let dir = std::env::var_os("RECONHOST_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root().join("target"))
                .join("plugins")
        });
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} missing; build the plugins with `make plugins`",
        path.display()
    );
    path.display().to_string()
}

fn fixture(example: &str, file: &str) -> String {
    root()
        .join("plugins/examples")
        .join(example)
        .join("fixtures")
        .join(file)
        .display()
        .to_string()
}

/// Runs render with JSON output and returns the parsed document, or the exit code and stderr.
fn render(args: &[&str]) -> Result<Value, (i32, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_reconhost"))
        .arg("render")
        .args(args)
        .args(["-o", "json"])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).expect("render prints JSON with -o json"))
    } else {
        Err((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

fn actions(doc: &Value) -> Vec<String> {
    doc["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {} {}",
                c["action"].as_str().unwrap(),
                c["kind"]["kind"].as_str().unwrap(),
                c["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn webapp_should_render_a_deployment_and_a_service_owned_by_the_parent() {
    let doc = render(&[
        "--plugin",
        &plugin("webapp"),
        "--parent",
        &fixture("webapp", "parent.yaml"),
    ])
    .unwrap();
    assert_eq!(
        actions(&doc),
        ["create Deployment shop", "create Service shop"]
    );
    let deployment = &doc["children"][0]["object"];
    assert_eq!(deployment["metadata"]["namespace"], "team-a");
    assert_eq!(
        deployment["metadata"]["ownerReferences"][0]["uid"],
        "7d3c1e0a-0000-4000-8000-000000000001"
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    assert_eq!(doc["status"]["readyReplicas"], 0);
    assert_eq!(doc["status"]["observedGeneration"], 2);
    assert_eq!(doc["conditions"][0]["type"], "Ready");
    assert_eq!(doc["conditions"][0]["status"], "False");
}

#[test]
fn webapp_against_observed_children_should_update_and_delete() {
    let doc = render(&[
        "--plugin",
        &plugin("webapp"),
        "--parent",
        &fixture("webapp", "parent.yaml"),
        "--observed",
        &fixture("webapp", "observed.yaml"),
    ])
    .unwrap();
    assert_eq!(
        actions(&doc),
        [
            "update Deployment shop",
            "create Service shop",
            "delete Service shop-old"
        ]
    );
    assert_eq!(
        doc["children"][2]["uid"],
        "7d3c1e0a-0000-4000-8000-0000000000s1"
    );
    assert_eq!(doc["status"]["readyReplicas"], 1);
}

#[test]
fn webapp_with_an_empty_image_should_exit_non_zero_with_the_error() {
    let (code, stderr) = render(&[
        "--plugin",
        &plugin("webapp"),
        "--parent",
        &fixture("webapp", "invalid.yaml"),
    ])
    .unwrap_err();
    assert_ne!(code, 0);
    assert!(
        stderr.contains("permanent error: spec.image must not be empty")
            && stderr.contains("team-a/broken"),
        "{stderr}"
    );
}

#[test]
fn configmap_generator_should_render_its_configmap() {
    let doc = render(&[
        "--plugin",
        &plugin("configmap-generator"),
        "--parent",
        &fixture("configmap-generator", "parent.yaml"),
    ])
    .unwrap();
    assert_eq!(actions(&doc), ["create ConfigMap settings"]);
    assert_eq!(doc["children"][0]["object"]["data"]["FEATURE_X"], "on");
}

#[test]
fn merged_config_should_read_related_objects_and_report_missing_ones() {
    let doc = render(&[
        "--plugin",
        &plugin("merged-config"),
        "--parent",
        &fixture("merged-config", "parent.yaml"),
        "--related",
        &fixture("merged-config", "related.yaml"),
    ])
    .unwrap();
    let data = &doc["children"][0]["object"]["data"];
    assert_eq!(data["color"], "blue");
    assert_eq!(data["size"], "large", "later sources win");
    assert!(
        data.get("leak").is_none(),
        "a ConfigMap of another namespace is not read"
    );
    assert_eq!(
        doc["status"]["missing"],
        serde_json::json!(["not-there-yet"])
    );
}

#[test]
fn archiver_should_add_its_finalizer_then_clean_up_in_two_steps() {
    let p = plugin("archiver");
    let live = render(&[
        "--plugin",
        &p,
        "--parent",
        &fixture("archiver", "parent.yaml"),
    ])
    .unwrap();
    assert_eq!(live["finalizer"], "add");
    let deleting = render(&[
        "--plugin",
        &p,
        "--parent",
        &fixture("archiver", "deleting.yaml"),
    ])
    .unwrap();
    assert_eq!(deleting["finalized"], false);
    assert_eq!(deleting["events"][0]["reason"], "Archiving");
    assert_eq!(
        deleting["children"][0]["object"]["data"]["archived"],
        "true"
    );
    assert!(
        deleting.get("finalizer").is_none(),
        "the finalizer stays until cleanup is done"
    );
    let done = render(&[
        "--plugin",
        &p,
        "--parent",
        &fixture("archiver", "deleting.yaml"),
        "--observed",
        &fixture("archiver", "tombstone.yaml"),
    ])
    .unwrap();
    assert_eq!(done["finalized"], true);
    assert_eq!(done["finalizer"], "remove");
    assert_eq!(done["children"][0]["action"], "unchanged");
}

#[test]
fn namespace_defaults_should_stamp_each_matching_namespace_and_skip_a_terminating_one() {
    let doc = render(&[
        "--plugin",
        &plugin("namespace-defaults"),
        "--parent",
        &fixture("namespace-defaults", "parent.yaml"),
        "--related",
        &fixture("namespace-defaults", "namespaces.yaml"),
    ])
    .unwrap();
    let placed: Vec<String> = doc["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {} {}/{}",
                c["action"].as_str().unwrap(),
                c["kind"]["kind"].as_str().unwrap(),
                c["namespace"].as_str().unwrap_or("-"),
                c["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        placed,
        [
            "create ResourceQuota team-a/team-defaults",
            "create LimitRange team-a/team-defaults",
            "create ResourceQuota team-b/team-defaults",
            "create LimitRange team-b/team-defaults",
        ]
    );
    let quota = &doc["children"][0]["object"];
    assert_eq!(quota["metadata"]["namespace"], "team-a");
    assert_eq!(quota["spec"]["hard"]["requests.memory"], "8Gi");
    assert_eq!(
        quota["metadata"]["ownerReferences"][0]["kind"],
        "NamespaceDefaults"
    );
    let limits = &doc["children"][1]["object"]["spec"]["limits"][0];
    assert_eq!(limits["default"]["cpu"], "500m");
    assert_eq!(
        doc["status"]["namespaces"],
        serde_json::json!(["team-a", "team-b"])
    );
}

#[test]
fn render_should_refuse_a_parent_of_the_wrong_kind() {
    let (_, stderr) = render(&[
        "--plugin",
        &plugin("webapp"),
        "--parent",
        &fixture("archiver", "parent.yaml"),
    ])
    .unwrap_err();
    assert!(
        stderr.contains("reconciles examples.reconhost.dev/v1alpha1/WebApp"),
        "{stderr}"
    );
}

#[test]
fn yaml_should_be_the_default_output() {
    let out = Command::new(env!("CARGO_BIN_EXE_reconhost"))
        .args([
            "render",
            "--plugin",
            &plugin("configmap-generator"),
            "--parent",
            &fixture("configmap-generator", "parent.yaml"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let doc: Value = serde_saphyr::from_str(&text).expect("valid YAML");
    assert_eq!(doc["children"][0]["action"], "create");
}
