//! The health of a plugin as its parents see it, and `reconhost trace` / `reconhost status`
//! (also as `kubectl reconhost`), on the real control plane: the record of the last reconcile
//! on each parent, the ReconcilePlugin's counts and `Degraded`, a suspended plugin shown on its
//! parents, failures with their cause and whole messages.

use std::process::Command;

use crate::common;

use common::plugins::{digest_of, exclusive, has};
use common::{CONVERGE, World, condition, get, plugin, synced};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

const WEBAPP: [&str; 2] = ["examples.reconhost.dev/v1alpha1", "WebApp"];
const WEBAPP_RP: &str = "webapp.examples.reconhost.dev";
const RECORD: &str = "reconhost.dev/last-reconcile";

/// Runs the reconhost binary with `args` against the world's cluster; its standard output (a
/// failure fails the test, with its standard error).
fn reconhost(world: &World, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_reconhost"))
        .args(args)
        .arg("--kubeconfig")
        .arg(world.cluster.kubeconfig())
        .output()
        .expect("running reconhost");
    assert!(
        out.status.success(),
        "reconhost {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn trace_json(world: &World, name: &str) -> Value {
    let text = reconhost(
        world,
        &["trace", name, "-n", &world.namespace, "-o", "json"],
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The record the host left on a WebApp, once `check` accepts it.
async fn record_of(world: &World, name: &str, check: impl Fn(&Value) -> bool) -> Value {
    eventually(CONVERGE, &format!("the record on {name}"), || async {
        let parent = get(&world.webapps(), name).await?;
        let record: Value =
            serde_json::from_str(parent["metadata"]["annotations"][RECORD].as_str()?).ok()?;
        check(&record).then_some(record)
    })
    .await
}

/// The parent's `Synced` condition once `check` accepts it.
async fn synced_when(world: &World, name: &str, check: impl Fn(&Value) -> bool) -> Value {
    eventually(CONVERGE, &format!("Synced on {name}"), || async {
        let parent = get(&world.webapps(), name).await?;
        condition(&parent, "Synced").filter(|c| check(c)).cloned()
    })
    .await
}

#[tokio::test]
async fn trace_and_status_should_show_what_served_each_parent_and_how_it_went() {
    let world = World::new("trace").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    let _host = world.host(&[], &[]).await;
    let digest = digest_of(&plugin("webapp"));
    let mut rp = world.reconcile_plugin(
        WEBAPP_RP,
        WEBAPP,
        &digest,
        world.config_map_source("webapp"),
    );
    world.apply_plugin(&rp).await;
    world.plugin_ready(WEBAPP_RP).await;

    // A parent with children.
    world.create_webapp("shop", "nginx:1.27", 2).await;
    synced(&world.webapps(), "shop").await;
    let record = record_of(&world, "shop", |r| r["outcome"]["result"] == "applied").await;
    assert_eq!(record["plugin"], "webapp", "{record}");
    assert_eq!(record["digest"], digest.as_str(), "{record}");

    let traced = trace_json(&world, "webapp/shop");
    assert_eq!(traced["parent"]["kind"], "WebApp", "{traced}");
    assert_eq!(traced["parent"]["name"], "shop", "{traced}");
    assert_eq!(traced["plugin"]["reconcilePlugin"], WEBAPP_RP, "{traced}");
    assert_eq!(
        traced["plugin"]["activeDigest"],
        digest.as_str(),
        "{traced}"
    );
    assert_eq!(
        traced["lastReconcile"]["digest"],
        digest.as_str(),
        "{traced}"
    );
    let children: Vec<String> = traced["children"]
        .as_array()
        .expect("children")
        .iter()
        .map(|c| format!("{} {}", c["kind"], c["name"]))
        .collect();
    assert_eq!(
        children,
        ["\"Deployment\" \"shop\"", "\"Service\" \"shop\""],
        "{traced}"
    );
    for child in traced["children"].as_array().expect("children") {
        assert!(
            child["appliedAt"].is_string(),
            "when the plugin applied it: {child}"
        );
    }

    // The tree, by default, under both names the kind goes by.
    let tree = reconhost(
        &world,
        &[
            "trace",
            "webapps.examples.reconhost.dev/shop",
            "-n",
            &world.namespace,
        ],
    );
    let head = format!("WebApp {}/shop", world.namespace);
    assert!(tree.starts_with(&head), "{tree}");
    assert!(
        tree.contains(&format!("served by  webapp 0.1.0 ({digest})")),
        "{tree}"
    );
    assert!(
        tree.contains(&format!("├─ Deployment {}/shop", world.namespace)),
        "{tree}"
    );
    assert!(
        tree.contains(&format!("└─ Service {}/shop", world.namespace)),
        "{tree}"
    );

    // A parent that fails for good: the error and its cause.
    world.create_webapp("broken", "", 1).await;
    let failed = synced_when(&world, "broken", |c| c["status"] == "False").await;
    let record = record_of(&world, "broken", |r| r["outcome"]["result"] == "failed").await;
    assert_eq!(record["outcome"]["reason"], "ReconcileError", "{record}");
    assert_eq!(record["outcome"]["cause"], "permanent", "{record}");
    assert_eq!(record["outcome"]["message"], failed["message"], "{record}");

    // A parent whose Service name is taken: a message far longer than 64 characters, whole.
    let orphan = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "taken", "namespace": world.namespace},
        "spec": {"ports": [{"port": 80}]}});
    let services = world.services();
    world.create(&services, orphan).await;
    world.create_webapp("taken", "nginx:1.27", 1).await;
    let conflict = synced_when(&world, "taken", |c| c["reason"] == "ChildConflict").await;
    let message = conflict["message"].as_str().expect("a message").to_owned();
    assert!(
        message.len() > 64 && message.contains("no controller"),
        "{message}"
    );
    record_of(&world, "taken", |r| {
        r["outcome"]["message"] == message.as_str()
    })
    .await;
    let traced = trace_json(&world, "webapp/taken");
    assert_eq!(
        traced["lastReconcile"]["outcome"]["message"],
        message.as_str(),
        "{traced}"
    );
    let synced_line = traced["parent"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Synced"))
        .cloned()
        .expect("Synced in the trace");
    assert_eq!(synced_line["message"], message.as_str(), "{traced}");
    assert!(
        traced["events"].as_array().is_some_and(|e| e
            .iter()
            .any(|e| e["reason"] == "ChildConflict" && e["type"] == "Warning")),
        "the parent's events: {traced}"
    );
    let tree = reconhost(&world, &["trace", "WebApp/taken", "-n", &world.namespace]);
    assert!(
        tree.contains(&format!("error      ChildConflict: {message}")),
        "{tree}"
    );

    // The plugin's health as its parents see it: two of three failing is Degraded.
    let rp_now = world
        .plugin_status(WEBAPP_RP, "2 of 3 parents failing", |rp| {
            rp["status"]["parents"] == json!({"served": 3, "synced": 1, "failing": 2, "paused": 0})
                && has(rp, "Degraded", "True", "ParentsFailing")
        })
        .await;
    assert!(
        has(&rp_now, "Ready", "True", "Running"),
        "Ready says the code runs: {rp_now}"
    );
    let status: Value = serde_json::from_str(&reconhost(&world, &["status", "-o", "json"]))
        .expect("status as JSON");
    let line = status
        .as_array()
        .and_then(|l| l.iter().find(|p| p["name"] == WEBAPP_RP))
        .cloned()
        .expect("the plugin in reconhost status");
    assert_eq!(line["parents"]["failing"], 2, "{line}");
    assert!(
        line["degraded"]
            .as_str()
            .is_some_and(|d| d.starts_with("2 of 3 parents failing")),
        "{line}"
    );
    let table = reconhost(&world, &["status"]);
    assert!(
        table.contains("parents    3 served, 1 synced, 2 failing"),
        "{table}"
    );

    // Fixed, the failures go and so does Degraded.
    world
        .merge(
            &world.webapps(),
            "broken",
            json!({"spec": {"image": "nginx:1.27"}}),
        )
        .await;
    services
        .delete("taken", &Default::default())
        .await
        .expect("deleting the orphan");
    // Its failures were retried with a growing backoff: a change to the parent wakes it now.
    world
        .merge(
            &world.webapps(),
            "taken",
            json!({"metadata": {"annotations": {"touch": "1"}}}),
        )
        .await;
    world
        .plugin_status(WEBAPP_RP, "every parent synced", |rp| {
            rp["status"]["parents"]["synced"] == 3 && has(rp, "Degraded", "False", "ParentsHealthy")
        })
        .await;
    record_of(&world, "broken", |r| r["outcome"]["result"] == "applied").await;

    // Suspended: every parent says so, instead of Synced=True beside a spec being ignored.
    rp["spec"]["suspend"] = json!(true);
    world.apply_plugin(&rp).await;
    for name in ["shop", "broken", "taken"] {
        let paused = synced_when(&world, name, |c| c["reason"] == "ReconcilePaused").await;
        assert_eq!(paused["status"], "False", "{paused}");
        assert!(
            paused["message"]
                .as_str()
                .is_some_and(|m| m.contains(WEBAPP_RP) && m.contains("spec.suspend")),
            "{paused}"
        );
    }
    world
        .plugin_status(WEBAPP_RP, "3 paused", |rp| {
            rp["status"]["parents"]["paused"] == 3
        })
        .await;
    let traced = trace_json(&world, "webapp/shop");
    assert_eq!(traced["plugin"]["suspended"], true, "{traced}");
    let tree = reconhost(&world, &["trace", "webapp/shop", "-n", &world.namespace]);
    assert!(
        tree.contains("Synced=False") && tree.contains("(suspended)"),
        "{tree}"
    );

    // Resumed: reconciled again, Synced comes back.
    rp["spec"]["suspend"] = json!(false);
    world.apply_plugin(&rp).await;
    for name in ["shop", "broken", "taken"] {
        synced_when(&world, name, |c| c["status"] == "True").await;
    }
    world.uninstall(WEBAPP_RP).await;
}

#[tokio::test]
async fn the_binary_should_be_a_kubectl_plugin_by_its_name() {
    let world = World::new("trace-kubectl").await;
    let bin = tempfile::tempdir().expect("a directory");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_reconhost"),
        bin.path().join("kubectl-reconhost"),
    )
    .expect("linking kubectl-reconhost");
    let kubectl = reconhost_tests::binaries::Binaries::locate()
        .expect("kubectl")
        .kubectl;
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&str]| {
        Command::new(&kubectl)
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", world.cluster.kubeconfig())
            .output()
            .expect("running kubectl")
    };
    let listed = run(&["plugin", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("kubectl-reconhost"),
        "kubectl finds it: {listed}"
    );
    let out = run(&["reconhost", "status", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(status.is_array(), "{status}");
    let help = run(&["reconhost", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("kubectl reconhost"),
        "named as kubectl names it: {help}"
    );
}

#[tokio::test]
async fn trace_should_show_what_a_parent_read() {
    let world = World::new("trace-reads").await;
    // A host with the plugin file, no ReconcilePlugin: the record says it all the same.
    let _host = world.host(&["merged-config"], &[]).await;
    let merged = world.api(
        "examples.reconhost.dev",
        "v1alpha1",
        "MergedConfig",
        "mergedconfigs",
    );
    world
        .create(
            &world.config_maps(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "base"},
                   "data": {"LOG_LEVEL": "info"}}),
        )
        .await;
    world
        .create(
            &merged,
            json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "MergedConfig",
                   "metadata": {"name": "app"}, "spec": {"sources": ["base", "overrides"]}}),
        )
        .await;
    synced(&merged, "app").await;
    let ns = &world.namespace;
    let wanted = [
        format!("get v1/ConfigMap {ns}/base"),
        format!("get v1/ConfigMap {ns}/overrides"),
    ];
    let traced = eventually(CONVERGE, "both reads recorded", || async {
        let traced = trace_json(&world, "mergedconfig/app");
        let reads: Vec<String> = traced["lastReconcile"]["reads"]
            .as_array()?
            .iter()
            .filter_map(|r| r.as_str().map(str::to_owned))
            .collect();
        (reads == wanted).then_some(traced)
    })
    .await;
    assert!(traced["plugin"].is_null(), "no ReconcilePlugin: {traced}");
    assert_eq!(
        traced["lastReconcile"]["plugin"], "merged-config",
        "{traced}"
    );
    let tree = reconhost(&world, &["trace", "mergedconfig/app", "-n", ns]);
    for read in &wanted {
        assert!(tree.contains(&format!("reads      {read}\n")), "{tree}");
    }
}
