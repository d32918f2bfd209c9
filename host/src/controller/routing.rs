//! How the controller's route changes: a swap to a new revision, a rollout's candidate staged
//! (shadow or a share), promoted or aborted. Each change goes through [`Controller::reroute`],
//! which drains what no longer serves and queues every parent whose revision changed, so each is
//! reconciled once by its new revision and none by two at once.

use std::sync::Arc;

use serde_json::Value;
use tracing::debug;

use super::queue::Priority;
use super::route::{Decision, Route, Selection, Share};
use super::{Controller, Revision};
use crate::model::Parent;

impl Controller {
    /// Routes every parent to `next`. Its caches must have synced (the caller waits, so the
    /// old revision serves meanwhile). A key in flight on the old revision finishes there (the
    /// queue never leases a key twice) and nothing queued is lost; the old revision is waited
    /// for (bounded by the grace period, after which its reconciles give up and are retried on
    /// `next`). Then every parent is queued at low priority, so each is reconciled once by the
    /// new code even if nothing changes. A rollout in progress ends with it. Returns the
    /// revision that was replaced.
    pub async fn swap(&self, next: Revision) -> Option<Arc<Revision>> {
        let next = Arc::new(next);
        let selection = selection_of(&next);
        let assignment = self.assignment();
        let old = self
            .reroute(|_| Some(Route::to(next.clone(), assignment, selection)))
            .await;
        old.map(|r| r.stable.clone())
    }

    /// Makes `candidate` the rollout's candidate at `stage`: called beside the stable revision
    /// on every parent it serves (shadow), or serving a share of the parents. A candidate
    /// already there is replaced and drained; its parents in the new share move straight to
    /// `candidate`, the others back to stable. The parents that change revisions are queued, so
    /// each is reconciled once by its new revision. Without a stable revision the candidate
    /// simply serves everything.
    pub async fn stage(&self, candidate: Arc<Revision>, stage: Stage) {
        let assignment = self.assignment();
        self.reroute(|now| {
            let Some(now) = now else {
                return Some(Route::to(
                    candidate.clone(),
                    assignment,
                    selection_of(&candidate),
                ));
            };
            let mut next = now.clone();
            next.candidate = None;
            next.shadow = None;
            match stage {
                Stage::Shadow => next.shadow = Some(candidate.clone()),
                Stage::Share(share) => next.candidate = Some((candidate.clone(), share)),
            }
            Some(next)
        })
        .await;
    }

    /// Makes the candidate the stable revision, serving every parent; the old stable one drains.
    /// Returns the revision that was replaced, if there was a candidate to promote.
    pub async fn promote(&self) -> Option<Arc<Revision>> {
        let (candidate, _) = self.candidate()?;
        self.swap_to(candidate).await
    }

    /// Ends the rollout: every parent goes back to the stable revision, the candidate drains.
    /// Returns it, if there was one.
    pub async fn abort(&self) -> Option<Arc<Revision>> {
        let (candidate, _) = self.candidate()?;
        self.reroute(|now| {
            let mut next = now?.clone();
            next.candidate = None;
            next.shadow = None;
            Some(next)
        })
        .await;
        Some(candidate)
    }

    /// The rollout's candidate and its stage, if a rollout is in progress.
    pub fn candidate(&self) -> Option<(Arc<Revision>, Stage)> {
        let route = self.route.read().expect("route lock poisoned");
        let route = route.as_ref()?;
        match (&route.candidate, &route.shadow) {
            (Some((candidate, share)), _) => Some((candidate.clone(), Stage::Share(*share))),
            (None, Some(shadow)) => Some((shadow.clone(), Stage::Shadow)),
            (None, None) => None,
        }
    }

    /// How many parents the rollout's candidate has at its stage now: those it shadows, or
    /// those it serves, across the ring with sharding (every replica caches every parent).
    /// Reads every cached parent; a rollout asks once per step.
    pub fn parents_at_stage(&self) -> u64 {
        let Some(route) = self.route.read().expect("route lock poisoned").clone() else {
            return 0;
        };
        let store = route.stable.wiring().parents().store();
        let mut count = 0;
        for key in store.keys() {
            let Some(cached) = store.get(&key.namespace, &key.name) else {
                continue;
            };
            let parent =
                Parent::from_text(&cached.json()).unwrap_or_else(|| Parent::from(Value::Null));
            let counted = match route.decide_as_owner(&key, &parent) {
                Decision::Serve { revision, shadow } => {
                    shadow.is_some()
                        || route
                            .candidate
                            .as_ref()
                            .is_some_and(|(c, _)| Arc::ptr_eq(c, &revision))
                }
                _ => false,
            };
            count += u64::from(counted);
        }
        count
    }

    async fn swap_to(&self, next: Arc<Revision>) -> Option<Arc<Revision>> {
        let (selection, assignment) = (selection_of(&next), self.assignment());
        let old = self
            .reroute(|_| Some(Route::to(next.clone(), assignment, selection)))
            .await;
        old.map(|r| r.stable.clone())
    }

    /// Replaces the route with what `change` makes of it, then: the pool follows the stable
    /// revision's concurrency (replaced only if that changed); every revision that served and
    /// no longer does is drained (bounded by the grace period); every parent whose revision
    /// changed is queued at low priority. Returns the route that was replaced.
    async fn reroute(
        &self,
        change: impl FnOnce(Option<&Route<Arc<Revision>>>) -> Option<Route<Arc<Revision>>>,
    ) -> Option<Arc<Route<Arc<Revision>>>> {
        let mut pools = self.pools.lock().await;
        let (old, new) = {
            let mut route = self.route.write().expect("route lock poisoned");
            let Some(mut new) = change(route.as_deref()) else {
                return route.clone();
            };
            // Read under the route's lock: an assignment published meanwhile is either read
            // here or written over this route by `Controller::assign` right after.
            new.assignment = self.assignment();
            let new = Arc::new(new);
            (route.replace(new.clone()), new)
        };
        if !pools.suspended && self.owns_any() {
            let workers = new.stable.spec().concurrency;
            if pools.running.as_ref().is_none_or(|p| p.workers != workers) {
                let replaced = pools.running.replace(self.start_pool(workers));
                if let Some(pool) = replaced {
                    pool.stop.stop();
                    self.drain_pool(pool).await;
                }
            }
        }
        if let Some(old) = &old {
            for gone in old.revisions() {
                if !new.revisions().any(|r| Arc::ptr_eq(r, gone)) {
                    self.drain(gone).await;
                }
            }
        }
        drop(pools);
        // The operator (the ReconcilePlugin) or the plugin itself (0.2) may ask.
        let ignore_status = new.stable.spec().ignore_parent_status
            || new.stable.plugin().info().ignore_status_changes;
        new.stable.wiring().ignore_status_changes(ignore_status);
        let period = new.stable.spec().resync.unwrap_or(self.ctx.sync_period);
        self.sync_period.send_if_modified(|now| {
            let changed = *now != period;
            *now = period;
            changed
        });
        let store = new.stable.wiring().parents().store();
        let mut moved = 0usize;
        let wiring = new.stable.wiring();
        for key in store.keys() {
            if !new.owns(&key) {
                // Lost between the two routes: `Controller::assign` finds it already lost,
                // so its memory goes here, as it would there (not while a reconcile of it
                // runs, whose end would write it back).
                if old.as_ref().is_some_and(|old| old.owns(&key)) && !self.queue.is_processing(&key)
                {
                    wiring.forget(&key);
                }
                continue;
            }
            // Gained between the two routes: an assignment published while this reroute read
            // it, which `Controller::assign` then finds already in the route.
            let gained = old.as_ref().is_some_and(|old| !old.owns(&key));
            if gained {
                wiring.forget(&key);
            }
            let changed = gained
                || match (&old, store.get(&key.namespace, &key.name)) {
                    (Some(old), Some(parent)) => {
                        let (was, is) = (
                            old.serving(parent.meta.uid()),
                            new.serving(parent.meta.uid()),
                        );
                        !Arc::ptr_eq(was, is) || shadowed(old, was) != shadowed(&new, is)
                    }
                    _ => true,
                };
            if changed {
                moved += 1;
                let cause = super::trigger::Trigger::Route;
                wiring
                    .triggers()
                    .record(&key, cause, std::time::Instant::now());
                // A new revision's parents are at rest; one gained is queued as `assign`
                // would have queued it.
                let priority = if gained {
                    self.gained_priority(wiring, &key)
                } else {
                    Priority::Low
                };
                self.queue.add(key, priority);
            }
        }
        debug!(controller = %self.name, parents = moved, "parents queued for their new revision");
        old
    }
}

/// Where a rollout's candidate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Called beside the stable revision on the same inputs; its plans are only compared.
    Shadow,
    /// Serving this share of the parents.
    Share(Share),
}

/// The parents a revision's spec selects.
fn selection_of(revision: &Revision) -> Selection {
    Selection {
        selector: revision.spec().parent_selector.clone(),
        namespaces: revision.spec().parent_namespaces.clone(),
        annotations: revision.spec().decorator.clone().unwrap_or_default(),
    }
}

/// Whether `serving`, on `route`, has a shadow called beside it.
fn shadowed(route: &Route<Arc<Revision>>, serving: &Arc<Revision>) -> bool {
    route.shadow.is_some() && Arc::ptr_eq(serving, &route.stable)
}
