//! The control loop when the API server goes away and comes back: the host keeps running, its
//! watches reconnect (relisting where the new server cannot resume them), and what changed
//! meanwhile is reconciled. The test starts a control plane of its own, since restarting the
//! shared one would disturb every other test.

use crate::common;

use std::time::Duration;

use common::{CONVERGE, World, condition, get, synced};
use kube::api::{DeleteParams, Patch, PatchParams};
use reconhost_tests::support::{eventually, unique_suffix};
use reconhost_tests::{ControlPlane, Options, TestCluster};
use serde_json::json;

#[tokio::test]
async fn host_should_recover_from_an_api_server_restart() {
    let mut plane = ControlPlane::start(Options {
        name: Some(format!("restart-{}", unique_suffix())),
        crds: reconhost_tests::crds::bundled(),
        ..Options::default()
    })
    .await
    .expect("starting a private control plane");
    let world = World::on(TestCluster::at(plane.kubeconfig()), "restart").await;
    // Debug logs show the relist.
    let mut host = world
        .host(&["webapp"], &[("RUST_LOG", "warn,reconhost=debug")])
        .await;
    let parent = world.create_webapp("web", "nginx:1.27", 1).await;
    let service = eventually(CONVERGE, "the Service", || async {
        get(&world.services(), "web").await
    })
    .await;
    synced(&world.webapps(), "web").await;

    plane
        .restart_api_server(Duration::from_secs(2))
        .await
        .expect("restarting kube-apiserver");
    // Changed while the host's watches are still reconnecting (their backoff starts at 800 ms):
    // the host learns of them from the resumed watch or from the relist.
    world
        .services()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    world
        .webapps()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();

    let recreated = eventually(CONVERGE, "the Service to be recreated", || async {
        let s = get(&world.services(), "web").await?;
        (s["metadata"]["uid"] != service["metadata"]["uid"]).then_some(s)
    })
    .await;
    assert_eq!(
        recreated["metadata"]["ownerReferences"][0]["uid"],
        parent["metadata"]["uid"]
    );
    eventually(CONVERGE, "the Deployment to scale to 3", || async {
        let d = get(&world.deployments(), "web").await?;
        (d["spec"]["replicas"] == 3).then_some(())
    })
    .await;
    eventually(CONVERGE, "observedGeneration 2 and Synced=True", || async {
        let w = get(&world.webapps(), "web").await?;
        let synced = condition(&w, "Synced")?["status"] == "True";
        (synced && w["status"]["observedGeneration"] == 2).then_some(())
    })
    .await;

    // The same process throughout. The new server's watch cache starts at the current
    // revision, so resuming a watch from an older one is answered 410 Gone ("too old resource
    // version"), and the host relists: that is how it learns of the deleted Service.
    if let Err(e) = host.check_alive() {
        panic!("the host exited: {e}");
    }
    let logs = host.logs();
    let log = host.log_file().display();
    assert!(
        logs.iter()
            .any(|l| l["message"] == "watch failed; retrying with backoff"),
        "the restart cut the host's watches (see {log})"
    );
    assert!(
        logs.iter().any(|l| l["message"] == "relisted"),
        "a watch that could not resume relisted (see {log})"
    );
    assert!(host.metrics().await.is_ok(), "metrics still served");
    host.stop(Duration::from_secs(10));
}
