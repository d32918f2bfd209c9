//! What a reconcile leaves on its parent for people to read: the [`LastReconcile`] annotation
//! (which code served it, when, with what outcome and trace id), written only when it says
//! something new; and, while the plugin is suspended, `Synced=False` with the reason
//! [`PAUSED_REASON`], so a parent whose spec is being ignored does not show `Synced=True`.
//!
//! A decorator records nothing: the objects it decorates are not its to mark.

use serde_json::Value;
use tracing::{debug, info};

use super::Reconciler;
use crate::model::record::{Failure, LAST_RECONCILE, LastReconcile, Outcome, PAUSED_REASON};
use crate::model::{self, SYNCED};
use crate::planner::{self, Action, FinalizerAction, Plan};
use crate::runtime::Read;

/// Reads named in a record, at most: the annotation stays small (every watcher of the kind
/// receives it with each change of the parent), and a parent that reads more is said to.
const RECORDED_READS: usize = 32;

impl Reconciler {
    /// Records a plan that went through on `parent` (as the reconcile saw it). Nothing is
    /// recorded for a parent the plan releases: it is going.
    pub(super) async fn record_plan(
        &self,
        parent: &Value,
        plan: &Plan,
        reads: &[Read],
        trace_id: Option<String>,
    ) {
        if plan.finalizer == Some(FinalizerAction::Remove) {
            return;
        }
        let mut said_reads: Vec<String> = reads.iter().take(RECORDED_READS).map(said).collect();
        if reads.len() > RECORDED_READS {
            said_reads.push(format!("... and {} more", reads.len() - RECORDED_READS));
        }
        self.record(parent, outcome_of(plan), said_reads, trace_id)
            .await;
    }

    /// Records a failure on `parent`: the reason shown on `Synced`, its typed `cause` and the
    /// whole message.
    pub(super) async fn record_failure(
        &self,
        parent: &Value,
        reason: &str,
        cause: &str,
        message: &str,
        trace_id: Option<String>,
    ) {
        let failure = Failure {
            reason: reason.to_owned(),
            cause: cause.to_owned(),
            message: model::printable(message, model::MAX_CONDITION_MESSAGE),
        };
        self.record(parent, Outcome::Failed(failure), Vec::new(), trace_id)
            .await;
    }

    /// Writes the record if it differs from the one `parent` carries ([`LastReconcile::differs`]),
    /// as a merge patch of that one annotation under its own field manager, so that it never
    /// mixes with what the plugin applies to the parent's metadata. A failed write is logged:
    /// the record is for people, and the reconcile it describes is done.
    async fn record(
        &self,
        parent: &Value,
        outcome: Outcome,
        reads: Vec<String>,
        trace_id: Option<String>,
    ) {
        if self.decorator {
            return;
        }
        let info = self.plugin.info();
        let record = LastReconcile {
            plugin: info.name.clone(),
            version: info.version.clone(),
            digest: format!("sha256:{}", self.plugin.digest()),
            generation: parent["metadata"]["generation"].as_i64().unwrap_or(0),
            time: model::now(),
            outcome,
            reads,
            trace_id,
        };
        if !record.differs(LastReconcile::of(parent).as_ref()) {
            return;
        }
        match self
            .applier
            .annotate(parent, LAST_RECONCILE, &record.to_annotation())
            .await
        {
            Ok(object) => self.wiring.parents().observe_write(object),
            Err(error) => {
                debug!(plugin = %info.name, parent = %model::object_ref(parent), %error,
                       "recording the last reconcile on the parent failed")
            }
        }
    }

    /// Shows on `parent` that the plugin is suspended: `Synced=False`, reason
    /// [`PAUSED_REASON`], naming `owner` (the ReconcilePlugin). Nothing is written where the
    /// parent already shows it, where the kind has no conditions, or on a decorated object.
    /// The next reconcile after the plugin resumes puts `Synced` back. Returns whether it wrote.
    pub async fn show_paused(&self, parent: &Value, owner: &str) -> bool {
        let fields = self.status_fields();
        if fields.decorator {
            return false;
        }
        let shown = parent["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == SYNCED && c["reason"] == PAUSED_REASON);
        if shown {
            return false;
        }
        let message = format!(
            "ReconcilePlugin {owner} is suspended (spec.suspend): changes to this {} are not reconciled until it is resumed",
            parent["kind"].as_str().unwrap_or("object")
        );
        let Some(status) =
            planner::failure_status(parent, PAUSED_REASON, &message, &fields, &model::now())
        else {
            return false;
        };
        match self.applier.status(parent, &status).await {
            Ok(object) => {
                self.wiring.parents().observe_write(object);
                true
            }
            Err(error) => {
                info!(plugin = %self.plugin.info().name, parent = %model::object_ref(parent),
                      %error, "showing the suspension on the parent failed");
                false
            }
        }
    }
}

/// A read as the record says it.
fn said(read: &Read) -> String {
    match read {
        Read::Get {
            kind,
            namespace,
            name,
        } if namespace.is_empty() => format!("get {kind} {name}"),
        Read::Get {
            kind,
            namespace,
            name,
        } => format!("get {kind} {namespace}/{name}"),
        Read::List {
            kind,
            namespace,
            selector,
        } => {
            let place = if namespace.is_empty() {
                "(all namespaces)"
            } else {
                namespace
            };
            if selector.is_empty() {
                format!("list {kind} {place}")
            } else {
                format!("list {kind} {place} {selector}")
            }
        }
    }
}

/// What a plan that went through wrote.
fn outcome_of(plan: &Plan) -> Outcome {
    let count = |actions: &[Action]| {
        plan.children
            .iter()
            .filter(|c| actions.contains(&c.action))
            .count() as u32
    };
    let created = count(&[Action::Create]);
    let changed = count(&[Action::Update, Action::Recreate]);
    let deleted = count(&[Action::Delete]);
    let parent = plan.status.is_some() || plan.metadata.is_some() || plan.finalizer.is_some();
    if created + changed + deleted == 0 && !parent {
        Outcome::UpToDate
    } else {
        Outcome::Applied {
            created,
            changed,
            deleted,
            parent,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controller::permanent::Permanent;
    use crate::planner::ChildPlan;

    #[test]
    fn the_record_should_not_wake_a_parent_that_failed_for_good() {
        let parent = json!({"metadata": {"uid": "u", "generation": 1, "annotations": {"a": "b"}}});
        let mut permanent = Permanent::default();
        permanent.remember(&parent);
        let mut recorded = parent.clone();
        recorded["metadata"]["annotations"][LAST_RECONCILE] = json!("{}");
        assert!(permanent.holds(&recorded));
        recorded["metadata"]["annotations"]["a"] = json!("c");
        assert!(
            !permanent.holds(&recorded),
            "another annotation is an input"
        );
        // Nor when it is the parent's only annotation.
        let bare = json!({"metadata": {"uid": "u", "generation": 1}});
        permanent.remember(&bare);
        let mut recorded = bare.clone();
        recorded["metadata"]["annotations"] = json!({LAST_RECONCILE: "{}"});
        assert!(permanent.holds(&recorded));
    }

    #[test]
    fn reads_should_be_said_as_a_person_reads_them() {
        let kind = crate::model::KindRef::new("v1", "ConfigMap");
        let get = Read::Get {
            kind: kind.clone(),
            namespace: "default".into(),
            name: "overrides".into(),
        };
        assert_eq!(said(&get), "get v1/ConfigMap default/overrides");
        let list = Read::List {
            kind,
            namespace: String::new(),
            selector: "app=shop".into(),
        };
        assert_eq!(said(&list), "list v1/ConfigMap (all namespaces) app=shop");
    }

    #[test]
    fn a_plan_should_be_counted_by_action() {
        let empty = Plan {
            children: Vec::new(),
            status: None,
            finalizer: None,
            dropped: Vec::new(),
            metadata: None,
        };
        assert_eq!(outcome_of(&empty), Outcome::UpToDate);
        let child = |action| ChildPlan {
            action,
            kind: crate::model::KindRef::new("v1", "ConfigMap"),
            namespace: "default".into(),
            name: "c".into(),
            object: json!({}),
            uid: None,
            wave: 0,
            why: None,
            changes: Default::default(),
        };
        let plan = Plan {
            children: [
                Action::Create,
                Action::Recreate,
                Action::Update,
                Action::Delete,
            ]
            .into_iter()
            .chain([Action::Unchanged, Action::Kept, Action::Waiting])
            .map(child)
            .collect(),
            status: None,
            ..empty
        };
        assert_eq!(
            outcome_of(&plan),
            Outcome::Applied {
                created: 1,
                changed: 2,
                deleted: 1,
                parent: false
            }
        );
    }
}
