//! What a reconcile must pass before the plugin is called or its plan written: the parent is
//! one the plugin reconciles and its ServiceAccount may read, the children are in their place,
//! and the writes keep to their pace.

use serde_json::Value;
use tracing::{debug, warn};

use super::{Reconciler, places};
use crate::cache::{GroupKind, ObjectKey};
use crate::controller::pace;
use crate::controller::workers::Next;
use crate::identity::access::Question;
use crate::model::{Event, EventType};
use crate::planner::{self, Plan};

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
}
