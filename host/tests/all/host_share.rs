//! The host's own rights follow a confined plugin: with the host running as a ServiceAccount
//! that has the chart's RBAC and nothing else, `plugin install --rbac --parent-namespace` binds
//! the host's share of the plugin's kinds only there, the host watches them only there, and a
//! plugin that reads Secrets does not let the host list every Secret.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

use crate::common;
use crate::grants::{install, rbac_api, reconhost, text};
use common::plugins::{exclusive, has};
use common::{CONVERGE, World, get};

const PROBE_RP: &str = "probe.test.reconhost.dev";
const SHARE: &str = "reconhost:host:probe.test.reconhost.dev";

/// Whether the host's ServiceAccount may `verb` Secrets in `namespace` (empty: in every
/// namespace).
async fn host_may(world: &World, verb: &str, namespace: &str) -> bool {
    common::account_may(
        &world.client,
        (&world.namespace, "host"),
        verb,
        "secrets",
        namespace,
    )
    .await
}

/// The chart's RBAC for a host running as ServiceAccount `host` in the world's namespace, which
/// is also its plugin namespace; the names of the cluster-wide objects, to delete afterwards.
async fn chart_rbac(world: &World, host: &str) -> Vec<(&'static str, String)> {
    let ns = world.namespace.as_str();
    let params = PatchParams::apply("test").force();
    let subjects = json!([{"kind": "ServiceAccount", "namespace": ns, "name": host}]);
    let own = format!("{ns}-host");
    let kinds = format!("{ns}-host-plugin-kinds");
    let objects = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": own}, "rules": [
            {"apiGroups": ["reconhost.dev"], "resources": ["reconcileplugins"],
             "verbs": ["get", "list", "watch", "patch", "update"]},
            {"apiGroups": ["reconhost.dev"], "resources": ["reconcileplugins/status"],
             "verbs": ["get", "patch", "update"]},
            {"apiGroups": ["reconhost.dev"], "resources": ["reconcileplugins/finalizers"],
             "verbs": ["update"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
             "verbs": ["create"]},
            {"apiGroups": ["rbac.authorization.k8s.io"],
             "resources": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"],
             "verbs": ["list", "watch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": own},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": own},
            "subjects": subjects}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": kinds},
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"reconhost.dev/aggregate-to-host": "true"}}]}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": kinds},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": kinds},
            "subjects": subjects}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "host-plugins", "namespace": ns}, "rules": [
            {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "impersonate"]},
            {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "host-plugins", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "host-plugins"},
            "subjects": subjects}),
    ];
    for object in &objects {
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let namespace = object["metadata"]["namespace"].as_str();
        rbac_api(world, kind, namespace)
            .patch(name, &params, &Patch::Apply(object))
            .await
            .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
    }
    vec![
        ("ClusterRole", own.clone()),
        ("ClusterRoleBinding", own),
        ("ClusterRole", kinds.clone()),
        ("ClusterRoleBinding", kinds),
    ]
}

/// A kubeconfig that authenticates as ServiceAccount `name` of the world's namespace with a
/// bound token, as a pod's would.
async fn kubeconfig_as(world: &World, name: &str) -> tempfile::NamedTempFile {
    let accounts: Api<ServiceAccount> = Api::namespaced(world.client.clone(), &world.namespace);
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}});
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(account).unwrap(),
        )
        .await
        .expect("the host's ServiceAccount");
    let request = TokenRequest {
        // No audiences: the token is for the API server itself.
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token")
        .status
        .expect("a token in the answer")
        .token;
    let text = std::fs::read_to_string(world.cluster.kubeconfig()).unwrap();
    let mut config: Value = serde_json::from_str(&text).expect("the harness writes JSON");
    config["users"][0]["user"] = json!({"token": token});
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), config.to_string()).unwrap();
    file
}

#[tokio::test]
async fn a_confined_plugin_should_widen_the_hosts_rights_only_where_its_parents_live() {
    let world = World::new("host-share").await;
    let _suite = exclusive(&world.client).await;
    let ns = world.namespace.clone();
    let elsewhere = reconhost_tests::support::namespace(&world.client, "host-share-other").await;
    let cluster_objects = chart_rbac(&world, "host").await;
    let kubeconfig = kubeconfig_as(&world, "host").await;
    let secrets = |namespace: &str| {
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(world.client.clone(), namespace)
    };
    for namespace in [ns.as_str(), elsewhere.as_str()] {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "token"}, "stringData": {"k": "v"}});
        secrets(namespace)
            .create(
                &PostParams::default(),
                &serde_json::from_value(secret).unwrap(),
            )
            .await
            .expect("a Secret");
    }

    // The host watches every namespace, as the chart's does, with the chart's rights only.
    let host = world.host_from(kubeconfig.path(), "", &[], &[], &[]).await;
    let out = install(&world, &["--parent-namespace", &ns, "--allow-dangerous"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("RoleBinding {ns}/{SHARE} applied")),
        "the host's share is bound where the parents live: {stdout}"
    );
    assert!(
        stderr.contains("the host may (where the plugin's parents live) get, list, watch secrets"),
        "{stderr}"
    );
    let share = get(&rbac_api(&world, "RoleBinding", Some(&ns)), SHARE)
        .await
        .expect("the host's RoleBinding");
    assert!(
        share["subjects"]
            .as_array()
            .unwrap()
            .contains(&json!({"kind": "ServiceAccount", "namespace": ns, "name": "host"})),
        "bound to the account the chart's aggregated role is bound to: {share}"
    );
    assert!(
        get(&rbac_api(&world, "ClusterRole", None), SHARE)
            .await
            .unwrap()["metadata"]["labels"]
            .get("reconhost.dev/aggregate-to-host")
            .is_none(),
        "not aggregated into the host's cluster-wide role"
    );
    assert!(host_may(&world, "list", &ns).await);
    assert!(
        !host_may(&world, "list", "").await,
        "the host may not list every Secret"
    );
    assert!(!host_may(&world, "list", &elsewhere).await);

    // The plugin runs: the host's watches of its kinds are confined (a watch of every namespace
    // would be refused, and the ReconcilePlugin would say HostForbidden).
    world
        .plugin_status(PROBE_RP, "Ready=True", |rp| {
            has(rp, "Ready", "True", "Running")
        })
        .await;
    let probes = world.api("test.reconhost.dev", "v1", "Probe", "probes");
    let probe = |name: &str, secret: String| {
        json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Probe",
               "metadata": {"name": name}, "spec": {"secret": secret}})
    };
    world
        .create(&probes, probe("here", format!("{ns}/token")))
        .await;
    world
        .create(&probes, probe("peek", format!("{elsewhere}/token")))
        .await;
    let read = |name: &'static str| {
        let probes = probes.clone();
        async move {
            eventually(CONVERGE, &format!("{name}'s read"), || async {
                let p = get(&probes, name).await?;
                p["status"]["read"].as_str().map(str::to_owned)
            })
            .await
        }
    };
    assert_eq!(read("here").await, "found");
    eventually(CONVERGE, "the child", || async {
        get(&world.config_maps(), "here-probe").await
    })
    .await;
    let peek = read("peek").await;
    assert!(
        peek.starts_with("refused:")
            && peek.contains(&format!("only in its namespaces ({ns})"))
            && peek.contains(&elsewhere),
        "a Secret outside the plugin's namespaces is not in any cache it sees: {peek}"
    );

    // Uninstalling takes the host's share away with the rest.
    let out = reconhost(&world, &["uninstall", PROBE_RP, "--timeout", "60s"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(
        get(&rbac_api(&world, "RoleBinding", Some(&ns)), SHARE)
            .await
            .is_none(),
        "{}",
        text(&out).0
    );
    drop(host);
    for (kind, name) in cluster_objects {
        let _ = rbac_api(&world, kind, None)
            .delete(&name, &DeleteParams::default())
            .await;
    }
}
