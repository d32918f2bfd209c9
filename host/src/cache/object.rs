//! One cached object: its compact JSON text plus the few fields the indexes, the change
//! handlers and dependency tracking need, parsed once ([`Meta`]).
//!
//! Not a `serde_json::Value`: a `Value` costs about ten times its text (measured: a Deployment
//! as the API server returns it is 1.9 KB of JSON and 20 KB as a `Value`, a Service 1.3 KB and
//! 12 KB), and the cache is most of the host's memory. Plugins receive JSON text anyway, and a
//! reconcile parses only the parent and children it plans for.
//!
//! The text is kept LZ4-compressed against a dictionary of its kind ([`Dictionary`]): objects
//! of one kind share most of their text (keys, structure, the values a template repeats), so
//! against an earlier object of the kind a Deployment of about 900 bytes keeps a few hundred.
//! Reading it back costs a decompression, well under a microsecond a kilobyte, beside the
//! JSON parse every reader does anyway.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::store::ObjectKey;
use crate::selector::Selector;

/// What the host needs to know of a cached object without parsing its JSON.
///
/// Its strings (the UID, the resourceVersion, the controller ownerReference's fields, each
/// label's key and value) are held in one allocation rather than one each: the cache keeps one
/// `Meta` per object, and a dozen small blocks an object cost more than their text in the
/// allocator's headers and, worse, in pages that one long-lived block keeps from being given
/// back (docs/BENCHMARKS.md, "Memory per cached object").
#[derive(Clone, PartialEq, Eq)]
pub struct Meta {
    /// Namespace and name.
    pub key: ObjectKey,
    /// `metadata.generation` (0 for kinds without one).
    pub generation: i64,
    /// The strings, one after another: the UID, the resourceVersion, then the controller's
    /// apiVersion, kind, name and UID if it has one, then each label's key and value, sorted
    /// by key.
    strings: Box<str>,
    /// Where each of `strings` ends.
    ends: Box<[u32]>,
    /// Whether the object has a controller ownerReference (its four strings follow the
    /// resourceVersion).
    controlled: bool,
}

/// A controller ownerReference, as a cached object's [`Meta`] holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner<'a> {
    /// `apiVersion` of the owner.
    pub api_version: &'a str,
    /// `kind` of the owner.
    pub kind: &'a str,
    /// `name` of the owner (in the object's namespace, or cluster-scoped).
    pub name: &'a str,
    /// `uid` of the owner.
    pub uid: &'a str,
}

/// Where the strings of [`Meta`] start: the UID and resourceVersion come first.
const FIXED: usize = 2;
/// The controller's strings, when there is one.
const OWNER: usize = 4;

impl Meta {
    /// The fields of a JSON object.
    pub fn of(object: &Value) -> Self {
        Self::of_metadata(&object["metadata"])
    }

    /// The fields of an object's `metadata`.
    pub fn of_metadata(meta: &Value) -> Self {
        fn text(v: &Value) -> &str {
            v.as_str().unwrap_or("")
        }
        let mut labels: Vec<(&str, &str)> = meta["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                    .collect()
            })
            .unwrap_or_default();
        labels.sort_unstable();
        let controller = meta["ownerReferences"]
            .as_array()
            .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
            .map(|r| Owner {
                api_version: text(&r["apiVersion"]),
                kind: text(&r["kind"]),
                name: text(&r["name"]),
                uid: text(&r["uid"]),
            });
        Self::new(
            ObjectKey::new(text(&meta["namespace"]), text(&meta["name"])),
            meta["generation"].as_i64().unwrap_or(0),
            [text(&meta["uid"]), text(&meta["resourceVersion"])],
            controller,
            &labels,
        )
    }

    /// A `Meta` from its parts; `labels` sorted by key.
    fn new(
        key: ObjectKey,
        generation: i64,
        [uid, resource_version]: [&str; FIXED],
        controller: Option<Owner<'_>>,
        labels: &[(&str, &str)],
    ) -> Self {
        let owner = controller.map(|o| [o.api_version, o.kind, o.name, o.uid]);
        let all = [uid, resource_version]
            .into_iter()
            .chain(owner.into_iter().flatten())
            .chain(labels.iter().flat_map(|&(k, v)| [k, v]));
        // Both sized exactly, so that neither moves when boxed.
        let mut strings = String::with_capacity(all.clone().map(str::len).sum());
        let owner_strings = if controller.is_some() { OWNER } else { 0 };
        let mut ends = Vec::with_capacity(FIXED + owner_strings + 2 * labels.len());
        for s in all {
            strings.push_str(s);
            // The API server bounds an object at 1.5 MiB, far below 4 GiB.
            ends.push(u32::try_from(strings.len()).unwrap_or(u32::MAX));
        }
        Self {
            key,
            generation,
            strings: strings.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            controlled: controller.is_some(),
        }
    }

    /// The `i`th of the strings.
    fn string(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.strings[start..self.ends[i] as usize]
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.string(0)
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        self.string(1)
    }

    /// The ownerReference marked `controller: true`, if any.
    pub fn controller(&self) -> Option<Owner<'_>> {
        self.controlled.then(|| Owner {
            api_version: self.string(FIXED),
            kind: self.string(FIXED + 1),
            name: self.string(FIXED + 2),
            uid: self.string(FIXED + 3),
        })
    }

    /// The index of the first label's key among the strings.
    fn first_label(&self) -> usize {
        FIXED + if self.controlled { OWNER } else { 0 }
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        let first = self.first_label();
        (0..(self.ends.len() - first) / 2)
            .map(move |i| (self.string(first + 2 * i), self.string(first + 2 * i + 1)))
    }

    /// The value of a label.
    pub fn label(&self, key: &str) -> Option<&str> {
        let first = self.first_label();
        let count = (self.ends.len() - first) / 2;
        let mut range = 0..count;
        // A binary search over the sorted keys, without collecting them.
        while range.start < range.end {
            let mid = range.start + (range.end - range.start) / 2;
            match self.string(first + 2 * mid).cmp(key) {
                std::cmp::Ordering::Less => range.start = mid + 1,
                std::cmp::Ordering::Greater => range.end = mid,
                std::cmp::Ordering::Equal => return Some(self.string(first + 2 * mid + 1)),
            }
        }
        None
    }

    /// Whether the labels satisfy `selector`.
    pub fn selected_by(&self, selector: &Selector) -> bool {
        selector.matches_with(|key| self.label(key))
    }

    /// The same object at another resourceVersion: for tests of the store's ordering.
    #[cfg(test)]
    pub fn with_resource_version(&self, resource_version: &str) -> Self {
        let labels: Vec<(&str, &str)> = self.labels().collect();
        Self::new(
            self.key.clone(),
            self.generation,
            [self.uid(), resource_version],
            self.controller(),
            &labels,
        )
    }
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meta")
            .field("key", &self.key)
            .field("uid", &self.uid())
            .field("resource_version", &self.resource_version())
            .field("generation", &self.generation)
            .field("labels", &self.labels().collect::<Vec<_>>())
            .field("controller", &self.controller())
            .finish()
    }
}

/// The text a kind's cached objects are compressed against: the first whole object of the
/// kind cached (its text, then its kept `managedFields`), at most [`DICTIONARY_BYTES`] of it,
/// for the life of the cache. Set once, so every object compressed against it can be read
/// back; a kind whose objects differ much from the first compresses less, never wrongly.
pub type Dictionary = OnceLock<Arc<[u8]>>;

/// The most of a kind's first object its dictionary keeps. LZ4 hashes the whole dictionary
/// into its match table on every compression (every cached write of the kind), and a typical
/// object is one or two kilobytes: a first object that is large (up to the API server's
/// 1.5 MiB, whoever created it) would otherwise make every later write of its kind pay for
/// hashing it, up to LZ4's 64 KiB window, and keep the rest for nothing.
const DICTIONARY_BYTES: usize = 8 << 10;

/// Text, LZ4-compressed against a dictionary.
#[derive(Debug, Default)]
struct Packed {
    bytes: Box<[u8]>,
    /// The text's length.
    len: usize,
}

impl Packed {
    fn pack(text: &str, dictionary: &[u8]) -> Self {
        Self {
            bytes: lz4_flex::block::compress_with_dict(text.as_bytes(), dictionary)
                .into_boxed_slice(),
            len: text.len(),
        }
    }

    fn unpack(&self, dictionary: &[u8]) -> String {
        // Only `pack` made these bytes, from UTF-8 text, against this very dictionary: neither
        // step can fail but by a bug, which would otherwise hand a plugin a corrupt object.
        let bytes = lz4_flex::block::decompress_with_dict(&self.bytes, self.len, dictionary)
            .expect("cached text decompresses against its own dictionary");
        String::from_utf8(bytes).expect("cached text is UTF-8")
    }
}

/// One cached object, whole or as a stub.
///
/// A stub is the [`Meta`] alone: what a sharded replica keeps of a child whose parent another
/// replica owns (see [`super::sieve`]). It still answers the indexes and the takeover check (who
/// controls the object, its labels); what a plugin or the planner reads must be whole, and
/// [`super::Informer::whole`] fetches it.
#[derive(Debug)]
pub struct Cached {
    /// The parsed fields.
    pub meta: Meta,
    /// The object as compact JSON, without `managedFields`: what a plugin is given. Empty in
    /// a stub (a JSON object is never empty text).
    text: Packed,
    /// The `managedFields` entries the cache keeps (reconhost's own, see the informer), as a
    /// JSON array, for the planner; `None` if there are none.
    managed_fields: Option<Packed>,
    /// What both are compressed against (empty: nothing).
    dictionary: Arc<[u8]>,
}

impl Cached {
    /// Caches a JSON object, compressed without a dictionary. Its `managedFields`, if any, are
    /// kept apart from the text.
    #[cfg(test)]
    pub fn new(object: Value) -> Self {
        Self::with_meta(Meta::of(&object), object, &Dictionary::new())
    }

    /// Caches a JSON object whose [`Meta`] was already read (its `managedFields` do not enter
    /// it; the kept ones go apart from the text), compressed against its kind's `dictionary`
    /// (this object's own text becomes the dictionary if it is the kind's first).
    pub fn with_meta(meta: Meta, mut object: Value, dictionary: &Dictionary) -> Self {
        let managed_fields = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .and_then(|m| m.remove("managedFields"))
            .filter(|f| f.as_array().is_some_and(|a| !a.is_empty()))
            .map(|f| f.to_string());
        let text = object.to_string();
        let dictionary = dictionary
            .get_or_init(|| {
                let fields = managed_fields.as_deref().unwrap_or("").as_bytes();
                let whole = text.as_bytes().iter().chain(fields);
                whole.take(DICTIONARY_BYTES).copied().collect()
            })
            .clone();
        Self {
            meta,
            text: Packed::pack(&text, &dictionary),
            managed_fields: managed_fields.map(|f| Packed::pack(&f, &dictionary)),
            dictionary,
        }
    }

    /// A stub of an object: its [`Meta`] without its text.
    pub fn stub(meta: Meta) -> Self {
        Self {
            meta,
            text: Packed::default(),
            managed_fields: None,
            dictionary: Arc::default(),
        }
    }

    /// Whether the object is cached whole (not a stub).
    pub fn is_whole(&self) -> bool {
        self.text.len > 0
    }

    /// Whether the cache kept any of reconhost's `managedFields` entries for it (for a parent:
    /// a plugin applied labels or annotations to it).
    pub fn has_managed_fields(&self) -> bool {
        self.managed_fields.is_some()
    }

    /// The object as JSON text, as a plugin is given it (empty for a stub).
    pub fn json(&self) -> String {
        if !self.is_whole() {
            return String::new();
        }
        self.text.unpack(&self.dictionary)
    }

    /// The object, parsed, as a plugin is given it.
    pub fn value(&self) -> Value {
        // The text was written by serde_json from a Value: it always parses.
        serde_json::from_str(&self.json()).unwrap_or(Value::Null)
    }

    /// The object, parsed, with the kept `managedFields` back in place: what the planner
    /// compares the desired state with.
    pub fn observed(&self) -> Value {
        let mut object = self.value();
        if let (Some(fields), Some(meta)) = (
            &self.managed_fields,
            object.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            let fields =
                serde_json::from_str(&fields.unpack(&self.dictionary)).unwrap_or(Value::Null);
            meta.insert("managedFields".into(), fields);
        }
        object
    }

    /// Whether nothing but the status of `before`, the same object's earlier version, changed
    /// in `self`: what a plugin that asks to ignore its parent's status changes is not woken
    /// for. `resourceVersion` does not count (every write moves it, a change of another
    /// manager's `managedFields` alone included); everything else of `metadata` does (labels
    /// select, a deletion finalizes), and so does `generation`.
    pub fn changed_only_in_status(&self, before: &Cached) -> bool {
        fn without_status(object: &Cached) -> Value {
            let mut value = object.value();
            if let Some(fields) = value.as_object_mut() {
                fields.remove("status");
            }
            if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
            value
        }
        without_status(self) == without_status(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cached_object_should_keep_managed_fields_apart_from_what_a_plugin_sees() {
        let fields =
            json!([{"manager": "reconhost/p", "operation": "Apply", "fieldsV1": {"f:data": {}}}]);
        let cached = Cached::new(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "a", "uid": "u", "resourceVersion": "9",
                         "labels": {"b": "2", "a": "1"}, "managedFields": fields},
            "data": {"k": "v"}
        }));
        assert!(
            !cached.json().contains("managedFields"),
            "{}",
            cached.json()
        );
        assert_eq!(cached.value()["data"]["k"], "v");
        assert_eq!(cached.observed()["metadata"]["managedFields"], fields);
        assert_eq!(
            (cached.meta.uid(), cached.meta.resource_version()),
            ("u", "9")
        );
        assert_eq!(cached.meta.label("a"), Some("1"));
        assert_eq!(cached.meta.label("c"), None);
        assert!(
            cached
                .meta
                .selected_by(&Selector::parse("a=1,b in (2,3),!c").unwrap())
        );
        assert!(!cached.meta.selected_by(&Selector::parse("b=3").unwrap()));
    }

    #[test]
    fn meta_should_give_back_each_field_it_read_with_or_without_a_controller() {
        let labels: serde_json::Map<String, Value> = (0..9)
            .rev()
            .map(|i| (format!("k{i}"), json!(format!("v{i}"))))
            .collect();
        let owned = Meta::of(&json!({"metadata": {
            "namespace": "a", "name": "x", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "labels": labels,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "u-o"},
                {"apiVersion": "example.com/v1", "kind": "WebApp", "name": "p", "uid": "u-p",
                 "controller": true}]}}));
        assert_eq!(
            (
                owned.key.to_string().as_str(),
                owned.uid(),
                owned.resource_version()
            ),
            ("a/x", "u-1", "42")
        );
        assert_eq!(owned.generation, 3);
        assert_eq!(
            owned.controller(),
            Some(Owner {
                api_version: "example.com/v1",
                kind: "WebApp",
                name: "p",
                uid: "u-p"
            })
        );
        let expected: Vec<(String, String)> =
            (0..9).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
        let read: Vec<(String, String)> =
            owned.labels().map(|(k, v)| (k.into(), v.into())).collect();
        assert_eq!(read, expected, "sorted by key");
        for i in 0..9 {
            assert_eq!(
                owned.label(&format!("k{i}")),
                Some(format!("v{i}").as_str())
            );
        }
        assert_eq!(
            (owned.label("k"), owned.label("k9"), owned.label("a")),
            (None, None, None)
        );

        let bare = Meta::of(&json!({"metadata": {"name": "y", "labels": {"only": ""}}}));
        assert_eq!(
            (bare.uid(), bare.resource_version(), bare.controller()),
            ("", "", None)
        );
        assert_eq!(bare.labels().collect::<Vec<_>>(), [("only", "")]);
        assert_eq!(bare.label("only"), Some(""));
        let moved = owned.with_resource_version("43");
        assert_eq!(moved.resource_version(), "43");
        assert_eq!(
            (moved.controller(), moved.labels().len()),
            (owned.controller(), 9)
        );
    }

    #[test]
    fn objects_of_a_kind_should_read_back_as_cached_and_keep_less_than_their_text() {
        let deployment = |i: usize| {
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("app-{i:05}"), "namespace": "scale",
                    "uid": format!("6f1c2d3e-0000-4000-8000-{i:012}"),
                    "resourceVersion": format!("{}", 1000 + i), "generation": 1,
                    "labels": {"app": format!("app-{i:05}")},
                    "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp",
                        "name": format!("app-{i:05}"), "uid": format!("9a8b7c6d-0000-4000-8000-{i:012}"),
                        "controller": true, "blockOwnerDeletion": true}],
                    "managedFields": [{"manager": "reconhost/webapp", "operation": "Apply",
                        "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}}]},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": format!("app-{i:05}")}},
                    "template": {"metadata": {"labels": {"app": format!("app-{i:05}")}},
                        "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                            "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}},
                "status": {}
            })
        };
        let dictionary = Dictionary::new();
        let cached: Vec<Cached> = (0..3)
            .map(|i| Cached::with_meta(Meta::of(&deployment(i)), deployment(i), &dictionary))
            .collect();
        for (i, c) in cached.iter().enumerate() {
            let mut expected = deployment(i);
            assert_eq!(c.observed(), expected, "read back with its managedFields");
            expected["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("managedFields");
            assert_eq!(c.value(), expected, "read back as a plugin is given it");
        }
        let text = cached[2].json().len();
        assert!(
            cached[2].text.bytes.len() * 3 < text,
            "a later object of the kind keeps under a third of its {text} bytes against the \
             first: {} bytes",
            cached[2].text.bytes.len()
        );
        assert!(!Cached::stub(cached[0].meta.clone()).is_whole());
    }

    #[test]
    fn a_large_first_object_should_leave_a_bounded_dictionary_that_still_reads_back() {
        let config_map = |i: usize, data: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": "big"},
                "data": {"payload": data}})
        };
        let dictionary = Dictionary::new();
        let huge = "x".repeat(1 << 20);
        let first = Cached::with_meta(
            Meta::of(&config_map(0, &huge)),
            config_map(0, &huge),
            &dictionary,
        );
        let later = Cached::with_meta(
            Meta::of(&config_map(1, "small")),
            config_map(1, "small"),
            &dictionary,
        );
        assert_eq!(dictionary.get().unwrap().len(), DICTIONARY_BYTES);
        assert_eq!(first.value(), config_map(0, &huge));
        assert_eq!(later.value(), config_map(1, "small"));
    }

    #[test]
    fn only_a_change_of_status_or_of_nothing_should_count_as_status_only() {
        let parent = |rv: &str, generation: i64, spec: Value, meta: Value, status: &str| {
            let mut object = json!({"apiVersion": "v1", "kind": "P",
                "metadata": {"name": "p", "uid": "u", "resourceVersion": rv,
                             "generation": generation},
                "spec": spec, "status": {"phase": status}});
            for (k, v) in meta.as_object().expect("fields") {
                object["metadata"][k] = v.clone();
            }
            Cached::new(object)
        };
        let before = parent("1", 1, json!({"a": 1}), json!({}), "A");
        let status = parent("2", 1, json!({"a": 1}), json!({}), "B");
        assert!(status.changed_only_in_status(&before));
        let nothing = parent("2", 1, json!({"a": 1}), json!({}), "A");
        assert!(nothing.changed_only_in_status(&before));
        for (what, after) in [
            ("spec", parent("2", 2, json!({"a": 2}), json!({}), "B")),
            (
                "labels",
                parent("2", 1, json!({"a": 1}), json!({"labels": {"x": "y"}}), "B"),
            ),
            (
                "deletion",
                parent(
                    "2",
                    1,
                    json!({"a": 1}),
                    json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
                    "B",
                ),
            ),
        ] {
            assert!(!after.changed_only_in_status(&before), "{what}");
        }
    }
}
