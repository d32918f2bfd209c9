//! Load for the fault suite: parents of two example plugins (WebApps and ConfigMapGenerators),
//! specs that keep changing while a fault is injected, and the one check every scenario ends
//! with: each parent converged to its latest spec, no child duplicated, leaked or lost.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::World;

/// The example plugins the load is made of.
pub const PLUGINS: [&str; 2] = ["webapp", "configmap-generator"];

/// Creates `n` WebApps (`web-<i>`) and `n` ConfigMapGenerators (`gen-<i>`), a few at a time.
pub async fn create(world: &World, n: usize) {
    let webapps = world.webapps();
    let generators = generators(world);
    futures::stream::iter(0..n)
        .for_each_concurrent(8, |i| {
            let (webapps, generators) = (webapps.clone(), generators.clone());
            async move {
                world
                    .create(
                        &webapps,
                        json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
                           "metadata": {"name": format!("web-{i}")},
                           "spec": {"image": "nginx:1.27", "replicas": 1}}),
                    )
                    .await;
                world
                    .create(
                        &generators,
                        json!({"apiVersion": "examples.reconhost.dev/v1alpha1",
                           "kind": "ConfigMapGenerator", "metadata": {"name": format!("gen-{i}")},
                           "spec": {"content": {"round": "0"}}}),
                    )
                    .await;
            }
        })
        .await;
}

/// The ConfigMapGenerators of the world's namespace.
pub fn generators(world: &World) -> Api<DynamicObject> {
    world.api(
        "examples.reconhost.dev",
        "v1alpha1",
        "ConfigMapGenerator",
        "configmapgenerators",
    )
}

/// Spec changes running in the background: every tick, the next few parents of each kind get a
/// new spec (a WebApp's replicas, a generator's content). Failed writes (the fault) are counted
/// and dropped; the check afterwards reads each parent's spec as the API server has it, so a
/// write whose answer was lost in the fault is judged by what it left.
pub struct Churn {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// Writes the API server accepted.
    pub accepted: Arc<AtomicU64>,
    /// Writes that failed or timed out.
    pub refused: Arc<AtomicU64>,
}

impl Churn {
    /// Starts changing the specs of the `n` parents of each kind.
    pub fn start(world: &World, n: usize) -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let (webapps, generators) = (world.webapps(), generators(world));
        let accepted = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let (a, r) = (accepted.clone(), refused.clone());
        let task = tokio::spawn(async move {
            let mut round: u64 = 0;
            loop {
                round += 1;
                for k in 0..3 {
                    let i = (round as usize * 3 + k) % n;
                    let writes = [
                        (
                            &webapps,
                            format!("web-{i}"),
                            json!({"spec": {"replicas": round % 4 + 1}}),
                        ),
                        (
                            &generators,
                            format!("gen-{i}"),
                            json!({"spec": {"content": {"round": round.to_string()}}}),
                        ),
                    ];
                    for (api, name, patch) in writes {
                        let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
                        let write = api.patch(&name, &params, &patch);
                        let done = tokio::time::timeout(Duration::from_secs(5), write).await;
                        let counter = if matches!(done, Ok(Ok(_))) { &a } else { &r };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::select! {
                    _ = stopped.changed() => return,
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
        });
        Self {
            stop,
            task,
            accepted,
            refused,
        }
    }

    /// Stops it and waits for the write in flight; returns (accepted, refused).
    pub async fn stop(self) -> (u64, u64) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        (
            self.accepted.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

/// What a converged namespace holds.
#[derive(Debug, PartialEq, Eq)]
pub struct Census {
    /// The WebApps.
    pub webapps: usize,
    /// The ConfigMapGenerators.
    pub generators: usize,
}

/// Whether every parent converged to its current spec: its children exist once, are
/// controlled by it and hold what the spec asks; its status observed its generation; and no
/// child of either kind is left without a parent. The first thing that does not hold, as a
/// sentence, otherwise.
pub async fn converged(world: &World) -> Result<Census, String> {
    let list = |api: Api<DynamicObject>| async move {
        api.list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|o| serde_json::to_value(o).expect("JSON"))
                    .collect::<Vec<Value>>()
            })
            .map_err(|e| format!("listing: {e}"))
    };
    let webapps = list(world.webapps()).await?;
    let generators = list(generators(world)).await?;
    let deployments = by_name(list(world.deployments()).await?);
    let services = by_name(list(world.services()).await?);
    let config_maps = by_name(list(world.config_maps()).await?);

    let mut parents = HashSet::new();
    for app in &webapps {
        let name = app["metadata"]["name"].as_str().unwrap_or("");
        observed(app)?;
        parents.insert(app["metadata"]["uid"].clone());
        let d = child(&deployments, name, app, "Deployment")?;
        if d["spec"]["replicas"] != app["spec"]["replicas"] {
            return Err(format!(
                "Deployment {name} has {} replicas, its WebApp asks for {}",
                d["spec"]["replicas"], app["spec"]["replicas"]
            ));
        }
        child(&services, name, app, "Service")?;
    }
    for generator in &generators {
        let name = generator["metadata"]["name"].as_str().unwrap_or("");
        observed(generator)?;
        parents.insert(generator["metadata"]["uid"].clone());
        let cm = child(&config_maps, name, generator, "ConfigMap")?;
        if cm["data"] != generator["spec"]["content"] {
            return Err(format!(
                "ConfigMap {name} holds {}, its generator asks for {}",
                cm["data"], generator["spec"]["content"]
            ));
        }
    }
    for (kind, children) in [
        ("Deployment", &deployments),
        ("Service", &services),
        ("ConfigMap", &config_maps),
    ] {
        for (name, c) in children {
            let owner = &c["metadata"]["ownerReferences"][0];
            if owner.is_object() && !parents.contains(&owner["uid"]) {
                return Err(format!(
                    "{kind} {name} is left behind: its owner {} is gone",
                    owner["uid"]
                ));
            }
        }
    }
    Ok(Census {
        webapps: webapps.len(),
        generators: generators.len(),
    })
}

fn by_name(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|o| (o["metadata"]["name"].as_str().unwrap_or("").to_owned(), o))
        .collect()
}

fn observed(parent: &Value) -> Result<(), String> {
    let name = parent["metadata"]["name"].as_str().unwrap_or("");
    if parent["status"]["observedGeneration"] != parent["metadata"]["generation"] {
        return Err(format!(
            "{name} shows observedGeneration {}, its generation is {}",
            parent["status"]["observedGeneration"], parent["metadata"]["generation"]
        ));
    }
    let synced = super::condition(parent, "Synced").map(|c| c["status"].clone());
    if synced != Some(json!("True")) {
        return Err(format!(
            "{name} is not Synced: {:?}",
            parent["status"]["conditions"]
        ));
    }
    Ok(())
}

/// The one child of `kind` named `name`, controlled by `parent`.
fn child<'a>(
    children: &'a BTreeMap<String, Value>,
    name: &str,
    parent: &Value,
    kind: &str,
) -> Result<&'a Value, String> {
    let c = children
        .get(name)
        .ok_or_else(|| format!("{kind} {name} is missing"))?;
    if !super::controlled_by(c, parent) {
        return Err(format!("{kind} {name} is not controlled by its parent"));
    }
    Ok(c)
}

/// Waits until [`converged`] holds, for at most `limit`, and returns how long it took; panics
/// with what still did not hold and the host's log.
pub async fn wait_converged(world: &World, limit: Duration, log: &std::path::Path) -> Duration {
    let start = Instant::now();
    loop {
        let why = match converged(world).await {
            Ok(_) => return start.elapsed(),
            Err(why) => why,
        };
        assert!(
            start.elapsed() < limit,
            "not converged after {} s: {why} (host log: {})",
            limit.as_secs(),
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
