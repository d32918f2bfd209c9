//! What a plugin needs its ServiceAccount to be allowed, derived from what it declares: the
//! rules `reconhost plugin rbac` prints, and the questions behind the `Authorized` condition.
//!
//! - the parent kind: `get`, `list`, `watch` (the plugin sees its parents), `patch` and `update`
//!   (the host's finalizer), `patch` on `/status`, `update` on `/finalizers` (an ownerReference
//!   with `blockOwnerDeletion`, which the host sets on every child, needs it where the
//!   OwnerReferencesPermissionEnforcement admission plugin runs);
//! - each child kind: `get`, `list`, `watch`, `create`, `patch`, `update`, `delete`;
//! - each kind it reads: `get`, `list`, `watch`;
//! - `events.k8s.io` events: `create`, `patch` (Warning and Normal events on parents).
//!
//! The host itself needs to watch the same kinds (its caches are shared by every plugin, and a
//! plugin's reads are answered from them after a SubjectAccessReview), and to patch the parent
//! kind (an uninstalled plugin's finalizers come off its parents even when its ServiceAccount is
//! gone). Those rules go in a ClusterRole labelled [`AGGREGATE_TO_HOST`], which the chart's
//! aggregated ClusterRole collects: the host never holds a wildcard.

use serde_json::{Value, json};

use super::Identity;
use super::access::Question;
use crate::cache::ResolvedKind;

/// One rule: verbs on a resource of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The API group (empty for core).
    pub group: String,
    /// The resource, with `/subresource` when it is one.
    pub resource: String,
    /// The verbs.
    pub verbs: Vec<&'static str>,
    /// Whether the resource lives in namespaces.
    pub namespaced: bool,
}

/// The label that adds a ClusterRole's rules to the host's own (the chart aggregates by it).
pub const AGGREGATE_TO_HOST: &str = "reconhost.dev/aggregate-to-host";

const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 7] = [
    "get", "list", "watch", "create", "patch", "update", "delete",
];

/// The rules for a plugin with this parent, these children and these read kinds.
pub fn rules(
    parent: &ResolvedKind,
    children: &[ResolvedKind],
    reads: &[ResolvedKind],
) -> Vec<Rule> {
    let rule = |kind: &ResolvedKind, sub: &str, verbs: &[&'static str]| Rule {
        group: kind.resource.group.clone(),
        resource: format!("{}{sub}", kind.resource.plural),
        verbs: verbs.to_vec(),
        namespaced: kind.namespaced,
    };
    let mut rules = vec![
        rule(parent, "", &["get", "list", "watch", "patch", "update"]),
        rule(parent, "/status", &["get", "patch", "update"]),
        rule(parent, "/finalizers", &["update"]),
    ];
    rules.extend(children.iter().map(|c| rule(c, "", &WRITE)));
    for read in reads {
        // A kind that is also a child already has every read verb.
        if !children.iter().any(|c| c.group_kind() == read.group_kind()) {
            rules.push(rule(read, "", &READ));
        }
    }
    rules.push(Rule {
        group: "events.k8s.io".into(),
        resource: "events".into(),
        verbs: vec!["create", "patch"],
        namespaced: true,
    });
    rules
}

/// What the host itself needs for a plugin with these kinds: to watch the parent, the
/// children and the read kinds, and to patch the parent (releasing finalizers at uninstall).
pub fn host_rules(
    parent: &ResolvedKind,
    children: &[ResolvedKind],
    reads: &[ResolvedKind],
) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    for (kind, verbs) in std::iter::once((parent, &["get", "list", "watch", "patch"][..]))
        .chain(children.iter().chain(reads).map(|k| (k, &READ[..])))
    {
        let resource = kind.resource.plural.clone();
        let group = kind.resource.group.clone();
        if !rules
            .iter()
            .any(|r| r.group == group && r.resource == resource)
        {
            rules.push(Rule {
                group,
                resource,
                verbs: verbs.to_vec(),
                namespaced: kind.namespaced,
            });
        }
    }
    rules
}

/// Every rule as questions, one per verb: for every namespace, or for `namespace` when the
/// host works in that one only (namespaced resources; cluster-scoped ones are asked as such).
pub fn questions(rules: &[Rule], namespace: Option<&str>) -> Vec<Question> {
    rules
        .iter()
        .flat_map(|r| {
            let namespace = if r.namespaced {
                namespace.unwrap_or("")
            } else {
                ""
            };
            r.verbs
                .iter()
                .map(move |v| Question::new(v, &r.group, &r.resource, namespace))
        })
        .collect()
}

/// The annotation on the RBAC objects `plugin install --rbac` writes: the ReconcilePlugin they
/// were made for. The installer overwrites only objects that carry it with that same name.
pub const FOR_RECONCILE_PLUGIN: &str = "reconhost.dev/reconcileplugin";

/// The names of the RBAC objects for ReconcilePlugin `rp`: the plugin's ClusterRole and its
/// binding, and the host's share. Made from the ReconcilePlugin's name (unique, and chosen by
/// the installer from the parent kind) and never from what the component calls itself, behind
/// a prefix with colons that no chart or user object of reconhost's uses.
pub fn names(rp: &str) -> (String, String) {
    (
        format!("reconhost:plugin:{rp}"),
        format!("reconhost:host:{rp}"),
    )
}

/// The objects a plugin needs, as Kubernetes objects (JSON): a ClusterRole with `rules` and
/// a ClusterRoleBinding of it to the ServiceAccount (cluster-wide because a plugin reconciles
/// its parents in every namespace; bind the ClusterRole with RoleBindings instead to confine
/// it to some), and the ClusterRole with `host_rules` that the chart aggregates into the host's.
/// `rp` is the ReconcilePlugin's name, `plugin` the component's own (a label, for people).
pub fn manifests(
    rp: &str,
    plugin: &str,
    who: &Identity,
    rules: &[Rule],
    host_rules: &[Rule],
) -> Vec<Value> {
    let (name, host_name) = names(rp);
    let labels =
        json!({"app.kubernetes.io/managed-by": "reconhost", "reconhost.dev/plugin": plugin});
    let annotations = json!({ FOR_RECONCILE_PLUGIN: rp });
    let mut host_labels = labels.clone();
    host_labels[AGGREGATE_TO_HOST] = json!("true");
    let as_json = |rules: &[Rule]| -> Vec<Value> {
        rules
            .iter()
            .map(|r| json!({"apiGroups": [r.group], "resources": [r.resource], "verbs": r.verbs}))
            .collect()
    };
    let meta = |name: &str, labels: &Value| json!({"name": name, "labels": labels, "annotations": annotations});
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": meta(&name, &labels), "rules": as_json(rules)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": meta(&name, &labels),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "ServiceAccount", "namespace": who.namespace, "name": who.name}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": meta(&host_name, &host_labels),
               "rules": as_json(host_rules)}),
    ]
}

/// Whether `existing` (an object already in the cluster under a name `manifests` makes) was
/// written for ReconcilePlugin `rp`, so that applying over it takes nothing from anyone else.
pub fn made_for(existing: &Value, rp: &str) -> bool {
    existing["metadata"]["annotations"][FOR_RECONCILE_PLUGIN] == rp
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;

    fn kind(group: &str, kind: &str, plural: &str) -> ResolvedKind {
        ResolvedKind {
            resource: ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: if group.is_empty() {
                    "v1".into()
                } else {
                    format!("{group}/v1")
                },
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
            has_status: true,
        }
    }

    #[test]
    fn rules_should_cover_parent_children_reads_and_events() {
        let parent = kind("example.com", "Widget", "widgets");
        let children = [
            kind("apps", "Deployment", "deployments"),
            kind("", "ConfigMap", "configmaps"),
        ];
        let reads = [
            kind("", "ConfigMap", "configmaps"),
            kind("", "Secret", "secrets"),
        ];
        let rules = rules(&parent, &children, &reads);
        let find = |resource: &str| rules.iter().find(|r| r.resource == resource).cloned();
        assert_eq!(
            find("widgets/status").unwrap().verbs,
            ["get", "patch", "update"]
        );
        assert_eq!(find("widgets/finalizers").unwrap().verbs, ["update"]);
        assert!(find("deployments").unwrap().verbs.contains(&"delete"));
        assert_eq!(
            rules.iter().filter(|r| r.resource == "configmaps").count(),
            1,
            "a read kind that is a child needs no second rule"
        );
        assert_eq!(find("secrets").unwrap().verbs, ["get", "list", "watch"]);
        assert_eq!(find("events").unwrap().group, "events.k8s.io");
        let questions = questions(&rules, None);
        assert!(questions.contains(&Question::new("list", "", "secrets", "")));
        let scoped = super::questions(&rules, Some("team"));
        assert!(scoped.contains(&Question::new("list", "", "secrets", "team")));
        let host = host_rules(&parent, &children, &reads);
        let resources: Vec<_> = host.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(
            resources,
            ["widgets", "deployments", "configmaps", "secrets"],
            "each kind once"
        );
        assert!(host.iter().all(|r| !r.verbs.contains(&"create")));
        assert_eq!(host[0].verbs, ["get", "list", "watch", "patch"]);
        let objects = manifests(
            "widgets.example.com",
            "kinds",
            &Identity::new("plugins", "widget"),
            &rules,
            &host,
        );
        assert_eq!(
            objects[0]["metadata"]["name"], "reconhost:plugin:widgets.example.com",
            "named from the ReconcilePlugin, whatever the component calls itself"
        );
        assert_eq!(
            objects[2]["metadata"]["name"],
            "reconhost:host:widgets.example.com"
        );
        assert!(objects.iter().all(|o| made_for(o, "widgets.example.com")));
        assert!(!made_for(&objects[0], "other.example.com"));
        assert!(
            !made_for(
                &json!({"metadata": {"name": "reconhost-plugin-kinds"}}),
                "widgets.example.com"
            ),
            "an object without the annotation is someone else's"
        );
        assert_eq!(objects[1]["subjects"][0]["name"], "widget");
        assert_eq!(
            objects[1]["roleRef"]["name"],
            objects[0]["metadata"]["name"]
        );
        assert_eq!(objects[2]["metadata"]["labels"][AGGREGATE_TO_HOST], "true");
        assert_eq!(objects[2]["rules"][3]["resources"][0], "secrets");
        assert!(
            objects[0]["metadata"]["labels"]
                .get(AGGREGATE_TO_HOST)
                .is_none(),
            "the plugin's own rules must not reach the host"
        );
    }
}
