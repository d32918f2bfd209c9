//! The one decision taken at dequeue: does this replica, with which revision, serve this parent?
//!
//! In order: the [`Assignment`] (does this replica own the parent at all: leadership today, a
//! shard tomorrow), then the plugin's selection (its label selector and namespaces), then the
//! revision (the stable one, or a candidate for a share of parents chosen by a stable hash of
//! the parent's UID), and whether a shadow revision is called beside the stable one. Pure: no
//! cluster, no clock; the controller applies the [`Decision`].
//!
//! A parent's share position never changes (its UID is fixed), so a candidate whose share grows
//! only ever gains parents, and one whose share shrinks only loses them.

use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::cache::ObjectKey;
use crate::selector::Selector;
use crate::shard::ring::Claims;

/// Which parents this replica owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Every parent (the leader, or a host without leader election or sharding).
    All,
    /// None (a standby replica, or a member that has not joined its ring yet).
    Nothing,
    /// The parents its claims give it, as one of several active members of a ring.
    Shard(Arc<Claims>),
}

impl Assignment {
    /// Whether this replica owns `key`.
    pub fn owns(&self, key: &ObjectKey) -> bool {
        match self {
            Self::All => true,
            Self::Nothing => false,
            Self::Shard(claims) => claims.owns(key),
        }
    }

    /// Whether its caches keep `key`'s children whole ([`crate::cache::Sieve`]): those of the
    /// parents it owns or is about to own or give up (any view of its own gives them to it).
    /// Knowing no view yet, or none at all, it keeps everything: a standby takes over warm.
    pub fn keeps(&self, key: &ObjectKey) -> bool {
        match self {
            Self::All | Self::Nothing => true,
            Self::Shard(claims) => claims.in_views(key),
        }
    }

    /// Whether it owns no parent at all.
    pub fn is_nothing(&self) -> bool {
        matches!(self, Self::Nothing)
    }
}

/// The parents a plugin reconciles.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Their labels match it (empty: all).
    pub selector: Selector,
    /// They live in one of these namespaces (`None`: any); a cluster-scoped parent lives in
    /// none and is not filtered by them.
    pub namespaces: Option<std::collections::BTreeSet<String>>,
    /// Their annotations match it (a decorator's `annotationSelector`; empty: all).
    pub annotations: Selector,
}

impl Selection {
    /// Whether the plugin reconciles the parent `key`, whose object is `parent`.
    pub fn selects(&self, key: &ObjectKey, parent: &serde_json::Value) -> bool {
        let in_namespace = match &self.namespaces {
            Some(namespaces) if !key.namespace.is_empty() => namespaces.contains(&key.namespace),
            _ => true,
        };
        let annotations = parent["metadata"]["annotations"].as_object();
        in_namespace
            && self.selector.matches_object(parent)
            && self
                .annotations
                .matches_with(|key| annotations?.get(key)?.as_str())
    }
}

/// A share of parents, in basis points (0 to 10,000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Share(u32);

impl Share {
    /// Every parent.
    #[cfg(test)]
    pub const ALL: Share = Share(10_000);

    /// `percent` of the parents (capped at 100).
    pub fn percent(percent: u32) -> Self {
        Share(percent.min(100) * 100)
    }

    /// Whether the parent with `uid` falls in this share.
    pub fn holds(&self, uid: &str) -> bool {
        position(uid) < self.0
    }

    /// The share in percent, for people.
    pub fn as_percent(&self) -> f64 {
        f64::from(self.0) / 100.0
    }
}

/// Where a parent sits among all parents, from 0 to 9,999: the first eight bytes of the SHA-256
/// of its UID. A hash the host does not choose per process (unlike the standard library's), so
/// every replica and every restart puts a parent at the same place.
fn position(uid: &str) -> u32 {
    let digest = Sha256::digest(uid.as_bytes());
    let head = u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"));
    u32::try_from(head % 10_000).expect("below 10,000")
}

/// What serves which parents, as of one moment.
#[derive(Debug, Clone)]
pub struct Route<R> {
    /// The parents this replica owns.
    pub assignment: Assignment,
    /// The parents the plugin reconciles.
    pub selection: Selection,
    /// The revision that serves every parent outside the candidate's share.
    pub stable: R,
    /// A revision serving a share of the parents, during a rollout.
    pub candidate: Option<(R, Share)>,
    /// A revision called beside the stable one on the same inputs, never writing.
    pub shadow: Option<R>,
}

/// The route's answer for one parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<R> {
    /// Reconcile it with `revision`, calling `shadow` beside it.
    Serve {
        /// The revision that serves it.
        revision: R,
        /// The revision called on the same inputs, whose plan is only compared.
        shadow: Option<R>,
    },
    /// The plugin does not reconcile it (any more): release what the host holds on it, as
    /// this revision.
    Release(R),
    /// Not this replica's: leave it alone.
    Skip,
}

impl<R: Clone> Route<R> {
    /// A route sending every parent to `stable`.
    pub fn to(stable: R, assignment: Assignment, selection: Selection) -> Self {
        Self {
            assignment,
            selection,
            stable,
            candidate: None,
            shadow: None,
        }
    }

    /// Whether this replica owns the parent `key` at all (the first of [`Route::decide`]'s
    /// questions, which needs no parent object).
    pub fn owns(&self, key: &ObjectKey) -> bool {
        self.assignment.owns(key)
    }

    /// Decides for the parent `key`, whose object is `parent`.
    pub fn decide(&self, key: &ObjectKey, parent: &serde_json::Value) -> Decision<R> {
        if !self.assignment.owns(key) {
            return Decision::Skip;
        }
        self.decide_as_owner(key, parent)
    }

    /// [`Route::decide`] as the replica owning `key` decides it, whichever that is: what the
    /// ring as a whole does with the parent (a rollout's step counts its parents across the
    /// ring, since its calls are counted so).
    pub fn decide_as_owner(&self, key: &ObjectKey, parent: &serde_json::Value) -> Decision<R> {
        if !self.selection.selects(key, parent) {
            return Decision::Release(self.stable.clone());
        }
        let uid = parent["metadata"]["uid"].as_str().unwrap_or_default();
        match &self.candidate {
            Some((candidate, share)) if share.holds(uid) => Decision::Serve {
                revision: candidate.clone(),
                shadow: None,
            },
            _ => Decision::Serve {
                revision: self.stable.clone(),
                shadow: self.shadow.clone(),
            },
        }
    }

    /// Every revision the route sends parents to (a shadow serves none).
    pub fn revisions(&self) -> impl Iterator<Item = &R> {
        std::iter::once(&self.stable).chain(self.candidate.as_ref().map(|(c, _)| c))
    }

    /// The revision serving a parent with `uid` (the parent's selection aside).
    pub fn serving(&self, uid: &str) -> &R {
        match &self.candidate {
            Some((candidate, share)) if share.holds(uid) => candidate,
            _ => &self.stable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parent(uid: &str, labels: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"uid": uid, "labels": labels}})
    }

    fn serve(revision: &'static str) -> Decision<&'static str> {
        Decision::Serve {
            revision,
            shadow: None,
        }
    }

    fn key(namespace: &str) -> ObjectKey {
        ObjectKey::new(namespace, "p")
    }

    #[test]
    fn a_parent_should_be_served_only_where_it_is_owned_and_selected() {
        let selection = Selection {
            selector: Selector::parse("tier=web").expect("a selector"),
            namespaces: Some(["a".to_owned()].into()),
            annotations: Selector::default(),
        };
        let route = Route::to("stable", Assignment::All, selection);
        let web = parent("u", json!({"tier": "web"}));
        assert_eq!(route.decide(&key("a"), &web), serve("stable"));
        assert_eq!(
            route.decide(&key("b"), &web),
            Decision::Release("stable"),
            "outside its namespaces"
        );
        assert_eq!(
            route.decide(&key("a"), &parent("u", json!({"tier": "db"}))),
            Decision::Release("stable"),
            "outside its selector"
        );
        assert_eq!(
            route.decide(&key(""), &web),
            serve("stable"),
            "a cluster-scoped parent is in no namespace"
        );
        let standby = Route {
            assignment: Assignment::Nothing,
            ..route
        };
        assert_eq!(
            standby.decide(&key("b"), &web),
            Decision::Skip,
            "not even released by a replica that does not own it"
        );
        assert_eq!(
            standby.decide_as_owner(&key("a"), &web),
            serve("stable"),
            "what its owner does with it, for counting across the ring"
        );
        assert!(!standby.owns(&key("a")));
    }

    #[test]
    fn a_decorator_should_serve_only_the_parents_its_annotations_select() {
        let selection = Selection {
            annotations: Selector::parse("service-per-pod").expect("a selector"),
            ..Selection::default()
        };
        let route = Route::to("stable", Assignment::All, selection);
        let annotated = json!({"metadata": {"uid": "u", "annotations": {"service-per-pod": "x"}}});
        assert_eq!(route.decide(&key("a"), &annotated), serve("stable"));
        for other in [
            json!({"metadata": {"uid": "u", "annotations": {"other": "x"}}}),
            json!({"metadata": {"uid": "u", "labels": {"service-per-pod": "x"}}}),
            json!({"metadata": {"uid": "u"}}),
        ] {
            assert_eq!(
                route.decide(&key("a"), &other),
                Decision::Release("stable"),
                "{other}"
            );
        }
    }

    #[test]
    fn a_candidate_should_serve_its_share_and_gain_parents_only_as_it_grows() {
        let uids: Vec<String> = (0..10_000).map(|i| format!("uid-{i}")).collect();
        let mut route = Route::to("stable", Assignment::All, Selection::default());
        let mut before: Vec<bool> = vec![false; uids.len()];
        for percent in [0, 5, 25, 50, 100] {
            route.candidate = Some(("candidate", Share::percent(percent)));
            let now: Vec<bool> = uids
                .iter()
                .map(|uid| route.decide(&key("a"), &parent(uid, json!({}))) == serve("candidate"))
                .collect();
            let served = now.iter().filter(|c| **c).count();
            let expected = uids.len() * percent as usize / 100;
            assert!(
                served.abs_diff(expected) <= uids.len() / 100,
                "{percent} %: {served} of {} on the candidate",
                uids.len()
            );
            assert!(
                before.iter().zip(&now).all(|(b, n)| !b || *n),
                "at {percent} % a parent went back to stable"
            );
            before = now;
        }
        assert!(before.iter().all(|c| *c), "100 % is every parent");
    }

    #[test]
    fn a_shadow_should_be_called_beside_stable_only() {
        let mut route = Route::to("stable", Assignment::All, Selection::default());
        route.shadow = Some("shadow");
        route.candidate = Some(("candidate", Share::percent(50)));
        let (mut beside, mut alone) = (0, 0);
        for n in 0..100 {
            match route.decide(&key("a"), &parent(&format!("u{n}"), json!({}))) {
                Decision::Serve {
                    revision: "stable",
                    shadow: Some("shadow"),
                } => beside += 1,
                Decision::Serve {
                    revision: "candidate",
                    shadow: None,
                } => alone += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!(beside > 0 && alone > 0 && beside + alone == 100);
    }

    #[test]
    fn a_parents_position_should_not_depend_on_the_process() {
        // Fixed by SHA-256: the same on every replica, across restarts and releases.
        assert_eq!(position("0f6c1a0e-5c9a-4f1e-9d7e-3b1f2a9c8d7e"), 2_036);
        assert!(Share::ALL.holds("anything"));
        assert!(!Share::percent(0).holds("anything"));
    }
}
