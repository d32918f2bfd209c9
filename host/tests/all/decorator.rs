//! Decorators (Metacontroller's DecoratorController): a plugin that attaches children to
//! objects it does not own, selected by annotation, on a built-in kind the operator allowed.
//! The host writes nothing of its own on those objects, holds its finalizer only where the
//! plugin attaches something, and an object that opts out loses what was attached.

use crate::common;

use common::crd::{install_crd, test_crd};
use common::plugins::{digest_of, exclusive};
use common::{CONVERGE, World, controlled_by, drained, get, plugin};
use kube::api::{Api, DynamicObject};
use reconhost_tests::host::Host;
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

const RP: &str = "service-per-pod";
const OPT_IN: &str = "example.com/service-per-pod";

fn stateful_set(name: &str, replicas: i64, annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
            },
        },
    })
}

/// The Services attached to StatefulSet `name`, by name, once there are `count`.
async fn services_of(world: &World, sets: &Api<DynamicObject>, name: &str, count: usize) {
    eventually(
        CONVERGE,
        &format!("{count} services attached to {name}"),
        || async {
            let owner = get(sets, name).await?;
            let services = world.services().list(&Default::default()).await.ok()?;
            let attached: Vec<Value> = services
                .items
                .into_iter()
                .filter_map(|s| serde_json::to_value(s).ok())
                .filter(|s| controlled_by(s, &owner))
                .collect();
            let labelled = attached
                .iter()
                .all(|s| s["metadata"]["labels"]["reconhost.dev/decorator"] == RP);
            (attached.len() == count && labelled).then_some(())
        },
    )
    .await;
}

/// The annotation selector of the service-per-pod decorator: StatefulSets that opt in.
fn opt_in() -> Value {
    json!({"annotationSelector": {"matchExpressions": [{"key": OPT_IN, "operator": "Exists"}]}})
}

/// Installs `component` (uploaded to ConfigMap `cm`) as decorator `name` on StatefulSets in
/// this namespace, and waits until it is Ready.
async fn install(world: &World, name: &str, component: &str, cm: &str, decorator: Value) {
    world.plugin_config_map(cm, &plugin(component)).await;
    let mut rp = world.reconcile_plugin(
        name,
        ["apps/v1", "StatefulSet"],
        &digest_of(&plugin(component)),
        world.config_map_source(cm),
    );
    rp["spec"]["namespaces"] = json!([world.namespace]);
    rp["spec"]["decorator"] = decorator;
    world.apply_plugin(&rp).await;
    world.plugin_ready(name).await;
}

/// The annotation service-per-pod sets on what it decorates.
const SERVICES: &str = "example.com/services";

/// What the decorator's field manager owns on `object` through apply (not its status), if
/// anything.
fn applied_metadata(object: &Value) -> Option<Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|m| {
            m["manager"] == format!("reconhost/{RP}")
                && m["operation"] == "Apply"
                && m.get("subresource").is_none()
        })
        .map(|m| m["fieldsV1"].clone())
        .filter(|fields| fields.as_object().is_some_and(|f| !f.is_empty()))
}

/// Whether the host (any of its field managers) ever wrote `object`'s status.
fn host_wrote_status(object: &Value) -> bool {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|m| {
            m["manager"]
                .as_str()
                .is_some_and(|n| n.starts_with("reconhost"))
                && m["subresource"] == "status"
        })
}

/// The plugins' account, a host that may reconcile built-in kinds, and StatefulSet `web` (two
/// replicas, opted in to service-per-pod).
async fn with_web(world: &World) -> (Host, Api<DynamicObject>) {
    world.service_account("plugin").await;
    let host = world
        .host_with(&[], &[], &["--allow-builtin-parents"])
        .await;
    let sets = world.api("apps", "v1", "StatefulSet", "statefulsets");
    world
        .create(&sets, stateful_set("web", 2, json!({OPT_IN: "true"})))
        .await;
    (host, sets)
}

#[tokio::test]
async fn a_decorator_should_attach_only_where_annotated_and_write_nothing_of_its_own() {
    let world = World::new("decorator").await;
    let _suite = exclusive(&world.client).await;
    let (host, sets) = with_web(&world).await;
    world.create(&sets, stateful_set("db", 1, json!({}))).await;

    install(&world, RP, "decorator-services", "services", opt_in()).await;

    // The annotated StatefulSet gets a Service per Pod, labelled as the decorator's, and the
    // finalizer; the other gets nothing at all.
    services_of(&world, &sets, "web", 2).await;
    drained(&host, RP).await;
    let web = get(&sets, "web").await.expect("web");
    let db = get(&sets, "db").await.expect("db");
    assert_eq!(
        web["metadata"]["finalizers"],
        json!([format!("reconhost.dev/{RP}")])
    );
    assert!(db["metadata"].get("finalizers").is_none(), "{db}");
    assert!(get(&world.services(), "db-0").await.is_none());
    // The annotation the plugin sets on what it decorates, under its own field manager and
    // nothing else of the object's.
    assert_eq!(web["metadata"]["annotations"][SERVICES], "2", "{web}");
    assert_eq!(
        applied_metadata(&web),
        Some(json!({"f:metadata": {"f:annotations": {format!("f:{SERVICES}"): {}}}})),
        "{web}"
    );
    assert!(
        db["metadata"]["annotations"].get(SERVICES).is_none(),
        "{db}"
    );
    // No status, condition or observedGeneration of the host's, nor the plugin's status on a
    // kind no CRD describes.
    for set in [&web, &db] {
        assert!(!host_wrote_status(set), "{set}");
        assert!(set["status"].get("conditions").is_none(), "{set}");
        assert!(set["status"].get("decoratedBy").is_none(), "{set}");
    }
    // The status the plugin asked for is said to be dropped, once, and why.
    let said: Vec<_> = world
        .events_for("web")
        .await
        .into_iter()
        .filter(|(_, reason, _)| reason == "StatusFieldsDropped")
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].2.contains("built-in kind") && said[0].2.contains("status.decoratedBy"),
        "{said:?}"
    );

    // Scaled: one more Service.
    world
        .merge(&sets, "web", json!({"spec": {"replicas": 3}}))
        .await;
    services_of(&world, &sets, "web", 3).await;
    eventually(CONVERGE, "web annotated with 3 services", || async {
        let web = get(&sets, "web").await?;
        (web["metadata"]["annotations"][SERVICES] == "3").then_some(())
    })
    .await;

    // Opting out releases: what was attached goes, and the finalizer.
    world
        .merge(
            &sets,
            "web",
            json!({"metadata": {"annotations": {OPT_IN: null}}}),
        )
        .await;
    services_of(&world, &sets, "web", 0).await;
    eventually(CONVERGE, "web's finalizer to go", || async {
        let web = get(&sets, "web").await?;
        web["metadata"].get("finalizers").is_none().then_some(())
    })
    .await;
    let web = get(&sets, "web").await.expect("web");
    assert!(!host_wrote_status(&web), "{web}");
    // What the plugin set on it is given up too.
    assert!(
        web["metadata"]["annotations"].get(SERVICES).is_none(),
        "{web}"
    );
    assert_eq!(applied_metadata(&web), None, "{web}");
    world.uninstall(RP).await;
}

#[tokio::test]
async fn two_decorators_on_one_kind_should_keep_to_their_own_children() {
    let world = World::new("decorators").await;
    let _suite = exclusive(&world.client).await;
    let (host, sets) = with_web(&world).await;
    install(&world, RP, "decorator-services", "services", opt_in()).await;
    install(
        &world,
        "config-per-set",
        "decorator-configs",
        "configs",
        json!({}),
    )
    .await;

    // Both attach to web, each its own, both controlled by web.
    let config_says = |replicas: &'static str| {
        let (world, sets) = (&world, &sets);
        async move {
            eventually(CONVERGE, &format!("web-config at {replicas}"), || async {
                let config = get(&world.config_maps(), "web-config").await?;
                let web = get(sets, "web").await?;
                (controlled_by(&config, &web)
                    && config["metadata"]["labels"]["reconhost.dev/decorator"] == "config-per-set"
                    && config["data"]["replicas"] == replicas)
                    .then_some(())
            })
            .await
        }
    };
    services_of(&world, &sets, "web", 2).await;
    config_says("2").await;

    // A change reaches both; neither removes what the other attached.
    world
        .merge(&sets, "web", json!({"spec": {"replicas": 3}}))
        .await;
    services_of(&world, &sets, "web", 3).await;
    config_says("3").await;
    drained(&host, RP).await;
    drained(&host, "config-per-set").await;
    services_of(&world, &sets, "web", 3).await;
    config_says("3").await;
    let web = get(&sets, "web").await.expect("web");
    assert!(!host_wrote_status(&web), "{web}");
    world.uninstall("config-per-set").await;
    world.uninstall(RP).await;
}

#[tokio::test]
async fn a_decorator_on_crds_should_make_cluster_roles_without_touching_any_crd() {
    const OPTED: &str = "example.com/reader-role";
    let world = World::new("decorator-crds").await;
    let _suite = exclusive(&world.client).await;
    // What the plugin's account may do, cluster-wide: read CRDs, manage ClusterRoles (with
    // `escalate`, since a reader role grants what the account itself does not hold), events.
    world.bare_service_account("roles").await;
    world
        .grant_cluster(
            "roles",
            json!([
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                 "verbs": ["get", "list", "watch", "create", "patch", "update", "delete", "escalate"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            ]),
        )
        .await;
    let host = world.host_everywhere(&["--allow-builtin-parents"]).await;
    let mut gadgets = test_crd("Gadget", "gadgets", json!({}));
    gadgets["metadata"]["annotations"] = json!({OPTED: "true"});
    let crds = install_crd(&world.client, "gadgets.test.reconhost.dev", gadgets).await;
    install_crd(
        &world.client,
        "gizmos.test.reconhost.dev",
        test_crd("Gizmo", "gizmos", json!({})),
    )
    .await;

    world
        .plugin_config_map("crd-roles", &plugin("decorator-roles"))
        .await;
    let mut rp = world.reconcile_plugin(
        "crd-roles",
        ["apiextensions.k8s.io/v1", "CustomResourceDefinition"],
        &digest_of(&plugin("decorator-roles")),
        world.config_map_source("crd-roles"),
    );
    rp["spec"]["serviceAccountRef"]["name"] = json!("roles");
    rp["spec"]["decorator"] =
        json!({"annotationSelector": {"matchExpressions": [{"key": OPTED, "operator": "Exists"}]}});
    world.apply_plugin(&rp).await;
    world.plugin_ready("crd-roles").await;

    let roles = world.cluster_api(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    );
    let crd_api = world.cluster_api(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    let role = eventually(CONVERGE, "the Gadget reader role", || async {
        get(&roles, "gadgets.test.reconhost.dev-reader").await
    })
    .await;
    let gadget_crd = get(&crd_api, "gadgets.test.reconhost.dev")
        .await
        .expect("the Gadget CRD");
    assert!(controlled_by(&role, &gadget_crd), "{role}");
    assert_eq!(
        role["metadata"]["labels"]["reconhost.dev/decorator"],
        "crd-roles"
    );
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["test.reconhost.dev"], "resources": ["gadgets"],
                "verbs": ["get", "list", "watch"]}])
    );
    drained(&host, "crd-roles").await;
    assert!(
        get(&roles, "gizmos.test.reconhost.dev-reader")
            .await
            .is_none(),
        "a CRD that did not opt in got a role"
    );
    // No CRD in the cluster, reconhost's own included, got a status, condition or finalizer
    // of the host's.
    let all = crd_api.list(&Default::default()).await.expect("the CRDs");
    for crd in all.items {
        let crd = serde_json::to_value(crd).expect("JSON");
        assert!(!host_wrote_status(&crd), "{crd}");
        let conditions = crd["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            conditions
                .iter()
                .all(|c| c["type"] != "Synced" && c["type"] != "Ready"),
            "{crd}"
        );
        let finalizers = crd["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            finalizers
                .iter()
                .all(|f| !f.as_str().unwrap_or("").starts_with("reconhost.dev/")),
            "{crd}"
        );
    }

    // Opting out: the role goes.
    crd_api
        .patch(
            "gadgets.test.reconhost.dev",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {OPTED: null}}})),
        )
        .await
        .expect("opting out");
    eventually(CONVERGE, "the Gadget reader role to go", || async {
        get(&roles, "gadgets.test.reconhost.dev-reader")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    world.uninstall("crd-roles").await;
    for name in ["gadgets.test.reconhost.dev", "gizmos.test.reconhost.dev"] {
        crds.delete(name, &Default::default()).await.ok();
    }
}
