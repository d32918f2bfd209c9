//! The raw load generator: the writes the host makes for a new `webapp` parent, made without the
//! host. The bodies come from the host's own code, not from a copy of it: the plugin component
//! (`webapp.wasm`, the file the host loads) runs in the host's runtime, its answer goes through
//! the host's planner with the status fields the host reads off the WebApp CRD, and the record
//! annotation is the host's `LastReconcile`. What is left to this file is the four requests the
//! applier and the reconciler send, in their order, with their parameters:
//!
//! 1. the Deployment, server-side apply (`application/apply-patch+yaml`), field manager
//!    `reconhost/webapp`, `force=true` (`controller/applier.rs`, `Applier::child`);
//! 2. the Service, the same;
//! 3. the parent's status, server-side apply on the `status` subresource under the same field
//!    manager, forced, the body `{apiVersion, kind, metadata: {name}, status}`
//!    (`Applier::status`);
//! 4. the record `reconhost.dev/last-reconcile`, a JSON merge patch of that one annotation on
//!    the parent under the field manager `reconhost-record` (`Applier::annotate`, called by
//!    `controller/reconciler/record.rs`).
//!
//! The bench checks the result too: the managed fields the two leave on the same parent and
//! children ([`owned_fields`]) must be the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use reconhost::model::record::{LAST_RECONCILE, LastReconcile, Outcome};
use reconhost::model::{PluginInfo, ReconcileRequest};
use reconhost::planner::{self, Action, StatusFields};
use reconhost::runtime::{Limits, NoObjects, Plugin, Runtime, RuntimeConfig};
use reconhost_tests::world::World;
use serde_json::{Value, json};

/// The field manager of the host's record on a parent: `controller::applier::RECORD_MANAGER`
/// (private to the host; the managed-fields check catches a change of it).
const RECORD_MANAGER: &str = "reconhost-record";

/// The User-Agent of the generator's requests, so the audit log tells them from the host's
/// (`reconhost/<version> (<host>)`) and the benchmark's creates.
pub const USER_AGENT: &str = "reconhost-pace/raw";

/// One child apply: where it goes and the body.
struct Child {
    resource: ApiResource,
    name: String,
    body: Value,
}

/// The host's writes for one parent, in the order it sends them.
pub struct ParentWrites {
    name: String,
    children: Vec<Child>,
    /// The apply body on the status subresource.
    status: Value,
    /// The merge patch of the record annotation.
    record: Value,
}

/// Plans writes with the plugin component and the host's planner.
pub struct Planner {
    /// Kept for the plugin's sake: its instances come from this engine.
    _runtime: Runtime,
    plugin: Plugin,
    fields: StatusFields,
    /// The compiled-code cache of this runtime, removed at the end.
    _cache: tempfile::TempDir,
}

impl Planner {
    /// Loads `webapp.wasm` (the file `make plugins` built and the host is given) and reads the
    /// status fields of the WebApp CRD as the host does.
    pub async fn new(client: &kube::Client) -> Self {
        let cache = tempfile::tempdir().expect("a temporary directory");
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: cache.path().to_owned(),
            ..RuntimeConfig::default()
        })
        .expect("an engine");
        let path = reconhost_tests::world::plugin("webapp");
        let bytes = std::fs::read(&path).expect("webapp.wasm");
        let plugin = Plugin::load(&runtime, "webapp", &bytes, Limits::default()).expect("loading");
        let crd = Api::<CustomResourceDefinition>::all(client.clone())
            .get("webapps.examples.reconhost.dev")
            .await
            .expect("the WebApp CRD");
        let crd = serde_json::to_value(crd).expect("JSON");
        Self {
            _runtime: runtime,
            fields: StatusFields::from_crd(&crd, "v1alpha1"),
            plugin,
            _cache: cache,
        }
    }

    fn info(&self) -> &PluginInfo {
        self.plugin.info()
    }

    /// What the host writes for `parent` (as created, with no children yet), taking `now`
    /// (RFC 3339) as the time of its conditions' transitions and of the record.
    pub fn writes(&self, parent: &Value, now: &str) -> ParentWrites {
        let info = self.info();
        let request = ReconcileRequest {
            parent: parent.clone().into(),
            children: Vec::new(),
            config: json!({}),
            finalizing: false,
        };
        let outcome = self
            .plugin
            .reconcile(&request, Arc::new(NoObjects))
            .expect("webapp reconciles a new parent");
        let plan = planner::plan(info, &self.fields, parent, &outcome.desired, &[], now);
        assert!(
            plan.finalizer.is_none() && plan.metadata.is_none(),
            "webapp asks for a finalizer or parent metadata now: the generator sends neither"
        );
        let children: Vec<Child> = plan
            .children
            .iter()
            .map(|c| {
                assert_eq!(
                    c.action,
                    Action::Create,
                    "a new parent's children are created"
                );
                let resource = match c.kind.kind.as_str() {
                    "Deployment" => ApiResource::erase::<Deployment>(&()),
                    "Service" => ApiResource::erase::<Service>(&()),
                    other => panic!("webapp wants a {other} now: teach the generator its resource"),
                };
                Child {
                    resource,
                    name: c.name.clone(),
                    body: c.object.clone(),
                }
            })
            .collect();
        let name = parent["metadata"]["name"].as_str().expect("a name");
        let status = json!({
            "apiVersion": parent["apiVersion"],
            "kind": parent["kind"],
            "metadata": {"name": name},
            "status": plan.status.expect("a new parent's status is written"),
        });
        let record = LastReconcile {
            plugin: info.name.clone(),
            version: info.version.clone(),
            digest: format!("sha256:{}", self.plugin.digest()),
            generation: parent["metadata"]["generation"].as_i64().unwrap_or(0),
            time: now.to_owned(),
            outcome: Outcome::Applied {
                created: children.len() as u32,
                changed: 0,
                deleted: 0,
                parent: true,
            },
            reads: Vec::new(),
            trace_id: None,
        };
        ParentWrites {
            name: name.to_owned(),
            children,
            status,
            record: json!({"metadata": {"annotations": {LAST_RECONCILE: record.to_annotation()}}}),
        }
    }

    /// The field manager the host applies with, `reconhost/webapp`.
    pub fn field_manager(&self) -> String {
        self.info().field_manager()
    }
}

/// Sends planned writes into one namespace.
pub struct Generator {
    client: kube::Client,
    namespace: String,
    parents: ApiResource,
    apply: PatchParams,
    record: PatchParams,
}

impl Generator {
    /// A generator over a client of its own built as the host builds its client: kube-rs
    /// (hyper, HTTP/1.1 with a pool of kept-alive connections, rustls) from the same
    /// kubeconfig, with kube's retry of throttled requests (the host puts the same policy
    /// around its request counter) and no other layer.
    pub async fn new(world: &World, field_manager: &str) -> Self {
        let mut config =
            reconhost_tests::cluster::config_from_kubeconfig(world.cluster.kubeconfig())
                .await
                .expect("the kubeconfig");
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        ));
        Self {
            client: kube::Client::try_from(config).expect("a client"),
            namespace: world.namespace.clone(),
            parents: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("examples.reconhost.dev", "v1alpha1", "WebApp"),
                "webapps",
            ),
            apply: PatchParams::apply(field_manager).force(),
            record: PatchParams {
                field_manager: Some(RECORD_MANAGER.to_owned()),
                ..PatchParams::default()
            },
        }
    }

    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, resource)
    }

    /// Sends every parent's writes with `workers` tasks, each taking the next parent and
    /// sending its writes, as the host's workers take the next parent off their queue.
    pub async fn send_all(
        self: Arc<Self>,
        planned: Arc<Vec<ParentWrites>>,
        workers: usize,
    ) -> Result<(), kube::Error> {
        let next = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..workers)
            .map(|_| {
                let (generator, planned, next) = (self.clone(), planned.clone(), next.clone());
                tokio::spawn(async move {
                    while let Some(writes) = planned.get(next.fetch_add(1, Ordering::Relaxed)) {
                        generator.send(writes).await?;
                    }
                    Ok::<(), kube::Error>(())
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a generator task")?;
        }
        Ok(())
    }

    /// Sends one parent's writes one after the other, as one reconcile does.
    pub async fn send(&self, writes: &ParentWrites) -> Result<(), kube::Error> {
        for child in &writes.children {
            self.api(&child.resource)
                .patch(&child.name, &self.apply, &Patch::Apply(&child.body))
                .await?;
        }
        let parents = self.api(&self.parents);
        parents
            .patch_status(&writes.name, &self.apply, &Patch::Apply(&writes.status))
            .await?;
        parents
            .patch(&writes.name, &self.record, &Patch::Merge(&writes.record))
            .await?;
        Ok(())
    }
}

/// The managed fields of parent `name`, its Deployment and its Service, one line per manager
/// (`Kind manager operation subresource fields`), with the parent's UID (which differs between
/// namespaces) replaced: what two writers of the same requests leave the same.
pub async fn owned_fields(world: &World, name: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let parent = reconhost_tests::world::get(&world.webapps(), name).await;
    let uid = parent
        .as_ref()
        .map_or("", |p| p["metadata"]["uid"].as_str().unwrap_or(""));
    let uid = uid.to_owned();
    for (kind, object) in [
        ("WebApp", parent),
        (
            "Deployment",
            reconhost_tests::world::get(&world.deployments(), name).await,
        ),
        (
            "Service",
            reconhost_tests::world::get(&world.services(), name).await,
        ),
    ] {
        let Some(object) = object else {
            lines.push(format!("{kind} {name} missing"));
            continue;
        };
        for entry in object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let fields = entry["fieldsV1"].to_string().replace(&uid, "<parent uid>");
            lines.push(format!(
                "{kind} {} {} {} {fields}",
                entry["manager"].as_str().unwrap_or(""),
                entry["operation"].as_str().unwrap_or(""),
                entry["subresource"].as_str().unwrap_or("-"),
            ));
        }
    }
    lines.sort();
    lines
}
