//! Contention: another writer fighting the host over a field, and a slow plugin with a deep
//! queue beside a fast one.

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use reconhost_tests::TestCluster;
use reconhost_tests::host::sample;
use reconhost_tests::support::eventually;
use serde_json::json;

use super::common::load;
use super::common::{self, World, condition, get};
use super::{RECOVER, private_plane, under_load};

#[tokio::test]
async fn a_fast_plugin_is_not_held_up_by_a_slow_one_with_a_deep_queue() {
    let plane = private_plane("slow", Vec::new()).await;
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

/// Fights over web-7's replicas until its parent shows `Contested=True`, then stops.
async fn fight_until_contested(world: &World, name: &str) {
    let fighting = fight(world, name, Duration::from_secs(60));
    let contested = eventually(RECOVER, "Contested=True again", || async {
        let app = get(&world.webapps(), name).await?;
        (condition(&app, "Contested")?["status"] == "True").then_some(())
    });
    tokio::select! {
        _ = fighting => panic!("the breaker did not trip within a minute of fighting"),
        () = contested => {}
    }
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

    // A second fight, then a person edits the parent: that lifts the hold at once. The new
    // replicas go out and the child is no longer contested; without the lift the host would
    // wait out the hold and keep the child on probation for a window after it.
    fight_until_contested(&world, "web-7").await;
    world
        .webapps()
        .patch(
            "web-7",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("editing the WebApp");
    eventually(RECOVER, "the edited replicas on web-7", || async {
        let d = get(&world.deployments(), "web-7").await?;
        (d["spec"]["replicas"] == 3).then_some(())
    })
    .await;
    let metrics = host.metrics().await.expect("metrics");
    let contested = sample(
        &metrics,
        "reconhost_contested_children",
        &[("plugin", "webapp")],
    );
    assert_eq!(contested, Some(0.0), "the edit lifted the breaker");

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
