//! The control loop with many parents: zero writes in steady state, dependency tracking that
//! wakes exactly the parent that read a changed object, and a restart halfway through.

use crate::common;

use std::time::Duration;

use common::{CONVERGE, World, condition, controlled_by, drained, get, reconciles};
use kube::api::{ListParams, Patch, PatchParams};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

/// Waits until `count` WebApps show Synced=True and each has its Deployment and Service.
async fn converged(world: &World, count: usize) {
    eventually(
        Duration::from_secs(180),
        &format!("{count} WebApps to converge"),
        || async {
            let lp = ListParams::default();
            let parents = world.webapps().list(&lp).await.ok()?;
            let synced = parents
                .items
                .iter()
                .filter(|p| {
                    let p = serde_json::to_value(p).unwrap();
                    condition(&p, "Synced").is_some_and(|c| c["status"] == "True")
                        && p["status"]["observedGeneration"] == p["metadata"]["generation"]
                })
                .count();
            let deployments = world.deployments().list(&lp).await.ok()?.items.len();
            let services = world.services().list(&lp).await.ok()?.items.len();
            (synced == count && deployments == count && services == count).then_some(())
        },
    )
    .await;
}

async fn create_webapps(world: &World, count: usize) {
    for i in 0..count {
        world
            .create_webapp(&format!("app-{i:04}"), "nginx:1.27", 1)
            .await;
    }
}

#[tokio::test]
async fn steady_state_with_hundreds_of_parents_should_make_no_writes() {
    const COUNT: usize = 200;
    let world = World::new("scale-steady").await;
    let host = world.host(&["webapp"], &[]).await;
    create_webapps(&world, COUNT).await;
    converged(&world, COUNT).await;

    let host_writes = |since| world.host_writes_since(since);
    let written = || world.writes();
    // Let the last no-op reconciles (after the final status writes) drain.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Left alone, nothing is reconciled, so nothing may be written: a status write that woke
    // its own parent would show here as a hot loop.
    let quiet = written();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = host_writes(quiet);
    assert!(during.is_empty(), "writes while left alone: {during:#?}");

    // Reconciles that find nothing to change must send nothing either. An annotation wakes
    // every parent without changing what it wants.
    let woken = written();
    let before = reconciles(&host, "webapp").await;
    for i in 0..COUNT {
        world
            .webapps()
            .patch(
                &format!("app-{i:04}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
            )
            .await
            .unwrap();
    }
    eventually(CONVERGE, "a reconcile of every touched parent", || async {
        (reconciles(&host, "webapp").await >= before + COUNT as f64).then_some(())
    })
    .await;
    drained(&host, "webapp").await;
    let after_touch = host_writes(woken);
    assert!(
        after_touch.is_empty(),
        "writes after touching every parent: {after_touch:#?}"
    );

    // So must a new host, whose first list reconciles every parent against children and
    // statuses written by its predecessor.
    host.stop(Duration::from_secs(10));
    let restarted = written();
    let host = world.host(&["webapp"], &[]).await;
    eventually(
        CONVERGE,
        "the new host to reconcile every parent",
        || async { (reconciles(&host, "webapp").await >= COUNT as f64).then_some(()) },
    )
    .await;
    drained(&host, "webapp").await;
    let after_restart = host_writes(restarted);
    assert!(
        after_restart.is_empty(),
        "writes by a restarted host: {after_restart:#?}"
    );
}

#[tokio::test]
async fn changed_config_map_should_re_reconcile_only_the_parent_that_read_it() {
    let world = World::new("scale-deps").await;
    let host = world
        .host(&["merged-config"], &[("RUST_LOG", "warn,reconhost=debug")])
        .await;
    let merged = world.api(
        "examples.reconhost.dev",
        "v1alpha1",
        "MergedConfig",
        "mergedconfigs",
    );
    for (name, value) in [("src-a", "1"), ("src-b", "2")] {
        world
            .create(
                &world.config_maps(),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                       "data": {name: value}}),
            )
            .await;
    }
    for (name, source) in [("a", "src-a"), ("b", "src-b")] {
        world
            .create(
                &merged,
                json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "MergedConfig",
                       "metadata": {"name": name}, "spec": {"sources": [source]}}),
            )
            .await;
    }
    for name in ["a", "b"] {
        eventually(CONVERGE, "both outputs", || async {
            let m = get(&merged, name).await?;
            (condition(&m, "Synced")?["status"] == "True").then_some(())
        })
        .await;
    }
    let reconciles_of = |name: &str| {
        let parent = format!("{}/{name}", world.namespace);
        host.logs()
            .iter()
            .filter(|l| {
                l["parent"] == parent.as_str()
                    && (l["message"] == "reconciled" || l["message"] == "up to date")
            })
            .count()
    };
    // Settled: no more reconciles of either.
    let mut settled = (reconciles_of("a"), reconciles_of("b"));
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = (reconciles_of("a"), reconciles_of("b"));
        if now == settled {
            break;
        }
        settled = now;
    }

    world
        .config_maps()
        .patch(
            "src-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"src-a": "changed"}})),
        )
        .await
        .unwrap();
    eventually(CONVERGE, "a's output to follow src-a", || async {
        let out = get(&world.config_maps(), "a").await?;
        (out["data"]["src-a"] == "changed").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        reconciles_of("a") > settled.0,
        "a read src-a and must be reconciled"
    );
    assert_eq!(
        reconciles_of("b"),
        settled.1,
        "b did not read src-a and must not be reconciled"
    );
    let b: Value = get(&world.config_maps(), "b").await.unwrap();
    assert_eq!(b["data"], json!({"src-b": "2"}));
}

#[tokio::test]
async fn host_restarted_halfway_should_converge_without_duplicate_children() {
    let world = World::new("scale-restart").await;
    const COUNT: usize = 100;
    create_webapps(&world, COUNT).await;
    // One worker, so the kill lands while most parents are still untouched.
    let first = world
        .host_with(&["webapp"], &[], &["--max-concurrent-reconciles=1"])
        .await;
    let partial = eventually(CONVERGE, "the first children", || async {
        let n = world
            .deployments()
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .len();
        (n >= 1).then_some(n)
    })
    .await;
    first.kill();
    assert!(
        partial < COUNT,
        "the host finished before it could be killed halfway"
    );

    let _second = world.host(&["webapp"], &[]).await;
    converged(&world, COUNT).await;
    let parents = world.webapps().list(&ListParams::default()).await.unwrap();
    let deployments = world
        .deployments()
        .list(&ListParams::default())
        .await
        .unwrap();
    for parent in &parents.items {
        let parent = serde_json::to_value(parent).unwrap();
        let owned = deployments
            .items
            .iter()
            .filter(|d| controlled_by(&serde_json::to_value(d).unwrap(), &parent))
            .count();
        assert_eq!(
            owned, 1,
            "{} owns {owned} Deployments",
            parent["metadata"]["name"]
        );
    }
}
