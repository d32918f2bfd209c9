//! What a reconcile must pass before the plugin is called or its plan written: the parent is
//! one the plugin reconciles and its ServiceAccount may read, the children are in their place
//! and not someone else's (an orphan only where the operator consented to its adoption), and
//! the writes keep to their pace.

use serde_json::Value;
use tracing::{debug, info, warn};

use super::{Reconciler, places};
use crate::cache::{GroupKind, ObjectKey};
use crate::controller::applier::ApplyError;
use crate::controller::pace;
use crate::controller::workers::Next;
use crate::identity::access::Question;
use crate::model::{Event, EventType};
use crate::planner::{self, Action, Plan};

impl Reconciler {
    /// Refuses a plan with a child out of place ([`places::check`]).
    pub(super) fn scopes(&self, plan: &Plan) -> Result<(), String> {
        let namespaced = |child: &planner::ChildPlan| {
            let kind = GroupKind::from(&child.kind);
            self.children
                .iter()
                .find(|i| i.group_kind() == kind)
                .map(|i| i.kind().namespaced)
        };
        places::check(plan, &namespaced, &self.bounds)
    }

    /// Holds back a reconcile whose writes came too fast: the parent is reconciled again when
    /// the pace allows (the plugin computes its desired state afresh then), and told why.
    pub(super) async fn paced(
        &self,
        key: &ObjectKey,
        parent: &Value,
        limited: pace::Limited,
    ) -> Next {
        self.metrics.paced();
        if limited.say {
            let bounds = self.wiring.pace().bounds();
            let bound = if limited.plugin_wide {
                format!(
                    "all its parents together are limited to {} writes a second (after {} at once)",
                    bounds.plugin.rate, bounds.plugin.burst
                )
            } else {
                format!(
                    "one parent's writes are limited to {} a second (after {} at once)",
                    bounds.parent.rate, bounds.parent.burst
                )
            };
            let message = format!(
                "plugin {} asks for changes faster than the host writes them: {bound}; a desired state that changes on every call (a timestamp, a counter) keeps it there",
                self.plugin.info().name
            );
            warn!(plugin = %self.plugin.info().name, parent = %key, "{message}");
            let event = Event {
                type_: EventType::Warning,
                reason: "WriteRateLimited".into(),
                message,
            };
            self.applier.events(parent, &[event]).await;
        }
        Next::RequeueAfter(limited.wait)
    }

    /// Why the plugin's ServiceAccount may not `get` parents in `namespace`, if it may not
    /// (asked of the API server once, then cached); `None` when it may, when the plugin acts as
    /// the host, or when the answer cannot be had (the writes will meet RBAC anyway).
    pub(super) async fn may_not_read(&self, namespace: &str) -> Option<String> {
        let guard = self.reader.guard()?;
        let resource = &self.wiring.parents().kind().resource;
        let question = Question::new("get", &resource.group, &resource.plural, namespace);
        match guard.access.check_read(&guard.identity, &question).await {
            Ok(decision) if !decision.allowed => Some(format!(
                "ServiceAccount {} may not {question}",
                guard.identity
            )),
            Ok(_) => None,
            Err(error) => {
                debug!(%error, %question, "asking whether the plugin may read its parent failed");
                None
            }
        }
    }

    /// Refuses a plan that would create a child over an object of that name this parent does
    /// not control: another parent's (two parents would fight over it), or an orphan (an
    /// object without a controller: adopting it would hand a plugin something it never made)
    /// unless the operator consented to adopting it (`adoptOrphans` matches its labels).
    /// controller-runtime and Metacontroller refuse the same; nothing is sent. Returns the
    /// orphans adopted, as `Kind namespace/name`.
    pub(super) fn takeover(&self, plan: &Plan, parent_uid: &str) -> Result<Vec<String>, String> {
        let mut adopted = Vec::new();
        for child in plan.children.iter().filter(|c| c.action == Action::Create) {
            let kind = GroupKind::from(&child.kind);
            let Some(informer) = self.children.iter().find(|i| i.group_kind() == kind) else {
                continue;
            };
            let Some(existing) = informer.store().get(&child.namespace, &child.name) else {
                continue;
            };
            match existing.meta.controller() {
                // Ours, only not shown to the plugin (its account may not list the kind).
                Some(owner) if owner.uid == parent_uid && self.is_mine(&existing) => {}
                Some(owner) if owner.uid == parent_uid => {
                    return Err(format!(
                        "{} already exists and was attached to this parent by another plugin (its owner or another decorator): the host does not take over another plugin's child",
                        child.target()
                    ));
                }
                Some(owner) => {
                    return Err(format!(
                        "{} already exists and is controlled by {} {}: the host does not take over objects it did not create for this parent",
                        child.target(),
                        owner.kind,
                        owner.name
                    ));
                }
                None if self
                    .adopt
                    .as_ref()
                    .is_some_and(|s| existing.meta.selected_by(s)) =>
                {
                    adopted.push(child.target());
                }
                None => {
                    let hint = if self.adopt.is_some() {
                        "its labels do not match the ReconcilePlugin's adoptOrphans"
                    } else {
                        "the host does not take over objects it did not create for this parent, unless the ReconcilePlugin's adoptOrphans selects them"
                    };
                    return Err(format!(
                        "{} already exists and has no controller: {hint}",
                        child.target()
                    ));
                }
            }
        }
        Ok(adopted)
    }

    /// Says which orphans this reconcile adopted (those whose write did not fail): a Normal
    /// event `Adopted` on the parent and a log line.
    pub(super) async fn say_adopted(
        &self,
        key: &ObjectKey,
        parent: &Value,
        adopted: &[String],
        failed: &[ApplyError],
    ) {
        let adopted: Vec<&str> = adopted
            .iter()
            .filter(|target| !failed.iter().any(|f| &f.target == *target))
            .map(String::as_str)
            .collect();
        if adopted.is_empty() {
            return;
        }
        let adopted = adopted.join(", ");
        info!(plugin = %self.plugin.info().name, parent = %key, %adopted, "adopted orphans");
        let event = Event {
            type_: EventType::Normal,
            reason: "Adopted".into(),
            message: format!(
                "adopted {adopted}, which had no controller, as the ReconcilePlugin's adoptOrphans allows"
            ),
        };
        self.applier.events(parent, &[event]).await;
    }
}
