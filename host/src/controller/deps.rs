//! Dependency tracking: what each parent's last reconcile read through `get` and `list`, and,
//! for a changed object, which parents read it. Plugin authors never write watch-mapping code;
//! an object a reconcile looked at wakes that parent when it changes, and no other.
//!
//! A `get` is remembered by exact name, whether or not the object existed (its creation is a
//! change the plugin cares about). A `list` is remembered by namespace and selector, and matches a
//! changed object if the object's labels matched before or after the change, so an object that
//! leaves a selection wakes the parent too.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::cache::{GroupKind, Meta, ObjectKey};
use crate::runtime::Read;
use crate::selector::Selector;

/// The reads of every parent of one controller.
#[derive(Default)]
pub struct Dependencies {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// What each parent read last time, so the next record can replace it.
    by_parent: HashMap<ObjectKey, Vec<Edge>>,
    /// `get` reads: (kind, namespace, name) to the parents that made them.
    gets: HashMap<(GroupKind, ObjectKey), HashSet<ObjectKey>>,
    /// `list` reads, by kind.
    lists: HashMap<GroupKind, HashMap<ObjectKey, Vec<(String, Selector)>>>,
}

#[derive(Clone)]
enum Edge {
    Get(GroupKind, ObjectKey),
    List(GroupKind),
}

impl Dependencies {
    /// Replaces what `parent` depends on with what its latest reconcile read.
    pub fn record(&self, parent: &ObjectKey, reads: &[Read]) {
        let mut inner = self.inner.lock().expect("dependency lock poisoned");
        inner.remove(parent);
        let mut edges = Vec::with_capacity(reads.len());
        for read in reads {
            match read {
                Read::Get {
                    kind,
                    namespace,
                    name,
                } => {
                    let target = (GroupKind::from(kind), ObjectKey::new(namespace, name));
                    inner
                        .gets
                        .entry(target.clone())
                        .or_default()
                        .insert(parent.clone());
                    edges.push(Edge::Get(target.0, target.1));
                }
                Read::List {
                    kind,
                    namespace,
                    selector,
                } => {
                    // The call already parsed it; a selector that no longer parses reads nothing.
                    let Ok(selector) = Selector::parse(selector) else {
                        continue;
                    };
                    let kind = GroupKind::from(kind);
                    inner
                        .lists
                        .entry(kind.clone())
                        .or_default()
                        .entry(parent.clone())
                        .or_default()
                        .push((namespace.clone(), selector));
                    edges.push(Edge::List(kind));
                }
            }
        }
        if !edges.is_empty() {
            inner.by_parent.insert(parent.clone(), edges);
        }
    }

    /// Forgets a parent (it was deleted).
    pub fn forget(&self, parent: &ObjectKey) {
        self.inner
            .lock()
            .expect("dependency lock poisoned")
            .remove(parent);
    }

    /// The parents that read an object (of `kind`) before or after a change. Pass the object
    /// as it was and as it is; either may be absent.
    pub fn readers_of(
        &self,
        kind: &GroupKind,
        old: Option<&Meta>,
        new: Option<&Meta>,
    ) -> HashSet<ObjectKey> {
        let inner = self.inner.lock().expect("dependency lock poisoned");
        let mut parents = HashSet::new();
        for object in [old, new].into_iter().flatten() {
            let key = &object.key;
            if let Some(found) = inner.gets.get(&(kind.clone(), key.clone())) {
                parents.extend(found.iter().cloned());
            }
            if let Some(lists) = inner.lists.get(kind) {
                for (parent, selections) in lists {
                    let selected = selections.iter().any(|(ns, selector)| {
                        (ns.is_empty() || *ns == key.namespace) && object.selected_by(selector)
                    });
                    if selected {
                        parents.insert(parent.clone());
                    }
                }
            }
        }
        parents
    }

    #[cfg(test)]
    /// How many parents have recorded reads.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .expect("dependency lock poisoned")
            .by_parent
            .len()
    }

    #[cfg(test)]
    /// Whether no parent has recorded reads.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn remove(&mut self, parent: &ObjectKey) {
        for edge in self.by_parent.remove(parent).unwrap_or_default() {
            match edge {
                Edge::Get(kind, key) => {
                    let target = (kind, key);
                    if let Some(set) = self.gets.get_mut(&target) {
                        set.remove(parent);
                        if set.is_empty() {
                            self.gets.remove(&target);
                        }
                    }
                }
                Edge::List(kind) => {
                    if let Some(lists) = self.lists.get_mut(&kind) {
                        lists.remove(parent);
                        if lists.is_empty() {
                            self.lists.remove(&kind);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KindRef;
    use serde_json::{Value, json};

    fn cm() -> KindRef {
        KindRef::new("v1", "ConfigMap")
    }

    fn gk() -> GroupKind {
        GroupKind::from(&cm())
    }

    fn get(ns: &str, name: &str) -> Read {
        Read::Get {
            kind: cm(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn object(ns: &str, name: &str, labels: Value) -> Meta {
        Meta::of(&json!({"metadata": {"namespace": ns, "name": name, "labels": labels}}))
    }

    fn keys(names: &[&str]) -> HashSet<ObjectKey> {
        names.iter().map(|n| ObjectKey::new("a", *n)).collect()
    }

    #[test]
    fn a_get_should_wake_only_the_parents_that_read_that_object() {
        let deps = Dependencies::default();
        deps.record(&ObjectKey::new("a", "p1"), &[get("a", "src")]);
        deps.record(&ObjectKey::new("a", "p2"), &[get("a", "other")]);
        let changed = object("a", "src", json!({}));
        assert_eq!(deps.readers_of(&gk(), None, Some(&changed)), keys(&["p1"]));
        let elsewhere = object("b", "src", json!({}));
        assert!(deps.readers_of(&gk(), None, Some(&elsewhere)).is_empty());
        let other_kind = GroupKind::from(&KindRef::new("v1", "Secret"));
        assert!(
            deps.readers_of(&other_kind, None, Some(&changed))
                .is_empty()
        );
    }

    #[test]
    fn a_list_should_wake_on_objects_entering_or_leaving_the_selection() {
        let deps = Dependencies::default();
        let list = Read::List {
            kind: cm(),
            namespace: "a".into(),
            selector: "tier=web".into(),
        };
        deps.record(&ObjectKey::new("a", "p"), &[list]);
        let web = object("a", "x", json!({"tier": "web"}));
        let db = object("a", "x", json!({"tier": "db"}));
        assert_eq!(deps.readers_of(&gk(), Some(&db), Some(&web)), keys(&["p"]));
        assert_eq!(deps.readers_of(&gk(), Some(&web), Some(&db)), keys(&["p"]));
        assert!(deps.readers_of(&gk(), Some(&db), Some(&db)).is_empty());
    }

    #[test]
    fn a_new_record_should_replace_the_old_and_forget_should_drop_it() {
        let deps = Dependencies::default();
        let parent = ObjectKey::new("a", "p");
        deps.record(&parent, &[get("a", "old")]);
        deps.record(&parent, &[get("a", "new")]);
        let old = object("a", "old", json!({}));
        assert!(deps.readers_of(&gk(), None, Some(&old)).is_empty());
        let new = object("a", "new", json!({}));
        assert_eq!(deps.readers_of(&gk(), None, Some(&new)), keys(&["p"]));
        deps.forget(&parent);
        assert!(deps.readers_of(&gk(), None, Some(&new)).is_empty());
        assert!(deps.is_empty());
    }
}
