//! Cluster-scoped parents: children in any namespace (each names its own) and cluster-scoped
//! children, told apart by namespace, followed across namespaces, failed one by one when their
//! namespace is missing or terminating, and collected with the parent. The example
//! `namespace-defaults` end to end.
//!
//! The hosts here watch every namespace (a cluster-scoped parent's children are anywhere); the
//! parent kinds are this suite's own.

use crate::common;

use common::plugins::{digest_of, exclusive};
use common::{CONVERGE, World, condition, controlled_by, get, plugin};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

fn cluster_api(
    world: &World,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::all_with(
        world.client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

fn in_namespace(world: &World, namespace: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("", "v1", kind);
    Api::namespaced_with(
        world.client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

fn namespaces(world: &World) -> Api<DynamicObject> {
    cluster_api(world, "", "v1", "Namespace", "namespaces")
}

async fn create(api: &Api<DynamicObject>, object: Value) -> Value {
    let object: DynamicObject = serde_json::from_value(object).expect("an object literal");
    let created = api
        .create(&Default::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", object.metadata.name));
    serde_json::to_value(created).expect("JSON")
}

/// The events.k8s.io Events on the cluster-scoped object `kind`/`name`: Kubernetes records them
/// in namespace default.
async fn cluster_events(world: &World, kind: &str, name: &str) -> Vec<Value> {
    let gvk = GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
    let api: Api<DynamicObject> = Api::namespaced_with(
        world.client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "events"),
    );
    let list = api.list(&Default::default()).await.expect("listing events");
    list.items
        .into_iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .filter(|e| e["regarding"]["kind"] == kind && e["regarding"]["name"] == name)
        .collect()
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patching {name}: {e}"));
}

async fn namespace(world: &World, name: &str, labels: Value) {
    create(
        &namespaces(world),
        json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}}),
    )
    .await;
}

/// Waits until the parent's ResourceQuota and LimitRange (both named `name`) exist in exactly
/// the namespaces `present` of `all`, each controlled by `parent`.
async fn stamped(world: &World, name: &str, parent: &Value, all: &[String], present: &[&String]) {
    placed(
        world,
        "ResourceQuota",
        "resourcequotas",
        name,
        parent,
        all,
        present,
    )
    .await;
    placed(
        world,
        "LimitRange",
        "limitranges",
        name,
        parent,
        all,
        present,
    )
    .await;
}

/// Waits until `name` exists in exactly the namespaces `present` of `all`, each controlled by
/// `parent`.
async fn placed(
    world: &World,
    kind: &str,
    plural: &str,
    name: &str,
    parent: &Value,
    all: &[String],
    present: &[&String],
) {
    eventually(
        CONVERGE,
        &format!("{kind} {name} in exactly {present:?}"),
        || async {
            for ns in all {
                let found = get(&in_namespace(world, ns, kind, plural), name).await;
                let want = present.contains(&ns);
                match found {
                    Some(child) if want && controlled_by(&child, parent) => {}
                    None if !want => {}
                    _ => return None,
                }
            }
            Some(())
        },
    )
    .await;
}

#[tokio::test]
async fn namespace_defaults_should_follow_the_matching_namespaces() {
    let world = World::new("nsdefaults").await;
    let _host = world
        .host_everywhere_with(&["namespace-defaults"], &[])
        .await;
    let label = world.namespace.clone();
    let names: Vec<String> = ["a", "b", "c", "d", "late"]
        .iter()
        .map(|s| format!("{}-{s}", world.namespace))
        .collect();
    for name in &names[..3] {
        namespace(&world, name, json!({"defaults-test": label})).await;
    }
    namespace(&world, &names[3], json!({"defaults-test": "someone-else"})).await;

    let parents = cluster_api(
        &world,
        "examples.reconhost.dev",
        "v1alpha1",
        "NamespaceDefaults",
        "namespacedefaults",
    );
    let parent_name = world.namespace.clone();
    let parent = create(
        &parents,
        json!({
            "apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "NamespaceDefaults",
            "metadata": {"name": parent_name},
            "spec": {
                "namespaceSelector": {"matchLabels": {"defaults-test": label}},
                "quota": {"pods": "20"},
                "limits": [{"type": "Container", "default": {"cpu": "500m"}}],
            },
        }),
    )
    .await;

    // Children in three namespaces, none in the one that does not match.
    let (a, b, c, late) = (&names[0], &names[1], &names[2], &names[4]);
    stamped(&world, &parent_name, &parent, &names, &[a, b, c]).await;
    let synced = eventually(
        CONVERGE,
        "Synced=True with the namespaces listed",
        || async {
            let p = get(&parents, &parent_name).await?;
            let ok = condition(&p, "Synced")?["status"] == "True"
                && p["status"]["namespaces"] == json!([a, b, c]);
            ok.then_some(p)
        },
    )
    .await;
    assert_eq!(
        condition(&synced, "Ready").unwrap()["message"],
        "3 namespaces"
    );

    // A spec change reaches every namespace.
    merge(
        &parents,
        &parent_name,
        json!({"spec": {"quota": {"pods": "30"}}}),
    )
    .await;
    eventually(CONVERGE, "every quota at 30 pods", || async {
        for ns in [a, b, c] {
            let q = get(
                &in_namespace(&world, ns, "ResourceQuota", "resourcequotas"),
                &parent_name,
            )
            .await?;
            if q["spec"]["hard"]["pods"] != "30" {
                return None;
            }
        }
        Some(())
    })
    .await;

    // A namespace created later with the label gets its children; one unlabelled loses them.
    namespace(&world, late, json!({"defaults-test": label})).await;
    merge(
        &namespaces(&world),
        b,
        json!({"metadata": {"labels": {"defaults-test": null}}}),
    )
    .await;
    stamped(&world, &parent_name, &parent, &names, &[a, c, late]).await;

    // Deleting the parent: the garbage collector removes them all, across namespaces.
    parents
        .delete(&parent_name, &DeleteParams::foreground())
        .await
        .expect("deleting the parent");
    stamped(&world, &parent_name, &parent, &names, &[]).await;
}

#[tokio::test]
async fn a_child_whose_namespace_is_missing_or_terminating_should_fail_alone() {
    let world = World::new("spread").await;
    // Every host here reconciles every Spread: the Spread tests take turns.
    let _suite = exclusive(&world.client).await;
    let _host = world.host_everywhere_with(&["cluster-spread"], &[]).await;
    let (here, missing, ending, own) = (
        world.namespace.clone(),
        format!("{}-missing", world.namespace),
        format!("{}-ending", world.namespace),
        format!("{}-own", world.namespace),
    );
    // A namespace held in Terminating by a finalizer on an object inside it.
    namespace(&world, &ending, json!({})).await;
    let held = in_namespace(&world, &ending, "ConfigMap", "configmaps");
    create(
        &held,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "hold", "finalizers": ["test.reconhost.dev/hold"]}}),
    )
    .await;
    namespaces(&world)
        .delete(&ending, &DeleteParams::default())
        .await
        .expect("deleting a namespace");
    eventually(CONVERGE, "the namespace to be terminating", || async {
        let ns = get(&namespaces(&world), &ending).await?;
        (ns["status"]["phase"] == "Terminating").then_some(())
    })
    .await;

    let spreads = cluster_api(&world, "test.reconhost.dev", "v1", "Spread", "spreads");
    let name = world.namespace.clone();
    let parent = create(
        &spreads,
        json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Spread",
        "metadata": {"name": name},
        "spec": {"namespaces": [here, missing, ending], "ownNamespace": own}}),
    )
    .await;

    // The others are written: the ConfigMap where the namespace exists, the cluster-scoped
    // Namespace child; the plugin's status too, with Synced=False naming both failures.
    let cm = |ns: &str| in_namespace(&world, ns, "ConfigMap", "configmaps");
    let written = eventually(
        CONVERGE,
        "the children that can be written, and the failure",
        || async {
            let p = get(&spreads, &name).await?;
            let synced = condition(&p, "Synced")?;
            (synced["reason"] == "ChildFailed" && p["status"]["seen"].is_array()).then_some(p)
        },
    )
    .await;
    let message = condition(&written, "Synced").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(condition(&written, "Synced").unwrap()["status"], "False");
    assert!(
        message.contains(&format!("namespaces \"{missing}\" not found")),
        "{message}"
    );
    assert!(
        message.contains(&ending) && message.contains("being terminated"),
        "{message}"
    );
    assert_eq!(written["status"]["seen"], json!([here, ending]));
    assert!(controlled_by(
        &get(&cm(&here), &name)
            .await
            .expect("the ConfigMap in an existing namespace"),
        &parent
    ));
    let own_ns = get(&namespaces(&world), &own)
        .await
        .expect("the Namespace child");
    assert!(controlled_by(&own_ns, &parent), "{own_ns}");
    // A cluster-scoped object's events are recorded in namespace default.
    let note = eventually(CONVERGE, "a ChildFailed event on the parent", || async {
        cluster_events(&world, "Spread", &name)
            .await
            .into_iter()
            .find(|e| e["type"] == "Warning" && e["reason"] == "ChildFailed")
            .map(|e| e["note"].as_str().unwrap_or("").to_owned())
    })
    .await;
    assert!(note.contains(&missing) && note.contains(&ending), "{note}");

    // The missing namespace appears (a read, so it wakes the parent): its child follows.
    namespace(&world, &missing, json!({})).await;
    eventually(
        CONVERGE,
        "the ConfigMap in the namespace created later",
        || async { get(&cm(&missing), &name).await },
    )
    .await;
    // Only the terminating one is left failing; dropping it from the spec heals the parent.
    merge(
        &spreads,
        &name,
        json!({"spec": {"namespaces": [here, missing]}}),
    )
    .await;
    eventually(CONVERGE, "Synced=True", || async {
        let p = get(&spreads, &name).await?;
        (condition(&p, "Synced")?["status"] == "True").then_some(())
    })
    .await;

    // A namespaced child without a namespace, for a cluster-scoped parent, is refused whole.
    merge(&spreads, &name, json!({"spec": {"unplaced": true}})).await;
    let refused = eventually(CONVERGE, "the unplaced child refused", || async {
        let p = get(&spreads, &name).await?;
        let synced = condition(&p, "Synced")?;
        (synced["status"] == "False").then(|| synced["message"].as_str().unwrap_or("").to_owned())
    })
    .await;
    assert!(
        refused.contains("metadata.namespace is required"),
        "{refused}"
    );
    merge(&spreads, &name, json!({"spec": {"unplaced": null}})).await;

    // A ConfigMap of that name that someone else made, in another namespace: the plugin may
    // ask for it, the host does not take it over.
    let taken = format!("{}-taken", world.namespace);
    namespace(&world, &taken, json!({})).await;
    create(
        &cm(&taken),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"owner": "someone else"}}),
    )
    .await;
    merge(
        &spreads,
        &name,
        json!({"spec": {"namespaces": [here, taken]}}),
    )
    .await;
    let conflict = eventually(CONVERGE, "the takeover refused", || async {
        let p = get(&spreads, &name).await?;
        let synced = condition(&p, "Synced")?;
        (synced["reason"] == "ChildConflict")
            .then(|| synced["message"].as_str().unwrap_or("").to_owned())
    })
    .await;
    assert!(
        conflict.contains(&format!(
            "ConfigMap {taken}/{name} already exists and has no controller"
        )),
        "{conflict}"
    );
    let theirs = get(&cm(&taken), &name).await.expect("their ConfigMap");
    assert_eq!(theirs["data"], json!({"owner": "someone else"}), "{theirs}");
    assert!(theirs["metadata"]["ownerReferences"].is_null(), "{theirs}");
    merge(
        &spreads,
        &name,
        json!({"spec": {"namespaces": [here, missing]}}),
    )
    .await;

    // The parent goes: the garbage collector takes its children in every namespace and the
    // Namespace it made.
    merge(&held, "hold", json!({"metadata": {"finalizers": null}})).await;
    spreads
        .delete(&name, &DeleteParams::foreground())
        .await
        .expect("deleting the parent");
    eventually(CONVERGE, "the children collected", || async {
        let left = get(&cm(&here), &name).await.is_some()
            || get(&cm(&missing), &name).await.is_some()
            || get(&namespaces(&world), &own)
                .await
                .is_some_and(|ns| ns["status"]["phase"] != "Terminating");
        (!left).then_some(())
    })
    .await;
    assert!(
        get(&cm(&taken), &name).await.is_some(),
        "an object the parent never owned outlives it"
    );
}

#[tokio::test]
async fn a_cluster_scoped_parents_plugin_should_write_only_where_its_service_account_may() {
    let world = World::new("spread-id").await;
    let _suite = exclusive(&world.client).await;
    world.bare_service_account("spread").await;
    // Its own kind and the Namespaces it reads, cluster-wide; ConfigMaps in this namespace only.
    world.grant_cluster("spread", json!([
        {"apiGroups": ["test.reconhost.dev"], "resources": ["spreads"], "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": ["test.reconhost.dev"], "resources": ["spreads/status"], "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["test.reconhost.dev"], "resources": ["spreads/finalizers"], "verbs": ["update"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    ]))
    .await;
    let roles = world.api("rbac.authorization.k8s.io", "v1", "Role", "roles");
    let params = PatchParams::apply("test").force();
    roles
        .patch("configmaps", &params, &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role", "metadata": {"name": "configmaps", "namespace": world.namespace},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                       "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}]})))
        .await
        .expect("a Role");
    world
        .api("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings")
        .patch("configmaps", &params, &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding", "metadata": {"name": "configmaps", "namespace": world.namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps"},
            "subjects": [{"kind": "ServiceAccount", "namespace": world.namespace, "name": "spread"}]})))
        .await
        .expect("a RoleBinding");

    let _host = world.host_everywhere(&[]).await;
    world
        .plugin_config_map("cluster-spread", &plugin("cluster-spread"))
        .await;
    let mut rp = world.reconcile_plugin(
        "spread.test.reconhost.dev",
        ["test.reconhost.dev/v1", "Spread"],
        &digest_of(&plugin("cluster-spread")),
        world.config_map_source("cluster-spread"),
    );
    rp["spec"]["serviceAccountRef"]["name"] = json!("spread");
    world.apply_plugin(&rp).await;
    world.plugin_ready("spread.test.reconhost.dev").await;

    // A hostile parent asks for a ConfigMap in kube-system too: the API server refuses the
    // plugin's account there, and only there.
    let spreads = cluster_api(&world, "test.reconhost.dev", "v1", "Spread", "spreads");
    let name = world.namespace.clone();
    let mark = world.writes();
    let parent = create(
        &spreads,
        json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Spread",
        "metadata": {"name": name}, "spec": {"namespaces": [world.namespace, "kube-system"]}}),
    )
    .await;
    let message = eventually(CONVERGE, "the refusal in kube-system shown", || async {
        let p = get(&spreads, &name).await?;
        let synced = condition(&p, "Synced")?;
        (synced["status"] == "False").then(|| synced["message"].as_str().unwrap_or("").to_owned())
    })
    .await;
    let user = format!("system:serviceaccount:{}:spread", world.namespace);
    assert!(
        message.contains("forbidden") && message.contains("kube-system") && message.contains(&user),
        "{message}"
    );
    let mine = get(
        &in_namespace(&world, &world.namespace, "ConfigMap", "configmaps"),
        &name,
    )
    .await
    .expect("the ConfigMap where the account may write");
    assert!(controlled_by(&mine, &parent));
    assert!(
        get(
            &in_namespace(&world, "kube-system", "ConfigMap", "configmaps"),
            &name
        )
        .await
        .is_none()
    );
    let child_write = world
        .cluster
        .audit_log()
        .events_in(&world.namespace)
        .unwrap()
        .into_iter()
        .skip(mark)
        .find(|e| {
            e.by_reconhost()
                && e.object_ref
                    .as_ref()
                    .is_some_and(|o| o.resource == "configmaps" && o.name == name)
        })
        .expect("the host's write of the ConfigMap in the audit log");
    assert_eq!(
        child_write.impersonated_user.map(|u| u.username),
        Some(user)
    );

    spreads
        .delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the parent");
    world.uninstall("spread.test.reconhost.dev").await;
}

#[tokio::test]
async fn children_outside_what_the_host_watches_or_in_its_own_namespace_should_be_refused() {
    let world = World::new("spread-fence").await;
    // Every host here reconciles every Spread: the Spread tests take turns.
    let _suite = exclusive(&world.client).await;
    let (other, home) = (
        format!("{}-other", world.namespace),
        format!("{}-home", world.namespace),
    );
    namespace(&world, &other, json!({})).await;
    namespace(&world, &home, json!({})).await;
    let name = world.namespace.clone();
    let cm = |ns: &str| in_namespace(&world, ns, "ConfigMap", "configmaps");
    // Someone else's object under the very name the plugin asks for, where the host's cache
    // cannot see it (it watches only the world's namespace).
    create(
        &cm(&other),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
               "data": {"owner": "someone-else"}}),
    )
    .await;
    let _host = world
        .host_with(
            &["cluster-spread"],
            &[],
            &["--leader-elect", "--leader-election-namespace", &home],
        )
        .await;
    let spreads = cluster_api(&world, "test.reconhost.dev", "v1", "Spread", "spreads");
    create(
        &spreads,
        json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Spread",
        "metadata": {"name": name}, "spec": {"namespaces": [other]}}),
    )
    .await;
    let refused = |expected: String| {
        let (spreads, name) = (spreads.clone(), name.clone());
        async move {
            eventually(
                CONVERGE,
                &format!("Synced=False saying {expected}"),
                || async {
                    let p = get(&spreads, &name).await?;
                    let synced = condition(&p, "Synced")?;
                    let message = synced["message"].as_str()?;
                    (synced["status"] == "False" && message.contains(&expected)).then_some(())
                },
            )
            .await
        }
    };
    refused(format!("in namespace {} only", world.namespace)).await;
    let untouched = |object: Value| {
        assert_eq!(object["data"]["owner"], "someone-else", "{object}");
        assert!(
            object["metadata"]["ownerReferences"].is_null(),
            "adopted: {object}"
        );
    };
    untouched(get(&cm(&other), &name).await.unwrap());

    // The host's own Namespace (its Lease's) is refused outright as a child.
    merge(
        &spreads,
        &name,
        json!({"spec": {"namespaces": [], "ownNamespace": home}}),
    )
    .await;
    refused(format!("Namespace {home}: it is the host's own namespace")).await;
    let home_ns = get(&namespaces(&world), &home).await.unwrap();
    assert!(
        home_ns["metadata"]["ownerReferences"].is_null(),
        "{home_ns}"
    );
    let leases = Api::<DynamicObject>::namespaced_with(
        world.client.clone(),
        &home,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
            "leases",
        ),
    );
    let lease = get(&leases, "reconhost-leader")
        .await
        .expect("the host's Lease");
    assert!(lease["metadata"]["ownerReferences"].is_null(), "{lease}");

    // Where the host watches, the child is written: the fence is not a blanket refusal.
    merge(
        &spreads,
        &name,
        json!({"spec": {"namespaces": [world.namespace], "ownNamespace": null}}),
    )
    .await;
    eventually(CONVERGE, "the child in the watched namespace", || async {
        get(&cm(&world.namespace), &name).await
    })
    .await;
    spreads
        .delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the Spread");
}
