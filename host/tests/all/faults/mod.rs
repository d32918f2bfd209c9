//! The fault-injection suite: each scenario starts a control plane of its own, puts a host
//! under load (WebApps and ConfigMapGenerators, specs changing throughout), injects one fault,
//! and then requires what a user would check: every parent converged to its latest spec, no
//! child duplicated, leaked or lost, the host still running and ready. The time from the end
//! of the fault to convergence is printed as `recovery: <scenario> <seconds>` for
//! docs/RELIABILITY.md; no test asserts on it.
//!
//! - `outages`: etcd, kube-apiserver, the host or the leader killed; watch history compacted.
//! - `throttling`: API Priority and Fairness refusing the host's requests.
//! - `network`: latency, resets and a stalled connection through toxiproxy.
//! - `contention`: a controller fight, and a slow plugin beside a fast one.
//! - `sharding`: replicas with `--sharding` scaled, restarted, killed and cut off.

use crate::common;

mod contention;
mod network;
mod outages;
mod sharding;
mod throttling;

use std::time::{Duration, Instant};

use common::World;
use common::load;
use reconhost_tests::host::Host;
use reconhost_tests::support::unique_suffix;
use reconhost_tests::{ControlPlane, Options, TestCluster};

/// Parents of each example plugin in every scenario.
const PARENTS: usize = 120;

/// Bound on convergence after a fault, on a small busy machine: a limit, not a measurement.
const RECOVER: Duration = Duration::from_secs(240);

/// A control plane of the scenario's own (it is about to be broken), with more kube-apiserver
/// flags if given.
async fn private_plane(name: &str, api_server_args: Vec<String>) -> ControlPlane {
    ControlPlane::start(Options {
        name: Some(format!("fault-{name}-{}", unique_suffix())),
        crds: reconhost_tests::crds::bundled(),
        api_server_args,
        ..Options::default()
    })
    .await
    .expect("starting a private control plane")
}

/// A scenario's world: its own control plane, a namespace on it, a host with both plugins
/// (and `args`), the load created and converged once before the fault.
async fn under_load(name: &str, args: &[&str]) -> (ControlPlane, World, Host) {
    let plane = private_plane(name, Vec::new()).await;
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
