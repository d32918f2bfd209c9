//! Which children a sharded replica's caches keep whole: those of the parents it owns, is
//! about to own, or would own if a member whose Lease is late died. Of another replica's
//! children it keeps a stub ([`Cached::stub`]): the
//! object's [`Meta`], a few hundred bytes where the object is kilobytes, which is what the
//! indexes, the change handlers and the takeover check read. So a replica's memory for
//! children falls with the number of replicas, with no change to what the API server sends it
//! (a watch still lists every child; the filter is on receipt) and no label on any object.
//!
//! Only caches of child kinds are sieved ([`super::Informers::acquire_children_in`]): parents
//! stay whole (every replica walks their keys when the ring moves), and so do the kinds a
//! plugin reads, which may be anyone's. A child whose owner is not a parent kind of this host,
//! or that has no controller, is kept whole too: the sieve judges only what it can assign.
//!
//! A stub is never handed to a plugin or the planner: the reconciler asks
//! [`super::Informer::whole`] for the children it gathers, which fetches a stub's object from
//! the API server (a replica that gained a parent reconciles it once with its children
//! fetched; after that, their changes arrive whole).
//!
//! [`Cached::stub`]: super::Cached::stub

use std::collections::HashMap;
use std::sync::RwLock;

use super::object::Meta;
use super::store::{GroupKind, ObjectKey};
use crate::model::group_of;

/// Whether this replica keeps the parent of a key: the owner's answer, consulted on every
/// object a sieved cache receives.
type Keeps = Box<dyn Fn(&ObjectKey) -> bool + Send + Sync>;

/// The rule a replica's child caches keep objects whole by.
pub struct Sieve {
    /// The parent kinds whose children are sieved, with whether each is namespaced. Kinds are
    /// added by the controllers that reconcile them and never removed: a kind no plugin
    /// reconciles any more has no children to judge, or only its orphans.
    parents: RwLock<HashMap<GroupKind, bool>>,
    keeps: Keeps,
}

impl Sieve {
    /// A sieve keeping the children of the parents `keeps` says this replica keeps.
    pub fn new(keeps: impl Fn(&ObjectKey) -> bool + Send + Sync + 'static) -> Self {
        Self {
            parents: RwLock::default(),
            keeps: Box::new(keeps),
        }
    }

    /// Sieves the children of `kind`, whose objects are namespaced or not.
    pub fn parent_kind(&self, kind: GroupKind, namespaced: bool) {
        self.parents
            .write()
            .expect("sieve lock poisoned")
            .insert(kind, namespaced);
    }

    /// Whether a cache keeps `object` whole: it has no controller of a parent kind, or this
    /// replica keeps that parent.
    pub fn keeps(&self, object: &Meta) -> bool {
        let Some(owner) = object.controller() else {
            return true;
        };
        let group = group_of(owner.api_version);
        let namespaced = {
            let parents = self.parents.read().expect("sieve lock poisoned");
            let found = parents
                .iter()
                .find(|(kind, _)| kind.group == group && kind.kind == owner.kind);
            match found {
                Some((_, namespaced)) => *namespaced,
                None => return true,
            }
        };
        // A namespaced owner lives in its child's namespace, a cluster-scoped one in none (as
        // the controller's child handler maps them).
        let namespace = if namespaced {
            object.key.namespace.as_str()
        } else {
            ""
        };
        (self.keeps)(&ObjectKey::new(namespace, owner.name))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn child(namespace: &str, owner: Option<(&str, &str, &str)>) -> Meta {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": "c", "resourceVersion": "1"}});
        if let Some((api_version, kind, name)) = owner {
            object["metadata"]["ownerReferences"] = json!([{"apiVersion": api_version,
                "kind": kind, "name": name, "uid": "u", "controller": true}]);
        }
        Meta::of(&object)
    }

    #[test]
    fn sieve_should_keep_only_children_of_kept_parents_of_its_parent_kinds() {
        let sieve = Sieve::new(|key| key.name == "mine" || key.namespace.is_empty());
        sieve.parent_kind(GroupKind::of("example.com/v1", "WebApp"), true);
        sieve.parent_kind(GroupKind::of("example.com/v1", "Tenant"), false);
        let web = |name| Some(("example.com/v1", "WebApp", name));
        assert!(sieve.keeps(&child("a", web("mine"))));
        assert!(
            !sieve.keeps(&child("a", web("theirs"))),
            "another replica's parent"
        );
        assert!(
            !sieve.keeps(&child("a", Some(("example.com/v2", "WebApp", "theirs")))),
            "any version of the kind"
        );
        assert!(
            sieve.keeps(&child("a", Some(("example.com/v1", "Tenant", "t")))),
            "a cluster-scoped owner's key has no namespace"
        );
        assert!(
            sieve.keeps(&child("a", Some(("apps/v1", "ReplicaSet", "theirs")))),
            "not a parent kind of this host"
        );
        assert!(sieve.keeps(&child("a", None)), "no controller");
    }
}
