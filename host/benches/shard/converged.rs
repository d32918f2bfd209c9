//! When each WebApp of a namespace first showed its generation observed, from one watch of the
//! benchmark's own: finer than listing thousands of parents every few seconds, and no load on
//! the API server beyond one more watcher.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt as _;
use kube::runtime::watcher;
use reconhost_tests::world::World;
use tokio::task::JoinHandle;

/// A watch of the namespace's WebApps running in the background.
pub struct Convergence {
    /// Parent name → when it was first seen with `status.observedGeneration` equal to its
    /// `metadata.generation`.
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    task: JoinHandle<()>,
}

impl Convergence {
    /// Starts watching and waits for the watch's first listing.
    pub async fn start(world: &World) -> Self {
        let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let webapps = world.webapps();
        let into = seen.clone();
        let task = tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut events = std::pin::pin!(watcher(webapps, watcher::Config::default()));
            while let Ok(Some(event)) = events.try_next().await {
                let object = match event {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => o,
                    watcher::Event::InitDone => {
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let object = serde_json::to_value(&object).unwrap_or_default();
                let observed = object["status"]["observedGeneration"].as_i64();
                if observed.is_some() && observed == object["metadata"]["generation"].as_i64() {
                    let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
                    into.lock()
                        .expect("lock")
                        .entry(name)
                        .or_insert_with(Instant::now);
                }
            }
        });
        listed.await.expect("the watch's first listing");
        Self { seen, task }
    }

    /// Waits until `n` parents have converged, at most `limit`; returns when the last of them
    /// did.
    pub async fn all(&self, n: usize, limit: Duration) -> Instant {
        let what = format!("{n} WebApps to converge");
        reconhost_tests::support::poll(limit, Duration::from_millis(50), &what, || async {
            let seen = self.seen.lock().expect("lock");
            (seen.len() >= n).then(|| *seen.values().max().expect("some"))
        })
        .await
    }
}

impl Drop for Convergence {
    fn drop(&mut self) {
        self.task.abort();
    }
}
