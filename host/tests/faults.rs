//! The fault-injection suite: each scenario starts a control plane of its own, puts a host
//! under load (WebApps and ConfigMapGenerators, specs changing throughout), injects one fault,
//! and then requires what a user would check: every parent converged to its latest spec, no
//! child duplicated, leaked or lost, the host still running and ready. The time from the end
//! of the fault to convergence is printed as `recovery: <scenario> <seconds>` for
//! docs/RELIABILITY.md; no test asserts on it.

mod common;

use std::time::{Duration, Instant};

use common::load::{self, Churn};
use common::{World, condition, get};
use kube::api::{Patch, PatchParams};
use reconhost_tests::host::{Host, sample};
use reconhost_tests::support::{eventually, unique_suffix};
use reconhost_tests::toxiproxy::Toxiproxy;
use reconhost_tests::{ControlPlane, Options, Stop, TestCluster};
use serde_json::json;

/// Parents of each example plugin in every scenario.
const PARENTS: usize = 120;

/// Bound on convergence after a fault, on a small busy machine: a limit, not a measurement.
const RECOVER: Duration = Duration::from_secs(240);

/// A scenario's world: its own control plane, a namespace on it, a host with both plugins
/// (and `args`), the load created and converged once before the fault.
async fn under_load(name: &str, args: &[&str]) -> (ControlPlane, World, Host) {
    let plane = ControlPlane::start(Options {
        name: Some(format!("fault-{name}-{}", unique_suffix())),
        crds: reconhost_tests::crds::bundled(),
        ..Options::default()
    })
    .await
    .expect("starting a private control plane");
    let world = World::on(TestCluster::at(plane.kubeconfig()), name).await;
    let host = world
        .host_with(
            &load::PLUGINS,
            &[("RUST_LOG", "info,reconhost=debug")],
            args,
        )
        .await;
    load::create(&world, PARENTS).await;
    load::wait_converged(&world, RECOVER, host.log_file()).await;
    (plane, world, host)
}

/// The checks after a fault: converged (timed from `since`), the host alive and ready.
async fn recovered(scenario: &str, world: &World, host: &mut Host, since: Instant) {
    load::wait_converged(world, RECOVER, host.log_file()).await;
    let census = load::converged(world).await.expect("still converged");
    assert_eq!(
        (census.webapps, census.generators),
        (PARENTS, PARENTS),
        "no parent lost"
    );
    if let Err(e) = host.check_alive() {
        panic!("the host exited: {e}");
    }
    assert!(host.is_ready().await, "the host is ready");
    eprintln!("recovery: {scenario} {:.1}", since.elapsed().as_secs_f64());
}

/// Whether the host's log has a line with this message.
fn logged(host: &Host, message: &str) -> bool {
    host.logs().iter().any(|l| l["message"] == message)
}

#[tokio::test]
async fn etcd_killed_and_restarted_on_its_data() {
    let (mut plane, world, mut host) = under_load("etcd", &[]).await;
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Down longer than the churn waits for one write: the API server holds writes while its
    // storage is gone, and some give up.
    plane
        .restart_etcd(Stop::Kill, Duration::from_secs(8))
        .await
        .expect("restarting etcd");
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (accepted, refused) = churn.stop().await;
    assert!(accepted > 0, "specs changed around the fault");
    assert!(
        refused > 0,
        "the fault held writes up ({accepted} accepted)"
    );
    recovered("etcd-kill", &world, &mut host, back).await;
}

#[tokio::test]
async fn api_server_killed_and_restarted() {
    let (mut plane, world, mut host) = under_load("apiserver", &[]).await;
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    plane
        .restart_api_server_after(Stop::Kill, Duration::from_secs(3), |_| {})
        .await
        .expect("restarting kube-apiserver");
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (accepted, refused) = churn.stop().await;
    assert!(
        accepted > 0 && refused > 0,
        "specs changed around the fault"
    );
    recovered("apiserver-kill", &world, &mut host, back).await;
    assert!(
        logged(&host, "watch failed; retrying with backoff"),
        "the kill cut the host's watches (see {})",
        host.log_file().display()
    );
}

#[tokio::test]
async fn watch_history_compacted_while_the_host_is_disconnected() {
    let (mut plane, world, mut host) = under_load("compaction", &[]).await;
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // While the API server is down, etcd forgets every revision the host's watches could
    // resume from: their resourceVersions are all older than the compaction.
    let mut compacted = None;
    plane
        .restart_api_server_after(Stop::Graceful, Duration::from_secs(1), |plane| {
            compacted = Some(plane.compact_etcd().expect("compacting etcd"));
        })
        .await
        .expect("restarting kube-apiserver");
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    churn.stop().await;
    recovered("compaction", &world, &mut host, back).await;
    assert!(compacted.is_some_and(|revision| revision > 1));
    assert!(
        logged(&host, "relisted"),
        "a watch that could not resume relisted (see {})",
        host.log_file().display()
    );
}

#[tokio::test]
async fn host_killed_in_a_burst_of_applies_and_restarted() {
    let plane = ControlPlane::start(Options {
        name: Some(format!("fault-hostkill-{}", unique_suffix())),
        crds: reconhost_tests::crds::bundled(),
        ..Options::default()
    })
    .await
    .expect("starting a private control plane");
    let world = World::on(TestCluster::at(plane.kubeconfig()), "hostkill").await;
    let host = world.host(&load::PLUGINS, &[]).await;
    // The burst: every parent created at once, the host killed once some of its children
    // exist and before all do.
    load::create(&world, PARENTS).await;
    eventually(common::CONVERGE, "a third of the Deployments", || async {
        let n = world
            .deployments()
            .list(&Default::default())
            .await
            .ok()?
            .items
            .len();
        (n >= PARENTS / 3).then_some(())
    })
    .await;
    let made = world
        .deployments()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    host.kill();
    let killed = Instant::now();
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    churn.stop().await;
    let mut host = world.host(&load::PLUGINS, &[]).await;
    recovered("host-kill", &world, &mut host, killed).await;
    assert!(
        made < PARENTS,
        "killed mid-burst ({made} of {PARENTS} Deployments made)"
    );
    drop(plane);
}

#[tokio::test]
async fn a_fast_plugin_is_not_held_up_by_a_slow_one_with_a_deep_queue() {
    let plane = ControlPlane::start(Options {
        name: Some(format!("fault-slow-{}", unique_suffix())),
        crds: reconhost_tests::crds::bundled(),
        ..Options::default()
    })
    .await
    .expect("starting a private control plane");
    let world = World::on(TestCluster::at(plane.kubeconfig()), "slowfast").await;
    let host = world
        .host_with(
            &["control-slow", "webapp"],
            &[],
            &["--max-concurrent-reconciles=1"],
        )
        .await;
    // 40 parents at 1.5 s each: a minute of work queued for the slow plugin.
    let slows = world.api("test.reconhost.dev", "v1", "Slow", "slows");
    for i in 0..40 {
        world
            .create(
                &slows,
                json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Slow",
                       "metadata": {"name": format!("slow-{i}")}, "spec": {}}),
            )
            .await;
    }
    let start = Instant::now();
    world.create_webapp("fast", "nginx:1.27", 1).await;
    eventually(common::CONVERGE, "the fast plugin's Deployment", || async {
        get(&world.deployments(), "fast").await
    })
    .await;
    let latency = start.elapsed();
    let metrics = host.metrics().await.expect("metrics");
    let depth = sample(
        &metrics,
        "workqueue_depth",
        &[("controller", "control-slow"), ("priority", "0")],
    )
    .unwrap_or(0.0);
    let slow_done = world
        .config_maps()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    assert!(
        depth >= 10.0,
        "the fast plugin's parent was reconciled while the slow plugin still had {depth} parents queued ({slow_done} ConfigMaps made)"
    );
    eprintln!("recovery: slow-beside-fast {:.1}", latency.as_secs_f64());
}

/// A field manager that keeps setting `.spec.replicas` of one Deployment to 5, for `period`.
async fn fight(world: &World, name: &str, period: Duration) -> usize {
    let params = PatchParams {
        field_manager: Some("replica-fighter".into()),
        ..PatchParams::default()
    };
    let deployments = world.deployments();
    let start = Instant::now();
    let mut writes = 0;
    while start.elapsed() < period {
        if let Some(d) = get(&deployments, name).await
            && d["spec"]["replicas"] != 5
        {
            let patch = Patch::Merge(json!({"spec": {"replicas": 5}}));
            if deployments.patch(name, &params, &patch).await.is_ok() {
                writes += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    writes
}

#[tokio::test]
async fn a_controller_fight_trips_the_breaker_and_it_closes_when_the_fight_stops() {
    let args = [
        "--fight-threshold=3",
        "--fight-window=10s",
        "--fight-backoff=8s",
    ];
    let (_plane, world, host) = under_load("fight", &args).await;
    let mark = world.writes();
    let fighter_writes = fight(&world, "web-7", Duration::from_secs(20)).await;

    // The parent says who fights over what, an event says it happened, the metric counts it.
    let app = get(&world.webapps(), "web-7").await.expect("the WebApp");
    let contested = condition(&app, "Contested").expect("a Contested condition");
    assert_eq!(contested["status"], "True");
    assert_eq!(contested["reason"], "FieldManagerConflict");
    let message = contested["message"].as_str().unwrap_or("");
    assert!(
        message.contains("\"replica-fighter\"") && message.contains(".spec.replicas"),
        "the condition names the manager and the field: {message}"
    );
    let events = world.events_for("web-7").await;
    assert!(
        events
            .iter()
            .any(|(t, r, _)| t == "Warning" && r == "ControllerFight"),
        "a Warning event: {events:?}"
    );
    let metrics = host.metrics().await.expect("metrics");
    let trips = sample(
        &metrics,
        "reconhost_controller_fights_total",
        &[("plugin", "webapp")],
    )
    .unwrap_or(0.0);
    assert!(trips >= 1.0, "the trip is counted");

    // The host stopped answering the fighter: two re-applies (the third strike trips the
    // breaker), then one per hold (8 s, then 16 s). Without the breaker it would answer every
    // write, five a second for 20 s. The fighter writes only over the host's value.
    let host_applies = world
        .host_writes_since(mark)
        .iter()
        .filter(|w| w.starts_with("patch") && w.contains("/deployments/web-7"))
        .count();
    assert!(
        (2..=5).contains(&host_applies),
        "{host_applies} re-applies of web-7 in a 20 s fight"
    );
    assert!(
        fighter_writes <= host_applies + 1,
        "the fighter's value stood while the breaker held ({fighter_writes} writes by it)"
    );

    // The fight is over: after the hold the host re-applies once, nobody undoes it, and a
    // quiet window later the condition says so.
    eventually(RECOVER, "the plugin's replicas back on web-7", || async {
        let d = get(&world.deployments(), "web-7").await?;
        (d["spec"]["replicas"] == 1).then_some(())
    })
    .await;
    eventually(RECOVER, "Contested=False on web-7", || async {
        let app = get(&world.webapps(), "web-7").await?;
        (condition(&app, "Contested")?["status"] == "False").then_some(())
    })
    .await;
    load::wait_converged(&world, RECOVER, host.log_file()).await;
    let others = world.webapps().list(&Default::default()).await.unwrap();
    let uninvolved = others
        .items
        .iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .filter(|o| o["metadata"]["name"] != "web-7")
        .filter(|o| condition(o, "Contested").is_some())
        .count();
    assert_eq!(uninvolved, 0, "no other parent shows a fight");
}

/// The user the throttled host acts as (impersonated by the administrator's kubeconfig), so
/// that API Priority and Fairness classifies it: the administrator itself is `system:masters`,
/// which APF always exempts.
const THROTTLED_USER: &str = "reconhost-throttled";

/// A PriorityLevelConfiguration with the smallest share there is, rejecting what does not fit,
/// and a FlowSchema that puts every request of [`THROTTLED_USER`] in it; the user may do
/// anything (cluster-admin). Returns a kubeconfig that acts as that user.
async fn throttle(plane: &ControlPlane, world: &World) -> std::path::PathBuf {
    let flow = |kind: &str, plural: &str| {
        world.cluster_api("flowcontrol.apiserver.k8s.io", "v1", kind, plural)
    };
    world
        .create(
            &flow("PriorityLevelConfiguration", "prioritylevelconfigurations"),
            json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                   "kind": "PriorityLevelConfiguration", "metadata": {"name": "reconhost-tiny"},
                   "spec": {"type": "Limited", "limited": {
                       "nominalConcurrencyShares": 1, "lendablePercent": 0,
                       "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}}),
        )
        .await;
    world
        .create(
            &flow("FlowSchema", "flowschemas"),
            json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                   "metadata": {"name": "reconhost-throttled"},
                   "spec": {"priorityLevelConfiguration": {"name": "reconhost-tiny"},
                            "matchingPrecedence": 100,
                            "distinguisherMethod": {"type": "ByUser"},
                            "rules": [{
                                "subjects": [{"kind": "User", "user": {"name": THROTTLED_USER}}],
                                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                    "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
                                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}),
        )
        .await;
    world
        .create(
            &world.cluster_api(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
                "clusterrolebindings",
            ),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": THROTTLED_USER},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "cluster-admin"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                 "name": THROTTLED_USER}]}),
        )
        .await;
    let text = std::fs::read_to_string(plane.kubeconfig()).expect("the kubeconfig");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("a JSON kubeconfig");
    config["users"][0]["user"]["as"] = json!(THROTTLED_USER);
    let path = plane.dir().join("kubeconfig-throttled");
    std::fs::write(&path, config.to_string()).expect("writing the kubeconfig");
    path
}

#[tokio::test]
async fn throttled_by_priority_and_fairness() {
    // A server with few seats in all, so the tiny priority level gets one.
    let plane = ControlPlane::start(Options {
        name: Some(format!("fault-apf-{}", unique_suffix())),
        crds: reconhost_tests::crds::bundled(),
        api_server_args: vec![
            "--max-requests-inflight=20".into(),
            "--max-mutating-requests-inflight=10".into(),
        ],
        ..Options::default()
    })
    .await
    .expect("starting a private control plane");
    let world = World::on(TestCluster::at(plane.kubeconfig()), "apf").await;
    let kubeconfig = throttle(&plane, &world).await;
    let mut host = world.host_as(&kubeconfig, &load::PLUGINS, &[]).await;
    let start = Instant::now();
    load::create(&world, PARENTS).await;
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(5)).await;
    churn.stop().await;
    recovered("apf-throttled", &world, &mut host, start).await;

    let metrics = host.metrics().await.expect("metrics");
    let throttled: f64 = ["GET", "PATCH", "POST", "PUT", "DELETE"]
        .iter()
        .filter_map(|m| {
            sample(
                &metrics,
                "rest_client_requests_total",
                &[("code", "429"), ("method", m)],
            )
        })
        .sum();
    let served = sample(
        &metrics,
        "rest_client_requests_total",
        &[("code", "200"), ("method", "PATCH")],
    )
    .unwrap_or(0.0);
    eprintln!("throttled: {throttled} 429s, {served} PATCHes served");
    assert!(
        throttled > 0.0,
        "the API server throttled the host, and its metrics show it"
    );

    // Each throttled apply was tried again no sooner than the server's Retry-After asked. A
    // patch names its object, which one worker at a time writes, so the next patch of the same
    // URI is the retry (an event's create would not be: every parent posts to one URI).
    let events = world
        .cluster
        .audit_log()
        .events_in(&world.namespace)
        .expect("the audit log");
    let host_events: Vec<_> = events.iter().filter(|e| e.by_reconhost()).collect();
    let rejected: Vec<_> = host_events
        .iter()
        .filter(|e| e.verb == "patch")
        .filter(|e| e.response_status.as_ref().is_some_and(|s| s.code == 429))
        .collect();
    assert!(
        !rejected.is_empty(),
        "the audit log shows applies the host was refused with 429"
    );
    for refused in &rejected {
        let at = timestamp(&refused.stage_timestamp);
        let retry = host_events.iter().find(|e| {
            e.verb == refused.verb
                && e.request_uri == refused.request_uri
                && timestamp(&e.stage_timestamp) > at
        });
        if let Some(retry) = retry {
            let gap = timestamp(&retry.stage_timestamp).duration_since(at);
            assert!(
                gap >= jiff::SignedDuration::from_millis(900),
                "{} {} was tried again {gap:?} after a 429 asking for at least 1 s",
                refused.verb,
                refused.request_uri
            );
        }
    }
}

fn timestamp(text: &str) -> jiff::Timestamp {
    text.parse()
        .unwrap_or_else(|e| panic!("audit timestamp {text:?}: {e}"))
}

/// A control plane with a toxiproxy in front of its API server, and a kubeconfig through it.
async fn behind_a_proxy(name: &str) -> (ControlPlane, World, Toxiproxy, std::path::PathBuf) {
    let plane = ControlPlane::start(Options {
        name: Some(format!("fault-{name}-{}", unique_suffix())),
        crds: reconhost_tests::crds::bundled(),
        ..Options::default()
    })
    .await
    .expect("starting a private control plane");
    let world = World::on(TestCluster::at(plane.kubeconfig()), name).await;
    let proxy = Toxiproxy::start(&plane.dir().join("logs")).expect("starting toxiproxy");
    let upstream = plane.server().trim_start_matches("https://");
    let port = proxy
        .proxy(PROXY, upstream)
        .expect("a proxy to the API server");
    let text = std::fs::read_to_string(plane.kubeconfig()).expect("the kubeconfig");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("a JSON kubeconfig");
    config["clusters"][0]["cluster"]["server"] = json!(format!("https://127.0.0.1:{port}"));
    let path = plane.dir().join("kubeconfig-proxied");
    std::fs::write(&path, config.to_string()).expect("writing the kubeconfig");
    (plane, world, proxy, path)
}

/// The proxy between the host and the API server.
const PROXY: &str = "apiserver";

#[tokio::test]
async fn latency_and_connection_resets_between_host_and_api_server() {
    let (_plane, world, proxy, kubeconfig) = behind_a_proxy("network").await;
    let mut host = world.host_as(&kubeconfig, &load::PLUGINS, &[]).await;
    load::create(&world, PARENTS).await;
    load::wait_converged(&world, RECOVER, host.log_file()).await;

    let churn = Churn::start(&world, PARENTS);
    // 300 ms (± 100) on everything the API server sends the host, then every connection reset
    // as soon as it carries data, for 3 s, with the latency still on.
    proxy
        .add_toxic(
            PROXY,
            "slow",
            "latency",
            "downstream",
            json!({"latency": 300, "jitter": 100}),
        )
        .expect("adding latency");
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy
        .add_toxic(
            PROXY,
            "cut",
            "reset_peer",
            "downstream",
            json!({"timeout": 0}),
        )
        .expect("adding resets");
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.remove_toxic(PROXY, "cut").expect("removing resets");
    proxy.remove_toxic(PROXY, "slow").expect("removing latency");
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    churn.stop().await;
    recovered("network-latency-resets", &world, &mut host, back).await;
    assert!(
        logged(&host, "watch failed; retrying with backoff"),
        "the resets cut the host's watches (see {})",
        host.log_file().display()
    );
    let metrics = host.metrics().await.expect("metrics");
    let lost = sample(
        &metrics,
        "rest_client_requests_total",
        &[("code", "<error>")],
    );
    eprintln!("requests without an answer: {lost:?}");
}

#[tokio::test]
async fn a_watch_that_stalls_without_closing_is_noticed_and_started_again() {
    let (_plane, world, proxy, kubeconfig) = behind_a_proxy("stall").await;
    // A short watch timeout bounds how long a silent watch goes unnoticed (10 s + 5 s), and a
    // short request timeout how long a lost answer is waited for.
    let mut host = world
        .host_from(
            &kubeconfig,
            &world.namespace,
            &load::PLUGINS,
            &[(
                "RUST_LOG",
                "info,reconhost=debug,kube_runtime::watcher=debug",
            )],
            &["--watch-timeout=10s", "--request-timeout=10s"],
        )
        .await;
    load::create(&world, PARENTS).await;
    load::wait_converged(&world, RECOVER, host.log_file()).await;

    // Nothing the API server sends reaches the host, and no connection closes.
    proxy
        .add_toxic(
            PROXY,
            "stall",
            "timeout",
            "downstream",
            json!({"timeout": 0}),
        )
        .expect("stalling the proxy");
    let stalled = Instant::now();
    let churn = Churn::start(&world, PARENTS);
    eventually(
        Duration::from_secs(60),
        "the host to give up on a silent watch",
        || async {
            host.logs()
                .iter()
                .any(|l| l["message"] == "watch stream idle timeout, reconnecting")
                .then_some(())
        },
    )
    .await;
    let noticed = stalled.elapsed();
    churn.stop().await;
    proxy
        .remove_toxic(PROXY, "stall")
        .expect("ending the stall");
    let back = Instant::now();
    recovered("watch-stall", &world, &mut host, back).await;
    eprintln!("stall noticed after {:.1} s", noticed.as_secs_f64());
}

#[tokio::test]
async fn leader_killed_under_load_and_the_follower_takes_over() {
    const LEASE: &str = "reconhost-faults";
    let plane = ControlPlane::start(Options {
        name: Some(format!("fault-leader-{}", unique_suffix())),
        crds: reconhost_tests::crds::bundled(),
        ..Options::default()
    })
    .await
    .expect("starting a private control plane");
    let world = World::on(TestCluster::at(plane.kubeconfig()), "leader").await;
    let lease_ns = format!("--leader-election-namespace={}", world.namespace);
    let lease_id = format!("--leader-election-id={LEASE}");
    let replica = |name: &'static str| {
        let (world, lease_ns, lease_id) = (&world, lease_ns.clone(), lease_id.clone());
        async move {
            world
                .host_with(
                    &load::PLUGINS,
                    &[("HOSTNAME", name)],
                    &["--leader-elect", &lease_ns, &lease_id],
                )
                .await
        }
    };
    let a = replica("replica-a").await;
    let b = replica("replica-b").await;
    let leases = world.api("coordination.k8s.io", "v1", "Lease", "leases");
    let holder = || async {
        let lease = get(&leases, LEASE).await?;
        let holder = lease["spec"]["holderIdentity"].as_str()?;
        Some(holder.split('_').next()?.to_owned())
    };
    let first = eventually(common::CONVERGE, "a leader", holder).await;
    load::create(&world, PARENTS).await;
    load::wait_converged(&world, RECOVER, a.log_file()).await;
    let (leader, mut follower, next) = if first == "replica-a" {
        (a, b, "replica-b")
    } else {
        (b, a, "replica-a")
    };

    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    leader.kill();
    let killed = Instant::now();
    // The lease (15 s) runs out with specs still changing.
    eventually(RECOVER, "the follower to lead", || async {
        (holder().await.as_deref() == Some(next)).then_some(())
    })
    .await;
    churn.stop().await;
    recovered("leader-failover", &world, &mut follower, killed).await;

    // Never two writers at once: the old leader's last write comes before the new one's first.
    let writes_by = |replica: &str| -> Vec<String> {
        let marker = format!("({replica})");
        world
            .cluster
            .audit_log()
            .events_in(&world.namespace)
            .expect("the audit log")
            .into_iter()
            .filter(|e| e.by_reconhost() && e.user_agent.ends_with(&marker))
            .map(|e| e.stage_timestamp)
            .collect()
    };
    let (old, new) = (writes_by(&first), writes_by(next));
    let (last_old, first_new) = (old.iter().max(), new.iter().min());
    assert!(
        last_old.is_some() && first_new.is_some() && last_old < first_new,
        "the replicas' writes overlap: the old leader's last at {last_old:?}, the new one's first at {first_new:?}"
    );
}
