//! Time to converge, as a user of a parent feels it: from the watch event that shows a new
//! generation of the parent to the end of a reconcile at that generation that went through with
//! nothing left waiting (`Synced=True` at that `observedGeneration`). Queue time, retries,
//! conflicts and waves all count; the generations a host finds when it starts (its initial list)
//! do not, since when they changed is not known.
//!
//! One entry per parent with a generation not yet converged: bounded by the parents, dropped
//! with the parent.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cache::ObjectKey;

/// The generations seen and not yet converged, by parent.
#[derive(Debug, Default)]
pub struct Converge {
    seen: Mutex<HashMap<ObjectKey, (i64, Instant)>>,
}

impl Converge {
    /// A watch event showed `generation` of `key`. The first sighting of a generation counts;
    /// a newer generation before the last converged restarts the clock (the user now waits for
    /// that one).
    pub fn seen(&self, key: &ObjectKey, generation: i64, at: Instant) {
        let mut seen = self.seen.lock().expect("converge lock poisoned");
        match seen.get(key) {
            Some((g, _)) if *g >= generation => {}
            _ => {
                seen.insert(key.clone(), (generation, at));
            }
        }
    }

    /// A reconcile of `key` at `generation` went through with nothing waiting: how long since
    /// that generation (or an older one still pending) was seen, once.
    pub fn converged(&self, key: &ObjectKey, generation: i64, now: Instant) -> Option<Duration> {
        let mut seen = self.seen.lock().expect("converge lock poisoned");
        match seen.get(key) {
            Some((g, since)) if *g <= generation => {
                let elapsed = now.saturating_duration_since(*since);
                seen.remove(key);
                Some(elapsed)
            }
            _ => None,
        }
    }

    /// The parent is gone or no longer this controller's.
    pub fn forget(&self, key: &ObjectKey) {
        self.seen
            .lock()
            .expect("converge lock poisoned")
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_should_count_once_from_its_first_sighting_to_its_convergence() {
        let converge = Converge::default();
        let key = ObjectKey::new("a", "p");
        let t0 = Instant::now();
        converge.seen(&key, 2, t0);
        converge.seen(&key, 2, t0 + Duration::from_secs(1));
        assert_eq!(
            converge.converged(&key, 1, t0 + Duration::from_secs(2)),
            None
        );
        assert_eq!(
            converge.converged(&key, 2, t0 + Duration::from_secs(3)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            converge.converged(&key, 2, t0 + Duration::from_secs(4)),
            None
        );
    }

    #[test]
    fn a_newer_generation_should_restart_the_clock_and_a_deleted_parent_be_dropped() {
        let converge = Converge::default();
        let key = ObjectKey::new("a", "p");
        let t0 = Instant::now();
        converge.seen(&key, 2, t0);
        converge.seen(&key, 3, t0 + Duration::from_secs(5));
        assert_eq!(
            converge.converged(&key, 3, t0 + Duration::from_secs(6)),
            Some(Duration::from_secs(1))
        );
        converge.seen(&key, 4, t0);
        converge.forget(&key);
        assert_eq!(converge.converged(&key, 4, t0), None);
    }
}
