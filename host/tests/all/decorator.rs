//! Decorators (Metacontroller's DecoratorController): a plugin that attaches children to
//! objects it does not own, selected by annotation, on a built-in kind the operator allowed.
//! The host writes nothing of its own on those objects, holds its finalizer only where the
//! plugin attaches something, and an object that opts out loses what was attached.

use crate::common;

use common::plugins::{digest_of, exclusive};
use common::{CONVERGE, World, controlled_by, drained, get, plugin};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
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

#[tokio::test]
async fn a_decorator_should_attach_only_where_annotated_and_write_nothing_of_its_own() {
    let world = World::new("decorator").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("services", &plugin("decorator-services"))
        .await;
    let host = world
        .host_with(&[], &[], &["--allow-builtin-parents"])
        .await;
    let sets = world.api("apps", "v1", "StatefulSet", "statefulsets");
    world
        .create(&sets, stateful_set("web", 2, json!({OPT_IN: "true"})))
        .await;
    world.create(&sets, stateful_set("db", 1, json!({}))).await;

    let mut rp = world.reconcile_plugin(
        RP,
        ["apps/v1", "StatefulSet"],
        &digest_of(&plugin("decorator-services")),
        world.config_map_source("services"),
    );
    rp["spec"]["namespaces"] = json!([world.namespace]);
    rp["spec"]["decorator"] = json!({"annotationSelector": {"matchExpressions": [{"key": OPT_IN, "operator": "Exists"}]}});
    world.apply_plugin(&rp).await;
    world.plugin_ready(RP).await;

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
    // No status, condition or observedGeneration of the host's, nor the plugin's status on a
    // kind no CRD describes.
    for set in [&web, &db] {
        assert!(!host_wrote_status(set), "{set}");
        assert!(set["status"].get("conditions").is_none(), "{set}");
        assert!(set["status"].get("decoratedBy").is_none(), "{set}");
    }

    // Scaled: one more Service.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .expect("scaling web");
    services_of(&world, &sets, "web", 3).await;

    // Opting out releases: what was attached goes, and the finalizer.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {OPT_IN: null}}})),
    )
    .await
    .expect("opting web out");
    services_of(&world, &sets, "web", 0).await;
    eventually(CONVERGE, "web's finalizer to go", || async {
        let web = get(&sets, "web").await?;
        web["metadata"].get("finalizers").is_none().then_some(())
    })
    .await;
    let web = get(&sets, "web").await.expect("web");
    assert!(!host_wrote_status(&web), "{web}");
    world.uninstall(RP).await;
}
