//! How a plugin's parents stand, as their own conditions say, for the ReconcilePlugin's status:
//! how many it serves, how many are synced at their generation, failing or paused; and, while
//! the plugin is suspended, showing so on each parent ([`Controller::show_paused`]).
//!
//! Counted from the parent cache, not from the reconciles this replica made: what a user sees
//! with `kubectl get` is what is counted, whichever replica leads, and across restarts. Each count
//! reads only the parents that changed since the last ([`Tally`]): the lifecycle counts every
//! plugin's parents every 10 s, at rest too, and reading a cached parent means decompressing
//! and parsing it.

use std::sync::{Arc, Weak};

use serde_json::Value;

use super::Controller;
use super::queue::Priority;
use super::route::Route;
use super::wiring::Wiring;
use crate::cache::{Cached, ObjectKey};
use crate::model::SYNCED;
use crate::model::record::{LastReconcile, Outcome, PAUSED_REASON};

/// How one parent stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// `Synced=True` at its current generation.
    Synced,
    /// The last reconcile failed (`Synced=False` for any reason but waiting or pause).
    Failing,
    /// `Synced=False` because the plugin is suspended.
    Paused,
    /// Not reconciled at its generation yet, or waiting on a wave of children.
    Pending,
}

/// The parents of a plugin, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Standing {
    /// Parents the plugin's selection admits.
    pub served: u32,
    /// Of those, synced at their generation.
    pub synced: u32,
    /// Failing.
    pub failing: u32,
    /// Shown as paused.
    pub paused: u32,
    /// Whether the host can show a pause on these parents at all (their kind admits the
    /// host's conditions).
    pub shows_pause: bool,
}

/// The last count's verdict on each parent, by the cached object it was read from: a cached
/// object never changes (a change caches a new one), so a parent whose object is the same one
/// stands as it did, as long as the route, and with it the selection, is the same too.
pub(super) struct Tally<R> {
    /// The route counted under; a weak pointer keeps its address from being reused.
    route: Weak<Route<R>>,
    /// The parent store's [`crate::cache::store::Store::changes`] counted at, and what it
    /// counted: while neither the store nor the route changed, a count walks nothing at all.
    changes: u64,
    counted: Standing,
    /// Each object counted, ordered by address, with what it says (`None`: the selection
    /// left it out). The weak pointer keeps the address from being reused by another object
    /// while the verdict is kept (the object's contents are freed with the store's last
    /// reference). Sixteen bytes a parent, where a hash map took 35 to 60.
    seen: Vec<(Weak<Cached>, Option<State>)>,
}

impl<R> Default for Tally<R> {
    fn default() -> Self {
        Self {
            route: Weak::new(),
            changes: 0,
            counted: Standing::default(),
            seen: Vec::new(),
        }
    }
}

impl<R> Tally<R> {
    /// Counts the `parents` of a store at `changes` into `standing` under `route`, reading
    /// only those not counted as they are now (and listing none if the store did not change
    /// since the last count); returns how many it read.
    fn count(
        &mut self,
        route: &Arc<Route<R>>,
        changes: u64,
        parents: impl FnOnce() -> Vec<Arc<Cached>>,
        standing: &mut Standing,
    ) -> usize {
        let same_route = std::ptr::eq(self.route.as_ptr(), Arc::as_ptr(route));
        if same_route && changes == self.changes {
            *standing = Standing {
                shows_pause: standing.shows_pause,
                ..self.counted
            };
            return 0;
        }
        let last = if same_route {
            std::mem::take(&mut self.seen)
        } else {
            Vec::new()
        };
        let parents = parents();
        let mut seen = Vec::with_capacity(parents.len());
        let mut read = 0;
        for cached in parents {
            let at = Arc::as_ptr(&cached);
            let state = match last.binary_search_by_key(&at, |(object, _)| object.as_ptr()) {
                Ok(i) => last[i].1,
                Err(_) => {
                    read += 1;
                    let parent = cached.value();
                    route
                        .selection
                        .selects(&cached.meta.key, &parent)
                        .then(|| state_of(&parent))
                }
            };
            if let Some(state) = state {
                standing.served += 1;
                match state {
                    State::Synced => standing.synced += 1,
                    State::Failing => standing.failing += 1,
                    State::Paused => standing.paused += 1,
                    State::Pending => {}
                }
            }
            seen.push((Arc::downgrade(&cached), state));
        }
        seen.sort_unstable_by_key(|(object, _)| object.as_ptr());
        self.route = Arc::downgrade(route);
        self.seen = seen;
        self.changes = changes;
        self.counted = *standing;
        read
    }
}

impl Controller {
    /// How the parents the plugin selects stand now; `None` before a revision serves, and for
    /// a decorator, whose objects carry nothing of the host's to count by.
    pub fn standing(&self) -> Option<Standing> {
        if self.decorator {
            return None;
        }
        let route = self.route.read().expect("route lock poisoned").clone()?;
        let mut standing = Standing {
            shows_pause: route.stable.wiring().schema().fields().conditions.is_some(),
            ..Standing::default()
        };
        let store = route.stable.wiring().parents().store();
        // Read before listing: a change meanwhile makes the next call count again.
        let changes = store.changes();
        self.tally.lock().expect("tally lock poisoned").count(
            &route,
            changes,
            || store.list("", &Default::default()),
            &mut standing,
        );
        Some(standing)
    }

    /// Forgets the last count ([`Controller::standing`]): a replica that stops counting (it no
    /// longer leads) would otherwise keep, for each parent replaced since, the allocation its
    /// verdict's weak pointer holds.
    pub fn forget_standing(&self) {
        *self.tally.lock().expect("tally lock poisoned") = Tally::default();
    }

    /// Shows the suspension on every selected parent that does not show it yet, as the
    /// stable revision (its identity, its view of the kind's status schema); `owner` names the
    /// ReconcilePlugin. Called by the leader once the controller is suspended, so no
    /// reconcile in flight can write over it. Returns how many parents it wrote.
    pub async fn show_paused(&self, owner: &str) -> usize {
        let Some(route) = self.route.read().expect("route lock poisoned").clone() else {
            return 0;
        };
        let mut written = 0;
        for cached in route
            .stable
            .wiring()
            .parents()
            .store()
            .list("", &Default::default())
        {
            let parent = cached.value();
            if route.selection.selects(&cached.meta.key, &parent)
                && route.stable.reconciler().show_paused(&parent, owner).await
            {
                written += 1;
            }
        }
        written
    }

    /// How soon this replica reconciles the parent `key` it has just gained, whose cache
    /// `wiring` holds: ahead of the parents at rest (`Normal`) when it is [`behind`], else
    /// `Low`, like the parents of an initial list. A decorator's objects carry nothing of the
    /// host's to tell by: all `Low`.
    pub(super) fn gained_priority(&self, wiring: &Wiring, key: &ObjectKey) -> Priority {
        if self.decorator {
            return Priority::Low;
        }
        let parent = wiring.parents().store().get(&key.namespace, &key.name);
        if parent.is_some_and(|cached| behind(&cached.value())) {
            Priority::Normal
        } else {
            Priority::Low
        }
    }

    /// Queues the parents that still show a suspension, once the plugin has resumed: their
    /// next reconcile puts `Synced` back (a plugin that ignores its parents' status changes
    /// would not be woken by the write that showed it).
    pub fn wake_paused(&self) {
        let Some(route) = self.route.read().expect("route lock poisoned").clone() else {
            return;
        };
        for cached in route
            .stable
            .wiring()
            .parents()
            .store()
            .list("", &Default::default())
        {
            if state_of(&cached.value()) == State::Paused {
                self.queue.add(cached.meta.key.clone(), Priority::Low);
            }
        }
    }
}

/// How `parent` stands: by the host's `Synced` condition where the kind has conditions, else
/// by the host's record of its last reconcile.
pub fn state_of(parent: &Value) -> State {
    let generation = parent["metadata"]["generation"].as_i64();
    let synced = parent["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == SYNCED));
    if let Some(synced) = synced {
        let observed = synced["observedGeneration"]
            .as_i64()
            .or_else(|| parent["status"]["observedGeneration"].as_i64());
        let current = observed.is_none() || observed == generation;
        return match (synced["status"].as_str(), synced["reason"].as_str()) {
            (Some("True"), _) if current => State::Synced,
            (Some("False"), Some(PAUSED_REASON)) => State::Paused,
            (Some("False"), Some("Progressing")) => State::Pending,
            (Some("False"), _) => State::Failing,
            _ => State::Pending,
        };
    }
    match LastReconcile::of(parent) {
        Some(record) if matches!(record.outcome, Outcome::Failed(_)) => State::Failing,
        Some(record) if Some(record.generation) == generation => State::Synced,
        _ => State::Pending,
    }
}

/// Whether `parent` holds a generation the host has not reconciled yet: past the one its
/// `Synced` condition (or `status.observedGeneration`) or the host's record of its last
/// reconcile names, or with no trace of any reconcile at all. A replica that gains parents
/// queues these ahead of the rest: their specs changed while they changed owner, and someone
/// waits on them, where the others are at rest.
pub fn behind(parent: &Value) -> bool {
    let Some(generation) = parent["metadata"]["generation"].as_i64() else {
        // No generation to compare (a kind without one): nothing says it waits.
        return false;
    };
    let status_observed = parent["status"]["observedGeneration"].as_i64();
    let synced = parent["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == SYNCED));
    let observed = match synced {
        // As `state_of` reads it: a condition that names no generation is taken as current.
        Some(synced) => synced["observedGeneration"].as_i64().or(status_observed),
        None => match LastReconcile::of(parent) {
            Some(record) => Some(record.generation),
            None => return status_observed.is_none_or(|o| o < generation),
        },
    };
    observed.is_some_and(|o| o < generation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::route::{Assignment, Selection};
    use crate::model::record::LAST_RECONCILE;
    use crate::selector::Selector;
    use serde_json::json;

    /// A cached parent `name` labelled `tier`, whose `Synced` condition is `synced` (status
    /// and reason) at its generation.
    fn cached(name: &str, tier: &str, synced: (&str, &str)) -> Arc<Cached> {
        Arc::new(Cached::new(json!({
            "metadata": {"namespace": "a", "name": name, "resourceVersion": "1",
                         "generation": 1, "labels": {"tier": tier}},
            "status": {"conditions": [{"type": "Synced", "status": synced.0,
                                       "reason": synced.1, "observedGeneration": 1}]},
        })))
    }

    fn route(selector: &str) -> Arc<Route<&'static str>> {
        let selection = Selection {
            selector: Selector::parse(selector).expect("a selector"),
            ..Selection::default()
        };
        Arc::new(Route::to("stable", Assignment::All, selection))
    }

    /// The standing `tally` counts of `parents`, a store at `changes`, and how many parents it
    /// read for it.
    fn count(
        tally: &mut Tally<&'static str>,
        route: &Arc<Route<&'static str>>,
        changes: u64,
        parents: &[Arc<Cached>],
    ) -> (Standing, usize) {
        let mut standing = Standing::default();
        let read = tally.count(route, changes, || parents.to_vec(), &mut standing);
        (standing, read)
    }

    #[test]
    fn a_count_should_read_only_the_parents_that_changed_since_the_last() {
        let ok = ("True", "ReconcileSuccess");
        let mut parents = vec![
            cached("p1", "web", ok),
            cached("p2", "web", ("False", "ReconcileError")),
            cached("p3", "web", ("False", PAUSED_REASON)),
            cached("p4", "db", ok),
        ];
        let web = route("tier=web");
        let mut tally = Tally::default();
        let counted = |served, synced, failing, paused| Standing {
            served,
            synced,
            failing,
            paused,
            shows_pause: false,
        };
        assert_eq!(
            count(&mut tally, &web, 1, &parents),
            (counted(3, 1, 1, 1), 4)
        );
        let mut standing = Standing {
            shows_pause: true,
            ..Standing::default()
        };
        let read = tally.count(&web, 1, || panic!("listed"), &mut standing);
        assert_eq!(
            (standing, read),
            (
                Standing {
                    shows_pause: true,
                    ..counted(3, 1, 1, 1)
                },
                0
            ),
            "the store did not change: nothing listed, the caller's shows_pause kept"
        );
        assert_eq!(
            count(&mut tally, &web, 2, &parents),
            (counted(3, 1, 1, 1), 0),
            "the store changed, but not these parents: nothing read"
        );
        // The failing parent is fixed and the paused one deleted: only the new object is read.
        parents[1] = cached("p2", "web", ok);
        parents.remove(2);
        assert_eq!(
            count(&mut tally, &web, 3, &parents),
            (counted(2, 2, 0, 0), 1)
        );
        assert_eq!(
            tally.seen.len(),
            3,
            "a deleted parent's verdict is not kept"
        );
        // A new route may select otherwise: everything is read again, at the same changes too.
        let every = route("");
        assert_eq!(
            count(&mut tally, &every, 3, &parents),
            (counted(3, 3, 0, 0), 3)
        );
        assert_eq!(count(&mut tally, &every, 4, &parents).1, 0);
    }

    fn with_synced(status: &str, reason: &str, observed: i64) -> Value {
        json!({"metadata": {"generation": 2}, "status": {"conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "Synced", "status": status, "reason": reason, "observedGeneration": observed},
        ]}})
    }

    #[test]
    fn the_synced_condition_should_say_how_a_parent_stands() {
        assert_eq!(
            state_of(&with_synced("True", "ReconcileSuccess", 2)),
            State::Synced
        );
        assert_eq!(
            state_of(&with_synced("True", "ReconcileSuccess", 1)),
            State::Pending
        );
        assert_eq!(
            state_of(&with_synced("False", "ReconcileError", 2)),
            State::Failing
        );
        // A failure shown at an older generation is still the last word.
        assert_eq!(
            state_of(&with_synced("False", "ApplyError", 1)),
            State::Failing
        );
        assert_eq!(
            state_of(&with_synced("False", PAUSED_REASON, 2)),
            State::Paused
        );
        assert_eq!(
            state_of(&with_synced("False", "Progressing", 2)),
            State::Pending
        );
        assert_eq!(
            state_of(&json!({"metadata": {"generation": 1}})),
            State::Pending
        );
    }

    #[test]
    fn a_parent_should_be_behind_when_its_generation_passed_what_was_reconciled() {
        assert!(behind(&with_synced("True", "ReconcileSuccess", 1)));
        assert!(
            behind(&with_synced("False", "ApplyError", 1)),
            "failed at the old one"
        );
        assert!(!behind(&with_synced("True", "ReconcileSuccess", 2)));
        assert!(
            !behind(&with_synced("False", "ReconcileError", 2)),
            "failing at its generation: its retry is not news"
        );
        assert!(
            behind(&json!({"metadata": {"generation": 1}})),
            "never reconciled"
        );
        assert!(
            !behind(&json!({"metadata": {}})),
            "no generation to compare"
        );
        let record = |generation: i64| {
            json!({"metadata": {"generation": 3, "annotations": {LAST_RECONCILE: format!(
                r#"{{"plugin":"p","version":"1","digest":"sha256:a","generation":{generation},"time":"t","outcome":{{"result":"upToDate"}}}}"#
            )}}})
        };
        assert!(behind(&record(2)), "the record names an older generation");
        assert!(!behind(&record(3)));
        let observed =
            |o: i64| json!({"metadata": {"generation": 3}, "status": {"observedGeneration": o}});
        assert!(behind(&observed(2)));
        assert!(!behind(&observed(3)));
    }

    #[test]
    fn without_conditions_the_record_should_say_it() {
        let record = |outcome: &str| {
            json!({"metadata": {"generation": 3, "annotations": {LAST_RECONCILE: format!(
                r#"{{"plugin":"p","version":"1","digest":"sha256:a","generation":3,"time":"t","outcome":{outcome}}}"#
            )}}})
        };
        assert_eq!(state_of(&record(r#"{"result":"upToDate"}"#)), State::Synced);
        assert_eq!(
            state_of(&record(
                r#"{"result":"failed","reason":"ReconcileError","cause":"trap","message":"m"}"#
            )),
            State::Failing
        );
    }
}
