//! 1000 `webapp` parents on the real control plane: how long until every one has its children
//! and status, how many API writes that took, and the host's memory. Run with `make bench-converge`
//! (it starts its own control plane); the figures go to docs/BENCHMARKS.md.
//!
//! Environment: `CONVERGE_PARENTS` (default 1000), `CONVERGE_WORKERS` (default 4, the host's
//! `--max-concurrent-reconciles`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::World;
use kube::api::ListParams;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Peak and current resident memory of a process, in MiB, from /proc.
fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

async fn count_synced(world: &World) -> (usize, usize, usize) {
    let lp = ListParams::default();
    let parents = world.webapps().list(&lp).await.unwrap();
    let synced = parents
        .items
        .iter()
        .filter(|p| {
            let p = serde_json::to_value(p).unwrap();
            common::condition(&p, "Synced").is_some_and(|c| c["status"] == "True")
        })
        .count();
    let deployments = world.deployments().list(&lp).await.unwrap().items.len();
    let services = world.services().list(&lp).await.unwrap().items.len();
    (synced, deployments, services)
}

#[tokio::main]
async fn main() {
    let parents = env_or("CONVERGE_PARENTS", 1000);
    let workers = env_or("CONVERGE_WORKERS", 4);
    let world = World::new("bench-converge").await;
    let host = world
        .host_with(
            &["webapp"],
            &[],
            &[&format!("--max-concurrent-reconciles={workers}")],
        )
        .await;
    let pid = host.pid().expect("the host runs");
    let (_, idle_rss) = memory_mib(pid);
    let audit = world.cluster.audit_log();
    let writes_before = audit.events_in(&world.namespace).unwrap().len();

    let start = Instant::now();
    for i in 0..parents {
        world
            .create_webapp(&format!("app-{i:04}"), "nginx:1.27", 1)
            .await;
    }
    let created = start.elapsed();
    loop {
        let (synced, deployments, services) = count_synced(&world).await;
        if synced == parents && deployments == parents && services == parents {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "no convergence in 15 min"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converged = start.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = audit.events_in(&world.namespace).unwrap();
    let writes: Vec<_> = events.iter().skip(writes_before).collect();
    let by_host = writes
        .iter()
        .filter(|e| !(e.verb == "create" && e.request_uri.contains("/webapps")))
        .count();
    let (peak, rss) = memory_mib(pid);
    let metrics = host.metrics().await.unwrap();
    let reconciles = reconhost_tests::host::sample(
        &metrics,
        "controller_runtime_reconcile_total",
        &[("controller", "webapp"), ("result", "success")],
    )
    .unwrap_or(0.0);
    println!("parents                    {parents}");
    println!("workers per plugin         {workers}");
    println!("created all parents in     {:.1} s", created.as_secs_f64());
    println!(
        "all converged after        {:.1} s (from the first create)",
        converged.as_secs_f64()
    );
    println!("reconciles                 {reconciles}");
    println!(
        "API writes by the host     {by_host} ({:.2} per parent)",
        by_host as f64 / parents as f64
    );
    println!("host RSS idle / after      {idle_rss:.1} MiB / {rss:.1} MiB (peak {peak:.1} MiB)");
    host.stop(Duration::from_secs(10));
}
