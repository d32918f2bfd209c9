//! An object as the watch delivers it: the JSON tree, parsed once, and for a sharded replica's
//! child kinds, parsed no further than its metadata when the object is another replica's.
//!
//! kube-runtime's watcher parses every object of a list or watch event into the type it is
//! given. Its own [`DynamicObject`](kube::api::DynamicObject) parses the metadata into typed
//! fields and buffers the rest of the object for a second pass (a flattened field), and the
//! cache wanted a JSON tree, so each event was then converted back: three passes over every
//! object. [`Watched`] parses straight into the tree; the watcher only needs the
//! resourceVersion from its typed metadata. The applier asks for the same type, so the API
//! server's answer to each of the host's writes, which the cache takes in too, is parsed once
//! as well. Either way the other managers' `managedFields` entries, which the cache drops and
//! which are most of many objects, are skipped as they are read rather than built.
//!
//! A sharded replica receives every child of every parent and keeps most of them as stubs
//! ([`super::Sieve`]), which need only the metadata. While an informer reads its watch, its
//! sieve is in [`SIEVE`]; the parse asks it as soon as the metadata is read (the API server
//! writes `metadata` before `spec` and `status`), and skips the rest of another replica's
//! child without building it. The informer judges again when it caches the object, by then
//! with the sieve as it is; a child parsed as a stub but kept by then is cached as a stub,
//! which the reconciler fetches whole when it needs it, as any stub.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::object::Meta;
use super::sieve::Sieve;
use super::store::ObjectKey;
use crate::model::FIELD_MANAGER_PREFIX;

tokio::task_local! {
    /// The sieve of the informer whose watch is being read (set around its whole watch).
    pub static SIEVE: Arc<Sieve>;
}

/// An object of any kind, as listed or watched.
#[derive(Debug, Clone)]
pub struct Watched {
    /// Only what the watcher reads: the resourceVersion (and the name, for its logs).
    metadata: ObjectMeta,
    /// The whole object, or when `whole` is false what came up to its metadata.
    object: Value,
    /// Whether the object was parsed whole: not when the sieve made it a stub.
    whole: bool,
    /// Its [`Meta`], when the parse built it to ask the sieve.
    head: Option<Meta>,
}

impl Watched {
    /// The object's [`Meta`], all a stub keeps (the one the parse built, if it did).
    pub fn head(&mut self) -> Meta {
        self.head.take().unwrap_or_else(|| Meta::of(&self.object))
    }

    /// The object's key.
    pub fn key(&self) -> ObjectKey {
        let meta = &self.metadata;
        ObjectKey::new(
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or(""),
        )
    }

    /// Its `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    /// Whether the whole object was parsed (else only what a stub needs).
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// Its `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.metadata.uid.as_deref()
    }

    /// The object as the API server sent it, but for other managers' `managedFields` entries.
    pub fn as_value(&self) -> &Value {
        &self.object
    }

    /// The object as the cache holds it: with the kind's `apiVersion` and `kind` (list items
    /// arrive without them), and without managedFields other than what reconhost's managers
    /// applied (the largest part of most objects, and of no use to a plugin).
    pub fn normalized(self, kind: &ApiResource) -> Value {
        normalize(self.object, kind)
    }
}

impl From<Value> for Watched {
    fn from(object: Value) -> Self {
        Self {
            metadata: typed(&object["metadata"]),
            object,
            whole: true,
            head: None,
        }
    }
}

/// What the watcher reads of the metadata, and the uid (which the applier's callers read of
/// an object it wrote).
fn typed(meta: &Value) -> ObjectMeta {
    let text = |field: &str| meta[field].as_str().map(str::to_owned);
    ObjectMeta {
        name: text("name"),
        namespace: text("namespace"),
        resource_version: text("resourceVersion"),
        uid: text("uid"),
        ..ObjectMeta::default()
    }
}

/// [`Watched::normalized`]. The parse has already dropped the other managers' entries; the
/// filter here serves an object made from a tree ([`From<Value>`]).
fn normalize(mut object: Value, kind: &ApiResource) -> Value {
    let Some(fields) = object.as_object_mut() else {
        return object;
    };
    fields.insert("apiVersion".into(), kind.api_version.as_str().into());
    fields.insert("kind".into(), kind.kind.as_str().into());
    if let Some(meta) = fields.get_mut("metadata").and_then(Value::as_object_mut)
        && let Some(managed) = meta.get_mut("managedFields")
    {
        let kept = match managed {
            Value::Array(entries) => {
                entries.retain(ours);
                !entries.is_empty()
            }
            _ => false,
        };
        if !kept {
            meta.remove("managedFields");
        }
    }
    object
}

/// Whether a managedFields entry is one of reconhost's applies to the object itself.
fn ours(entry: &Value) -> bool {
    entry["manager"]
        .as_str()
        .is_some_and(|m| m.starts_with(FIELD_MANAGER_PREFIX))
        && entry["operation"] == "Apply"
        && entry["subresource"].as_str().unwrap_or("").is_empty()
}

impl<'de> Deserialize<'de> for Watched {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let sieve = SIEVE.try_with(Arc::clone).ok();
        deserializer.deserialize_map(Fields { sieve })
    }
}

/// Reads an object's fields into a tree, up to its metadata only if the sieve makes it a stub.
struct Fields {
    sieve: Option<Arc<Sieve>>,
}

impl<'de> Visitor<'de> for Fields {
    type Value = Watched;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Watched, A::Error> {
        let mut fields = Map::new();
        let mut whole = true;
        let mut head = None;
        while let Some(key) = map.next_key::<String>()? {
            if !whole {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value: Value = if key == "metadata" {
                let read = map.next_value_seed(Metadata {
                    sieve: self.sieve.as_deref(),
                })?;
                if let Some((meta, keep)) = read.judged {
                    whole = keep;
                    head = Some(meta);
                }
                read.tree
            } else {
                map.next_value()?
            };
            fields.insert(key, value);
        }
        let object = Value::Object(fields);
        Ok(Watched {
            metadata: typed(&object["metadata"]),
            object,
            whole,
            head,
        })
    }
}

/// An object's `metadata`, its `managedFields` reduced to reconhost's applies as they are
/// read: the other managers' entries (a `fieldsV1` tree each, as large as what they wrote) are
/// skipped, not built and then dropped. The API server writes an entry's `manager` and
/// `operation` before its `fieldsV1`, so most are judged before their tree.
///
/// With a sieve, the sieve is asked when `managedFields` is reached (the last field of
/// `metadata` as the API server writes it, after the labels and owners the sieve reads), and
/// a stub's entries are skipped altogether.
struct Metadata<'s> {
    sieve: Option<&'s Sieve>,
}

/// What reading `metadata` came to.
struct Read {
    tree: Value,
    /// When there is a sieve: the object's [`Meta`], and whether the sieve keeps it whole.
    judged: Option<(Meta, bool)>,
}

impl Metadata<'_> {
    /// The sieve's verdict on the metadata read so far.
    fn judge(&self, fields: &mut Map<String, Value>) -> Option<(Meta, bool)> {
        let sieve = self.sieve?;
        let tree = Value::Object(std::mem::take(fields));
        let meta = Meta::of_metadata(&tree);
        let keep = sieve.keeps(&meta);
        if let Value::Object(taken) = tree {
            *fields = taken;
        }
        Some((meta, keep))
    }
}

impl<'de> DeserializeSeed<'de> for Metadata<'_> {
    type Value = Read;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Read, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Metadata<'_> {
    type Value = Read;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object's metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let mut fields = Map::new();
        let mut judged = None;
        // Whether fields came after the sieve was asked (not the API server's order).
        let mut later = false;
        while let Some(key) = map.next_key::<String>()? {
            if key != "managedFields" {
                later = judged.is_some();
                fields.insert(key, map.next_value()?);
                continue;
            }
            if judged.is_none() {
                judged = self.judge(&mut fields);
            }
            if matches!(judged, Some((_, false))) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let kept = map.next_value_seed(Managed)?;
            if !kept.is_empty() {
                fields.insert(key, Value::Array(kept));
            }
        }
        judged = match judged {
            None => self.judge(&mut fields),
            // Asked too early: asked again of the whole metadata. A child that was a stub
            // then stays one (its managedFields are gone); the reconciler fetches a stub
            // whole when it needs it.
            Some((_, first)) if later => self
                .judge(&mut fields)
                .map(|(meta, keep)| (meta, keep && first)),
            judged => judged,
        };
        Ok(Read {
            tree: Value::Object(fields),
            judged,
        })
    }

    // Not an object: kept as it is, for the cache to judge as before.
    fn visit_unit<E: serde::de::Error>(self) -> Result<Read, E> {
        Ok(Read {
            tree: Value::Null,
            judged: self.sieve.map(|sieve| {
                let meta = Meta::of_metadata(&Value::Null);
                let keep = sieve.keeps(&meta);
                (meta, keep)
            }),
        })
    }
}

/// `metadata.managedFields`, only reconhost's applies to the object itself kept.
struct Managed;

impl<'de> DeserializeSeed<'de> for Managed {
    type Value = Vec<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Value>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Managed {
    type Value = Vec<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of managedFields entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Value>, A::Error> {
        let mut kept = Vec::new();
        while let Some(entry) = seq.next_element_seed(Entry)? {
            kept.extend(entry);
        }
        Ok(kept)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<Value>, E> {
        Ok(Vec::new())
    }
}

/// One managedFields entry: `None` when it is not one of reconhost's applies ([`ours`]), read
/// no further than what decides it.
struct Entry;

impl<'de> DeserializeSeed<'de> for Entry {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<Value>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Entry {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a managedFields entry")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let mut fields = Map::new();
        let mut theirs = false;
        while let Some(key) = map.next_key::<String>()? {
            if theirs {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value: Value = map.next_value()?;
            theirs = match key.as_str() {
                "manager" => !value
                    .as_str()
                    .is_some_and(|m| m.starts_with(FIELD_MANAGER_PREFIX)),
                "operation" => value != "Apply",
                _ => false,
            };
            fields.insert(key, value);
        }
        let entry = Value::Object(fields);
        Ok((!theirs && ours(&entry)).then_some(entry))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }
}

impl Resource for Watched {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use kube::core::{GroupVersionKind, WatchEvent};
    use serde_json::json;

    use super::*;

    fn deployments() -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        )
    }

    #[test]
    fn a_watch_event_should_parse_into_the_object_the_cache_holds() {
        let line = json!({"type": "MODIFIED", "object": {
            "metadata": {"namespace": "a", "name": "web", "resourceVersion": "42",
                "managedFields": [
                    {"manager": "reconhost/webapp", "operation": "Apply", "fieldsV1": {"f:spec": {}}},
                    {"manager": "reconhost/webapp", "operation": "Apply", "subresource": "status"},
                    {"manager": "reconhost/webapp", "operation": "Update"},
                    {"manager": "kube-controller-manager", "operation": "Update"}]},
            "spec": {"replicas": 2}}})
        .to_string();
        let event: WatchEvent<Watched> = serde_json::from_str(&line).unwrap();
        let WatchEvent::Modified(watched) = event else {
            panic!("a modification: {event:?}");
        };
        assert_eq!(watched.meta().resource_version.as_deref(), Some("42"));
        assert_eq!(watched.meta().name.as_deref(), Some("web"));
        assert_eq!(
            watched.as_value()["metadata"]["managedFields"],
            json!([{"manager": "reconhost/webapp", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]),
            "the other entries were dropped as they were read"
        );
        assert_eq!(
            watched.normalized(&deployments()),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"namespace": "a", "name": "web", "resourceVersion": "42",
                    "managedFields": [{"manager": "reconhost/webapp", "operation": "Apply",
                        "fieldsV1": {"f:spec": {}}}]},
                "spec": {"replicas": 2}}),
            "typed as its kind, with only reconhost's applies to the object itself"
        );
    }

    /// A Deployment of the WebApp `owner`, as the API server writes it: `spec` and `status`
    /// after `metadata`.
    fn child(name: &str, owner: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"namespace": "a", "name": name, "uid": format!("u-{name}"),
                "resourceVersion": "7", "labels": {"app": name},
                "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp",
                    "name": owner, "uid": format!("u-{owner}"), "controller": true}]},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "web"}]}}},
            "status": {"observedGeneration": 1}})
    }

    #[test]
    fn another_replicas_child_should_be_parsed_no_further_than_its_metadata() {
        let sieve = Arc::new(Sieve::new(|parent| parent.name == "mine"));
        sieve.parent_kind(
            crate::cache::GroupKind::of("example.com/v1", "WebApp"),
            true,
        );
        let list = json!({"apiVersion": "apps/v1", "kind": "DeploymentList",
            "metadata": {"resourceVersion": "9"},
            "items": [child("kept", "mine"), child("stub", "theirs")]})
        .to_string();
        let list: kube::core::ObjectList<Watched> =
            SIEVE.sync_scope(sieve.clone(), || serde_json::from_str(&list).unwrap());
        let [kept, mut stub]: [Watched; 2] = list.items.try_into().expect("two items");
        assert!(kept.is_whole());
        assert_eq!(
            kept.clone().normalized(&deployments()),
            child("kept", "mine")
        );
        assert!(!stub.is_whole(), "the child of another replica's parent");
        let head = stub.head();
        assert_eq!(head.controller().map(|o| o.name), Some("theirs"));
        assert_eq!(head.uid(), "u-stub");
        assert_eq!(head.label("app"), Some("stub"));
        assert_eq!(head.resource_version(), "7");
        assert_eq!(
            stub.head(),
            head,
            "the same from the object when the parse's is taken"
        );
        assert_eq!(
            stub.object.get("spec"),
            None,
            "its spec was skipped, not built"
        );

        let line = json!({"type": "ADDED", "object": child("stub", "theirs")}).to_string();
        let event: WatchEvent<Watched> =
            SIEVE.sync_scope(sieve, || serde_json::from_str(&line).unwrap());
        let WatchEvent::Added(mut stub) = event else {
            panic!("an addition: {event:?}");
        };
        assert!(
            !stub.is_whole(),
            "a watch event is sifted as a list item is"
        );
        assert_eq!(stub.head().resource_version(), "7");

        let outside: WatchEvent<Watched> = serde_json::from_str(&line).unwrap();
        let WatchEvent::Added(whole) = outside else {
            panic!("an addition: {outside:?}");
        };
        assert!(
            whole.is_whole(),
            "no sieve, no stub: a fetch or an unsieved kind"
        );
    }

    #[test]
    fn a_stubs_managed_fields_should_be_skipped_and_a_late_field_still_judged() {
        let sieve = Arc::new(Sieve::new(|parent| parent.name == "mine"));
        sieve.parent_kind(
            crate::cache::GroupKind::of("example.com/v1", "WebApp"),
            true,
        );
        let ours = json!([{"manager": "reconhost/webapp", "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:replicas": {}}}}]);
        // As the API server orders metadata (serde_json's `Map` would sort the keys).
        let parse = |name: &str, owner: &str| -> Watched {
            let meta = &child(name, owner)["metadata"];
            let text = format!(
                r#"{{"metadata": {{"name": "{name}", "namespace": "a", "uid": "u-{name}",
                    "ownerReferences": {}, "managedFields": {ours}}}, "spec": {{"replicas": 1}}}}"#,
                meta["ownerReferences"]
            );
            SIEVE.sync_scope(sieve.clone(), || serde_json::from_str(&text).unwrap())
        };

        let kept = parse("kept", "mine");
        assert!(kept.is_whole());
        assert_eq!(kept.as_value()["metadata"]["managedFields"], ours);
        assert_eq!(kept.as_value()["spec"], json!({"replicas": 1}));

        let stub = parse("stub", "theirs");
        assert!(!stub.is_whole());
        assert_eq!(
            stub.as_value()["metadata"].get("managedFields"),
            None,
            "a stub's entries are not read"
        );
        assert_eq!(stub.as_value().get("spec"), None);

        // The owner written after managedFields (not the API server's order): kept at first
        // sight (no owner yet), the child is judged again by its real owner.
        let text = format!(
            r#"{{"metadata": {{"name": "late", "namespace": "a", "uid": "u-late",
                "managedFields": {ours}, "ownerReferences": {}}}, "spec": {{}}}}"#,
            child("late", "theirs")["metadata"]["ownerReferences"]
        );
        let mut late: Watched =
            SIEVE.sync_scope(sieve.clone(), || serde_json::from_str(&text).unwrap());
        assert_eq!(late.head().controller().map(|o| o.name), Some("theirs"));
        assert!(!late.is_whole(), "another replica's child, however ordered");
    }

    #[test]
    fn an_entry_should_be_judged_whatever_the_order_of_its_fields() {
        let object = json!({"metadata": {"name": "web", "managedFields": [
            {"fieldsV1": {"f:data": {}}, "operation": "Apply", "manager": "reconhost/a"},
            {"fieldsV1": {"f:data": {}}, "operation": "Apply", "manager": "kubectl"},
            {"fieldsV1": {"f:status": {}}, "subresource": "status", "manager": "reconhost/a",
             "operation": "Apply"},
            {"manager": "reconhost/a", "fieldsV1": {"f:data": {}}, "operation": "Update"}]},
            "data": {"a": "1"}});
        let watched: Watched = serde_json::from_str(&object.to_string()).unwrap();
        assert_eq!(
            watched.as_value()["metadata"]["managedFields"],
            json!([{"fieldsV1": {"f:data": {}}, "operation": "Apply", "manager": "reconhost/a"}])
        );
        assert_eq!(watched.as_value()["data"], json!({"a": "1"}));
    }

    #[test]
    fn no_entry_of_ours_should_leave_no_managed_fields() {
        for fields in [
            json!(null),
            json!([]),
            json!([{"manager": "kubectl", "operation": "Apply", "fieldsV1": {}}]),
        ] {
            let object = json!({"metadata": {"name": "web", "uid": "u", "managedFields": fields}});
            let watched: Watched = serde_json::from_str(&object.to_string()).unwrap();
            assert_eq!(
                watched.as_value(),
                &json!({"metadata": {"name": "web", "uid": "u"}}),
                "from {fields}"
            );
            assert_eq!(watched.uid(), Some("u"));
        }
    }

    #[test]
    fn managed_fields_of_others_only_should_go_whole() {
        let object = json!({"metadata": {"name": "web",
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]}});
        assert_eq!(
            normalize(object, &deployments())["metadata"],
            json!({"name": "web"})
        );
    }
}
