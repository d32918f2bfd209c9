//! Sharding (issue 27): 1, 2 and 3 replicas with `--sharding`, each held to the same CPU quota
//! (a cgroup, as a container's CPU limit) so that each replica, not the control plane, is what
//! runs out; `SHARD_PARENTS` webapp parents. Measured for each number of replicas, from a clean
//! namespace: parents per second converged, host CPU per 1,000 reconciles, memory per replica.
//! Then, with the parents converged under two replicas and some of them changing throughout: a
//! third joins (a planned move), one of the three is killed (`kill -9`), and its replacement
//! joins at once, as a Deployment would start it; for each, the pause of the parents that
//! moved. Run with `make bench-shard` (it starts its own control plane); the figures go to
//! docs/BENCHMARKS.md.
//!
//! **The quota.** On this machine (2 cores for everything) the control plane spends 10–35 ms of
//! CPU per parent converged (the create and three writes, their watch events to every replica,
//! the audit log, etcd) and a replica 1.5–3 ms. With 300 millicores one replica could converge
//! ~150 parents a second, and three of them would need several cores of control plane: the
//! control plane, not the replicas, would be measured. At the default 15 millicores one
//! replica converges ~8 a second and three need about half a core of control plane. Each
//! replica's cgroup also weighs as ten plain processes (`CPU_WEIGHT`), so that other work on
//! the machine does not take its quota from it. The table shows, per run, how much of its
//! quota each replica used and in how many CFS periods the quota stopped it, and the
//! throughput the quotas allow at the CPU per parent measured: a run where the replicas were
//! not the bottleneck shows as one. The handovers run at `SHARD_HANDOVER_MILLICORES`
//! (default 500, a usual container limit): at 15 a joining replica's start and its backlog of
//! gained parents would take 30 times longer and hide the protocol's own pause.
//!
//! **A moved parent's pause** is read two ways (see [`handover`]):
//! - from the event (the kill; the new member's Lease created) to the new owner's first
//!   reconcile of that parent (its end, in the new owner's log), for every parent that moved;
//! - as the issue defines it, from the old owner's last write of the parent (the audit log) to
//!   the new owner's first reconcile, for the `SHARD_HOT` parents whose specs keep changing
//!   throughout (the others were last written when they converged, minutes before): it adds
//!   to the pause the time since the parent last changed, up to `SHARD_CHURN_MS`.
//!
//! **Reconciles** are counted from the replicas' logs (every reconcile logs its parent, at debug
//! when it wrote nothing): with sharding, `controller_runtime_reconcile_total` also counts, as
//! successes, the keys a worker took off the queue and skipped because their parent had moved
//! to another replica since (a replica queues only its own parents, so none while the ring
//! stays as it is).
//!
//! **Side by side** (`SHARD_BESIDE=1`): runs one after another are minutes apart, and this
//! machine's speed moves by up to a fifth in minutes, which a ratio of two runs carries whole.
//! So this mode runs one replica over `SHARD_PARENTS` parents and three over three times as
//! many at the same time, each ring in a namespace of its own, both creating their parents
//! from one moment: each member has as many parents of its own as the lone replica, and as many
//! of others' for each of its own as in a ring of three over `SHARD_PARENTS`, and both rings
//! converge over about the same minutes, on the same machine. The ratio of their parents per
//! second is the throughput of three over one.
//!
//! Environment: `SHARD_PARENTS` (default 3000), `SHARD_MILLICORES` (each replica's quota in
//! thousandths of a CPU, default 15), `SHARD_REPLICAS` (runs with 1 to this many, default 3; 0
//! for the handovers alone), `SHARD_ROUNDS` (default 2; rounds alternate the order),
//! `SHARD_BESIDE` (1: the rounds run one and three replicas side by side instead),
//! `SHARD_HANDOVER` (0 skips the handovers), `SHARD_HANDOVER_MILLICORES` (default 500),
//! `SHARD_HOT` (parents changing during the handovers, default 40), `SHARD_CHURN_MS` (each
//! of them changes this often, default 1000) and `SHARD_HEAP_HOST` (a build of the host with
//! `--features heap-profile`: the replicas run it, and each one's live heap at rest is printed
//! by where the host allocated it; `make bench-shard-heap` sets it; each profile stays in the
//! temporary directory, `reconhost-heap-<namespace>-<replica>.json`, for dhat's viewer).

#[path = "shard/converged.rs"]
mod converged;
#[path = "shard/handover.rs"]
mod handover;
#[path = "measure/heap.rs"]
mod heap;
#[path = "measure/mod.rs"]
#[allow(dead_code, reason = "the fleet benchmark uses the rest")]
mod measure;
#[path = "shard/replicas.rs"]
mod replicas;
#[path = "shard/report.rs"]
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use reconhost_tests::bench::{GIVE_UP, env_or};
use reconhost_tests::support::poll;
use reconhost_tests::world::World;
use serde_json::json;

use converged::Convergence;
use handover::{Reconciles, Writes, between};
use replicas::{Replica, settled};
use report::{Handover, Throughput};

/// What the environment asks for.
pub struct Settings {
    parents: usize,
    millicores: u64,
    handover_millicores: u64,
    replicas: usize,
    rounds: usize,
    hot: usize,
    churn: Duration,
    handover: bool,
    beside: bool,
}

/// The longest a convergence may take: one replica at a small quota is slow.
const CONVERGE_LIMIT: Duration = Duration::from_secs(3600);
/// Longer than a ring member's round (the retry period, 2 s, jittered up to 2.4 s).
const ROUND: Duration = Duration::from_secs(4);
/// How often a handover's progress is read from the logs.
const LOOK: Duration = Duration::from_millis(500);
/// Parents created at once: enough that creating is never what the replicas wait for.
const CREATORS: usize = 16;

fn names(range: std::ops::RangeInclusive<usize>) -> Vec<String> {
    range.map(|k| format!("replica-{k}")).collect()
}

fn parent(i: usize) -> String {
    format!("app-{i:05}")
}

/// Creates the parents, `CREATORS` at a time; returns how long that took.
async fn create(world: &World, parents: usize) -> Duration {
    let start = Instant::now();
    futures::stream::iter(0..parents)
        .for_each_concurrent(CREATORS, |i| async move {
            world.create_webapp(&parent(i), "nginx:1.27", 1).await;
        })
        .await;
    start.elapsed()
}

/// `n` replicas on a clean namespace, `parents` created once the ring has settled and, side by
/// side, once every ring passed `together` (the rings load the machine at once from the first
/// create: the one whose replicas compiled sooner would otherwise start alone).
async fn throughput(
    s: &Settings,
    n: usize,
    parents: usize,
    together: Option<&tokio::sync::Barrier>,
) -> Throughput {
    let world = World::new(&format!("shard-{n}")).await;
    let names = names(1..=n);
    let replicas = replicas::start_all(&world, &names, s.millicores).await;
    settled(&world, &names).await;
    // Each member's claims follow the others' published views at its next reading only: until
    // then the last to publish owns nothing yet, and parents created meanwhile would be
    // skipped, then gained.
    tokio::time::sleep(ROUND).await;
    let convergence = Convergence::start(&world).await;
    if let Some(together) = together {
        together.wait().await;
    }

    let cpu = |rs: &[Replica]| rs.iter().map(Replica::cpu).collect::<Vec<_>>();
    let throttling = |rs: &[Replica]| rs.iter().map(Replica::throttling).collect::<Vec<_>>();
    let counted = async |rs: &[Replica]| {
        let mut sum = 0.0;
        for r in rs {
            sum += r.counted().await;
        }
        sum
    };
    let (cpu0, throttled0) = (cpu(&replicas), throttling(&replicas));
    let (plane0, machine0) = (
        replicas::control_plane_cpu(&world),
        replicas::machine_busy(),
    );
    let counted0 = counted(&replicas).await;
    let (idle, idle_anon): (Vec<f64>, Vec<f64>) = replicas
        .iter()
        .map(|r| {
            let (rss, _, anon) = r.memory();
            (rss, anon)
        })
        .unzip();
    let start = Instant::now();
    let created = create(&world, parents).await;
    let done = convergence.all(parents, CONVERGE_LIMIT).await;
    let wall = done - start;
    let (cpu1, throttled1) = (cpu(&replicas), throttling(&replicas));
    let (plane1, machine1) = (
        replicas::control_plane_cpu(&world),
        replicas::machine_busy(),
    );
    let reconciles: usize = replicas.iter().map(Replica::reconciles).sum();
    let counted1 = counted(&replicas).await;
    let lp = ListParams::default();
    let deployments = world.deployments().list(&lp).await.unwrap().items.len();
    let services = world.services().list(&lp).await.unwrap().items.len();
    assert_eq!(
        (deployments, services),
        (parents, parents),
        "every parent converged with its children"
    );
    let (writes, shared) = Writes::read(&world).census();
    let quota = s.millicores as f64 / 1000.0;
    let mut figures = Throughput {
        replicas: n,
        parents,
        created,
        converged: wall,
        reconciles: reconciles as f64,
        counted: counted1 - counted0,
        cpu: cpu1.iter().sum::<Duration>() - cpu0.iter().sum::<Duration>(),
        quota_used: cpu1
            .iter()
            .zip(&cpu0)
            .map(|(a, b)| (*a - *b).as_secs_f64() / (quota * wall.as_secs_f64()))
            .collect(),
        throttled: throttled1
            .iter()
            .zip(&throttled0)
            .map(|(a, b)| (a.1 - b.1) as f64 / (a.0 - b.0).max(1) as f64)
            .collect(),
        control_plane: plane1 - plane0,
        machine: machine1 - machine0,
        rss: Vec::new(),
        anon: Vec::new(),
        idle,
        idle_anon,
        children: Vec::new(),
        peak: Vec::new(),
        owned: Vec::new(),
        moved: Vec::new(),
        writes,
        shared,
    };
    // The last reconciles (woken by the final status writes) finish; then memory at rest.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for r in &replicas {
        let (rss, peak, anon) = r.memory();
        figures.rss.push(rss);
        figures.anon.push(anon);
        figures.peak.push(peak);
        figures.children.push(r.children().await);
        figures.owned.push(r.owned().await);
        let (gained, lost) = r.moved().await;
        figures.moved.push(gained + lost);
    }
    // After the readings above: writing the profile resolves symbols, which takes memory.
    let profiles = futures::future::join_all(replicas.iter().map(Replica::heap_profile)).await;
    if profiles.iter().any(Option::is_some) {
        report::print_heaps(n, &figures.owned, &profiles);
    }
    for r in replicas {
        r.host.stop(Duration::from_secs(10));
    }
    figures.print_run();
    figures
}

/// Specs of `hot` parents changing in the background, each every `period`.
struct Churn {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Churn {
    fn start(world: &World, hot: Vec<String>, period: Duration) -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let webapps = world.webapps();
        let pace = period / hot.len().max(1) as u32;
        let task = tokio::spawn(async move {
            for round in 0u64.. {
                for name in &hot {
                    let patch = Patch::Merge(json!({"spec": {"replicas": round % 4 + 1}}));
                    let _ = webapps.patch(name, &PatchParams::default(), &patch).await;
                    tokio::select! {
                        _ = stopped.changed() => return,
                        () = tokio::time::sleep(pace) => {}
                    }
                }
            }
        });
        Self { stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The first line of `replica`'s log with `message` after `after`.
fn logged(replica: &Replica, message: &str, after: Timestamp) -> Option<Timestamp> {
    replica
        .host
        .logs()
        .iter()
        .filter(|l| l["message"] == message)
        .filter_map(|l| l["timestamp"].as_str()?.parse::<Timestamp>().ok())
        .find(|t| *t > after)
}

/// How long before it joined at `joined` the replica was ready (plugin loaded, caches synced),
/// in seconds; negative if it joined first (builds before a member waited to be ready).
fn ready_before(replica: &Replica, joined: Timestamp) -> Option<f64> {
    let ready = logged(replica, "caches synced; ready", Timestamp::UNIX_EPOCH)?;
    Some(joined.duration_since(ready).as_secs_f64())
}

/// The replicas' logs, the killed ones' included: (name, file).
fn logs(replicas: &[Replica], gone: &[(String, PathBuf)]) -> Vec<(String, PathBuf)> {
    let mut all: Vec<(String, PathBuf)> = replicas
        .iter()
        .map(|r| (r.name.clone(), r.host.log_file().to_owned()))
        .collect();
    all.extend(gone.iter().cloned());
    all
}

/// When each of `staying` published its next view after `event`.
fn published(staying: &[Replica], event: Timestamp) -> Vec<Duration> {
    staying
        .iter()
        .filter_map(|r| logged(r, "serving under a new view", event))
        .map(|t| between(event, t))
        .collect()
}

/// Replica `name` joins the others: waits until the ring has settled with it and it has
/// reconciled every parent it took. Returns when it joined (its Lease's acquireTime).
async fn join(world: &World, s: &Settings, replicas: &mut Vec<Replica>, name: &str) -> Timestamp {
    let joining = Replica::start(world, name, s.handover_millicores).await;
    let at = replicas::joined(world, name).await;
    replicas.push(joining);
    let members: Vec<String> = replicas.iter().map(|r| r.name.clone()).collect();
    settled(world, &members).await;
    let new = replicas.last().expect("the new member");
    poll(
        GIVE_UP,
        LOOK,
        "the new member to reconcile every parent it took",
        || async {
            let owned = new.owned().await as usize;
            let taken = Reconciles::read(&logs(replicas, &[])).taken(at, &new.name);
            (owned > 0 && taken >= owned).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    at
}

/// Two replicas converge the parents; under churn of the hot ones, a third joins, then one of
/// the three is killed, then a replacement joins while the killed one's Lease is still there.
async fn handovers(s: &Settings) -> Vec<Handover> {
    let world = World::new("shard-handover").await;
    let mut replicas = replicas::start_all(&world, &names(1..=2), s.handover_millicores).await;
    settled(&world, &names(1..=2)).await;
    tokio::time::sleep(ROUND).await;
    let convergence = Convergence::start(&world).await;
    create(&world, s.parents).await;
    convergence.all(s.parents, CONVERGE_LIMIT).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let step = (s.parents / s.hot.max(1)).max(1);
    let hot: Vec<String> = (0..s.parents).step_by(step).map(parent).collect();
    let churn = Churn::start(&world, hot.clone(), s.churn);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut gone: Vec<(String, PathBuf)> = Vec::new();
    let mut figures = Vec::new();

    // A planned move: a third replica joins two.
    let at = join(&world, s, &mut replicas, "replica-3").await;
    let ready = ready_before(&replicas[2], at);
    figures.push(Handover::of(
        "a third joins two",
        at,
        &Reconciles::read(&logs(&replicas, &gone)),
        &Writes::read(&world),
        &hot,
        published(&replicas[..2], at),
        ready,
    ));

    // kill -9 of one of three: no drain, no deleted Lease.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let killed = replicas.remove(0);
    gone.push((killed.name.clone(), killed.host.log_file().to_owned()));
    let at = Timestamp::now();
    killed.host.kill();
    poll(
        GIVE_UP,
        LOOK,
        "the others to reconcile every parent of the killed replica",
        || async {
            let seen = Reconciles::read(&logs(&replicas, &gone));
            (seen.left_behind(at, &gone[0].0) == 0).then_some(())
        },
    )
    .await;
    let members: Vec<String> = replicas.iter().map(|r| r.name.clone()).collect();
    settled(&world, &members).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    figures.push(Handover::of(
        "kill -9 of one of three",
        at,
        &Reconciles::read(&logs(&replicas, &gone)),
        &Writes::read(&world),
        &hot,
        published(&replicas, at),
        None,
    ));

    // Its replacement, started at once (as a Deployment does): the killed replica's Lease is
    // held until it is deleted as an orphan, a minute after it expired.
    let at = join(&world, s, &mut replicas, "replica-4").await;
    let ready = ready_before(&replicas[2], at);
    figures.push(Handover::of(
        "its replacement joins",
        at,
        &Reconciles::read(&logs(&replicas, &gone)),
        &Writes::read(&world),
        &hot,
        published(&replicas[..2], at),
        ready,
    ));
    churn.stop().await;
    for r in replicas {
        r.host.stop(Duration::from_secs(10));
    }
    figures
}

#[tokio::main]
async fn main() {
    let s = Settings {
        parents: env_or("SHARD_PARENTS", 3000),
        millicores: env_or("SHARD_MILLICORES", 15) as u64,
        handover_millicores: env_or("SHARD_HANDOVER_MILLICORES", 500) as u64,
        replicas: env_or("SHARD_REPLICAS", 3),
        rounds: env_or("SHARD_ROUNDS", 2).max(1),
        hot: env_or("SHARD_HOT", 40),
        churn: Duration::from_millis(env_or("SHARD_CHURN_MS", 1000) as u64),
        handover: env_or("SHARD_HANDOVER", 1) != 0,
        beside: env_or("SHARD_BESIDE", 0) != 0,
    };
    println!(
        "{} parents; each replica held to {} millicores ({} in the handovers); {} round(s)",
        s.parents, s.millicores, s.handover_millicores, s.rounds
    );
    let mut runs = Vec::new();
    let mut beside = Vec::new();
    for round in 0..s.rounds {
        if s.beside {
            let together = tokio::sync::Barrier::new(2);
            let (one, three) = tokio::join!(
                throughput(&s, 1, s.parents, Some(&together)),
                throughput(&s, 3, 3 * s.parents, Some(&together))
            );
            beside.push((one, three));
            continue;
        }
        let mut order: Vec<usize> = (1..=s.replicas).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for n in order {
            runs.push(throughput(&s, n, s.parents, None).await);
        }
    }
    let handovers = if s.handover {
        handovers(&s).await
    } else {
        Vec::new()
    };
    report::print(&s, &runs, &handovers);
    report::print_beside(&s, &beside);
}
