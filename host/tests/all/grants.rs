//! Least privilege as `reconhost plugin rbac`, `plugin install --rbac` and `plugin uninstall`
//! give it, on the real control plane: a grant bound only where the parents live, dangerous
//! grants refused until allowed, an upgrade that asks for more refused until approved, and
//! everything the installer made removed with the plugin.

use std::process::{Command, Output};

use kube::api::Api;
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

use crate::common;
use common::plugins::{exclusive, has, reconcile_plugins};
use common::{CONVERGE, World, get, plugin};

const PROBE_RP: &str = "probe.test.reconhost.dev";

/// `reconhost plugin <args>` against `world`'s cluster.
pub(crate) fn reconhost(world: &World, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reconhost"))
        .arg("plugin")
        .args(args)
        .env("KUBECONFIG", world.cluster.kubeconfig())
        .output()
        .expect("running reconhost plugin")
}

pub(crate) fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `plugin install identity-probe --rbac` with more arguments.
pub(crate) fn install(world: &World, more: &[&str]) -> Output {
    let component = plugin("identity-probe").display().to_string();
    let source = format!("{}/identity-probe", world.namespace);
    let account = format!("{}/probe", world.namespace);
    let mut args = vec![
        "install",
        &component,
        "--configmap",
        &source,
        "--service-account",
        &account,
        "--rbac",
    ];
    args.extend(more);
    reconhost(world, &args)
}

pub(crate) fn rbac_api(
    world: &World,
    kind: &str,
    namespace: Option<&str>,
) -> Api<kube::api::DynamicObject> {
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
        &format!("{}s", kind.to_lowercase()),
    );
    match namespace {
        Some(ns) => Api::namespaced_with(world.client.clone(), ns, &resource),
        None => Api::all_with(world.client.clone(), &resource),
    }
}

/// Whether the probe's ServiceAccount may `verb` ConfigMaps in `namespace`, as the API server
/// says.
async fn may(world: &World, verb: &str, namespace: &str) -> bool {
    common::account_may(
        &world.client,
        (&world.namespace, "probe"),
        verb,
        "configmaps",
        namespace,
    )
    .await
}

/// The API of a kind (`Probe` or `ConfigMap`) in `namespace`.
fn in_namespace(
    world: &World,
    namespace: &str,
    group: &str,
    kind: &str,
) -> Api<kube::api::DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk(group, "v1", kind);
    let resource =
        kube::core::ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
    Api::namespaced_with(world.client.clone(), namespace, &resource)
}

/// Waits until the API server says the probe's ServiceAccount may (or may not) create
/// ConfigMaps in `namespace`: RBAC takes a moment to see a new binding.
async fn granted(world: &World, namespace: &str, expected: bool) {
    eventually(
        CONVERGE,
        &format!("create configmaps in {namespace} to be allowed: {expected}"),
        || async { (may(world, "create", namespace).await == expected).then_some(()) },
    )
    .await;
}

fn probe(name: &str, namespace: &str) -> Value {
    json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Probe",
           "metadata": {"name": name, "namespace": namespace}, "spec": {}})
}

#[tokio::test]
async fn a_plugin_should_be_granted_only_where_its_parents_live_and_only_what_was_consented_to() {
    let world = World::new("grants").await;
    let _suite = exclusive(&world.client).await;
    let elsewhere = reconhost_tests::support::namespace(&world.client, "grants-other").await;
    let component = plugin("identity-probe").display().to_string();
    let account = format!("{}/probe", world.namespace);

    // The probe reads Secrets: printing its RBAC is refused until that is allowed, and says why.
    let out = reconhost(&world, &["rbac", &component, "--service-account", &account]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "Secret reads were granted silently");
    assert!(
        stderr.contains("get, list, watch secrets: Secrets hold credentials")
            && stderr.contains("--allow-dangerous"),
        "{stderr}"
    );
    let out = reconhost(
        &world,
        &[
            "rbac",
            &component,
            "--service-account",
            &account,
            "--parent-namespace",
            &world.namespace,
            "--allow-dangerous",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("# DANGEROUS: the plugin may get, list, watch secrets"),
        "{stdout}"
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .filter(|d| !d.is_null())
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["metadata"]["namespace"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("ClusterRole", ""),
            ("RoleBinding", world.namespace.as_str()),
            ("ClusterRole", "")
        ],
        "a namespaced parent's grant is one RoleBinding where its parents live"
    );

    // Installed where the parents live, with a host that watches every namespace: a parent
    // there is reconciled, one elsewhere is not called at all.
    let host = world.host_everywhere(&[]).await;
    let out = install(
        &world,
        &["--parent-namespace", &world.namespace, "--allow-dangerous"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("granted in namespace {}", world.namespace)),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning: granting"),
        "dangerous grants are said: {stderr}"
    );
    let rp = world
        .plugin_status(PROBE_RP, "Authorized=True", |rp| {
            has(rp, "Authorized", "True", "Authorized")
        })
        .await;
    assert_eq!(rp["spec"]["namespaces"], json!([world.namespace]));
    granted(&world, &world.namespace, true).await;
    granted(&world, &elsewhere, false).await;
    let probes = |ns: &str| in_namespace(&world, ns, "test.reconhost.dev", "Probe");
    world
        .create(&probes(&world.namespace), probe("here", &world.namespace))
        .await;
    world
        .create(&probes(&elsewhere), probe("there", &elsewhere))
        .await;
    eventually(
        CONVERGE,
        "the child of the parent in the granted namespace",
        || async { get(&world.config_maps(), "here-probe").await },
    )
    .await;
    let there = get(&probes(&elsewhere), "there").await.unwrap();
    assert!(
        there["metadata"]["finalizers"].is_null() && there["status"].is_null(),
        "a parent outside the plugin's namespaces is not touched: {there}"
    );
    let writes: Vec<String> = world
        .cluster
        .audit_log()
        .events_in(&elsewhere)
        .expect("reading the audit log")
        .into_iter()
        .filter(|e| e.by_reconhost())
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect();
    assert!(
        writes.is_empty(),
        "the host wrote outside the plugin's namespaces: {writes:?}"
    );

    // Without spec.namespaces (taken off by hand), the parent elsewhere is still not shown to
    // the plugin: its ServiceAccount could not read it.
    reconcile_plugins(&world.client)
        .patch(
            PROBE_RP,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"namespaces": null}})),
        )
        .await
        .expect("removing spec.namespaces");
    eventually(
        CONVERGE,
        "the host to say it did not call the plugin for it",
        || async {
            host.logs()
                .iter()
                .any(|line| {
                    line["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("may not read this parent"))
                        && line["parent"].as_str().is_some_and(|p| p.contains("there"))
                })
                .then_some(())
        },
    )
    .await;
    assert!(
        get(&probes(&elsewhere), "there").await.unwrap()["metadata"]["finalizers"].is_null(),
        "a parent the plugin may not read is not written to"
    );

    // An upgrade that asks for more (another namespace) is refused with the difference, and
    // nothing changes until it is approved.
    let both = format!("{},{elsewhere}", world.namespace);
    let out = install(&world, &["--parent-namespace", &both, "--allow-dangerous"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "the grant grew silently");
    assert!(
        stderr.contains(&format!(
            "the plugin may create configmaps in namespace {elsewhere}"
        )) && stderr.contains("--approve-new-grants"),
        "{stderr}"
    );
    let binding = "reconhost:plugin:probe.test.reconhost.dev";
    assert!(
        get(&rbac_api(&world, "RoleBinding", Some(&elsewhere)), binding)
            .await
            .is_none()
    );
    let out = install(
        &world,
        &[
            "--parent-namespace",
            &both,
            "--allow-dangerous",
            "--approve-new-grants",
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    granted(&world, &elsewhere, true).await;
    eventually(
        CONVERGE,
        "the parent elsewhere, now in the plugin's namespaces",
        || async {
            get(
                &in_namespace(&world, &elsewhere, "", "ConfigMap"),
                "there-probe",
            )
            .await
        },
    )
    .await;

    // Narrowing takes the binding away again, and uninstalling removes all the installer made.
    // A parent there carrying the plugin's finalizer (as a finalizing plugin's parents do) is
    // released first: nothing would take it off later, and its deletion would hang. The host is
    // stopped meanwhile (this plugin asks for no finalizer, so a running host would take it off
    // itself); the installer then waits for it a while, releases anyway, and says so.
    drop(host);
    in_namespace(&world, &elsewhere, "test.reconhost.dev", "Probe")
        .patch(
            "there",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": ["reconhost.dev/probe"]}})),
        )
        .await
        .expect("the plugin's finalizer on the parent elsewhere");
    let out = install(
        &world,
        &["--parent-namespace", &world.namespace, "--allow-dangerous"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("RoleBinding {elsewhere}/{binding} deleted")),
        "{stdout}"
    );
    assert!(
        stdout.contains("released 1 parent(s) outside the plugin's namespaces")
            && stdout.contains("had not taken in the new spec"),
        "{stdout}"
    );
    let there = get(&probes(&elsewhere), "there").await.unwrap();
    assert!(
        there["metadata"]["finalizers"].is_null(),
        "the parent left behind is released: {there}"
    );
    let host = world.host_everywhere(&[]).await;
    granted(&world, &elsewhere, false).await;
    let out = reconhost(&world, &["uninstall", PROBE_RP, "--timeout", "60s"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        get(&reconcile_plugins(&world.client), PROBE_RP)
            .await
            .is_none()
    );
    for role in [binding, "reconhost:host:probe.test.reconhost.dev"] {
        assert!(
            get(&rbac_api(&world, "ClusterRole", None), role)
                .await
                .is_none(),
            "{role}: {stdout}"
        );
    }
    assert!(
        get(
            &rbac_api(&world, "RoleBinding", Some(&world.namespace)),
            binding
        )
        .await
        .is_none()
    );
    assert!(
        get(&world.config_maps(), "identity-probe").await.is_none(),
        "{stdout}"
    );
    let accounts = world.api("", "v1", "ServiceAccount", "serviceaccounts");
    assert!(
        get(&accounts, "probe").await.is_none(),
        "the account install created: {stdout}"
    );
    let out = reconhost(&world, &["uninstall", PROBE_RP]);
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("nothing to uninstall"),
        "{}",
        text(&out).1
    );
    drop(host);
}

#[tokio::test]
async fn inspect_should_say_what_a_component_asks_for_before_anything_is_applied() {
    let world = World::new("inspect").await;
    let component = plugin("identity-probe").display().to_string();
    let out = reconhost(&world, &["inspect", &component, "-o", "json"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(report["name"], "probe");
    assert_eq!(report["parent"], "test.reconhost.dev/v1/Probe");
    assert_eq!(report["reconcilePlugin"], PROBE_RP);
    assert_eq!(report["children"], json!(["v1/ConfigMap"]));
    assert_eq!(report["reads"], json!(["v1/Secret"]));
    assert_eq!(report["contract"], "reconhost:plugin@0.2.0");
    let digest = common::plugins::digest_of(&plugin("identity-probe"));
    assert_eq!(
        report["digest"],
        digest.as_str(),
        "the digest a ReconcilePlugin pins"
    );
    assert!(
        report["rbac"].as_array().unwrap().contains(&json!(
            "get, list, watch, create, patch, update, delete configmaps"
        )),
        "{report}"
    );
    let dangerous = report["dangerous"].to_string();
    assert!(
        dangerous.contains("secrets: Secrets hold credentials"),
        "{dangerous}"
    );
    assert!(
        report["shape"]["functions"].as_u64().unwrap() > 100,
        "{report}"
    );
    assert!(
        report["compile"]["peakMib"].as_u64().unwrap() > 10,
        "the worker was measured: {report}"
    );

    // From a registry: the same report for the artifact pushed there.
    let registry = world.registry();
    let reference = format!("{registry}/inspect/probe:1");
    let out = reconhost(
        &world,
        &[
            "push",
            &component,
            "--oci",
            &reference,
            "--insecure-registry",
            &registry,
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    let out = reconhost(
        &world,
        &["inspect", &reference, "--insecure-registry", &registry],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.starts_with("plugin probe "), "{stdout}");
    assert!(stdout.contains(&digest), "{stdout}");
    assert!(stdout.contains("DANGEROUS grants"), "{stdout}");
    let out = reconhost(&world, &["inspect", "no-such-file.wasm"]);
    assert!(!out.status.success());
    assert!(
        text(&out)
            .1
            .contains("no-such-file.wasm is neither a file nor a pullable OCI artifact"),
        "{}",
        text(&out).1
    );
}
