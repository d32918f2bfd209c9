//! Why a parent was queued, for its reconcile's trace: the first cause since its last reconcile
//! began, and when it came, so the trace can show the wait in the queue and link to the cause
//! (kube-rs leaves "what triggered this reconcile" open; the queue itself keeps only keys).
//!
//! Kept only while traces are exported. A cause seen directly (a watch event, a resync, a
//! rollout) holds until the reconcile takes it; a scheduled one (a requeue-after, a retry after
//! backoff) gives way to any direct cause that comes before it is due.
//!
//! The first cause also decides whether that reconcile is traced
//! ([`crate::telemetry::draw_sampled`]): one that will not be holds only that decision, and
//! none of its causes is made (each names the object it saw, in three strings), so a low
//! sampling ratio costs little per event.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use opentelemetry::KeyValue;

use crate::cache::{Cached, ObjectKey};

/// What queued a parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// A watch event of the parent itself.
    Parent(Seen),
    /// A watch event of one of its children.
    Child(Seen),
    /// A change to an object its last reconcile read.
    Dependency(Seen),
    /// The periodic resync.
    Resync,
    /// The plugin asked to be called again after a delay.
    RequeueAfter,
    /// The last reconcile failed and is retried after backoff.
    Retry,
    /// A rollout moved it to another revision, or the parent kind's schema changed.
    Route,
    /// The host started and listed it.
    Initial,
}

/// The object a watch event showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `Kind`.
    pub kind: String,
    /// `namespace/name`, or `name`.
    pub object: String,
    /// The version the event carried.
    pub resource_version: String,
}

impl Seen {
    /// What `cached` (of kind `kind`) is, as an event showed it.
    pub fn of(kind: &str, cached: &Cached) -> Self {
        Self {
            kind: kind.to_owned(),
            object: cached.meta.key.to_string(),
            resource_version: cached.meta.resource_version().to_owned(),
        }
    }
}

impl Trigger {
    /// Its name, as the trace shows it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Parent(_) => "watch",
            Self::Child(_) => "child",
            Self::Dependency(_) => "dependency",
            Self::Resync => "resync",
            Self::RequeueAfter => "requeue-after",
            Self::Retry => "retry",
            Self::Route => "route",
            Self::Initial => "initial",
        }
    }

    /// The attributes of the span that stands for it.
    pub fn attributes(&self) -> Vec<KeyValue> {
        let mut attributes = vec![KeyValue::new("trigger", self.name())];
        if let Self::Parent(seen) | Self::Child(seen) | Self::Dependency(seen) = self {
            attributes.push(KeyValue::new("kind", seen.kind.clone()));
            attributes.push(KeyValue::new("object", seen.object.clone()));
            attributes.push(KeyValue::new(
                "resource_version",
                seen.resource_version.clone(),
            ));
        }
        attributes
    }

    /// Whether it was scheduled rather than seen: a direct cause replaces it.
    fn scheduled(&self) -> bool {
        matches!(self, Self::RequeueAfter | Self::Retry)
    }
}

/// What a queued parent's next reconcile holds for its trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// It is not traced.
    Unsampled,
    /// It is traced, and this caused it, taking effect at that moment.
    Cause(Trigger, Instant),
}

impl Held {
    /// Whether the reconcile is traced.
    pub fn sampled(&self) -> bool {
        matches!(self, Self::Cause(..))
    }
}

/// The pending cause of each queued parent.
#[derive(Debug)]
pub struct Triggers {
    pending: Mutex<HashMap<ObjectKey, Held>>,
    /// Draws whether a reconcile is traced.
    sample: fn() -> bool,
}

impl Default for Triggers {
    fn default() -> Self {
        Self {
            pending: Mutex::default(),
            sample: crate::telemetry::draw_sampled,
        }
    }
}

impl Triggers {
    /// `key` was queued because of `trigger`, which takes effect `at` (now, or when a delay
    /// ends). Does nothing while traces are not exported.
    pub fn record(&self, key: &ObjectKey, trigger: Trigger, at: Instant) {
        let scheduled = trigger.scheduled();
        self.hold(key, scheduled, || trigger, at);
    }

    /// [`Triggers::record`] for a cause seen (a watch event, never a scheduled one), making
    /// the trigger only while traces are exported and no seen cause is held already: the
    /// watch handlers call this for every event, and a trigger names the object it saw.
    pub fn record_with(&self, key: &ObjectKey, trigger: impl FnOnce() -> Trigger, at: Instant) {
        self.hold(key, false, trigger, at);
    }

    /// Holds the cause `make` makes, unless what is held already stays: a reconcile not traced
    /// stays so, a cause seen stays, and so does a scheduled one against another scheduled one.
    /// The first cause draws whether the reconcile is traced.
    fn hold(&self, key: &ObjectKey, scheduled: bool, make: impl FnOnce() -> Trigger, at: Instant) {
        if !crate::telemetry::enabled() {
            return;
        }
        let mut pending = self.pending.lock().expect("trigger lock poisoned");
        let held = match pending.get(key) {
            None if !(self.sample)() => Held::Unsampled,
            None => Held::Cause(make(), at),
            Some(Held::Cause(held, _)) if held.scheduled() && !scheduled => Held::Cause(make(), at),
            Some(_) => return,
        };
        pending.insert(key.clone(), held);
    }

    /// What the reconcile of `key` that begins now holds: whether it is traced, and if so its
    /// cause and since when it waited.
    pub fn take(&self, key: &ObjectKey) -> Option<Held> {
        // Nothing is held while traces are not exported (`hold`), so no lock is needed either.
        if !crate::telemetry::enabled() {
            return None;
        }
        self.pending
            .lock()
            .expect("trigger lock poisoned")
            .remove(key)
    }

    /// The parent is gone.
    pub fn forget(&self, key: &ObjectKey) {
        if !crate::telemetry::enabled() {
            return;
        }
        self.pending
            .lock()
            .expect("trigger lock poisoned")
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(held: Held) -> Option<Trigger> {
        match held {
            Held::Cause(trigger, _) => Some(trigger),
            Held::Unsampled => None,
        }
    }

    fn seen(version: &str) -> Trigger {
        Trigger::Parent(Seen {
            kind: "WebApp".into(),
            object: "a/web".into(),
            resource_version: version.into(),
        })
    }

    #[test]
    fn the_first_seen_cause_should_hold_and_a_scheduled_one_give_way() {
        crate::telemetry::enable_for_tests();
        let triggers = Triggers::default();
        let key = ObjectKey::new("a", "web");
        let t0 = Instant::now();
        triggers.record(&key, Trigger::RequeueAfter, t0);
        triggers.record(&key, seen("7"), t0);
        triggers.record(&key, seen("8"), t0);
        triggers.record(&key, Trigger::Retry, t0);
        let Some(Held::Cause(cause, _)) = triggers.take(&key) else {
            panic!("a cause");
        };
        assert_eq!(
            cause,
            seen("7"),
            "the first event seen, not the scheduled requeue"
        );
        assert_eq!(triggers.take(&key), None, "taken once");
        let attributes = cause.attributes();
        assert!(attributes.contains(&KeyValue::new("resource_version", "7")));
        assert!(attributes.contains(&KeyValue::new("trigger", "watch")));
    }

    #[test]
    fn an_event_seen_should_not_make_a_cause_while_one_seen_is_held() {
        crate::telemetry::enable_for_tests();
        let triggers = Triggers::default();
        let key = ObjectKey::new("a", "web");
        let t0 = Instant::now();
        triggers.record(&key, Trigger::RequeueAfter, t0);
        triggers.record_with(&key, || seen("7"), t0);
        triggers.record_with(&key, || panic!("made while event 7 is held"), t0);
        assert_eq!(triggers.take(&key).and_then(cause), Some(seen("7")));
        triggers.record_with(&key, || seen("8"), t0);
        assert_eq!(triggers.take(&key).and_then(cause), Some(seen("8")));
        triggers.record(&key, Trigger::Retry, t0);
        triggers.record(&key, Trigger::RequeueAfter, t0);
        assert_eq!(
            triggers.take(&key).and_then(cause),
            Some(Trigger::Retry),
            "the first scheduled cause holds against another"
        );
    }

    #[test]
    fn a_reconcile_not_sampled_should_hold_no_cause_until_it_begins() {
        crate::telemetry::enable_for_tests();
        let triggers = Triggers {
            sample: || false,
            ..Triggers::default()
        };
        let key = ObjectKey::new("a", "web");
        let t0 = Instant::now();
        triggers.record(&key, Trigger::RequeueAfter, t0);
        triggers.record_with(
            &key,
            || panic!("a cause made for a reconcile not traced"),
            t0,
        );
        triggers.record(&key, Trigger::Retry, t0);
        assert_eq!(triggers.take(&key), Some(Held::Unsampled));
        assert_eq!(triggers.take(&key), None, "taken once");
    }
}
