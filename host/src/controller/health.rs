//! How one revision has behaved since it was prepared: counters of its calls and what went
//! wrong, and what its shadow calls found. A rollout compares two revisions over the same
//! window from two [`Snapshot`]s of each.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::shadow::Difference;
use crate::cache::ObjectKey;
use crate::model::PluginError;
use crate::runtime::CallErrorKind;

/// How many parents' differences a revision keeps to show.
pub const DIFFS_KEPT: usize = 5;
/// How many differences it keeps per parent.
pub const DIFFS_PER_PARENT: usize = 3;

/// The counters of one revision.
#[derive(Debug, Default)]
pub struct Health {
    calls: AtomicU64,
    failed_calls: AtomicU64,
    errors: AtomicU64,
    synced_false: AtomicU64,
    fights: AtomicU64,
    shadowed: AtomicU64,
    diverged: AtomicU64,
    shadow: Mutex<Shadow>,
}

#[derive(Debug, Default)]
struct Shadow {
    /// Every parent on which a shadow call diverged, since the revision was prepared.
    parents: HashSet<ObjectKey>,
    /// The first parents' differences.
    diffs: Vec<ParentDiff>,
}

/// What a shadow call found on one parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentDiff {
    /// The parent.
    pub parent: ObjectKey,
    /// How many fields differed.
    pub count: usize,
    /// The first of them.
    pub shown: Vec<Difference>,
}

/// The counters at one moment; the difference of two is a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Calls of the plugin that served a parent (shadow calls not included).
    pub calls: u64,
    /// Calls the sandbox ended: traps, deadlines, memory and other limits, invalid responses.
    pub failed_calls: u64,
    /// Errors the plugin returned, transient or permanent.
    pub errors: u64,
    /// Reconciles that ended with `Synced=False` on the parent.
    pub synced_false: u64,
    /// Fight breakers that tripped.
    pub fights: u64,
    /// Shadow calls compared with the stable revision's.
    pub shadowed: u64,
    /// Shadow calls whose plan differed, or that failed where the stable one did not.
    pub diverged: u64,
}

impl Snapshot {
    /// The counters in the order of the fields, for a compact text form.
    pub fn to_array(self) -> [u64; 7] {
        [
            self.calls,
            self.failed_calls,
            self.errors,
            self.synced_false,
            self.fights,
            self.shadowed,
            self.diverged,
        ]
    }

    /// The counters from [`Snapshot::to_array`]'s form.
    pub fn from_array(fields: [u64; 7]) -> Self {
        let [
            calls,
            failed_calls,
            errors,
            synced_false,
            fights,
            shadowed,
            diverged,
        ] = fields;
        Self {
            calls,
            failed_calls,
            errors,
            synced_false,
            fights,
            shadowed,
            diverged,
        }
    }
}

impl std::ops::Add for Snapshot {
    type Output = Snapshot;
    fn add(self, other: Snapshot) -> Snapshot {
        Snapshot {
            calls: self.calls + other.calls,
            failed_calls: self.failed_calls + other.failed_calls,
            errors: self.errors + other.errors,
            synced_false: self.synced_false + other.synced_false,
            fights: self.fights + other.fights,
            shadowed: self.shadowed + other.shadowed,
            diverged: self.diverged + other.diverged,
        }
    }
}

impl std::ops::Sub for Snapshot {
    type Output = Snapshot;
    fn sub(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            calls: self.calls.saturating_sub(earlier.calls),
            failed_calls: self.failed_calls.saturating_sub(earlier.failed_calls),
            errors: self.errors.saturating_sub(earlier.errors),
            synced_false: self.synced_false.saturating_sub(earlier.synced_false),
            fights: self.fights.saturating_sub(earlier.fights),
            shadowed: self.shadowed.saturating_sub(earlier.shadowed),
            diverged: self.diverged.saturating_sub(earlier.diverged),
        }
    }
}

impl Health {
    /// A call that served a parent.
    pub fn called(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// A call that failed, sorted by what failed: the plugin (its own error) or the sandbox.
    /// A failure of the host's (a broken engine) counts against no revision.
    pub fn failed(&self, kind: &CallErrorKind) {
        match kind {
            CallErrorKind::Plugin(PluginError::Transient(_) | PluginError::Permanent(_)) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
            CallErrorKind::Host(_) => {}
            _ => {
                self.failed_calls.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A reconcile that showed `Synced=False` on its parent.
    pub fn synced_false(&self) {
        self.synced_false.fetch_add(1, Ordering::Relaxed);
    }

    /// Fight breakers that tripped.
    pub fn fought(&self, trips: usize) {
        self.fights.fetch_add(trips as u64, Ordering::Relaxed);
    }

    /// A shadow call on `parent` whose plan differed from the stable one's in `count` fields
    /// (zero: it agreed), `shown` the first of them.
    pub fn shadowed(&self, parent: &ObjectKey, count: usize, shown: Vec<Difference>) {
        self.shadowed.fetch_add(1, Ordering::Relaxed);
        if count == 0 {
            return;
        }
        self.diverged.fetch_add(1, Ordering::Relaxed);
        let mut shadow = self.shadow.lock().expect("health lock poisoned");
        shadow.parents.insert(parent.clone());
        let diff = ParentDiff {
            parent: parent.clone(),
            count,
            shown: shown.into_iter().take(DIFFS_PER_PARENT).collect(),
        };
        if let Some(kept) = shadow.diffs.iter_mut().find(|d| d.parent == *parent) {
            *kept = diff;
        } else if shadow.diffs.len() < DIFFS_KEPT {
            shadow.diffs.push(diff);
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            calls: load(&self.calls),
            failed_calls: load(&self.failed_calls),
            errors: load(&self.errors),
            synced_false: load(&self.synced_false),
            fights: load(&self.fights),
            shadowed: load(&self.shadowed),
            diverged: load(&self.diverged),
        }
    }

    /// How many parents diverged in shadow, and the first parents' differences.
    pub fn divergence(&self) -> (usize, Vec<ParentDiff>) {
        let shadow = self.shadow.lock().expect("health lock poisoned");
        (shadow.parents.len(), shadow.diffs.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::shadow::Difference;
    use std::time::Duration;

    fn diff(field: &str) -> Difference {
        Difference {
            target: "ConfigMap ns/x".into(),
            field: field.into(),
            stable: Some("1".into()),
            candidate: Some("2".into()),
        }
    }

    #[test]
    fn failures_should_count_against_the_plugin_not_the_host() {
        let health = Health::default();
        let before = health.snapshot();
        health.called();
        health.failed(&CallErrorKind::Deadline(Duration::from_secs(1)));
        health.failed(&CallErrorKind::Plugin(PluginError::Permanent("no".into())));
        health.failed(&CallErrorKind::Host("engine".into()));
        health.synced_false();
        health.fought(2);
        let window = health.snapshot() - before;
        assert_eq!(
            window,
            Snapshot {
                calls: 1,
                failed_calls: 1,
                errors: 1,
                synced_false: 1,
                fights: 2,
                shadowed: 0,
                diverged: 0,
            }
        );
    }

    #[test]
    fn shadow_differences_should_be_counted_per_parent_and_the_first_kept() {
        let health = Health::default();
        let key = |n: usize| ObjectKey::new("ns", format!("p{n}"));
        health.shadowed(&key(0), 0, vec![]);
        for n in 0..8 {
            health.shadowed(
                &key(n),
                4,
                vec![diff(".a"), diff(".b"), diff(".c"), diff(".d")],
            );
        }
        health.shadowed(&key(1), 1, vec![diff(".z")]);
        let snapshot = health.snapshot();
        assert_eq!((snapshot.shadowed, snapshot.diverged), (10, 9));
        let (parents, diffs) = health.divergence();
        assert_eq!(parents, 8);
        assert_eq!(diffs.len(), DIFFS_KEPT);
        assert_eq!(diffs[0].shown.len(), DIFFS_PER_PARENT);
        assert_eq!(
            (diffs[1].count, diffs[1].shown[0].field.as_str()),
            (1, ".z"),
            "a parent's latest difference replaces its earlier one"
        );
    }
}
