//! How the reconciler shows what went wrong: on the parent (`Synced=False` with the message,
//! where the kind has conditions) and as a Warning event; and how each failure decides what
//! happens next (terminal, retried, or retried without being shown).

use serde_json::Value;
use tracing::{debug, warn};

use super::Reconciler;
use crate::cache::ObjectKey;
use crate::controller::applier::ApplyError;
use crate::controller::workers::Next;
use crate::model::{self, Event, EventType, object_ref};
use crate::planner;
use crate::runtime::{CallError, CallErrorKind};

/// Conflicts in a row after which a parent shows them: one is the normal outcome of racing
/// another writer, five in a row is something that does not go away by itself.
const CONFLICTS_SHOWN_AFTER: u32 = 5;

impl Reconciler {
    /// A failed plugin call: counted, shown, and terminal if the plugin said so (or its
    /// failure can only repeat with these inputs), retried with backoff otherwise.
    pub(super) async fn call_failed(
        &self,
        key: &ObjectKey,
        parent: &Value,
        error: CallError,
    ) -> Next {
        let label = error.kind.label();
        self.metrics.error(label);
        self.health.failed(&error.kind);
        if matches!(error.kind, CallErrorKind::Plugin(_)) {
            // The plugin's own error often names a missing or wrong input; what it read wakes
            // the parent when that input changes. Other failures say nothing about what was
            // read, so the previous record stands.
            self.book.deps().record(key, &error.reads);
        }
        let message = error.kind.to_string();
        warn!(plugin = %error.plugin, parent = %key, kind = label, error = %message, "reconcile failed");
        self.report_because(parent, "ReconcileError", label, &message)
            .await;
        if error.kind.is_permanent() {
            self.book.write(key, |p| p.permanent.remember(parent));
            Next::Terminal
        } else {
            Next::Retry
        }
    }

    /// A write the API server refused: a conflict is retried (and shown only once it keeps
    /// coming back), a rejection of what the plugin asked for is terminal, the rest retried.
    pub(super) async fn apply_failed(
        &self,
        key: &ObjectKey,
        parent: &Value,
        error: ApplyError,
    ) -> Next {
        let name = &self.plugin.info().name;
        if error.is_conflict() {
            // Racing another writer; the next attempt sees its change. One that keeps coming
            // back is shown, never taken for success.
            let in_a_row = self.book.write(key, |p| {
                p.conflicts += 1;
                p.conflicts
            });
            debug!(plugin = %name, parent = %key, %error, in_a_row, "conflict; retrying");
            if in_a_row >= CONFLICTS_SHOWN_AFTER {
                let message = format!("{in_a_row} conflicts in a row: {error}");
                self.report_because(parent, "ApplyConflict", &error.code(), &message)
                    .await;
            }
            return Next::Retry;
        }
        let message = error.to_string();
        warn!(plugin = %name, parent = %key, error = %message, retrying = error.is_retryable(),
              "applying the desired state failed");
        self.report_because(parent, "ApplyError", &error.code(), &message)
            .await;
        if error.is_retryable() {
            Next::Retry
        } else {
            self.book.write(key, |p| p.permanent.remember(parent));
            Next::Terminal
        }
    }

    /// Says once per change of the parent kind's schema, on the first parent whose status it
    /// wrote, which of the host's fields the kind does not declare.
    pub(super) async fn say_missing_fields(&self, parent: &Value) {
        if self.decorator {
            // A decorator writes none of the host's fields anywhere: nothing is missing.
            return;
        }
        if let Some(missing) = self.wiring.schema().unsaid_missing() {
            let event = Event {
                type_: EventType::Warning,
                reason: "StatusFieldsUndeclared".into(),
                message: format!(
                    "the CustomResourceDefinition of {} does not declare {missing}: the host writes the plugin's status without them, so failures show only as events",
                    self.wiring.parents().kind().resource.kind
                ),
            };
            self.applier.events(parent, &[event]).await;
        }
    }

    /// Says once per change of the parent kind's schema, in a log line and a Warning event on
    /// the parent where it was first seen, each field of the plugin's status the kind does not
    /// declare and the host therefore dropped (`dropped`, from the plan).
    pub(super) async fn say_dropped(&self, parent: &Value, dropped: &[String]) {
        if dropped.is_empty() {
            // The common case, on every reconcile: no lock to take.
            return;
        }
        let unsaid = self.wiring.schema().unsaid_dropped(dropped);
        if unsaid.is_empty() {
            return;
        }
        let kind = &self.wiring.parents().kind().resource.kind;
        let fields = unsaid.join(", ");
        warn!(plugin = %self.plugin.info().name, parent = %object_ref(parent), %kind, %fields,
              "the kind's status schema does not declare fields of the plugin's status; the host drops them");
        let name = &self.plugin.info().name;
        let message = if self.wiring.has_crd() {
            format!(
                "the CustomResourceDefinition of {kind} does not declare {fields}: the host writes plugin {name}'s status without them"
            )
        } else {
            // Only a decorator gets here: an owner of a built-in kind has its status written
            // whole, the API server being the judge.
            format!(
                "{kind} is a built-in kind, with no CustomResourceDefinition to declare what its status may hold: the host writes none of decorator {name}'s status ({fields})"
            )
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "StatusFieldsDropped".into(),
            message,
        };
        self.applier.events(parent, &[event]).await;
    }

    /// Shows a failure on the parent: `Synced=False` with the message (where the kind has
    /// conditions), and a Warning event.
    pub(super) async fn report(&self, parent: &Value, reason: &str, message: &str) {
        self.report_because(parent, reason, "", message).await;
    }

    /// [`Self::report`], with the failure's typed `cause` (a call's failure kind, an API
    /// status code) for the record on the parent, which is written first: the event, last,
    /// is what says the failure has been shown.
    pub(super) async fn report_because(
        &self,
        parent: &Value,
        reason: &str,
        cause: &str,
        message: &str,
    ) {
        self.record_failure(parent, reason, cause, message, crate::telemetry::trace_id())
            .await;
        self.health.synced_false();
        let fields = self.status_fields();
        if let Some(status) =
            planner::failure_status(parent, reason, message, &fields, &model::now())
        {
            match self.applier.status(parent, &status).await {
                Ok(object) => self.wiring.parents().observe_write(object),
                Err(error) => {
                    warn!(plugin = %self.plugin.info().name, parent = %object_ref(parent),
                                    %error, "writing the failure condition failed")
                }
            }
        }
        let event = Event {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            message: message.to_owned(),
        };
        self.applier.events(parent, &[event]).await;
    }
}

/// The failed children, one per line-ish: what each write was refused with.
pub(super) fn failures_message(failed: &[ApplyError]) -> String {
    failed
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
