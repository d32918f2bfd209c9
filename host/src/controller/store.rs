//! The cache of one kind: objects by key, with an index by namespace (for `list`) and one by
//! controller-owner UID (for gathering a parent's children without a scan). Pure data; the
//! informer fills it.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::model::KindRef;
use crate::selector::Selector;

/// Namespace (empty for cluster-scoped objects) and name: the identity of an object of a kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a JSON object.
    pub fn of(object: &Value) -> Self {
        let meta = &object["metadata"];
        Self::new(
            meta["namespace"].as_str().unwrap_or(""),
            meta["name"].as_str().unwrap_or(""),
        )
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A kind's identity across versions: the API server converts between versions of a group, so
/// one cache serves every version a plugin names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKind {
    /// API group, empty for the core group.
    pub group: String,
    /// Kind.
    pub kind: String,
}

impl From<&KindRef> for GroupKind {
    fn from(kind: &KindRef) -> Self {
        Self {
            group: kind.group().to_owned(),
            kind: kind.kind.clone(),
        }
    }
}

/// The cache of one kind and its indexes. Reads are cheap clones of `Arc`s.
#[derive(Default)]
pub struct Store {
    inner: RwLock<Indexed>,
}

#[derive(Default)]
struct Indexed {
    objects: HashMap<ObjectKey, Arc<Value>>,
    by_namespace: HashMap<String, BTreeSet<String>>,
    by_owner: HashMap<String, BTreeSet<ObjectKey>>,
}

/// The UID of the object's controller owner, if it has one.
pub fn controller_uid(object: &Value) -> Option<&str> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?["uid"]
        .as_str()
}

impl Indexed {
    fn unindex(&mut self, key: &ObjectKey, object: &Value) {
        if let Some(names) = self.by_namespace.get_mut(&key.namespace) {
            names.remove(&key.name);
            if names.is_empty() {
                self.by_namespace.remove(&key.namespace);
            }
        }
        if let Some(uid) = controller_uid(object)
            && let Some(keys) = self.by_owner.get_mut(uid)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_owner.remove(uid);
            }
        }
    }
}

impl Store {
    /// One object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.objects.get(&ObjectKey::new(namespace, name)).cloned()
    }

    /// Objects in a namespace (empty: all) whose labels match.
    pub fn list(&self, namespace: &str, selector: &Selector) -> Vec<Arc<Value>> {
        let inner = self.inner.read().expect("store lock poisoned");
        let matching = |o: &&Arc<Value>| selector.matches_object(o);
        if namespace.is_empty() {
            let mut all: Vec<_> = inner.objects.values().filter(matching).cloned().collect();
            all.sort_by_key(|o| ObjectKey::of(o));
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
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<Value>> {
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

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every cached key.
    pub fn keys(&self) -> Vec<ObjectKey> {
        let inner = self.inner.read().expect("store lock poisoned");
        inner.objects.keys().cloned().collect()
    }

    /// Inserts or replaces an object; returns what it replaced.
    pub fn upsert(&self, object: Value) -> (Option<Arc<Value>>, Arc<Value>) {
        let key = ObjectKey::of(&object);
        let object = Arc::new(object);
        let mut inner = self.inner.write().expect("store lock poisoned");
        let old = inner.objects.insert(key.clone(), object.clone());
        if let Some(old) = &old {
            inner.unindex(&key, old);
        }
        inner
            .by_namespace
            .entry(key.namespace.clone())
            .or_default()
            .insert(key.name.clone());
        if let Some(uid) = controller_uid(&object) {
            inner
                .by_owner
                .entry(uid.to_owned())
                .or_default()
                .insert(key);
        }
        (old, object)
    }

    /// Removes an object; returns it if it was cached.
    pub fn remove(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        let mut inner = self.inner.write().expect("store lock poisoned");
        let old = inner.objects.remove(key)?;
        inner.unindex(key, &old);
        Some(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(ns: &str, name: &str, owner: Option<&str>, labels: Value) -> Value {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "labels": labels, "resourceVersion": "1"}});
        if let Some(uid) = owner {
            o["metadata"]["ownerReferences"] =
                json!([{"uid": "other", "controller": false}, {"uid": uid, "controller": true}]);
        }
        o
    }

    #[test]
    fn store_should_index_by_namespace_and_controller_owner() {
        let store = Store::default();
        store.upsert(object("a", "x", Some("p1"), json!({"app": "web"})));
        store.upsert(object("a", "y", Some("p1"), json!({"app": "db"})));
        store.upsert(object("b", "x", Some("p2"), json!({"app": "web"})));
        let names = |v: Vec<Arc<Value>>| -> Vec<String> {
            v.iter().map(|o| ObjectKey::of(o).to_string()).collect()
        };
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
        let (old, _) = store.upsert(object("a", "x", Some("p2"), json!({})));
        assert!(old.is_some());
        assert!(store.controlled_by("p1").is_empty());
        assert_eq!(store.controlled_by("p2").len(), 1);
        store.remove(&ObjectKey::new("a", "x"));
        assert!(store.controlled_by("p2").is_empty());
        assert!(store.list("a", &Selector::default()).is_empty());
        assert!(store.is_empty());
    }
}
