//! The cache of one kind: objects ordered by key (a namespace's objects are one range, for
//! `list`), with an index by controller-owner UID (for gathering a parent's children without a
//! scan). Pure data; only the informer writes it (the write methods are private to the cache
//! module).
//!
//! Objects are kept as [`Cached`]: JSON text plus the parsed fields the indexes need. Each is
//! held once, in an `Arc` the indexes share, with its key inside it: the indexes add a pointer
//! per object, not copies of its namespace and name (at 10,000 parents, copies of keys in
//! hash maps and B-tree sets whose nodes hold eleven keys each were about 700 bytes per object).

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub use super::object::{Cached, Dictionary, Meta};
pub use crate::keys::{GroupKind, ObjectKey};
use crate::selector::Selector;

/// The cache of one kind and its indexes. Reads are cheap clones of `Arc`s.
#[derive(Default)]
pub struct Store {
    inner: RwLock<Indexed>,
    /// What this kind's objects are compressed against.
    dictionary: Dictionary,
}

/// A cached object as the ordered set holds it: compared, and looked up, by its key.
#[derive(Clone)]
struct Entry(Arc<Cached>);

impl Borrow<ObjectKey> for Entry {
    fn borrow(&self) -> &ObjectKey {
        &self.0.meta.key
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.meta.key == other.0.meta.key
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.meta.key.cmp(&other.0.meta.key)
    }
}

#[derive(Default)]
struct Indexed {
    /// Every object, ordered by key: by namespace, then name.
    objects: BTreeSet<Entry>,
    /// The objects each controller owns, by the owner's UID, ordered by key. A vector: a
    /// parent has a handful of children, and a B-tree node is sized for eleven.
    by_owner: HashMap<String, Vec<Arc<Cached>>>,
    /// Keys deleted since the last full list, with the resourceVersion of the deletion. The
    /// host caches its own writes' answers, and one can arrive after the watch reported the
    /// object deleted (someone deleted a child while the host was still applying the rest of
    /// its plan); without the tombstone that older answer would bring the object back as a
    /// ghost, and the planner would never recreate it.
    deleted: HashMap<ObjectKey, (String, Instant)>,
    /// How many of `objects` are stubs.
    stubs: usize,
    /// Bumped whenever a key comes or goes (not when an object is replaced): what a count
    /// over the keys is kept against, so a ring member need not walk every parent each round.
    key_set: u64,
    /// Bumped whenever an object is cached, replaced or removed: what a figure read from the
    /// objects is kept against, so the standing count need not walk every parent at rest.
    changes: u64,
}

/// How long a tombstone is kept. The race it guards is one reconcile's apply (the answer to
/// an early write is cached only after the last write of the plan), which takes seconds; five
/// minutes also covers a slow API server. Without a limit, tombstones would pile up between
/// relists, which are rare, at the rate objects are deleted.
const TOMBSTONE_TTL: Duration = Duration::from_secs(300);

/// Tombstones are pruned of expired entries once there are more than this many.
const TOMBSTONE_PRUNE_AT: usize = 1024;

impl Indexed {
    fn get(&self, key: &ObjectKey) -> Option<&Arc<Cached>> {
        self.objects.get(key).map(|e| &e.0)
    }

    /// The objects of `namespace`, in key order.
    fn in_namespace<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Arc<Cached>> {
        let start = ObjectKey::new(namespace, "");
        self.objects
            .range::<ObjectKey, _>((Bound::Included(&start), Bound::Unbounded))
            .map(|e| &e.0)
            .take_while(move |o| o.meta.key.namespace == namespace)
    }

    /// Caches `object` in place of what it replaces, in every index; returns what it replaced.
    fn insert(&mut self, object: Arc<Cached>) -> Option<Arc<Cached>> {
        let stub = !object.is_whole();
        self.changes += 1;
        let old = self.objects.replace(Entry(object.clone())).map(|e| e.0);
        match &old {
            Some(old) => self.unindex(old),
            None => self.key_set += 1,
        }
        self.stubs += usize::from(stub);
        if let Some(owner) = object.meta.controller() {
            let owned = self.by_owner.entry(owner.uid.to_owned()).or_default();
            let at = owned
                .binary_search_by(|o| o.meta.key.cmp(&object.meta.key))
                .unwrap_or_else(|at| at);
            owned.insert(at, object);
        }
        old
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Arc<Cached>> {
        let old = self.objects.take(key)?.0;
        self.unindex(&old);
        self.key_set += 1;
        self.changes += 1;
        Some(old)
    }

    /// Takes `old` out of the owner index and the stub count.
    fn unindex(&mut self, old: &Cached) {
        self.stubs -= usize::from(!old.is_whole());
        if let Some(owner) = old.meta.controller()
            && let Some(owned) = self.by_owner.get_mut(owner.uid)
        {
            owned.retain(|o| o.meta.key != old.meta.key);
            if owned.is_empty() {
                self.by_owner.remove(owner.uid);
            }
        }
    }
}

impl Store {
    /// `object` as this store keeps it, compressed against the kind's dictionary.
    pub(super) fn cached(&self, meta: Meta, object: serde_json::Value) -> Cached {
        Cached::with_meta(meta, object, &self.dictionary)
    }

    /// One object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Cached>> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.get(&ObjectKey::new(namespace, name)).cloned()
    }

    /// Objects in a namespace (empty: all) whose labels match, ordered by key.
    pub fn list(&self, namespace: &str, selector: &Selector) -> Vec<Arc<Cached>> {
        let inner = self.inner.read().expect("store lock poisoned");
        let matching = |o: &&Arc<Cached>| o.meta.selected_by(selector);
        if namespace.is_empty() {
            return inner
                .objects
                .iter()
                .map(|e| &e.0)
                .filter(matching)
                .cloned()
                .collect();
        }
        inner
            .in_namespace(namespace)
            .filter(matching)
            .cloned()
            .collect()
    }

    /// Objects whose controller ownerReference has this UID, ordered by key.
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<Cached>> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.by_owner.get(uid).cloned().unwrap_or_default()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .expect("store lock poisoned")
            .objects
            .len()
    }

    /// How many of the cached objects are stubs.
    pub fn stubs(&self) -> usize {
        self.inner.read().expect("store lock poisoned").stubs
    }

    /// A number that changes whenever a key is cached or removed, and only then: a count over
    /// the keys taken at one value holds for as long as it stays.
    pub fn key_set(&self) -> u64 {
        self.inner.read().expect("store lock poisoned").key_set
    }

    /// A number that changes whenever an object is cached, replaced or removed: what is read
    /// from the objects at one value holds for as long as it stays.
    pub fn changes(&self) -> u64 {
        self.inner.read().expect("store lock poisoned").changes
    }

    /// How many cached keys `counted` accepts, without copying them out.
    pub fn count_keys(&self, counted: impl Fn(&ObjectKey) -> bool) -> usize {
        let inner = self.inner.read().expect("store lock poisoned");
        inner
            .objects
            .iter()
            .filter(|e| counted(&e.0.meta.key))
            .count()
    }

    #[cfg(test)]
    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every cached key.
    pub fn keys(&self) -> Vec<ObjectKey> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.objects.iter().map(|e| e.0.meta.key.clone()).collect()
    }

    /// The cached keys in `namespace` (empty: every key), in key order.
    pub fn keys_in(&self, namespace: &str) -> Vec<ObjectKey> {
        if namespace.is_empty() {
            return self.keys();
        }
        let inner = self.inner.read().expect("store lock poisoned");
        inner
            .in_namespace(namespace)
            .map(|o| o.meta.key.clone())
            .collect()
    }

    /// Inserts or replaces an object, unless the cache holds the same or a newer version of it
    /// or saw it deleted at a newer version. Returns what it replaced and what it inserted, or
    /// `None` if it kept what it had. The comparison and the insert are one step, so a watch
    /// event and the answer to a write racing it cannot leave the older one cached.
    pub(super) fn upsert(&self, object: Cached) -> Option<(Option<Arc<Cached>>, Arc<Cached>)> {
        let object = Arc::new(object);
        let key = &object.meta.key;
        let mut inner = self.inner.write().expect("store lock poisoned");
        let known = match inner.get(key) {
            Some(cached) => Some(cached.meta.resource_version()),
            None => inner.deleted.get(key).map(|(v, _)| v.as_str()),
        };
        if known.is_some_and(|known| !is_newer(object.meta.resource_version(), known)) {
            // A replay of what a stub stands for, now kept whole (a relist after the replica
            // gained the owner): the text is taken, and handlers have nothing to hear.
            if inner.get(key).is_some_and(|stub| {
                !stub.is_whole()
                    && object.is_whole()
                    && stub.meta.resource_version() == object.meta.resource_version()
            }) {
                inner.insert(object);
            }
            return None;
        }
        inner.deleted.remove(key);
        let old = inner.insert(object.clone());
        Some((old, object))
    }

    /// Caches a whole object the host fetched because the cache held only a stub of it, and
    /// returns what a reader should use: this object, or a newer whole version the watch
    /// cached meanwhile. Handlers are not told: nothing changed but what the cache keeps. An
    /// object the watch has since seen in a newer version, or deleted, is returned as fetched
    /// and not cached (the change that made it stale has queued its owner again).
    pub(super) fn hydrate(&self, object: Cached) -> Arc<Cached> {
        let object = Arc::new(object);
        let mut inner = self.inner.write().expect("store lock poisoned");
        match inner.get(&object.meta.key) {
            Some(cached) if cached.is_whole() => {
                if !is_newer(
                    object.meta.resource_version(),
                    cached.meta.resource_version(),
                ) {
                    return cached.clone();
                }
            }
            Some(stub) => {
                if is_newer(stub.meta.resource_version(), object.meta.resource_version()) {
                    return object;
                }
            }
            None => return object,
        }
        inner.insert(object.clone());
        object
    }

    /// The stubs `keep` accepts: what a sieve now keeps but the cache holds only a stub of.
    pub(super) fn stubs_kept(&self, keep: impl Fn(&Meta) -> bool) -> Vec<Arc<Cached>> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner
            .objects
            .iter()
            .filter(|e| !e.0.is_whole() && keep(&e.0.meta))
            .map(|e| e.0.clone())
            .collect()
    }

    /// Turns every whole object `keep` refuses into a stub; returns how many it turned.
    pub(super) fn shrink(&self, keep: impl Fn(&Meta) -> bool) -> usize {
        let mut inner = self.inner.write().expect("store lock poisoned");
        let given_up: Vec<Arc<Cached>> = inner
            .objects
            .iter()
            .filter(|e| e.0.is_whole() && !keep(&e.0.meta))
            .map(|e| e.0.clone())
            .collect();
        for object in &given_up {
            inner.insert(Arc::new(Cached::stub(object.meta.clone())));
        }
        given_up.len()
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
        inner.remove(key)
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
    fn a_namespace_should_list_only_its_own_objects_in_key_order() {
        let store = Store::default();
        for (ns, name) in [("ab", "a"), ("a", "z"), ("b", "a"), ("a", "b"), ("", "c")] {
            store.upsert(object(ns, name, None, json!({})));
        }
        let all = Selector::default();
        assert_eq!(names(store.list("a", &all)), ["a/b", "a/z"]);
        assert_eq!(names(store.list("ab", &all)), ["ab/a"]);
        assert!(store.list("c", &all).is_empty());
        assert_eq!(
            names(store.list("", &all)),
            ["c", "a/b", "a/z", "ab/a", "b/a"]
        );
        assert_eq!(
            store.keys_in("b"),
            [ObjectKey::new("b", "a")],
            "keys from the same order"
        );
    }

    #[test]
    fn store_should_move_index_entries_on_update_and_drop_them_on_remove() {
        let store = Store::default();
        store.upsert(object("a", "x", Some("p1"), json!({})));
        let mut moved = object("a", "x", Some("p2"), json!({}));
        moved.meta = moved.meta.with_resource_version("2");
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
        child.meta = child.meta.with_resource_version("5");
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
        assert_eq!(stale.meta.resource_version(), "6", "returned as fetched");
        assert!(
            !store.get("a", "x").unwrap().is_whole(),
            "not cached over the newer stub"
        );

        store.upsert(at("8"));
        let older = store.hydrate(at("7"));
        assert_eq!(
            older.meta.resource_version(),
            "8",
            "the newer whole version the watch cached"
        );
    }

    #[test]
    fn shrink_should_stub_only_what_is_not_kept() {
        let store = Store::default();
        store.upsert(object("a", "x", Some("p1"), json!({})));
        store.upsert(object("a", "y", Some("p2"), json!({})));
        let shrunk = store.shrink(|m| m.controller().is_some_and(|o| o.uid == "p1"));
        assert_eq!(shrunk, 1);
        assert!(store.get("a", "x").unwrap().is_whole());
        assert!(!store.get("a", "y").unwrap().is_whole());
        assert_eq!(names(store.controlled_by("p2")), ["a/y"], "still indexed");
        assert_eq!(store.shrink(|_| false), 1, "a stub is not counted again");
        let kept = store.stubs_kept(|m| m.controller().is_some_and(|o| o.uid == "p2"));
        assert_eq!(names(kept), ["a/y"], "the stub kept again, not the whole x");
        assert!(store.stubs_kept(|_| false).is_empty());
    }

    #[test]
    fn stub_count_key_set_and_changes_should_follow_every_way_objects_come_and_go() {
        let store = Store::default();
        let stubs_by_walk = |store: &Store| {
            store
                .list("", &Selector::default())
                .iter()
                .filter(|o| !o.is_whole())
                .count()
        };
        let start = store.key_set();
        store.upsert(stub_at("5"));
        store.upsert(object("a", "y", Some("p2"), json!({})));
        let two = store.key_set();
        assert_ne!(two, start, "keys came");
        assert_eq!((store.stubs(), stubs_by_walk(&store)), (1, 1));

        store.hydrate(at("5"));
        assert_eq!((store.stubs(), stubs_by_walk(&store)), (0, 0), "filled");
        store.shrink(|_| false);
        assert_eq!(
            (store.stubs(), stubs_by_walk(&store)),
            (2, 2),
            "both given up"
        );
        let changes = store.changes();
        store.upsert(at("6"));
        assert_eq!(store.stubs(), 1, "a newer version, whole");
        assert_eq!(store.key_set(), two, "no key came or went");
        assert_ne!(store.changes(), changes, "an object was replaced");
        let changes = store.changes();
        store.upsert(at("6"));
        assert_eq!(
            store.changes(),
            changes,
            "the same version again: nothing cached"
        );
        assert_eq!(store.count_keys(|k| k.name == "y"), 1);

        store.remove(&ObjectKey::new("a", "y"), Some("7"));
        assert_eq!(
            (store.stubs(), stubs_by_walk(&store)),
            (0, 0),
            "the stub removed"
        );
        assert_ne!(store.key_set(), two, "a key went");
        assert_ne!(store.changes(), changes, "an object went");
        assert_eq!(store.count_keys(|_| true), 1);
    }

    fn at(version: &str) -> Cached {
        let mut o = object("a", "x", None, json!({}));
        o.meta = o.meta.with_resource_version(version);
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
        unparsed.meta = unparsed.meta.with_resource_version("not-a-number");
        assert!(
            store.upsert(unparsed).is_some(),
            "opaque versions: the incoming one wins"
        );
    }
}
