//! The control loop on the real control plane, one behaviour per test, as a user would check
//! it: with kubectl-level reads of children, status, events and the host's metrics.

use crate::common;

use std::time::Duration;

use common::{CONVERGE, World, condition, controlled_by, drained, get, reconciles, synced};
use kube::api::{DeleteParams, Patch, PatchParams};
use reconhost_tests::host::{Host, sample};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

#[tokio::test]
async fn new_parent_should_get_owned_children_and_status_and_follow_spec_changes() {
    let world = World::new("loop-new").await;
    let host = world.host(&["webapp"], &[]).await;
    let parent = world.create_webapp("web", "nginx:1.27", 1).await;

    let deployment = eventually(CONVERGE, "the Deployment", || async {
        get(&world.deployments(), "web").await
    })
    .await;
    assert!(controlled_by(&deployment, &parent), "{deployment}");
    assert_eq!(
        deployment["metadata"]["namespace"],
        world.namespace.as_str()
    );
    assert_eq!(deployment["spec"]["replicas"], 1);
    let service = eventually(CONVERGE, "the Service", || async {
        get(&world.services(), "web").await
    })
    .await;
    assert!(controlled_by(&service, &parent), "{service}");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);

    let status = eventually(CONVERGE, "the WebApp status", || async {
        let web = get(&world.webapps(), "web").await?;
        condition(&web, "Synced")?;
        Some(web["status"].clone())
    })
    .await;
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["readyReplicas"], 0, "no kubelet runs the pods");
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["message"], "0 of 1 replicas ready");

    world
        .webapps()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    eventually(CONVERGE, "the Deployment to scale to 3", || async {
        let d = get(&world.deployments(), "web").await?;
        (d["spec"]["replicas"] == 3).then_some(())
    })
    .await;
    eventually(CONVERGE, "observedGeneration 2", || async {
        let w = get(&world.webapps(), "web").await?;
        (w["status"]["observedGeneration"] == 2).then_some(())
    })
    .await;

    let metrics = host.metrics().await.unwrap();
    let c = [("controller", "webapp")];
    assert!(
        sample(
            &metrics,
            "controller_runtime_reconcile_total",
            &[c[0], ("result", "success")]
        )
        .unwrap()
            >= 2.0,
        "{metrics}"
    );
    for name in [
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_count",
        "controller_runtime_active_workers",
        "controller_runtime_max_concurrent_reconciles",
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds_count",
        "workqueue_work_duration_seconds_count",
        "workqueue_retries_total",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
    ] {
        assert!(
            sample(&metrics, name, &c).is_some(),
            "{name} missing from:\n{metrics}"
        );
    }
    let p = ("plugin", "webapp");
    assert!(sample(&metrics, "reconhost_plugin_call_seconds_count", &[p]).unwrap() >= 2.0);
    assert!(
        sample(
            &metrics,
            "reconhost_apply_total",
            &[p, ("action", "create")]
        )
        .unwrap()
            >= 2.0
    );
    assert!(
        sample(
            &metrics,
            "reconhost_apply_total",
            &[p, ("action", "update")]
        )
        .unwrap()
            >= 1.0
    );
    host.stop(Duration::from_secs(10));
}

#[tokio::test]
async fn child_changed_or_deleted_by_someone_else_should_be_put_back() {
    let world = World::new("loop-drift").await;
    let _host = world.host(&["webapp"], &[]).await;
    world.create_webapp("web", "nginx:1.27", 2).await;
    let service = eventually(CONVERGE, "the Service", || async {
        get(&world.services(), "web").await
    })
    .await;
    eventually(CONVERGE, "the Deployment", || async {
        get(&world.deployments(), "web").await
    })
    .await;

    // Someone scales the Deployment by hand, the way `kubectl scale` or `kubectl edit` would.
    world
        .deployments()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 7}})),
        )
        .await
        .unwrap();
    eventually(CONVERGE, "the replicas to be put back to 2", || async {
        let d = get(&world.deployments(), "web").await?;
        (d["spec"]["replicas"] == 2).then_some(())
    })
    .await;

    world
        .services()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = eventually(CONVERGE, "the Service to be recreated", || async {
        let s = get(&world.services(), "web").await?;
        (s["metadata"]["uid"] != service["metadata"]["uid"]).then_some(s)
    })
    .await;
    assert_eq!(recreated["spec"]["ports"][0]["port"], 80);
}

#[tokio::test]
async fn field_the_plugin_stops_setting_should_be_removed_from_the_child() {
    let world = World::new("loop-prune").await;
    let _host = world.host(&["configmap-generator"], &[]).await;
    let generators = world.api(
        "examples.reconhost.dev",
        "v1alpha1",
        "ConfigMapGenerator",
        "configmapgenerators",
    );
    world
        .create(
            &generators,
            json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "ConfigMapGenerator",
                   "metadata": {"name": "gen"}, "spec": {"content": {"keep": "1", "drop": "2"}}}),
        )
        .await;
    eventually(CONVERGE, "the ConfigMap with both keys", || async {
        let cm = get(&world.config_maps(), "gen").await?;
        (cm["data"] == json!({"keep": "1", "drop": "2"})).then_some(())
    })
    .await;

    // Removing a key from the spec removes it from the desired ConfigMap; the ConfigMap still
    // holds it, so it is a superset of what is desired, and only the plugin's field ownership
    // shows that the key must go.
    generators
        .patch(
            "gen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"content": {"drop": null}}})),
        )
        .await
        .unwrap();
    eventually(
        CONVERGE,
        "the dropped key to leave the ConfigMap",
        || async {
            let cm = get(&world.config_maps(), "gen").await?;
            (cm["data"] == json!({"keep": "1"})).then_some(())
        },
    )
    .await;
    eventually(CONVERGE, "status keys 1", || async {
        let g = get(&generators, "gen").await?;
        (g["status"]["keys"] == 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn reconciling_a_child_the_api_server_normalised_should_write_nothing() {
    let world = World::new("loop-normal").await;
    let host = world.host(&["control-normalized"], &[]).await;
    let quotas = world.api("test.reconhost.dev", "v1", "Quota", "quotas");
    world
        .create(
            &quotas,
            json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Quota", "metadata": {"name": "q"}}),
        )
        .await;
    let resource_quotas = world.api("", "v1", "ResourceQuota", "resourcequotas");
    let quota = eventually(CONVERGE, "the ResourceQuota", || async {
        get(&resource_quotas, "q").await
    })
    .await;
    // The plugin asked for 0.5 and 1024Mi: what is stored differs from what it asks for.
    assert_eq!(
        quota["spec"]["hard"],
        json!({"requests.cpu": "500m", "requests.memory": "1Gi"})
    );
    synced(&quotas, "q").await;
    drained(&host, "control-normalized").await;

    // Wake the parent three times without changing what it wants.
    let mark = world.writes();
    for touch in 1..=3 {
        let before = reconciles(&host, "control-normalized").await;
        quotas
            .patch(
                "q",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touch": touch.to_string()}}})),
            )
            .await
            .unwrap();
        eventually(CONVERGE, "a reconcile of the touched parent", || async {
            (reconciles(&host, "control-normalized").await > before).then_some(())
        })
        .await;
    }
    drained(&host, "control-normalized").await;
    let writes = world.host_writes_since(mark);
    assert!(
        writes.is_empty(),
        "writes for a parent with nothing to change: {writes:#?}"
    );
}

#[tokio::test]
async fn resync_should_reconcile_unchanged_parents_again_and_write_nothing() {
    let world = World::new("loop-resync").await;
    let host = world
        .host_with(&["webapp"], &[], &["--sync-period=1s"])
        .await;
    world.create_webapp("web", "nginx:1.27", 1).await;
    synced(&world.webapps(), "web").await;
    drained(&host, "webapp").await;
    let mark = world.writes();
    let before = reconciles(&host, "webapp").await;
    eventually(CONVERGE, "two resyncs", || async {
        (reconciles(&host, "webapp").await >= before + 2.0).then_some(())
    })
    .await;
    drained(&host, "webapp").await;
    let writes = world.host_writes_since(mark);
    assert!(writes.is_empty(), "writes from resyncs: {writes:#?}");
}

#[tokio::test]
async fn shutdown_should_finish_the_reconcile_in_flight_and_start_no_other() {
    let world = World::new("loop-shutdown").await;
    // One worker: of two parents, one is reconciled (1.5 s) while the other waits its turn.
    let host = world
        .host_with(&["control-slow"], &[], &["--max-concurrent-reconciles=1"])
        .await;
    let slows = world.api("test.reconhost.dev", "v1", "Slow", "slows");
    for name in ["a", "b"] {
        world
            .create(
                &slows,
                json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Slow", "metadata": {"name": name}}),
            )
            .await;
    }
    let working = eventually(CONVERGE, "a reconcile in flight", || async {
        let logs = host.logs();
        let line = logs.iter().find(|l| l["message"] == "working")?;
        line["parent"].as_str().map(str::to_owned)
    })
    .await;
    let log_file = host.log_file().to_owned();
    host.stop(Duration::from_secs(30));

    let messages: Vec<(String, String)> = std::fs::read_to_string(&log_file)
        .expect("the host's log")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
            (s(&l["message"]), s(&l["parent"]))
        })
        .collect();
    let at = |message: &str, parent: &str| {
        messages
            .iter()
            .position(|(m, p)| m == message && (parent.is_empty() || p == parent))
            .unwrap_or_else(|| panic!("no {message:?} for {parent:?} in {}", log_file.display()))
    };
    let signal = at("SIGTERM received, shutting down", "");
    let finished = at("reconciled", &working);
    assert!(
        signal < finished && finished < at("shut down", ""),
        "the reconcile in flight finished after the signal and before the exit: {messages:#?}"
    );
    let started: Vec<_> = messages.iter().filter(|(m, _)| m == "working").collect();
    assert_eq!(
        started.len(),
        1,
        "no reconcile started after the signal: {started:?}"
    );

    let (in_flight, waiting) = if working.ends_with("/a") {
        ("a", "b")
    } else {
        ("b", "a")
    };
    assert!(
        get(&world.config_maps(), &format!("{in_flight}-out"))
            .await
            .is_some()
    );
    assert!(
        get(&world.config_maps(), &format!("{waiting}-out"))
            .await
            .is_none()
    );
}

#[tokio::test]
async fn deleted_parent_should_lose_its_children() {
    let world = World::new("loop-delete").await;
    let _host = world.host(&["webapp"], &[]).await;
    world.create_webapp("web", "nginx:1.27", 1).await;
    eventually(CONVERGE, "the Deployment", || async {
        get(&world.deployments(), "web").await
    })
    .await;
    world
        .webapps()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    // The garbage collector removes the children through the ownerReference the host set.
    eventually(CONVERGE, "the children to be collected", || async {
        let gone = get(&world.deployments(), "web").await.is_none()
            && get(&world.services(), "web").await.is_none();
        gone.then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_parent_with_a_finalizer_should_wait_for_the_plugin_to_finish() {
    let world = World::new("loop-final").await;
    let _host = world.host(&["archiver"], &[]).await;
    let archives = world.api("examples.reconhost.dev", "v1alpha1", "Archive", "archives");
    world
        .create(
            &archives,
            json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "Archive",
                   "metadata": {"name": "box"}, "spec": {"data": {"a": "1", "b": "2"}}}),
        )
        .await;
    let archive = eventually(CONVERGE, "the finalizer and the ConfigMap", || async {
        let a = get(&archives, "box").await?;
        let cm = get(&world.config_maps(), "box").await?;
        let finalized = a["metadata"]["finalizers"] == json!(["reconhost.dev/archiver"]);
        (finalized && cm["data"]["a"] == "1").then_some(a)
    })
    .await;
    assert_eq!(archive["status"]["phase"], "Active");

    archives
        .delete("box", &DeleteParams::default())
        .await
        .unwrap();
    eventually(CONVERGE, "the Archive to be gone", || async {
        get(&archives, "box").await.is_none().then_some(())
    })
    .await;
    // It went only after the plugin wrote its tombstone and reported `finalized`.
    let reasons: Vec<String> = world
        .events_for("box")
        .await
        .into_iter()
        .map(|(_, reason, _)| reason)
        .collect();
    assert!(reasons.contains(&"Archiving".to_owned()), "{reasons:?}");
    assert!(reasons.contains(&"Archived".to_owned()), "{reasons:?}");
}

#[tokio::test]
async fn failing_plugin_should_back_off_report_on_the_parent_and_recover_when_fixed() {
    let world = World::new("loop-flaky").await;
    let host = world.host(&["control-flaky"], &[]).await;
    let flakies = world.api("test.reconhost.dev", "v1", "Flaky", "flakies");
    let switch = |fail: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f-switch"},
               "data": {"fail": fail}})
    };
    world.create(&world.config_maps(), switch("true")).await;
    world
        .create(
            &flakies,
            json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Flaky", "metadata": {"name": "f"}}),
        )
        .await;

    let failed = eventually(CONVERGE, "Synced=False on the parent", || async {
        let f = get(&flakies, "f").await?;
        let c = condition(&f, "Synced")?.clone();
        (c["status"] == "False").then_some(c)
    })
    .await;
    assert_eq!(failed["reason"], "ReconcileError");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("the switch f-switch says fail"),
        "{failed}"
    );
    let warning = eventually(CONVERGE, "a Warning event", || async {
        world
            .events_for("f")
            .await
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == "ReconcileError")
    })
    .await;
    assert!(warning.2.contains("says fail"), "{warning:?}");

    // Backoff: the host logs every failed attempt; each retry comes no sooner than 5 ms ·
    // 2^(n-1) after the n-th failure. The first failure writes Synced=False on the parent, and
    // that change may wake it once at once, so the bound starts at the second gap. A lower
    // bound on every gap cannot be broken by a slow machine, only by retrying too early.
    let parent = format!("{}/f", world.namespace);
    let times = eventually(CONVERGE, "eight failed attempts", || async {
        let times = failure_times(&host, &parent);
        (times.len() >= 8).then_some(times)
    })
    .await;
    for (n, pair) in times.windows(2).enumerate().skip(1) {
        let gap = pair[1].duration_since(pair[0]).unsigned_abs();
        let backoff = Duration::from_millis(5 << n);
        assert!(
            gap >= backoff,
            "retry {} came {gap:?} after failure {n}, before its backoff of {backoff:?}; \
             failures at {times:?}",
            n + 1,
        );
    }
    // A failure is logged while the reconcile runs and counted when it returns: wait for the
    // count of the eighth.
    let c = [("controller", "control-flaky")];
    let (metrics, errors) = eventually(CONVERGE, "eight errors counted", || async {
        let metrics = host.metrics().await.ok()?;
        let errors = sample(&metrics, "controller_runtime_reconcile_errors_total", &c)?;
        (errors >= 8.0).then_some((metrics, errors))
    })
    .await;
    let retries = sample(&metrics, "workqueue_retries_total", &c).unwrap();
    assert!(
        errors >= 8.0 && retries >= errors - 1.0,
        "every failure is counted and retried: {errors} errors, {retries} retries:\n{metrics}"
    );
    // The same warning again and again is one Event whose series counts up, not an Event per
    // failure.
    let warnings: Vec<Value> = world
        .events("f")
        .await
        .into_iter()
        .filter(|e| e["type"] == "Warning" && e["reason"] == "ReconcileError")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0]["series"]["count"].as_i64() >= Some(2),
        "{:#?}",
        warnings[0]
    );

    // Fixing the input recovers at once: the failed call's read of the switch is tracked.
    world
        .config_maps()
        .patch(
            "f-switch",
            &PatchParams::default(),
            &Patch::Merge(switch("false")),
        )
        .await
        .unwrap();
    let out = eventually(
        Duration::from_secs(10),
        "the child once the switch is off",
        || async { get(&world.config_maps(), "f-out").await },
    )
    .await;
    assert_eq!(out["data"]["ok"], "true");
    synced(&flakies, "f").await;
}

#[tokio::test]
async fn invalid_spec_should_be_a_permanent_error_without_retries_until_the_spec_changes() {
    let world = World::new("loop-invalid").await;
    let host = world.host(&["webapp"], &[]).await;
    world.create_webapp("bad", "", 1).await;
    let failed: Value = eventually(CONVERGE, "Synced=False", || async {
        let w = get(&world.webapps(), "bad").await?;
        let c = condition(&w, "Synced")?.clone();
        (c["status"] == "False").then_some(c)
    })
    .await;
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("spec.image must not be empty"),
        "{failed}"
    );
    assert!(get(&world.deployments(), "bad").await.is_none());

    tokio::time::sleep(Duration::from_secs(3)).await;
    let metrics = host.metrics().await.unwrap();
    let p = [("plugin", "webapp"), ("kind", "permanent")];
    assert_eq!(
        sample(&metrics, "reconhost_plugin_errors_total", &p),
        Some(1.0),
        "one call, no retry storm:\n{metrics}"
    );
    let c = [("controller", "webapp")];
    assert_eq!(
        sample(
            &metrics,
            "controller_runtime_terminal_reconcile_errors_total",
            &c
        ),
        Some(1.0)
    );
    assert!(
        world
            .events_for("bad")
            .await
            .iter()
            .any(|(t, _, n)| t == "Warning" && n.contains("spec.image")),
        "a Warning event names the cause"
    );

    world
        .webapps()
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "nginx:1.27"}})),
        )
        .await
        .unwrap();
    eventually(
        CONVERGE,
        "the fixed parent to get its Deployment",
        || async { get(&world.deployments(), "bad").await },
    )
    .await;
    synced(&world.webapps(), "bad").await;
}

/// When the host logged a failed reconcile of `parent`, in order.
fn failure_times(host: &Host, parent: &str) -> Vec<jiff::Timestamp> {
    host.logs()
        .iter()
        .filter(|l| l["message"] == "reconcile failed" && l["parent"] == parent)
        .filter_map(|l| l["timestamp"].as_str()?.parse().ok())
        .collect()
}

#[test]
fn every_control_test_plugin_should_have_a_test() {
    let source = include_str!("control_loop.rs");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/test-plugins");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("control-") {
            assert!(
                source.contains(&format!("\"{name}\"")),
                "test plugin {name} is built but no test in host/tests/all/control_loop.rs uses it"
            );
        }
    }
}
