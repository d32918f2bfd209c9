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

use super::access::Question;
use crate::keys::ResolvedKind;

/// One rule: verbs on a resource of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The API group (empty for core).
    pub group: String,
    /// The resource, with `/subresource` when it is one.
    pub resource: String,
    /// The verbs.
    pub verbs: Vec<&'static str>,
    /// Whether it is granted per namespace: a namespaced resource, except the events of a
    /// cluster-scoped parent (they go to namespace `default`, so they are granted with the
    /// parent, cluster-wide).
    pub namespaced: bool,
}

impl Rule {
    /// The resource as kubectl names it: `resource.group`, then `/subresource`.
    pub fn qualified(&self) -> String {
        let (resource, sub) = match self.resource.split_once('/') {
            Some((r, s)) => (r, format!("/{s}")),
            None => (self.resource.as_str(), String::new()),
        };
        match self.group.as_str() {
            "" => format!("{resource}{sub}"),
            group => format!("{resource}.{group}{sub}"),
        }
    }
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
        namespaced: parent.namespaced,
    });
    rules
}

/// Why a rule is dangerous to grant, if it is: what a plugin holding it could do beyond
/// reconciling. Reads are dangerous only for Secrets; writes for whatever runs code, grants
/// rights, is an identity, or steers the cluster or reconhost itself.
pub fn danger(rule: &Rule) -> Option<&'static str> {
    let writes = rule
        .verbs
        .iter()
        .any(|v| matches!(*v, "create" | "patch" | "update" | "delete"));
    let resource = rule.resource.split('/').next().unwrap_or_default();
    Some(match (rule.group.as_str(), resource) {
        ("", "secrets") => "Secrets hold credentials: whoever reads them holds the credentials",
        _ if !writes => return None,
        ("", "pods" | "replicationcontrollers" | "podtemplates") | ("apps", _) | ("batch", _) => {
            "workloads run code of the writer's choosing, as any ServiceAccount of the namespace, with its Secrets and volumes"
        }
        ("rbac.authorization.k8s.io", _) => {
            "RBAC objects grant rights: a writer can grant itself more"
        }
        ("", "serviceaccounts") => {
            "ServiceAccounts are identities: a writer can mint tokens for them"
        }
        ("", "namespaces") => "deleting a namespace deletes everything in it",
        ("", "nodes" | "persistentvolumes") => "nodes and volumes are shared by every tenant",
        ("reconhost.dev", _) => {
            "ReconcilePlugins install plugins: a writer can run code of its choosing as other ServiceAccounts"
        }
        ("coordination.k8s.io", "leases") => {
            "Leases elect leaders: a writer can take one and stop the controller that held it"
        }
        ("admissionregistration.k8s.io", _) => {
            "webhooks and admission policies see or refuse every write in the cluster"
        }
        ("apiextensions.k8s.io", _) => {
            "a CRD defines an API: changing or deleting one deletes or rewrites every object of it"
        }
        ("certificates.k8s.io", _) => {
            "certificate requests can mint credentials the cluster trusts"
        }
        _ => return None,
    })
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

/// Every rule as questions, one per verb: a rule granted per namespace in each of
/// `namespaces`, or in every namespace when that is empty; the others cluster-wide.
pub fn questions(rules: &[Rule], namespaces: &[String]) -> Vec<Question> {
    let every = [String::new()];
    rules
        .iter()
        .flat_map(|r| {
            let namespaces = if r.namespaced && !namespaces.is_empty() {
                namespaces
            } else {
                &every[..]
            };
            namespaces.iter().flat_map(move |ns| {
                r.verbs
                    .iter()
                    .map(move |v| Question::new(v, &r.group, &r.resource, ns))
            })
        })
        .collect()
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
        assert_eq!(
            find("widgets/status").unwrap().qualified(),
            "widgets.example.com/status"
        );
        assert_eq!(find("secrets").unwrap().qualified(), "secrets");
        assert!(find("deployments").unwrap().verbs.contains(&"delete"));
        assert_eq!(
            rules.iter().filter(|r| r.resource == "configmaps").count(),
            1,
            "a read kind that is a child needs no second rule"
        );
        assert_eq!(find("secrets").unwrap().verbs, ["get", "list", "watch"]);
        assert_eq!(find("events").unwrap().group, "events.k8s.io");
        let questions = questions(&rules, &[]);
        assert!(questions.contains(&Question::new("list", "", "secrets", "")));
        let scoped = super::questions(&rules, &["team".to_owned()]);
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
    }

    #[test]
    fn a_cluster_scoped_parent_should_have_its_events_granted_with_it() {
        let mut parent = kind("example.com", "Cluster", "clusters");
        parent.namespaced = false;
        let rules = rules(&parent, &[kind("", "ConfigMap", "configmaps")], &[]);
        let events = rules.iter().find(|r| r.resource == "events").unwrap();
        assert!(
            !events.namespaced,
            "events of a cluster-scoped object go to default"
        );
        let asked = questions(&rules, &["a".to_owned(), "b".to_owned()]);
        assert!(asked.contains(&Question::new("create", "events.k8s.io", "events", "")));
        assert!(asked.contains(&Question::new("create", "", "configmaps", "b")));
        assert!(asked.contains(&Question::new("get", "example.com", "clusters", "")));
        assert!(!asked.contains(&Question::new("create", "", "configmaps", "")));
    }

    #[test]
    fn danger_should_name_what_escapes_reconciling() {
        let rule = |group: &str, resource: &str, verbs: &[&'static str]| Rule {
            group: group.into(),
            resource: resource.into(),
            verbs: verbs.to_vec(),
            namespaced: true,
        };
        for (group, resource) in [
            ("", "secrets"),
            ("", "pods"),
            ("apps", "deployments"),
            ("batch", "cronjobs"),
            ("rbac.authorization.k8s.io", "rolebindings"),
            ("", "serviceaccounts"),
            ("", "namespaces"),
            ("reconhost.dev", "reconcileplugins"),
            ("coordination.k8s.io", "leases"),
            (
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
            ),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
        ] {
            assert!(
                danger(&rule(group, resource, &WRITE)).is_some(),
                "writing {resource}.{group}"
            );
        }
        assert!(
            danger(&rule("", "secrets", &READ))
                .unwrap()
                .contains("credentials"),
            "reading Secrets is dangerous too"
        );
        assert_eq!(danger(&rule("apps", "deployments", &READ)), None);
        assert_eq!(danger(&rule("", "configmaps", &WRITE)), None);
        assert_eq!(danger(&rule("example.com", "widgets", &WRITE)), None);
    }
}
