//! Giving the allocator's free pages back to the system.
//!
//! glibc keeps what is freed in the middle of its arenas (one per thread that ever contended)
//! for reuse, and gives back only the top of the main heap by itself. The host has moments
//! that free far more than it will soon allocate again: a (re)list, which parses every object
//! of a kind into a `Value` only to keep its compressed text; a resieve, which drops the text
//! of most of a replica's children when it joins a ring; and a burst of reconciles (a first
//! pass over every parent, a convergence), whose temporaries — each parent and its children
//! parsed, the plan, the request bodies — are spread over the arenas of every worker thread.
//! After each, [`give_back_freed_memory`] returns the free pages: a few milliseconds, at
//! moments that are rare. What no trim returns is a page one long-lived block keeps, which is
//! why the cache makes few such blocks and lists in small pages (`cache::informers`).
//! mimalloc, measured in glibc's place, held more, idle and at 10,000 parents
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
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
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
