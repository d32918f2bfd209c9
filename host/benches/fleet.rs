//! The fleet: 50 different plugins in one host, beside 50 separate kube-runtime operators, on
//! one control plane, in one run. Each plugin is webapp's logic built under a kind of its own
//! (host/benches/fleet/plugin, one component per kind) with a CRD of its own; each operator is
//! the converge benchmark's native operator (converge/native.rs) serving one of those kinds.
//! Measured for each side: time to start, total memory, watch connections to the API server,
//! CPU while idle, and the time for `FLEET_PARENTS` parents of every kind to converge. Run with
//! `make bench-fleet` (it starts its own control plane); the figures go to docs/BENCHMARKS.md.
//!
//! Environment: `FLEET_PLUGINS` (default 50), `FLEET_PARENTS` (per kind, default 20),
//! `FLEET_ROUNDS` (default 1; rounds alternate which side goes first), `FLEET_IDLE_SECS`
//! (the idle window, default 30), `FLEET_SIDES` (`host`, `operators` or both, the default),
//! `FLEET_SMAPS=1` (print the host's largest memory mappings after convergence), `FLEET_BUILDS`
//! (the host sides to run, each with its own plugins, comma-separated: `sdk`, the default,
//! webapp's logic through the SDK; `lean`, built from `runtime-lean-webapp`, the same logic on
//! the raw contract; `baseline`, the components in the directory `FLEET_BASELINE` names, built
//! by another commit; `FLEET_LEAN=1` is `FLEET_BUILDS=lean`). The operators are the same for all.
//!
//! Prints, for each host side, its memory after convergence against the operators' and the
//! verdict on the target (issue 28: ≤ 0.05 of fifty operators' resident memory).

#[path = "measure/mod.rs"]
mod measure;
#[path = "converge/native.rs"]
mod native;
#[path = "fleet/variants.rs"]
mod variants;

use reconhost_tests::bench::env_or;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::ListParams;
use reconhost_tests::process::Component;
use reconhost_tests::world::World;
use serde_json::json;

use measure::{ProcessSample, median};
use variants::{Build, GROUP, Variant};

/// The host's memory after convergence as a share of the operators', at most (issue 28).
const MEMORY_TARGET: f64 = 0.05;

/// The ways of running the fleet: one host with the plugins of a build, or the operators.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    Host(Build),
    Operators,
}

impl Side {
    fn label(self) -> String {
        match self {
            Side::Host(build) => format!("one reconhost, N plugins ({})", build.label()),
            Side::Operators => "N kube-runtime operators".to_owned(),
        }
    }
}

/// What one side measured.
struct Figures {
    side: Side,
    started: Duration,
    converged: Duration,
    idle_rss: f64,
    rss: f64,
    anon: f64,
    peak: f64,
    connections: usize,
    idle_cpu: f64,
}

/// The processes of one side.
enum Processes {
    Host(reconhost_tests::host::Host),
    Operators(Vec<Component>),
}

impl Processes {
    async fn start(side: Side, world: &World, fleet: &[Variant]) -> Self {
        match side {
            Side::Host(_) => {
                let names: Vec<String> = fleet.iter().map(Variant::component_name).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                Processes::Host(world.host_with(&names, &[], &[]).await)
            }
            Side::Operators => {
                let exe = std::env::current_exe().unwrap();
                let base =
                    std::env::temp_dir().join(format!("reconhost-bench-{}", world.namespace));
                let mut operators = Vec::new();
                for variant in fleet {
                    let log_dir = base.join(variant.plugin_name());
                    std::fs::create_dir_all(&log_dir).unwrap();
                    let args = [
                        "--native-operator".to_owned(),
                        world.cluster.kubeconfig().display().to_string(),
                        world.namespace.clone(),
                        // The host's default `--max-concurrent-reconciles`, per plugin.
                        "4".to_owned(),
                        GROUP.to_owned(),
                        variant.kind(),
                        variant.plural(),
                    ];
                    operators
                        .push(Component::spawn("native-operator", &exe, &args, &log_dir).unwrap());
                }
                for operator in &operators {
                    let log = operator.log().to_owned();
                    reconhost_tests::support::eventually(
                        Duration::from_secs(120),
                        "an operator's caches",
                        || {
                            let ready =
                                std::fs::read_to_string(&log).is_ok_and(|l| l.contains("ready"));
                            async move { ready.then_some(()) }
                        },
                    )
                    .await;
                }
                Processes::Operators(operators)
            }
        }
    }

    fn pids(&self) -> Vec<u32> {
        match self {
            Processes::Host(h) => vec![h.pid().expect("running")],
            Processes::Operators(os) => os.iter().map(|o| o.pid().expect("running")).collect(),
        }
    }

    fn stop(self) {
        match self {
            Processes::Host(h) => h.stop(Duration::from_secs(10)),
            Processes::Operators(os) => {
                for mut o in os {
                    o.stop(Duration::from_secs(5));
                }
            }
        }
    }
}

/// How many parents of every kind report their current generation, and how many children the
/// namespace holds.
async fn converged(world: &World, fleet: &[Variant]) -> (usize, usize, usize) {
    let lp = ListParams::default();
    let mut observed = 0;
    for variant in fleet {
        let api = world.api(GROUP, "v1alpha1", &variant.kind(), &variant.plural());
        observed += api
            .list(&lp)
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| {
                let p = serde_json::to_value(p).unwrap();
                p["status"]["observedGeneration"] == p["metadata"]["generation"]
            })
            .count();
    }
    let deployments = world.deployments().list(&lp).await.unwrap().items.len();
    let services = world.services().list(&lp).await.unwrap().items.len();
    (observed, deployments, services)
}

async fn run(side: Side, fleet: &[Variant], parents: usize, idle: Duration) -> Figures {
    let world = World::new(match side {
        Side::Host(Build::Sdk) => "fleet-host",
        Side::Host(Build::Lean) => "fleet-host-lean",
        Side::Host(Build::Baseline) => "fleet-host-base",
        Side::Operators => "fleet-operators",
    })
    .await;
    let port = measure::api_server_port(world.cluster.kubeconfig());
    let start = Instant::now();
    let processes = Processes::start(side, &world, fleet).await;
    let started = start.elapsed();
    let pids = processes.pids();
    let idle_rss = ProcessSample::take(&pids, port).rss;

    let start = Instant::now();
    for variant in fleet {
        let api = world.api(GROUP, "v1alpha1", &variant.kind(), &variant.plural());
        for j in 0..parents {
            world
                .create(
                    &api,
                    json!({
                        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": variant.kind(),
                        "metadata": {"name": format!("{}-{j:02}", variant.plural())},
                        "spec": {"image": "nginx:1.27", "replicas": 1},
                    }),
                )
                .await;
        }
    }
    let total = parents * fleet.len();
    loop {
        let (observed, deployments, services) = converged(&world, fleet).await;
        if observed == total && deployments == total && services == total {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "{}: no convergence in 15 min ({observed} of {total} observed, {deployments} \
             Deployments, {services} Services)",
            side.label()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let converged = start.elapsed();

    // Let the last reconciles (woken by the final status writes) finish, then measure a quiet
    // window: the CPU spent in it is what the side costs while nothing changes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = ProcessSample::take(&pids, port);
    tokio::time::sleep(idle).await;
    if matches!(side, Side::Host(_)) && std::env::var_os("FLEET_SMAPS").is_some() {
        measure::print_largest_mappings(pids[0]);
    }
    let after = ProcessSample::take(&pids, port);
    processes.stop();
    Figures {
        side,
        started,
        converged,
        idle_rss,
        rss: after.rss,
        anon: after.anon,
        peak: after.peak,
        connections: after.connections,
        idle_cpu: (after.cpu - before.cpu).as_secs_f64() / idle.as_secs_f64() * 100.0,
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
    let plugins = env_or("FLEET_PLUGINS", 50);
    let parents = env_or("FLEET_PARENTS", 20);
    let rounds = env_or("FLEET_ROUNDS", 1);
    let idle = Duration::from_secs(env_or("FLEET_IDLE_SECS", 30) as u64);

    let builds: Vec<Build> = if std::env::var_os("FLEET_LEAN").is_some_and(|v| v == "1") {
        vec![Build::Lean]
    } else {
        std::env::var("FLEET_BUILDS")
            .unwrap_or_else(|_| "sdk".to_owned())
            .split(',')
            .map(|b| match b.trim() {
                "sdk" => Build::Sdk,
                "lean" => Build::Lean,
                "baseline" => Build::Baseline,
                other => panic!("FLEET_BUILDS: {other:?} is not sdk, lean or baseline"),
            })
            .collect()
    };
    let fleets: Vec<(Build, Vec<Variant>)> = builds
        .iter()
        .map(|&build| (build, (0..plugins).map(|i| Variant(i, build)).collect()))
        .collect();
    for (build, fleet) in &fleets {
        let built = Instant::now();
        variants::build(fleet);
        println!(
            "{plugins} plugin variants ({}) ready in {:.1} s",
            match build {
                Build::Sdk => "webapp's logic through the SDK",
                Build::Lean => "runtime-lean-webapp: webapp's logic on the raw contract",
                Build::Baseline => "the baseline's components, from FLEET_BASELINE",
            },
            built.elapsed().as_secs_f64()
        );
    }
    let world = World::new("fleet-crds").await;
    variants::install_crds(&world.client, &fleets[0].1).await;
    // The first writes of a kind whose CRD was just established took ~2 s in this API server:
    // let the new kinds settle, so the side that runs first does not pay for it.
    tokio::time::sleep(Duration::from_secs(10)).await;
    // Compiled once here, into the cache the host reads, so the host's start below measures a
    // host whose plugins are already compiled (as after its first start).
    for (build, fleet) in &fleets {
        let compiled = Instant::now();
        variants::precompile(fleet);
        println!(
            "{plugins} plugins ({}) compiled (or found in the cache) in {:.1} s",
            build.label(),
            compiled.elapsed().as_secs_f64()
        );
    }

    let only = std::env::var("FLEET_SIDES").unwrap_or_default();
    let mut sides: Vec<Side> = Vec::new();
    if only != "operators" {
        sides.extend(builds.iter().map(|&b| Side::Host(b)));
    }
    if only != "host" {
        sides.push(Side::Operators);
    }
    let mut all = Vec::new();
    for round in 0..rounds {
        let mut order = sides.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for side in order {
            let fleet = match side {
                Side::Host(build) => &fleets.iter().find(|(b, _)| *b == build).unwrap().1,
                Side::Operators => &fleets[0].1,
            };
            let f = run(side, fleet, parents, idle).await;
            println!(
                "round {round} {:<34} started {:>5.1} s  converged {:>6.1} s  RSS idle {:>7.1} MiB  \
                 after {:>7.1} MiB (anonymous {:>7.1})  peak {:>7.1} MiB  API connections {:>4}  idle CPU {:>5.1}% of a core",
                f.side.label(),
                f.started.as_secs_f64(),
                f.converged.as_secs_f64(),
                f.idle_rss,
                f.rss,
                f.anon,
                f.peak,
                f.connections,
                f.idle_cpu,
            );
            all.push(f);
        }
    }
    println!(
        "\nmedians over {rounds} round(s), {plugins} kinds, {parents} parents each ({} in all):",
        plugins * parents
    );
    let of = |s: Side, get: &dyn Fn(&Figures) -> f64| {
        median(all.iter().filter(|f| f.side == s).map(get).collect())
    };
    type Column<'a> = &'a dyn Fn(&Figures) -> f64;
    let columns: [(&str, Column); 8] = [
        ("start until ready (s)", &|f| f.started.as_secs_f64()),
        ("all parents converged after (s)", &|f| {
            f.converged.as_secs_f64()
        }),
        ("RSS before any parent (MiB, summed)", &|f| f.idle_rss),
        ("RSS after convergence (MiB, summed)", &|f| f.rss),
        ("of which anonymous (MiB, summed)", &|f| f.anon),
        ("peak RSS (MiB, summed)", &|f| f.peak),
        ("TCP connections to the API server", &|f| {
            f.connections as f64
        }),
        ("idle CPU (% of one core)", &|f| f.idle_cpu),
    ];
    let has_operators = sides.contains(&Side::Operators);
    let mut verdicts = Vec::new();
    for side in sides.iter().filter(|s| matches!(s, Side::Host(_))) {
        let rows: Vec<(&str, f64, f64)> = columns
            .iter()
            .map(|(name, get)| (*name, of(*side, get), of(Side::Operators, get)))
            .collect();
        println!();
        measure::side_by_side(&side.label(), &Side::Operators.label(), &rows);
        if has_operators {
            let share = of(*side, &|f| f.rss) / of(Side::Operators, &|f| f.rss);
            verdicts.push(format!(
                "{}: RSS after convergence {share:.3} of the operators', target <= {MEMORY_TARGET}: {}",
                side.label(),
                if share <= MEMORY_TARGET {
                    "met".to_owned()
                } else {
                    format!("missed by {:.2}x", share / MEMORY_TARGET)
                }
            ));
        }
    }
    if !verdicts.is_empty() {
        println!("\nTargets:");
        for v in &verdicts {
            println!("- {v}");
        }
    }
}
