//! The watch and cache of one kind ([`Informer`]) and the handlers registered on it.
//!
//! The watch is kube-runtime's watcher, which relists on 410 Gone, asks for bookmarks and
//! reconnects with backoff (800 ms doubling to 30 s, jittered, like client-go's reflector).
//! Objects are cached as JSON text, the form plugins receive ([`Cached`]), without
//! `managedFields` (the largest part of most objects and of no use to a plugin) except the
//! entries of reconhost's own field managers, which the planner needs to see a field the plugin
//! stopped setting and which are kept apart from what a plugin is given.
//!
//! Handlers are plain functions called on the watch task for each change. They must not block:
//! the control loop's handlers only map the object to queue keys and add them. A handler is
//! registered with [`Informer::on_change`], which returns a [`Registration`] that unregisters it
//! when dropped; a handler registered while the watch is already running is first replayed every
//! object the cache holds, as part of the initial list, so late registrations miss nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tracing::{debug, info, warn};

pub use crate::keys::ResolvedKind;

use super::sieve::Sieve;
use super::store::{Cached, GroupKind, Meta, ObjectKey, Store};
use super::watched::{SIEVE, Watched};

/// How many stubs [`Informer::prefetch`] fetches at once: as many as one reconcile fetches of
/// its children, so that a prefetch weighs on the API server as one reconcile more.
const PREFETCH_AT_ONCE: usize = 8;

/// One change to a cached object, as handlers see it.
#[derive(Debug)]
pub struct Change<'a> {
    /// The object before, if it was cached.
    pub old: Option<&'a Cached>,
    /// The object after, unless it was deleted.
    pub new: Option<&'a Cached>,
    /// Part of the first list after start (or of the replay a late handler gets): work it
    /// causes is of low priority.
    pub initial: bool,
    /// The host's own write, seen in the API server's answer ([`Informer::observe_write`]).
    pub written: bool,
}

type Handler = Arc<dyn Fn(&Change<'_>) + Send + Sync>;

/// The watch and cache of one kind, in every namespace the host watches or in some of them.
pub struct Informer {
    kind: ResolvedKind,
    /// The namespaces watched, when confined to some (one watch each); `None`: wherever the
    /// host watches.
    namespaces: Option<BTreeSet<String>>,
    store: Store,
    /// Registered handlers by registration id, in registration order.
    handlers: RwLock<Vec<(u64, Handler)>>,
    next_id: AtomicU64,
    synced: watch::Sender<bool>,
    /// The API server's refusals of the host's own list or watch (403), by namespace (empty:
    /// every namespace), each until that watch lists again.
    forbidden: Mutex<BTreeMap<String, String>>,
    /// For a sharded replica's cache of a child kind: what it keeps whole, and the client
    /// that fetches the rest when a reconcile needs it.
    sieve: Option<(Arc<Sieve>, kube::Client)>,
}

/// A handler's registration on an informer. Dropping it unregisters the handler; the change
/// being delivered at that moment, if any, may still reach it.
#[must_use = "dropping a registration unregisters its handler"]
pub struct Registration {
    informer: Weak<Informer>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(informer) = self.informer.upgrade() {
            informer
                .handlers
                .write()
                .expect("handler lock poisoned")
                .retain(|(id, _)| *id != self.id);
        }
    }
}

impl Informer {
    pub(super) fn new(kind: ResolvedKind, namespaces: Option<BTreeSet<String>>) -> Self {
        Self {
            kind,
            namespaces,
            store: Store::default(),
            handlers: RwLock::new(Vec::new()),
            next_id: AtomicU64::new(0),
            synced: watch::Sender::new(false),
            forbidden: Mutex::new(BTreeMap::new()),
            sieve: None,
        }
    }

    /// The informer keeping whole only what `sieve` keeps, fetching the rest through
    /// `client` when asked for it ([`Informer::whole`]).
    pub(super) fn sieved(mut self, sieve: Arc<Sieve>, client: kube::Client) -> Self {
        self.sieve = Some((sieve, client));
        self
    }

    /// `object` whole: as cached if it is, else fetched from the API server and cached
    /// (`None`: it was deleted meanwhile). The reconciler gathers children through this, so a
    /// plugin never sees a stub.
    pub async fn whole(&self, object: Arc<Cached>) -> Result<Option<Arc<Cached>>, kube::Error> {
        if object.is_whole() {
            return Ok(Some(object));
        }
        let Some((_, client)) = &self.sieve else {
            // Only a sieved cache holds stubs.
            return Ok(Some(object));
        };
        let key = &object.meta.key;
        let resource = &self.kind.resource;
        let api: Api<Watched> = if self.kind.namespaced {
            Api::namespaced_with(client.clone(), &key.namespace, resource)
        } else {
            Api::all_with(client.clone(), resource)
        };
        let Some(fetched) = api.get_opt(&key.name).await? else {
            return Ok(None);
        };
        debug!(kind = %self.kind.resource.kind, object = %key, "fetched a child the cache held as a stub");
        Ok(Some(self.store.hydrate({
            let object = fetched.normalized(resource);
            self.store.cached(Meta::of(&object), object)
        })))
    }

    /// Fetches whole the stubs the sieve keeps now (their parents are this replica's, are about
    /// to be, or may soon be: a member's Lease is late), [`PREFETCH_AT_ONCE`] at a time, so
    /// that the first reconciles of those parents find their children whole; returns how many
    /// it fetched. One that fails is left a stub: the reconcile fetches it then.
    pub async fn prefetch(&self) -> usize {
        let Some((sieve, _)) = &self.sieve else {
            return 0;
        };
        let stubs = self.store.stubs_kept(|meta| sieve.keeps(meta));
        futures::stream::iter(stubs)
            .map(|stub| self.whole(stub))
            .buffer_unordered(PREFETCH_AT_ONCE)
            .filter(|fetched| std::future::ready(matches!(fetched, Ok(Some(_)))))
            .count()
            .await
    }

    /// Turns the whole objects the sieve no longer keeps into stubs (the replica lost their
    /// parents); returns how many.
    pub fn resieve(&self) -> usize {
        match &self.sieve {
            Some((sieve, _)) => self.store.shrink(|meta| sieve.keeps(meta)),
            None => 0,
        }
    }

    /// Why the API server refuses the host's own list or watch of the kind, while it does: the
    /// host lacks RBAC for it (a ClusterRole labelled `reconhost.dev/aggregate-to-host` grants
    /// it). Retrying goes on; a later successful list clears it.
    pub fn forbidden(&self) -> Option<String> {
        self.forbidden
            .lock()
            .expect("informer lock poisoned")
            .values()
            .next()
            .cloned()
    }

    /// The kind this informer watches.
    pub fn kind(&self) -> &ResolvedKind {
        &self.kind
    }

    /// The namespaces it is confined to, if it is (`None`: wherever the host watches).
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        self.namespaces.as_ref()
    }

    /// Whether the cache can answer for `namespace` (empty: every namespace it watches, and
    /// cluster-scoped objects).
    pub fn covers(&self, namespace: &str) -> bool {
        namespace.is_empty()
            || self
                .namespaces
                .as_ref()
                .is_none_or(|n| n.contains(namespace))
    }

    /// The kind's identity across versions.
    pub fn group_kind(&self) -> GroupKind {
        self.kind.group_kind()
    }

    /// The cache.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Calls `handler` for every change from now on, after replaying it every object already
    /// cached (as `initial` changes). Changes that race the registration may reach the handler
    /// twice, never not at all: the replay takes a snapshot after the handler can no longer miss
    /// a notification, and handlers add keys to a queue, where a repeat is free.
    pub fn on_change(
        self: &Arc<Self>,
        handler: impl Fn(&Change<'_>) + Send + Sync + 'static,
    ) -> Registration {
        let handler: Handler = Arc::new(handler);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.handlers
            .write()
            .expect("handler lock poisoned")
            .push((id, handler.clone()));
        for object in self.store.list("", &crate::selector::Selector::default()) {
            handler(&Change {
                old: None,
                new: Some(&object),
                initial: true,
                written: false,
            });
        }
        Registration {
            informer: Arc::downgrade(self),
            id,
        }
    }

    #[cfg(test)]
    /// How many handlers are registered.
    pub fn handler_count(&self) -> usize {
        self.handlers.read().expect("handler lock poisoned").len()
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
        // A snapshot, so a handler registering or unregistering meanwhile never waits on a
        // change being delivered.
        let handlers: Vec<Handler> = self
            .handlers
            .read()
            .expect("handler lock poisoned")
            .iter()
            .map(|(_, h)| h.clone())
            .collect();
        for handler in handlers {
            handler(change);
        }
    }

    /// [`Informer::arrive`] for a JSON object (the tests' way in).
    #[cfg(test)]
    fn apply(&self, object: serde_json::Value, initial: bool) {
        self.arrive(Watched::from(object), initial, false);
    }

    /// Caches an object as listed, watched or written, and tells the handlers, unless the
    /// cache already holds this version or a newer one (a relist replays every object, and a
    /// write the host observed may be ahead of the watch; only real changes become work). A
    /// sieved cache keeps a stub of a child its sieve does not keep, or that was parsed as one.
    fn arrive(&self, mut object: Watched, initial: bool, written: bool) {
        let meta = object.head();
        let keep = object.is_whole()
            && self
                .sieve
                .as_ref()
                .is_none_or(|(sieve, _)| sieve.keeps(&meta));
        let cached = if keep {
            self.store
                .cached(meta, object.normalized(&self.kind.resource))
        } else {
            Cached::stub(meta)
        };
        let Some((old, new)) = self.store.upsert(cached) else {
            return;
        };
        self.notify(&Change {
            old: old.as_deref(),
            new: Some(&new),
            initial,
            written,
        });
    }

    /// Caches the API server's answer to a write the host made, so the next reconcile reads what
    /// was written rather than an older version from a watch that has not caught up. Handlers
    /// hear of it as of any change (another plugin may depend on the object); the watch event
    /// that follows is then a replay and ignored. This is the one way into the cache other than
    /// the watch.
    pub fn observe_write(&self, object: Watched) {
        self.arrive(object, false, true);
    }

    /// Uncaches an object; `version` is the resourceVersion of its deletion, when known.
    fn delete(&self, key: &ObjectKey, version: Option<&str>) {
        if let Some(old) = self.store.remove(key, version) {
            self.notify(&Change {
                old: Some(&old),
                new: None,
                initial: false,
                written: false,
            });
        }
    }

    /// Uncaches what a (re)list of `namespace` (empty: every namespace) did not return: it was
    /// deleted while the watch was down. Other namespaces' objects are other watches' to judge.
    fn relisted(&self, namespace: &str, seen: &HashSet<ObjectKey>) {
        for key in self.store.keys_in(namespace) {
            if !seen.contains(&key) {
                self.delete(&key, None);
            }
        }
        self.store.forget_deleted();
    }

    /// Watches until the task is aborted (the last user of the informer is gone): one watch
    /// per `(namespace, api)`, the namespace empty for one that sees every namespace. The
    /// cache is synced once each has listed; a relist of one replaces only its namespace.
    pub(super) async fn run(
        self: Arc<Self>,
        watches: Vec<(String, Api<Watched>)>,
        config: watcher::Config,
    ) {
        // A sharded replica's child kinds are sifted as they are parsed (`super::watched`).
        match self.sieve.as_ref().map(|(sieve, _)| sieve.clone()) {
            Some(sieve) => SIEVE.scope(sieve, self.watch(watches, config)).await,
            None => self.watch(watches, config).await,
        }
    }

    async fn watch(self: Arc<Self>, watches: Vec<(String, Api<Watched>)>, config: watcher::Config) {
        let kind = self.kind.resource.kind.clone();
        if watches.is_empty() {
            // Confined to no namespace at all: there is nothing to list.
            self.synced.send_replace(true);
            return;
        }
        let count = watches.len();
        let mut namespaces = Vec::with_capacity(count);
        let mut streams = Vec::with_capacity(count);
        for (n, (namespace, api)) in watches.into_iter().enumerate() {
            namespaces.push(namespace);
            streams.push(
                watcher::watcher(api, config.clone())
                    .default_backoff()
                    .map(move |event| (n, event))
                    .boxed(),
            );
        }
        let stream = futures::stream::select_all(streams);
        futures::pin_mut!(stream);
        // Keys seen during each watch's (re)list; whatever the cache holds beyond them in its
        // namespace was deleted while the watch was down.
        let mut listing: HashMap<usize, HashSet<ObjectKey>> = HashMap::new();
        let mut listed: HashSet<usize> = HashSet::new();
        while let Some((n, event)) = stream.next().await {
            match event {
                Ok(Event::Init) => {
                    listing.insert(n, HashSet::new());
                }
                Ok(Event::InitApply(object)) => {
                    if let Some(seen) = listing.get_mut(&n) {
                        seen.insert(object.key());
                    }
                    self.arrive(object, !self.is_synced(), false);
                }
                Ok(Event::InitDone) => {
                    let namespace = &namespaces[n];
                    self.relisted(namespace, &listing.remove(&n).unwrap_or_default());
                    listed.insert(n);
                    // The first sync trims once, not once per namespace's watch: a host confined
                    // to many namespaces starts with one list each.
                    if self.is_synced() {
                        debug!(%kind, %namespace, objects = self.store.len(), "relisted");
                        crate::trim::give_back_freed_memory();
                    } else if listed.len() == count {
                        info!(%kind, objects = self.store.len(), "cache synced");
                        crate::trim::give_back_freed_memory();
                        self.synced.send_replace(true);
                    }
                    self.forbidden
                        .lock()
                        .expect("informer lock poisoned")
                        .remove(namespace);
                }
                Ok(Event::Apply(object)) => self.arrive(object, false, false),
                Ok(Event::Delete(object)) => {
                    self.delete(&object.key(), object.resource_version());
                }
                Err(error) => {
                    if let Some(message) = forbidden(&error) {
                        self.forbidden
                            .lock()
                            .expect("informer lock poisoned")
                            .insert(namespaces[n].clone(), message);
                    }
                    warn!(%kind, namespace = %namespaces[n], %error, "watch failed; retrying with backoff");
                }
            }
        }
    }
}

/// The API server's message when `error` is a 403.
fn forbidden(error: &watcher::Error) -> Option<String> {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status,
        watcher::Error::WatchError(status) => status,
        _ => return None,
    };
    (status.code == 403).then(|| status.message.clone())
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Mutex;

    use super::*;
    use serde_json::{Value, json};

    pub(crate) fn config_maps() -> Arc<Informer> {
        Arc::new(Informer::new(
            ResolvedKind {
                resource: kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(
                    &(),
                ),
                namespaced: true,
                has_status: false,
            },
            None,
        ))
    }

    fn object(name: &str, version: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "a", "name": name, "resourceVersion": version}})
    }

    type Seen = Arc<Mutex<Vec<(bool, bool, bool)>>>;

    fn recorder() -> (Seen, impl Fn(&Change<'_>) + Send + Sync + 'static) {
        let seen = Seen::default();
        let log = seen.clone();
        (seen, move |c: &Change<'_>| {
            log.lock()
                .unwrap()
                .push((c.old.is_some(), c.new.is_some(), c.initial))
        })
    }

    #[test]
    fn informer_should_not_notify_a_replayed_or_older_version() {
        let informer = config_maps();
        let (seen, handler) = recorder();
        let _registration = informer.on_change(handler);
        informer.apply(object("x", "1"), true);
        informer.apply(object("x", "1"), false);
        informer.apply(object("x", "2"), false);
        informer.apply(object("x", "1"), false);
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

    #[tokio::test]
    async fn a_sieved_informer_should_keep_whole_only_the_children_of_kept_parents() {
        let kept = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sieve = Arc::new(super::super::Sieve::new({
            let kept = kept.clone();
            move |parent| parent.name == "mine" || kept.load(Ordering::Relaxed)
        }));
        sieve.parent_kind(GroupKind::of("example.com/v1", "WebApp"), true);
        // Never asked to fetch here: the client points nowhere.
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let informer =
            Arc::new(Informer::new(config_maps().kind().clone(), None).sieved(sieve, client));
        let (seen, handler) = recorder();
        let _registration = informer.on_change(handler);
        let child = |name: &str, owner: &str| {
            let mut o = object(name, "1");
            o["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1",
                "kind": "WebApp", "name": owner, "uid": owner, "controller": true}]);
            o
        };
        informer.apply(child("a", "mine"), false);
        informer.apply(child("b", "theirs"), false);
        let store = informer.store();
        assert!(store.get("a", "a").unwrap().is_whole());
        let stub = store.get("a", "b").unwrap();
        assert!(!stub.is_whole(), "another replica's parent's child");
        assert_eq!(
            seen.lock().unwrap().len(),
            2,
            "handlers hear of stubs too: their owners are queued"
        );
        let whole = informer.whole(store.get("a", "a").unwrap()).await.unwrap();
        assert!(
            whole.is_some_and(|c| c.is_whole()),
            "a whole child is not fetched"
        );

        kept.store(true, Ordering::Relaxed);
        informer.apply(child("b", "theirs"), false);
        assert!(
            store.get("a", "b").unwrap().is_whole(),
            "a relist's replay of the stub's version, now kept, fills it"
        );
        assert_eq!(seen.lock().unwrap().len(), 2, "and is no news");
        let mut newer = child("b", "theirs");
        newer["metadata"]["resourceVersion"] = json!("2");
        informer.apply(newer, false);
        assert!(store.get("a", "b").unwrap().is_whole(), "kept from now on");

        kept.store(false, Ordering::Relaxed);
        assert_eq!(informer.resieve(), 1, "given up: back to a stub");
        assert!(!store.get("a", "b").unwrap().is_whole());
        assert!(store.get("a", "a").unwrap().is_whole());
    }

    #[test]
    fn a_relist_should_forget_only_what_its_own_namespace_lost() {
        let informer = config_maps();
        let in_ns = |ns: &str, name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": ns, "name": name, "resourceVersion": "1"}})
        };
        for (ns, name) in [("a", "kept"), ("a", "gone"), ("b", "other")] {
            informer.apply(in_ns(ns, name), true);
        }
        informer.relisted("a", &HashSet::from([ObjectKey::new("a", "kept")]));
        let mut keys: Vec<String> = informer
            .store()
            .keys()
            .iter()
            .map(|k| format!("{}/{}", k.namespace, k.name))
            .collect();
        keys.sort();
        assert_eq!(keys, ["a/kept", "b/other"]);
        informer.relisted("", &HashSet::from([ObjectKey::new("a", "kept")]));
        assert_eq!(
            informer.store().len(),
            1,
            "a watch of every namespace judges all"
        );
    }

    #[test]
    fn late_handler_should_be_replayed_the_cache_and_dropping_should_unregister() {
        let informer = config_maps();
        informer.apply(object("x", "1"), true);
        informer.apply(object("y", "1"), true);
        let (seen, handler) = recorder();
        let registration = informer.on_change(handler);
        assert_eq!(
            *seen.lock().unwrap(),
            [(false, true, true), (false, true, true)],
            "both cached objects, as initial (low-priority) changes"
        );
        informer.apply(object("x", "2"), false);
        assert_eq!(seen.lock().unwrap().len(), 3, "then live changes");
        assert_eq!(informer.handler_count(), 1);
        drop(registration);
        assert_eq!(informer.handler_count(), 0);
        informer.apply(object("x", "3"), false);
        assert_eq!(seen.lock().unwrap().len(), 3, "nothing after unregistering");
    }
}
