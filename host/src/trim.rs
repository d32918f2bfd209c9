//! Giving the allocator's free pages back to the system.
//!
//! The host's allocator is jemalloc (`main.rs`), whose background thread gives freed pages
//! back about a second after they are freed. The host has moments that free far more than it
//! will soon allocate again: a (re)list, which parses every object of a kind into a `Value`
//! only to keep its compressed text; a resieve, which drops the text of most of a replica's
//! children when it joins a ring; and a burst of reconciles (a first pass over every parent, a
//! convergence), whose temporaries — each parent and its children parsed, the plan, the
//! request bodies — are spread over every worker thread.
//! After each, [`give_back_freed_memory`] returns the free pages at once rather than over the
//! decay: a few milliseconds, at moments that are rare. (Under glibc's malloc, which kept what
//! was freed in the middle of its arenas until `malloc_trim`, these trims were what gave
//! memory back at all.) What no trim returns is a page one long-lived block keeps, which is
//! why the cache makes few such blocks and lists in small pages (`cache::informers`).
//! mimalloc, measured before jemalloc was taken, held more, idle and at 10,000 parents
//! (docs/BENCHMARKS.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::controller::workers::Stop;

/// Reconciles finished since the process started.
static WORK: AtomicU64 = AtomicU64::new(0);

/// Reconciles since the last trim that make a burst worth a trim once it is over.
const BURST: u64 = 512;

/// Counts one finished reconcile towards the trim after its burst.
pub fn worked() {
    WORK.fetch_add(1, Ordering::Relaxed);
}

/// Returns the heap's free pages to the system.
pub fn give_back_freed_memory() {
    #[cfg(not(feature = "heap-profile"))]
    if let Err(code) = purge_jemalloc() {
        tracing::debug!(code, "jemalloc refused to purge its arenas");
    }
    // The heap profile's build allocates through glibc (dhat wraps the system allocator).
    #[cfg(all(feature = "heap-profile", target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Purges every jemalloc arena's unused dirty pages now; the error code if jemalloc refused.
#[cfg(not(feature = "heap-profile"))]
fn purge_jemalloc() -> Result<(), std::ffi::c_int> {
    // SAFETY: the name is a valid C string, and purging reads and writes no value (both null,
    // as the control requires). In a binary whose allocator is not jemalloc (tests), it only
    // purges jemalloc's own, empty, arenas.
    let code = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(), // every arena (`MALLCTL_ARENAS_ALL`)
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if code == 0 { Ok(()) } else { Err(code) }
}

/// Trims once after each burst of reconciles: at least [`BURST`] since the last trim, then a
/// whole `quiet` period without one. Under steady load it never trims (the freed memory is
/// reused at once); an idle host, once. Runs until `stop`.
pub async fn after_bursts(quiet: Duration, mut stop: Stop) {
    let mut bursts = Bursts::default();
    loop {
        tokio::select! {
            () = stop.stopped() => return,
            () = tokio::time::sleep(quiet) => {}
        }
        if bursts.tick(WORK.load(Ordering::Relaxed)) {
            give_back_freed_memory();
        }
    }
}

/// When a burst is over, from the count of finished reconciles read once per quiet period.
#[derive(Debug, Default)]
struct Bursts {
    /// The count at the previous reading.
    last: u64,
    /// The count at the last trim.
    trimmed: u64,
}

impl Bursts {
    /// Whether to trim now, the count being `now`.
    fn tick(&mut self, now: u64) -> bool {
        let idle = now == self.last;
        self.last = now;
        if idle && now - self.trimmed >= BURST {
            self.trimmed = now;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "heap-profile"))]
    #[test]
    fn a_trim_should_purge_every_arena_through_a_control_jemalloc_knows() {
        // A misspelt control (or one a jemalloc upgrade renamed) is refused with ENOENT, and
        // the trims would silently give nothing back.
        assert_eq!(purge_jemalloc(), Ok(()));
        assert_eq!(
            purge_jemalloc(),
            Ok(()),
            "and again, with nothing left to purge"
        );
    }

    #[test]
    fn a_burst_should_be_trimmed_once_when_it_is_over() {
        let mut bursts = Bursts::default();
        assert!(!bursts.tick(300), "still busy");
        assert!(!bursts.tick(900), "still busy");
        assert!(bursts.tick(900), "a quiet period after 900 reconciles");
        assert!(!bursts.tick(900), "nothing freed since");
    }

    #[test]
    fn steady_trickles_should_not_trim_until_they_add_up_to_a_burst() {
        let mut bursts = Bursts::default();
        assert!(!bursts.tick(10));
        assert!(!bursts.tick(10), "quiet, but only 10 reconciles");
        assert!(!bursts.tick(600));
        assert!(bursts.tick(600), "quiet after 600");
    }

    #[test]
    fn steady_load_should_never_trim() {
        let mut bursts = Bursts::default();
        for now in (1..100).map(|i| i * 1000) {
            assert!(!bursts.tick(now), "busy at {now}");
        }
    }
}
