//! How fast plugins arrive and change on the real control plane: the time from applying a
//! ReconcilePlugin to the first reconcile of a parent that was waiting for it (the compiled-code
//! cache cold, and warm), beside the static `--plugin` start of the same component; and an
//! upgrade under load (200 parents whose specs keep changing): from applying the new digest to
//! the new code serving, and to every parent reconciled by it. Run with `make bench-install`
//! (it starts its own control plane); the figures go to docs/BENCHMARKS.md.
//!
//! Environment: `INSTALL_ROUNDS` (default 3), `INSTALL_PARENTS` (default 200).

use reconhost_tests::bench::{env_or, until};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, Patch, PatchParams};
use reconhost_tests::world::plugins::{digest_of, reconcile_plugins};
use reconhost_tests::world::{World, get, plugin};
use serde_json::{Value, json};

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

async fn remove_plugins(world: &World) {
    let api = reconcile_plugins(&world.client);
    for rp in api.list(&Default::default()).await.unwrap().items {
        let name = rp.metadata.name.unwrap_or_default();
        let _ = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    until("no ReconcilePlugin", || async {
        api.list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}

/// Applying a ReconcilePlugin for a waiting WebApp until its Deployment exists, with the
/// compiled-code cache at `cache`.
async fn install(world: &World, cache: &str, parent: &str) -> Duration {
    let host = world.host(&[], &[("RECONHOST_CACHE", cache)]).await;
    world.create_webapp(parent, "nginx:1.27", 1).await;
    let rp = world.reconcile_plugin(
        "webapp.examples.reconhost.dev",
        ["examples.reconhost.dev/v1alpha1", "WebApp"],
        &digest_of(&plugin("webapp")),
        world.config_map_source("webapp"),
    );
    let start = Instant::now();
    world.apply_plugin(&rp).await;
    until("the first reconcile", || async {
        get(&world.deployments(), parent).await
    })
    .await;
    let elapsed = start.elapsed();
    drop(host);
    remove_plugins(world).await;
    elapsed
}

/// Starting `reconhost run --plugin webapp.wasm` until a waiting WebApp's Deployment exists.
async fn static_start(world: &World, parent: &str) -> Duration {
    world.create_webapp(parent, "nginx:1.27", 1).await;
    let start = Instant::now();
    let host = world.host(&["webapp"], &[]).await;
    until("the first reconcile", || async {
        get(&world.deployments(), parent).await
    })
    .await;
    let elapsed = start.elapsed();
    drop(host);
    elapsed
}

/// An upgrade from lifecycle-v1 to lifecycle-v2 while specs keep changing: (until the new code
/// serves, until every parent is reconciled by it).
async fn swap(world: &World, parents: usize) -> (Duration, Duration) {
    let stamps = world.api("test.reconhost.dev", "v1", "Stamp", "stamps");
    let host = world.host(&[], &[]).await;
    let rp = |cm: &str, component: &str| {
        world.reconcile_plugin(
            "stamp.test.reconhost.dev",
            ["test.reconhost.dev/v1", "Stamp"],
            &digest_of(&plugin(component)),
            world.config_map_source(cm),
        )
    };
    world.apply_plugin(&rp("stamp-v1", "lifecycle-v1")).await;
    let names: Vec<String> = (0..parents).map(|i| format!("s{i:04}")).collect();
    for name in &names {
        if get(&stamps, name).await.is_none() {
            world
                .create(
                    &stamps,
                    json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Stamp",
                           "metadata": {"name": name}, "spec": {"value": 0}}),
                )
                .await;
        }
    }
    let served = |version: &'static str| {
        let stamps = stamps.clone();
        async move {
            let list = stamps.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|s| s.data["status"]["servedBy"] == version)
                .then_some(())
        }
    };
    until("every parent on version 1", || served("1")).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stamps, stop, names) = (stamps.clone(), stop.clone(), names.clone());
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let patch = Patch::Merge(json!({"spec": {"value": n}}));
                let _ = stamps
                    .patch(&names[n * 7 % names.len()], &PatchParams::default(), &patch)
                    .await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v2 = digest_of(&plugin("lifecycle-v2"));
    let start = Instant::now();
    world.apply_plugin(&rp("stamp-v2", "lifecycle-v2")).await;
    let api = reconcile_plugins(&world.client);
    until("the new code serving", || async {
        let rp: Value = get(&api, "stamp.test.reconhost.dev").await?;
        (rp["status"]["activeDigest"] == v2.as_str()).then_some(())
    })
    .await;
    let serving = start.elapsed();
    until("every parent on version 2", || served("2")).await;
    let all = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    drop(host);
    remove_plugins(world).await;
    (serving, all)
}

#[tokio::main]
async fn main() {
    reconhost::install_crypto_provider();
    let rounds = env_or("INSTALL_ROUNDS", 3);
    let parents = env_or("INSTALL_PARENTS", 200);
    let world = World::new("bench-install").await;
    remove_plugins(&world).await;
    world.service_account("plugin").await;
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    world
        .plugin_config_map("stamp-v1", &plugin("lifecycle-v1"))
        .await;
    world
        .plugin_config_map("stamp-v2", &plugin("lifecycle-v2"))
        .await;
    let scratch = std::env::temp_dir().join(format!("reconhost-bench-{}", world.namespace));
    let mut results: HashMap<&str, Vec<Duration>> = HashMap::new();
    for round in 0..rounds {
        let cache = scratch.join(format!("cache-{round}"));
        let cache = cache.display().to_string();
        let cold = install(&world, &cache, &format!("cold-{round}")).await;
        let warm = install(&world, &cache, &format!("warm-{round}")).await;
        let fixed = static_start(&world, &format!("static-{round}")).await;
        let (serving, all) = swap(&world, parents).await;
        eprintln!(
            "round {round}: cold {} cached {} static {} swap {} all {}",
            ms(cold),
            ms(warm),
            ms(fixed),
            ms(serving),
            ms(all)
        );
        for (k, v) in [
            ("cold", cold),
            ("cached", warm),
            ("static", fixed),
            ("serving", serving),
            ("all", all),
        ] {
            results.entry(k).or_default().push(v);
        }
    }
    let m = |k: &str| ms(median(results[k].clone()));
    println!("| what | median of {rounds} |");
    println!("| --- | --- |");
    println!(
        "| ReconcilePlugin applied → first reconcile, compiled-code cache empty | {} |",
        m("cold")
    );
    println!(
        "| ReconcilePlugin applied → first reconcile, component in the cache | {} |",
        m("cached")
    );
    println!(
        "| `reconhost run --plugin` started → first reconcile (for comparison) | {} |",
        m("static")
    );
    println!(
        "| upgrade under load ({parents} parents) applied → new code serving | {} |",
        m("serving")
    );
    println!(
        "| upgrade under load applied → every parent reconciled by the new code | {} |",
        m("all")
    );
}
