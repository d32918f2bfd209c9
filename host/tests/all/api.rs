//! The ReconcilePlugin CRD on the real API server: what it refuses before any host sees it.

use crate::common;

use common::World;
use common::plugins::{exclusive, reconcile_plugins};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn valid(namespace: &str) -> Value {
    json!({"apiVersion": "reconhost.dev/v1alpha1", "kind": "ReconcilePlugin",
    "metadata": {"name": "widget.api.test.reconhost.dev"},
    "spec": {
        "parent": {"apiVersion": "api.test.reconhost.dev/v1", "kind": "Widget"},
        "source": {"digest": format!("sha256:{}", "0".repeat(64)),
                   "configMap": {"namespace": namespace, "name": "widget"}},
        "serviceAccountRef": {"namespace": namespace, "name": "widget"},
    }})
}

/// Creates `rp` and returns the API server's refusal, or `None` if it was accepted (and then
/// deletes it again).
async fn refusal(world: &World, rp: &Value) -> Option<String> {
    let api = reconcile_plugins(&world.client);
    let object = serde_json::from_value(rp.clone()).expect("an object");
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => {
            let name = created.metadata.name.unwrap_or_default();
            api.delete(&name, &DeleteParams::default())
                .await
                .expect("deleting");
            None
        }
        Err(e) => Some(e.to_string()),
    }
}

#[tokio::test]
async fn the_api_server_should_refuse_what_the_crd_rules_out() {
    let world = World::new("api").await;
    // The ReconcilePlugins made here are cluster-wide: a host of another suite must not see them.
    let _suite = exclusive(&world.client).await;
    let ns = world.namespace.clone();
    assert_eq!(
        refusal(&world, &valid(&ns)).await,
        None,
        "the valid one is accepted"
    );

    let mut cases: Vec<(&str, Value, &str)> = Vec::new();
    let mut rp = valid(&ns);
    rp["metadata"]["name"] = json!("widgets");
    cases.push((
        "a name that is not the kind's",
        rp,
        "one ReconcilePlugin per parent kind",
    ));
    let mut rp = valid(&ns);
    rp["spec"]["source"]["oci"] = json!({"reference": "registry.example/w:1"});
    cases.push((
        "two sources",
        rp,
        "exactly one of source.configMap and source.oci",
    ));
    let mut rp = valid(&ns);
    rp["spec"]["source"]
        .as_object_mut()
        .unwrap()
        .remove("configMap");
    cases.push((
        "no source",
        rp,
        "exactly one of source.configMap and source.oci",
    ));
    let mut rp = valid(&ns);
    rp["spec"]["source"]["digest"] = json!("sha256:abc");
    cases.push(("a digest that is not a sha256", rp, "spec.source.digest"));
    let mut rp = valid(&ns);
    rp["spec"]["source"]["configMap"]["namespace"] = json!("elsewhere");
    cases.push((
        "a ConfigMap outside the plugin's namespace",
        rp,
        "namespace of spec.serviceAccountRef",
    ));
    let mut rp = valid(&ns);
    rp["spec"]["limits"] = json!({"callTimeout": "5m"});
    cases.push((
        "a deadline beyond 60 s",
        rp,
        "callTimeout must be between 10ms and 60s",
    ));
    let mut rp = valid(&ns);
    rp["spec"]["limits"] = json!({"memory": "8Gi"});
    cases.push((
        "memory beyond 1Gi",
        rp,
        "memory must be a quantity between 1Mi and 1Gi",
    ));
    let mut rp = valid(&ns);
    rp["spec"]["limits"] = json!({"concurrentReconciles": 0});
    cases.push(("no concurrency", rp, "concurrentReconciles"));
    for (case, rp, message) in cases {
        let refused = refusal(&world, &rp)
            .await
            .unwrap_or_else(|| panic!("{case} was accepted"));
        assert!(refused.contains(message), "{case}: {refused}");
    }

    // The parent kind cannot change once set.
    let api = reconcile_plugins(&world.client);
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(valid(&ns)).unwrap(),
        )
        .await
        .expect("creating");
    let name = created.metadata.name.unwrap_or_default();
    let change =
        json!({"spec": {"parent": {"apiVersion": "api.test.reconhost.dev/v2", "kind": "Widget"}}});
    let refused = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect_err("changing spec.parent");
    assert!(
        refused.to_string().contains("spec.parent is immutable"),
        "{refused}"
    );
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("deleting");
}
