//! The control-plane harness itself: it starts a working API server, stops every process it
//! started, and cleans up after a run that was killed. These tests start private instances, so
//! they need the built binaries (tools/k8s/build.sh) but not `make test`'s shared instance.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use reconhost_tests::process::process_start_time;
use reconhost_tests::registry::{self, recorded_processes};
use reconhost_tests::support::{eventually, unique_suffix};
use reconhost_tests::{ControlPlane, Options};

/// Every harness start reaps stale run directories, so these tests take turns: one starting a
/// control plane would otherwise reap the killed owner's directory before that test looks at it.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn running(pid: u32) -> bool {
    process_start_time(pid).is_some()
}

fn port_of(server: &str) -> u16 {
    server
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("https://127.0.0.1:<port>")
}

#[tokio::test]
async fn control_plane_should_serve_and_stop_every_process_when_dropped() {
    let _turn = SERIAL.lock().await;
    let plane = ControlPlane::start(Options {
        name: Some(format!("drop-{}", unique_suffix())),
        ..Options::default()
    })
    .await
    .expect("starting a control plane");
    let client = plane.client().await.unwrap();
    let namespaces = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .expect("listing namespaces");
    assert!(
        namespaces
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
    );
    let kubeconfig = std::fs::read_to_string(plane.kubeconfig()).unwrap();
    assert!(
        kubeconfig.contains(plane.server()),
        "the kubeconfig points at the server"
    );

    let pids = plane.pids();
    assert_eq!(
        pids.len(),
        3,
        "etcd, kube-apiserver and kube-controller-manager"
    );
    assert!(pids.iter().all(|&p| running(p)));
    let dir = plane.dir().to_owned();
    let port = port_of(plane.server());
    drop(plane);

    for pid in pids {
        assert!(!running(pid), "process {pid} outlived its control plane");
    }
    assert!(
        !dir.exists(),
        "the run directory {} is removed",
        dir.display()
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the API port is closed"
    );
}

fn cluster_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_reconhost-cluster"))
}

#[tokio::test]
async fn killed_owner_should_take_its_components_along_and_be_reaped() {
    let _turn = SERIAL.lock().await;
    let name = format!("killed-{}", unique_suffix());
    let dir = registry::root().join(&name);
    let mut server = cluster_bin()
        .args(["serve", "--name", &name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting reconhost-cluster serve");
    eventually(
        Duration::from_secs(120),
        "the control plane to be ready",
        || {
            let ready = dir.join("ready").exists();
            async move { ready.then_some(()) }
        },
    )
    .await;
    let components: Vec<_> = recorded_processes(&dir).into_iter().skip(1).collect();
    // The developer's instance: etcd, kube-apiserver, kube-controller-manager, the registry,
    // kube-scheduler and kwok.
    assert_eq!(components.len(), 6);

    // SIGKILL leaves no chance to clean up: the kernel's parent-death signal must end the
    // components, and the next harness must reap the directory.
    server.kill().unwrap();
    server.wait().unwrap();
    eventually(
        Duration::from_secs(20),
        "the orphaned components to die",
        || {
            let alive = components.iter().any(|c| c.is_alive());
            async move { (!alive).then_some(()) }
        },
    )
    .await;
    assert!(
        dir.exists(),
        "the run directory is left behind by the killed owner"
    );
    let reaped = registry::reap_all_stale().unwrap();
    assert!(
        reaped.contains(&dir),
        "{} was not reaped: {reaped:?}",
        dir.display()
    );
    assert!(!dir.exists());
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = cluster_bin()
        .args(args)
        .output()
        .expect("running reconhost-cluster");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn up_and_down_should_be_repeatable() {
    let _turn = SERIAL.lock().await;
    let name = format!("updown-{}", unique_suffix());
    let (ok, first, err) = run(&["up", "--name", &name]);
    assert!(ok, "up failed: {err}");
    let last = first.lines().last().unwrap_or_default().to_owned();
    let kubeconfig = last
        .strip_prefix("KUBECONFIG=")
        .unwrap_or_else(|| panic!("last line is KUBECONFIG=<path>: {first:?}"));
    assert!(Path::new(kubeconfig).is_absolute() && Path::new(kubeconfig).exists());

    let (ok, again, err) = run(&["up", "--name", &name]);
    assert!(ok, "second up failed: {err}");
    assert_eq!(
        again.lines().last(),
        Some(last.as_str()),
        "a second up finds the same instance"
    );
    assert!(err.contains("already running"), "{err}");
    let client = reconhost_tests::TestCluster::at(kubeconfig)
        .client()
        .await
        .unwrap();
    Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .expect("the instance serves");

    let pids: Vec<_> = recorded_processes(&registry::root().join(&name));
    let (ok, _, err) = run(&["down", "--name", &name]);
    assert!(ok, "down failed: {err}");
    assert!(
        pids.iter().all(|p| !p.is_alive()),
        "down stops every process"
    );
    assert!(!Path::new(kubeconfig).exists());
    let (ok, _, err) = run(&["down", "--name", &name]);
    assert!(
        ok && err.contains("not running"),
        "a second down is harmless: {err}"
    );
    let (ok, status, _) = run(&["status", "--name", &name]);
    assert!(!ok && status.contains("not running"));

    // And it comes back up after going down.
    let (ok, _, err) = run(&["up", "--name", &name]);
    assert!(ok, "up after down failed: {err}");
    let (ok, _, err) = run(&["down", "--name", &name]);
    assert!(ok, "{err}");
}
