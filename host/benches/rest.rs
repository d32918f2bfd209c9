//! What a host costs at rest: `REST_PARENTS` webapp parents (default 3000) served through a
//! ReconcilePlugin, as an installed host serves them, converged and left alone. The figure is
//! the host process's CPU time (user + system, /proc/<pid>/stat, all its threads) over a quiet
//! window of `REST_WINDOW` seconds (default 60), in milliseconds per minute, with the
//! reconciles and the ReconcilePlugin status writes made meanwhile (none expected), median of
//! `REST_ROUNDS` rounds (default 3). Run with `make bench-rest` (it starts its own control
//! plane); the figures go to docs/BENCHMARKS.md.
//!
//! `REST_BASELINE=<path of another build's reconhost>` runs that build too, one host at a time
//! (two hosts would both lead the ReconcilePlugin's lifecycle), the order turned each round:
//! before and after in one run. At rest the work does not drift with the machine's load the
//! way a throughput does, so hosts one after another compare well enough.
//!
//! A host restarted on converged parents reconciles each once (its first list), finds nothing
//! to do, and then rests; the window starts 20 s (two counts of its parents' standing, every
//! 10 s) after its reconciles have stood still for 5 s and its ReconcilePlugin's
//! `status.parents` counts every parent synced.

#[allow(dead_code, reason = "the other cluster benchmarks use the rest")]
mod measure;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use reconhost_tests::bench::{env_or, until};
use reconhost_tests::host::Host;
use reconhost_tests::world::plugins::{digest_of, reconcile_plugins};
use reconhost_tests::world::{World, get, plugin, reconciles_any};
use serde_json::Value;

/// The ReconcilePlugin the hosts serve.
const PLUGIN: &str = "webapp.examples.reconhost.dev";

/// Its controller, as the metrics name it: the plugin's own name.
const CONTROLLER: &str = "webapp";

async fn reconciles(host: &Host) -> f64 {
    reconciles_any(host, CONTROLLER).await
}

/// The ReconcilePlugin's `status.parents` and its resourceVersion.
async fn plugin_status(world: &World) -> (Value, String) {
    let rp: Value = get(&reconcile_plugins(&world.client), PLUGIN)
        .await
        .expect("the ReconcilePlugin");
    let version = rp["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (rp["status"]["parents"].clone(), version)
}

/// One host's figures at rest.
struct Rest {
    /// CPU milliseconds per minute over the window.
    cpu_per_minute: f64,
    reconciles: f64,
    /// Reconciles of the ReconcilePlugin (the lifecycle's).
    lifecycle: f64,
    /// Whether the ReconcilePlugin was written during the window.
    plugin_written: bool,
}

/// Starts a host (`binary`, or this build's), waits until it rests, and measures the window.
async fn measure(world: &World, binary: Option<&PathBuf>, parents: usize, window: u64) -> Rest {
    let host = match binary {
        Some(binary) => world.host_of(binary, &[], &[], &[]).await,
        None => world.host(&[], &[]).await,
    };
    let pid = host.pid().expect("a running host");
    // Its first list: every parent reconciled once, then nothing for 5 s.
    let mut last = (reconciles(&host).await, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = reconciles(&host).await;
        if now != last.0 {
            last = (now, Instant::now());
        } else if now >= parents as f64 && last.1.elapsed() >= Duration::from_secs(5) {
            break;
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(600),
            "stuck at {now} reconciles"
        );
    }
    until(
        "the ReconcilePlugin counting every parent synced",
        || async {
            let (counts, _) = plugin_status(world).await;
            (counts["served"] == parents && counts["synced"] == parents).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (before, version) = (reconciles(&host).await, plugin_status(world).await.1);
    let lifecycle = reconciles_any(&host, "reconcileplugin").await;
    let cpu = measure::cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(window)).await;
    let used = measure::cpu_time(pid) - cpu;
    let rest = Rest {
        cpu_per_minute: used.as_secs_f64() * 1000.0 * 60.0 / window as f64,
        reconciles: reconciles(&host).await - before,
        lifecycle: reconciles_any(&host, "reconcileplugin").await - lifecycle,
        plugin_written: plugin_status(world).await.1 != version,
    };
    host.stop(Duration::from_secs(10));
    rest
}

#[tokio::main]
async fn main() {
    reconhost::install_crypto_provider();
    let parents: usize = env_or("REST_PARENTS", 3000);
    let rounds: usize = env_or("REST_ROUNDS", 3);
    let window = env_or("REST_WINDOW", 60) as u64;
    let baseline = std::env::var_os("REST_BASELINE").map(PathBuf::from);
    let world = World::new("bench-rest").await;
    world.service_account("plugin").await;
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    let rp = world.reconcile_plugin(
        PLUGIN,
        ["examples.reconhost.dev/v1alpha1", "WebApp"],
        &digest_of(&plugin("webapp")),
        world.config_map_source("webapp"),
    );
    world.apply_plugin(&rp).await;
    futures::stream::iter(0..parents)
        .for_each_concurrent(16, |i| {
            let world = &world;
            async move {
                world
                    .create_webapp(&format!("p{i:05}"), "nginx:1.28", 0)
                    .await;
            }
        })
        .await;
    let builds: Vec<(&str, Option<&PathBuf>)> = std::iter::once(("this build", None))
        .chain(baseline.as_ref().map(|b| ("baseline", Some(b))))
        .collect();
    let mut figures: Vec<Vec<Rest>> = builds.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..builds.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for b in order {
            let rest = measure(&world, builds[b].1, parents, window).await;
            eprintln!(
                "round {round} {:<10} cpu {:7.1} ms/min  reconciles {} (ReconcilePlugin {})  plugin written: {}",
                builds[b].0,
                rest.cpu_per_minute,
                rest.reconciles,
                rest.lifecycle,
                rest.plugin_written
            );
            figures[b].push(rest);
        }
    }
    println!(
        "| {parents} parents at rest, {window} s windows | CPU per minute (median) | rounds | reconciles (parents, ReconcilePlugin) | ReconcilePlugin written |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for ((name, _), rests) in builds.iter().zip(&figures) {
        let cpu: Vec<f64> = rests.iter().map(|r| r.cpu_per_minute).collect();
        let each: Vec<String> = cpu.iter().map(|c| format!("{c:.1}")).collect();
        println!(
            "| {name} | {:.1} ms | {} ms | {}, {} | {} |",
            measure::median(cpu.clone()),
            each.join(", "),
            rests.iter().map(|r| r.reconciles).sum::<f64>(),
            rests.iter().map(|r| r.lifecycle).sum::<f64>(),
            rests.iter().filter(|r| r.plugin_written).count(),
        );
    }
}
