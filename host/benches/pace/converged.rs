//! When a namespace has converged, seen by watches rather than found by polling: every parent
//! shows `status.observedGeneration` equal to its `metadata.generation`, and each has its
//! Deployment and its Service (what `World::webapps_converged` counts). Three watches cost the
//! API server one event per change; listing 2,000 parents and 4,000 children every few hundred
//! milliseconds would cost it far more, on the same two cores the host and the generator use,
//! and would round the figure to the poll. The moment is taken in the task that reads the event
//! that completes the count.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, stream};
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt as _, watcher};
use reconhost_tests::world::World;
use tokio::sync::watch;

/// How long a variant may take to converge before the run is called broken: a bound, not a
/// figure.
const LIMIT: Duration = Duration::from_secs(1800);

/// Counts kept from the watch events.
#[derive(Debug, Default, Clone)]
struct Counts {
    /// Parents whose status has caught up with their generation.
    observed: usize,
    deployments: usize,
    services: usize,
    /// Whether every watch has made its initial list.
    listed: bool,
    /// When all three counts first reached the target.
    done: Option<Instant>,
}

/// Watches one namespace until it has converged.
pub struct Tracker {
    counts: watch::Receiver<Counts>,
    task: tokio::task::JoinHandle<()>,
}

/// Which watch an event came from.
#[derive(Clone, Copy)]
enum Of {
    Parents,
    Deployments,
    Services,
}

impl Tracker {
    /// Starts the watches of `world`'s namespace, for `parents` parents; returns once their
    /// initial lists are in.
    pub async fn start(world: &World, parents: usize) -> Self {
        let (tx, mut rx) = watch::channel(Counts::default());
        let watched = |api: Api<DynamicObject>, of: Of| {
            watcher(api, watcher::Config::default())
                .default_backoff()
                .map(move |event| (of, event))
                .boxed()
        };
        let mut events = stream::select_all([
            watched(world.webapps(), Of::Parents),
            watched(world.deployments(), Of::Deployments),
            watched(world.services(), Of::Services),
        ]);
        let task = tokio::spawn(async move {
            let mut sets: [HashSet<String>; 3] = Default::default();
            let mut listed = 0;
            while let Some((of, event)) = events.next().await {
                let Ok(event) = event else { continue };
                let set = &mut sets[of as usize];
                match event {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                        let name = o.metadata.name.clone().unwrap_or_default();
                        let counts = match of {
                            Of::Parents => {
                                let generation = o.metadata.generation;
                                o.data["status"]["observedGeneration"].as_i64() == generation
                                    && generation.is_some()
                            }
                            Of::Deployments | Of::Services => true,
                        };
                        if counts {
                            set.insert(name);
                        } else {
                            set.remove(&name);
                        }
                    }
                    watcher::Event::Delete(o) => {
                        set.remove(&o.metadata.name.clone().unwrap_or_default());
                    }
                    watcher::Event::Init => set.clear(),
                    watcher::Event::InitDone => listed += 1,
                }
                tx.send_modify(|c| {
                    c.observed = sets[0].len();
                    c.deployments = sets[1].len();
                    c.services = sets[2].len();
                    c.listed = listed >= 3;
                    if c.done.is_none()
                        && c.observed >= parents
                        && c.deployments >= parents
                        && c.services >= parents
                    {
                        c.done = Some(Instant::now());
                    }
                });
            }
        });
        tokio::time::timeout(Duration::from_secs(120), rx.wait_for(|c| c.listed))
            .await
            .expect("the watches listed the namespace within 2 min")
            .expect("the tracker runs");
        Self { counts: rx, task }
    }

    /// When the namespace converged; waits for it, and panics naming the counts after
    /// [`LIMIT`] since `start`.
    pub async fn converged(&mut self, start: Instant) -> Instant {
        let left = LIMIT.saturating_sub(start.elapsed());
        let waited = tokio::time::timeout(left, self.counts.wait_for(|c| c.done.is_some()))
            .await
            .map(|counts| counts.map(|c| c.done));
        match waited {
            Ok(Ok(Some(done))) => done,
            _ => {
                let c = self.counts.borrow();
                panic!(
                    "no convergence in {} s: {} parents observed, {} Deployments, {} Services",
                    LIMIT.as_secs(),
                    c.observed,
                    c.deployments,
                    c.services
                )
            }
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}
