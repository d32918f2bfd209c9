//! A plugin can do no more than its own ServiceAccount, on the real control plane: writes are
//! made as it (the API server's RBAC and audit log see the plugin, not the host), reads are
//! limited to what it could read, a refusal heals when RBAC is granted, installing needs the
//! right to act as the account, and the host's own rules hold whatever RBAC allows.

use crate::common;

use common::plugins::{cond, digest_of, exclusive, has, reconcile_plugins};
use common::{CONVERGE, World, condition, controlled_by, get, plugin};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

const PROBE: [&str; 2] = ["test.reconhost.dev/v1", "Probe"];
const PROBE_RP: &str = "probe.test.reconhost.dev";

/// The identity suite's steps: Probe parents, their plugin, and RBAC for its ServiceAccount.
trait IdentityWorld {
    fn probes(&self) -> kube::Api<kube::api::DynamicObject>;

    async fn create_probe(&self, name: &str, spec: Value) -> Value;

    /// A ReconcilePlugin for Probe running `component`, acting as ServiceAccount `account`.
    async fn install_probe(&self, component: &str, account: &str, limits: Option<Value>);

    /// A Role in this namespace with these rules, bound to the ServiceAccount.
    async fn grant(&self, account: &str, role: &str, rules: Value);

    /// What a Probe needs of its own kind, and events.
    async fn grant_parent(&self, account: &str);

    async fn grant_children(&self, account: &str);
}

impl IdentityWorld for World {
    fn probes(&self) -> kube::Api<kube::api::DynamicObject> {
        self.api("test.reconhost.dev", "v1", "Probe", "probes")
    }

    async fn create_probe(&self, name: &str, spec: Value) -> Value {
        self.create(
            &self.probes(),
            json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Probe",
                   "metadata": {"name": name}, "spec": spec}),
        )
        .await
    }

    async fn install_probe(&self, component: &str, account: &str, limits: Option<Value>) {
        self.plugin_config_map(component, &plugin(component)).await;
        let mut rp = self.reconcile_plugin(
            PROBE_RP,
            PROBE,
            &digest_of(&plugin(component)),
            self.config_map_source(component),
        );
        rp["spec"]["serviceAccountRef"]["name"] = json!(account);
        if let Some(limits) = limits {
            rp["spec"]["limits"] = limits;
        }
        self.apply_plugin(&rp).await;
    }

    async fn grant(&self, account: &str, role: &str, rules: Value) {
        let rbac =
            |kind: &str, plural: &str| self.api("rbac.authorization.k8s.io", "v1", kind, plural);
        let params = PatchParams::apply("test").force();
        let body = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": role, "namespace": self.namespace}, "rules": rules});
        rbac("Role", "roles")
            .patch(role, &params, &Patch::Apply(&body))
            .await
            .expect("a Role");
        let body = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": self.namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "namespace": self.namespace, "name": account}]});
        rbac("RoleBinding", "rolebindings")
            .patch(role, &params, &Patch::Apply(&body))
            .await
            .expect("a RoleBinding");
    }

    async fn grant_parent(&self, account: &str) {
        self.grant(
            account,
            "probe-parent",
            json!([
                {"apiGroups": ["test.reconhost.dev"], "resources": ["probes"],
                 "verbs": ["get", "list", "watch", "patch", "update"]},
                {"apiGroups": ["test.reconhost.dev"], "resources": ["probes/status"],
                 "verbs": ["get", "patch", "update"]},
                {"apiGroups": ["test.reconhost.dev"], "resources": ["probes/finalizers"],
                 "verbs": ["update"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            ]),
        )
        .await;
    }

    async fn grant_children(&self, account: &str) {
        self.grant(
            account,
            "probe-children",
            json!([{"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}]),
        )
        .await;
    }
}

fn synced_message(probe: &Value) -> Option<String> {
    let c = condition(probe, "Synced")?;
    (c["status"] == "False").then(|| c["message"].as_str().unwrap_or("").to_owned())
}

#[tokio::test]
async fn writes_should_be_the_service_accounts_and_a_refusal_should_heal_with_a_grant() {
    let world = World::new("id-writes").await;
    let _suite = exclusive(&world.client).await;
    world.bare_service_account("probe").await;
    world.grant_parent("probe").await;
    let host = world.host(&[], &[]).await;
    world.install_probe("identity-probe", "probe", None).await;
    let rp = world.plugin_ready(PROBE_RP).await;
    let user = format!("system:serviceaccount:{}:probe", world.namespace);
    assert!(has(&rp, "Authorized", "False", "Denied"), "{rp}");
    let denied = rp["status"]["authorization"]["denied"].to_string();
    assert!(
        denied.contains(&format!(
            "create configmaps in namespace {}",
            world.namespace
        )),
        "the missing right is listed: {denied}"
    );

    let mark = world.writes();
    world.create_probe("p", json!({})).await;
    let message = eventually(CONVERGE, "the refusal shown on the parent", || async {
        synced_message(&get(&world.probes(), "p").await?)
    })
    .await;
    assert!(
        message.contains("configmaps") && message.contains("forbidden") && message.contains(&user),
        "names the verb, the resource and the identity: {message}"
    );
    assert!(get(&world.config_maps(), "p-probe").await.is_none());

    // Granting the right heals it; the parent is not touched.
    world.grant_children("probe").await;
    let child = eventually(CONVERGE, "the child after the grant", || async {
        get(&world.config_maps(), "p-probe").await
    })
    .await;
    let parent = get(&world.probes(), "p").await.unwrap();
    assert!(controlled_by(&child, &parent));
    assert_eq!(
        parent["metadata"]["generation"], 1,
        "the spec never changed"
    );
    // The status follows the grant; what is still missing (it may read Secrets) stays listed.
    let rp = world
        .plugin_status(PROBE_RP, "configmaps no longer denied", |rp| {
            let denied = rp["status"]["authorization"]["denied"].to_string();
            !denied.contains("configmaps") && denied.contains("get secrets")
        })
        .await;
    assert!(has(&rp, "Authorized", "False", "Denied"), "{rp}");

    // Every write the host made in the namespace for the plugin was the plugin's.
    let writes: Vec<_> = world
        .cluster
        .audit_log()
        .events_in(&world.namespace)
        .unwrap()
        .into_iter()
        .skip(mark)
        .filter(|e| e.by_reconhost())
        .collect();
    assert!(writes.len() >= 3, "child, status, events: {writes:?}");
    for write in &writes {
        let as_user = write
            .impersonated_user
            .as_ref()
            .map(|u| u.username.as_str());
        assert_eq!(
            as_user,
            Some(user.as_str()),
            "{} {} was not made as the plugin",
            write.verb,
            write.request_uri
        );
    }
    drop(host);
}

#[tokio::test]
async fn reads_should_be_limited_to_what_the_service_account_may_read() {
    let world = World::new("id-reads").await;
    let _suite = exclusive(&world.client).await;
    let other = reconhost_tests::support::namespace(&world.client, "id-elsewhere").await;
    let secret = |namespace: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "token", "namespace": namespace}, "stringData": {"k": "v"}})
    };
    for ns in [world.namespace.as_str(), other.as_str()] {
        let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
            world.client.clone(),
            ns,
            &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        );
        api.create(
            &PostParams::default(),
            &serde_json::from_value(secret(ns)).unwrap(),
        )
        .await
        .expect("a Secret");
    }
    world.bare_service_account("probe").await;
    world.grant_parent("probe").await;
    world.grant_children("probe").await;
    world
        .grant(
            "probe",
            "probe-secrets",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]),
        )
        .await;
    // A host watching every namespace: its cache holds the other namespace's Secret too.
    let _host = world.host_everywhere(&[]).await;
    world.install_probe("identity-probe", "probe", None).await;
    world.plugin_ready(PROBE_RP).await;
    world
        .create_probe(
            "own",
            json!({"secret": format!("{}/token", world.namespace)}),
        )
        .await;
    world
        .create_probe("foreign", json!({"secret": format!("{other}/token")}))
        .await;
    let read = |name: &'static str| {
        let world = &world;
        async move {
            eventually(CONVERGE, &format!("{name}'s read"), || async {
                let p = get(&world.probes(), name).await?;
                p["status"]["read"].as_str().map(str::to_owned)
            })
            .await
        }
    };
    assert_eq!(read("own").await, "found");
    let foreign = read("foreign").await;
    assert!(
        foreign.starts_with("refused:")
            && foreign.contains(&format!("may not get secrets in namespace {other}")),
        "the host's cache has it, but the plugin's account may not read it: {foreign}"
    );

    // A revoked grant stops working at the next reconcile, not when the host's cached "allowed"
    // (five minutes) would expire.
    world
        .api(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
        )
        .delete("probe-secrets", &DeleteParams::default())
        .await
        .expect("the Secret grant revoked");
    world
        .probes()
        .patch(
            "own",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"after": "revoked"}})),
        )
        .await
        .expect("a spec change");
    let revoked = eventually(
        CONVERGE,
        "the read refused after the revocation",
        || async {
            let p = get(&world.probes(), "own").await?;
            let read = p["status"]["read"].as_str()?;
            read.contains("may not get secrets")
                .then(|| read.to_owned())
        },
    )
    .await;
    assert!(revoked.starts_with("refused:"), "{revoked}");
    world.uninstall(PROBE_RP).await;
}

#[tokio::test]
async fn a_missing_service_account_should_keep_the_plugin_from_running() {
    let world = World::new("id-account").await;
    let _suite = exclusive(&world.client).await;
    let _host = world.host(&[], &[]).await;
    world.install_probe("identity-probe", "ghost", None).await;
    let rp = world
        .plugin_status(PROBE_RP, "Ready=False/ServiceAccountNotFound", |rp| {
            has(rp, "Ready", "False", "ServiceAccountNotFound")
        })
        .await;
    assert!(
        has(&rp, "Authorized", "False", "ServiceAccountNotFound"),
        "{rp}"
    );
    assert!(
        cond(&rp, "Ready")
            .2
            .contains(&format!("{}/ghost", world.namespace)),
        "{rp}"
    );
    world.service_account("ghost").await;
    world.plugin_ready(PROBE_RP).await;
    world.create_probe("p", json!({})).await;
    eventually(CONVERGE, "the child", || async {
        get(&world.config_maps(), "p-probe").await
    })
    .await;
    world.uninstall(PROBE_RP).await;
}

#[tokio::test]
async fn only_users_who_may_act_as_the_service_account_should_install_it() {
    let world = World::new("id-admission").await;
    let _suite = exclusive(&world.client).await;
    let policy = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/policies/reconcileplugin-serviceaccount.yaml");
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(policy).unwrap()).unwrap();
    for (doc, plural) in docs.iter().zip([
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ]) {
        let gvk = kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            doc["kind"].as_str().unwrap(),
        );
        let api = kube::Api::<kube::api::DynamicObject>::all_with(
            world.client.clone(),
            &kube::core::ApiResource::from_gvk_with_plural(&gvk, plural),
        );
        api.patch(
            doc["metadata"]["name"].as_str().unwrap(),
            &PatchParams::apply("test").force(),
            &Patch::Apply(doc),
        )
        .await
        .expect("installing the admission policy");
    }
    world.bare_service_account("probe").await;
    // Both may create ReconcilePlugins; only bob may impersonate the ServiceAccount.
    let cluster_role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name}, "rules": rules})
    };
    let roles = kube::Api::<kube::api::DynamicObject>::all_with(
        world.client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"),
            "clusterroles",
        ),
    );
    let bindings = kube::Api::<kube::api::DynamicObject>::all_with(
        world.client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
            ),
            "clusterrolebindings",
        ),
    );
    let installer = format!("{}-installer", world.namespace);
    let params = PatchParams::apply("test").force();
    roles
        .patch(
            &installer,
            &params,
            &Patch::Apply(cluster_role(
                &installer,
                json!([{"apiGroups": ["reconhost.dev"], "resources": ["reconcileplugins"],
                        "verbs": ["get", "create", "patch", "update"]}]),
            )),
        )
        .await
        .unwrap();
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": installer},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": installer},
        "subjects": [{"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"}]});
    bindings
        .patch(&installer, &params, &Patch::Apply(&binding))
        .await
        .unwrap();
    world
        .grant(
            "probe",
            "unused",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
        )
        .await;
    let impersonate = world.api("rbac.authorization.k8s.io", "v1", "Role", "roles");
    impersonate
        .patch(
            "act-as-probe",
            &params,
            &Patch::Apply(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "act-as-probe", "namespace": world.namespace},
                "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"],
                           "resourceNames": ["probe"], "verbs": ["impersonate"]}]}),
            ),
        )
        .await
        .unwrap();
    world
        .api("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings")
        .patch(
            "act-as-probe",
            &params,
            &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "act-as-probe", "namespace": world.namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "act-as-probe"},
                "subjects": [{"kind": "User", "name": "bob"}]})),
        )
        .await
        .unwrap();

    let mut rp = world.reconcile_plugin(
        PROBE_RP,
        PROBE,
        &digest_of(&plugin("identity-probe")),
        world.config_map_source("identity-probe"),
    );
    rp["spec"]["serviceAccountRef"]["name"] = json!("probe");
    let as_user = |user: &'static str| {
        let cluster = world.cluster.clone();
        async move {
            cluster
                .client_as(user, &["system:authenticated"])
                .await
                .unwrap()
        }
    };
    let create = |client: kube::Client| {
        let rp = rp.clone();
        async move {
            reconcile_plugins(&client)
                .create(&PostParams::default(), &serde_json::from_value(rp).unwrap())
                .await
        }
    };
    // The API server takes a moment to start enforcing a new policy.
    let alice = as_user("alice").await;
    let refused = eventually(CONVERGE, "the policy to refuse alice", || async {
        match create(alice.clone()).await {
            Err(e) => Some(e),
            Ok(_) => {
                let _ = reconcile_plugins(&world.client)
                    .delete(PROBE_RP, &DeleteParams::default())
                    .await;
                None
            }
        }
    })
    .await;
    assert!(
        refused.to_string().contains(&format!(
            "user alice may not impersonate ServiceAccount {}/probe",
            world.namespace
        )),
        "{refused}"
    );
    create(as_user("bob").await)
        .await
        .expect("bob may act as probe");
    // Changing it to another account is checked too.
    let change =
        json!({"spec": {"serviceAccountRef": {"namespace": world.namespace, "name": "other"}}});
    let refused = reconcile_plugins(&as_user("bob").await)
        .patch(PROBE_RP, &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect_err("bob may not act as other");
    assert!(
        refused.to_string().contains("may not impersonate"),
        "{refused}"
    );
    let _ = reconcile_plugins(&world.client)
        .delete(PROBE_RP, &DeleteParams::default())
        .await;
    roles
        .delete(&installer, &DeleteParams::default())
        .await
        .unwrap();
    bindings
        .delete(&installer, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn kinds_the_host_does_not_let_a_plugin_touch_should_be_refused_at_load() {
    let world = World::new("id-kinds").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let _host = world.host(&[], &[]).await;
    world
        .install_probe("identity-cluster-child", "plugin", None)
        .await;
    let rp = world
        .plugin_status(PROBE_RP, "Ready=False/ClusterScopedChild", |rp| {
            has(rp, "Ready", "False", "ClusterScopedChild")
        })
        .await;
    assert!(cond(&rp, "Ready").2.contains("ClusterRole"), "{rp}");
    world.uninstall(PROBE_RP).await;

    world
        .plugin_config_map("builtin", &plugin("identity-builtin-parent"))
        .await;
    world
        .apply_plugin(&world.reconcile_plugin(
            "configmap",
            ["v1", "ConfigMap"],
            &digest_of(&plugin("identity-builtin-parent")),
            world.config_map_source("builtin"),
        ))
        .await;
    let rp = world
        .plugin_status("configmap", "Ready=False/BuiltinParent", |rp| {
            has(rp, "Ready", "False", "BuiltinParent")
        })
        .await;
    assert!(
        cond(&rp, "Ready").2.contains("--allow-builtin-parents"),
        "{rp}"
    );
    let cm = get(&world.config_maps(), "builtin").await.unwrap();
    assert!(
        cm["metadata"]["finalizers"].is_null(),
        "no ConfigMap got the plugin's finalizer: {cm}"
    );
    world.uninstall("configmap").await;
}

#[tokio::test]
async fn objects_the_host_did_not_create_should_not_be_taken_over() {
    let world = World::new("id-takeover").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .create(
            &world.config_maps(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "taken"}, "data": {"owner": "someone"}}),
        )
        .await;
    let _host = world.host(&[], &[]).await;
    world.install_probe("identity-probe", "plugin", None).await;
    world.plugin_ready(PROBE_RP).await;
    world.create_probe("grab", json!({"child": "taken"})).await;
    let message = eventually(CONVERGE, "the refusal", || async {
        synced_message(&get(&world.probes(), "grab").await?)
    })
    .await;
    assert!(
        message.contains(&format!(
            "ConfigMap {}/taken already exists and has no controller",
            world.namespace
        )),
        "{message}"
    );
    let taken = get(&world.config_maps(), "taken").await.unwrap();
    assert_eq!(taken["data"], json!({"owner": "someone"}), "left alone");
    assert!(taken["metadata"]["ownerReferences"].is_null(), "{taken}");

    // Two parents wanting one child: the second one is told, and does not fight.
    world
        .create_probe("first", json!({"child": "shared"}))
        .await;
    let shared = eventually(CONVERGE, "the shared child", || async {
        get(&world.config_maps(), "shared").await
    })
    .await;
    world
        .create_probe("second", json!({"child": "shared"}))
        .await;
    let message = eventually(CONVERGE, "the second parent's refusal", || async {
        synced_message(&get(&world.probes(), "second").await?)
    })
    .await;
    assert!(
        message.contains("is controlled by Probe first"),
        "{message}"
    );
    let after = get(&world.config_maps(), "shared").await.unwrap();
    assert_eq!(
        after["metadata"]["resourceVersion"], shared["metadata"]["resourceVersion"],
        "no write reached it"
    );
    world.uninstall(PROBE_RP).await;
}

#[tokio::test]
async fn a_parent_the_plugin_never_releases_should_be_released_after_its_timeout() {
    let world = World::new("id-finalize").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let _host = world.host(&[], &[]).await;
    world
        .install_probe(
            "identity-never-finalize",
            "plugin",
            Some(json!({"finalizeTimeout": "3s"})),
        )
        .await;
    world.plugin_ready(PROBE_RP).await;
    world.create_probe("stuck", json!({})).await;
    eventually(CONVERGE, "the plugin's finalizer", || async {
        let p = get(&world.probes(), "stuck").await?;
        p["metadata"]["finalizers"]
            .as_array()?
            .contains(&json!("reconhost.dev/never-finalize"))
            .then_some(())
    })
    .await;
    world
        .probes()
        .delete("stuck", &DeleteParams::default())
        .await
        .unwrap();
    eventually(CONVERGE, "the parent released and gone", || async {
        get(&world.probes(), "stuck").await.is_none().then_some(())
    })
    .await;
    let events = world.events_for("stuck").await;
    assert!(
        events.iter().any(|(t, reason, note)| t == "Warning"
            && reason == "FinalizeTimeout"
            && note.contains("3 s")),
        "{events:?}"
    );
    world.uninstall(PROBE_RP).await;
}

#[tokio::test]
async fn plugins_whose_children_feed_each_other_should_not_both_run() {
    let world = World::new("id-cycle").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let _host = world.host(&[], &[]).await;
    world
        .install_probe("identity-cycle-a", "plugin", None)
        .await;
    world.plugin_ready(PROBE_RP).await;
    world
        .plugin_config_map("cycle-b", &plugin("identity-cycle-b"))
        .await;
    let stamp_rp = "stamp.test.reconhost.dev";
    world
        .apply_plugin(&world.reconcile_plugin(
            stamp_rp,
            ["test.reconhost.dev/v1", "Stamp"],
            &digest_of(&plugin("identity-cycle-b")),
            world.config_map_source("cycle-b"),
        ))
        .await;
    let rp = world
        .plugin_status(stamp_rp, "Ready=False/Cycle", |rp| {
            has(rp, "Ready", "False", "Cycle")
        })
        .await;
    assert!(
        cond(&rp, "Ready").2.contains(
            "Stamp.test.reconhost.dev → Probe.test.reconhost.dev → Stamp.test.reconhost.dev"
        ),
        "{rp}"
    );
    world.uninstall(stamp_rp).await;
    world.uninstall(PROBE_RP).await;
}
