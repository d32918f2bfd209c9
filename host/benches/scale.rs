//! Scale: 10,000 `webapp` parents on the real control plane, one host. Measured: the time to
//! converge and the host's CPU per 1,000 reconciles while it does; a restarted host's start and
//! first pass over everything at steady state (zero writes expected); its memory per cached
//! object against the objects' JSON size; a periodic full resync (CPU, zero writes); and, on
//! the idle host, the latency from a spec change to the changed child, p50 and p99. Run with
//! `make bench-scale` (it starts its own control plane); the figures go to docs/BENCHMARKS.md.
//!
//! Environment: `SCALE_PARENTS` (default 10000), `SCALE_SYNC_SECS` (the restarted host's
//! `--sync-period`, default 120: long enough for its first pass to end first),
//! `SCALE_LATENCY_SAMPLES` (default 200), `SCALE_HEAP_HOST` (a build of the host with
//! `--features heap-profile`: the restart is made once more with it, and where the live bytes
//! were allocated is printed; `make bench-heap` sets it), `SCALE_BEFORE_HOST` (another build of
//! the host, an earlier commit's: it is started with no parent before the first host, and
//! restarted on the converged namespace at the end, and its memory per cached object is printed
//! beside this build's, from the same run).

#[path = "measure/heap.rs"]
mod heap;
#[path = "measure/mod.rs"]
#[allow(dead_code, reason = "the fleet benchmark uses the rest")]
mod measure;

use reconhost_tests::bench::env_or;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use measure::ProcessSample;
use reconhost_tests::host::{Host, sample};
use reconhost_tests::world::World;
use serde_json::{Value, json};
use std::path::Path;

async fn reconciles(host: &Host) -> f64 {
    sample(
        &host.metrics().await.unwrap(),
        "controller_runtime_reconcile_total",
        &[("controller", "webapp"), ("result", "success")],
    )
    .unwrap_or(0.0)
}

/// The most memory per cached object, over its JSON without `managedFields`, issue 28 allows.
const MEMORY_TARGET: f64 = 1.5;

/// Waits until the host has made `target` successful reconciles, sampling every 500 ms; returns
/// when it got there and the host's CPU time then.
async fn reconciled(host: &Host, pid: u32, port: u16, target: f64) -> (Instant, Duration) {
    let start = Instant::now();
    loop {
        if reconciles(host).await >= target {
            return (Instant::now(), ProcessSample::take(&[pid], port).cpu);
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "fewer than {target} reconciles after 30 min"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The objects the host caches (parents and both kinds of children), and their JSON size as
/// the API server lists them and without `managedFields` (what the host keeps of most).
async fn cached_objects(world: &World) -> (usize, usize, usize) {
    let lp = ListParams::default();
    let mut objects = Vec::new();
    for api in [world.webapps(), world.deployments(), world.services()] {
        objects.extend(api.list(&lp).await.unwrap().items);
    }
    let mut full = 0;
    let mut lean = 0;
    for object in &objects {
        let mut value = serde_json::to_value(object).unwrap();
        full += value.to_string().len();
        if let Some(meta) = value["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        lean += value.to_string().len();
    }
    (objects.len(), full, lean)
}

/// The RSS of `binary`, another build of the host, as just started with no parent.
async fn started_empty(world: &World, binary: &Path, port: u16) -> ProcessSample {
    let host = world.host_of(binary, &["webapp"], &[], &[]).await;
    let sample = ProcessSample::take(&[host.pid().expect("running")], port);
    host.stop(Duration::from_secs(10));
    sample
}

/// The RSS of `binary`, another build of the host, restarted on the converged namespace and
/// sampled at steady state as this build's restarted host is.
async fn restarted_steady(world: &World, binary: &Path, port: u16, n: f64) -> ProcessSample {
    let host = world.host_of(binary, &["webapp"], &[], &[]).await;
    let pid = host.pid().expect("running");
    reconciled(&host, pid, port, n).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let sample = ProcessSample::take(&[pid], port);
    host.stop(Duration::from_secs(10));
    sample
}

/// Starts the heap-profiled host `binary` on the converged namespace, lets it reconcile every
/// parent once, then has it write its profile (SIGUSR1) and reads it.
async fn heap_profile(world: &World, binary: &Path, port: u16, n: f64) -> heap::Profile {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("dhat-heap.json");
    let path = file.to_str().expect("a UTF-8 path");
    let host = world
        .host_of(
            binary,
            &["webapp"],
            &[("RECONHOST_HEAP_PROFILE", path)],
            &[],
        )
        .await;
    let pid = host.pid().expect("running");
    reconciled(&host, pid, port, n).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // SAFETY: a plain system call on our own running child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR1) };
    let start = Instant::now();
    let profile = loop {
        if let Some(profile) = heap::Profile::read(&file) {
            break profile;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "no heap profile at {path} 10 min after SIGUSR1: was {binary:?} built with \
             --features heap-profile?"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    host.stop(Duration::from_secs(10));
    profile
}

/// The heap profile's table: the largest sites, then the rest, each per cached object too.
fn print_heap(profile: &heap::Profile, objects: usize, rss_per_object: f64) {
    let per = |bytes: u64| bytes as f64 / objects.max(1) as f64;
    println!(
        "\nheap of a restarted host at steady state (dhat): {} bytes live in {} blocks, {:.0} \
         bytes per cached object (RSS grew {rss_per_object:.0} per object); by the host's \
         innermost frame on the allocating stack:\n",
        profile.total.bytes,
        profile.total.blocks,
        per(profile.total.bytes)
    );
    println!("| allocated in | live bytes | blocks | bytes per cached object |");
    println!("|---|---|---|---|");
    const SHOWN: usize = 30;
    for (site, live) in profile.by_site.iter().take(SHOWN) {
        println!(
            "| `{site}` | {} | {} | {:.1} |",
            live.bytes,
            live.blocks,
            per(live.bytes)
        );
    }
    let rest = profile
        .by_site
        .iter()
        .skip(SHOWN)
        .fold((0, 0), |(b, k), (_, l)| (b + l.bytes, k + l.blocks));
    println!(
        "| {} other sites | {} | {} | {:.1} |",
        profile.by_site.len().saturating_sub(SHOWN),
        rest.0,
        rest.1,
        per(rest.0)
    );
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let parents = env_or("SCALE_PARENTS", 10_000);
    let sync = env_or("SCALE_SYNC_SECS", 120);
    let samples = env_or("SCALE_LATENCY_SAMPLES", 200);
    let world = World::new("scale").await;
    let port = measure::api_server_port(world.cluster.kubeconfig());
    let n = parents as f64;

    // 0. The earlier build's RSS with no parent, the same moment of its life as the first host's.
    let before_host = std::env::var_os("SCALE_BEFORE_HOST").map(std::path::PathBuf::from);
    let before_empty = match &before_host {
        Some(binary) => Some(started_empty(&world, binary, port).await),
        None => None,
    };

    // 1. Convergence from nothing.
    let host = world.host_with(&["webapp"], &[], &[]).await;
    let pid = host.pid().expect("running");
    let empty = ProcessSample::take(&[pid], port);
    let mark = world.writes();
    let start = Instant::now();
    futures::stream::iter(0..parents)
        .map(|i| {
            let world = &world;
            async move {
                world
                    .create_webapp(&format!("app-{i:05}"), "nginx:1.27", 1)
                    .await
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<Value>>()
        .await;
    let created = start.elapsed();
    loop {
        let (observed, deployments, services) = world.webapps_converged().await;
        if observed == parents && deployments == parents && services == parents {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "no convergence in 30 min ({observed} observed, {deployments} Deployments, \
             {services} Services)"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let converge = start.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let busy = ProcessSample::take(&[pid], port);
    let converge_reconciles = reconciles(&host).await;
    let converge_writes = world.host_writes_since(mark).len();
    host.stop(Duration::from_secs(10));

    // 2. A host started on the converged namespace, with a short resync period.
    let start = Instant::now();
    let host = world
        .host_with(&["webapp"], &[], &[&format!("--sync-period={sync}s")])
        .await;
    let ready = start.elapsed();
    let pid = host.pid().expect("running");
    let mark = world.writes();
    let cpu_start = ProcessSample::take(&[pid], port).cpu;
    let (first_pass_done, cpu_first) = reconciled(&host, pid, port, n).await;
    let first_pass = first_pass_done - start;
    let first_pass_writes = world.host_writes_since(mark);
    assert!(
        first_pass < Duration::from_secs(sync as u64),
        "the first pass took {first_pass:?}, longer than the resync period of {sync} s: raise \
         SCALE_SYNC_SECS"
    );
    // Long enough for the host's trim after a burst (2 s without a reconcile, read every 2 s).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let steady = ProcessSample::take(&[pid], port);
    measure::print_largest_mappings(pid);
    let (objects, json_full, json_lean) = cached_objects(&world).await;

    // 3. The periodic resync: every parent again, nothing to write.
    let base = reconciles(&host).await;
    let mark = world.writes();
    let (mut before, mut cpu_before) = (Instant::now(), ProcessSample::take(&[pid], port).cpu);
    loop {
        let now = reconciles(&host).await;
        if now > base {
            break;
        }
        before = Instant::now();
        cpu_before = ProcessSample::take(&[pid], port).cpu;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (resync_done, cpu_resync) = reconciled(&host, pid, port, base + n).await;
    let resync = resync_done - before;
    let resync_cpu = cpu_resync - cpu_before;
    let resync_writes = world.host_writes_since(mark);

    // 4. Latency on the idle host: a spec change until a watch sees the changed Deployment.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let deployments = world.deployments();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(deployments, watcher::Config::default()));
        while let Ok(Some(event)) = events.try_next().await {
            if let watcher::Event::Apply(d) = event {
                let d = serde_json::to_value(&d).unwrap();
                if d["spec"]["replicas"] == 2 {
                    let name = d["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    let _ = tx.send((name, Instant::now()));
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples.min(parents) {
        let name = format!("app-{i:05}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let start = Instant::now();
        world
            .webapps()
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 2}})),
            )
            .await
            .unwrap();
        loop {
            let (seen, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .expect("the Deployment changed within 30 s")
                .expect("the watch");
            if seen == name {
                latencies.push(at - start);
                break;
            }
        }
    }
    latencies.sort();
    host.stop(Duration::from_secs(10));

    // 5. Where the bytes are (`make bench-heap`): the restart again, with a heap-profiled build.
    let heap = match std::env::var_os("SCALE_HEAP_HOST") {
        Some(binary) => Some(heap_profile(&world, Path::new(&binary), port, n).await),
        None => None,
    };

    // 6. The earlier build restarted on the same converged namespace.
    let before_steady = match &before_host {
        Some(binary) => Some(restarted_steady(&world, binary, port, n).await),
        None => None,
    };

    let cpu_per_1000 =
        |cpu: Duration, reconciles: f64| cpu.as_secs_f64() / reconciles.max(1.0) * 1000.0;
    let per_object = (steady.rss - empty.rss) * 1024.0 * 1024.0 / objects as f64;
    println!("| {parents} parents | |");
    println!("|---|---|");
    println!("| created (8 at a time) | {:.1} s |", created.as_secs_f64());
    println!(
        "| converged, from the first create | {:.1} s ({:.0} parents/s) |",
        converge.as_secs_f64(),
        n / converge.as_secs_f64()
    );
    println!(
        "| reconciles while converging | {converge_reconciles} ({:.2} per parent) |",
        converge_reconciles / n
    );
    println!(
        "| host writes while converging | {converge_writes} ({:.2} per parent) |",
        converge_writes as f64 / n
    );
    println!(
        "| host CPU per 1,000 reconciles while converging (writes included) | {:.2} s |",
        cpu_per_1000(busy.cpu - empty.cpu, converge_reconciles)
    );
    println!(
        "| restarted host: start until ready (caches listed) | {:.1} s |",
        ready.as_secs_f64()
    );
    println!(
        "| restarted host: every parent reconciled once, from the start | {:.1} s, {} writes |",
        first_pass.as_secs_f64(),
        first_pass_writes.len()
    );
    println!(
        "| host CPU per 1,000 reconciles at steady state (first pass) | {:.2} s |",
        cpu_per_1000(cpu_first - cpu_start, n)
    );
    println!(
        "| periodic resync of all parents | {:.1} s, {:.2} s CPU ({:.2} s per 1,000), {} writes |",
        resync.as_secs_f64(),
        resync_cpu.as_secs_f64(),
        cpu_per_1000(resync_cpu, n),
        resync_writes.len()
    );
    println!(
        "| host RSS: no parents / steady with all cached / peak | {:.1} / {:.1} / {:.1} MiB |",
        empty.rss, steady.rss, steady.peak
    );
    println!("| objects cached (parents, Deployments, Services) | {objects} |");
    println!(
        "| JSON per object as listed / without managedFields | {} / {} bytes |",
        json_full / objects.max(1),
        json_lean / objects.max(1)
    );
    let ratio = per_object / (json_lean as f64 / objects.max(1) as f64);
    println!(
        "| host memory per cached object (RSS growth / objects) | {per_object:.0} bytes ({ratio:.2}× the JSON without managedFields) |"
    );
    println!(
        "| target: ≤ {MEMORY_TARGET}× the JSON (issue 28) | {} |",
        if ratio <= MEMORY_TARGET {
            "met".to_owned()
        } else {
            format!("missed by {:.2}×", ratio / MEMORY_TARGET)
        }
    );
    println!(
        "| spec change to changed Deployment seen, idle host ({} samples) | p50 {:.1} ms, p99 {:.1} ms |",
        latencies.len(),
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99))
    );
    if let (Some(binary), Some(old_empty), Some(old_steady)) =
        (&before_host, before_empty, before_steady)
    {
        let before = (old_steady.rss - old_empty.rss) * 1024.0 * 1024.0 / objects as f64;
        println!(
            "\nthe same run, this build beside SCALE_BEFORE_HOST ({}):\n",
            binary.display()
        );
        println!("| {objects} objects cached | this build | the earlier build |");
        println!("|---|---|---|");
        println!(
            "| host RSS: no parents / steady with all cached | {:.1} / {:.1} MiB | {:.1} / {:.1} MiB |",
            empty.rss, steady.rss, old_empty.rss, old_steady.rss
        );
        println!(
            "| host memory per cached object | {per_object:.0} bytes ({ratio:.2}×) | {before:.0} bytes ({:.2}×) |",
            before / (json_lean as f64 / objects.max(1) as f64)
        );
    }
    if let Some(profile) = heap {
        print_heap(&profile, objects, per_object);
    }
    if !first_pass_writes.is_empty() || !resync_writes.is_empty() {
        println!("\nwrites at steady state (expected none):");
        for w in first_pass_writes.iter().chain(&resync_writes).take(20) {
            println!("- {w}");
        }
    }
}
