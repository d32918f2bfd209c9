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
    /// Whether this replica leads (always, without leader election): worker pools run only
    /// while it does; caches and generations are kept either way.
    pub leading: tokio::sync::watch::Receiver<bool>,
    /// The host's own namespaces (where it runs, its Lease's), whose Namespace objects no
    /// plugin's child may be.
    pub protected_namespaces: BTreeSet<String>,
    /// The host's leader Lease (`namespace`, `name`), when it elects one.
    pub lease: Option<(String, String)>,
    /// The guest memory all calls together may hold.
    pub guest_memory: GuestMemory,
}
