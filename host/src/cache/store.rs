//! The cache of one kind: objects by key, with an index by namespace (for `list`) and one by
//! controller-owner UID (for gathering a parent's children without a scan). Pure data; only the
//! informer writes it (the write methods are private to the cache module).
//!
//! Objects are kept as [`Cached`]: JSON text plus the parsed fields the indexes need.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub use super::object::{Cached, Meta};
pub use crate::keys::{GroupKind, ObjectKey};
use crate::selector::Selector;

/// The cache of one kind and its indexes. Reads are cheap clones of `Arc`s.
#[derive(Default)]
pub struct Store {
    inner: RwLock<Indexed>,
}

#[derive(Default)]
struct Indexed {
    objects: HashMap<ObjectKey, Arc<Cached>>,
    by_namespace: HashMap<String, BTreeSet<String>>,
    by_owner: HashMap<String, BTreeSet<ObjectKey>>,
    /// Keys deleted since the last full list, with the resourceVersion of the deletion. The
    /// host caches its own writes' answers, and one can arrive after the watch reported the
    /// object deleted (someone deleted a child while the host was still applying the rest of
    /// its plan); without the tombstone that older answer would bring the object back as a
    /// ghost, and the planner would never recreate it.
    deleted: HashMap<ObjectKey, (String, Instant)>,
}

/// How long a tombstone is kept. The race it guards is one reconcile's apply (the answer to
/// an early write is cached only after the last write of the plan), which takes seconds; five
/// minutes also covers a slow API server. Without a limit, tombstones would pile up between
/// relists, which are rare, at the rate objects are deleted.
const TOMBSTONE_TTL: Duration = Duration::from_secs(300);

/// Tombstones are pruned of expired entries once there are more than this many.
const TOMBSTONE_PRUNE_AT: usize = 1024;

impl Indexed {
    fn index(&mut self, meta: &Meta) {
        let key = &meta.key;
        self.by_namespace
            .entry(key.namespace.clone())
            .or_default()
            .insert(key.name.clone());
        if let Some(owner) = &meta.controller {
            self.by_owner
                .entry(owner.uid.clone())
                .or_default()
                .insert(key.clone());
        }
    }

    fn unindex(&mut self, meta: &Meta) {
        let key = &meta.key;
        if let Some(names) = self.by_namespace.get_mut(&key.namespace) {
            names.remove(&key.name);
            if names.is_empty() {
                self.by_namespace.remove(&key.namespace);
            }
        }
        if let Some(owner) = &meta.controller
            && let Some(keys) = self.by_owner.get_mut(&owner.uid)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_owner.remove(&owner.uid);
            }
        }
    }
}

impl Store {
    /// One object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Cached>> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.objects.get(&ObjectKey::new(namespace, name)).cloned()
    }

    /// Objects in a namespace (empty: all) whose labels match, ordered by key.
    pub fn list(&self, namespace: &str, selector: &Selector) -> Vec<Arc<Cached>> {
        let inner = self.inner.read().expect("store lock poisoned");
        let matching = |o: &&Arc<Cached>| o.meta.selected_by(selector);
        if namespace.is_empty() {
            let mut all: Vec<_> = inner.objects.values().filter(matching).cloned().collect();
            all.sort_by(|a, b| a.meta.key.cmp(&b.meta.key));
            return all;
        }
        let Some(names) = inner.by_namespace.get(namespace) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|n| inner.objects.get(&ObjectKey::new(namespace, n.as_str())))
            .filter(matching)
            .cloned()
            .collect()
    }

    /// Objects whose controller ownerReference has this UID, ordered by key.
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<Cached>> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.by_owner.get(uid).map_or_else(Vec::new, |keys| {
            keys.iter()
                .filter_map(|k| inner.objects.get(k).cloned())
                .collect()
        })
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .expect("store lock poisoned")
            .objects
            .len()
    }

    /// How many of the cached objects are stubs (a walk of them all).
    pub fn stubs(&self) -> usize {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.objects.values().filter(|o| !o.is_whole()).count()
    }

    #[cfg(test)]
    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every cached key.
    pub fn keys(&self) -> Vec<ObjectKey> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.objects.keys().cloned().collect()
    }

    /// The cached keys in `namespace` (empty: every key), from the namespace index.
    pub fn keys_in(&self, namespace: &str) -> Vec<ObjectKey> {
        if namespace.is_empty() {
            return self.keys();
        }
        let inner = self.inner.read().expect("store lock poisoned");
        inner
            .by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .map(|name| ObjectKey::new(namespace, name.as_str()))
            .collect()
    }

    /// Inserts or replaces an object, unless the cache holds the same or a newer version of it
    /// or saw it deleted at a newer version. Returns what it replaced and what it inserted, or
    /// `None` if it kept what it had. The comparison and the insert are one step, so a watch
    /// event and the answer to a write racing it cannot leave the older one cached.
    pub(super) fn upsert(&self, object: Cached) -> Option<(Option<Arc<Cached>>, Arc<Cached>)> {
        let object = Arc::new(object);
        let key = object.meta.key.clone();
        let mut inner = self.inner.write().expect("store lock poisoned");
        let known = match inner.objects.get(&key) {
            Some(cached) => Some(cached.meta.resource_version.as_str()),
            None => inner.deleted.get(&key).map(|(v, _)| v.as_str()),
        };
        if known.is_some_and(|known| !is_newer(&object.meta.resource_version, known)) {
            // A replay of what a stub stands for, now kept whole (a relist after the replica
            // gained the owner): the text is taken, and handlers have nothing to hear.
            if let Some(stub) = inner.objects.get_mut(&key)
                && !stub.is_whole()
                && object.is_whole()
                && stub.meta.resource_version == object.meta.resource_version
            {
                *stub = object;
            }
            return None;
        }
        inner.deleted.remove(&key);
        let old = inner.objects.insert(key.clone(), object.clone());
        if let Some(old) = &old {
            inner.unindex(&old.meta);
        }
        inner.index(&object.meta);
        Some((old, object))
    }

    /// Caches a whole object the host fetched because the cache held only a stub of it, and
    /// returns what a reader should use: this object, or a newer whole version the watch
    /// cached meanwhile. Handlers are not told: nothing changed but what the cache keeps. An
    /// object the watch has since seen in a newer version, or deleted, is returned as fetched
    /// and not cached (the change that made it stale has queued its owner again).
    pub(super) fn hydrate(&self, object: Cached) -> Arc<Cached> {
        let object = Arc::new(object);
        let key = object.meta.key.clone();
        let mut inner = self.inner.write().expect("store lock poisoned");
        match inner.objects.get(&key) {
            Some(cached) if cached.is_whole() => {
                if !is_newer(&object.meta.resource_version, &cached.meta.resource_version) {
                    return cached.clone();
                }
            }
            Some(stub) => {
                if is_newer(&stub.meta.resource_version, &object.meta.resource_version) {
                    return object;
                }
            }
            None => return object,
        }
        let old = inner.objects.insert(key.clone(), object.clone());
        if let Some(old) = &old {
            inner.unindex(&old.meta);
        }
        inner.index(&object.meta);
        object
    }

    /// Turns every whole object `keep` refuses into a stub; returns how many it turned.
    pub(super) fn shrink(&self, keep: impl Fn(&Meta) -> bool) -> usize {
        let mut inner = self.inner.write().expect("store lock poisoned");
        let mut shrunk = 0;
        for object in inner.objects.values_mut() {
            if object.is_whole() && !keep(&object.meta) {
                *object = Arc::new(Cached::stub(object.meta.clone()));
                shrunk += 1;
            }
        }
        shrunk
    }

    /// Removes an object; returns it if it was cached. `version`, the resourceVersion of the
    /// deletion when the watch reported one, is remembered until [`Store::forget_deleted`].
    pub(super) fn remove(&self, key: &ObjectKey, version: Option<&str>) -> Option<Arc<Cached>> {
        let mut inner = self.inner.write().expect("store lock poisoned");
        if let Some(version) = version {
            let now = Instant::now();
            if inner.deleted.len() >= TOMBSTONE_PRUNE_AT {
                inner
                    .deleted
                    .retain(|_, (_, at)| now.duration_since(*at) < TOMBSTONE_TTL);
            }
            inner.deleted.insert(key.clone(), (version.to_owned(), now));
        }
        let old = inner.objects.remove(key)?;
        inner.unindex(&old.meta);
        Some(old)
    }

    /// Drops the tombstones: a full list has just made the cache agree with the API server.
    pub(super) fn forget_deleted(&self) {
        self.inner
            .write()
            .expect("store lock poisoned")
            .deleted
            .clear();
    }
}

/// Whether resourceVersion `incoming` is newer than `known`. resourceVersions are opaque
/// strings to clients, but the API server serves etcd revisions, which grow; when either does
/// not parse as a number, the incoming version wins, as it would without the comparison.
fn is_newer(incoming: &str, known: &str) -> bool {
    if incoming == known {
        return false;
    }
    match (incoming.parse::<u64>(), known.parse::<u64>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn object(ns: &str, name: &str, owner: Option<&str>, labels: Value) -> Cached {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "labels": labels, "resourceVersion": "1"}});
        if let Some(uid) = owner {
            o["metadata"]["ownerReferences"] =
                json!([{"uid": "other", "controller": false}, {"uid": uid, "controller": true}]);
        }
        Cached::new(o)
    }

    fn names(v: Vec<Arc<Cached>>) -> Vec<String> {
        v.iter().map(|o| o.meta.key.to_string()).collect()
    }

    #[test]
    fn store_should_index_by_namespace_and_controller_owner() {
        let store = Store::default();
        store.upsert(object("a", "x", Some("p1"), json!({"app": "web"})));
        store.upsert(object("a", "y", Some("p1"), json!({"app": "db"})));
        store.upsert(object("b", "x", Some("p2"), json!({"app": "web"})));
        let web = Selector::parse("app=web").unwrap();
        assert_eq!(names(store.list("a", &web)), ["a/x"]);
        assert_eq!(names(store.list("", &web)), ["a/x", "b/x"]);
        assert_eq!(names(store.controlled_by("p1")), ["a/x", "a/y"]);
        assert!(
            store.controlled_by("other").is_empty(),
            "only controller owners are indexed"
        );
    }

    #[test]
    fn store_should_move_index_entries_on_update_and_drop_them_on_remove() {
        let store = Store::default();
        store.upsert(object("a", "x", Some("p1"), json!({})));
        let mut moved = object("a", "x", Some("p2"), json!({}));
        moved.meta.resource_version = "2".into();
        let (old, _) = store.upsert(moved).expect("a newer version");
        assert!(old.is_some());
        assert!(store.controlled_by("p1").is_empty());
        assert_eq!(store.controlled_by("p2").len(), 1);
        store.remove(&ObjectKey::new("a", "x"), None);
        assert!(store.controlled_by("p2").is_empty());
        assert!(store.list("a", &Selector::default()).is_empty());
        assert!(store.is_empty());
    }

    fn stub_at(version: &str) -> Cached {
        Cached::stub(at(version).meta)
    }

    #[test]
    fn a_stub_should_answer_the_indexes_and_give_way_to_its_whole_object() {
        let store = Store::default();
        let mut child = object("a", "x", Some("p1"), json!({"app": "web"}));
        child.meta.resource_version = "5".into();
        store.upsert(Cached::stub(child.meta.clone()));
        let stub = store.get("a", "x").expect("cached");
        assert!(!stub.is_whole());
        assert_eq!(names(store.controlled_by("p1")), ["a/x"]);
        assert_eq!(
            names(store.list("a", &Selector::parse("app=web").unwrap())),
            ["a/x"]
        );

        assert!(
            store.upsert(child).is_none(),
            "the same version, whole: no change to hear of"
        );
        assert!(store.get("a", "x").unwrap().is_whole(), "but its text kept");
    }

    #[test]
    fn hydrate_should_fill_a_stub_unless_the_cache_knows_a_newer_version() {
        let store = Store::default();
        store.upsert(stub_at("5"));
        let fetched = store.hydrate(at("5"));
        assert!(fetched.is_whole() && store.get("a", "x").unwrap().is_whole());

        store.upsert(stub_at("7"));
        let stale = store.hydrate(at("6"));
        assert_eq!(stale.meta.resource_version, "6", "returned as fetched");
        assert!(
            !store.get("a", "x").unwrap().is_whole(),
            "not cached over the newer stub"
        );

        store.upsert(at("8"));
        let older = store.hydrate(at("7"));
        assert_eq!(
            older.meta.resource_version, "8",
            "the newer whole version the watch cached"
        );
    }

    #[test]
    fn shrink_should_stub_only_what_is_not_kept() {
        let store = Store::default();
        store.upsert(object("a", "x", Some("p1"), json!({})));
        store.upsert(object("a", "y", Some("p2"), json!({})));
        let shrunk = store.shrink(|m| m.controller.as_ref().is_some_and(|o| o.uid == "p1"));
        assert_eq!(shrunk, 1);
        assert!(store.get("a", "x").unwrap().is_whole());
        assert!(!store.get("a", "y").unwrap().is_whole());
        assert_eq!(names(store.controlled_by("p2")), ["a/y"], "still indexed");
        assert_eq!(store.shrink(|_| false), 1, "a stub is not counted again");
    }

    fn at(version: &str) -> Cached {
        let mut o = object("a", "x", None, json!({}));
        o.meta.resource_version = version.into();
        o
    }

    #[test]
    fn store_should_keep_the_newest_version_and_not_resurrect_a_deleted_object() {
        let store = Store::default();
        let key = ObjectKey::new("a", "x");
        assert!(store.upsert(at("5")).is_some());
        assert!(store.upsert(at("5")).is_none(), "a replay");
        assert!(store.upsert(at("4")).is_none(), "an older version");
        assert!(store.upsert(at("6")).is_some());
        store.remove(&key, Some("7"));
        assert!(
            store.upsert(at("6")).is_none(),
            "an answer that raced the delete"
        );
        assert!(store.get("a", "x").is_none());
        assert!(
            store.upsert(at("8")).is_some(),
            "created again after the delete"
        );
        store.remove(&key, Some("9"));
        store.forget_deleted();
        assert!(
            store.upsert(at("6")).is_some(),
            "a full list is the truth again"
        );
        let mut unparsed = at("x1");
        unparsed.meta.resource_version = "not-a-number".into();
        assert!(
            store.upsert(unparsed).is_some(),
            "opaque versions: the incoming one wins"
        );
    }
}
