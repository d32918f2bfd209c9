//! The RBAC objects that give a plugin (and the host, for the plugin's kinds) what [`rbac`]
//! says it needs, where it is needed: `reconhost plugin rbac` prints them, `plugin install
//! --rbac` applies them, `plugin uninstall` removes them.
//!
//! - The plugin's rules go in the ClusterRole `reconhost:plugin:<rp>`, bound by a RoleBinding of
//!   that name in each namespace its parents live in ([`Scope::Namespaces`], the default), or
//!   by a ClusterRoleBinding when the installer asks for every namespace ([`Scope::ClusterWide`]).
//!   Rules that cannot be confined to a namespace (a cluster-scoped parent or read kind, and a
//!   cluster-scoped parent's events) go in `reconhost:plugin-cluster:<rp>`, always bound
//!   cluster-wide.
//! - The host's share (watching the plugin's kinds, patching its parents) is
//!   `reconhost:host:<rp>`. For a plugin confined to namespaces, when the host's identity is
//!   known (the subjects of the chart's binding of its aggregated role), it is bound to the host
//!   by a RoleBinding in each of them, as the host then watches the plugin's kinds only there;
//!   what cannot be confined goes in `reconhost:host-cluster:<rp>`, labelled for the chart's
//!   aggregated role. Otherwise the whole share is labelled for the aggregated role.
//!
//! Every object is named from the ReconcilePlugin (`<rp>`) and carries the annotation
//! [`FOR_RECONCILE_PLUGIN`]; [`grants`] reads back what a set of these objects allows, so an
//! upgrade can show what it adds before it adds it.
//!
//! [`rbac`]: super::rbac

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Value, json};

use super::Identity;
use super::rbac::{AGGREGATE_TO_HOST, Rule, danger};

/// The annotation on every object here: the ReconcilePlugin it was made for. The installer
/// overwrites or deletes only objects that carry it with that same name.
pub const FOR_RECONCILE_PLUGIN: &str = "reconhost.dev/reconcileplugin";

const RBAC: &str = "rbac.authorization.k8s.io/v1";

/// Where a plugin's grant applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// In these namespaces only (RoleBindings): where its parents live.
    Namespaces(Vec<String>),
    /// In every namespace (a ClusterRoleBinding): an explicit choice of the installer.
    ClusterWide,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::ClusterWide => f.write_str("every namespace"),
            Scope::Namespaces(list) if list.len() == 1 => write!(f, "namespace {}", list[0]),
            Scope::Namespaces(list) => write!(f, "namespaces {}", list.join(", ")),
        }
    }
}

/// The names of the objects for ReconcilePlugin `rp`: the plugin's role (and its bindings),
/// the plugin's cluster-wide role (and its binding), the host's share (and its bindings), the
/// host's cluster-wide share. Made from the
/// ReconcilePlugin's name (unique, and chosen by the installer from the parent kind), never
/// from what the component calls itself, behind a prefix with colons that no chart or user
/// object of reconhost's uses.
pub fn names(rp: &str) -> [String; 4] {
    [
        format!("reconhost:plugin:{rp}"),
        format!("reconhost:plugin-cluster:{rp}"),
        format!("reconhost:host:{rp}"),
        format!("reconhost:host-cluster:{rp}"),
    ]
}

/// The prefix of the host's share's names.
const HOST_PREFIX: &str = "reconhost:host";

/// The objects a plugin needs, as Kubernetes objects (JSON), in the order to apply them
/// (roles before their bindings). `rp` is the ReconcilePlugin's name, `plugin` the
/// component's own (a label, for people). `host` is the subjects the host runs as (empty:
/// unknown, so its share is aggregated into the chart's role, cluster-wide).
pub fn manifests(
    rp: &str,
    plugin: &str,
    who: &Identity,
    rules: &[Rule],
    host_rules: &[Rule],
    scope: &Scope,
    host: &[Value],
) -> Vec<Value> {
    let [name, cluster_name, host_name, host_cluster_name] = names(rp);
    let labels =
        json!({"app.kubernetes.io/managed-by": "reconhost", "reconhost.dev/plugin": plugin});
    let mut host_labels = labels.clone();
    host_labels[AGGREGATE_TO_HOST] = json!("true");
    let meta = |name: &str, namespace: Option<&str>, labels: &Value| {
        let mut meta =
            json!({"name": name, "labels": labels, "annotations": { FOR_RECONCILE_PLUGIN: rp }});
        if let Some(ns) = namespace {
            meta["namespace"] = json!(ns);
        }
        meta
    };
    let role = |name: &str, labels: &Value, rules: &[&Rule]| {
        let rules: Vec<Value> = rules
            .iter()
            .map(|r| json!({"apiGroups": [r.group], "resources": [r.resource], "verbs": r.verbs}))
            .collect();
        json!({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": meta(name, None, labels),
               "rules": rules})
    };
    let plugin_subjects =
        json!([{"kind": "ServiceAccount", "namespace": who.namespace, "name": who.name}]);
    let bind = |kind: &str, name: &str, namespace: Option<&str>, subjects: &Value| {
        json!({"apiVersion": RBAC, "kind": kind, "metadata": meta(name, namespace, &labels),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": subjects})
    };
    let binding = |kind: &str, name: &str, namespace: Option<&str>| {
        bind(kind, name, namespace, &plugin_subjects)
    };
    let mut objects = Vec::new();
    match scope {
        Scope::ClusterWide => {
            let all: Vec<&Rule> = rules.iter().collect();
            objects.push(role(&name, &labels, &all));
            objects.push(binding("ClusterRoleBinding", &name, None));
        }
        Scope::Namespaces(namespaces) => {
            let (confined, cluster): (Vec<&Rule>, Vec<&Rule>) =
                rules.iter().partition(|r| r.namespaced);
            objects.push(role(&name, &labels, &confined));
            objects.extend(
                namespaces
                    .iter()
                    .map(|ns| binding("RoleBinding", &name, Some(ns))),
            );
            if !cluster.is_empty() {
                objects.push(role(&cluster_name, &labels, &cluster));
                objects.push(binding("ClusterRoleBinding", &cluster_name, None));
            }
        }
    }
    match scope {
        Scope::Namespaces(namespaces) if !host.is_empty() => {
            let (confined, cluster): (Vec<&Rule>, Vec<&Rule>) =
                host_rules.iter().partition(|r| r.namespaced);
            let host = Value::Array(host.to_vec());
            objects.push(role(&host_name, &labels, &confined));
            objects.extend(
                namespaces
                    .iter()
                    .map(|ns| bind("RoleBinding", &host_name, Some(ns), &host)),
            );
            if !cluster.is_empty() {
                objects.push(role(&host_cluster_name, &host_labels, &cluster));
            }
        }
        _ => objects.push(role(
            &host_name,
            &host_labels,
            &host_rules.iter().collect::<Vec<_>>(),
        )),
    }
    objects
}

/// Whether `existing` (an object in the cluster under a name [`manifests`] makes) was written
/// for ReconcilePlugin `rp`, so that applying over it or deleting it takes nothing from anyone
/// else.
pub fn made_for(existing: &Value, rp: &str) -> bool {
    existing["metadata"]["annotations"][FOR_RECONCILE_PLUGIN] == rp
}

/// Who holds a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holder {
    /// The plugin's ServiceAccount.
    Plugin,
    /// The host (through the chart's aggregated role).
    Host,
}

/// One verb on one resource, somewhere, for someone: what an upgrade may add.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// Who may.
    pub holder: Holder,
    /// The verb.
    pub verb: String,
    /// `resource.group` (`resource` for the core group), with `/subresource`.
    pub resource: String,
    /// The namespace, or empty for every namespace (and cluster-scoped resources).
    pub namespace: String,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holder = match self.holder {
            Holder::Plugin => "the plugin",
            Holder::Host => "the host",
        };
        let place = if self.namespace.is_empty() {
            "in every namespace".to_owned()
        } else {
            format!("in namespace {}", self.namespace)
        };
        write!(f, "{holder} may {} {} {place}", self.verb, self.resource)
    }
}

/// What a set of objects [`manifests`] makes allows: each bound role's rules, where bound, and
/// the host's role everywhere. Objects of other kinds are ignored.
pub fn grants(objects: &[Value]) -> BTreeSet<Grant> {
    let roles: BTreeMap<&str, &Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .filter_map(|o| Some((o["metadata"]["name"].as_str()?, o)))
        .collect();
    let mut grants = BTreeSet::new();
    let mut add = |holder: Holder, role: &Value, namespace: &str| {
        for rule in role["rules"].as_array().into_iter().flatten() {
            let strings = |field: &str| -> Vec<String> {
                rule[field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        let resource = match resource.split_once('/') {
                            Some((r, sub)) if !group.is_empty() => format!("{r}.{group}/{sub}"),
                            _ if !group.is_empty() => format!("{resource}.{group}"),
                            _ => resource.clone(),
                        };
                        grants.insert(Grant {
                            holder,
                            verb,
                            resource,
                            namespace: namespace.to_owned(),
                        });
                    }
                }
            }
        }
    };
    for object in objects {
        let namespace = match object["kind"].as_str() {
            Some("ClusterRoleBinding") => "",
            Some("RoleBinding") => object["metadata"]["namespace"].as_str().unwrap_or(""),
            Some("ClusterRole") if object["metadata"]["labels"][AGGREGATE_TO_HOST] == "true" => {
                add(Holder::Host, object, "");
                continue;
            }
            _ => continue,
        };
        let name = object["roleRef"]["name"].as_str().unwrap_or_default();
        let holder = match name.starts_with(HOST_PREFIX) {
            true => Holder::Host,
            false => Holder::Plugin,
        };
        if let Some(role) = roles.get(name) {
            add(holder, role, namespace);
        }
    }
    grants
}

/// The dangerous grants among `rules` (the plugin's) and `host_rules`, one line each, with why.
/// `host_confined`: the host's share is bound only where the plugin's parents live.
pub fn dangers(rules: &[Rule], host_rules: &[Rule], host_confined: bool) -> Vec<String> {
    let host = match host_confined {
        true => "the host may (where the plugin's parents live)",
        false => "the host may (in every namespace, for every plugin's sake)",
    };
    let line = |holder: &str, rule: &Rule| {
        danger(rule).map(|why| {
            format!(
                "{holder} {} {}: {why}",
                rule.verbs.join(", "),
                rule.qualified()
            )
        })
    };
    rules
        .iter()
        .filter_map(|r| line("the plugin may", r))
        .chain(host_rules.iter().filter_map(|r| line(host, r)))
        .collect()
}

/// An object by kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectId {
    /// `ClusterRole`, `ClusterRoleBinding` or `RoleBinding`.
    pub kind: String,
    /// The namespace of a RoleBinding, else empty.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjectId {
    /// The id of a Kubernetes object (JSON).
    pub fn of(object: &Value) -> Self {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        Self {
            kind: text(&object["kind"]),
            namespace: text(&object["metadata"]["namespace"]),
            name: text(&object["metadata"]["name"]),
        }
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace.as_str() {
            "" => write!(f, "{} {}", self.kind, self.name),
            ns => write!(f, "{} {ns}/{}", self.kind, self.name),
        }
    }
}

/// What going from the `existing` objects (made for the same ReconcilePlugin) to the `wanted`
/// ones changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Grants `wanted` has and `existing` has not: what the installer must consent to.
    pub added: Vec<Grant>,
    /// Grants `existing` has and `wanted` has not.
    pub removed: Vec<Grant>,
    /// Existing objects `wanted` has no counterpart of: to delete (bindings of namespaces no
    /// longer listed, a ClusterRoleBinding replaced by RoleBindings, ...).
    pub stale: Vec<ObjectId>,
}

/// What replacing `existing` with `wanted` changes.
pub fn changes(existing: &[Value], wanted: &[Value]) -> Changes {
    let (before, after) = (grants(existing), grants(wanted));
    let kept: BTreeSet<ObjectId> = wanted.iter().map(ObjectId::of).collect();
    // What was granted in every namespace covers the same in one.
    let covered = |g: &Grant| {
        before.contains(g)
            || before.contains(&Grant {
                namespace: String::new(),
                ..g.clone()
            })
    };
    Changes {
        added: after.iter().filter(|g| !covered(g)).cloned().collect(),
        removed: before.difference(&after).cloned().collect(),
        stale: existing
            .iter()
            .map(ObjectId::of)
            .filter(|id| !kept.contains(id))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(group: &str, resource: &str, verbs: &[&'static str], namespaced: bool) -> Rule {
        Rule {
            group: group.into(),
            resource: resource.into(),
            verbs: verbs.to_vec(),
            namespaced,
        }
    }

    fn widget_rules() -> (Vec<Rule>, Vec<Rule>) {
        (
            vec![
                rule("example.com", "widgets", &["get", "patch"], true),
                rule("", "configmaps", &["get", "create"], true),
                rule("storage.k8s.io", "storageclasses", &["get"], false),
            ],
            vec![rule("example.com", "widgets", &["list"], true)],
        )
    }

    fn objects(scope: &Scope) -> Vec<Value> {
        let (rules, host) = widget_rules();
        manifests(
            "widgets.example.com",
            "kinds",
            &Identity::new("plugins", "widget"),
            &rules,
            &host,
            scope,
            &[],
        )
    }

    fn ids(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| ObjectId::of(o).to_string())
            .collect()
    }

    #[test]
    fn a_confined_grant_should_bind_in_each_namespace_and_only_what_cannot_be_confined_cluster_wide()
     {
        let objects = objects(&Scope::Namespaces(vec!["a".into(), "b".into()]));
        assert_eq!(
            ids(&objects),
            [
                "ClusterRole reconhost:plugin:widgets.example.com",
                "RoleBinding a/reconhost:plugin:widgets.example.com",
                "RoleBinding b/reconhost:plugin:widgets.example.com",
                "ClusterRole reconhost:plugin-cluster:widgets.example.com",
                "ClusterRoleBinding reconhost:plugin-cluster:widgets.example.com",
                "ClusterRole reconhost:host:widgets.example.com",
            ],
            "named from the ReconcilePlugin, whatever the component calls itself"
        );
        assert_eq!(objects[0]["rules"].as_array().unwrap().len(), 2);
        assert_eq!(objects[3]["rules"][0]["resources"][0], "storageclasses");
        assert_eq!(objects[1]["subjects"][0]["name"], "widget");
        assert_eq!(
            objects[1]["roleRef"]["name"],
            objects[0]["metadata"]["name"]
        );
        assert!(objects.iter().all(|o| made_for(o, "widgets.example.com")));
        assert!(!made_for(&objects[0], "other.example.com"));
        assert!(
            !made_for(&json!({"metadata": {"name": "x"}}), "widgets.example.com"),
            "an object without the annotation is someone else's"
        );
        assert_eq!(objects[5]["metadata"]["labels"][AGGREGATE_TO_HOST], "true");
        assert!(
            objects[..5]
                .iter()
                .all(|o| o["metadata"]["labels"].get(AGGREGATE_TO_HOST).is_none()),
            "the plugin's own rules must not reach the host"
        );
        let grants: Vec<String> = grants(&objects).iter().map(|g| g.to_string()).collect();
        assert!(grants.contains(&"the plugin may create configmaps in namespace b".to_owned()));
        assert!(grants.contains(
            &"the plugin may get storageclasses.storage.k8s.io in every namespace".to_owned()
        ));
        assert!(
            grants.contains(&"the host may list widgets.example.com in every namespace".to_owned())
        );
        assert!(
            !grants.iter().any(|g| g.contains("configmaps in every")),
            "{grants:?}"
        );
    }

    #[test]
    fn the_hosts_share_should_be_bound_where_a_confined_plugins_parents_live_when_the_host_is_known()
     {
        let (mut rules, mut host_rules) = widget_rules();
        rules.truncate(2);
        host_rules.push(rule("storage.k8s.io", "storageclasses", &["list"], false));
        let host = [json!({"kind": "ServiceAccount", "namespace": "sys", "name": "reconhost"})];
        let objects = manifests(
            "widgets.example.com",
            "kinds",
            &Identity::new("plugins", "widget"),
            &rules,
            &host_rules,
            &Scope::Namespaces(vec!["a".into(), "b".into()]),
            &host,
        );
        assert_eq!(
            ids(&objects),
            [
                "ClusterRole reconhost:plugin:widgets.example.com",
                "RoleBinding a/reconhost:plugin:widgets.example.com",
                "RoleBinding b/reconhost:plugin:widgets.example.com",
                "ClusterRole reconhost:host:widgets.example.com",
                "RoleBinding a/reconhost:host:widgets.example.com",
                "RoleBinding b/reconhost:host:widgets.example.com",
                "ClusterRole reconhost:host-cluster:widgets.example.com",
            ]
        );
        assert!(
            objects[3]["metadata"]["labels"]
                .get(AGGREGATE_TO_HOST)
                .is_none()
        );
        assert_eq!(objects[4]["subjects"][0]["name"], "reconhost");
        assert_eq!(objects[6]["metadata"]["labels"][AGGREGATE_TO_HOST], "true");
        assert_eq!(objects[6]["rules"][0]["resources"][0], "storageclasses");
        let grants: Vec<String> = grants(&objects).iter().map(|g| g.to_string()).collect();
        assert!(
            grants.contains(&"the host may list widgets.example.com in namespace a".to_owned()),
            "{grants:?}"
        );
        assert!(
            !grants
                .iter()
                .any(|g| g.starts_with("the host") && g.contains("widgets.example.com in every")),
            "{grants:?}"
        );
        assert!(
            grants.contains(
                &"the host may list storageclasses.storage.k8s.io in every namespace".to_owned()
            ),
            "{grants:?}"
        );
        let cluster_wide = manifests(
            "widgets.example.com",
            "kinds",
            &Identity::new("plugins", "widget"),
            &rules,
            &host_rules,
            &Scope::ClusterWide,
            &host,
        );
        assert_eq!(
            ids(&cluster_wide).last().unwrap(),
            "ClusterRole reconhost:host:widgets.example.com",
            "a plugin granted everywhere has its share aggregated"
        );
    }

    #[test]
    fn a_cluster_wide_grant_should_be_one_role_and_one_cluster_role_binding() {
        let objects = objects(&Scope::ClusterWide);
        assert_eq!(
            ids(&objects),
            [
                "ClusterRole reconhost:plugin:widgets.example.com",
                "ClusterRoleBinding reconhost:plugin:widgets.example.com",
                "ClusterRole reconhost:host:widgets.example.com",
            ]
        );
        assert_eq!(objects[0]["rules"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn changes_should_show_what_an_upgrade_adds_and_what_it_leaves_behind() {
        let one = objects(&Scope::Namespaces(vec!["a".into()]));
        let two = objects(&Scope::Namespaces(vec!["b".into()]));
        let changes = super::changes(&one, &two);
        let added: Vec<String> = changes.added.iter().map(|g| g.to_string()).collect();
        assert!(added.contains(&"the plugin may create configmaps in namespace b".to_owned()));
        assert!(added.iter().all(|g| g.contains("namespace b")), "{added:?}");
        assert!(changes.removed.iter().all(|g| g.namespace == "a"));
        assert_eq!(
            changes
                .stale
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["RoleBinding a/reconhost:plugin:widgets.example.com"]
        );
        let same = super::changes(&one, &one);
        assert_eq!(same, Changes::default(), "reinstalling changes nothing");
        let wider = super::changes(&one, &objects(&Scope::ClusterWide));
        assert!(
            wider
                .added
                .iter()
                .any(|g| g.to_string() == "the plugin may create configmaps in every namespace")
        );
        assert!(
            wider
                .stale
                .iter()
                .any(|id| id.to_string() == "RoleBinding a/reconhost:plugin:widgets.example.com"),
            "the RoleBinding is replaced by the ClusterRoleBinding"
        );
        let narrower = super::changes(&objects(&Scope::ClusterWide), &one);
        assert!(narrower.added.is_empty(), "{:?}", narrower.added);
        assert!(
            narrower
                .stale
                .iter()
                .any(|id| id.kind == "ClusterRoleBinding"),
            "{:?}",
            narrower.stale
        );
        let (mut rules, host) = widget_rules();
        rules.push(rule("", "secrets", &["get"], true));
        let more = manifests(
            "widgets.example.com",
            "kinds",
            &Identity::new("plugins", "widget"),
            &rules,
            &host,
            &Scope::Namespaces(vec!["a".into()]),
            &[],
        );
        let added: Vec<String> = super::changes(&one, &more)
            .added
            .iter()
            .map(|g| g.to_string())
            .collect();
        assert_eq!(added, ["the plugin may get secrets in namespace a"]);
    }

    #[test]
    fn dangers_should_say_who_may_do_what_and_why() {
        let rules = [
            rule("apps", "deployments", &["create", "delete"], true),
            rule("", "configmaps", &["create"], true),
        ];
        let host = [rule("", "secrets", &["get", "list", "watch"], true)];
        let lines = dangers(&rules, &host, false);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("the plugin may create, delete deployments.apps: workloads"));
        assert!(lines[1].starts_with(
            "the host may (in every namespace, for every plugin's sake) get, list, watch secrets: Secrets"
        ));
        let confined = dangers(&rules, &host, true);
        assert!(
            confined[1].starts_with(
                "the host may (where the plugin's parents live) get, list, watch secrets"
            ),
            "{confined:?}"
        );
    }
}
