//! Releasing a removed plugin's parents: the host's finalizer for the plugin comes off every
//! parent that carries it, so parents stay deletable once nothing would ever finalize them.
//! Children stay with their owners; the garbage collector removes them with their parent.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cache::informers::resolve;
use crate::model::KindRef;

/// How often one parent's finalizer patch is retried when it races another writer.
const CONFLICT_RETRIES: usize = 5;

/// Where a plugin's parents may hold its finalizer: each of its namespaces (`spec.namespaces`)
/// the host watches, else wherever the host watches (`None`: every namespace). A confined
/// plugin's parents are looked for only there, where the host's share of its RBAC is granted.
/// (Cluster-scoped parents are confined by no namespace: [`release_everywhere`] looks at all.)
pub fn where_parents_are(
    plugin_namespaces: Option<&[String]>,
    host_namespace: Option<&str>,
) -> Vec<Option<String>> {
    match (plugin_namespaces, host_namespace) {
        (Some(list), Some(host)) => list
            .iter()
            .filter(|n| n.as_str() == host)
            .map(|n| Some(n.clone()))
            .collect(),
        (Some(list), None) => list.iter().map(|n| Some(n.clone())).collect(),
        (None, host) => vec![host.map(str::to_owned)],
    }
}

/// Removes `finalizer` from every parent of kind `parent` that carries it, in each of
/// `namespaces` (`None`: every namespace), or, for a cluster-scoped parent kind, once for all
/// of them; how many were released in all. A kind the API server does not serve has none.
pub async fn release_everywhere(
    client: &kube::Client,
    parent: &KindRef,
    finalizer: &str,
    namespaces: &[Option<String>],
) -> Result<usize, kube::Error> {
    let Some(kind) = resolved(client, parent).await? else {
        return Ok(0);
    };
    if !kind.namespaced {
        return release_in(client, &kind, finalizer, None, &[]).await;
    }
    let mut released = 0;
    for namespace in namespaces {
        released += release_in(client, &kind, finalizer, namespace.as_deref(), &[]).await?;
    }
    Ok(released)
}

/// Releases the parents in `look_in` (`None`: every namespace) but not in `skip`, of a
/// namespaced parent kind; a cluster-scoped one's parents are in no namespace a plugin is
/// confined to, so none is released.
pub async fn release_outside(
    client: &kube::Client,
    parent: &KindRef,
    finalizer: &str,
    look_in: &[Option<String>],
    skip: &[String],
) -> Result<usize, kube::Error> {
    let Some(kind) = resolved(client, parent).await? else {
        return Ok(0);
    };
    if !kind.namespaced {
        return Ok(0);
    }
    let mut released = 0;
    for namespace in look_in {
        released += release_in(client, &kind, finalizer, namespace.as_deref(), skip).await?;
    }
    Ok(released)
}

/// The parent kind as discovery resolves it; `None` when the API server does not serve it.
async fn resolved(
    client: &kube::Client,
    parent: &KindRef,
) -> Result<Option<crate::keys::ResolvedKind>, kube::Error> {
    match resolve(client, parent).await {
        Ok(kind) => Ok(Some(kind)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.source),
    }
}

/// Removes `finalizer` from the objects of `kind` in `namespace` (`None`: every one) that carry
/// it, except those in the namespaces `skip`.
async fn release_in(
    client: &kube::Client,
    kind: &crate::keys::ResolvedKind,
    finalizer: &str,
    namespace: Option<&str>,
    skip: &[String],
) -> Result<usize, kube::Error> {
    let api: Api<DynamicObject> = match (namespace, kind.namespaced) {
        (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &kind.resource),
        _ => Api::all_with(client.clone(), &kind.resource),
    };
    let mut released = 0;
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list_metadata(&params).await?;
        for object in &page.items {
            let skipped = object
                .metadata
                .namespace
                .as_ref()
                .is_some_and(|ns| skip.contains(ns));
            if !skipped && holds(object.metadata.finalizers.as_deref(), finalizer) {
                let name = object.metadata.name.clone().unwrap_or_default();
                let namespace = object.metadata.namespace.clone();
                release(
                    client,
                    &kind.resource,
                    namespace.as_deref(),
                    &name,
                    finalizer,
                )
                .await?;
                released += 1;
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(released)
}

fn holds(finalizers: Option<&[String]>, finalizer: &str) -> bool {
    finalizers.is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Removes the finalizer from one object, retrying when someone else changed the list.
async fn release(
    client: &kube::Client,
    resource: &kube::core::ApiResource,
    namespace: Option<&str>,
    name: &str,
    finalizer: &str,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let mut attempt = 0;
    loop {
        let Some(object) = api.get_metadata_opt(name).await? else {
            return Ok(());
        };
        let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|f| f == finalizer) {
            return Ok(());
        }
        let kept: Vec<Value> = finalizers
            .into_iter()
            .filter(|f| f != finalizer)
            .map(Value::String)
            .collect();
        // The resourceVersion makes a concurrent change to the list a 409, not a lost finalizer.
        let patch = json!({"metadata": {
            "resourceVersion": object.metadata.resource_version,
            "finalizers": kept,
        }});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_RETRIES => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}
