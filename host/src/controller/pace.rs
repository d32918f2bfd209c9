//! How fast a plugin's writes may go: per parent and per plugin, token buckets over the
//! reconciles that write (a plan that sends anything). A plugin whose desired state changes on
//! every call (a timestamp, a counter) would otherwise be re-applied as fast as the watch echo
//! of its own write comes back, past the 1 s floor that only bounds `requeue-after`.
//!
//! A refused write is not lost: the parent is reconciled again when the bucket has a token, and
//! the plugin computes its desired state afresh then.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use crate::bucket::Rate;
use crate::bucket::Tokens;

/// The bounds: per parent, and per plugin over all its parents.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// One parent's writes: a normal parent writes a few times while it converges, then not
    /// until something changes.
    pub parent: Rate,
    /// The writes of the plugin's parents that are at their own pace (their burst spent), all
    /// together: a fleet that converges writes a few times per parent and never meets it, a
    /// fleet whose every parent changes on every call does.
    pub plugin: Rate,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            parent: Rate {
                rate: 1.0,
                burst: 5.0,
            },
            plugin: Rate {
                rate: 100.0,
                burst: 1000.0,
            },
        }
    }
}

/// How often a parent is told its writes are being limited.
const SAY_EVERY: Duration = Duration::from_secs(60);

/// Why a write must wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// Until the write may go.
    pub wait: Duration,
    /// Whether it is the plugin's bound that bites (else the parent's).
    pub plugin_wide: bool,
    /// Whether to tell the parent (at most once a minute).
    pub say: bool,
}

struct ParentState {
    tokens: Tokens,
    said: Option<Instant>,
}

/// The write pace of one plugin's parents.
pub struct Pace<K> {
    bounds: Bounds,
    state: Mutex<(Option<Tokens>, HashMap<K, ParentState>)>,
}

impl<K: Hash + Eq + Clone> Pace<K> {
    /// A pace with these bounds.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            state: Mutex::new((None, HashMap::new())),
        }
    }

    /// The bounds.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// Takes a token from the parent's bucket and the plugin's if both have one; else says how
    /// long to wait, taking nothing.
    pub fn admit(&self, key: &K, now: Instant) -> Result<(), Limited> {
        let mut state = self.state.lock().expect("pace lock poisoned");
        let (plugin, parents) = &mut *state;
        let plugin = plugin.get_or_insert_with(|| Tokens::full(&self.bounds.plugin, now));
        let parent = parents.entry(key.clone()).or_insert_with(|| ParentState {
            tokens: Tokens::full(&self.bounds.parent, now),
            said: None,
        });
        let own = parent.tokens.wait(&self.bounds.parent, now);
        // Its burst spent: the parent writes at its steady pace, which the plugin's bucket
        // bounds over all such parents.
        let steady = parent.tokens.left < 2.0;
        let all = match steady {
            true => plugin.wait(&self.bounds.plugin, now),
            false => Duration::ZERO,
        };
        if own.is_zero() && all.is_zero() {
            parent.tokens.left -= 1.0;
            if steady {
                plugin.left -= 1.0;
            }
            return Ok(());
        }
        let say = parent
            .said
            .is_none_or(|at| now.saturating_duration_since(at) >= SAY_EVERY);
        if say {
            parent.said = Some(now);
        }
        Err(Limited {
            wait: own.max(all),
            plugin_wide: all > own,
            say,
        })
    }

    /// Forgets a parent that is gone.
    pub fn forget(&self, key: &K) {
        self.state.lock().expect("pace lock poisoned").1.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_that_writes_on_every_call_should_be_held_to_its_pace() {
        let pace = Pace::new(Bounds::default());
        let start = Instant::now();
        for _ in 0..5 {
            assert_eq!(pace.admit(&"a", start), Ok(()), "the burst");
        }
        let limited = pace.admit(&"a", start).unwrap_err();
        assert_eq!(limited.wait, Duration::from_secs(1));
        assert!(limited.say && !limited.plugin_wide);
        assert!(
            !pace.admit(&"a", start).unwrap_err().say,
            "said once, not on every refusal"
        );
        assert_eq!(
            pace.admit(&"b", start),
            Ok(()),
            "another parent is not held"
        );
        // As fast as a watch echo (every 6 ms) for a minute: one write a second gets through.
        let mut written = 0;
        for tick in 1..=10_083u64 {
            if pace
                .admit(&"a", start + Duration::from_millis(6 * tick))
                .is_ok()
            {
                written += 1;
            }
        }
        assert_eq!(written, 60, "{written} writes in 60 s");
        let later = start + Duration::from_secs(121);
        let refused = std::iter::repeat_with(|| pace.admit(&"a", later))
            .find_map(Result::err)
            .expect("refused once the burst is spent");
        assert!(refused.say, "told again a minute later");
    }

    #[test]
    fn a_converging_fleet_should_not_meet_the_plugins_bound() {
        let pace = Pace::new(Bounds {
            plugin: Rate {
                rate: 1.0,
                burst: 1.0,
            },
            ..Bounds::default()
        });
        let now = Instant::now();
        for n in 0..10_000 {
            for write in 0..4 {
                assert_eq!(pace.admit(&n, now), Ok(()), "parent {n}, write {write}");
            }
        }
    }

    #[test]
    fn a_plugin_should_be_held_to_its_pace_over_all_its_parents() {
        let pace = Pace::new(Bounds {
            parent: Rate {
                rate: 1.0,
                burst: 1.0,
            },
            plugin: Rate {
                rate: 10.0,
                burst: 20.0,
            },
        });
        let now = Instant::now();
        for n in 0..20 {
            assert_eq!(pace.admit(&n, now), Ok(()));
        }
        let limited = pace.admit(&20, now).unwrap_err();
        assert!(limited.plugin_wide);
        assert_eq!(limited.wait, Duration::from_millis(100));
        assert_eq!(pace.admit(&20, now + Duration::from_millis(100)), Ok(()));
        pace.forget(&20);
        assert_eq!(pace.state.lock().unwrap().1.len(), 20);
    }
}
