//! What the ReconcilePlugin suites share: sources (ConfigMaps, the loopback registry), the
//! resources themselves, and waiting on their conditions.
//!
//! ReconcilePlugins are cluster-scoped and one per parent kind, so tests that install them
//! cannot run side by side on the shared control plane: each takes [`exclusive`] first, which
//! also removes whatever an earlier, failed test left behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::eventually;
use base64::Engine as _;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::{CONVERGE, World, condition, get};

/// Serializes the tests that install ReconcilePlugins, and clears the cluster of them.
pub async fn exclusive(client: &kube::Client) -> tokio::sync::MutexGuard<'static, ()> {
    static SUITE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = SUITE.lock().await;
    let api = reconcile_plugins(client);
    let leftover = api
        .list(&Default::default())
        .await
        .expect("listing ReconcilePlugins");
    for rp in leftover.items {
        let name = rp.metadata.name.clone().unwrap_or_default();
        let _ = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    eventually(CONVERGE, "no ReconcilePlugin left", || async {
        let left = api.list(&Default::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    guard
}

/// The ReconcilePlugin API.
pub fn reconcile_plugins(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("reconhost.dev", "v1alpha1", "ReconcilePlugin");
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "reconcileplugins"),
    )
}

/// `sha256:<hex>` of a file.
pub fn digest_of(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)))
}

impl World {
    /// A ConfigMap in this namespace holding `component` under `plugin.wasm` in binaryData.
    pub async fn plugin_config_map(&self, name: &str, component: &Path) -> Value {
        let bytes = std::fs::read(component).expect("reading the component");
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        let api = self.config_maps();
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.namespace},
            "binaryData": {"plugin.wasm": data}});
        api.patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("applying ConfigMap {name}: {e}"));
        body
    }

    /// A ServiceAccount in this namespace, for `serviceAccountRef`, with every right in this
    /// namespace (where the test's parents and children are): what the lifecycle suites need,
    /// which are not about authority.
    pub async fn service_account(&self, name: &str) {
        self.bare_service_account(name).await;
        let api = self.api(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
        );
        let body = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{name}-admin"), "namespace": self.namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "namespace": self.namespace, "name": name}]});
        api.patch(
            &format!("{name}-admin"),
            &PatchParams::apply("test").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("binding ServiceAccount {name}: {e}"));
    }

    /// A ClusterRole with these rules, bound cluster-wide to the ServiceAccount `account` of
    /// this namespace.
    pub async fn grant_cluster(&self, account: &str, rules: Value) {
        let name = format!("{}-{account}", self.namespace);
        let params = PatchParams::apply("test").force();
        let rbac = |kind: &str, plural: &str| {
            self.cluster_api("rbac.authorization.k8s.io", "v1", kind, plural)
        };
        rbac("ClusterRole", "clusterroles")
            .patch(
                &name,
                &params,
                &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})),
            )
            .await
            .expect("a ClusterRole");
        rbac("ClusterRoleBinding", "clusterrolebindings")
            .patch(&name, &params, &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "namespace": self.namespace, "name": account}]})))
            .await
            .expect("a ClusterRoleBinding");
    }

    /// A ServiceAccount in this namespace with no rights at all.
    pub async fn bare_service_account(&self, name: &str) {
        let api = self.api("", "v1", "ServiceAccount", "serviceaccounts");
        let body = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": self.namespace}});
        api.patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("applying ServiceAccount {name}: {e}"));
    }

    /// A ReconcilePlugin `name` for `parent` (`[apiVersion, kind]`) with this `source` (the
    /// `source` object without `digest`), acting as ServiceAccount `plugin` in this namespace.
    pub fn reconcile_plugin(
        &self,
        name: &str,
        parent: [&str; 2],
        digest: &str,
        source: Value,
    ) -> Value {
        let mut source = source;
        source["digest"] = json!(digest);
        json!({"apiVersion": "reconhost.dev/v1alpha1", "kind": "ReconcilePlugin",
        "metadata": {"name": name},
        "spec": {
            "parent": {"apiVersion": parent[0], "kind": parent[1]},
            "source": source,
            "serviceAccountRef": {"namespace": self.namespace, "name": "plugin"},
        }})
    }

    /// `source` naming a ConfigMap of this namespace.
    pub fn config_map_source(&self, name: &str) -> Value {
        json!({"configMap": {"namespace": self.namespace, "name": name}})
    }

    /// Applies a ReconcilePlugin (server-side, as the test's field manager).
    pub async fn apply_plugin(&self, rp: &Value) {
        let name = rp["metadata"]["name"].as_str().expect("a name");
        reconcile_plugins(&self.client)
            .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(rp))
            .await
            .unwrap_or_else(|e| panic!("applying ReconcilePlugin {name}: {e}"));
    }

    /// Waits until the ReconcilePlugin's status describes its current generation and
    /// `check` accepts it; returns it.
    pub async fn plugin_status(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let api = reconcile_plugins(&self.client);
        eventually(
            CONVERGE,
            &format!("ReconcilePlugin {name}: {what}"),
            || async {
                let rp = get(&api, name).await?;
                let current = rp["status"]["observedGeneration"] == rp["metadata"]["generation"];
                (current && check(&rp)).then_some(rp)
            },
        )
        .await
    }

    /// Waits for `Ready=True` and returns the ReconcilePlugin.
    pub async fn plugin_ready(&self, name: &str) -> Value {
        self.plugin_status(name, "Ready=True", |rp| {
            condition(rp, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await
    }

    /// Deletes a ReconcilePlugin and waits until the host has let it go.
    pub async fn uninstall(&self, name: &str) {
        let api = reconcile_plugins(&self.client);
        api.delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting ReconcilePlugin {name}: {e}"));
        eventually(
            CONVERGE,
            &format!("ReconcilePlugin {name} to be gone"),
            || async { get(&api, name).await.is_none().then_some(()) },
        )
        .await;
    }

    /// The loopback registry `make test` started.
    pub fn registry(&self) -> String {
        self.cluster
            .registry()
            .expect("a registry beside the control plane (run `make test`)")
    }
}

/// The condition of `type_`: (status, reason, message).
pub fn cond(rp: &Value, type_: &str) -> (String, String, String) {
    let c = condition(rp, type_).unwrap_or_else(|| panic!("no {type_} condition in {rp}"));
    let s = |k: &str| c[k].as_str().unwrap_or("").to_owned();
    (s("status"), s("reason"), s("message"))
}

/// Whether the condition of `type_` has this status and reason.
pub fn has(rp: &Value, type_: &str, status: &str, reason: &str) -> bool {
    condition(rp, type_).is_some_and(|c| c["status"] == status && c["reason"] == reason)
}

/// An OCI tool (`oras`, `registry`) from the tool cache.
pub fn oci_tool(name: &'static str) -> PathBuf {
    crate::binaries::Binaries::tool(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a command and returns its stdout, failing the test with its stderr.
pub fn run(program: &Path, args: &[&str], dir: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Generous bound for a plugin to load and its caches to sync.
pub const INSTALL: Duration = Duration::from_secs(120);
