//! The reconciler: one parent key in, one [`Next`] out. Gathers the parent and its children from
//! the caches, calls the plugin in a fresh instance on a blocking thread, plans, applies, and
//! reports failures on the parent (the `Synced` condition and a Warning event).
//!
//! Failures are sorted three ways:
//! - a permanent plugin error, or an API rejection of what the plugin asked for (invalid,
//!   unknown kind, a field the schema does not declare): shown on the parent and not retried
//!   until an input changes ([`super::permanent::Permanent`], in the parent's page of the
//!   [`super::book::ParentBook`]);
//! - anything else from the plugin (transient errors, deadlines, traps, invalid responses):
//!   shown on the parent and retried with per-key backoff, so a plugin fixed by an upgrade, or
//!   an input that gets fixed, recovers;
//! - a retryable API error (a refusal by RBAC, throttling, 5xx, connection loss): shown on the
//!   parent and retried with backoff, so a grant heals a 403; a 409 conflict, the normal result
//!   of racing another writer, is retried without being shown.
//!
//! With an identity, writes go out as the plugin's ServiceAccount (the applier's client) and
//! reads are gated ([`CacheReader`]); a desired child that would take over an object this
//! parent does not control is refused before anything is sent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::Value;
use tracing::{debug, info, warn};

mod call;
mod decorate;
mod failures;
mod gates;
pub mod places;
mod record;

use self::failures::failures_message;
use super::applier::{Applier, ApplyError, Written};
use super::book::Pages;
use super::fight::{FightPolicy, Fights};
use super::guest_memory::GuestMemory;
use super::health::Health;
use super::referee::{CONTESTED, Referee};
use super::wiring::Wiring;
use super::workers::Next;
use crate::cache::{CacheReader, Cached, Informer, ObjectKey};
use crate::identity::access::{DENIED_TTL, Question};
use crate::metrics::PluginMetrics;
use crate::model::{self, Event, EventType, Parent, ReconcileRequest};
use crate::planner;
use crate::runtime::Plugin;
use crate::selector::Selector;

/// Reconciles the parents of one plugin revision.
pub struct Reconciler {
    plugin: Plugin,
    config: Value,
    /// The parent kind's informer, status schema, write pace and book.
    wiring: Arc<Wiring>,
    children: Vec<Arc<Informer>>,
    reader: Arc<CacheReader>,
    applier: Applier,
    metrics: PluginMetrics,
    /// This revision's pages of the book: failures for good, conflicts, applied bodies,
    /// fight breakers, what each parent read.
    book: Pages,
    /// The fight breaker.
    referee: Referee,
    /// Where its children may not go.
    bounds: places::Bounds,
    /// The guest memory all plugins' calls share.
    guest_memory: GuestMemory,
    /// How this revision behaves, for a rollout to judge.
    health: Arc<Health>,
    /// The orphans it may adopt (the ReconcilePlugin's `adoptOrphans`); `None`: none.
    adopt: Option<Selector>,
    /// Whether the plugin decorates its parents rather than owning them.
    decorator: bool,
}

/// What the reconciler is built from.
pub struct Parts {
    /// The plugin.
    pub plugin: Plugin,
    /// Its configuration.
    pub config: Value,
    /// The parent kind's wiring.
    pub wiring: Arc<Wiring>,
    /// The informers of the child kinds.
    pub children: Vec<Arc<Informer>>,
    /// The reader over the kinds the plugin may read.
    pub reader: Arc<CacheReader>,
    /// This revision's view of the book; the handlers record changed inputs in it.
    pub book: Pages,
    /// The applier.
    pub applier: Applier,
    /// The plugin's metrics.
    pub metrics: PluginMetrics,
    /// Where its children may not go.
    pub bounds: places::Bounds,
    /// The guest memory all plugins' calls share.
    pub guest_memory: GuestMemory,
    /// When a fight over a child's field trips the breaker.
    pub fights: FightPolicy,
    /// The revision's counters.
    pub health: Arc<Health>,
    /// The orphans it may adopt; `None`: none.
    pub adopt: Option<Selector>,
    /// Whether the plugin decorates its parents rather than owning them.
    pub decorator: bool,
}

/// How many of one parent's children a reconcile fetches at once when its cache held them as
/// stubs (see [`Informer::whole`]).
const FETCHES_AT_ONCE: usize = 8;

impl Reconciler {
    /// A reconciler from its parts.
    pub fn new(parts: Parts) -> Self {
        let referee = Referee::new(
            Fights::new(parts.fights),
            parts.metrics.clone(),
            parts.plugin.info(),
        );
        Self {
            plugin: parts.plugin,
            config: parts.config,
            wiring: parts.wiring,
            children: parts.children,
            reader: parts.reader,
            book: parts.book,
            applier: parts.applier,
            metrics: parts.metrics.clone(),
            referee,
            bounds: parts.bounds,
            guest_memory: parts.guest_memory,
            health: parts.health,
            adopt: parts.adopt,
            decorator: parts.decorator,
        }
    }

    /// Reconciles one parent: `cached` as the informer holds it, `parent` its parsed value.
    /// The controller's route has decided that this revision serves it, and whether another
    /// revision is called beside it in `shadow` (on the same request, never writing).
    pub async fn reconcile(
        &self,
        key: &ObjectKey,
        cached: &Cached,
        parent: Parent,
        shadow: Option<&Reconciler>,
    ) -> Next {
        let name = &self.plugin.info().name;
        if self
            .book
            .claim(key)
            .is_some_and(|page| !page.fights.is_empty())
        {
            self.referee.recount(self.book.book());
        }
        let uid = cached.meta.uid().to_owned();
        // A parent being deleted is always looked at: its finalize timeout must be able to run.
        if !model::is_deleting(&parent) && self.book.read(key, |p| p.permanent.holds(&parent)) {
            debug!(plugin = %name, parent = %key, "permanent failure; waiting for a change");
            return Next::Done;
        }
        let info = self.plugin.info();
        let deleting = model::is_deleting(&parent);
        let has_finalizer = info.holds_finalizer(&parent);
        if deleting && !has_finalizer {
            return Next::Done;
        }
        if deleting && !info.finalizer {
            // An earlier version of the plugin asked for a finalizer and this one does not:
            // there is no cleanup to wait for, so the parent is released without a call.
            return self.release(key, &parent).await;
        }
        let finalize_left = deleting.then(|| self.finalize_left(&parent));
        if finalize_left == Some(Duration::ZERO) {
            let timeout = self.plugin.limits().finalize_timeout;
            let message = format!(
                "plugin {} did not finish its cleanup within {} s of the deletion; the host removed its finalizer",
                info.name,
                timeout.as_secs()
            );
            warn!(plugin = %name, parent = %key, "{message}");
            self.metrics.finalize_timeout();
            let event = Event {
                type_: EventType::Warning,
                reason: "FinalizeTimeout".into(),
                message,
            };
            self.applier.events(&parent, &[event]).await;
            return self.release(key, &parent).await;
        }
        let namespace = cached.meta.key.namespace.clone();
        if let Some(denied) = self.may_not_read(&namespace).await {
            // Its ServiceAccount could not have read this parent through the API server: the
            // plugin is not shown it. Looked at again once the denial may have changed.
            warn!(plugin = %name, parent = %key, reason = %denied,
                  "not reconciled: the plugin's ServiceAccount may not read this parent");
            return Next::RequeueAfter(DENIED_TTL + Duration::from_secs(1));
        }
        self.reader.warm(&namespace).await;
        let children = match self.children_of(&namespace, &uid).await {
            Ok(children) => children,
            Err(error) => {
                warn!(plugin = %name, parent = %key, %error,
                      "fetching the parent's children, which another replica owned until now, failed; retrying");
                return Next::Retry;
            }
        };
        let observed: Vec<Value> = children.iter().map(|c| c.observed()).collect();
        let request = Arc::new(ReconcileRequest {
            children: children.iter().map(|c| c.json()).collect(),
            parent,
            config: self.config.clone(),
            finalizing: deleting,
        });

        // A shadow revision is called beside, on the same request: its time overlaps this one's.
        let shadowed = async {
            match shadow {
                Some(shadow) => shadow.call_as_shadow(key, request.clone()).await,
                None => None,
            }
        };
        let (called, shadowed) = tokio::join!(self.call(key, request.clone()), shadowed);
        let Some((result, call_reader)) = called else {
            return Next::Retry;
        };
        // Reads refused for want of an answer are asked now; once any is known, the parent is
        // reconciled again at once, to see what it could not or to be told why not (the
        // answer is cached, so the next call asks nothing).
        let unanswered = call_reader.unanswered();
        let again = !unanswered.is_empty() && self.reader.answer(unanswered).await;
        let mut outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => {
                let next = match (
                    self.call_failed(key, &request.parent, error).await,
                    finalize_left,
                ) {
                    // A cleanup that fails for good still ends at the finalize timeout.
                    (Next::Terminal, Some(left)) => Next::RequeueAfter(left),
                    (next, _) => next,
                };
                return if again {
                    Next::RequeueAfter(Duration::ZERO)
                } else {
                    next
                };
            }
        };
        self.metrics.call_seconds(outcome.elapsed);
        self.metrics.memory_peak(outcome.memory_peak);
        self.book.deps().record(key, &outcome.reads);
        if let (Some(shadow), Some(result)) = (shadow, shadowed) {
            shadow.compare(
                key,
                &request,
                &observed,
                (&self.plugin, &outcome.desired),
                result,
            );
        }

        let fields = self.status_fields();
        // The parent as the planner compares it: with the host's own managedFields where the
        // cache kept any, which say what labels and annotations the plugin set on it before.
        let planned_parent = if cached.has_managed_fields() {
            std::borrow::Cow::Owned(cached.observed())
        } else {
            std::borrow::Cow::Borrowed(&*request.parent)
        };
        let plan_for = |desired: &model::Desired| {
            let mut plan = planner::plan(
                self.plugin.info(),
                &fields,
                &planned_parent,
                desired,
                &observed,
                &model::now(),
            );
            self.book
                .read(key, |p| p.applied.settle(&mut plan, &observed));
            plan
        };
        let mut plan = plan_for(&outcome.desired);
        let ruling = self
            .referee
            .rule(
                &self.book,
                key,
                request.parent["metadata"]["generation"]
                    .as_i64()
                    .unwrap_or(0),
                &mut plan,
                &observed,
                &self.applier,
            )
            .await;
        if let Some(contested) = self.referee.condition(&ruling, &request.parent) {
            // The host's condition, not the plugin's, under this type.
            let conditions = &mut outcome.desired.conditions;
            conditions.retain(|c| c.type_ != CONTESTED);
            conditions.push(contested);
            plan = plan_for(&outcome.desired);
            Referee::hold(&ruling, &mut plan);
        }
        // Strategies and waves last: what the memory or the referee found to be no change is
        // never deleted or waited on.
        planner::sequence(
            &mut plan,
            self.plugin.info(),
            &fields,
            &planned_parent,
            &outcome.desired,
            &observed,
            &model::now(),
        );
        // A trip is said whatever the writes below come to.
        self.health.fought(ruling.events.len());
        self.applier.events(&request.parent, &ruling.events).await;
        if let Err(message) = self.scopes(&plan) {
            warn!(plugin = %name, parent = %key, error = %message, "a desired child is in the wrong place");
            self.report(&request.parent, "ReconcileError", &message)
                .await;
            return Next::Retry;
        }
        let adopted = match self.takeover(&plan, &uid) {
            Ok(adopted) => adopted,
            Err(message) => {
                warn!(plugin = %name, parent = %key, error = %message, "a desired child belongs to someone else");
                self.report(&request.parent, "ChildConflict", &message)
                    .await;
                return Next::Retry;
            }
        };
        if !plan.is_noop()
            && let Err(limited) = self.wiring.pace().admit(key, std::time::Instant::now())
        {
            return self.paced(key, &request.parent, limited).await;
        }
        // A child whose namespace is missing or terminating fails alone; the status written
        // says so.
        let now = model::now();
        let on_failed = |failed: &[ApplyError]| {
            let message = failures_message(failed);
            let base = plan
                .status
                .clone()
                .unwrap_or_else(|| request.parent["status"].clone());
            let status = planner::with_failure(
                &request.parent,
                &base,
                "ChildFailed",
                &message,
                &fields,
                &now,
            );
            (status != request.parent["status"]).then_some(status)
        };
        let failed = match self.applier.apply(&request.parent, &plan, on_failed).await {
            Ok(outcome) => {
                self.book.write(key, |p| {
                    p.applied.record(&plan, &observed, &outcome.written)
                });
                let wrote_status = outcome
                    .written
                    .iter()
                    .any(|w| w.kind == self.wiring.parents().group_kind());
                self.observe(outcome.written);
                if wrote_status && plan.status.is_some() {
                    self.say_missing_fields(&request.parent).await;
                    self.metrics.status_dropped(plan.dropped.len());
                }
                self.say_dropped(&request.parent, &plan.dropped).await;
                outcome.failed
            }
            Err(error) => return self.apply_failed(key, &request.parent, error).await,
        };
        // A reconcile that wrote is exported with its trace; one that changed nothing is not.
        if !plan.is_noop() || !outcome.desired.events.is_empty() {
            crate::telemetry::outcome(&tracing::Span::current(), "changed");
        }
        self.applier
            .events(&request.parent, &outcome.desired.events)
            .await;
        self.say_adopted(key, &request.parent, &adopted, &failed)
            .await;
        if !failed.is_empty() {
            let message = failures_message(&failed);
            warn!(plugin = %name, parent = %key, error = %message, "children could not be written");
            self.health.synced_false();
            let event = Event {
                type_: EventType::Warning,
                reason: "ChildFailed".into(),
                message,
            };
            self.record_failure(
                &request.parent,
                "ChildFailed",
                "",
                &event.message,
                crate::telemetry::trace_id(),
            )
            .await;
            self.applier.events(&request.parent, &[event]).await;
            return Next::Retry;
        }
        self.book.write(key, |p| {
            p.permanent.forget();
            p.conflicts = 0;
        });
        self.record_plan(
            &request.parent,
            &plan,
            &outcome.reads,
            crate::telemetry::trace_id(),
        )
        .await;
        let waiting = plan
            .children
            .iter()
            .any(|c| c.action == planner::Action::Waiting);
        if !waiting
            && let Some(elapsed) = self.wiring.converge().converged(
                key,
                cached.meta.generation,
                std::time::Instant::now(),
            )
        {
            self.metrics
                .converged(elapsed, crate::telemetry::trace_id());
        }
        let changes = plan.children.iter().filter(|c| c.action.sends()).count();
        if changes > 0 || plan.status.is_some() || plan.finalizer.is_some() {
            info!(plugin = %name, parent = %key, children = changes,
                  status = plan.status.is_some(), finalizer = ?plan.finalizer, "reconciled");
        } else {
            debug!(plugin = %name, parent = %key, "up to date");
        }
        // A parent still finalizing is looked at again by its timeout at the latest; one with
        // a contested child when its hold ends or its breaker would close.
        let requeue = match (outcome.desired.requeue_after, finalize_left) {
            (Some(a), Some(left)) if !outcome.desired.finalized => Some(a.min(left)),
            (None, Some(left)) if !outcome.desired.finalized => Some(left),
            (after, _) => after,
        };
        let requeue = match (requeue, ruling.standing.wake_after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match requeue {
            _ if again => Next::RequeueAfter(Duration::ZERO),
            Some(after) => Next::RequeueAfter(after),
            None => Next::Done,
        }
    }

    /// What the host may write in a parent's status: the kind's fields, or a decorator's share.
    fn status_fields(&self) -> planner::StatusFields {
        let fields = self.wiring.schema().fields();
        if self.decorator {
            fields.for_decorator(self.wiring.has_crd())
        } else {
            fields
        }
    }

    /// How long a parent being deleted may still wait for the plugin's cleanup (zero: its
    /// time is up), from its `deletionTimestamp` and the plugin's finalize timeout.
    fn finalize_left(&self, parent: &Value) -> Duration {
        let timeout = self.plugin.limits().finalize_timeout;
        let since = parent["metadata"]["deletionTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| jiff::Timestamp::now().duration_since(t));
        match since.and_then(|d| Duration::try_from(d).ok()) {
            Some(elapsed) => timeout.saturating_sub(elapsed),
            // Clocks apart (a deletion "in the future") or unreadable: the full timeout.
            None => timeout,
        }
    }

    /// The parent's children as the plugin may see them. The plugin gets their cached text as
    /// it is; the planner compares against them parsed, with the host's own managedFields
    /// entries. A namespaced parent's children are in its namespace (an object elsewhere naming
    /// it as owner is not its child: the garbage collector does not honour that either); a
    /// cluster-scoped parent's are anywhere. Children in a namespace where the plugin's
    /// ServiceAccount may not list their kind are not shown to it. A child a sharded replica's
    /// cache held as a stub (its parent was another replica's until now) is fetched whole; if
    /// that fails, so does the reconcile, rather than show the plugin fewer children.
    async fn children_of(
        &self,
        namespace: &str,
        uid: &str,
    ) -> Result<Vec<Arc<Cached>>, kube::Error> {
        let mut children = Vec::new();
        for informer in &self.children {
            let mut allowed: HashMap<String, bool> = HashMap::new();
            let cached = informer.store().controlled_by(uid);
            let cached = if cached.iter().all(|c| c.is_whole()) {
                cached
            } else {
                // A few at a time: a plugin decides how many children a parent has.
                let fetched: Vec<_> =
                    futures::stream::iter(cached.into_iter().map(|c| informer.whole(c)))
                        .buffered(FETCHES_AT_ONCE)
                        .collect()
                        .await;
                let mut whole = Vec::with_capacity(fetched.len());
                for child in fetched {
                    whole.extend(child?);
                }
                whole
            };
            for child in cached {
                if !self.is_mine(&child) {
                    continue;
                }
                let place = child.meta.key.namespace.clone();
                if !namespace.is_empty() && !place.is_empty() && place != namespace {
                    continue;
                }
                let may = match allowed.get(&place) {
                    Some(may) => *may,
                    None => {
                        let may = self.may_list(informer, &place).await;
                        allowed.insert(place, may);
                        may
                    }
                };
                if may {
                    children.push(child);
                }
            }
        }
        Ok(children)
    }

    /// Whether the plugin's ServiceAccount may list children of this kind in the namespace
    /// (always, when the plugin acts as the host).
    async fn may_list(&self, informer: &Informer, namespace: &str) -> bool {
        let Some(guard) = self.reader.guard() else {
            return true;
        };
        let resource = &informer.kind().resource;
        let question = Question::new("list", &resource.group, &resource.plural, namespace);
        match guard.access.check_read(&guard.identity, &question).await {
            Ok(d) => d.allowed,
            Err(error) => {
                warn!(%error, %question, "asking whether a plugin may list its children failed");
                false
            }
        }
    }

    /// A parent outside the plugin's selection gets no write at all, except that one the plugin
    /// finalized while it was selected is released: nothing would ever take the finalizer off.
    /// Its children stay; the garbage collector takes them with the parent.
    pub async fn unselected(&self, key: &ObjectKey, parent: &Value) -> Next {
        self.wiring.forget(key);
        if self.decorator {
            return self.undecorate(key, parent).await;
        }
        if !self.plugin.info().holds_finalizer(parent) {
            debug!(plugin = %self.plugin.info().name, parent = %key, "not selected");
            return Next::Done;
        }
        self.release(key, parent).await
    }

    /// Removes the host's finalizer from a parent, without calling the plugin: one being deleted
    /// whose plugin no longer asks for a finalizer, or one that left the selection.
    async fn release(&self, key: &ObjectKey, parent: &Value) -> Next {
        let plan = planner::Plan {
            children: Vec::new(),
            status: None,
            finalizer: Some(planner::FinalizerAction::Remove),
            dropped: Vec::new(),
            metadata: None,
        };
        match self.applier.apply(parent, &plan, |_| None).await {
            Ok(outcome) => {
                self.observe(outcome.written);
                info!(plugin = %self.plugin.info().name, parent = %key,
                      "released its finalizer");
                Next::Done
            }
            Err(error) => self.apply_failed(key, parent, error).await,
        }
    }

    /// Brings the caches up to date with what the API server answered to our writes.
    fn observe(&self, written: Vec<Written>) {
        for Written { kind, object } in written {
            let informer = std::iter::once(self.wiring.parents())
                .chain(&self.children)
                .find(|i| i.group_kind() == kind);
            if let Some(informer) = informer {
                informer.observe_write(object);
            }
        }
    }
}
