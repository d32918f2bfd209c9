//! What every controller of a host shares: the informers, the client, the metrics, the global
//! reconcile permits, the access reviews, leadership and the host-wide bounds.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::fight::FightPolicy;
use super::guest_memory::GuestMemory;
use crate::cache::Informers;
use crate::identity::access::Access;
use crate::metrics::Metrics;

/// The host's own Leases, in one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLeases {
    /// Their namespace.
    pub namespace: String,
    /// The leader-election Lease's name, or with sharding the prefix of every member's.
    pub name: String,
    /// Whether `name` is a prefix.
    pub prefix: bool,
}

impl HostLeases {
    /// Whether the Lease `namespace/name` is one of them.
    pub fn holds(&self, namespace: &str, name: &str) -> bool {
        namespace == self.namespace
            && if self.prefix {
                name.starts_with(&self.name)
            } else {
                name == self.name
            }
    }
}

/// What every controller of a host shares.
#[derive(Clone)]
pub struct Context {
    /// The shared informers.
    pub informers: Informers,
    /// The host's client (writes are made with it).
    pub client: kube::Client,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Permits for reconciles across all controllers.
    pub global: Arc<Semaphore>,
    /// How often every parent is queued again (zero: never).
    pub sync_period: Duration,
    /// How long in-flight reconciles get to finish when a pool stops.
    pub grace: Duration,
    /// The host's access reviews, for reads made as a plugin's ServiceAccount.
    pub access: Arc<Access>,
    /// Whether a plugin may reconcile a built-in kind (`--allow-builtin-parents`).
    pub allow_builtin_parents: bool,
    /// When a fight over a child's field trips the breaker (`--fight-*`).
    pub fights: FightPolicy,
    /// Whether this replica does the host's own writes (the ReconcilePlugins' status, their
    /// finalizers): always without leader election or sharding; the leader with it; with
    /// sharding, the member owning the lifecycle's key ([`crate::shard::LIFECYCLE`]).
    pub leading: tokio::sync::watch::Receiver<bool>,
    /// The parents this replica reconciles: worker pools run only while it owns any; caches
    /// and revisions are kept either way. Published by [`crate::supervisor::Supervisor::assign`].
    pub assignment: tokio::sync::watch::Receiver<super::route::Assignment>,
    /// The host's own namespaces (where it runs, its Lease's), whose Namespace objects no
    /// plugin's child may be.
    pub protected_namespaces: BTreeSet<String>,
    /// The host's own Leases (leader election's, or the ring's members'), no plugin's child.
    pub lease: Option<HostLeases>,
    /// The guest memory all calls together may hold.
    pub guest_memory: GuestMemory,
}
