//! The Python and TypeScript `webapp` on the control plane, installed the way a user installs
//! them: `reconhost plugin install --oci` pushes the component to the loopback registry (12–20 MB
//! is far past a ConfigMap's 1 MiB) and applies the ReconcilePlugin; the host pulls, compiles and
//! serves it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use reconhost_tests::support::eventually;
use serde_json::{Value, json};

use super::CONTRACT;
use crate::common::plugins::{digest_of, exclusive, reconcile_plugins};
use crate::common::{World, condition, get, load, plugin};

const WEBAPP_RP: &str = "webapp.examples.reconhost.dev";
const GENERATOR_RP: &str = "configmapgenerator.examples.reconhost.dev";

/// A cold compile of a 12–20 MB component in a debug host on two busy cores takes a minute or
/// more: a bound, not a measurement.
const COMPILE: Duration = Duration::from_secs(300);

/// `reconhost plugin install <component> --oci <registry>/<namespace>/<name>:1`.
fn install(world: &World, component: &str) -> String {
    let registry = world.registry();
    let reference = format!("{registry}/{}/{component}:1", world.namespace);
    let account = format!("{}/plugin", world.namespace);
    let path = plugin(component).display().to_string();
    let out = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_reconhost")))
        .args(["plugin", "install", &path, "--oci", &reference])
        .args([
            "--insecure-registry",
            &registry,
            "--service-account",
            &account,
        ])
        .env("KUBECONFIG", world.cluster.kubeconfig())
        .output()
        .expect("running reconhost plugin install");
    assert!(
        out.status.success(),
        "installing {component}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    digest_of(&plugin(component))
}

/// Waits until the WebApp ReconcilePlugin serves `digest` and is Ready, and checks that its
/// status names the contract the SDKs build against.
async fn serving(world: &World, digest: &str) -> Value {
    let api = reconcile_plugins(&world.client);
    let rp = eventually(
        COMPILE,
        &format!("{WEBAPP_RP} serving {digest}"),
        || async {
            let rp = get(&api, WEBAPP_RP).await?;
            let ready = condition(&rp, "Ready").is_some_and(|c| c["status"] == "True");
            (ready && rp["status"]["activeDigest"] == digest).then_some(rp)
        },
    )
    .await;
    assert_eq!(rp["status"]["contract"], CONTRACT, "{rp}");
    rp
}

/// The Deployment and Service of WebApp `name`, as the Rust webapp would write them.
async fn children_of(world: &World, name: &str, image: &str, replicas: i64) {
    eventually(
        Duration::from_secs(60),
        &format!("Deployment {name} with {image} x{replicas}"),
        || async {
            let d = get(&world.deployments(), name).await?;
            let container = &d["spec"]["template"]["spec"]["containers"][0];
            (container["image"] == image && d["spec"]["replicas"] == replicas).then_some(())
        },
    )
    .await;
    let service = get(&world.services(), name).await.expect("the Service");
    assert_eq!(service["spec"]["ports"][0]["port"], 80);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);
    let message = format!("0 of {replicas} replicas ready");
    eventually(
        Duration::from_secs(60),
        &format!("WebApp {name}: {message}, current generation"),
        || async {
            let parent = get(&world.webapps(), name).await?;
            let current =
                parent["status"]["observedGeneration"] == parent["metadata"]["generation"];
            let ready = condition(&parent, "Ready")?;
            let synced = condition(&parent, "Synced")?;
            (current
                && parent["status"]["readyReplicas"] == 0
                && ready["message"] == message.as_str()
                && synced["status"] == "True")
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn python_and_typescript_webapps_installed_from_oci_should_reconcile_parents() {
    let world = World::new("lang-live").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    // A host with an empty compiled-code cache of its own, so the Python component really
    // compiles while the test watches another plugin keep working.
    let cache = tempfile::tempdir().expect("a cache directory");
    let cache_dir = cache.path().display().to_string();
    let registry = world.registry();
    let _host = world
        .host_with(
            &[],
            &[("RECONHOST_CACHE", cache_dir.as_str())],
            &[&format!("--insecure-registry={registry}")],
        )
        .await;

    // A small Rust plugin from a ConfigMap, serving before the big one arrives.
    let generator = plugin("configmap-generator");
    world.plugin_config_map("generator", &generator).await;
    world
        .apply_plugin(&world.reconcile_plugin(
            GENERATOR_RP,
            ["examples.reconhost.dev/v1alpha1", "ConfigMapGenerator"],
            &digest_of(&generator),
            world.config_map_source("generator"),
        ))
        .await;
    world.plugin_ready(GENERATOR_RP).await;

    let python = install(&world, "webapp-python");
    let installed = Instant::now();
    // While the host pulls and compiles 18 MB of Python, the Rust plugin keeps reconciling.
    world
        .create(
            &load::generators(&world),
            json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "ConfigMapGenerator",
                   "metadata": {"name": "during"}, "spec": {"content": {"a": "1"}}}),
        )
        .await;
    eventually(Duration::from_secs(60), "ConfigMap during", || async {
        let cm = get(&world.config_maps(), "during").await?;
        (cm["data"] == json!({"a": "1"})).then_some(())
    })
    .await;
    let rp = get(&reconcile_plugins(&world.client), WEBAPP_RP)
        .await
        .expect("the WebApp ReconcilePlugin");
    let python_ready = condition(&rp, "Ready").is_some_and(|c| c["status"] == "True");
    assert!(
        !python_ready,
        "the other plugin converged {:?} after the install, before the Python one was even \
         compiled; if compiling got that fast, this check needs a bigger component: {rp}",
        installed.elapsed()
    );

    serving(&world, &python).await;
    eprintln!(
        "webapp-python: ready {:?} after install (cold compile)",
        installed.elapsed()
    );
    world.create_webapp("shop", "nginx:1.27", 2).await;
    children_of(&world, "shop", "nginx:1.27", 2).await;

    // The same ReconcilePlugin upgraded to the TypeScript build: it takes over the parent the
    // Python one made (same plugin name, so the same field manager) and serves new ones.
    let typescript = install(&world, "webapp-ts");
    let upgraded = Instant::now();
    serving(&world, &typescript).await;
    eprintln!(
        "webapp-ts: serving {:?} after install (cold compile)",
        upgraded.elapsed()
    );
    world
        .webapps()
        .patch(
            "shop",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"image": "nginx:1.28", "replicas": 3}})),
        )
        .await
        .expect("changing shop's spec");
    children_of(&world, "shop", "nginx:1.28", 3).await;
    world.create_webapp("cart", "redis:8", 1).await;
    children_of(&world, "cart", "redis:8", 1).await;

    world.uninstall(WEBAPP_RP).await;
    world.uninstall(GENERATOR_RP).await;
}
