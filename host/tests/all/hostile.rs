//! Hostile plugins against the host as a platform team runs it: installed through
//! ReconcilePlugins, the host held to the chart's memory limit (a cgroup, as the container's),
//! a bystander plugin serving beside them. Each test attacks one class of harm and checks what a
//! user would: the host survives and keeps serving the bystander, the ReconcilePlugin says what
//! happened, and a restart does not repeat the damage.

use std::path::Path;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use reconhost_tests::hostile;
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

use crate::common;
use common::plugins::{INSTALL, cond, digest_of, exclusive, has};
use common::{CONVERGE, World, get, plugin, synced};

/// The chart's memory limit for the host's container (deploy/charts/reconhost/values.yaml).
const CHART_MEMORY: u64 = 1 << 30;

const STAMP: [&str; 2] = ["test.reconhost.dev/v1", "Stamp"];
const STAMP_RP: &str = "stamp.test.reconhost.dev";
const WEBAPP: [&str; 2] = ["examples.reconhost.dev/v1alpha1", "WebApp"];
const WEBAPP_RP: &str = "webapp.examples.reconhost.dev";

/// A ConfigMap `name` holding `component` gzipped (a crafted component of about a megabyte is
/// too large for a ConfigMap as it is, and tiny gzipped), and the ReconcilePlugin source for it.
async fn gzipped_config_map(world: &World, name: &str, component: &Path) -> Value {
    use base64::Engine as _;
    use std::io::Write as _;
    let bytes = std::fs::read(component).expect("reading the component");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&bytes).expect("gzip");
    let packed = gz.finish().expect("gzip");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": world.namespace},
        "binaryData": {"plugin.wasm": base64::engine::general_purpose::STANDARD.encode(packed)}});
    world
        .config_maps()
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("applying ConfigMap {name}: {e}"));
    json!({"configMap": {"namespace": world.namespace, "name": name, "compression": "gzip"}})
}

/// Writes a crafted component to `dir` and returns its path.
fn crafted(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, bytes).expect("writing the component");
    path
}

/// The bystander: webapp installed from a ConfigMap, one parent converged.
async fn bystander(world: &World) -> Value {
    world.plugin_config_map("webapp", &plugin("webapp")).await;
    world
        .apply_plugin(&world.reconcile_plugin(
            WEBAPP_RP,
            WEBAPP,
            &digest_of(&plugin("webapp")),
            world.config_map_source("webapp"),
        ))
        .await;
    world.plugin_ready(WEBAPP_RP).await;
    world.create_webapp("bystander", "nginx:1.27", 1).await;
    synced(&world.webapps(), "bystander").await
}

/// The bystander still follows its spec.
async fn bystander_serves(world: &World, replicas: i64) {
    world
        .webapps()
        .patch(
            "bystander",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("patching the bystander");
    eventually(CONVERGE, "the bystander's Deployment follows", || async {
        let deployment = get(&world.deployments(), "bystander").await?;
        (deployment["spec"]["replicas"] == replicas).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_compile_bomb_should_fail_its_own_plugin_and_not_be_compiled_again_after_a_restart() {
    let world = World::new("hostile-compile").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let dir = tempfile::tempdir().expect("a scratch directory");
    // Far under the cap on a function's size, so only the compiler's budget can stop it.
    let bomb = crafted(dir.path(), "bomb", &hostile::compile_bomb(400, 50_000));
    let oversized = crafted(
        dir.path(),
        "oversized",
        &hostile::oversized_function(2 << 20),
    );
    world
        .plugin_config_map("stamp-v1", &plugin("lifecycle-v1"))
        .await;
    let bomb_source = gzipped_config_map(&world, "bomb", &bomb).await;
    let oversized_source = gzipped_config_map(&world, "oversized", &oversized).await;
    // The chart's limits, with a shorter CPU budget than the default so that the test does not
    // wait two minutes whichever bound the bomb reaches first.
    let args = ["--max-compile-cpu=20s", "--compile-timeout=40s"];
    let host = world.host_limited(CHART_MEMORY, &args).await;
    bystander(&world).await;
    let v1 = digest_of(&plugin("lifecycle-v1"));
    world
        .apply_plugin(&world.reconcile_plugin(
            STAMP_RP,
            STAMP,
            &v1,
            world.config_map_source("stamp-v1"),
        ))
        .await;
    world.plugin_ready(STAMP_RP).await;

    // The bomb, as an upgrade of a healthy plugin.
    let bomb_digest = digest_of(&bomb);
    world
        .apply_plugin(&world.reconcile_plugin(STAMP_RP, STAMP, &bomb_digest, bomb_source))
        .await;
    let rp = eventually(INSTALL, "the bomb's compile stopped", || async {
        let rp = get(&common::plugins::reconcile_plugins(&world.client), STAMP_RP).await?;
        has(&rp, "Compiled", "False", "CompileBudgetExceeded").then_some(rp)
    })
    .await;
    let (_, _, message) = cond(&rp, "Compiled");
    assert!(
        message.contains(&bomb_digest[7..]) && message.contains("was stopped"),
        "the condition names the digest and the bound: {message}"
    );
    assert!(
        has(&rp, "Ready", "False", "UpgradeFailed"),
        "the old version keeps serving and says so: {rp}"
    );
    assert_eq!(rp["status"]["activeDigest"], v1.as_str());
    let memory = host.memory().expect("the host runs under a limit");
    assert_eq!(
        memory.oom_kills(),
        0,
        "nothing in the host's cgroup was OOM-killed"
    );
    bystander_serves(&world, 3).await;
    let mut host = host;
    host.check_alive().expect("the host survived");

    // A restarted host does not compile it again.
    drop(host);
    let host = world.host_limited(CHART_MEMORY, &args).await;
    eventually(CONVERGE, "the restarted host skipping the bomb", || async {
        host.logs()
            .iter()
            .any(|l| {
                l["message"] == "not compiled again: it went over the same compile budget before"
                    && l["plugin"] == STAMP_RP
            })
            .then_some(())
    })
    .await;
    assert!(
        !host
            .logs()
            .iter()
            .any(|l| l["message"] == "compiling" && l["digest"] == bomb_digest.as_str()),
        "the restarted host compiled the bomb again"
    );
    bystander_serves(&world, 2).await;

    // A function over the size cap is refused without compiling.
    world
        .apply_plugin(&world.reconcile_plugin(
            STAMP_RP,
            STAMP,
            &digest_of(&oversized),
            oversized_source,
        ))
        .await;
    let rp = world
        .plugin_status(STAMP_RP, "the oversized function refused", |rp| {
            has(rp, "Compiled", "False", "CompileBudgetExceeded")
        })
        .await;
    let (_, _, message) = cond(&rp, "Compiled");
    assert!(message.contains("over the cap"), "{message}");
    let mut host = host;
    host.check_alive().expect("the host survived");
    world.uninstall(STAMP_RP).await;
    world.uninstall(WEBAPP_RP).await;
}

#[tokio::test]
async fn calls_that_hoard_memory_should_wait_for_the_guest_budget_not_kill_the_host() {
    let world = World::new("hostile-memory").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    // No --max-guest-memory-mib: the budget comes from the cgroup's limit, as in a container.
    let host = world.host_limited(CHART_MEMORY, &[]).await;
    let budget = host
        .logs()
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("guest memory"))
        })
        .map(|l| l["budget_mib"].clone());
    assert_eq!(
        budget,
        Some(json!(CHART_MEMORY >> 21)),
        "half the container's limit"
    );
    bystander(&world).await;

    // Every call grows its instance to its 128 MiB limit and traps there; sixteen at once would
    // be 2 GiB of guest memory in a 1 GiB container.
    world
        .plugin_config_map("hoard", &plugin("runtime-alloc"))
        .await;
    let mut rp = world.reconcile_plugin(
        STAMP_RP,
        STAMP,
        &digest_of(&plugin("runtime-alloc")),
        world.config_map_source("hoard"),
    );
    rp["spec"]["limits"] = json!({"memory": "128Mi", "concurrentReconciles": 16});
    rp["spec"]["namespaces"] = json!([world.namespace]);
    world.apply_plugin(&rp).await;
    world.plugin_ready(STAMP_RP).await;
    let stamps = world.api("test.reconhost.dev", "v1", "Stamp", "stamps");
    for n in 0..16 {
        world
            .create(
                &stamps,
                json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Stamp",
                       "metadata": {"name": format!("s-{n}")}, "spec": {"value": n}}),
            )
            .await;
    }
    for n in 0..16 {
        let name = format!("s-{n}");
        let message = eventually(CONVERGE, &format!("{name} refused"), || async {
            let stamp = get(&stamps, &name).await?;
            let synced = common::condition(&stamp, "Synced")?;
            (synced["status"] == "False").then(|| synced["message"].to_string())
        })
        .await;
        assert!(message.contains("memory"), "{name}: {message}");
    }
    let memory = host.memory().expect("the host runs under a limit");
    assert_eq!(
        memory.oom_kills(),
        0,
        "nothing in the host's cgroup was OOM-killed"
    );
    bystander_serves(&world, 2).await;
    let mut host = host;
    host.check_alive().expect("the host survived");
    world.uninstall(STAMP_RP).await;
    world.uninstall(WEBAPP_RP).await;
}

#[test]
fn render_should_compile_under_the_same_bounds() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let bomb = crafted(dir.path(), "bomb", &hostile::compile_bomb(400, 50_000));
    let parent = dir.path().join("parent.yaml");
    std::fs::write(
        &parent,
        "apiVersion: test.reconhost.dev/v1\nkind: Stamp\nmetadata: {name: s, namespace: default}\nspec: {value: 1}\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reconhost"))
        .args(["render", "--plugin"])
        .arg(&bomb)
        .arg("--parent")
        .arg(&parent)
        .args([
            "--max-compile-cpu=5s",
            "--compile-timeout=10s",
            "--max-compile-memory-mib=256",
        ])
        .output()
        .expect("running reconhost render");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "render of the bomb succeeded");
    assert!(
        stderr.contains("was stopped") && stderr.contains("budget"),
        "render says which bound stopped the compile: {stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "render was bounded by its budget"
    );
}

/// `reconhost plugin install identity-probe --rbac` into `world`, as a platform team runs it.
fn install_probe_with_rbac(world: &World) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_reconhost"))
        .args(["plugin", "install"])
        .arg(plugin("identity-probe"))
        .args([
            "--configmap",
            &format!("{}/identity-probe", world.namespace),
            "--service-account",
            &format!("{}/probe", world.namespace),
            "--rbac",
            "--allow-dangerous",
        ])
        .env("KUBECONFIG", world.cluster.kubeconfig())
        .output()
        .expect("running reconhost plugin install")
}

fn cluster_roles(world: &World) -> kube::Api<kube::api::DynamicObject> {
    world.cluster_api(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    )
}

#[tokio::test]
async fn install_rbac_should_overwrite_nothing_it_did_not_create_for_this_plugin() {
    let world = World::new("hostile-rbac").await;
    let _suite = exclusive(&world.client).await;
    let plugins = common::plugins::reconcile_plugins(&world.client);
    let role = "reconhost:plugin:probe.test.reconhost.dev";

    // A ClusterRole of the very name the installer would write, made by someone else.
    let foreign = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role, "labels": {"owner": "someone-else"}},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
    world.create(&cluster_roles(&world), foreign).await;
    let out = install_probe_with_rbac(&world);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the install went ahead");
    assert!(
        stderr.contains(role) && stderr.contains("refusing to overwrite"),
        "it names the object and refuses: {stderr}"
    );
    let kept = get(&cluster_roles(&world), role).await.expect("the role");
    assert_eq!(
        kept["rules"][0]["resources"][0], "pods",
        "its rules untouched"
    );
    assert!(
        get(&plugins, "probe.test.reconhost.dev").await.is_none(),
        "nothing was installed"
    );
    let bindings = world.cluster_api(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    );
    assert!(get(&bindings, role).await.is_none(), "nothing was bound");
    cluster_roles(&world)
        .delete(role, &Default::default())
        .await
        .expect("removing the foreign role");

    // A plugin name another ReconcilePlugin already runs: refused before any RBAC is written.
    // (No host runs here: the decoy's status is written by hand, as a host would.)
    let decoy = STAMP_RP;
    let rp = world.reconcile_plugin(
        decoy,
        STAMP,
        &digest_of(&plugin("lifecycle-v1")),
        world.config_map_source("stamp"),
    );
    world.apply_plugin(&rp).await;
    plugins
        .patch_status(
            decoy,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"plugin": {"name": "probe", "version": "1"}}})),
        )
        .await
        .expect("the decoy's status");
    let out = install_probe_with_rbac(&world);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the install went ahead");
    assert!(
        stderr.contains("already runs as ReconcilePlugin stamp.test.reconhost.dev"),
        "{stderr}"
    );
    assert!(
        get(&cluster_roles(&world), role).await.is_none(),
        "no role written"
    );
    plugins
        .delete(decoy, &Default::default())
        .await
        .expect("removing the decoy");
}
