//! Informers: one watch and one cache per kind, shared by every plugin that needs the kind.
//!
//! A kind is resolved once through discovery, then watched with kube-runtime's watcher, which
//! relists on 410 Gone, asks for bookmarks and reconnects with backoff (800 ms doubling to 30 s,
//! jittered, like client-go's reflector). Objects are cached as JSON text, the form plugins
//! receive ([`Cached`]), without `managedFields` (the largest part of most objects and of no use
//! to a plugin) except the entries of reconhost's own field managers, which the planner needs to
//! see a field the plugin stopped setting and which are kept apart from what a plugin is given.
//! The cache keeps two indexes: by namespace, for `list`, and by controller-owner UID, for
//! gathering a parent's children without a scan.
//!
//! Handlers are plain functions called on the watch task for each change. They must not block:
//! the control loop's handlers only map the object to queue keys and add them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject};
use kube::core::discovery::{ApiResource, Scope};
use kube::core::{GroupVersionKind, TypeMeta};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::model::{FIELD_MANAGER_PREFIX, KindRef};
use crate::runtime::ObjectReader;
use crate::selector::Selector;

pub use super::store::{Cached, GroupKind, Meta, ObjectKey, Owner, Store};

/// A kind as discovery resolved it.
#[derive(Debug, Clone)]
pub struct ResolvedKind {
    /// Group, version, kind and plural.
    pub resource: ApiResource,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
    /// Whether the kind has a status subresource.
    pub has_status: bool,
}

/// Failure to resolve a kind.
#[derive(Debug, thiserror::Error)]
#[error("resolving kind {kind} through discovery: {source}")]
pub struct DiscoveryError {
    /// The kind as the plugin named it.
    pub kind: String,
    /// What the API server said.
    #[source]
    pub source: kube::Error,
}

/// One change to a cached object, as handlers see it.
#[derive(Debug)]
pub struct Change<'a> {
    /// The object before, if it was cached.
    pub old: Option<&'a Cached>,
    /// The object after, unless it was deleted.
    pub new: Option<&'a Cached>,
    /// Part of the first list after start: work it causes is of low priority.
    pub initial: bool,
}

type Handler = Box<dyn Fn(&Change<'_>) + Send + Sync>;
/// The watch and cache of one kind.
pub struct Informer {
    kind: ResolvedKind,
    store: Store,
    handlers: RwLock<Vec<Handler>>,
    synced: watch::Sender<bool>,
}

impl Informer {
    fn new(kind: ResolvedKind) -> Self {
        Self {
            kind,
            store: Store::default(),
            handlers: RwLock::new(Vec::new()),
            synced: watch::Sender::new(false),
        }
    }

    /// The kind this informer watches.
    pub fn kind(&self) -> &ResolvedKind {
        &self.kind
    }

    /// The cache.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Calls `handler` for every change from now on. Register before the informer starts to see
    /// the initial list.
    pub fn on_change(&self, handler: impl Fn(&Change<'_>) + Send + Sync + 'static) {
        self.handlers
            .write()
            .expect("handler lock poisoned")
            .push(Box::new(handler));
    }

    /// Whether the first list has been cached.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Completes once the first list has been cached.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        // The sender lives as long as self, so the wait ends only by becoming true.
        let _ = rx.wait_for(|s| *s).await;
    }

    fn notify(&self, change: &Change<'_>) {
        for handler in self.handlers.read().expect("handler lock poisoned").iter() {
            handler(change);
        }
    }

    /// Caches an object and tells the handlers, unless the cache already holds this version or
    /// a newer one (a relist replays every object, and a write the host observed may be ahead of
    /// the watch; only real changes become work).
    fn apply(&self, object: Value, initial: bool) {
        let Some((old, new)) = self.store.upsert(Cached::new(object)) else {
            return;
        };
        self.notify(&Change {
            old: old.as_deref(),
            new: Some(&new),
            initial,
        });
    }

    /// Caches the API server's answer to a write the host made, so the next reconcile reads what
    /// was written rather than an older version from a watch that has not caught up. Handlers
    /// hear of it as of any change (another plugin may depend on the object); the watch event
    /// that follows is then a replay and ignored.
    pub fn observe_write(&self, object: DynamicObject) {
        let object = self.normalize(object);
        self.apply(object, false);
    }

    /// Uncaches an object; `version` is the resourceVersion of its deletion, when known.
    fn delete(&self, key: &ObjectKey, version: Option<&str>) {
        if let Some(old) = self.store.remove(key, version) {
            self.notify(&Change {
                old: Some(&old),
                new: None,
                initial: false,
            });
        }
    }

    /// The object as the cache holds it: typed (list items arrive without apiVersion and kind)
    /// and without managedFields other than what reconhost's managers applied.
    fn normalize(&self, mut object: DynamicObject) -> Value {
        object.metadata.managed_fields = object
            .metadata
            .managed_fields
            .take()
            .map(|entries| {
                entries
                    .into_iter()
                    .filter(|e| {
                        e.manager
                            .as_deref()
                            .is_some_and(|m| m.starts_with(FIELD_MANAGER_PREFIX))
                            && e.operation.as_deref() == Some("Apply")
                            && e.subresource.as_deref().unwrap_or("").is_empty()
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|kept| !kept.is_empty());
        object.types = Some(TypeMeta {
            api_version: self.kind.resource.api_version.clone(),
            kind: self.kind.resource.kind.clone(),
        });
        serde_json::to_value(object).unwrap_or(Value::Null)
    }

    async fn run(self: Arc<Self>, api: Api<DynamicObject>) {
        let kind = self.kind.resource.kind.clone();
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        // Keys seen during a (re)list; whatever the cache holds beyond them was deleted while
        // the watch was down.
        let mut listing: Option<HashSet<ObjectKey>> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Init) => listing = Some(HashSet::new()),
                Ok(Event::InitApply(object)) => {
                    let object = self.normalize(object);
                    if let Some(seen) = &mut listing {
                        seen.insert(ObjectKey::of(&object));
                    }
                    self.apply(object, !self.is_synced());
                }
                Ok(Event::InitDone) => {
                    let seen = listing.take().unwrap_or_default();
                    for key in self.store.keys() {
                        if !seen.contains(&key) {
                            self.delete(&key, None);
                        }
                    }
                    self.store.forget_deleted();
                    if !self.is_synced() {
                        info!(%kind, objects = self.store.len(), "cache synced");
                    } else {
                        debug!(%kind, objects = self.store.len(), "relisted");
                    }
                    self.synced.send_replace(true);
                }
                Ok(Event::Apply(object)) => self.apply(self.normalize(object), false),
                Ok(Event::Delete(object)) => {
                    let object = self.normalize(object);
                    let version = object["metadata"]["resourceVersion"].as_str();
                    self.delete(&ObjectKey::of(&object), version);
                }
                Err(error) => warn!(%kind, %error, "watch failed; retrying with backoff"),
            }
        }
    }
}

/// Every informer of the host, created on first use and shared.
pub struct Informers {
    client: kube::Client,
    namespace: Option<String>,
    by_kind: Mutex<HashMap<GroupKind, Arc<Informer>>>,
    started: Mutex<HashSet<GroupKind>>,
}

impl Informers {
    /// Informers on `client`, watching namespaced kinds only in `namespace` when given.
    pub fn new(client: kube::Client, namespace: Option<String>) -> Self {
        Self {
            client,
            namespace,
            by_kind: Mutex::new(HashMap::new()),
            started: Mutex::new(HashSet::new()),
        }
    }

    /// The informer of a kind, resolving the kind through discovery the first time.
    pub async fn informer(&self, kind: &KindRef) -> Result<Arc<Informer>, DiscoveryError> {
        let key = GroupKind::from(kind);
        if let Some(found) = self.by_kind.lock().expect("lock poisoned").get(&key) {
            return Ok(found.clone());
        }
        let resolved = resolve(&self.client, kind).await?;
        let mut by_kind = self.by_kind.lock().expect("lock poisoned");
        Ok(by_kind
            .entry(key)
            .or_insert_with(|| Arc::new(Informer::new(resolved)))
            .clone())
    }

    /// Starts the watch of every informer not yet started. Register handlers first.
    pub fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let by_kind = self.by_kind.lock().expect("lock poisoned");
        let mut started = self.started.lock().expect("lock poisoned");
        let mut tasks = Vec::new();
        for (key, informer) in by_kind.iter() {
            if !started.insert(key.clone()) {
                continue;
            }
            let resource = &informer.kind.resource;
            let api = match (&self.namespace, informer.kind.namespaced) {
                (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, resource),
                _ => Api::all_with(self.client.clone(), resource),
            };
            tasks.push(tokio::spawn(informer.clone().run(api)));
        }
        tasks
    }

    /// Whether every informer has cached its first list.
    pub fn all_synced(&self) -> bool {
        let by_kind = self.by_kind.lock().expect("lock poisoned");
        by_kind.values().all(|i| i.is_synced())
    }

    /// Objects cached across all kinds.
    pub fn cached_objects(&self) -> usize {
        let by_kind = self.by_kind.lock().expect("lock poisoned");
        by_kind.values().map(|i| i.store.len()).sum()
    }
}

async fn resolve(client: &kube::Client, kind: &KindRef) -> Result<ResolvedKind, DiscoveryError> {
    let (group, version) = match kind.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", kind.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
    let (resource, capabilities) =
        kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|source| DiscoveryError {
                kind: kind.to_string(),
                source,
            })?;
    let has_status = capabilities
        .subresources
        .iter()
        .any(|(r, _)| r.plural == "status");
    Ok(ResolvedKind {
        resource,
        namespaced: capabilities.scope == Scope::Namespaced,
        has_status,
    })
}

/// Answers a plugin's `get` and `list` from the informers of the kinds it declared.
pub struct CacheReader {
    stores: HashMap<GroupKind, Arc<Informer>>,
}

impl CacheReader {
    /// A reader over these informers.
    pub fn new(informers: impl IntoIterator<Item = Arc<Informer>>) -> Self {
        Self {
            stores: informers
                .into_iter()
                .map(|i| {
                    let r = &i.kind.resource;
                    let key = GroupKind {
                        group: r.group.clone(),
                        kind: r.kind.clone(),
                    };
                    (key, i)
                })
                .collect(),
        }
    }
}

impl ObjectReader for CacheReader {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Option<String> {
        let informer = self.stores.get(&GroupKind::from(kind))?;
        informer
            .store
            .get(namespace, name)
            .map(|o| o.json().to_owned())
    }

    fn list(&self, kind: &KindRef, namespace: &str, selector: &Selector) -> Vec<String> {
        let Some(informer) = self.stores.get(&GroupKind::from(kind)) else {
            return Vec::new();
        };
        informer
            .store
            .list(namespace, selector)
            .iter()
            .map(|o| o.json().to_owned())
            .collect()
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
    fn informer_should_not_notify_a_replayed_or_older_version() {
        let informer = Informer::new(ResolvedKind {
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            has_status: false,
        });
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        informer.on_change(move |c| {
            log.lock()
                .unwrap()
                .push((c.old.is_some(), c.new.is_some(), c.initial))
        });
        informer.apply(object("a", "x", None, json!({})), true);
        informer.apply(object("a", "x", None, json!({})), false);
        let mut newer = object("a", "x", None, json!({}));
        newer["metadata"]["resourceVersion"] = json!("2");
        informer.apply(newer, false);
        let mut stale = object("a", "x", None, json!({}));
        stale["metadata"]["resourceVersion"] = json!("1");
        informer.apply(stale, false);
        informer.delete(&ObjectKey::new("a", "x"), Some("3"));
        informer.delete(&ObjectKey::new("a", "x"), Some("3"));
        assert_eq!(
            *seen.lock().unwrap(),
            [
                (false, true, true),
                (true, true, false),
                (true, false, false)
            ]
        );
    }
}
