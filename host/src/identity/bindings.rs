//! Forgets cached access answers when RBAC changes, so a revoked grant stops working within
//! seconds rather than at the end of the allowed answer's five minutes ([`super::access`]).
//!
//! Watches RoleBindings, ClusterRoleBindings, Roles and ClusterRoles cluster-wide, and keeps of
//! them only what says whose answers a change can alter: each binding's role and subjects, each
//! role's rules as a digest (so a relist's replay is no change). A binding that appears, changes
//! or goes alters the answers of its subjects before and after; a role whose rules change alters
//! those of every subject bound to it. The answers are dropped, not re-asked: the next read asks
//! again, within the ServiceAccount's review budget.
//!
//! Without the right to watch RBAC the watch retries with backoff, and answers expire at their
//! TTL as before.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use tracing::{debug, warn};

use super::Identity;
use super::access::Access;
use crate::controller::workers::Stop;

/// Which RBAC kind an object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A namespaced Role.
    Role,
    /// A ClusterRole.
    ClusterRole,
    /// A RoleBinding.
    RoleBinding,
    /// A ClusterRoleBinding.
    ClusterRoleBinding,
}

/// An RBAC object's identity: kind, namespace (empty for cluster-scoped) and name.
pub type Key = (Kind, String, String);

/// Whose access answers a change can alter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Who {
    /// One ServiceAccount.
    Account(Identity),
    /// Every ServiceAccount of a namespace (`system:serviceaccounts:<ns>`).
    Namespace(String),
    /// Every ServiceAccount (`system:serviceaccounts`, `system:authenticated`).
    All,
}

impl Who {
    /// Whether answers about `identity` may have changed.
    pub fn covers(&self, identity: &Identity) -> bool {
        match self {
            Who::Account(account) => account == identity,
            Who::Namespace(namespace) => *namespace == identity.namespace,
            Who::All => true,
        }
    }

    /// The ServiceAccounts a binding's subject names; `None` when it names none (a user or a
    /// group no ServiceAccount is in).
    fn of(subject: &Subject, binding_namespace: &str) -> Option<Self> {
        match subject.kind.as_str() {
            "ServiceAccount" => {
                let namespace = subject
                    .namespace
                    .as_deref()
                    .filter(|ns| !ns.is_empty())
                    .unwrap_or(binding_namespace);
                Some(Who::Account(Identity::new(
                    namespace,
                    subject.name.as_str(),
                )))
            }
            "User" => {
                let rest = subject.name.strip_prefix("system:serviceaccount:")?;
                let (namespace, name) = rest.split_once(':')?;
                Some(Who::Account(Identity::new(namespace, name)))
            }
            "Group" => match subject.name.as_str() {
                "system:serviceaccounts" | "system:authenticated" => Some(Who::All),
                name => name
                    .strip_prefix("system:serviceaccounts:")
                    .map(|ns| Who::Namespace(ns.to_owned())),
            },
            _ => None,
        }
    }
}

/// What is kept of one RBAC object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A binding: the role it grants, and to whom.
    Binding {
        /// The role, as a key.
        role: Key,
        /// The ServiceAccounts it binds.
        subjects: Vec<Who>,
    },
    /// A role: a digest of its rules.
    Role(u64),
}

/// What the host knows of the cluster's RBAC.
#[derive(Debug, Default)]
pub struct Book {
    entries: HashMap<Key, Entry>,
    /// Keys seen during a (re)list, per kind: whatever else is kept of that kind went while the
    /// watch was down.
    listing: HashMap<Kind, HashSet<Key>>,
}

impl Book {
    /// Takes in one event of `kind`'s watch; whose answers it may have altered.
    pub fn event(&mut self, kind: Kind, event: Event<(Key, Entry)>) -> Vec<Who> {
        match event {
            Event::Init => {
                self.listing.insert(kind, HashSet::new());
                Vec::new()
            }
            Event::InitApply((key, entry)) => {
                if let Some(seen) = self.listing.get_mut(&kind) {
                    seen.insert(key.clone());
                }
                self.put(key, Some(entry))
            }
            Event::Apply((key, entry)) => self.put(key, Some(entry)),
            Event::Delete((key, _)) => self.put(key, None),
            Event::InitDone => {
                let seen = self.listing.remove(&kind).unwrap_or_default();
                let gone: Vec<Key> = self
                    .entries
                    .keys()
                    .filter(|k| k.0 == kind && !seen.contains(*k))
                    .cloned()
                    .collect();
                gone.into_iter().flat_map(|k| self.put(k, None)).collect()
            }
        }
    }

    /// Records an object's new state (`None`: gone); the subjects whose answers changed.
    fn put(&mut self, key: Key, entry: Option<Entry>) -> Vec<Who> {
        let old = match &entry {
            Some(entry) => self.entries.insert(key.clone(), entry.clone()),
            None => self.entries.remove(&key),
        };
        if old == entry {
            return Vec::new();
        }
        let mut affected = Vec::new();
        for version in [old, entry].into_iter().flatten() {
            match version {
                Entry::Binding { subjects, .. } => affected.extend(subjects),
                Entry::Role(_) => affected.extend(self.bound_to(&key)),
            }
        }
        let mut seen = HashSet::new();
        affected.retain(|who| seen.insert(who.clone()));
        affected
    }

    /// The subjects of every binding that grants `role`.
    fn bound_to(&self, role: &Key) -> Vec<Who> {
        self.entries
            .values()
            .filter_map(|e| match e {
                Entry::Binding { role: r, subjects } if r == role => Some(subjects.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

fn role_key(kind: &str, binding_namespace: &str, name: &str) -> Key {
    match kind {
        "Role" => (Kind::Role, binding_namespace.to_owned(), name.to_owned()),
        _ => (Kind::ClusterRole, String::new(), name.to_owned()),
    }
}

fn digest(rules: &impl serde::Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(rules)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

fn subjects(subjects: Option<&Vec<Subject>>, namespace: &str) -> Vec<Who> {
    subjects
        .into_iter()
        .flatten()
        .filter_map(|s| Who::of(s, namespace))
        .collect()
}

fn role_binding(b: RoleBinding) -> (Key, Entry) {
    let namespace = b.metadata.namespace.unwrap_or_default();
    let entry = Entry::Binding {
        role: role_key(&b.role_ref.kind, &namespace, &b.role_ref.name),
        subjects: subjects(b.subjects.as_ref(), &namespace),
    };
    let name = b.metadata.name.unwrap_or_default();
    ((Kind::RoleBinding, namespace, name), entry)
}

fn cluster_role_binding(b: ClusterRoleBinding) -> (Key, Entry) {
    let entry = Entry::Binding {
        role: role_key(&b.role_ref.kind, "", &b.role_ref.name),
        subjects: subjects(b.subjects.as_ref(), ""),
    };
    let name = b.metadata.name.unwrap_or_default();
    ((Kind::ClusterRoleBinding, String::new(), name), entry)
}

fn role(r: Role) -> (Key, Entry) {
    let key = (
        Kind::Role,
        r.metadata.namespace.unwrap_or_default(),
        r.metadata.name.unwrap_or_default(),
    );
    (key, Entry::Role(digest(&r.rules)))
}

fn cluster_role(r: ClusterRole) -> (Key, Entry) {
    let key = (
        Kind::ClusterRole,
        String::new(),
        r.metadata.name.unwrap_or_default(),
    );
    (key, Entry::Role(digest(&r.rules)))
}

type Item = (Kind, Result<Event<(Key, Entry)>, watcher::Error>);

/// One kind's watch, as entries.
fn watch<K>(
    client: &kube::Client,
    kind: Kind,
    entry: fn(K) -> (Key, Entry),
) -> impl Stream<Item = Item> + Send + 'static
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .map(move |event| {
            let event = event.map(|e| match e {
                Event::Init => Event::Init,
                Event::InitApply(o) => Event::InitApply(entry(o)),
                Event::InitDone => Event::InitDone,
                Event::Apply(o) => Event::Apply(entry(o)),
                Event::Delete(o) => Event::Delete(entry(o)),
            });
            (kind, event)
        })
}

/// Watches the cluster's RBAC and drops `access`'s answers a change may have altered, until
/// `stop`.
pub async fn forget_on_change(client: kube::Client, access: Arc<Access>, mut stop: Stop) {
    let streams = futures::stream::select_all([
        watch(&client, Kind::RoleBinding, role_binding).boxed(),
        watch(&client, Kind::ClusterRoleBinding, cluster_role_binding).boxed(),
        watch(&client, Kind::Role, role).boxed(),
        watch(&client, Kind::ClusterRole, cluster_role).boxed(),
    ]);
    futures::pin_mut!(streams);
    let mut book = Book::default();
    loop {
        let (kind, event) = tokio::select! {
            () = stop.stopped() => return,
            next = streams.next() => match next {
                Some(item) => item,
                None => return,
            },
        };
        match event {
            Ok(event) => {
                let affected = book.event(kind, event);
                if affected.is_empty() {
                    continue;
                }
                let dropped = access.forget(|id| affected.iter().any(|w| w.covers(id)));
                if dropped > 0 {
                    debug!(
                        ?kind,
                        dropped, "RBAC changed; cached access answers dropped"
                    );
                }
            }
            Err(error) => {
                warn!(?kind, %error, "watching RBAC failed (revoked grants then last until their answers expire); retrying with backoff");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(name: &str) -> Who {
        Who::Account(Identity::new("ns", name))
    }

    fn binding(name: &str, role: &str, subjects: Vec<Who>) -> (Key, Entry) {
        (
            (Kind::RoleBinding, "ns".into(), name.into()),
            Entry::Binding {
                role: (Kind::ClusterRole, String::new(), role.into()),
                subjects,
            },
        )
    }

    fn cluster_role(name: &str, rules: u64) -> (Key, Entry) {
        (
            (Kind::ClusterRole, String::new(), name.into()),
            Entry::Role(rules),
        )
    }

    #[test]
    fn a_binding_that_changes_should_alter_its_subjects_before_and_after() {
        let mut book = Book::default();
        let b = binding("b", "r", vec![account("a")]);
        assert_eq!(
            book.event(Kind::RoleBinding, Event::Apply(b.clone())),
            [account("a")]
        );
        assert!(
            book.event(Kind::RoleBinding, Event::Apply(b.clone()))
                .is_empty(),
            "a replay changes nothing"
        );
        let moved = binding("b", "r", vec![account("c")]);
        assert_eq!(
            book.event(Kind::RoleBinding, Event::Apply(moved.clone())),
            [account("a"), account("c")],
            "the subject that lost the grant and the one that gained it"
        );
        assert_eq!(
            book.event(Kind::RoleBinding, Event::Delete(moved)),
            [account("c")]
        );
    }

    #[test]
    fn a_role_whose_rules_change_should_alter_everyone_bound_to_it() {
        let mut book = Book::default();
        book.event(Kind::ClusterRole, Event::Apply(cluster_role("r", 1)));
        book.event(
            Kind::RoleBinding,
            Event::Apply(binding("b1", "r", vec![account("a")])),
        );
        book.event(
            Kind::RoleBinding,
            Event::Apply(binding("b2", "other", vec![account("x")])),
        );
        assert!(
            book.event(Kind::ClusterRole, Event::Apply(cluster_role("r", 1)))
                .is_empty(),
            "same rules"
        );
        assert_eq!(
            book.event(Kind::ClusterRole, Event::Apply(cluster_role("r", 2))),
            [account("a")]
        );
    }

    #[test]
    fn what_went_while_the_watch_was_down_should_be_seen_at_the_relist() {
        let mut book = Book::default();
        book.event(
            Kind::RoleBinding,
            Event::Apply(binding("kept", "r", vec![account("a")])),
        );
        book.event(
            Kind::RoleBinding,
            Event::Apply(binding("gone", "r", vec![account("b")])),
        );
        book.event(Kind::ClusterRole, Event::Apply(cluster_role("r", 1)));
        assert!(book.event(Kind::RoleBinding, Event::Init).is_empty());
        assert!(
            book.event(
                Kind::RoleBinding,
                Event::InitApply(binding("kept", "r", vec![account("a")]))
            )
            .is_empty()
        );
        assert_eq!(
            book.event(Kind::RoleBinding, Event::InitDone),
            [account("b")],
            "only the binding that went, not the role of another kind"
        );
    }

    #[test]
    fn subjects_should_be_read_as_the_service_accounts_they_name() {
        let subject = |kind: &str, name: &str, namespace: Option<&str>| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.map(str::to_owned),
            api_group: None,
        };
        let who = |s: Subject| Who::of(&s, "home");
        assert_eq!(
            who(subject("ServiceAccount", "p", None)),
            Some(Who::Account(Identity::new("home", "p")))
        );
        assert_eq!(
            who(subject("User", "system:serviceaccount:x:p", None)),
            Some(Who::Account(Identity::new("x", "p")))
        );
        assert_eq!(who(subject("User", "alice", None)), None);
        assert_eq!(
            who(subject("Group", "system:serviceaccounts:x", None)),
            Some(Who::Namespace("x".into()))
        );
        assert_eq!(
            who(subject("Group", "system:authenticated", None)),
            Some(Who::All)
        );
        assert_eq!(who(subject("Group", "devs", None)), None);
        assert!(Who::Namespace("x".into()).covers(&Identity::new("x", "p")));
        assert!(!Who::Namespace("x".into()).covers(&Identity::new("y", "p")));
    }
}
