//! The Kubernetes behaviour reconhost builds on, checked against the real API server that
//! `make test` starts: CRDs, custom objects, watches, server-side apply, the status subresource,
//! garbage collection, RBAC with impersonation, and the audit log of writes.

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use reconhost_tests::TestCluster;
use reconhost_tests::support::{eventually, namespace};
use serde_json::json;

const CRD_NAME: &str = "widgets.test.reconhost.dev";

fn cluster() -> TestCluster {
    TestCluster::from_env().unwrap_or_else(|e| panic!("{e}"))
}

/// The HTTP status of an API error, if the error came from the API server.
fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("test.reconhost.dev", "v1", "Widget"),
        "widgets",
    )
}

/// Installs the Widget CRD (idempotently, by server-side apply) and waits until it is Established.
async fn install_widget_crd(client: &kube::Client) -> CustomResourceDefinition {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": "test.reconhost.dev",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer"}, "color": {"type": "string"}}},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                    }
                }}
            }]
        }
    }))
    .expect("CRD literal");
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.patch(
        CRD_NAME,
        &PatchParams::apply("reconhost-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("applying the Widget CRD");
    eventually(
        Duration::from_secs(60),
        "the Widget CRD to become Established",
        || {
            let crds = crds.clone();
            async move {
                let crd = crds.get(CRD_NAME).await.ok()?;
                let established = crd
                    .status
                    .as_ref()?
                    .conditions
                    .as_ref()?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(crd)
            }
        },
    )
    .await
}

async fn widgets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    install_widget_crd(client).await;
    // A freshly established CRD can take a moment to be served by every handler.
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &widget_resource());
    eventually(Duration::from_secs(30), "widgets to be served", || {
        let api = api.clone();
        async move { api.list(&ListParams::default()).await.ok().map(|_| ()) }
    })
    .await;
    api
}

fn widget(name: &str, size: i64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "test.reconhost.dev/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": {"size": size, "color": "blue"}
    }))
    .expect("widget literal")
}

#[tokio::test]
async fn crd_should_become_established_and_served() {
    let client = cluster().client().await.unwrap();
    let crd = install_widget_crd(&client).await;
    let names = crd
        .status
        .unwrap()
        .accepted_names
        .expect("accepted names of an established CRD");
    assert_eq!(names.kind, "Widget");
    assert_eq!(names.plural, "widgets");
    // Discovery follows `Established` by a moment (seen in a cold CI run): ask until it shows.
    eventually(Duration::from_secs(30), "widgets in discovery", || async {
        let resources = client
            .list_api_group_resources("test.reconhost.dev/v1")
            .await
            .ok()?;
        resources
            .resources
            .iter()
            .any(|r| r.name == "widgets" && r.namespaced)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn custom_objects_should_be_created_read_listed_and_watched() {
    let client = cluster().client().await.unwrap();
    let ns = namespace(&client, "crud").await;
    let api = widgets(&client, &ns).await;

    let created = api
        .create(&PostParams::default(), &widget("one", 1))
        .await
        .expect("creating a widget");
    api.create(&PostParams::default(), &widget("two", 2))
        .await
        .expect("creating a second widget");
    let fetched = api.get("one").await.expect("reading the widget back");
    assert_eq!(fetched.data["spec"]["size"], 1);
    assert_eq!(fetched.metadata.uid, created.metadata.uid);

    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|w| w.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["one", "two"]);

    let list = api.list(&ListParams::default()).await.unwrap();
    let version = list
        .metadata
        .resource_version
        .expect("a list carries a resourceVersion");
    let mut events = api
        .watch(&WatchParams::default().timeout(60), &version)
        .await
        .expect("starting a watch")
        .boxed();
    api.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 10}})),
    )
    .await
    .unwrap();
    api.delete("two", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(30), events.try_next())
            .await
            .expect("a watch event within 30 s")
            .expect("a healthy watch")
            .expect("the watch to stay open");
        match event {
            WatchEvent::Modified(w) => seen.push(format!(
                "modified {} size={}",
                w.metadata.name.unwrap(),
                w.data["spec"]["size"]
            )),
            WatchEvent::Deleted(w) => seen.push(format!("deleted {}", w.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected watch event {other:?}"),
        }
    }
    assert_eq!(seen, ["modified one size=10", "deleted two"]);
}

#[tokio::test]
async fn server_side_apply_should_record_the_field_manager() {
    let client = cluster().client().await.unwrap();
    let ns = namespace(&client, "ssa").await;
    let api = widgets(&client, &ns).await;
    let params = PatchParams::apply("reconhost/example");
    let applied = api
        .patch("applied", &params, &Patch::Apply(&widget("applied", 3)))
        .await
        .expect("server-side apply");

    let managers = applied
        .metadata
        .managed_fields
        .expect("managedFields on an applied object");
    let entry = managers
        .iter()
        .find(|m| m.manager.as_deref() == Some("reconhost/example"))
        .expect("an entry for our field manager");
    assert_eq!(entry.operation.as_deref(), Some("Apply"));
    let fields = entry
        .fields_v1
        .as_ref()
        .expect("the fields we own")
        .0
        .to_string();
    assert!(
        fields.contains("f:size") && fields.contains("f:color"),
        "owned fields: {fields}"
    );

    // A second manager that sets the same field conflicts unless it forces.
    let rival = PatchParams::apply("someone-else");
    let err = api
        .patch("applied", &rival, &Patch::Apply(&widget("applied", 4)))
        .await
        .expect_err("a conflicting apply");
    assert_eq!(
        api_code(&err),
        Some(409),
        "expected 409 Conflict, got {err}"
    );
}

#[tokio::test]
async fn status_subresource_should_update_status_only() {
    let client = cluster().client().await.unwrap();
    let ns = namespace(&client, "status").await;
    let api = widgets(&client, &ns).await;
    let created = api
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let generation = created.metadata.generation;

    // A status write through the main resource is ignored for a CRD with the status subresource...
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Ignored"}})),
    )
    .await
    .unwrap();
    assert!(api.get("w").await.unwrap().data.get("status").is_none());

    // ...and a spec change through the status subresource is ignored there.
    let patched = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}, "spec": {"size": 99}})),
        )
        .await
        .expect("patching the status subresource");
    assert_eq!(patched.data["status"]["phase"], "Ready");
    assert_eq!(patched.data["spec"]["size"], 1);
    assert_eq!(
        patched.metadata.generation, generation,
        "a status write must not bump the generation"
    );
}

#[tokio::test]
async fn owned_object_should_be_garbage_collected_after_its_owner_is_deleted() {
    let client = cluster().client().await.unwrap();
    let ns = namespace(&client, "gc").await;
    let api = widgets(&client, &ns).await;
    let owner = api
        .create(&PostParams::default(), &widget("owner", 1))
        .await
        .unwrap();
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let child: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "child", "ownerReferences": [{
            "apiVersion": "test.reconhost.dev/v1", "kind": "Widget", "name": "owner",
            "uid": owner.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true
        }]},
        "data": {"k": "v"}
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &child)
        .await
        .unwrap();
    let bystander: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "bystander"}})).unwrap();
    configmaps
        .create(&PostParams::default(), &bystander)
        .await
        .unwrap();

    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    // The collector discovers a new CRD only on its 30 s resync, so allow several periods.
    eventually(
        Duration::from_secs(150),
        "the owned ConfigMap to be garbage-collected",
        || {
            let configmaps = configmaps.clone();
            async move { matches!(configmaps.get_opt("child").await, Ok(None)).then_some(()) }
        },
    )
    .await;
    assert!(
        configmaps.get_opt("bystander").await.unwrap().is_some(),
        "an unowned ConfigMap must survive"
    );
}

#[tokio::test]
async fn impersonated_service_account_should_be_bound_by_rbac() {
    let cluster = cluster();
    let admin = cluster.client().await.unwrap();
    let ns = namespace(&admin, "rbac").await;
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "plugin"}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let user = format!("system:serviceaccount:{ns}:plugin");
    let as_plugin = cluster.client_as(&user, &[]).await.unwrap();
    let configmaps = Api::<ConfigMap>::namespaced(as_plugin.clone(), &ns);

    let denied = configmaps
        .list(&ListParams::default())
        .await
        .expect_err("no RBAC grant yet");
    assert_eq!(
        api_code(&denied),
        Some(403),
        "expected 403 Forbidden, got {denied}"
    );
    assert!(
        denied.to_string().contains(&user),
        "the denial names the identity: {denied}"
    );

    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "configmap-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "plugin-reads-configmaps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "plugin", "namespace": ns}]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    eventually(
        Duration::from_secs(30),
        "the RoleBinding to take effect",
        || {
            let configmaps = configmaps.clone();
            async move {
                configmaps
                    .list(&ListParams::default())
                    .await
                    .ok()
                    .map(|_| ())
            }
        },
    )
    .await;
    // The grant is read-only and namespaced: writes and other namespaces stay forbidden.
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "nope"}})).unwrap();
    let write = configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect_err("the Role grants no create");
    assert_eq!(api_code(&write), Some(403), "{write}");
    let elsewhere = Api::<ConfigMap>::namespaced(as_plugin, "default")
        .list(&ListParams::default())
        .await
        .expect_err("no grant in default");
    assert_eq!(api_code(&elsewhere), Some(403), "{elsewhere}");
}

#[tokio::test]
async fn audit_log_should_record_each_write_with_its_identity() {
    let cluster = cluster();
    let admin = cluster.client().await.unwrap();
    let ns = namespace(&admin, "audit").await;
    let configmaps = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "audited"}, "data": {"a": "1"}}))
            .unwrap();
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    // Forced: the create above left `data.a` owned by the "unknown" manager of a plain create.
    configmaps.patch("audited", &PatchParams::apply("reconhost/audit").force(), &Patch::Apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "audited"}, "data": {"a": "2"}
    }))).await.unwrap();
    configmaps.get("audited").await.unwrap(); // a read, which the policy does not record
    configmaps
        .delete("audited", &DeleteParams::default())
        .await
        .unwrap();

    let log = cluster.audit_log();
    let writes = eventually(
        Duration::from_secs(30),
        "three audited writes in the test namespace",
        || {
            let log = log.clone();
            let ns = ns.clone();
            async move {
                let writes: Vec<_> = log
                    .events_in(&ns)
                    .ok()?
                    .into_iter()
                    .filter(|e| {
                        e.object_ref
                            .as_ref()
                            .is_some_and(|o| o.resource == "configmaps")
                    })
                    .collect();
                (writes.len() >= 3).then_some(writes)
            }
        },
    )
    .await;
    let verbs: Vec<&str> = writes.iter().map(|e| e.verb.as_str()).collect();
    assert_eq!(
        verbs,
        ["create", "patch", "delete"],
        "exactly the writes, in order, and no reads"
    );
    for event in &writes {
        assert_eq!(
            event.effective_user(),
            reconhost_tests::control_plane::ADMIN_USER
        );
        assert_eq!(event.object_ref.as_ref().unwrap().name, "audited");
        assert!(
            event
                .response_status
                .as_ref()
                .is_some_and(|s| (200..300).contains(&s.code)),
            "{event:?}"
        );
    }
    assert!(
        writes[1].request_uri.contains("fieldManager=reconhost"),
        "the apply names its field manager: {}",
        writes[1].request_uri
    );
}
