//! Every informer of the host, shared by kind and reference-counted: the first user of a kind
//! resolves it through discovery and starts its watch; the watch stops when the last
//! [`InformerRef`] is dropped, so a kind no plugin uses any more costs nothing.
//!
//! A plugin confined to some namespaces (its ReconcilePlugin's `spec.namespaces`) gets
//! informers of its namespaced kinds confined to them, one watch per namespace, as
//! controller-runtime's cache does with `DefaultNamespaces`: the host then needs its share of
//! the plugin's kinds only there, so a plugin that reads Secrets in one namespace does not make
//! the host list every Secret. Informers are shared by kind and namespaces alike.

use std::collections::{BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kube::api::Api;
use kube::core::GroupVersionKind;
use kube::core::discovery::Scope;
use kube::runtime::watcher;
use tokio::task::JoinHandle;

use super::informer::{Informer, ResolvedKind};
use super::sieve::Sieve;
use super::store::GroupKind;
use crate::model::{KindRef, group_of};

/// Objects per page of a (re)list. The watcher holds a whole page parsed while the informer
/// caches its objects one by one, and the cache's long-lived blocks land among that page's
/// freed ones, where they keep pages of the heap from being given back: at 10,000 parents a
/// restarted host held 1798 bytes per cached object with client-go's and kube's 500, 1231 with
/// 100 (docs/BENCHMARKS.md). Five times the list requests did not show in the time to list
/// 30,000 objects: ready in 1.8 s, against 1.3–1.9 s with 500.
const LIST_PAGE: u32 = 100;

/// Failure to resolve a kind.
#[derive(Debug, thiserror::Error)]
#[error("resolving kind {kind} through discovery: {source}")]
pub struct DiscoveryError {
    /// The kind as the plugin named it.
    pub kind: KindRef,
    /// What the API server said.
    #[source]
    pub source: kube::Error,
}

impl DiscoveryError {
    /// Whether the API server does not serve the kind (its CRD is not installed, or not this
    /// version), as opposed to a failure to ask.
    pub fn is_not_found(&self) -> bool {
        match &self.source {
            kube::Error::Api(status) => status.code == 404,
            kube::Error::Discovery(_) => true,
            _ => false,
        }
    }
}

/// The informers of one host: one per kind, created on first use.
#[derive(Clone)]
pub struct Informers {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    /// Namespaced kinds are watched only here when set.
    namespace: Option<String>,
    /// How long one watch request lasts before the server ends it (and the watch resumes);
    /// a watch silent for 5 s longer is taken for dead and started again.
    watch_timeout: u32,
    /// The live informers. An entry whose slot has been dropped is stale until the next
    /// acquire of that kind replaces it (or the slot's drop removes it).
    slots: Mutex<HashMap<SlotKey, Weak<Slot>>>,
    /// With sharding: what caches of child kinds keep whole.
    sieve: Option<Arc<Sieve>>,
    /// Held by the [`Informers::prefetch`] that runs: they run one after another.
    prefetching: tokio::sync::Mutex<()>,
}

/// An informer's identity: its kind, the namespaces it is confined to (`None`: wherever the
/// host watches; always `None` for a cluster-scoped kind), and whether it is sieved (a child
/// kind's cache in a sharded replica; a kind also read or reconciled has a whole cache too).
type SlotKey = (GroupKind, Option<BTreeSet<String>>, bool);

/// A live informer and its watch task. Dropped with the last [`InformerRef`].
struct Slot {
    informer: Arc<Informer>,
    watch: JoinHandle<()>,
    key: SlotKey,
    owner: Weak<Inner>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.watch.abort();
        tracing::info!(kind = %self.key.0, namespaces = ?self.key.1, sieved = self.key.2, "no plugin uses the kind any more; its watch stopped");
        if let Some(inner) = self.owner.upgrade() {
            let mut slots = inner.slots.lock().expect("informer lock poisoned");
            // A new slot for the kind may already have replaced this one.
            if slots.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
                slots.remove(&self.key);
            }
        }
    }
}

/// A use of an informer. Clones share the use; the informer's watch runs as long as any
/// reference to it is alive.
#[derive(Clone)]
pub struct InformerRef {
    slot: Arc<Slot>,
}

impl Deref for InformerRef {
    type Target = Arc<Informer>;

    fn deref(&self) -> &Arc<Informer> {
        &self.slot.informer
    }
}

impl Informers {
    /// Informers on `client`, watching namespaced kinds only in `namespace` when given, each
    /// watch request lasting `watch_timeout` (see `--watch-timeout`); with `sieve` (a sharded
    /// replica's), caches of child kinds keep whole only what it keeps.
    pub fn new(
        client: kube::Client,
        namespace: Option<String>,
        watch_timeout: Duration,
        sieve: Option<Arc<Sieve>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                namespace,
                watch_timeout: u32::try_from(watch_timeout.as_secs())
                    .unwrap_or(u32::MAX)
                    .max(1),
                slots: Mutex::new(HashMap::new()),
                sieve,
                prefetching: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The sieve of a sharded replica's child caches, if any.
    pub fn sieve(&self) -> Option<&Arc<Sieve>> {
        self.inner.sieve.as_ref()
    }

    /// Like [`Informers::acquire_in`], for a kind of children: with sharding its cache keeps
    /// whole only the children of parents this replica keeps ([`Sieve`]), and a kind that is
    /// also read or reconciled is watched twice, sieved and whole.
    pub async fn acquire_children_in(
        &self,
        kind: &KindRef,
        namespaces: Option<&BTreeSet<String>>,
    ) -> Result<InformerRef, DiscoveryError> {
        self.acquire_slot(kind, namespaces, self.inner.sieve.is_some())
            .await
    }

    /// The live sieved caches, taken out of the lock to be walked.
    fn sieved_slots(&self) -> Vec<Arc<Slot>> {
        let slots = self.inner.slots.lock().expect("informer lock poisoned");
        slots
            .iter()
            .filter(|(key, _)| key.2)
            .filter_map(|(_, slot)| slot.upgrade())
            .collect()
    }

    /// Turns into stubs what the sieved caches no longer keep (the replica lost parents);
    /// returns how many objects it turned.
    pub fn resieve(&self) -> usize {
        let live = self.sieved_slots();
        let shrunk = live.iter().map(|slot| slot.informer.resieve()).sum();
        if shrunk > 0 {
            crate::trim::give_back_freed_memory();
        }
        shrunk
    }

    /// Fetches whole, in every sieved cache, the stubs its sieve keeps now
    /// ([`Informer::prefetch`]); returns how many. Prefetches run one after another, each
    /// reading the sieve as it is when it starts, so one asked for while another runs still
    /// sees the latest assignment, and finds whole what the earlier one fetched.
    pub async fn prefetch(&self) -> usize {
        let _one_at_a_time = self.inner.prefetching.lock().await;
        let live = self.sieved_slots();
        let mut fetched = 0;
        for slot in &live {
            fetched += slot.informer.prefetch().await;
        }
        fetched
    }

    /// The informer of a kind, resolving the kind through discovery and starting its watch if
    /// no one uses it yet. Must be called within a tokio runtime.
    pub async fn acquire(&self, kind: &KindRef) -> Result<InformerRef, DiscoveryError> {
        self.acquire_in(kind, None).await
    }

    /// Like [`Informers::acquire`], confined to `namespaces` (those the host watches at all)
    /// when given and the kind is namespaced.
    pub async fn acquire_in(
        &self,
        kind: &KindRef,
        namespaces: Option<&BTreeSet<String>>,
    ) -> Result<InformerRef, DiscoveryError> {
        self.acquire_slot(kind, namespaces, false).await
    }

    async fn acquire_slot(
        &self,
        kind: &KindRef,
        namespaces: Option<&BTreeSet<String>>,
        sieved: bool,
    ) -> Result<InformerRef, DiscoveryError> {
        let group_kind = GroupKind::from(kind);
        let wanted = self.confined(namespaces);
        if let Some(slot) = self.live(&(group_kind.clone(), wanted.clone(), sieved)) {
            return Ok(InformerRef { slot });
        }
        // A cluster-scoped kind has one informer, whatever the namespaces asked.
        if let Some(slot) = self
            .live(&(group_kind.clone(), None, sieved))
            .filter(|s| !s.informer.kind().namespaced)
        {
            return Ok(InformerRef { slot });
        }
        let resolved = resolve(&self.inner.client, kind).await?;
        let scope = wanted.filter(|_| resolved.namespaced);
        let key = (group_kind, scope.clone(), sieved);
        let mut slots = self.inner.slots.lock().expect("informer lock poisoned");
        // Someone may have started it while discovery ran.
        if let Some(slot) = slots.get(&key).and_then(Weak::upgrade) {
            return Ok(InformerRef { slot });
        }
        let client = &self.inner.client;
        let resource = &resolved.resource;
        let watches = match (&scope, &self.inner.namespace, resolved.namespaced) {
            (Some(confined), _, true) => confined
                .iter()
                .map(|ns| {
                    (
                        ns.clone(),
                        Api::namespaced_with(client.clone(), ns, resource),
                    )
                })
                .collect(),
            (None, Some(ns), true) => {
                vec![(
                    ns.clone(),
                    Api::namespaced_with(client.clone(), ns, resource),
                )]
            }
            _ => vec![(String::new(), Api::all_with(client.clone(), resource))],
        };
        let informer = Informer::new(resolved, scope);
        let informer = Arc::new(match (&self.inner.sieve, sieved) {
            (Some(sieve), true) => informer.sieved(sieve.clone(), client.clone()),
            _ => informer,
        });
        let config = watcher::Config::default()
            .timeout(self.inner.watch_timeout)
            .page_size(LIST_PAGE);
        let watch = tokio::spawn(informer.clone().run(watches, config));
        let slot = Arc::new(Slot {
            informer,
            watch,
            key: key.clone(),
            owner: Arc::downgrade(&self.inner),
        });
        slots.insert(key, Arc::downgrade(&slot));
        Ok(InformerRef { slot })
    }

    /// The namespaces an informer confined to `namespaces` watches: those of them the host
    /// watches at all. `None` when that is the host's own scope (one informer serves both).
    pub fn confined(&self, namespaces: Option<&BTreeSet<String>>) -> Option<BTreeSet<String>> {
        let namespaces = namespaces?;
        match &self.inner.namespace {
            Some(only) if namespaces.contains(only) => None,
            Some(_) => Some(BTreeSet::new()),
            None => Some(namespaces.clone()),
        }
    }

    fn live(&self, key: &SlotKey) -> Option<Arc<Slot>> {
        let slots = self.inner.slots.lock().expect("informer lock poisoned");
        slots.get(key).and_then(Weak::upgrade)
    }

    /// Objects cached across all live informers.
    pub fn cached_objects(&self) -> usize {
        let slots = self.inner.slots.lock().expect("informer lock poisoned");
        slots
            .values()
            .filter_map(Weak::upgrade)
            .map(|s| s.informer.store().len())
            .sum()
    }

    /// Objects in the sieved caches (children, with sharding): how many whole and how many
    /// stubs.
    pub fn sieved_objects(&self) -> (usize, usize) {
        self.sieved_slots()
            .iter()
            .fold((0, 0), |(whole, stubs), slot| {
                let store = slot.informer.store();
                let (all, stub) = (store.len(), store.stubs());
                (whole + all - stub, stubs + stub)
            })
    }

    /// The client the informers watch with.
    pub fn client(&self) -> &kube::Client {
        &self.inner.client
    }

    /// The namespace namespaced kinds are watched in, if only one.
    pub fn namespace(&self) -> Option<&str> {
        self.inner.namespace.as_deref()
    }
}

/// Resolves a kind through discovery: its plural, scope and whether it has a status
/// subresource.
pub async fn resolve(
    client: &kube::Client,
    kind: &KindRef,
) -> Result<ResolvedKind, DiscoveryError> {
    let group = group_of(&kind.api_version);
    let version = kind
        .api_version
        .split_once('/')
        .map_or(kind.api_version.as_str(), |(_, v)| v);
    let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
    let (resource, capabilities) =
        kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|source| DiscoveryError {
                kind: kind.clone(),
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
