//! API Priority and Fairness on the real API server refuses most of the host's requests with
//! 429: the host must honour Retry-After, count what it was refused, and still converge.

use std::time::{Duration, Instant};

use reconhost_tests::TestCluster;
use reconhost_tests::host::sample;
use serde_json::json;

use super::common::World;
use super::common::load::{self, Churn};
use super::{PARENTS, private_plane, recovered};
use reconhost_tests::ControlPlane;

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
    let plane = private_plane(
        "apf",
        vec![
            "--max-requests-inflight=20".into(),
            "--max-mutating-requests-inflight=10".into(),
        ],
    )
    .await;
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
