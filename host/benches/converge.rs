//! 1000 `webapp` parents on the real control plane, reconciled by the host and, side by side in
//! the same run, by the same logic as a conventional kube-runtime operator (the baseline, in
//! converge/native.rs): how long until every parent has its children and status, how many API
//! writes that took, and each process's memory. Run with `make bench-converge` (it starts its
//! own control plane); the figures go to docs/BENCHMARKS.md.
//!
//! Each variant gets a namespace of its own on the one control plane; rounds alternate which
//! variant goes first, so neither always meets the fresher API server.
//!
//! Environment: `CONVERGE_PARENTS` (default 1000), `CONVERGE_WORKERS` (default 4, the host's
//! `--max-concurrent-reconciles` and the operator's concurrency), `CONVERGE_ROUNDS` (default 2).

#[path = "measure/mod.rs"]
#[allow(dead_code, reason = "the fleet benchmark uses the rest")]
mod measure;
#[path = "converge/native.rs"]
mod native;

use reconhost_tests::bench::env_or;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reconhost_tests::process::Component;
use reconhost_tests::world::World;

/// The two ways of running the same reconcile logic.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    Host,
    Operator,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Host => "reconhost + webapp.wasm",
            Variant::Operator => "kube-runtime operator",
        }
    }
}

/// What one run measured.
struct Figures {
    variant: Variant,
    create: Duration,
    converge: Duration,
    reconciles: f64,
    writes: usize,
    steady_writes: usize,
    idle_rss: f64,
    rss: f64,
    peak: f64,
}

/// A controller process under test.
enum Process {
    Host(reconhost_tests::host::Host),
    Operator(Component),
}

impl Process {
    async fn start(variant: Variant, world: &World, workers: usize) -> Self {
        match variant {
            Variant::Host => Process::Host(
                world
                    .host_with(
                        &["webapp"],
                        &[],
                        &[&format!("--max-concurrent-reconciles={workers}")],
                    )
                    .await,
            ),
            Variant::Operator => {
                let log_dir =
                    std::env::temp_dir().join(format!("reconhost-bench-{}", world.namespace));
                std::fs::create_dir_all(&log_dir).unwrap();
                let args = [
                    "--native-operator".to_owned(),
                    world.cluster.kubeconfig().display().to_string(),
                    world.namespace.clone(),
                    workers.to_string(),
                ];
                let exe = std::env::current_exe().unwrap();
                let component = Component::spawn("native-webapp", &exe, &args, &log_dir).unwrap();
                let log = component.log().to_owned();
                reconhost_tests::support::eventually(
                    Duration::from_secs(60),
                    "the operator",
                    || {
                        let ready =
                            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("ready"));
                        async move { ready.then_some(()) }
                    },
                )
                .await;
                Process::Operator(component)
            }
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Process::Host(h) => h.pid(),
            Process::Operator(c) => c.pid(),
        }
        .expect("running")
    }

    async fn reconciles(&self) -> f64 {
        match self {
            Process::Host(h) => reconhost_tests::host::sample(
                &h.metrics().await.unwrap(),
                "controller_runtime_reconcile_total",
                &[("controller", "webapp"), ("result", "success")],
            )
            .unwrap_or(0.0),
            Process::Operator(c) => std::fs::read_to_string(c.log())
                .unwrap_or_default()
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("reconciles ")?.parse().ok())
                .unwrap_or(0.0),
        }
    }

    fn stop(self) {
        match self {
            Process::Host(h) => h.stop(Duration::from_secs(10)),
            Process::Operator(mut c) => c.stop(Duration::from_secs(5)),
        }
    }
}

async fn run(variant: Variant, parents: usize, workers: usize) -> Figures {
    let world = World::new(match variant {
        Variant::Host => "bench-host",
        Variant::Operator => "bench-operator",
    })
    .await;
    let process = Process::start(variant, &world, workers).await;
    let pid = process.pid();
    let [_, idle_rss, _] = measure::memory_mib(pid);
    let audit = world.cluster.audit_log();
    let writes_before = audit.events_in(&world.namespace).unwrap().len();

    let start = Instant::now();
    for i in 0..parents {
        world
            .create_webapp(&format!("app-{i:04}"), "nginx:1.27", 1)
            .await;
    }
    let create = start.elapsed();
    loop {
        let (observed, deployments, services) = world.webapps_converged().await;
        if observed == parents && deployments == parents && services == parents {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "{}: no convergence in 15 min ({observed} observed, {deployments} Deployments, \
             {services} Services)",
            variant.label()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converge = start.elapsed();
    // Writes made by the controller: everything in the namespace but the benchmark's creates.
    let controller_writes = || {
        audit
            .events_in(&world.namespace)
            .unwrap()
            .iter()
            .skip(writes_before)
            .filter(|e| !(e.verb == "create" && e.request_uri.contains("/webapps")))
            .count()
    };
    // Let the last reconciles (woken by the final status writes) finish, then watch a quiet
    // window: writes in it are writes in steady state.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes = controller_writes();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let steady_writes = controller_writes() - writes;
    let [peak, rss, _] = measure::memory_mib(pid);
    let reconciles = process.reconciles().await;
    process.stop();
    Figures {
        variant,
        create,
        converge,
        reconciles,
        writes,
        steady_writes,
        idle_rss,
        rss,
        peak,
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--native-operator") {
        let workers = args[4].parse().expect("workers");
        let kind = native::parent_kind(&args[5..]);
        native::run(&PathBuf::from(&args[2]), &args[3], workers, kind)
            .await
            .expect("the native operator");
        return;
    }
    let parents = env_or("CONVERGE_PARENTS", 1000);
    let workers = env_or("CONVERGE_WORKERS", 4);
    let rounds = env_or("CONVERGE_ROUNDS", 2);
    let mut all = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Variant::Host, Variant::Operator]
        } else {
            [Variant::Operator, Variant::Host]
        };
        for variant in order {
            let f = run(variant, parents, workers).await;
            println!(
                "round {round} {:<26} created {:>6.1} s  converged {:>6.1} s  reconciles {:>6}  \
                 writes {:>5} ({:.2}/parent)  steady writes {:>3}  RSS idle {:>6.1} MiB  \
                 after {:>6.1} MiB  peak {:>6.1} MiB",
                f.variant.label(),
                f.create.as_secs_f64(),
                f.converge.as_secs_f64(),
                f.reconciles,
                f.writes,
                f.writes as f64 / parents as f64,
                f.steady_writes,
                f.idle_rss,
                f.rss,
                f.peak,
            );
            all.push(f);
        }
    }
    println!("\nmedians over {rounds} rounds, {parents} parents, {workers} workers:");
    let of = |v: Variant, get: &dyn Fn(&Figures) -> f64| {
        measure::median(all.iter().filter(|f| f.variant == v).map(get).collect())
    };
    type Column<'a> = &'a dyn Fn(&Figures) -> f64;
    let rows: [(&str, Column); 6] = [
        ("converged after (s)", &|f| f.converge.as_secs_f64()),
        ("reconciles", &|f| f.reconciles),
        ("API writes", &|f| f.writes as f64),
        ("steady-state writes in 10 s", &|f| f.steady_writes as f64),
        ("RSS after (MiB)", &|f| f.rss),
        ("peak RSS (MiB)", &|f| f.peak),
    ];
    let rows: Vec<(&str, f64, f64)> = rows
        .into_iter()
        .map(|(name, get)| (name, of(Variant::Host, get), of(Variant::Operator, get)))
        .collect();
    measure::side_by_side(Variant::Host.label(), Variant::Operator.label(), &rows);
}
