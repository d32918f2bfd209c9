//! Pace: how close the host comes to the API server's own pace. N `webapp` parents are
//! converged twice on the same control plane, each time in a clean namespace of its own: once by
//! a load generator that makes exactly the writes the host makes for them and nothing else (the
//! raw rate: the physical limit of these writes here), once by the host. Parents per second for
//! both, and the ratio against the target (issue 28: the host at >= 80 % of the raw rate). Run
//! with `make bench-pace` (it starts its own control plane); the figures go to
//! docs/BENCHMARKS.md.
//!
//! - The writes (pace/writes.rs): per parent the Deployment and the Service by server-side apply
//!   under `reconhost/webapp`, forced; the status by server-side apply on the status
//!   subresource under the same manager; the record annotation by a merge patch under
//!   `reconhost-record` — bodies made by the plugin component in the host's runtime and the
//!   host's planner. The audit log counts both writers' requests by form, and the managed
//!   fields they leave on the same parent are compared.
//! - The same concurrency: the generator writes as many parents at once as the host's default
//!   `--max-concurrent-reconciles` (read from its command line), each parent's writes in the
//!   host's order, one after the other; the host runs with its defaults.
//! - The same client stack: kube-rs over hyper (HTTP/1.1, a pool of kept-alive connections,
//!   rustls) from the same kubeconfig, as the host's client.
//! - Parents are created before either clock starts (`PACE_CREATORS` at a time), while nothing
//!   reconciles them: the raw clock runs from the first write until every write has returned,
//!   the host's from its start (process spawn) until a watch sees every parent converged
//!   (`status.observedGeneration` at its generation, its Deployment and its Service). The
//!   creation is timed too and printed beside, to show it is not what either figure waits on.
//! - Rounds alternate which goes first, so neither always meets the fresher API server; the
//!   table holds medians over rounds, and each round's own ratio is printed too. Each run's
//!   objects are deleted right after it and the control plane left to settle, so every run
//!   meets the same objects; the requests the API server served while each clock ran are
//!   printed by verb and resource (the audit log has only the writes).
//!
//! Environment: `PACE_PARENTS` (default 2000), `PACE_ROUNDS` (default 4), `PACE_CREATORS`
//! (parents created at once, default 32).

#[path = "pace/audit.rs"]
mod audit;
#[path = "pace/converged.rs"]
mod converged;
#[path = "pace/cpu.rs"]
mod cpu;
#[path = "measure/mod.rs"]
#[allow(dead_code, reason = "the other benchmarks use the rest")]
mod measure;
#[path = "pace/report.rs"]
mod report;
#[path = "pace/served.rs"]
mod served;
#[path = "pace/writes.rs"]
mod writes;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser as _;
use futures::StreamExt as _;
use reconhost_tests::TestCluster;
use reconhost_tests::bench::env_or;
use reconhost_tests::world::World;
use serde_json::Value;

use audit::Writes;
use converged::Tracker;
use cpu::Cpu;
use served::Served;
use writes::{Generator, Planner};

/// The target: the host's parents per second over the generator's.
const TARGET: f64 = 0.80;

/// The two writers of the same writes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    Raw,
    Host,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Raw => "raw generator",
            Variant::Host => "reconhost + webapp.wasm",
        }
    }
}

/// What the runs share.
struct Settings {
    parents: usize,
    creators: usize,
    /// Parents written at once: the host's default `--max-concurrent-reconciles`.
    workers: usize,
}

/// What one run measured.
struct Figures {
    variant: Variant,
    /// Creating the parents, before the clock.
    create: Duration,
    /// The host: from its start until /readyz answered (its caches listed).
    ready: Option<Duration>,
    /// The figure: the generator's writes all returned; the host's parents all converged.
    done: Duration,
    /// Every parent converged, as the watches saw it.
    seen: Duration,
    /// The writer's requests, from the audit log.
    writes: Writes,
    /// The host's successful reconciles, a few seconds after convergence.
    reconciles: Option<f64>,
    /// CPU used from the clock's start to convergence.
    cpu: Cpu,
    /// The requests the API server served in the same time, whoever sent them.
    served: Served,
}

impl Figures {
    fn rate(&self, parents: usize) -> f64 {
        parents as f64 / self.done.as_secs_f64()
    }
}

/// The host's default `--max-concurrent-reconciles`, from its own command line.
fn default_workers() -> usize {
    let cli = reconhost::cli::Cli::try_parse_from(["reconhost", "run"]).expect("`run` parses");
    let reconhost::cli::Command::Run(args) = cli.command else {
        unreachable!("parsed `run`")
    };
    usize::from(args.max_concurrent_reconciles)
}

/// Creates the parents `app-00000`, ... in `world`'s namespace, `creators` at a time; returns
/// them as created and how long that took.
async fn create(world: &World, settings: &Settings) -> (Vec<Value>, Duration) {
    let start = Instant::now();
    let created = futures::stream::iter(0..settings.parents)
        .map(|i| async move {
            world
                .create_webapp(&format!("app-{i:05}"), "nginx:1.27", 1)
                .await
        })
        .buffer_unordered(settings.creators)
        .collect::<Vec<Value>>()
        .await;
    (created, start.elapsed())
}

/// The first use of the WebApp kind, and of server-side apply on each resource, costs a fresh
/// API server a second or two once (5 parents took 2 s to create in the first run, 0.05 s in
/// the next); paid here, on a few parents nothing times, so the first run does not pay it.
async fn warm_up(planner: &Planner) {
    let world = World::new("pace-warmup").await;
    let settings = Settings {
        parents: 8,
        creators: 8,
        workers: 1,
    };
    let (created, _) = create(&world, &settings).await;
    let generator = Generator::new(&world, &planner.field_manager()).await;
    let now = reconhost::model::now();
    for parent in &created {
        generator
            .send(&planner.writes(parent, &now))
            .await
            .expect("the warm-up's writes");
    }
}

/// The generator: the parents created, then their writes, timed.
async fn raw(planner: &Planner, settings: &Settings) -> (Figures, World) {
    let world = World::new("pace-raw").await;
    let plane = cpu::control_plane(world.cluster.kubeconfig());
    let (created, create) = create(&world, settings).await;
    let mut tracker = Tracker::start(&world, settings.parents).await;
    let now = reconhost::model::now();
    let planned: Vec<_> = created.iter().map(|p| planner.writes(p, &now)).collect();
    let generator = Arc::new(Generator::new(&world, &planner.field_manager()).await);
    let planned = Arc::new(planned);
    let mark = world.writes();
    let (before, served) = (Cpu::take(None, &plane), Served::take(&world.client).await);
    let (start, wall) = (Instant::now(), jiff::Timestamp::now());
    generator
        .send_all(planned, settings.workers)
        .await
        .expect("the generator's writes");
    let done = start.elapsed();
    let seen = tracker.converged(start).await - start;
    let cpu = Cpu::take(None, &plane).since(before);
    let served = Served::take(&world.client).await.since(&served);
    let writes = Writes::read(&world, mark, wall, |e| e.user_agent == writes::USER_AGENT);
    let figures = Figures {
        variant: Variant::Raw,
        create,
        ready: None,
        done,
        seen,
        writes,
        reconciles: None,
        cpu,
        served,
    };
    (figures, world)
}

/// The host: the parents created while no host runs, then the host started, timed until they
/// have all converged.
async fn host(settings: &Settings) -> (Figures, World) {
    let world = World::new("pace-host").await;
    let plane = cpu::control_plane(world.cluster.kubeconfig());
    let (_, create) = create(&world, settings).await;
    let mut tracker = Tracker::start(&world, settings.parents).await;
    let mark = world.writes();
    let (before, served) = (Cpu::take(None, &plane), Served::take(&world.client).await);
    let (start, wall) = (Instant::now(), jiff::Timestamp::now());
    let host = world.host_with(&["webapp"], &[], &[]).await;
    let ready = start.elapsed();
    let done = tracker.converged(start).await - start;
    let cpu = Cpu::take(host.pid(), &plane).since(before);
    let served = Served::take(&world.client).await.since(&served);
    // The echoes of the last writes: reconciles that find nothing to do, and must write nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reconciles = reconhost_tests::world::reconciles(&host, "webapp").await;
    host.stop(Duration::from_secs(10));
    let writes = Writes::read(&world, mark, wall, |e| e.by_reconhost());
    let figures = Figures {
        variant: Variant::Host,
        create,
        ready: Some(ready),
        done,
        seen: done,
        writes,
        reconciles: Some(reconciles),
        cpu,
        served,
    };
    (figures, world)
}

/// Deletes what a run made, so that every run meets a control plane holding the same objects.
/// Left in place, they make each run slower than the one before, whichever writer it times (the
/// API server's CPU for the same writes went from 42 to 138 s over eight runs), and that drift,
/// not the writers, decided the ratio. Children go first: a parent deleted before them leaves
/// the garbage collector checking and deleting each of them, in the next run's time.
async fn clear(world: &World) {
    let everything = kube::api::ListParams::default();
    for api in [world.deployments(), world.services(), world.webapps()] {
        api.delete_collection(&kube::api::DeleteParams::default(), &everything)
            .await
            .expect("deleting a run's objects");
        let left = api
            .list_metadata(&everything)
            .await
            .expect("a list")
            .items
            .len();
        assert_eq!(
            left, 0,
            "a run's objects are still there after their deletion"
        );
    }
}

/// Waits until the API server has served no request about the benchmark's kinds for a second
/// (the deletions' aftermath: the garbage collector's graph, the Services' addresses), at most
/// a minute; says so if it never did.
async fn settle(world: &World) {
    let kinds = ["deployments", "services", "webapps", "ipaddresses"];
    let busy = |served: &Served| {
        served
            .per_parent(1, 1.0)
            .iter()
            .any(|(what, _)| kinds.iter().any(|k| what.contains(k)))
    };
    let start = Instant::now();
    let mut last = Served::take(&world.client).await;
    while start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = Served::take(&world.client).await;
        if !busy(&now.since(&last)) {
            return;
        }
        last = now;
    }
    println!("        (the control plane was still busy with the deleted objects after 60 s)");
}

#[tokio::main]
async fn main() {
    let settings = Settings {
        parents: env_or("PACE_PARENTS", 2000),
        creators: env_or("PACE_CREATORS", 32),
        workers: default_workers(),
    };
    let rounds = env_or("PACE_ROUNDS", 4);
    let n = settings.parents;
    let cluster = TestCluster::from_env().expect("a control plane (run `make bench-pace`)");
    let planner = Planner::new(&cluster.client().await.expect("a client")).await;
    warm_up(&planner).await;
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "{n} webapp parents, {rounds} rounds, {cores} cores; {} parents written at once (the \
         host's default --max-concurrent-reconciles); parents created {} at a time before each \
         clock starts; both writers on kube-rs (hyper HTTP/1.1, pooled keep-alive connections, \
         rustls) from the same kubeconfig\n",
        settings.workers, settings.creators
    );
    let mut all: Vec<Figures> = Vec::new();
    let mut fields = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Variant::Raw, Variant::Host]
        } else {
            [Variant::Host, Variant::Raw]
        };
        // The same requests leave the same managed fields on the same parent and children:
        // each run's are read before its objects are deleted, which happens before the next
        // run starts, so that neither run meets the other's objects.
        let mut owned = Vec::new();
        for variant in order {
            let (figures, world) = match variant {
                Variant::Raw => raw(&planner, &settings).await,
                Variant::Host => host(&settings).await,
            };
            report::run(round, &figures, n);
            all.push(figures);
            owned.push((variant, writes::owned_fields(&world, "app-00000").await));
            clear(&world).await;
            settle(&world).await;
        }
        owned.sort_by_key(|(v, _)| *v == Variant::Host);
        let [(_, raw_fields), (_, host_fields)] = <[_; 2]>::try_from(owned).expect("two runs");
        fields.push((raw_fields, host_fields));
    }
    report::medians(&all, &fields, &settings, rounds);
}
