//! The host's view of the cluster: one watch and one cache per kind, shared by every plugin
//! that needs the kind, started by the first user and stopped after the last.
//!
//! - [`informers`]: the registry of informers, reference-counted by kind ([`InformerRef`]).
//! - [`informer`]: one kind's watch, its cache and the change handlers registered on it.
//! - [`store`]: the cache of one kind and its indexes (by namespace, by controller owner).
//! - [`object`]: one cached object, JSON text plus the few fields the indexes need.
//! - [`reader`]: a plugin's `get` and `list`, answered from the caches of the kinds it reads.
//! - [`watched`]: an object as listed or watched, parsed once into the tree the cache keeps.
//! - [`sieve`]: with sharding, which children a replica's caches keep whole (those of its own
//!   parents) and which as stubs.
//!
//! Only the watch writes the caches, with one deliberate back edge: the API server's answers
//! to the host's own writes ([`Informer::observe_write`]).

pub mod informer;
pub mod informers;
pub mod object;
pub mod reader;
pub mod sieve;
pub mod store;
pub mod watched;

pub use informer::{Change, Informer, Registration, ResolvedKind};
pub use informers::{DiscoveryError, InformerRef, Informers};
pub use object::{Cached, Meta};
pub use reader::{CacheReader, CallReader, ReadGuard};
pub use sieve::Sieve;
pub use store::{GroupKind, ObjectKey};
pub use watched::Watched;
