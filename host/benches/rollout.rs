//! What a progressive rollout costs and how fast it protects, on the real control plane with
//! `ROLLOUT_PARENTS` canaries (default 1000): the host's CPU per reconcile with and without a
//! shadow revision (a full pass over every parent, the plugin's output unchanged, so no writes),
//! and the time from a bad candidate's first step (10 %, a ten-minute window) to every parent
//! back on the stable revision. Run with `make bench-rollout` (it starts its own control
//! plane); the figures go to docs/BENCHMARKS.md.
//!
//! Environment: `ROLLOUT_ROUNDS` (default 3), `ROLLOUT_PARENTS` (default 1000).

#[allow(dead_code, reason = "the other cluster benchmarks use the rest")]
mod measure;

use reconhost_tests::bench::{env_or, until};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{DeleteParams, DynamicObject};
use reconhost_tests::host::Host;
use reconhost_tests::world::plugins::{digest_of, reconcile_plugins};
use reconhost_tests::world::{World, get, plugin, reconciles_any};
use serde_json::{Value, json};

const RP: &str = "canary.test.reconhost.dev";

/// The host process's CPU time so far (user and system).
fn cpu(host: &Host) -> Duration {
    measure::cpu_time(host.pid().expect("the host runs"))
}

async fn reconciles(host: &Host) -> f64 {
    reconciles_any(host, "canary").await
}

fn canary_plugin(world: &World, component: &str, steps: Value, config: Value) -> Value {
    let mut rp = world.reconcile_plugin(
        RP,
        ["test.reconhost.dev/v1", "Canary"],
        &digest_of(&plugin(component)),
        world.config_map_source(component),
    );
    rp["spec"]["rollout"] = json!({"strategy": "Progressive", "steps": steps});
    rp["spec"]["config"] = config;
    rp
}

async fn status(world: &World) -> Value {
    get(&reconcile_plugins(&world.client), RP)
        .await
        .map(|rp| rp["status"].clone())
        .unwrap_or(Value::Null)
}

/// A fresh ReconcilePlugin serving `rollout-v1` (a rollout's outcome is remembered in its
/// status, so each round starts from a new one), every parent served.
async fn fresh(world: &World, host: &Host, parents: usize) {
    let api = reconcile_plugins(&world.client);
    if get(&api, RP).await.is_some() {
        api.delete(RP, &DeleteParams::default()).await.unwrap();
        until("the ReconcilePlugin gone", || async {
            get(&api, RP).await.is_none().then_some(())
        })
        .await;
    }
    let before = reconciles(host).await;
    world
        .apply_plugin(&canary_plugin(
            world,
            "rollout-v1",
            json!([{"percent": 100}]),
            json!({}),
        ))
        .await;
    until("every parent served", || async {
        (reconciles(host).await >= before + parents as f64).then_some(())
    })
    .await;
}

/// Host CPU per reconcile over a full pass that `start` sets off, counting passes with `count`.
async fn per_reconcile<S, C, Fut>(host: &Host, parents: usize, start: S, count: C) -> f64
where
    S: Future<Output = ()>,
    C: Fn() -> Fut,
    Fut: Future<Output = f64>,
{
    start.await;
    // Measured from the first reconcile seen to the last, so loading a revision is left out.
    let first = until("the pass begins", || async {
        let n = count().await;
        (n >= 1.0).then_some(n)
    })
    .await;
    let cpu0 = cpu(host);
    let last = until("the pass ends", || async {
        let n = count().await;
        (n >= parents as f64).then_some(n)
    })
    .await;
    (cpu(host) - cpu0).as_secs_f64() / (last - first)
}

#[tokio::main]
async fn main() {
    reconhost::install_crypto_provider();
    let rounds = env_or("ROLLOUT_ROUNDS", 3);
    let parents = env_or("ROLLOUT_PARENTS", 1000);
    let world = World::new("bench-rollout").await;
    world.service_account("plugin").await;
    for component in ["rollout-v1", "rollout-good", "rollout-fails"] {
        world.plugin_config_map(component, &plugin(component)).await;
    }
    let host = world.host(&[], &[]).await;
    let canaries = world.api("test.reconhost.dev", "v1", "Canary", "canaries");
    futures::stream::iter(0..parents)
        .for_each_concurrent(16, |i| {
            let api = canaries.clone();
            async move {
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "test.reconhost.dev/v1", "kind": "Canary",
                    "metadata": {"name": format!("c{i:05}")}, "spec": {"value": i}}))
                .unwrap();
                let _ = api.create(&Default::default(), &object).await;
            }
        })
        .await;
    let (mut plain, mut shadowed, mut from_step, mut from_apply) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        fresh(&world, &host, parents).await;
        // Without shadow: a config change swaps the revision, and every parent is reconciled.
        let base = reconciles(&host).await;
        let config = json!({"round": round});
        let plain_rp = canary_plugin(
            &world,
            "rollout-v1",
            json!([{"percent": 100}]),
            config.clone(),
        );
        let apply = world.apply_plugin(&plain_rp);
        let plain_cpu = per_reconcile(&host, parents, apply, || async {
            reconciles(&host).await - base
        })
        .await;
        // With shadow: the good candidate is called beside stable on every parent.
        let shadow_rp = canary_plugin(
            &world,
            "rollout-good",
            json!([{"shadow": true, "analysis": "10m"}]),
            config.clone(),
        );
        let apply = world.apply_plugin(&shadow_rp);
        let shadow_cpu = per_reconcile(&host, parents, apply, || async {
            status(&world).await["rollout"]["shadow"]["compared"]
                .as_f64()
                .unwrap_or(0.0)
        })
        .await;
        // A bad candidate at its first step.
        fresh(&world, &host, parents).await;
        let applied = Instant::now();
        world
            .apply_plugin(&canary_plugin(
                &world,
                "rollout-fails",
                json!([{"percent": 10, "analysis": "10m"}, {"percent": 100}]),
                json!({}),
            ))
            .await;
        let fails = digest_of(&plugin("rollout-fails"));
        let stepped = until("the first step", || async {
            let s = status(&world).await;
            (s["rollout"]["candidate"] == fails.as_str()).then(Instant::now)
        })
        .await;
        until("rolled back", || async {
            (status(&world).await["rollout"]["phase"] == "RolledBack").then_some(())
        })
        .await;
        let back = Instant::now();
        eprintln!(
            "round {round}: cpu/reconcile {:.0} µs plain, {:.0} µs with shadow; rollback {:.2} s after the step, {:.2} s after the apply",
            plain_cpu * 1e6,
            shadow_cpu * 1e6,
            (back - stepped).as_secs_f64(),
            (back - applied).as_secs_f64()
        );
        plain.push(plain_cpu);
        shadowed.push(shadow_cpu);
        from_step.push((back - stepped).as_secs_f64());
        from_apply.push((back - applied).as_secs_f64());
    }
    let (p, s) = (measure::median(plain), measure::median(shadowed));
    println!("| what ({parents} parents) | median of {rounds} |");
    println!("| --- | --- |");
    println!(
        "| host CPU per reconcile, one revision | {:.0} µs |",
        p * 1e6
    );
    println!(
        "| host CPU per reconcile, with a shadow revision | {:.0} µs ({:.2}×) |",
        s * 1e6,
        s / p
    );
    println!(
        "| bad candidate: first step seen → every parent back on stable | {:.2} s |",
        measure::median(from_step)
    );
    println!(
        "| bad candidate: applied → every parent back on stable | {:.2} s |",
        measure::median(from_apply)
    );
}
