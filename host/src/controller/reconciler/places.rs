//! Where a plugin's children may go, decided before anything is written: in the right scope for
//! their kind, inside what the host watches (so the takeover check, which asks the cache, has
//! the whole answer), and never onto the host's own Leases or its Namespace object.

use std::collections::BTreeSet;

use crate::planner::{Action, Plan};

/// What bounds the places of one plugin's children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bounds {
    /// The namespaces the plugin's namespaced kinds are watched in, if not every one: the
    /// host's `--namespace`, narrowed to the ReconcilePlugin's `spec.namespaces`.
    pub watched: Option<BTreeSet<String>>,
    /// The host's own namespaces (where it runs, where its Lease is): their Namespace objects
    /// are no plugin's children.
    pub protected: BTreeSet<String>,
    /// The host's own Leases (leader election's, the ring members'), no plugin's children
    /// either.
    pub lease: Option<crate::controller::context::HostLeases>,
}

/// Whether a child's kind is namespaced (`None`: not one of the plugin's child kinds, which
/// validation refuses elsewhere).
pub type Scope<'a> = &'a dyn Fn(&crate::planner::ChildPlan) -> Option<bool>;

/// The first child of `plan` (other than a deletion) that is out of place, and why.
pub fn check(plan: &Plan, namespaced: Scope<'_>, bounds: &Bounds) -> Result<(), String> {
    for child in plan.children.iter().filter(|c| c.action != Action::Delete) {
        let Some(namespaced) = namespaced(child) else {
            continue;
        };
        match (namespaced, child.namespace.as_str()) {
            (true, "") => {
                return Err(format!(
                    "{} {}: metadata.namespace is required: the parent is cluster-scoped, so each namespaced child names its namespace",
                    child.kind.kind, child.name
                ));
            }
            (false, ns) if !ns.is_empty() => {
                return Err(format!(
                    "{}: metadata.namespace must not be set: {} is cluster-scoped",
                    child.target(),
                    child.kind.kind
                ));
            }
            (true, ns)
                if child.kind.group() == "coordination.k8s.io"
                    && child.kind.kind == "Lease"
                    && bounds
                        .lease
                        .as_ref()
                        .is_some_and(|l| l.holds(ns, &child.name)) =>
            {
                return Err(format!(
                    "{}: it is one of the host's own Leases; no plugin writes it",
                    child.target()
                ));
            }
            (true, ns) if bounds.watched.as_ref().is_some_and(|w| !w.contains(ns)) => {
                let watched = bounds.watched.iter().flatten().cloned().collect::<Vec<_>>();
                let watched = match watched.as_slice() {
                    [] => "no namespace".to_owned(),
                    [one] => format!("namespace {one} only"),
                    many => format!("namespaces {} only", many.join(", ")),
                };
                return Err(format!(
                    "{}: the host watches this plugin's kinds in {watched} (--namespace, and the ReconcilePlugin's spec.namespaces), so it could neither see nor protect a child in {ns}",
                    child.target()
                ));
            }
            (false, _)
                if child.kind.group().is_empty()
                    && child.kind.kind == "Namespace"
                    && bounds.protected.contains(&child.name) =>
            {
                return Err(format!(
                    "{}: it is the host's own namespace; no plugin writes it",
                    child.target()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::context::HostLeases;
    use crate::model::KindRef;
    use crate::planner::ChildPlan;
    use serde_json::json;

    fn child(api_version: &str, kind: &str, namespace: &str, name: &str) -> ChildPlan {
        ChildPlan {
            kind: KindRef::new(api_version, kind),
            namespace: namespace.into(),
            name: name.into(),
            action: Action::Create,
            object: json!({}),
            uid: None,
            wave: 0,
            why: None,
            changes: Default::default(),
        }
    }

    fn plan(children: Vec<ChildPlan>) -> Plan {
        Plan {
            children,
            status: None,
            finalizer: None,
            dropped: Vec::new(),
            metadata: None,
        }
    }

    fn check_one(c: ChildPlan, bounds: &Bounds) -> Result<(), String> {
        let namespaced = |c: &ChildPlan| Some(c.kind.kind != "Namespace");
        check(&plan(vec![c]), &namespaced, bounds)
    }

    #[test]
    fn children_should_stay_inside_what_the_host_watches_and_off_its_own_objects() {
        let bounds = Bounds {
            watched: Some(BTreeSet::from(["team".to_owned()])),
            protected: BTreeSet::from(["reconhost-system".to_owned()]),
            lease: Some(HostLeases {
                namespace: "team".into(),
                name: "reconhost-leader".into(),
                prefix: false,
            }),
        };
        assert_eq!(
            check_one(child("v1", "ConfigMap", "team", "a"), &bounds),
            Ok(())
        );
        let lease = check_one(
            child(
                "coordination.k8s.io/v1",
                "Lease",
                "team",
                "reconhost-leader",
            ),
            &bounds,
        )
        .unwrap_err();
        assert!(lease.contains("the host's own Leases"), "{lease}");
        assert_eq!(
            check_one(
                child("coordination.k8s.io/v1", "Lease", "team", "mine"),
                &bounds
            ),
            Ok(()),
            "another Lease is the takeover check's to judge"
        );
        // With sharding, every member's Lease: the ring's prefix.
        let ring = Bounds {
            lease: Some(HostLeases {
                namespace: "team".into(),
                name: "reconhost-ring-".into(),
                prefix: true,
            }),
            ..bounds.clone()
        };
        let member = child(
            "coordination.k8s.io/v1",
            "Lease",
            "team",
            "reconhost-ring-b-1",
        );
        assert!(check_one(member.clone(), &ring).is_err());
        assert_eq!(check_one(member, &bounds), Ok(()));
        let elsewhere = check_one(child("v1", "Secret", "kube-system", "x"), &bounds).unwrap_err();
        assert!(elsewhere.contains("in namespace team only"), "{elsewhere}");
        let namespace =
            check_one(child("v1", "Namespace", "", "reconhost-system"), &bounds).unwrap_err();
        assert!(namespace.contains("host's own namespace"), "{namespace}");
        assert_eq!(
            check_one(child("v1", "Namespace", "", "other"), &bounds),
            Ok(())
        );
        let confined = Bounds {
            watched: Some(BTreeSet::from(["a".to_owned(), "b".to_owned()])),
            ..Bounds::default()
        };
        assert_eq!(
            check_one(child("v1", "Secret", "b", "x"), &confined),
            Ok(())
        );
        let outside = check_one(child("v1", "Secret", "c", "x"), &confined).unwrap_err();
        assert!(
            outside.contains("in namespaces a, b only") && outside.contains("spec.namespaces"),
            "{outside}"
        );
        let unbounded = Bounds::default();
        assert_eq!(
            check_one(child("v1", "Secret", "kube-system", "x"), &unbounded),
            Ok(()),
            "a host watching every namespace sees every child"
        );
        assert!(check_one(child("v1", "ConfigMap", "", "a"), &unbounded).is_err());
        let mut deletion = child("v1", "ConfigMap", "reconhost-system", "a");
        deletion.action = Action::Delete;
        assert_eq!(
            check(&plan(vec![deletion]), &|_: &ChildPlan| Some(true), &bounds),
            Ok(()),
            "deleting what the plugin made is never refused here"
        );
    }
}
