//! The shard benchmark's replicas: each a `reconhost run --sharding` with webapp in a CPU cgroup
//! of its own, named by its host name (its Lease's name and the User-Agent of its writes carry
//! it), and what is read about them: the ring's Leases, CPU, memory, reconciles, and the control
//! plane's and the machine's CPU beside them.

use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::ListParams;
use reconhost_tests::bench::{GIVE_UP, until};
use reconhost_tests::host::{Host, sample};
use reconhost_tests::support::poll;
use reconhost_tests::world::{World, reconciles_any};

use crate::{heap, measure};

/// The ring's name: the Leases are `bench-<host name>-<suffix>`.
pub const RING: &str = "bench";

/// Each replica's log: the reconciler at debug, so that a reconcile which finds nothing to do
/// ("up to date") is logged too, with its parent and its time; a moved parent's first
/// reconcile by its new owner is read from there.
const LOG: &str = "warn,reconhost=info,reconhost::controller::reconciler=debug";

/// One member of the ring.
pub struct Replica {
    /// Its host name (`replica-<k>`).
    pub name: String,
    /// The process, in its CPU cgroup.
    pub host: Host,
    /// Where it writes its heap profile on SIGUSR1, when it runs a heap-profiled build
    /// (`SHARD_HEAP_HOST`).
    pub heap: Option<PathBuf>,
}

impl Replica {
    /// Starts replica `name` of the ring in the world's namespace, held to `millicores`.
    pub async fn start(world: &World, name: &str, millicores: u64) -> Self {
        let namespace = format!("--leader-election-namespace={}", world.namespace);
        let ring = format!("--sharding-ring={RING}");
        let heap_host = std::env::var_os("SHARD_HEAP_HOST").map(PathBuf::from);
        let heap = heap_host.is_some().then(|| {
            std::env::temp_dir().join(format!("reconhost-heap-{}-{name}.json", world.namespace))
        });
        let heap_file = heap.as_ref().map(|p| p.to_string_lossy().into_owned());
        let mut env = vec![("HOSTNAME", name), ("RUST_LOG", LOG)];
        if let Some(file) = &heap_file {
            env.push(("RECONHOST_HEAP_PROFILE", file));
        }
        let args = ["--sharding", namespace.as_str(), ring.as_str()];
        let host = match &heap_host {
            Some(binary) => {
                world
                    .host_held_of(binary, millicores, &["webapp"], &env, &args)
                    .await
            }
            None => world.host_held(millicores, &["webapp"], &env, &args).await,
        };
        Self {
            name: name.to_owned(),
            host,
            heap,
        }
    }

    /// Has it write its heap profile (SIGUSR1) and reads it; `None` unless it was started to
    /// write one.
    pub async fn heap_profile(&self) -> Option<heap::Profile> {
        let file = self.heap.as_ref()?;
        let pid = self.host.pid().expect("running");
        // SAFETY: a plain system call on our own running child.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR1) };
        let what = format!(
            "the heap profile at {} (is SHARD_HEAP_HOST a build with --features heap-profile?)",
            file.display()
        );
        let profile = poll(GIVE_UP, Duration::from_secs(1), &what, || async {
            heap::Profile::read(file)
        })
        .await;
        Some(profile)
    }

    /// Its CPU time so far (the cgroup's: every process in it).
    pub fn cpu(&self) -> Duration {
        self.host.cpu().map_or(Duration::ZERO, |q| q.usage())
    }

    /// The quota's throttling so far: (periods, throttled periods).
    pub fn throttling(&self) -> (u64, u64) {
        let t = self.host.cpu().map(|q| q.throttling()).unwrap_or_default();
        (t.periods, t.throttled)
    }

    /// Reconciles of webapp so far, from its log: those that wrote ("reconciled") and those
    /// that found nothing to do ("up to date").
    pub fn reconciles(&self) -> usize {
        std::fs::read_to_string(self.host.log_file())
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.contains(r#""plugin":"webapp""#)
                    && (l.contains(r#""message":"reconciled""#)
                        || l.contains(r#""message":"up to date""#))
            })
            .count()
    }

    /// `controller_runtime_reconcile_total` of webapp so far, whatever the result. With
    /// sharding it also counts, as successes, the keys a worker took off the queue and skipped
    /// because their parent had moved to another replica since they were queued.
    pub async fn counted(&self) -> f64 {
        reconciles_any(&self.host, "webapp").await
    }

    /// The parents it owns, as its metrics say.
    pub async fn owned(&self) -> f64 {
        let metrics = self.host.metrics().await.unwrap_or_default();
        sample(
            &metrics,
            "reconhost_shard_parents_owned",
            &[("plugin", "webapp")],
        )
        .unwrap_or(0.0)
    }

    /// Parents it gained and lost so far, as its metrics say: none while the ring stays as it
    /// is.
    pub async fn moved(&self) -> (f64, f64) {
        let metrics = self.host.metrics().await.unwrap_or_default();
        let moved = |direction| {
            sample(
                &metrics,
                "reconhost_shard_moved_parents_total",
                &[("direction", direction)],
            )
            .unwrap_or(0.0)
        };
        (moved("gained"), moved("lost"))
    }

    /// The children its caches hold whole and as stubs, as its metrics say.
    pub async fn children(&self) -> (f64, f64) {
        let metrics = self.host.metrics().await.unwrap_or_default();
        let form = |form| {
            sample(
                &metrics,
                "reconhost_shard_cached_children",
                &[("form", form)],
            )
            .unwrap_or(0.0)
        };
        (form("whole"), form("stub"))
    }

    /// Resident memory now, at its peak, and of it now the anonymous part (the process's
    /// own: its heap and stacks, not the pages of its binary), MiB.
    pub fn memory(&self) -> (f64, f64, f64) {
        let [peak, rss, anon] = measure::memory_mib(self.host.pid().expect("running"));
        (rss, peak, anon)
    }
}

/// Starts the replicas `names` at once (each compiles webapp under its own quota).
pub async fn start_all(world: &World, names: &[String], millicores: u64) -> Vec<Replica> {
    futures::future::join_all(
        names
            .iter()
            .map(|name| Replica::start(world, name, millicores)),
    )
    .await
}

/// The ring's Leases held now: (Lease name, its view, its acquireTime).
async fn members(world: &World) -> Vec<(String, String, Option<Timestamp>)> {
    let leases = world.api("coordination.k8s.io", "v1", "Lease", "leases");
    let selector = format!("reconhost.dev/ring={RING}");
    let Ok(list) = leases.list(&ListParams::default().labels(&selector)).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter_map(|lease| {
            let lease = serde_json::to_value(lease).ok()?;
            let held = !lease["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or("")
                .is_empty();
            held.then(|| {
                let view = lease["metadata"]["annotations"]["reconhost.dev/view"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                let acquired = lease["spec"]["acquireTime"]
                    .as_str()
                    .and_then(|t| t.parse().ok());
                let name = lease["metadata"]["name"].as_str().unwrap_or("").to_owned();
                (name, view, acquired)
            })
        })
        .collect()
}

/// Waits until exactly the replicas `names` hold Leases whose views are each the view of them
/// all (a killed replica's Lease, held until it expires and is deleted as an orphan, is left
/// out once the others no longer count it: their views say who is in).
pub async fn settled(world: &World, names: &[String]) {
    let mut want: Vec<String> = names.iter().map(|n| format!("{RING}-{n}-")).collect();
    want.sort();
    until(&format!("the ring to be {names:?}"), || async {
        let members = members(world).await;
        let mut ours: Vec<&(String, String, Option<Timestamp>)> = members
            .iter()
            .filter(|(m, _, _)| want.iter().any(|p| m.starts_with(p.as_str())))
            .collect();
        ours.sort_by(|a, b| a.0.cmp(&b.0));
        let all = ours
            .iter()
            .map(|(m, _, _)| m.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let each = ours.len() == want.len()
            && ours
                .iter()
                .zip(&want)
                .all(|((m, v, _), p)| m.starts_with(p.as_str()) && *v == all);
        each.then_some(())
    })
    .await;
}

/// When replica `name` joined the ring: its Lease's acquireTime (written from this machine's
/// clock, as the audit log's and the logs' times are).
pub async fn joined(world: &World, name: &str) -> Timestamp {
    let prefix = format!("{RING}-{name}-");
    until(&format!("{name}'s Lease"), || async {
        members(world)
            .await
            .into_iter()
            .find(|(m, _, _)| m.starts_with(&prefix))
            .and_then(|(_, _, acquired)| acquired)
    })
    .await
}

/// CPU time of the control plane's processes (etcd, the API server, the controller manager,
/// the scheduler, kwok), from the run directory's record of them.
pub fn control_plane_cpu(world: &World) -> Duration {
    let dir = world
        .cluster
        .kubeconfig()
        .parent()
        .expect("the run directory");
    reconhost_tests::registry::recorded_processes(dir)
        .into_iter()
        // The first is the run's owner (reconhost-cluster), not a component.
        .skip(1)
        .filter(|p| p.is_alive())
        .map(|p| measure::cpu_time(p.pid))
        .sum()
}

/// Busy CPU time of the whole machine so far (every core; /proc/stat's first line less idle and
/// iowait): what else ran beside the benchmark shows here.
pub fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy: u64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, t)| t)
        .sum();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_secs_f64(busy as f64 / per_second as f64)
}
