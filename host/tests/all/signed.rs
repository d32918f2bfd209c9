//! Signed plugins, as the real cosign signs them, against the registry on loopback: a plugin runs
//! only once its artifact carries a signature that the operator's keys (`--plugin-public-key`)
//! and the ReconcilePlugin's own (`spec.source.oci.publicKeys`) verify, and the ReconcilePlugin
//! says what is wrong until then.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::common;
use common::plugins::{cond, exclusive, has, reconcile_plugins, run};
use common::{CONVERGE, World, get, plugin};
use reconhost_tests::support::eventually;

const GENERATOR: [&str; 2] = ["examples.reconhost.dev/v1alpha1", "ConfigMapGenerator"];
const GENERATOR_RP: &str = "configmapgenerator.examples.reconhost.dev";

fn cosign() -> std::path::PathBuf {
    reconhost_tests::binaries::Binaries::tool("cosign").unwrap_or_else(|e| panic!("{e}"))
}

/// `cosign <args>` in `dir`, with the empty password the keys here are made with.
fn cosign_in(dir: &Path, args: &[&str]) {
    let out = Command::new(cosign())
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .output()
        .expect("running cosign");
    assert!(
        out.status.success(),
        "cosign {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A cosign key pair in `dir` (no password); returns the public key's PEM.
fn key_pair(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    cosign_in(dir, &["generate-key-pair"]);
    std::fs::read_to_string(dir.join("cosign.pub")).unwrap()
}

/// `cosign sign` with the key in `dir`, no transparency log (nothing here reaches the internet).
fn sign(dir: &Path, reference: &str) {
    cosign_in(
        dir,
        &[
            "sign",
            "--key",
            "cosign.key",
            "--tlog-upload=false",
            "--allow-http-registry",
            "--allow-insecure-registry",
            "--yes",
            reference,
        ],
    );
}

#[tokio::test]
async fn a_plugin_should_run_only_with_a_cosign_signature_its_keys_verify() {
    let world = World::new("signed").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let dir = std::env::temp_dir().join(format!("reconhost-signed-{}", world.namespace));
    let (ours, theirs) = (dir.join("ours"), dir.join("theirs"));
    key_pair(&ours);
    let their_key = key_pair(&theirs);
    let registry = world.registry();
    let reference = format!("{registry}/{}/configmap-generator:0.1.0", world.namespace);
    let component = plugin("configmap-generator");
    let digest = run(
        Path::new(env!("CARGO_BIN_EXE_reconhost")),
        &[
            "plugin",
            "push",
            &component.display().to_string(),
            "--oci",
            &reference,
            "--insecure-registry",
            &registry,
        ],
        &dir,
    );

    // The operator trusts our key only.
    let trusted = ours.join("cosign.pub").display().to_string();
    let _host = world
        .host_with(
            &[],
            &[],
            &[
                &format!("--insecure-registry={registry}"),
                &format!("--plugin-public-key={trusted}"),
            ],
        )
        .await;
    let rp = world.reconcile_plugin(
        GENERATOR_RP,
        GENERATOR,
        digest.trim(),
        json!({"oci": {"reference": reference}}),
    );
    world.apply_plugin(&rp).await;
    let refused = |expected: &'static str| {
        let world = &world;
        async move {
            world
                .plugin_status(GENERATOR_RP, expected, |rp| {
                    has(rp, "Fetched", "False", "SignatureNotVerified")
                        && cond(rp, "Fetched").2.contains(expected)
                })
                .await
        }
    };
    refused("no cosign signature").await;

    // Signed, but by a key the operator does not trust.
    sign(&theirs, &reference);
    refused("no trusted key").await;

    // Signed by ours as well: it runs.
    sign(&ours, &reference);
    let rp = world.plugin_ready(GENERATOR_RP).await;
    assert!(has(&rp, "Fetched", "True", "Fetched"), "{rp}");

    // The ReconcilePlugin asks for their key too: both signatures are there, both verify.
    let mut asked = rp.clone();
    asked["spec"]["source"]["oci"]["publicKeys"] = json!([their_key]);
    world.apply_plugin(&strip(asked)).await;
    world
        .plugin_status(GENERATOR_RP, "Ready with both keys", |rp| {
            has(rp, "Fetched", "True", "Fetched") && has(rp, "Ready", "True", "Running")
        })
        .await;

    // A ConfigMap source carries no signature: refused while the operator requires one.
    world.plugin_config_map("generator", &component).await;
    let from_config_map = world.reconcile_plugin(
        GENERATOR_RP,
        GENERATOR,
        digest.trim(),
        world.config_map_source("generator"),
    );
    reconcile_plugins(&world.client)
        .delete(GENERATOR_RP, &Default::default())
        .await
        .expect("deleting the ReconcilePlugin");
    eventually(CONVERGE, "the ReconcilePlugin gone", || async {
        get(&reconcile_plugins(&world.client), GENERATOR_RP)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    world.apply_plugin(&from_config_map).await;
    refused("a ConfigMap carries no signature").await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A ReconcilePlugin as read, made fit to apply again: spec only.
fn strip(rp: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": rp["apiVersion"], "kind": rp["kind"],
           "metadata": {"name": rp["metadata"]["name"]}, "spec": rp["spec"]})
}
