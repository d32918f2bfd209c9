//! Several active replicas with `--sharding` under load (WebApps and ConfigMapGenerators, specs
//! changing throughout): scaled 1 → 2 → 3 → 2 and restarted one by one, one of three killed
//! with `kill -9`, one of three cut off from the API server, one of three paused (`SIGSTOP`)
//! past its Lease, and a plugin upgraded while a member joins. Each time every parent converges, nothing is duplicated, leaked or lost, the
//! members split the parents exactly, and the audit log shows no two replicas writing for the
//! same parent within one handover.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use reconhost_tests::host::{Host, sample};
use reconhost_tests::support::eventually;
use reconhost_tests::{ControlPlane, TestCluster};
use serde_json::json;

use super::common::load::{self, Churn};
use super::common::{self, World};
use super::{PARENTS, RECOVER, private_plane, recovered};

/// The ring's name in these scenarios.
const RING: &str = "faults";

/// A replica named `name` (its host name) in the ring, serving the load's plugins, through
/// `kubeconfig` if given.
async fn replica(world: &World, name: &str, kubeconfig: Option<&std::path::Path>) -> Host {
    member(world, name, &load::PLUGINS, &[], kubeconfig).await
}

/// A replica named `name` in the ring, with these plugins and more arguments.
async fn member(
    world: &World,
    name: &str,
    plugins: &[&str],
    more: &[&str],
    kubeconfig: Option<&std::path::Path>,
) -> Host {
    let namespace = format!("--leader-election-namespace={}", world.namespace);
    let ring = format!("--sharding-ring={RING}");
    let mut args = vec!["--sharding", namespace.as_str(), ring.as_str()];
    args.extend(more);
    let env = [("HOSTNAME", name), ("RUST_LOG", "info,reconhost=debug")];
    let kubeconfig = kubeconfig.unwrap_or(world.cluster.kubeconfig());
    world
        .host_from(kubeconfig, &world.namespace, plugins, &env, &args)
        .await
}

/// Waits until the members named `names` (by the host name their Leases' names start with; a
/// name twice for an old and a new replica of one host) are each in the ring and each serves
/// under the view of exactly them. Other Leases (a killed member's, until it is deleted as an
/// orphan) are not looked at.
async fn settled(world: &World, names: &[&str]) {
    let leases = world.api("coordination.k8s.io", "v1", "Lease", "leases");
    let mut want: Vec<String> = names.iter().map(|n| format!("{RING}-{n}-")).collect();
    want.sort();
    eventually(RECOVER, &format!("the ring to be {names:?}"), || async {
        let selector = format!("reconhost.dev/ring={RING}");
        let list = leases
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
            .ok()?;
        let mut members: Vec<(String, String)> = Vec::new();
        for lease in list.items {
            let lease = serde_json::to_value(lease).ok()?;
            let name = lease["metadata"]["name"].as_str()?.to_owned();
            let held = !lease["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or("")
                .is_empty();
            if held && want.iter().any(|prefix| name.starts_with(prefix)) {
                let view = lease["metadata"]["annotations"]["reconhost.dev/view"].as_str()?;
                members.push((name, view.to_owned()));
            }
        }
        members.sort();
        let mut prefixes: Vec<&String> = members
            .iter()
            .filter_map(|(m, _)| want.iter().find(|p| m.starts_with(p.as_str())))
            .collect();
        prefixes.sort();
        let all = members
            .iter()
            .map(|(m, _)| m.as_str())
            .collect::<Vec<_>>()
            .join(",");
        (prefixes == want.iter().collect::<Vec<_>>() && members.iter().all(|(_, v)| *v == all))
            .then_some(())
    })
    .await;
}

/// The ring's Leases: each one's name and acquireTime.
async fn leases(world: &World) -> Vec<(String, Option<Timestamp>)> {
    let leases = world.api("coordination.k8s.io", "v1", "Lease", "leases");
    let selector = format!("reconhost.dev/ring={RING}");
    let list = leases
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .expect("listing the ring's Leases");
    list.items
        .into_iter()
        .map(|lease| {
            let lease = serde_json::to_value(lease).expect("a Lease as JSON");
            let acquired = lease["spec"]["acquireTime"]
                .as_str()
                .and_then(|t| t.parse().ok());
            (
                lease["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                acquired,
            )
        })
        .collect()
}

/// `host`, the replica `name`, joined the ring only once it was ready: its Lease was acquired
/// after it logged that its plugins were loaded and its caches synced, so the members serving
/// the parents it took kept serving them while it loaded.
async fn joined_once_ready(world: &World, host: &Host, name: &str) {
    let ready: Timestamp = host
        .logs()
        .iter()
        .find(|l| l["message"] == "caches synced; ready")
        .and_then(|l| l["timestamp"].as_str()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} logged no readiness"));
    let prefix = format!("{RING}-{name}-");
    let acquired = leases(world)
        .await
        .into_iter()
        .filter(|(lease, _)| lease.starts_with(&prefix))
        .find_map(|(_, acquired)| acquired)
        .unwrap_or_else(|| panic!("{name}'s Lease has no acquireTime"));
    assert!(
        acquired >= ready,
        "{name} joined at {acquired}, before it was ready at {ready}"
    );
}

/// Every parent of the load owned by exactly one of `hosts`, as their metrics say, and each
/// of them owning some.
async fn split_exactly(hosts: &[&Host]) {
    for plugin in load::PLUGINS {
        split_by(hosts, plugin, PARENTS).await;
    }
}

/// `parents` of `plugin` owned by exactly one of `hosts` each, and each host owning some.
async fn split_by(hosts: &[&Host], plugin: &str, parents: usize) {
    eventually(
        RECOVER,
        &format!("the members to split {plugin}'s parents exactly"),
        || async {
            let mut total = 0.0;
            for host in hosts {
                let metrics = host.metrics().await.ok()?;
                let owned = sample(
                    &metrics,
                    "reconhost_shard_parents_owned",
                    &[("plugin", plugin)],
                )?;
                if owned == 0.0 {
                    return None;
                }
                total += owned;
            }
            (total == parents as f64).then_some(())
        },
    )
    .await;
}

/// Every child cached whole by some member of `hosts`, and each member holding most of them
/// (those of the others' parents) as stubs: a replica's memory for children falls with the
/// number of replicas.
async fn children_sieved(hosts: &[&Host]) {
    eventually(
        RECOVER,
        "each member to cache whole only its own parents' children",
        || async {
            let mut whole_anywhere = 0.0;
            let mut cached = Vec::new();
            for host in hosts {
                let metrics = host.metrics().await.ok()?;
                let whole = sample(
                    &metrics,
                    "reconhost_shard_cached_children",
                    &[("form", "whole")],
                )?;
                let stubs = sample(
                    &metrics,
                    "reconhost_shard_cached_children",
                    &[("form", "stub")],
                )?;
                whole_anywhere += whole;
                cached.push((whole, stubs));
            }
            let all = cached.iter().map(|(w, s)| w + s).fold(0.0, f64::max);
            // A member's share is about 1/n, and never more than half of the children with
            // three members; their metrics are read a moment apart, hence the margins.
            let members = hosts.len() as f64;
            (all > 0.0
                && whole_anywhere >= all
                && cached
                    .iter()
                    .all(|(w, s)| s / (w + s) >= (members - 1.0) / members - 0.2))
            .then_some(())
        },
    )
    .await;
}

/// The moments the ring was changed on purpose, in the API server's clock (the same machine).
#[derive(Default)]
struct Marks(Vec<Timestamp>);

impl Marks {
    fn now(&mut self) {
        self.0.push(Timestamp::now());
    }
}

/// The first parent for which two replicas wrote within one handover: between two changes of
/// the ring its writes come from at most two replicas, one after the other (the owner before
/// the move, then the one after). The parent of a write is the object's name up to the first
/// dot (an Event's name is its object's and a suffix), less `suffix` (a child's name is its
/// parent's and a suffix); the ring's own Leases are left out. Returns how many writes it
/// looked at.
fn no_two_writers(world: &World, marks: &Marks, suffix: &str) -> Result<usize, String> {
    let events = world
        .cluster
        .audit_log()
        .events_in(&world.namespace)
        .map_err(|e| format!("the audit log: {e}"))?;
    let mut writes: BTreeMap<String, Vec<(Timestamp, String)>> = BTreeMap::new();
    for event in events.into_iter().filter(|e| e.by_reconhost()) {
        let Some(object) = &event.object_ref else {
            continue;
        };
        if object.resource == "leases" || object.name.is_empty() {
            continue;
        }
        let Some(replica) = event.replica() else {
            continue;
        };
        let at: Timestamp = event
            .stage_timestamp
            .parse()
            .map_err(|e| format!("{}: {e}", event.stage_timestamp))?;
        let name = object.name.split('.').next().unwrap_or_default();
        let parent = name.strip_suffix(suffix).unwrap_or(name).to_owned();
        writes
            .entry(parent)
            .or_default()
            .push((at, replica.to_owned()));
    }
    let mut checked = 0;
    for (parent, mut list) in writes {
        list.sort();
        checked += list.len();
        let interval = |at: &Timestamp| marks.0.iter().filter(|m| *m <= at).count();
        let mut runs: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        for (at, replica) in &list {
            let run = runs.entry(interval(at)).or_default();
            if run.last() != Some(&replica.as_str()) {
                run.push(replica);
            }
        }
        if let Some((i, run)) = runs.iter().find(|(_, run)| run.len() > 2) {
            return Err(format!(
                "{parent}: between change {i} and the next, writes came from {run:?} in turn"
            ));
        }
    }
    Ok(checked)
}

/// A plane, a namespace and the load converged under `first` replicas, then specs changing.
async fn start(name: &str, first: &[&str]) -> (ControlPlane, World, Vec<Host>) {
    let plane = private_plane(name, Vec::new()).await;
    let world = World::on(TestCluster::at(plane.kubeconfig()), name).await;
    let mut hosts = Vec::new();
    for replica_name in first {
        hosts.push(replica(&world, replica_name, None).await);
    }
    settled(&world, first).await;
    load::create(&world, PARENTS).await;
    load::wait_converged(&world, RECOVER, hosts[0].log_file()).await;
    (plane, world, hosts)
}

#[tokio::test]
async fn sharding_scaled_up_and_down_and_restarted_under_load() {
    let (_plane, world, mut hosts) = start("shard-scale", &["replica-a"]).await;
    let mut marks = Marks::default();
    let churn = Churn::start(&world, PARENTS);

    marks.now();
    hosts.push(replica(&world, "replica-b", None).await);
    settled(&world, &["replica-a", "replica-b"]).await;
    joined_once_ready(&world, &hosts[1], "replica-b").await;
    marks.now();
    hosts.push(replica(&world, "replica-c", None).await);
    settled(&world, &["replica-a", "replica-b", "replica-c"]).await;
    split_exactly(&hosts.iter().collect::<Vec<_>>()).await;
    children_sieved(&hosts.iter().collect::<Vec<_>>()).await;

    // Scale down: c leaves gracefully (drains, deletes its Lease).
    marks.now();
    hosts.pop().expect("c").stop(Duration::from_secs(20));
    settled(&world, &["replica-a", "replica-b"]).await;

    // A rolling restart: each replica stops and a new one (a new member) takes its place.
    for (i, name) in ["replica-a", "replica-b"].into_iter().enumerate() {
        marks.now();
        let old = std::mem::replace(&mut hosts[i], replica(&world, name, None).await);
        settled(&world, &["replica-a", "replica-b", name]).await;
        marks.now();
        old.stop(Duration::from_secs(20));
        settled(&world, &["replica-a", "replica-b"]).await;
    }
    let back = Instant::now();
    let (accepted, _) = churn.stop().await;
    assert!(accepted > 0, "specs changed throughout");
    split_exactly(&hosts.iter().collect::<Vec<_>>()).await;
    let mut last = hosts.pop().expect("b");
    recovered("shard-scale", &world, &mut last, back).await;
    let checked = no_two_writers(&world, &marks, "").unwrap_or_else(|e| panic!("{e}"));
    assert!(checked > 0, "the audit log has the replicas' writes");
}

#[tokio::test]
async fn a_member_killed_under_load_and_the_others_take_its_parents() {
    let names = ["replica-a", "replica-b", "replica-c"];
    let (_plane, world, mut hosts) = start("shard-kill", &names).await;
    split_exactly(&hosts.iter().collect::<Vec<_>>()).await;
    let mut marks = Marks::default();
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // kill -9: no drain, no deleted Lease; the others wait for it to expire.
    marks.now();
    hosts.pop().expect("c").kill();
    let killed = Instant::now();
    settled(&world, &names[..2]).await;
    // Its Lease goes as soon as the others see it expire: `kubectl get leases` lists the
    // members, and a replacement started now does not count it alive for another duration.
    eventually(
        Duration::from_secs(5),
        "the killed member's Lease deleted",
        || async {
            let left = leases(&world).await;
            (!left
                .iter()
                .any(|(name, _)| name.starts_with(&format!("{RING}-replica-c-"))))
            .then_some(())
        },
    )
    .await;
    churn.stop().await;
    split_exactly(&hosts.iter().collect::<Vec<_>>()).await;
    children_sieved(&hosts.iter().collect::<Vec<_>>()).await;
    let mut a = hosts.remove(0);
    recovered("shard-kill", &world, &mut a, killed).await;
    no_two_writers(&world, &marks, "").unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn a_member_cut_off_from_the_api_server_stops_writing_and_rejoins() {
    let plane = private_plane("shard-stall", Vec::new()).await;
    let world = World::on(TestCluster::at(plane.kubeconfig()), "shard-stall").await;
    let proxy = reconhost_tests::toxiproxy::Toxiproxy::start(&plane.dir().join("logs"))
        .expect("starting toxiproxy");
    let port = proxy
        .proxy("apiserver", plane.server().trim_start_matches("https://"))
        .expect("a proxy to the API server");
    let text = std::fs::read_to_string(plane.kubeconfig()).expect("the kubeconfig");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("a JSON kubeconfig");
    config["clusters"][0]["cluster"]["server"] = json!(format!("https://127.0.0.1:{port}"));
    let proxied = plane.dir().join("kubeconfig-proxied");
    std::fs::write(&proxied, config.to_string()).expect("writing the kubeconfig");

    let names = ["replica-a", "replica-b", "replica-c"];
    let mut hosts = [
        replica(&world, "replica-a", None).await,
        replica(&world, "replica-b", None).await,
        replica(&world, "replica-c", Some(&proxied)).await,
    ];
    settled(&world, &names).await;
    load::create(&world, PARENTS).await;
    load::wait_converged(&world, RECOVER, hosts[0].log_file()).await;
    let mut marks = Marks::default();
    let churn = Churn::start(&world, PARENTS);

    // Nothing reaches c and nothing closes: it cannot renew, so it stops and fences itself;
    // the others take its parents once its Lease has expired.
    marks.now();
    proxy
        .add_toxic(
            "apiserver",
            "stall",
            "timeout",
            "downstream",
            json!({"timeout": 0}),
        )
        .expect("stalling c's connection");
    settled(&world, &names[..2]).await;
    let c = &hosts[2];
    eventually(RECOVER, "c to say it stopped", || async {
        c.logs()
            .iter()
            .any(|l| {
                l["message"]
                    == "could not renew within the renew deadline; reconciling nothing until it can"
            })
            .then_some(())
    })
    .await;

    // Back: c rejoins as a new member and gets its share again.
    marks.now();
    proxy
        .remove_toxic("apiserver", "stall")
        .expect("ending the stall");
    settled(&world, &names).await;
    let back = Instant::now();
    churn.stop().await;
    split_exactly(&hosts.iter().collect::<Vec<_>>()).await;
    recovered("shard-stall", &world, &mut hosts[0], back).await;
    no_two_writers(&world, &marks, "").unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn a_plugin_upgraded_while_a_member_joins() {
    let plane = private_plane("shard-upgrade", Vec::new()).await;
    let world = World::on(TestCluster::at(plane.kubeconfig()), "shard-upgrade").await;
    let dir = std::env::temp_dir().join(format!("reconhost-shard-{}", world.namespace));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let file = dir.join("stamp.wasm");
    std::fs::copy(common::plugin("lifecycle-v1"), &file).expect("version 1");
    let file_arg = format!("--plugin={}", file.display());
    let more = [file_arg.as_str(), "--watch"];
    let mut hosts = vec![
        member(&world, "replica-a", &[], &more, None).await,
        member(&world, "replica-b", &[], &more, None).await,
    ];
    settled(&world, &["replica-a", "replica-b"]).await;
    let stamps = world.api("test.reconhost.dev", "v1", "Stamp", "stamps");
    const STAMPS: usize = 60;
    for i in 0..STAMPS {
        world
            .create(
                &stamps,
                json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Stamp",
                       "metadata": {"name": format!("s-{i}")}, "spec": {"value": i}}),
            )
            .await;
    }
    let served_by = |version: &'static str| {
        let stamps = stamps.clone();
        async move {
            eventually(
                RECOVER,
                &format!("every Stamp served by {version}"),
                || async {
                    let list = stamps.list(&Default::default()).await.ok()?;
                    let all = list.items.len() == STAMPS
                        && list.items.iter().all(|s| {
                            s.data["status"]["servedBy"] == version
                                && s.data["status"]["value"] == s.data["spec"]["value"]
                        });
                    all.then_some(())
                },
            )
            .await;
        }
    };
    served_by("1").await;

    // A member joins and, at the same moment, the plugin's file is replaced by version 2: the
    // replicas swap revisions while parents change owner.
    let mut marks = Marks::default();
    marks.now();
    hosts.push(member(&world, "replica-c", &[], &more, None).await);
    let tmp = file.with_extension("tmp");
    std::fs::copy(common::plugin("lifecycle-v2"), &tmp).expect("version 2");
    std::fs::rename(&tmp, &file).expect("replacing the plugin");
    settled(&world, &["replica-a", "replica-b", "replica-c"]).await;
    served_by("2").await;
    split_by(&hosts.iter().collect::<Vec<_>>(), "stamp", STAMPS).await;
    for host in &mut hosts {
        host.check_alive().expect("every replica runs");
    }
    no_two_writers(&world, &marks, "-stamp").unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `signal` (`STOP`, `CONT`) to the process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

#[tokio::test]
async fn a_member_paused_past_its_lease_writes_nothing_when_it_wakes() {
    let names = ["replica-a", "replica-b", "replica-c"];
    let (_plane, world, mut hosts) = start("shard-pause", &names).await;
    split_exactly(&hosts.iter().collect::<Vec<_>>()).await;
    let mut marks = Marks::default();
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Frozen mid-work, as a stopped VM or a long GC pause would be: its reconciles in flight
    // wake up after the others have taken their parents, and its fence must hold their writes.
    marks.now();
    let pid = hosts[2].pid().expect("c runs");
    signal(pid, "STOP");
    settled(&world, &names[..2]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    marks.now();
    let woke = Timestamp::now();
    signal(pid, "CONT");
    settled(&world, &names).await;
    let back = Instant::now();
    churn.stop().await;
    split_exactly(&hosts.iter().collect::<Vec<_>>()).await;
    recovered("shard-pause", &world, &mut hosts[0], back).await;
    no_two_writers(&world, &marks, "").unwrap_or_else(|e| panic!("{e}"));
    // Between waking and publishing the view it rejoins under, it owns nothing: any write of
    // its then is one of its reconciles from before the pause, which the fence must refuse.
    let rejoined = hosts[2]
        .logs()
        .iter()
        .filter(|l| l["message"] == "serving under a new view")
        .filter_map(|l| l["timestamp"].as_str()?.parse::<Timestamp>().ok())
        .filter(|at| *at > woke)
        .min()
        .expect("the woken member rejoined");
    let stale: Vec<String> = world
        .cluster
        .audit_log()
        .events_in(&world.namespace)
        .expect("the audit log")
        .into_iter()
        .filter(|e| e.replica() == Some("replica-c"))
        .filter(|e| ["create", "update", "patch", "delete"].contains(&e.verb.as_str()))
        .filter(|e| {
            e.object_ref
                .as_ref()
                .is_some_and(|o| o.resource != "leases")
        })
        .filter(|e| {
            e.stage_timestamp
                .parse::<Timestamp>()
                .is_ok_and(|at| woke < at && at < rejoined)
        })
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect();
    assert!(
        stale.is_empty(),
        "the woken member wrote before it rejoined: {stale:?}"
    );
}
