//! What the host records on a parent about the reconcile that last served it: which plugin,
//! version and digest, when, with what outcome, and the trace id. Kept as one annotation the
//! host owns ([`LAST_RECONCILE`]), read back by `reconhost trace`.
//!
//! An annotation rather than a status field: a parent's status schema belongs to the plugin's
//! author and often declares none of the host's fields (`planner/status_fields.rs`), while
//! every object admits annotations, and plugins may not set keys under `reconhost.dev/`.
//! It is written only when what it says changes (see [`LastReconcile::differs`]), so a steady
//! state and the no-op reconcile that follows each write send nothing.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The annotation holding a parent's [`LastReconcile`], as JSON.
pub const LAST_RECONCILE: &str = "reconhost.dev/last-reconcile";

/// The reason of the `Synced=False` condition the host shows on the parents of a suspended
/// plugin (Crossplane's reason for the same state).
pub const PAUSED_REASON: &str = "ReconcilePaused";

/// The reconcile that last served a parent, as recorded on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastReconcile {
    /// The plugin's name, from its `info()`.
    pub plugin: String,
    /// The plugin's version, from its `info()`.
    pub version: String,
    /// The digest of the component that served it, `sha256:<hex>`.
    pub digest: String,
    /// The parent's `metadata.generation` the reconcile saw.
    #[serde(default)]
    pub generation: i64,
    /// When this outcome was first recorded (RFC 3339): later reconciles with the same
    /// outcome do not rewrite it.
    pub time: String,
    /// What it came to.
    pub outcome: Outcome,
    /// What the plugin read through `get` and `list` in that reconcile, as
    /// `get <apiVersion/kind> <namespace/name>` and `list <apiVersion/kind> <namespace>
    /// [selector]`: the objects that wake the parent when they change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    /// The OpenTelemetry trace id of that reconcile, when tracing is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// What a reconcile came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum Outcome {
    /// The plan went through: what it wrote.
    #[serde(rename_all = "camelCase")]
    Applied {
        /// Children created (a recreate counts as a change).
        created: u32,
        /// Children changed in place or recreated.
        changed: u32,
        /// Children deleted.
        deleted: u32,
        /// Whether the parent itself was written: its status, finalizer or labels.
        parent: bool,
    },
    /// Nothing to do: the cluster already held the desired state.
    UpToDate,
    /// It failed.
    Failed(Failure),
}

/// Why a reconcile failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The reason shown on `Synced=False` and the Warning event (`ReconcileError`,
    /// `ApplyError`, `ChildFailed`, ...).
    pub reason: String,
    /// The typed cause: for a failed call the kind of failure (`permanent`, `transient`,
    /// `trap`, `deadline`, `memory`, `invalid_response`, ...); for a refused write the HTTP
    /// status (`422`, `403`, `network`); empty when there is none to give.
    #[serde(default)]
    pub cause: String,
    /// The whole message, never cut short of the condition's own limit.
    pub message: String,
}

impl Outcome {
    /// Whether the outcome wrote anything.
    pub fn wrote(&self) -> bool {
        matches!(self, Self::Applied { created, changed, deleted, parent }
            if created + changed + deleted > 0 || *parent)
    }

    /// One line for people: `applied: 1 created, 2 changed, status`, `up to date`, `failed
    /// (ApplyError, 422): ...`.
    pub fn summary(&self) -> String {
        match self {
            Self::Applied {
                created,
                changed,
                deleted,
                parent,
            } => {
                let mut parts: Vec<String> = [(created, "created"), (changed, "changed")]
                    .into_iter()
                    .chain([(deleted, "deleted")])
                    .filter(|(n, _)| **n > 0)
                    .map(|(n, what)| format!("{n} {what}"))
                    .collect();
                if *parent {
                    parts.push("parent written".into());
                }
                if parts.is_empty() {
                    "up to date".into()
                } else {
                    format!("applied: {}", parts.join(", "))
                }
            }
            Self::UpToDate => "up to date".into(),
            Self::Failed(f) if f.cause.is_empty() => {
                format!("failed ({}): {}", f.reason, f.message)
            }
            Self::Failed(f) => format!("failed ({}, {}): {}", f.reason, f.cause, f.message),
        }
    }
}

impl LastReconcile {
    /// The record on `parent`, if it has one that parses.
    pub fn of(parent: &Value) -> Option<Self> {
        parent["metadata"]["annotations"][LAST_RECONCILE]
            .as_str()
            .and_then(|text| serde_json::from_str(text).ok())
    }

    /// Whether `self`, a new reconcile's record, says something `previous` (the one on the
    /// parent) does not, so that it is worth a write: other code, other reads, another outcome
    /// or generation. The time and the trace id do not count
    /// (they change on every reconcile); nor does the no-op that follows a write at the same
    /// generation, on the same code: it is the echo of that write, and the parent's `Synced`
    /// condition already says it is in sync.
    pub fn differs(&self, previous: Option<&Self>) -> bool {
        let Some(previous) = previous else {
            return true;
        };
        let same_code = self.plugin == previous.plugin
            && self.version == previous.version
            && self.digest == previous.digest;
        if !same_code || self.reads != previous.reads {
            return true;
        }
        match (&self.outcome, &previous.outcome) {
            (Outcome::UpToDate, Outcome::Applied { .. } | Outcome::UpToDate) => {
                self.generation != previous.generation
            }
            (new, old) => new != old || self.generation != previous.generation,
        }
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(outcome: Outcome, generation: i64) -> LastReconcile {
        LastReconcile {
            plugin: "webapp".into(),
            version: "0.1.0".into(),
            digest: "sha256:aa".into(),
            generation,
            time: "2026-01-01T00:00:00Z".into(),
            outcome,
            reads: Vec::new(),
            trace_id: None,
        }
    }

    fn applied(changed: u32) -> Outcome {
        Outcome::Applied {
            created: 0,
            changed,
            deleted: 0,
            parent: true,
        }
    }

    fn failed(message: &str) -> Outcome {
        Outcome::Failed(Failure {
            reason: "ReconcileError".into(),
            cause: "permanent".into(),
            message: message.into(),
        })
    }

    #[test]
    fn the_echo_of_a_write_should_not_be_recorded() {
        let wrote = record(applied(1), 2);
        assert!(!record(Outcome::UpToDate, 2).differs(Some(&wrote)));
        // Nor is a reconcile that finds nothing to do, again.
        let idle = record(Outcome::UpToDate, 2);
        assert!(!record(Outcome::UpToDate, 2).differs(Some(&idle)));
    }

    #[test]
    fn time_and_trace_should_not_count() {
        let old = record(failed("no image"), 3);
        let mut new = record(failed("no image"), 3);
        new.time = "2026-01-01T00:05:00Z".into();
        new.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
        assert!(!new.differs(Some(&old)));
    }

    #[test]
    fn a_new_outcome_code_or_generation_should_be_recorded() {
        let old = record(applied(1), 2);
        assert!(record(applied(1), 3).differs(Some(&old)));
        assert!(record(applied(2), 2).differs(Some(&old)));
        assert!(record(failed("no image"), 2).differs(Some(&old)));
        assert!(record(failed("other"), 2).differs(Some(&record(failed("no image"), 2))));
        assert!(record(Outcome::UpToDate, 2).differs(Some(&record(failed("no image"), 2))));
        let mut upgraded = record(Outcome::UpToDate, 2);
        upgraded.digest = "sha256:bb".into();
        assert!(upgraded.differs(Some(&old)));
        assert!(record(Outcome::UpToDate, 1).differs(None));
    }

    #[test]
    fn the_annotation_should_read_back() {
        let r = record(failed("spec.image: must not be empty"), 4);
        let parent = json!({"metadata": {"annotations": {LAST_RECONCILE: r.to_annotation()}}});
        assert_eq!(LastReconcile::of(&parent), Some(r));
        assert_eq!(LastReconcile::of(&json!({"metadata": {}})), None);
    }

    #[test]
    fn summaries_should_say_what_happened() {
        assert_eq!(applied(2).summary(), "applied: 2 changed, parent written");
        assert_eq!(Outcome::UpToDate.summary(), "up to date");
        assert_eq!(
            failed("boom").summary(),
            "failed (ReconcileError, permanent): boom"
        );
    }
}
