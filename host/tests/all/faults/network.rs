//! Network faults between the host and the API server, through toxiproxy on loopback.

use std::time::{Duration, Instant};

use reconhost_tests::ControlPlane;
use reconhost_tests::TestCluster;
use reconhost_tests::host::sample;
use reconhost_tests::support::eventually;
use reconhost_tests::toxiproxy::Toxiproxy;
use serde_json::json;

use super::common::World;
use super::common::load::{self, Churn};
use super::{PARENTS, RECOVER, logged, private_plane, recovered};

/// A control plane with a toxiproxy in front of its API server, and a kubeconfig through it.
async fn behind_a_proxy(name: &str) -> (ControlPlane, World, Toxiproxy, std::path::PathBuf) {
    let plane = private_plane(name, Vec::new()).await;
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
