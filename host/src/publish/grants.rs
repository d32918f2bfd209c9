//! The RBAC side of `plugin rbac`, `plugin install --rbac` and `plugin uninstall`: what a
//! plugin's component asks for, where it is granted, which of it is dangerous, what an upgrade
//! adds to what was granted before, and the objects in the cluster made for a ReconcilePlugin.

use anyhow::{Context as _, bail};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::cache::informers::resolve;
use crate::cli::GrantArgs;
use crate::identity::Identity;
use crate::identity::grant::{self, Changes, ObjectId, Scope};
use crate::identity::rbac;
use crate::runtime::Plugin;

/// What a plugin is to be granted.
pub(super) struct Planned {
    /// The RBAC objects, in the order to apply them.
    pub objects: Vec<Value>,
    /// The dangerous grants among them, one line each with why.
    pub dangers: Vec<String>,
    /// Where the plugin's grant applies.
    pub scope: Scope,
    /// Why the host's share is granted in every namespace although the plugin's is not, when
    /// that is so.
    pub host_note: Option<String>,
}

/// Where the grant applies: the namespaces named, every namespace when asked for, else
/// `default`, the namespace of the kubeconfig's context (as kubectl and helm default).
pub(super) fn scope(args: &GrantArgs, default: &str) -> Scope {
    if args.cluster_wide {
        return Scope::ClusterWide;
    }
    let mut namespaces: Vec<String> = args
        .parent_namespaces
        .iter()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    if namespaces.is_empty() && !default.is_empty() {
        namespaces.push(default.to_owned());
    }
    namespaces.sort();
    namespaces.dedup();
    Scope::Namespaces(namespaces)
}

/// The RBAC `plugin` needs as ReconcilePlugin `rp`, its kinds resolved through `client`'s
/// discovery.
pub(super) async fn plan(
    client: &kube::Client,
    plugin: &Plugin,
    rp: &str,
    who: &Identity,
    scope: Scope,
) -> anyhow::Result<Planned> {
    let info = plugin.info();
    let resolve = |kind: &crate::model::KindRef| {
        let kind = kind.clone();
        async move {
            resolve(client, &kind).await.with_context(|| {
                format!("the API server does not serve {kind}, which the plugin declares: install its CRD first")
            })
        }
    };
    let parent = resolve(&info.parent).await?;
    let mut children = Vec::new();
    for kind in &info.children {
        children.push(resolve(kind).await?);
    }
    let mut reads = Vec::new();
    for kind in &info.reads {
        reads.push(resolve(kind).await?);
    }
    let rules = rbac::rules(&parent, &children, &reads);
    let host_rules = rbac::host_rules(&parent, &children, &reads);
    let (host, host_note) = match &scope {
        Scope::ClusterWide => (Vec::new(), None),
        Scope::Namespaces(_) => match host_subjects(client).await {
            Ok(host) if !host.is_empty() => (host, None),
            Ok(_) => (
                Vec::new(),
                Some(format!(
                    "no ClusterRoleBinding of a ClusterRole that aggregates {}=true was found (the chart makes one for the host), so the host's share of this plugin's kinds is aggregated into it, in every namespace",
                    rbac::AGGREGATE_TO_HOST
                )),
            ),
            Err(error) => (
                Vec::new(),
                Some(format!(
                    "the host's identity could not be read ({error:#}), so the host's share of this plugin's kinds is aggregated into the chart's role, in every namespace"
                )),
            ),
        },
    };
    Ok(Planned {
        objects: grant::manifests(rp, &info.name, who, &rules, &host_rules, &scope, &host),
        dangers: grant::dangers(&rules, &host_rules, !host.is_empty()),
        scope,
        host_note,
    })
}

/// Whom the host runs as: the subjects of every ClusterRoleBinding of a ClusterRole that
/// aggregates the roles labelled for the host (the chart's `<release>-plugin-kinds`), so a
/// confined plugin's share can be bound to exactly those, where its parents live.
pub(super) async fn host_subjects(client: &kube::Client) -> anyhow::Result<Vec<Value>> {
    let roles = api(client, "ClusterRole", "")
        .list(&ListParams::default())
        .await
        .context("listing ClusterRoles")?;
    let aggregating: Vec<String> = roles
        .items
        .into_iter()
        .filter_map(|role| {
            let role = serde_json::to_value(role).ok()?;
            let selectors = role["aggregationRule"]["clusterRoleSelectors"].as_array()?;
            selectors
                .iter()
                .any(|s| s["matchLabels"][rbac::AGGREGATE_TO_HOST] == "true")
                .then(|| role["metadata"]["name"].as_str().map(str::to_owned))?
        })
        .collect();
    let bindings = api(client, "ClusterRoleBinding", "")
        .list(&ListParams::default())
        .await
        .context("listing ClusterRoleBindings")?;
    let mut subjects: Vec<Value> = Vec::new();
    for binding in bindings.items {
        let binding = serde_json::to_value(binding)?;
        let bound = binding["roleRef"]["kind"] == "ClusterRole"
            && aggregating
                .iter()
                .any(|name| binding["roleRef"]["name"] == name.as_str());
        if !bound {
            continue;
        }
        for subject in binding["subjects"].as_array().into_iter().flatten() {
            if !subjects.contains(subject) {
                subjects.push(subject.clone());
            }
        }
    }
    Ok(subjects)
}

/// Refuses dangerous grants unless the installer allowed them, listing each.
pub(super) fn refuse_dangers(planned: &Planned, plugin: &str, allowed: bool) -> anyhow::Result<()> {
    if planned.dangers.is_empty() || allowed {
        return Ok(());
    }
    bail!(
        "plugin {plugin} asks for rights that reach past reconciling:\n{}\nread the component's source or ask its author why; pass --allow-dangerous to grant them anyway. Nothing was changed",
        list(&planned.dangers)
    )
}

/// Refuses grants an upgrade adds over what was granted before, unless approved.
pub(super) fn refuse_additions(changes: &Changes, rp: &str, approved: bool) -> anyhow::Result<()> {
    if changes.added.is_empty() || approved {
        return Ok(());
    }
    let added: Vec<String> = changes.added.iter().map(ToString::to_string).collect();
    bail!(
        "this install of ReconcilePlugin {rp} grants more than the one before it:\n{}\npass --approve-new-grants to grant it. Nothing was changed",
        list(&added)
    )
}

/// Lines as a list, one per line.
pub(super) fn list(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| format!("  - {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The API of RBAC objects of `kind` (in `namespace`, for RoleBindings).
fn api(client: &kube::Client, kind: &str, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
        &format!("{}s", kind.to_lowercase()),
    );
    if namespace.is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, &resource)
    }
}

/// The RBAC objects in the cluster that were made for ReconcilePlugin `rp` (by name and by the
/// annotation); objects of those names made by someone else are left out.
pub(super) async fn existing(client: &kube::Client, rp: &str) -> anyhow::Result<Vec<Value>> {
    let [name, cluster_name, host_name, host_cluster_name] = grant::names(rp);
    let mut found = Vec::new();
    for (kind, name) in [
        ("ClusterRole", &name),
        ("ClusterRole", &cluster_name),
        ("ClusterRole", &host_name),
        ("ClusterRole", &host_cluster_name),
        ("ClusterRoleBinding", &name),
        ("ClusterRoleBinding", &cluster_name),
    ] {
        let object = api(client, kind, "")
            .get_opt(name)
            .await
            .with_context(|| format!("reading {kind} {name}"))?;
        found.extend(object.map(|o| (kind, o)));
    }
    for name in [&name, &host_name] {
        let bindings = api(client, "RoleBinding", "")
            .list(&ListParams::default().fields(&format!("metadata.name={name}")))
            .await
            .with_context(|| format!("listing RoleBindings named {name}"))?;
        found.extend(bindings.items.into_iter().map(|o| ("RoleBinding", o)));
    }
    let mut objects = Vec::new();
    for (kind, object) in found {
        let mut object = serde_json::to_value(object)?;
        // Items of a list come without their kind.
        object["kind"] = kind.into();
        if grant::made_for(&object, rp) {
            objects.push(object);
        }
    }
    Ok(objects)
}

/// Refuses to apply `wanted` where an object of the same kind and name exists that was not
/// made for ReconcilePlugin `rp` (a forced apply would take its fields, and with them someone
/// else's grant).
pub(super) async fn not_someone_elses(
    client: &kube::Client,
    wanted: &[Value],
    rp: &str,
) -> anyhow::Result<()> {
    for object in wanted {
        let id = ObjectId::of(object);
        let existing = api(client, &id.kind, &id.namespace)
            .get_opt(&id.name)
            .await
            .with_context(|| format!("reading {id}"))?;
        if let Some(existing) = existing
            && !grant::made_for(&serde_json::to_value(existing)?, rp)
        {
            bail!(
                "{id} exists and was not written by reconhost for ReconcilePlugin {rp} (no {} annotation naming it); refusing to overwrite it, nothing was changed",
                grant::FOR_RECONCILE_PLUGIN
            );
        }
    }
    Ok(())
}

/// Applies `objects` (server-side, forced: each was checked to be this ReconcilePlugin's).
pub(super) async fn apply(
    client: &kube::Client,
    objects: &[Value],
    params: &PatchParams,
) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    for object in objects {
        let id = ObjectId::of(object);
        api(client, &id.kind, &id.namespace)
            .patch(&id.name, params, &Patch::Apply(object))
            .await
            .with_context(|| format!("applying {id}"))?;
        done.push(format!("{id} applied"));
    }
    Ok(done)
}

/// Deletes these objects (one already gone is no error).
pub(super) async fn delete(
    client: &kube::Client,
    ids: impl IntoIterator<Item = ObjectId>,
) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    for id in ids {
        match api(client, &id.kind, &id.namespace)
            .delete(&id.name, &DeleteParams::default())
            .await
        {
            Ok(_) => done.push(format!("{id} deleted")),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting {id}")),
        }
    }
    Ok(done)
}
