//! The baseline of the convergence benchmark: the `webapp` logic as a conventional operator
//! written with kube-runtime, one process for one CRD — what a Rust platform team writes today
//! instead of a plugin. It runs the very same reconcile function as the plugin (the example
//! crate linked natively), keeps a reflector cache of Deployments to read `readyReplicas` from,
//! and applies both children and the status with server-side apply on every reconcile, as such
//! operators usually do (the API server then drops the no-op writes, but each is a request).
//! Like the host, it keeps `lastTransitionTime` when a condition's status is unchanged, without
//! which every status write would wake the parent again, forever.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use reconhost_sdk::{ConditionStatus, Reconciler as _};
use serde_json::{Value, json};

const FIELD_MANAGER: &str = "native-webapp";

struct Context {
    client: kube::Client,
    webapps: ApiResource,
    deployments: Store<Deployment>,
    reconciles: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("the webapp logic refused the parent: {0:?}")]
    Logic(reconhost_sdk::Error),
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// The parent kind the operator serves: `WebApp` by default, or the kind a fleet variant was
/// given on the command line (`--native-operator <kubeconfig> <namespace> <workers> [<group>
/// <kind> <plural>]`).
pub fn parent_kind(args: &[String]) -> ApiResource {
    match args {
        [group, kind, plural, ..] => ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, "v1alpha1", kind),
            plural,
        ),
        _ => ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("examples.reconhost.dev", "v1alpha1", "WebApp"),
            "webapps",
        ),
    }
}

/// Runs the operator for `webapps` (the parent kind) on `namespace` until the process is
/// killed, printing `reconciles <n>` to stdout every second so the benchmark can read how many
/// reconciles it made.
pub async fn run(
    kubeconfig: &Path,
    namespace: &str,
    workers: u16,
    webapps: ApiResource,
) -> anyhow::Result<()> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let (deployments, writer) = reflector::store();
    let deployment_api = Api::<Deployment>::namespaced(client.clone(), namespace);
    let cache = reflector::reflector(
        writer,
        watcher(deployment_api.clone(), watcher::Config::default()),
    )
    .default_backoff()
    .for_each(|_| async {});
    tokio::spawn(cache);
    deployments.wait_until_ready().await?;

    let context = Arc::new(Context {
        client: client.clone(),
        webapps: webapps.clone(),
        deployments,
        reconciles: AtomicU64::new(0),
    });
    {
        let context = context.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                println!("reconciles {}", context.reconciles.load(Ordering::Relaxed));
            }
        });
    }
    println!("ready");
    Controller::new_with(
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &webapps),
        watcher::Config::default(),
        webapps,
    )
    .owns(deployment_api, watcher::Config::default())
    .owns(
        Api::<Service>::namespaced(client, namespace),
        watcher::Config::default(),
    )
    .with_config(Config::default().concurrency(workers))
    .run(reconcile, error_policy, context)
    .for_each(|_| async {})
    .await;
    Ok(())
}

fn error_policy(_: Arc<DynamicObject>, _: &Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(webapp: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    let namespace = webapp.namespace().unwrap_or_default();
    let name = webapp.name_any();
    let uid = webapp.uid().unwrap_or_default();
    let mut parent = serde_json::to_value(&*webapp)?;
    parent["apiVersion"] = json!(ctx.webapps.api_version);
    parent["kind"] = json!(ctx.webapps.kind);

    let mut request = reconhost_sdk::Request::new(parent.clone());
    let key = ObjectRef::new(&name).within(&namespace);
    if let Some(deployment) = ctx.deployments.get(&key)
        && deployment.owner_references().iter().any(|o| o.uid == uid)
    {
        let mut deployment = serde_json::to_value(&*deployment)?;
        deployment["apiVersion"] = json!("apps/v1");
        deployment["kind"] = json!("Deployment");
        request.children.push(deployment.into());
    }
    let response = webapp::WebApp::reconcile(request).map_err(Error::Logic)?;

    let params = PatchParams::apply(FIELD_MANAGER).force();
    let owner = json!({"apiVersion": ctx.webapps.api_version, "kind": ctx.webapps.kind,
                       "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true});
    for mut child in response.children.into_iter().map(|c| c.object.into_value()) {
        child["metadata"]["namespace"] = json!(namespace);
        child["metadata"]["ownerReferences"] = json!([owner]);
        let resource = match child["kind"].as_str() {
            Some("Deployment") => ApiResource::erase::<Deployment>(&()),
            _ => ApiResource::erase::<Service>(&()),
        };
        let child_name = child["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &namespace, &resource)
            .patch(&child_name, &params, &Patch::Apply(&child))
            .await?;
    }

    let mut status = response
        .status
        .map_or_else(|| json!({}), reconhost_sdk::Object::into_value);
    status["observedGeneration"] = json!(webapp.metadata.generation);
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| String::new(), |t| t.to_string());
    let conditions: Vec<Value> = response
        .conditions
        .iter()
        .map(|c| {
            let state = match c.status {
                ConditionStatus::True => "True",
                ConditionStatus::False => "False",
                ConditionStatus::Unknown => "Unknown",
            };
            let previous = parent["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|p| p["type"] == c.type_.as_str()));
            let since = match previous {
                Some(p) if p["status"] == state => p["lastTransitionTime"].clone(),
                _ => json!(now),
            };
            json!({"type": c.type_, "status": state, "reason": c.reason, "message": c.message,
                   "lastTransitionTime": since})
        })
        .collect();
    status["conditions"] = json!(conditions);
    let body = json!({"apiVersion": ctx.webapps.api_version, "kind": ctx.webapps.kind,
                      "metadata": {"name": name}, "status": status});
    Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &namespace, &ctx.webapps)
        .patch_status(&name, &params, &Patch::Apply(&body))
        .await?;
    Ok(Action::await_change())
}
