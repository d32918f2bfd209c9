//! What the integration suites (host/tests/all) and the cluster benchmarks (host/benches) share:
//! a host per test, scoped to the test's own namespace on the shared control plane, and small
//! typed helpers for the example kinds.
//!
//! - [`chart`]: helm, kubectl and the chart, for the install suites.
//! - [`crd`]: CustomResourceDefinitions a suite owns.
//! - [`image`]: the image `make image` writes and the Debian image tools, for the image suite.
//! - [`load`]: parents that keep changing, and the convergence check, for the fault suite.
//! - [`plugins`]: ReconcilePlugins, their sources and conditions.

pub mod chart;
pub mod crd;
pub mod image;
pub mod load;
pub mod plugins;

use std::path::PathBuf;
use std::time::Duration;

use crate::TestCluster;
use crate::host::{Host, HostOptions, sample};
use crate::support::eventually;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

/// Generous bound for convergence on a small, busy machine; a limit, not a measurement.
pub const CONVERGE: Duration = Duration::from_secs(60);

/// A component built by `make plugins`.
pub fn plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("RECONHOST_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target"))
                });
            target.join("plugins")
        });
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `make plugins`",
        path.display()
    );
    path
}

/// The `reconhost` binary: the one Cargo built for the integration test or benchmark that runs
/// (Cargo sets `CARGO_BIN_EXE_reconhost` when it runs them), else the one beside the running
/// executable (`target/<profile>/reconhost`, for a test binary started by hand).
fn reconhost_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_reconhost") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the running executable's path");
    let mut dir = exe.parent().expect("a directory").to_owned();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join("reconhost");
    assert!(
        path.is_file(),
        "{} is missing: run the tests and benchmarks through cargo, or build reconhost",
        path.display()
    );
    path
}

/// A test's world: the cluster, an admin client, its namespace.
pub struct World {
    /// The control plane.
    pub cluster: TestCluster,
    /// A client with every right on it.
    pub client: kube::Client,
    /// The test's own namespace.
    pub namespace: String,
}

impl World {
    /// A world on the control plane `make test` started.
    pub async fn new(prefix: &str) -> Self {
        let cluster = TestCluster::from_env().expect("a control plane (run `make test`)");
        Self::on(cluster, prefix).await
    }

    /// A world on a given control plane (one a test started for itself).
    pub async fn on(cluster: TestCluster, prefix: &str) -> Self {
        let client = cluster.client().await.expect("a client");
        let namespace = crate::support::namespace(&client, prefix).await;
        Self {
            cluster,
            client,
            namespace,
        }
    }

    /// Starts a host with these plugins, watching only this world's namespace.
    pub async fn host(&self, plugins: &[&str], env: &[(&str, &str)]) -> Host {
        self.host_with(plugins, env, &[]).await
    }

    /// Like [`World::host`], with more `reconhost run` arguments.
    pub async fn host_with(&self, plugins: &[&str], env: &[(&str, &str)], args: &[&str]) -> Host {
        self.host_in(&self.namespace, plugins, env, args).await
    }

    /// Like [`World::host_with`], running `binary` rather than this build's `reconhost`: a
    /// benchmark's baseline, another commit's build, beside this one.
    pub async fn host_of(
        &self,
        binary: &std::path::Path,
        plugins: &[&str],
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Host {
        let mut options = self.here(plugins, env, args);
        options.binary = binary.to_owned();
        started(&options).await
    }

    /// A host that watches every namespace, as one installed in a cluster does. Only for suites
    /// whose parents no other suite creates at the same time.
    pub async fn host_everywhere(&self, args: &[&str]) -> Host {
        self.host_in("", &[], &[], args).await
    }

    /// Like [`World::host_everywhere`], with `--plugin` files.
    pub async fn host_everywhere_with(&self, plugins: &[&str], args: &[&str]) -> Host {
        self.host_in("", plugins, &[], args).await
    }

    /// Like [`World::host_with`], connecting with another kubeconfig (another identity).
    pub async fn host_as(
        &self,
        kubeconfig: &std::path::Path,
        plugins: &[&str],
        args: &[&str],
    ) -> Host {
        self.host_from(kubeconfig, &self.namespace, plugins, &[], args)
            .await
    }

    async fn host_in(
        &self,
        namespace: &str,
        plugins: &[&str],
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Host {
        self.host_from(self.cluster.kubeconfig(), namespace, plugins, env, args)
            .await
    }

    /// A host with every setting given: kubeconfig, namespace (empty: all), plugins,
    /// environment and arguments.
    pub async fn host_from(
        &self,
        kubeconfig: &std::path::Path,
        namespace: &str,
        plugins: &[&str],
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Host {
        let options = self.host_options(kubeconfig, namespace, plugins, env, args);
        started(&options).await
    }

    /// A host for ReconcilePlugins in all namespaces, held with what it starts to `memory`
    /// bytes (a cgroup, as a container's limit).
    pub async fn host_limited(&self, memory: u64, args: &[&str]) -> Host {
        let mut options = self.host_options(self.cluster.kubeconfig(), "", &[], &[], args);
        options.memory_limit = Some(memory);
        started(&options).await
    }

    /// Like [`World::host_from`] in this world's namespace, the host held to `millicores`
    /// thousandths of one CPU (a cgroup's quota, as a container's CPU limit).
    pub async fn host_held(
        &self,
        millicores: u64,
        plugins: &[&str],
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Host {
        self.host_held_of(&reconhost_binary(), millicores, plugins, env, args)
            .await
    }

    /// Like [`World::host_held`], running `binary` rather than this build's `reconhost`: a
    /// benchmark's instrumented build (Cargo sets `CARGO_BIN_EXE_reconhost` for the benchmark
    /// it runs, so that variable cannot name another).
    pub async fn host_held_of(
        &self,
        binary: &std::path::Path,
        millicores: u64,
        plugins: &[&str],
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Host {
        let mut options = self.here(plugins, env, args);
        options.binary = binary.to_owned();
        options.cpu_millicores = Some(millicores);
        started(&options).await
    }

    /// The options of a host in this world's namespace, as the cluster's admin.
    fn here(&self, plugins: &[&str], env: &[(&str, &str)], args: &[&str]) -> HostOptions {
        self.host_options(
            self.cluster.kubeconfig(),
            &self.namespace,
            plugins,
            env,
            args,
        )
    }

    fn host_options(
        &self,
        kubeconfig: &std::path::Path,
        namespace: &str,
        plugins: &[&str],
        env: &[(&str, &str)],
        args: &[&str],
    ) -> HostOptions {
        HostOptions {
            binary: reconhost_binary(),
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
            plugins: plugins.iter().map(|p| plugin(p)).collect(),
            log_dir: std::env::temp_dir().join(format!("reconhost-test-{}", self.namespace)),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            memory_limit: None,
            cpu_millicores: None,
        }
    }

    /// The API of a kind in this namespace.
    pub fn api(&self, group: &str, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        Api::namespaced_with(self.client.clone(), &self.namespace, &resource)
    }

    /// The API of a cluster-scoped kind.
    pub fn cluster_api(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
    ) -> Api<DynamicObject> {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        Api::all_with(self.client.clone(), &resource)
    }

    /// The example WebApps in this namespace.
    pub fn webapps(&self) -> Api<DynamicObject> {
        self.api("examples.reconhost.dev", "v1alpha1", "WebApp", "webapps")
    }

    /// The Deployments in this namespace.
    pub fn deployments(&self) -> Api<DynamicObject> {
        self.api("apps", "v1", "Deployment", "deployments")
    }

    /// The Services in this namespace.
    pub fn services(&self) -> Api<DynamicObject> {
        self.api("", "v1", "Service", "services")
    }

    /// The ConfigMaps in this namespace.
    pub fn config_maps(&self) -> Api<DynamicObject> {
        self.api("", "v1", "ConfigMap", "configmaps")
    }

    /// Creates an object from JSON in this namespace.
    pub async fn create(&self, api: &Api<DynamicObject>, object: Value) -> Value {
        let object: DynamicObject = serde_json::from_value(object).expect("an object literal");
        let created = api
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {:?}: {e}", object.metadata.name));
        serde_json::to_value(created).expect("JSON")
    }

    /// Merge-patches object `name` through `api`.
    pub async fn merge(&self, api: &Api<DynamicObject>, name: &str, patch: Value) {
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("patching {name}: {e}"));
    }

    /// Creates WebApp `name` in this namespace with this image and replica count.
    pub async fn create_webapp(&self, name: &str, image: &str, replicas: i64) -> Value {
        self.create(
            &self.webapps(),
            json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
                   "metadata": {"name": name}, "spec": {"image": image, "replicas": replicas}}),
        )
        .await
    }

    /// How many WebApps report their current generation in `status.observedGeneration`, and
    /// how many Deployments and Services the namespace holds: convergence, for benchmarks.
    pub async fn webapps_converged(&self) -> (usize, usize, usize) {
        let lp = kube::api::ListParams::default();
        let observed = self
            .webapps()
            .list(&lp)
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| {
                let p = serde_json::to_value(p).unwrap();
                p["status"]["observedGeneration"] == p["metadata"]["generation"]
            })
            .count();
        let deployments = self.deployments().list(&lp).await.unwrap().items.len();
        let services = self.services().list(&lp).await.unwrap().items.len();
        (observed, deployments, services)
    }

    /// How many write requests the audit log holds for this namespace: a mark for
    /// [`World::host_writes_since`].
    pub fn writes(&self) -> usize {
        self.cluster
            .audit_log()
            .events_in(&self.namespace)
            .expect("reading the audit log")
            .len()
    }

    /// The writes the host made in this namespace after the mark `since`, as `verb URI`.
    pub fn host_writes_since(&self, since: usize) -> Vec<String> {
        self.cluster
            .audit_log()
            .events_in(&self.namespace)
            .expect("reading the audit log")
            .into_iter()
            .skip(since)
            .filter(|e| e.by_reconhost())
            .map(|e| format!("{} {}", e.verb, e.request_uri))
            .collect()
    }

    /// The host's writes in this namespace whose request names `name` (the parent, its status,
    /// or a child named after it).
    pub fn host_writes_about(&self, name: &str) -> Vec<String> {
        let segment = format!("/{name}");
        self.host_writes_since(0)
            .into_iter()
            .filter(|w| w.split('?').next().unwrap_or("").contains(&segment))
            .collect()
    }

    /// The events.k8s.io Events recorded on an object, as JSON.
    pub async fn events(&self, name: &str) -> Vec<Value> {
        let api = self.api("events.k8s.io", "v1", "Event", "events");
        let list = api.list(&Default::default()).await.expect("listing events");
        list.items
            .into_iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .filter(|e| e["regarding"]["name"] == name)
            .collect()
    }

    /// Warning and Normal events recorded on an object, as (type, reason, note).
    pub async fn events_for(&self, name: &str) -> Vec<(String, String, String)> {
        let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
        self.events(name)
            .await
            .iter()
            .map(|e| (s(&e["type"]), s(&e["reason"]), s(&e["note"])))
            .collect()
    }
}

/// An object as JSON, or `None` if it does not exist.
pub async fn get(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading {name}: {e}"))
        .map(|o| serde_json::to_value(o).expect("JSON"))
}

/// The condition of this type in the object's status.
pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Whether `child` names `parent` as its controller.
pub fn controlled_by(child: &Value, parent: &Value) -> bool {
    child["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == parent["metadata"]["uid"] && r["controller"] == true)
        })
}

/// Successful reconciles the host has counted for a controller so far.
pub async fn reconciles(host: &Host, controller: &str) -> f64 {
    sample(
        &host.metrics().await.expect("the host's metrics"),
        "controller_runtime_reconcile_total",
        &[("controller", controller), ("result", "success")],
    )
    .unwrap_or(0.0)
}

/// Reconciles the host has counted for a controller so far, whatever their result.
pub async fn reconciles_any(host: &Host, controller: &str) -> f64 {
    let metrics = host.metrics().await.expect("the host's metrics");
    ["success", "error", "requeue", "requeue_after"]
        .iter()
        .filter_map(|result| {
            sample(
                &metrics,
                "controller_runtime_reconcile_total",
                &[("controller", controller), ("result", result)],
            )
        })
        .sum()
}

/// Waits until the controller has nothing queued and nothing in flight.
pub async fn drained(host: &Host, controller: &str) {
    eventually(CONVERGE, "the host's queue to drain", || async {
        let m = host.metrics().await.ok()?;
        let c = ("controller", controller);
        let idle = sample(&m, "controller_runtime_active_workers", &[c])? == 0.0
            && sample(&m, "workqueue_depth", &[c, ("priority", "0")])? == 0.0
            && sample(&m, "workqueue_depth", &[c, ("priority", "-100")])? == 0.0;
        idle.then_some(())
    })
    .await;
}

/// Waits until the object shows `Synced=True` (its last reconcile went through) and returns it.
pub async fn synced(api: &Api<DynamicObject>, name: &str) -> Value {
    eventually(CONVERGE, &format!("Synced=True on {name}"), || async {
        let object = get(api, name).await?;
        (condition(&object, "Synced")?["status"] == "True").then_some(object)
    })
    .await
}

/// Whether ServiceAccount `account` of `namespace_of_account` may `verb` `resource` (of the
/// core group) in `namespace` (empty: in every namespace), as the API server's authorizers
/// say: a SubjectAccessReview, with the groups every ServiceAccount has.
pub async fn account_may(
    client: &kube::Client,
    (namespace_of_account, account): (&str, &str),
    verb: &str,
    resource: &str,
    namespace: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{namespace_of_account}:{account}"
            )),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace_of_account}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

/// Starts a host, or fails the test naming its binary.
async fn started(options: &HostOptions) -> Host {
    Host::start(options)
        .await
        .unwrap_or_else(|e| panic!("starting the host {}: {e}", options.binary.display()))
}
