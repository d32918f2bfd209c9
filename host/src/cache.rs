//! The host's view of the cluster: one watch and one cache per kind, shared by every plugin
//! that needs the kind, started by the first user and stopped after the last.
//!
//! - [`informers`]: the registry of informers, reference-counted by kind ([`InformerRef`]).
//! - [`informer`]: one kind's watch, its cache and the change handlers registered on it.
//! - [`store`]: the cache of one kind and its indexes (by namespace, by controller owner).
//! - [`object`]: one cached object, JSON text plus the few fields the indexes need.
//! - [`reader`]: a plugin's `get` and `list`, answered from the caches of the kinds it reads.
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

pub use informer::{Informer, Registration, ResolvedKind};
pub use informers::{DiscoveryError, InformerRef, Informers};
pub use object::{Cached, Meta};
pub use reader::{CacheReader, CallReader, ReadGuard};
pub use sieve::Sieve;
pub use store::{GroupKind, ObjectKey};

/// Returns the heap's free pages to the system. glibc's allocator keeps what is freed in the
/// middle of its arenas for reuse, and two moments free far more than the host will allocate
/// again: a (re)list, which parses every object of a kind into a `Value` only to keep its
/// compressed text (at 30,000 cached objects the trim gives back ~190 bytes an object), and a
/// resieve, which drops the text of most of a replica's children when it joins a ring. Both are
/// rare, and the trim takes a few milliseconds.
pub(crate) fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}
