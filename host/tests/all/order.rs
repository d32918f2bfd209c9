//! Order (contract 0.2): update strategies per child kind and waves of children, on a real
//! control plane. `Recreate` replaces an immutable ConfigMap the API server will not let change,
//! `OnDelete` leaves an existing child alone until someone deletes it, `RollingInPlace` changes
//! one Secret at a time and pauses until the last one changed passes its status check (an
//! approval another writer sets), and a third wave waits for the second's readiness. While
//! anything waits, the parent says so: `Synced=False`, reason `Progressing`, and why.

use crate::common;

use common::crd::{install_crd, test_crd};
use common::{CONVERGE, World, condition, get};
use kube::api::{Api, DeleteParams, DynamicObject};
use reconhost_tests::host::sample;
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

/// The parent's `Synced` condition once it is about its current generation and `want` holds:
/// `(status, reason, message)`.
async fn synced_at_generation(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    want: impl Fn(&str, &str, &str) -> bool,
) -> (String, String, String) {
    eventually(CONVERGE, &format!("{name}: {what}"), || async {
        let object = get(api, name).await?;
        let c = condition(&object, "Synced")?;
        let text = |k: &str| c[k].as_str().unwrap_or("").to_owned();
        let (status, reason, message) = (text("status"), text("reason"), text("message"));
        let current = c["observedGeneration"] == object["metadata"]["generation"];
        (current && want(&status, &reason, &message)).then_some((status, reason, message))
    })
    .await
}

fn annotation(object: &Value, key: &str) -> String {
    object["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// The `version` annotations of Secrets `r-0`..`r-{n-1}`.
async fn secret_versions(secrets: &Api<DynamicObject>, n: usize) -> Vec<String> {
    let mut versions = Vec::new();
    for i in 0..n {
        let secret = get(secrets, &format!("r-{i}")).await.expect("a Secret");
        versions.push(annotation(&secret, "version"));
    }
    versions
}

#[tokio::test]
async fn each_update_strategy_should_change_its_children_as_declared() {
    let world = World::new("order-release").await;
    let spec = json!({"version": {"type": "string"}, "replicas": {"type": "integer"}});
    let crds = install_crd(
        &world.client,
        "releases.test.reconhost.dev",
        test_crd("Release", "releases", spec),
    )
    .await;
    let _host = world.host(&["order-release"], &[]).await;
    let releases = world.api("test.reconhost.dev", "v1", "Release", "releases");
    let secrets = world.api("", "v1", "Secret", "secrets");
    let accounts = world.api("", "v1", "ServiceAccount", "serviceaccounts");
    let ns = world.namespace.clone();

    world
        .create(
            &releases,
            json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Release",
                   "metadata": {"name": "r"}, "spec": {"version": "v1", "replicas": 3}}),
        )
        .await;
    synced_at_generation(&releases, "r", "Synced=True", |s, _, _| s == "True").await;
    let settings = get(&world.config_maps(), "r-settings")
        .await
        .expect("settings");
    assert_eq!(settings["immutable"], true);
    assert_eq!(secret_versions(&secrets, 3).await, ["v1", "v1", "v1"]);

    world
        .merge(&releases, "r", json!({"spec": {"version": "v2"}}))
        .await;

    // Recreate: the immutable ConfigMap is replaced, a new object with the new data.
    let recreated = eventually(CONVERGE, "r-settings recreated at v2", || async {
        let now = get(&world.config_maps(), "r-settings").await?;
        (now["data"]["version"] == "v2").then_some(now)
    })
    .await;
    assert_ne!(
        recreated["metadata"]["uid"], settings["metadata"]["uid"],
        "replaced, not changed in place"
    );

    // RollingInPlace: the first Secret changes, then the update pauses on it until approved.
    let paused_on = |i: usize| {
        let target = format!("paused: Secret {ns}/r-{i} is not ready");
        move |s: &str, r: &str, m: &str| s == "False" && r == "Progressing" && m.contains(&target)
    };
    let (_, _, message) = synced_at_generation(&releases, "r", "paused on r-0", paused_on(0)).await;
    assert!(
        message.contains("metadata.annotations.approved is null"),
        "{message}"
    );
    assert_eq!(secret_versions(&secrets, 3).await, ["v2", "v1", "v1"]);
    // OnDelete: the ServiceAccount is not changed.
    let account = get(&accounts, "r").await.expect("the ServiceAccount");
    assert_eq!(annotation(&account, "version"), "v1");

    let approve = |i: usize| {
        let secrets = secrets.clone();
        let world = &world;
        async move {
            world
                .merge(
                    &secrets,
                    &format!("r-{i}"),
                    json!({"metadata": {"annotations": {"approved": "v2"}}}),
                )
                .await;
        }
    };
    approve(0).await;
    synced_at_generation(&releases, "r", "paused on r-1", paused_on(1)).await;
    assert_eq!(secret_versions(&secrets, 3).await, ["v2", "v2", "v1"]);
    // The last one changed ends the update: whether it is ready is the plugin's to report.
    approve(1).await;
    synced_at_generation(&releases, "r", "Synced=True at v2", |s, _, _| s == "True").await;
    assert_eq!(secret_versions(&secrets, 3).await, ["v2", "v2", "v2"]);

    // OnDelete: deleted, the ServiceAccount comes back in the desired state.
    let account = get(&accounts, "r").await.expect("the ServiceAccount");
    assert_eq!(annotation(&account, "version"), "v1");
    accounts
        .delete("r", &DeleteParams::default())
        .await
        .expect("deleting the ServiceAccount");
    eventually(CONVERGE, "the ServiceAccount back at v2", || async {
        let again = get(&accounts, "r").await?;
        (annotation(&again, "version") == "v2").then_some(())
    })
    .await;

    releases.delete("r", &DeleteParams::default()).await.ok();
    crds.delete("releases.test.reconhost.dev", &DeleteParams::default())
        .await
        .ok();
}

#[tokio::test]
async fn the_third_wave_should_wait_for_the_seconds_readiness() {
    let world = World::new("order-waves").await;
    let crds = install_crd(
        &world.client,
        "stacks.test.reconhost.dev",
        test_crd("Stack", "stacks", json!({"seed": {"type": "string"}})),
    )
    .await;
    let host = world.host(&["order-waves"], &[]).await;
    let converged = || async {
        let metrics = host.metrics().await.expect("the host's metrics");
        sample(
            &metrics,
            "reconhost_time_to_converge_seconds_count",
            &[("plugin", "order-waves")],
        )
        .unwrap_or(0.0)
    };
    let stacks = world.api("test.reconhost.dev", "v1", "Stack", "stacks");
    let maps = world.config_maps();
    let ns = world.namespace.clone();

    world
        .create(
            &stacks,
            json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Stack",
                   "metadata": {"name": "s"}, "spec": {"seed": "s0"}}),
        )
        .await;
    let waiting = format!(
        "waits for wave 1: ConfigMap {ns}/s-b is not ready: data.ready is null, not equal to \"yes\""
    );
    synced_at_generation(&stacks, "s", "waiting on s-b", |s, r, m| {
        s == "False" && r == "Progressing" && m == waiting
    })
    .await;
    assert!(get(&maps, "s-a").await.is_some());
    assert!(get(&maps, "s-b").await.is_some());
    assert!(
        get(&maps, "s-c").await.is_none(),
        "the third wave was made before the second was ready"
    );
    assert_eq!(
        converged().await,
        0.0,
        "a parent still in its waves has not converged"
    );

    // Someone (a job, another controller) marks the second wave ready: the third follows.
    world
        .merge(&maps, "s-b", json!({"data": {"ready": "yes"}}))
        .await;
    synced_at_generation(&stacks, "s", "Synced=True", |s, _, _| s == "True").await;
    let c = get(&maps, "s-c").await.expect("the third wave");
    assert_eq!(c["data"]["seed"], "s0");
    // Counted just after the status is written: waited for, then exact.
    let counted = |n: f64| {
        let converged = &converged;
        async move {
            eventually(CONVERGE, &format!("{n} generations converged"), || async {
                (converged().await >= n).then_some(())
            })
            .await;
            assert_eq!(converged().await, n);
        }
    };
    counted(1.0).await;

    // A new seed goes through the waves again and ends with all three changed; the second
    // wave's readiness, set by another writer, is kept.
    world
        .merge(&stacks, "s", json!({"spec": {"seed": "s1"}}))
        .await;
    synced_at_generation(&stacks, "s", "Synced=True at s1", |s, _, _| s == "True").await;
    for part in ["a", "b", "c"] {
        let map = get(&maps, &format!("s-{part}")).await.expect("a wave");
        assert_eq!(map["data"]["seed"], "s1", "{map}");
    }
    assert_eq!(
        get(&maps, "s-b").await.expect("s-b")["data"]["ready"],
        "yes"
    );
    counted(2.0).await;

    stacks.delete("s", &DeleteParams::default()).await.ok();
    crds.delete("stacks.test.reconhost.dev", &DeleteParams::default())
        .await
        .ok();
}

#[tokio::test]
async fn inspect_should_say_how_each_child_kind_changes() {
    let world = World::new("order-inspect").await;
    let component = common::plugin("order-release").display().to_string();
    let out = crate::grants::reconhost(&world, &["inspect", &component, "-o", "json"]);
    let (stdout, stderr) = crate::grants::text(&out);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(report["contract"], "reconhost:plugin@0.2.0");
    assert_eq!(
        report["updateStrategies"],
        json!({
            "v1/ConfigMap": {"method": "Recreate"},
            "v1/ServiceAccount": {"method": "OnDelete"},
            "v1/Secret": {"method": "RollingInPlace", "statusChecks": [{"field": {
                "path": "metadata.annotations.approved", "comparison": "equal",
                "operand": {"field": "metadata.annotations.version"}}}]},
        })
    );
    let out = crate::grants::reconhost(&world, &["inspect", &component]);
    let (stdout, _) = crate::grants::text(&out);
    assert!(
        stdout.contains("  v1/ConfigMap (update: Recreate)\n"),
        "{stdout}"
    );
}
