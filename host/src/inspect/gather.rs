//! What `reconhost trace` reads from the cluster: the parent, its ReconcilePlugin, its
//! children (every object of a declared child kind whose controller is the parent, in any
//! namespace for a cluster-scoped parent), the kinds it reads, and its events.

use anyhow::{Context as _, bail};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};
use serde::Serialize;
use serde_json::Value;

use crate::api::ReconcilePlugin;
use crate::model::record::LastReconcile;
use crate::model::{FIELD_MANAGER_PREFIX, KindRef};

/// A parent as `reconhost trace` shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Traced {
    /// The parent.
    pub parent: Node,
    /// The plugin installed for its kind, if a ReconcilePlugin names it.
    pub plugin: Option<PluginRef>,
    /// The host's record of the reconcile that last served it.
    pub last_reconcile: Option<LastReconcile>,
    /// Its children, by kind, namespace and name.
    pub children: Vec<Node>,
    /// The kinds the plugin declared it reads (`apiVersion/kind`); what it read in the last
    /// reconcile recorded is in `lastReconcile.reads`.
    pub reads: Vec<String>,
    /// Its most recent events (events.k8s.io), oldest first.
    pub events: Vec<EventLine>,
}

/// One object and its conditions.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace; empty for a cluster-scoped object.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.generation`, where the kind has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// `status.observedGeneration`, where the object has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Whether it is being deleted.
    pub deleting: bool,
    /// Its conditions, messages whole.
    pub conditions: Vec<ConditionLine>,
    /// When the plugin's field manager last applied it (children only), RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<String>,
}

/// One condition.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionLine {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// `reason`.
    pub reason: String,
    /// `message`, whole.
    pub message: String,
    /// `lastTransitionTime`.
    pub last_transition_time: String,
}

/// The ReconcilePlugin serving the parent's kind.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginRef {
    /// The ReconcilePlugin's name.
    pub reconcile_plugin: String,
    /// The digest serving now (`status.activeDigest`).
    pub active_digest: Option<String>,
    /// Whether it is suspended.
    pub suspended: bool,
    /// Its `Ready` condition, as `status reason: message`.
    pub ready: Option<String>,
}

/// One event about the parent.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    /// When it last happened.
    pub time: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `reason`.
    pub reason: String,
    /// `note`, whole.
    pub note: String,
    /// How many times (a series counts its repeats).
    pub count: i64,
    /// Who reported it.
    pub reporting_controller: String,
}

/// Gathers `parent` (`<kind>/<name>`), looked for in `namespace` if its kind is namespaced.
pub async fn trace(
    client: &kube::Client,
    parent: &str,
    namespace: &str,
    events: usize,
) -> anyhow::Result<Traced> {
    let Some((kind, name)) = parent.split_once('/') else {
        bail!("{parent:?} is not <kind>/<name> (e.g. webapp/shop)");
    };
    let plugins = Api::<ReconcilePlugin>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        // Without the CRD or the right to list it, the parent can still be shown.
        .unwrap_or_default();
    let (resource, namespaced) = resolve(client, kind, &plugins).await?;
    let namespace = if namespaced { namespace } else { "" };
    let object = api(client, &resource, namespace)
        .get(name)
        .await
        .with_context(|| format!("getting {} {}", resource.kind, at(namespace, name)))?;
    let object = serde_json::to_value(object)?;
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    let plugin = plugins.iter().find(|rp| {
        rp.spec.parent.kind == resource.kind
            && crate::model::group_of(&rp.spec.parent.api_version) == resource.group
    });
    let last_reconcile = LastReconcile::of(&object);
    let manager = last_reconcile
        .as_ref()
        .map(|r| r.plugin.clone())
        .or_else(|| plugin.and_then(|p| p.status.as_ref()?.plugin.as_ref().map(|i| i.name.clone())))
        .map(|name| format!("{FIELD_MANAGER_PREFIX}{name}"));
    let declared = plugin.and_then(|p| p.status.as_ref()?.declared.clone());
    let mut children = Vec::new();
    for child_kind in declared.iter().flat_map(|d| &d.children) {
        let Some((api_version, kind)) = child_kind.rsplit_once('/') else {
            continue;
        };
        let Ok((child, _)) = pinned(client, &KindRef::new(api_version, kind)).await else {
            continue;
        };
        // A namespaced parent's children are in its namespace; a cluster-scoped one's anywhere.
        let listed = api(client, &child, namespace)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {}", child.plural))?;
        for item in listed.items {
            let mut item = serde_json::to_value(item)?;
            // A list's items come without their types.
            item["apiVersion"] = Value::from(child.api_version.clone());
            item["kind"] = Value::from(child.kind.clone());
            if controller_uid(&item) == Some(uid) {
                children.push(node(&item, manager.as_deref()));
            }
        }
    }
    children
        .sort_by(|a, b| (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name)));
    Ok(Traced {
        parent: node(&object, None),
        plugin: plugin.map(plugin_ref),
        last_reconcile,
        children,
        reads: declared.map(|d| d.reads).unwrap_or_default(),
        events: events_about(client, &object, namespace, events).await?,
    })
}

/// The kind `name` stands for, as kubectl takes it: a ReconcilePlugin's parent kind first (a
/// few requests), then everything discovery knows.
async fn resolve(
    client: &kube::Client,
    name: &str,
    plugins: &[ReconcilePlugin],
) -> anyhow::Result<(ApiResource, bool)> {
    let wanted = name.to_lowercase();
    let names = |r: &ApiResource| {
        let kind = r.kind.to_lowercase();
        [
            format!("{kind}.{}", r.group),
            format!("{}.{}", r.plural, r.group),
            kind,
            r.plural.clone(),
        ]
    };
    for rp in plugins {
        let parent = KindRef::new(&rp.spec.parent.api_version, &rp.spec.parent.kind);
        if let Ok((resource, caps)) = pinned(client, &parent).await
            && names(&resource).contains(&wanted)
        {
            return Ok((resource, caps.scope == Scope::Namespaced));
        }
    }
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("discovering the cluster's kinds")?;
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if names(&resource).contains(&wanted) {
                return Ok((resource, caps.scope == Scope::Namespaced));
            }
        }
    }
    bail!("the cluster has no kind {name:?}")
}

async fn pinned(
    client: &kube::Client,
    kind: &KindRef,
) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
    let (group, version) = match kind.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", kind.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
    Ok(kube::discovery::pinned_kind(client, &gvk).await?)
}

fn api(client: &kube::Client, resource: &ApiResource, namespace: &str) -> Api<DynamicObject> {
    if namespace.is_empty() {
        Api::all_with(client.clone(), resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, resource)
    }
}

fn at(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

fn controller_uid(object: &Value) -> Option<&str> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?["uid"]
        .as_str()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

/// `object` as a node; `manager`, for a child, the plugin's field manager.
pub fn node(object: &Value, manager: Option<&str>) -> Node {
    let meta = &object["metadata"];
    let conditions = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ConditionLine {
            type_: text(&c["type"]),
            status: text(&c["status"]),
            reason: text(&c["reason"]),
            message: text(&c["message"]),
            last_transition_time: text(&c["lastTransitionTime"]),
        })
        .collect();
    let applied_at = manager.and_then(|manager| {
        meta["managedFields"].as_array()?.iter().find(|e| {
            e["manager"] == manager
                && e["operation"] == "Apply"
                && e["subresource"].as_str().unwrap_or("").is_empty()
        })?["time"]
            .as_str()
            .map(str::to_owned)
    });
    Node {
        api_version: text(&object["apiVersion"]),
        kind: text(&object["kind"]),
        namespace: text(&meta["namespace"]),
        name: text(&meta["name"]),
        generation: meta["generation"].as_i64(),
        observed_generation: object["status"]["observedGeneration"].as_i64(),
        deleting: meta["deletionTimestamp"].is_string(),
        conditions,
        applied_at,
    }
}

fn plugin_ref(rp: &ReconcilePlugin) -> PluginRef {
    let status = rp.status.as_ref();
    PluginRef {
        reconcile_plugin: rp.metadata.name.clone().unwrap_or_default(),
        active_digest: status.and_then(|s| s.active_digest.clone()),
        suspended: rp.spec.suspend,
        ready: status
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| format!("{} {}: {}", c.status, c.reason, c.message)),
    }
}

/// The last `limit` events (events.k8s.io) about `object`, oldest first. A cluster-scoped
/// object's are in `default`, where event recorders put them.
async fn events_about(
    client: &kube::Client,
    object: &Value,
    namespace: &str,
    limit: usize,
) -> anyhow::Result<Vec<EventLine>> {
    let resource = ApiResource {
        group: "events.k8s.io".into(),
        version: "v1".into(),
        api_version: "events.k8s.io/v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    };
    let namespace = if namespace.is_empty() {
        "default"
    } else {
        namespace
    };
    let uid = &object["metadata"]["uid"];
    let listed = api(client, &resource, namespace)
        .list(&ListParams::default())
        .await
        .context("listing events")?;
    let mut events: Vec<EventLine> = listed
        .items
        .into_iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .filter(|e| e["regarding"]["uid"] == *uid)
        .map(|e| {
            let time = [
                &e["series"]["lastObservedTime"],
                &e["eventTime"],
                &e["deprecatedLastTimestamp"],
                &e["metadata"]["creationTimestamp"],
            ]
            .into_iter()
            .find_map(Value::as_str)
            .unwrap_or_default()
            .to_owned();
            EventLine {
                time,
                type_: text(&e["type"]),
                reason: text(&e["reason"]),
                note: text(&e["note"]),
                count: e["series"]["count"].as_i64().unwrap_or(1),
                reporting_controller: text(&e["reportingController"]),
            }
        })
        .collect();
    events.sort_by(|a, b| a.time.cmp(&b.time));
    let skip = events.len().saturating_sub(limit);
    Ok(events.split_off(skip))
}
