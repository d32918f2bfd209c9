//! Plugins installed, upgraded, suspended and uninstalled through ReconcilePlugin resources,
//! on the real control plane, with a host in the dynamic mode (no `--plugin`).

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::plugins::{cond, digest_of, exclusive, has, reconcile_plugins};
use common::{CONVERGE, World, controlled_by, drained, get, plugin, reconciles, synced};
use kube::api::{DeleteParams, Patch, PatchParams};
use reconhost_tests::host::{Host, sample};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

const STAMP: [&str; 2] = ["test.reconhost.dev/v1", "Stamp"];
const STAMP_RP: &str = "stamp.test.reconhost.dev";
const WEBAPP: [&str; 2] = ["examples.reconhost.dev/v1alpha1", "WebApp"];
const WEBAPP_RP: &str = "webapp.examples.reconhost.dev";

/// The lifecycle suite's steps: Stamp parents and their ReconcilePlugin.
trait LifecycleWorld {
    fn stamps(&self) -> kube::Api<kube::api::DynamicObject>;

    async fn create_stamp(&self, name: &str, value: i64);

    /// A ReconcilePlugin for Stamp from ConfigMap `cm`, pinned to `component`'s digest.
    fn stamp_plugin(&self, cm: &str, component: &str) -> Value;
}

impl LifecycleWorld for World {
    fn stamps(&self) -> kube::Api<kube::api::DynamicObject> {
        self.api("test.reconhost.dev", "v1", "Stamp", "stamps")
    }

    async fn create_stamp(&self, name: &str, value: i64) {
        self.create(
            &self.stamps(),
            json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Stamp",
                   "metadata": {"name": name}, "spec": {"value": value}}),
        )
        .await;
    }

    fn stamp_plugin(&self, cm: &str, component: &str) -> Value {
        self.reconcile_plugin(
            STAMP_RP,
            STAMP,
            &digest_of(&plugin(component)),
            self.config_map_source(cm),
        )
    }
}

#[tokio::test]
async fn configmap_install_should_reconcile_parents_and_report_what_serves() {
    let world = World::new("rp-install").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    let host = world.host(&[], &[]).await;
    let rp = world.reconcile_plugin(
        WEBAPP_RP,
        WEBAPP,
        &digest_of(&plugin("webapp")),
        world.config_map_source("webapp"),
    );
    world.apply_plugin(&rp).await;
    let rp = world.plugin_ready(WEBAPP_RP).await;
    let status = &rp["status"];
    assert_eq!(
        status["activeDigest"],
        digest_of(&plugin("webapp")).as_str()
    );
    assert_eq!(status["plugin"]["name"], "webapp");
    assert_eq!(status["contract"], "reconhost:plugin@0.2.0");
    assert_eq!(
        status["declared"]["children"],
        json!(["apps/v1/Deployment", "v1/Service"])
    );
    assert!(has(&rp, "Fetched", "True", "Fetched"), "{rp}");
    assert!(has(&rp, "Compiled", "True", "Compiled"), "{rp}");
    assert!(has(&rp, "Ready", "True", "Running"), "{rp}");
    assert!(
        rp["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("reconhost.dev/uninstall"))),
        "the host keeps its uninstall finalizer on the resource: {rp}"
    );

    let parent = world.create_webapp("shop", "nginx:1.27", 2).await;
    let deployment = eventually(CONVERGE, "the Deployment", || async {
        get(&world.deployments(), "shop").await
    })
    .await;
    assert!(controlled_by(&deployment, &parent));
    synced(&world.webapps(), "shop").await;

    let metrics = host.metrics().await.expect("metrics");
    assert_eq!(
        sample(&metrics, "reconhost_plugins", &[("state", "ready")]),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "reconhost_plugin_swaps_total",
            &[("result", "installed")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "reconhost_plugin_fetch_seconds_count",
            &[("source", "configmap")]
        ),
        Some(1.0)
    );
    assert!(
        sample(&metrics, "reconhost_plugin_compile_seconds_count", &[]).is_some(),
        "{metrics}"
    );
    world.uninstall(WEBAPP_RP).await;
}

/// A host in the dynamic mode serving Stamps: the plugin's account and ConfigMap
/// (lifecycle-v1), and its ReconcilePlugin as `edit` makes it, applied and Ready. Returns the
/// host and the ReconcilePlugin, to change it further.
async fn stamp_installed(world: &World, edit: impl FnOnce(&mut Value)) -> (Host, Value) {
    world.service_account("plugin").await;
    world
        .plugin_config_map("stamp-v1", &plugin("lifecycle-v1"))
        .await;
    let host = world.host(&[], &[]).await;
    let mut rp = world.stamp_plugin("stamp-v1", "lifecycle-v1");
    edit(&mut rp);
    world.apply_plugin(&rp).await;
    world.plugin_ready(STAMP_RP).await;
    (host, rp)
}

/// Stamps `0..count`, and the value each was last given.
async fn stamps(world: &World, count: usize) -> HashMap<String, i64> {
    let mut values = HashMap::new();
    for i in 0..count {
        let name = format!("s{i:03}");
        world.create_stamp(&name, 0).await;
        values.insert(name, 0);
    }
    values
}

/// Waits until every stamp's status and child show `version` and the value it was last given.
async fn served_by(world: &World, values: &HashMap<String, i64>, version: &str) {
    eventually(
        CONVERGE * 3,
        &format!("every stamp served by version {version} with its latest value"),
        || async {
            let list = world.stamps().list(&Default::default()).await.ok()?;
            let children = world.config_maps().list(&Default::default()).await.ok()?;
            let data: HashMap<String, Value> = children
                .items
                .into_iter()
                .filter_map(|c| Some((c.metadata.name.clone()?, serde_json::to_value(c).ok()?)))
                .collect();
            let done = list.items.iter().all(|s| {
                let name = s.metadata.name.clone().unwrap_or_default();
                let want = values[&name];
                let status = &s.data["status"];
                let child = &data
                    .get(&format!("{name}-stamp"))
                    .map_or(&Value::Null, |c| &c["data"]);
                status["servedBy"] == version
                    && status["value"] == want
                    && child["version"] == version
                    && child["value"].as_str() == Some(want.to_string().as_str())
            });
            (done && list.items.len() == values.len()).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn upgrade_under_load_should_reach_every_parent_and_never_run_both_versions_at_once() {
    let world = World::new("rp-upgrade").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("stamp-v1", &plugin("lifecycle-v1"))
        .await;
    world
        .plugin_config_map("stamp-v2", &plugin("lifecycle-v2"))
        .await;
    let host = world.host(&[], &[]).await;
    world
        .apply_plugin(&world.stamp_plugin("stamp-v1", "lifecycle-v1"))
        .await;
    world.plugin_ready(STAMP_RP).await;
    let mut values = stamps(&world, 200).await;
    served_by(&world, &values, "1").await;
    // Version 1 fails this one for good; version 2 must take it up without a spec change.
    world.create_stamp("refused", -1).await;
    values.insert("refused".into(), -1);
    eventually(CONVERGE, "the permanent failure on version 1", || async {
        let s = get(&world.stamps(), "refused").await?;
        let c = common::condition(&s, "Synced")?;
        (c["status"] == "False" && c["message"].as_str()?.contains("refuses negative values"))
            .then_some(())
    })
    .await;

    // Specs keep changing while the upgrade happens.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (api, stop) = (world.stamps(), stop.clone());
        let names: Vec<String> = values.keys().filter(|n| *n != "refused").cloned().collect();
        tokio::spawn(async move {
            let mut last = HashMap::new();
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let name = &names[(n as usize * 7) % names.len()];
                let patch = Patch::Merge(json!({"spec": {"value": n}}));
                if api
                    .patch(name, &PatchParams::default(), &patch)
                    .await
                    .is_ok()
                {
                    last.insert(name.clone(), n);
                }
            }
            last
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    world
        .apply_plugin(&world.stamp_plugin("stamp-v2", "lifecycle-v2"))
        .await;
    let v2 = digest_of(&plugin("lifecycle-v2"));
    world
        .plugin_status(STAMP_RP, "the new digest serving", |rp| {
            rp["status"]["activeDigest"] == v2.as_str() && has(rp, "Ready", "True", "Running")
        })
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    values.extend(writer.await.expect("the spec writer"));
    served_by(&world, &values, "2").await;

    // The plugin logs `start` and `end` inside every call; the host adds the parent and the
    // digest of the code. No parent may have two calls open at once, whatever their versions.
    let mut open: HashMap<String, String> = HashMap::new();
    let mut calls: Vec<(String, String, String, String)> = host
        .logs()
        .into_iter()
        .filter(|l| l["message"] == "start" || l["message"] == "end")
        .map(|l| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
            (
                s(&l["timestamp"]),
                s(&l["parent"]),
                s(&l["message"]),
                s(&l["span"]["digest"]),
            )
        })
        .collect();
    calls.sort();
    let mut versions = std::collections::BTreeSet::new();
    for (at, parent, what, digest) in &calls {
        versions.insert(digest.clone());
        if what == "start" {
            if let Some(other) = open.insert(parent.clone(), digest.clone()) {
                panic!(
                    "{parent}: a call of {digest} started at {at} while one of {other} was running"
                );
            }
        } else {
            open.remove(parent);
        }
    }
    assert_eq!(
        versions.len(),
        2,
        "calls of both versions were logged: {versions:?}"
    );
    let metrics = host.metrics().await.expect("metrics");
    assert_eq!(
        sample(
            &metrics,
            "reconhost_plugin_swaps_total",
            &[("result", "upgraded")]
        ),
        Some(1.0)
    );
    world.uninstall(STAMP_RP).await;
}

#[tokio::test]
async fn failed_upgrades_should_leave_the_old_code_serving_and_say_why() {
    let world = World::new("rp-fail").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("stamp-v1", &plugin("lifecycle-v1"))
        .await;
    world
        .plugin_config_map("no-reconciler", &plugin("runtime-not-a-reconciler"))
        .await;
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    let _host = world.host(&[], &[]).await;
    world
        .apply_plugin(&world.stamp_plugin("stamp-v1", "lifecycle-v1"))
        .await;
    world.plugin_ready(STAMP_RP).await;
    let v1 = digest_of(&plugin("lifecycle-v1"));
    let v2 = digest_of(&plugin("lifecycle-v2"));

    let cases: Vec<(&str, Value, &str, &str, &str)> = vec![
        (
            "a digest the ConfigMap's bytes do not have",
            world.reconcile_plugin(STAMP_RP, STAMP, &v2, world.config_map_source("stamp-v1")),
            "Fetched",
            "DigestMismatch",
            "but the ReconcilePlugin pins",
        ),
        (
            "a ConfigMap that does not exist",
            world.reconcile_plugin(STAMP_RP, STAMP, &v2, world.config_map_source("missing")),
            "Fetched",
            "SourceNotFound",
            "missing not found",
        ),
        (
            "a key the ConfigMap does not have",
            world.reconcile_plugin(
                STAMP_RP,
                STAMP,
                &v2,
                json!({"configMap": {"namespace": world.namespace, "name": "stamp-v1", "key": "other.wasm"}}),
            ),
            "Fetched",
            "SourceNotFound",
            "key other.wasm",
        ),
        (
            "a registry that is down",
            world.reconcile_plugin(
                STAMP_RP,
                STAMP,
                &v2,
                json!({"oci": {"reference": "127.0.0.1:9/plugins/stamp:2"}}),
            ),
            "Fetched",
            "FetchFailed",
            "127.0.0.1:9",
        ),
        (
            "a registry the operator did not allow plain HTTP for",
            world.reconcile_plugin(
                STAMP_RP,
                STAMP,
                &v2,
                json!({"oci": {"reference": format!("{}/plugins/stamp:2", world.registry())}}),
            ),
            "Fetched",
            "FetchFailed",
            "speaks plain HTTP, not HTTPS",
        ),
        (
            "a component that is not a reconciler",
            world.reconcile_plugin(
                STAMP_RP,
                STAMP,
                &digest_of(&plugin("runtime-not-a-reconciler")),
                world.config_map_source("no-reconciler"),
            ),
            "Compiled",
            "NotAReconciler",
            "does not implement the reconhost:plugin/reconciler world",
        ),
        (
            "a plugin for another parent kind",
            world.reconcile_plugin(STAMP_RP, STAMP, &digest_of(&plugin("webapp")), world.config_map_source("webapp")),
            "Ready",
            "UpgradeFailed",
            "ParentMismatch",
        ),
    ];
    for (case, rp, type_, reason, message) in cases {
        world.apply_plugin(&rp).await;
        let rp = world
            .plugin_status(STAMP_RP, case, |rp| {
                condition_is(rp, type_, "False", reason)
            })
            .await;
        let (_, ready_reason, ready_message) = cond(&rp, "Ready");
        assert_eq!(ready_reason, "UpgradeFailed", "{case}: {rp}");
        assert!(
            ready_message.contains(&v1[7..]) && cond(&rp, type_).2.contains(message),
            "{case}: the old digest keeps serving and the message says why: {rp}"
        );
        assert_eq!(rp["status"]["activeDigest"], v1.as_str(), "{case}");
    }
    // The old code still serves parents.
    world.create_stamp("still", 5).await;
    eventually(CONVERGE, "the stamp served by version 1", || async {
        let cm = get(&world.config_maps(), "still-stamp").await?;
        (cm["data"]["version"] == "1" && cm["data"]["value"] == "5").then_some(())
    })
    .await;
    world
        .apply_plugin(&world.stamp_plugin("stamp-v1", "lifecycle-v1"))
        .await;
    world.plugin_ready(STAMP_RP).await;
    world.uninstall(STAMP_RP).await;
}

fn condition_is(rp: &Value, type_: &str, status: &str, reason: &str) -> bool {
    has(rp, type_, status, reason)
}

#[tokio::test]
async fn a_plugin_that_does_not_load_should_not_stop_another() {
    let world = World::new("rp-isolate").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("no-reconciler", &plugin("runtime-not-a-reconciler"))
        .await;
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    world
        .plugin_config_map("stamp-as-webapp", &plugin("lifecycle-v1"))
        .await;
    let _host = world.host(&[], &[]).await;
    // Broken first: it must not hold up the good one.
    world
        .apply_plugin(&world.reconcile_plugin(
            STAMP_RP,
            STAMP,
            &digest_of(&plugin("runtime-not-a-reconciler")),
            world.config_map_source("no-reconciler"),
        ))
        .await;
    world
        .apply_plugin(&world.reconcile_plugin(
            WEBAPP_RP,
            WEBAPP,
            &digest_of(&plugin("webapp")),
            world.config_map_source("webapp"),
        ))
        .await;
    world.plugin_ready(WEBAPP_RP).await;
    world.create_webapp("shop", "nginx:1.27", 1).await;
    synced(&world.webapps(), "shop").await;
    let rp = world
        .plugin_status(STAMP_RP, "Compiled=False", |rp| {
            has(rp, "Compiled", "False", "NotAReconciler")
        })
        .await;
    assert!(
        has(&rp, "Ready", "False", "NotAReconciler"),
        "nothing serves: {rp}"
    );
    assert!(rp["status"]["activeDigest"].is_null(), "{rp}");

    // A component for another kind, with nothing serving: Ready names the mismatch.
    world.uninstall(WEBAPP_RP).await;
    world
        .apply_plugin(&world.reconcile_plugin(
            WEBAPP_RP,
            WEBAPP,
            &digest_of(&plugin("lifecycle-v1")),
            world.config_map_source("stamp-as-webapp"),
        ))
        .await;
    let rp = world
        .plugin_status(WEBAPP_RP, "Ready=False", |rp| {
            has(rp, "Ready", "False", "ParentMismatch")
        })
        .await;
    assert!(
        cond(&rp, "Ready")
            .2
            .contains("reconciles test.reconhost.dev/v1/Stamp"),
        "{rp}"
    );
    world.uninstall(WEBAPP_RP).await;
    world.uninstall(STAMP_RP).await;
}

#[tokio::test]
async fn a_second_plugin_for_a_kind_or_a_name_should_be_refused() {
    let world = World::new("rp-conflict").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("stamp-v1", &plugin("lifecycle-v1"))
        .await;
    world
        .plugin_config_map("twin", &plugin("lifecycle-twin"))
        .await;

    // The API server itself allows one ReconcilePlugin per parent kind: the name is the kind's.
    let mut second = world.stamp_plugin("stamp-v1", "lifecycle-v1");
    second["metadata"]["name"] = json!("stamp-again");
    let refused = reconcile_plugins(&world.client)
        .patch(
            "stamp-again",
            &PatchParams::apply("test"),
            &Patch::Apply(&second),
        )
        .await
        .expect_err("a second ReconcilePlugin for Stamp");
    assert!(
        refused
            .to_string()
            .contains("one ReconcilePlugin per parent kind"),
        "{refused}"
    );

    // Two plugins with one name would share a field manager and a finalizer.
    let _host = world.host(&[], &[]).await;
    world
        .apply_plugin(&world.stamp_plugin("stamp-v1", "lifecycle-v1"))
        .await;
    world.plugin_ready(STAMP_RP).await;
    let twin_rp = "twin.test.reconhost.dev";
    world
        .apply_plugin(&world.reconcile_plugin(
            twin_rp,
            ["test.reconhost.dev/v1", "Twin"],
            &digest_of(&plugin("lifecycle-twin")),
            world.config_map_source("twin"),
        ))
        .await;
    let rp = world
        .plugin_status(twin_rp, "Ready=False/Conflict", |rp| {
            has(rp, "Ready", "False", "Conflict")
        })
        .await;
    assert!(
        cond(&rp, "Ready").2.contains(STAMP_RP),
        "names the other: {rp}"
    );
    // Once the other goes, the refused one starts by itself.
    world.uninstall(STAMP_RP).await;
    world.plugin_ready(twin_rp).await;
    world.uninstall(twin_rp).await;
}

#[tokio::test]
async fn suspend_should_hold_reconciles_and_resume_should_work_off_what_queued() {
    let world = World::new("rp-suspend").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    let host = world.host(&[], &[]).await;
    let mut rp = world.reconcile_plugin(
        WEBAPP_RP,
        WEBAPP,
        &digest_of(&plugin("webapp")),
        world.config_map_source("webapp"),
    );
    world.apply_plugin(&rp).await;
    world.plugin_ready(WEBAPP_RP).await;
    world.create_webapp("shop", "nginx:1.27", 1).await;
    synced(&world.webapps(), "shop").await;

    rp["spec"]["suspend"] = json!(true);
    world.apply_plugin(&rp).await;
    world
        .plugin_status(WEBAPP_RP, "Ready=False/Suspended", |rp| {
            has(rp, "Ready", "False", "Suspended")
        })
        .await;
    let before = common::reconciles(&host, "webapp").await;
    world
        .webapps()
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scaling the WebApp");
    // The change queues and waits.
    eventually(CONVERGE, "the change to be queued", || async {
        let m = host.metrics().await.ok()?;
        let depth = sample(
            &m,
            "workqueue_depth",
            &[("controller", "webapp"), ("priority", "0")],
        )?;
        (depth >= 1.0).then_some(())
    })
    .await;
    assert_eq!(
        common::reconciles(&host, "webapp").await,
        before,
        "nothing reconciled"
    );
    let deployment = get(&world.deployments(), "shop")
        .await
        .expect("the Deployment");
    assert_eq!(
        deployment["spec"]["replicas"], 1,
        "not scaled while suspended"
    );

    rp["spec"]["suspend"] = json!(false);
    world.apply_plugin(&rp).await;
    world.plugin_ready(WEBAPP_RP).await;
    eventually(CONVERGE, "the Deployment scaled after resuming", || async {
        let d = get(&world.deployments(), "shop").await?;
        (d["spec"]["replicas"] == 4).then_some(())
    })
    .await;
    world.uninstall(WEBAPP_RP).await;
}

#[tokio::test]
async fn uninstall_should_leave_every_parent_deletable_and_children_with_their_owners() {
    let world = World::new("rp-uninstall").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("archiver", &plugin("archiver"))
        .await;
    let host = world.host(&[], &[]).await;
    let archive_rp = "archive.examples.reconhost.dev";
    let mut rp = world.reconcile_plugin(
        archive_rp,
        ["examples.reconhost.dev/v1alpha1", "Archive"],
        &digest_of(&plugin("archiver")),
        world.config_map_source("archiver"),
    );
    world.apply_plugin(&rp).await;
    world.plugin_ready(archive_rp).await;
    let archives = world.api("examples.reconhost.dev", "v1alpha1", "Archive", "archives");
    for name in ["kept", "leaving"] {
        world
            .create(
                &archives,
                json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "Archive",
                       "metadata": {"name": name}, "spec": {"data": {"k": "v"}}}),
            )
            .await;
    }
    for name in ["kept", "leaving"] {
        eventually(
            CONVERGE,
            &format!("{name} with the plugin's finalizer"),
            || async {
                let a = get(&archives, name).await?;
                let has = a["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.contains(&json!("reconhost.dev/archiver")));
                has.then_some(())
            },
        )
        .await;
    }
    synced(&archives, "kept").await;
    // Suspended, the plugin cannot finalize: a deleted parent waits on its finalizer.
    rp["spec"]["suspend"] = json!(true);
    world.apply_plugin(&rp).await;
    world
        .plugin_status(archive_rp, "suspended", |rp| {
            has(rp, "Ready", "False", "Suspended")
        })
        .await;
    archives
        .delete("leaving", &DeleteParams::default())
        .await
        .expect("deleting an Archive");
    let leaving = get(&archives, "leaving").await.expect("still there");
    assert!(leaving["metadata"]["deletionTimestamp"].is_string());

    world.uninstall(archive_rp).await;
    eventually(
        CONVERGE,
        "the watches nobody uses any more to stop",
        || async {
            let stopped: Vec<String> = host
                .logs()
                .iter()
                .filter(|l| l["message"] == "no plugin uses the kind any more; its watch stopped")
                .filter_map(|l| l["kind"].as_str().map(str::to_owned))
                .collect();
            (stopped.contains(&"Archive.examples.reconhost.dev".to_owned())
                && stopped.contains(&"ConfigMap".to_owned()))
            .then_some(())
        },
    )
    .await;
    eventually(CONVERGE, "the deleted parent to go", || async {
        get(&archives, "leaving").await.is_none().then_some(())
    })
    .await;
    let kept = get(&archives, "kept")
        .await
        .expect("the other parent stays");
    assert!(
        !kept["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("reconhost.dev/archiver"))),
        "released: {kept}"
    );
    let child = get(&world.config_maps(), "kept")
        .await
        .expect("its child stays");
    assert!(
        controlled_by(&child, &kept),
        "still owned by its parent: {child}"
    );
    archives
        .delete("kept", &DeleteParams::default())
        .await
        .expect("deleting the other Archive");
    eventually(CONVERGE, "the released parent to be deletable", || async {
        get(&archives, "kept").await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_crd_installed_after_its_plugin_should_start_it() {
    let world = World::new("rp-late").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("late", &plugin("lifecycle-late"))
        .await;
    let _host = world.host(&[], &[]).await;
    let late_rp = "late.late.test.reconhost.dev";
    world
        .apply_plugin(&world.reconcile_plugin(
            late_rp,
            ["late.test.reconhost.dev/v1", "Late"],
            &digest_of(&plugin("lifecycle-late")),
            world.config_map_source("late"),
        ))
        .await;
    let rp = world
        .plugin_status(late_rp, "waiting for its CRD", |rp| {
            has(rp, "Ready", "False", "ParentKindNotFound")
        })
        .await;
    assert!(
        cond(&rp, "Ready").2.contains("is its CRD installed?"),
        "{rp}"
    );
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/crds-late/late.yaml");
    reconhost_tests::crds::install(&world.client, &[crd])
        .await
        .expect("installing the Late CRD");
    world.plugin_ready(late_rp).await;
    let lates = world.api("late.test.reconhost.dev", "v1", "Late", "lates");
    world
        .create(
            &lates,
            json!({"apiVersion": "late.test.reconhost.dev/v1", "kind": "Late", "metadata": {"name": "x"}}),
        )
        .await;
    eventually(CONVERGE, "the Late's child", || async {
        get(&world.config_maps(), "x-late").await
    })
    .await;
    world.uninstall(late_rp).await;
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(world.client.clone());
    crds.delete("lates.late.test.reconhost.dev", &DeleteParams::default())
        .await
        .expect("removing the Late CRD");
}

#[tokio::test]
async fn config_and_limits_should_change_like_an_upgrade() {
    let world = World::new("rp-config").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("stamp-v1", &plugin("lifecycle-v1"))
        .await;
    let host = world.host(&[], &[]).await;
    let mut rp = world.stamp_plugin("stamp-v1", "lifecycle-v1");
    world.apply_plugin(&rp).await;
    world.plugin_ready(STAMP_RP).await;
    world.create_stamp("cfg", 1).await;
    eventually(CONVERGE, "served with no configuration", || async {
        let s = get(&world.stamps(), "cfg").await?;
        (s["status"]["config"] == json!({})).then_some(())
    })
    .await;
    rp["spec"]["config"] = json!({"tier": "gold"});
    rp["spec"]["limits"] =
        json!({"callTimeout": "1s", "memory": "32Mi", "concurrentReconciles": 2});
    world.apply_plugin(&rp).await;
    eventually(CONVERGE, "served with the new configuration", || async {
        let s = get(&world.stamps(), "cfg").await?;
        (s["status"]["config"] == json!({"tier": "gold"})).then_some(())
    })
    .await;
    let rp = world.plugin_ready(STAMP_RP).await;
    assert_eq!(
        rp["status"]["activeDigest"],
        digest_of(&plugin("lifecycle-v1")).as_str(),
        "same code"
    );
    let metrics = host.metrics().await.expect("metrics");
    assert_eq!(
        sample(
            &metrics,
            "controller_runtime_max_concurrent_reconciles",
            &[("controller", "stamp")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "reconhost_plugin_swaps_total",
            &[("result", "upgraded")]
        ),
        Some(1.0)
    );
    world.uninstall(STAMP_RP).await;
}

#[tokio::test]
async fn components_the_host_cannot_take_should_say_why() {
    let world = World::new("rp-refuse").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let garbage = std::env::temp_dir().join(format!("reconhost-{}-garbage.wasm", world.namespace));
    std::fs::write(&garbage, b"\0asm but not really a component").unwrap();
    world.plugin_config_map("garbage", &garbage).await;
    world
        .plugin_config_map("future", &plugin("runtime-future-contract"))
        .await;
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    // webapp.wasm is about 1 MB: over this host's limit.
    let _host = world
        .host_with(&[], &[], &["--max-plugin-bytes=65536"])
        .await;
    let cases = [
        (
            "garbage",
            &garbage,
            "Compiled",
            "CompileFailed",
            "compiling plugin",
        ),
        (
            "future",
            &plugin("runtime-future-contract"),
            "Compiled",
            "UnsupportedContract",
            "which this host does not implement",
        ),
        (
            "webapp",
            &plugin("webapp"),
            "Fetched",
            "TooLarge",
            "larger than 65536 bytes",
        ),
    ];
    for (cm, component, type_, reason, message) in cases {
        world
            .apply_plugin(&world.reconcile_plugin(
                STAMP_RP,
                STAMP,
                &digest_of(component),
                world.config_map_source(cm),
            ))
            .await;
        let rp = world
            .plugin_status(STAMP_RP, reason, |rp| has(rp, type_, "False", reason))
            .await;
        assert!(cond(&rp, type_).2.contains(message), "{cm}: {rp}");
        assert!(has(&rp, "Ready", "False", reason), "nothing serves: {rp}");
    }
    world.uninstall(STAMP_RP).await;
}

#[tokio::test]
async fn a_resync_period_should_reconcile_every_parent_again_until_it_is_turned_off() {
    let world = World::new("rp-resync").await;
    let _suite = exclusive(&world.client).await;
    let (host, mut rp) =
        stamp_installed(&world, |rp| rp["spec"]["resyncPeriod"] = json!("1s")).await;
    let values = stamps(&world, 2).await;
    served_by(&world, &values, "1").await;

    // Nothing changes, and both parents are reconciled again and again.
    let before = reconciles(&host, "stamp").await;
    eventually(CONVERGE, "two more rounds over both parents", || async {
        (reconciles(&host, "stamp").await >= before + 4.0).then_some(())
    })
    .await;

    // Turned off: the change swaps the revision (each parent once more), then nothing.
    rp["spec"]["resyncPeriod"] = json!("0s");
    world.apply_plugin(&rp).await;
    eventually(CONVERGE, "the new period to be in force", || async {
        let metrics = host.metrics().await.ok()?;
        let swaps = sample(
            &metrics,
            "reconhost_plugin_swaps_total",
            &[("result", "upgraded")],
        )?;
        (swaps >= 1.0).then_some(())
    })
    .await;
    drained(&host, "stamp").await;
    let quiet = reconciles(&host, "stamp").await;
    // Three periods of the old setting: it would have made at least four reconciles.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(reconciles(&host, "stamp").await, quiet);
    world.uninstall(STAMP_RP).await;
}

#[tokio::test]
async fn a_plugin_that_ignores_status_changes_should_be_woken_only_by_the_rest() {
    let world = World::new("rp-status-only").await;
    let _suite = exclusive(&world.client).await;
    let (host, _) = stamp_installed(&world, |rp| {
        rp["spec"]["ignoreParentStatusChanges"] = json!(true);
    })
    .await;
    let mut values = stamps(&world, 2).await;
    served_by(&world, &values, "1").await;

    // Someone else rewrites s000's status: a reconcile would put the plugin's back.
    world
        .stamps()
        .patch_status(
            "s000",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"servedBy": "someone"}})),
        )
        .await
        .expect("patching s000's status");
    // A spec change made after it, on s001, is served; once the queue is empty, the status
    // change (earlier on the same watch) has been seen, and did not wake s000.
    world
        .merge(&world.stamps(), "s001", json!({"spec": {"value": 5}}))
        .await;
    values.insert("s001".into(), 5);
    eventually(CONVERGE, "s001 served with its new value", || async {
        let s = get(&world.stamps(), "s001").await?;
        (s["status"]["value"] == 5).then_some(())
    })
    .await;
    drained(&host, "stamp").await;
    let s000 = get(&world.stamps(), "s000").await.expect("s000");
    assert_eq!(s000["status"]["servedBy"], "someone", "{s000}");

    // A label wakes it, like any change that is not its status alone.
    world
        .merge(
            &world.stamps(),
            "s000",
            json!({"metadata": {"labels": {"touched": "yes"}}}),
        )
        .await;
    served_by(&world, &values, "1").await;
    world.uninstall(STAMP_RP).await;
}

#[tokio::test]
async fn hosts_with_plugin_selectors_should_each_serve_only_their_tenants_plugins() {
    let world = World::new("rp-tenants").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("stamp-v1", &plugin("lifecycle-v1"))
        .await;
    let host_a = world
        .host_with(&[], &[], &["--plugin-selector=tenant=a"])
        .await;
    let host_b = world
        .host_with(&[], &[], &["--plugin-selector=tenant in (b)"])
        .await;
    let mut rp = world.stamp_plugin("stamp-v1", "lifecycle-v1");
    rp["metadata"]["labels"] = json!({"tenant": "a"});
    world.apply_plugin(&rp).await;
    world.plugin_ready(STAMP_RP).await;
    let mut values = stamps(&world, 1).await;
    served_by(&world, &values, "1").await;
    assert!(reconciles(&host_a, "stamp").await > 0.0);
    assert_eq!(reconciles(&host_b, "stamp").await, 0.0, "b serves no stamp");

    // Moved to tenant b: a stops without releasing anything, b takes over.
    rp["metadata"]["labels"] = json!({"tenant": "b"});
    world.apply_plugin(&rp).await;
    eventually(CONVERGE, "host a to stop serving stamps", || async {
        host_a
            .logs()
            .iter()
            .any(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("no longer matches --plugin-selector"))
            })
            .then_some(())
    })
    .await;
    eventually(CONVERGE, "host b to serve stamps", || async {
        (reconciles(&host_b, "stamp").await > 0.0).then_some(())
    })
    .await;
    let a_before = reconciles(&host_a, "stamp").await;
    world.create_stamp("s001", 3).await;
    values.insert("s001".into(), 3);
    served_by(&world, &values, "1").await;
    assert_eq!(
        reconciles(&host_a, "stamp").await,
        a_before,
        "a served a stamp after the move"
    );
    world.uninstall(STAMP_RP).await;
}

#[tokio::test]
async fn orphans_should_be_adopted_only_where_the_operator_consented() {
    let world = World::new("rp-adopt").await;
    let _suite = exclusive(&world.client).await;
    // Objects made by hand where the plugin will want its children, one labelled adoptable.
    for (name, labels) in [
        ("s000-stamp", json!({"adoptable": "yes"})),
        ("s001-stamp", json!({})),
    ] {
        world
            .create(
                &world.config_maps(),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "labels": labels},
                       "data": {"note": "made by hand"}}),
            )
            .await;
    }
    let _installed = stamp_installed(&world, |rp| {
        rp["spec"]["adoptOrphans"] = json!({"matchLabels": {"adoptable": "yes"}});
    })
    .await;
    stamps(&world, 2).await;

    let adopted_by = |child: &'static str, parent: &'static str| {
        let world = &world;
        async move {
            eventually(CONVERGE, &format!("{parent} to adopt {child}"), || async {
                let object = get(&world.config_maps(), child).await?;
                let owner = get(&world.stamps(), parent).await?;
                (controlled_by(&object, &owner) && object["data"]["version"] == "1")
                    .then_some(object)
            })
            .await
        }
    };
    // The labelled orphan is adopted: the parent controls it, the plugin's fields are in, the
    // hand-made field stays (another manager's), and the parent says so.
    let child = adopted_by("s000-stamp", "s000").await;
    assert_eq!(child["data"]["note"], "made by hand", "{child}");
    let events = world.events_for("s000").await;
    assert!(
        events.iter().any(|(type_, reason, note)| type_ == "Normal"
            && reason == "Adopted"
            && note.contains("ConfigMap")
            && note.contains("s000-stamp")),
        "{events:?}"
    );

    // The other is refused, named, and left as it was.
    let note = eventually(CONVERGE, "a ChildConflict on s001", || async {
        world
            .events_for("s001")
            .await
            .into_iter()
            .find(|(type_, reason, _)| type_ == "Warning" && reason == "ChildConflict")
            .map(|(_, _, note)| note)
    })
    .await;
    assert!(
        note.contains("s001-stamp") && note.contains("adoptOrphans"),
        "{note}"
    );
    let orphan = get(&world.config_maps(), "s001-stamp")
        .await
        .expect("s001-stamp");
    assert!(
        orphan["metadata"].get("ownerReferences").is_none(),
        "{orphan}"
    );
    assert_eq!(orphan["data"], json!({"note": "made by hand"}));

    // Its owner labels it adoptable: the retry takes it.
    world
        .merge(
            &world.config_maps(),
            "s001-stamp",
            json!({"metadata": {"labels": {"adoptable": "yes"}}}),
        )
        .await;
    adopted_by("s001-stamp", "s001").await;
    world.uninstall(STAMP_RP).await;
}
