//! What of a rollout the ReconcilePlugin's status shows (`status.rollout`, `status.revisions`,
//! `status.history`, the `Progressing` condition), and what a restarted host takes back from it:
//! the stable revision's source, from the history.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::Lifecycle;
use super::progress::{now, phase};
use super::rollout::DEFAULT_HISTORY;
use crate::api::{self, HistoryEntry, ReconcilePlugin, ReconcilePluginStatus, RevisionStatus};
use crate::api::{RolloutStatus, ShadowStatus};
use crate::controller::health::Snapshot;
use crate::controller::{Revision, Stage};

impl Lifecycle {
    /// `wanted` with the rollout's part: `status.rollout`, the revisions serving, the history
    /// and the `Progressing` condition.
    pub(super) fn with_rollout(
        &self,
        name: &str,
        rp: &ReconcilePlugin,
        mut wanted: ReconcilePluginStatus,
    ) -> ReconcilePluginStatus {
        let previous = rp.status.as_ref();
        let rollout = {
            let rollouts = self.rollouts.lock().expect("lifecycle lock poisoned");
            rollouts.get(name).map(super::progress::Progress::shown)
        };
        wanted.rollout = rollout.or_else(|| previous.and_then(|s| s.rollout.clone()));
        if let Some(controller) = self.supervisor.controller(name) {
            let stable = controller.current();
            let candidate = controller.candidate();
            let share = match &candidate {
                Some((_, Stage::Share(share))) => share.as_percent(),
                _ => 0.0,
            };
            // Counted as the step started: counting on every look would parse every parent.
            let serves = match &candidate {
                Some((_, Stage::Share(_))) => self
                    .rollouts
                    .lock()
                    .expect("lifecycle lock poisoned")
                    .get(name)
                    .map_or(0, super::progress::Progress::serves),
                _ => 0,
            };
            let all = controller.parents() as u64;
            let plugin = controller.name().to_owned();
            let revision = |r: &Revision, role: &str, percent: f64, parents: u64| {
                let h = r.health().snapshot();
                self.metrics.revision(&plugin, role, &h);
                RevisionStatus {
                    digest: format!("sha256:{}", r.plugin().digest()),
                    role: role.to_owned(),
                    percent,
                    parents,
                    calls: h.calls,
                    failed_calls: h.failed_calls,
                    errors: h.errors,
                }
            };
            wanted.revisions = stable
                .iter()
                .map(|s| revision(s, "stable", 100.0 - share, all.saturating_sub(serves)))
                .chain(
                    candidate
                        .iter()
                        .map(|(c, _)| revision(c, "candidate", share, serves)),
                )
                .collect();
            if candidate.is_none() {
                self.metrics
                    .revision(&plugin, "candidate", &Default::default());
            }
            self.metrics.rollout_share(&plugin, share);
        }
        wanted.history = history(
            rp,
            wanted.active_digest.as_deref(),
            self.source_of_active(name),
        );
        if let Some(rollout) = &wanted.rollout {
            let (status, reason) = match rollout.phase.as_str() {
                phase::PROGRESSING => ("True", "RolloutInProgress"),
                phase::PROMOTED => ("True", "RolloutPromoted"),
                phase::ABORTED => ("False", "RolloutAborted"),
                phase::SUPERSEDED => ("False", "RolloutSuperseded"),
                _ => ("False", "RolloutRolledBack"),
            };
            let since = previous
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Progressing"))
                .filter(|c| c.status == status && c.reason == reason)
                .map_or_else(now, |c| c.last_transition_time.clone());
            wanted.conditions.push(Condition {
                type_: "Progressing".into(),
                status: status.into(),
                reason: reason.into(),
                message: rollout.message.clone(),
                last_transition_time: since,
                observed_generation: wanted.observed_generation,
            });
        }
        wanted
    }

    fn source_of_active(&self, name: &str) -> Option<api::Source> {
        self.installed
            .lock()
            .expect("lifecycle lock poisoned")
            .get(name)
            .map(|i| i.source.clone())
    }
}

/// The source of the revision a restarted host must serve while it takes up a rollout: the
/// stable digest of `status.rollout`, from `status.history`, when the spec's digest is that
/// rollout's candidate.
pub(super) fn stable_to_restore(rp: &ReconcilePlugin) -> Option<api::Source> {
    let status = rp.status.as_ref()?;
    let rollout = status.rollout.as_ref()?;
    if rollout.candidate != rp.spec.source.digest || rollout.phase == phase::PROMOTED {
        return None;
    }
    status
        .history
        .iter()
        .find(|h| h.source.digest == rollout.stable)
        .map(|h| h.source.clone())
}

/// `status.history` with the active revision first: the previous history, and `active` (from
/// `source`) put in front when it is new there, up to the spec's limit.
fn history(
    rp: &ReconcilePlugin,
    active: Option<&str>,
    source: Option<api::Source>,
) -> Vec<HistoryEntry> {
    let mut history: Vec<HistoryEntry> = rp
        .status
        .as_ref()
        .map(|s| s.history.clone())
        .unwrap_or_default();
    if let (Some(active), Some(source)) = (active, source)
        && history.first().is_none_or(|h| h.source.digest != active)
        && source.digest == active
    {
        history.retain(|h| h.source.digest != active);
        history.insert(
            0,
            HistoryEntry {
                source,
                since: Some(now()),
            },
        );
    }
    let limit = rp
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.revision_history_limit)
        .map_or(DEFAULT_HISTORY, usize::from);
    history.truncate(limit);
    history
}

/// `others` is what the other members of a sharding ring counted of the candidate: their
/// comparisons count, their differences are theirs to log.
pub(super) fn shadow_status(
    candidate: &Revision,
    others: Snapshot,
    status: &RolloutStatus,
) -> Option<ShadowStatus> {
    let h = candidate.health().snapshot() + others;
    if h.shadowed == 0 {
        return status.shadow.clone();
    }
    let (parents, diffs) = candidate.health().divergence();
    Some(ShadowStatus {
        compared: h.shadowed,
        diverged: h.diverged,
        parents_diverged: parents as u64,
        differences: diffs
            .iter()
            .flat_map(|d| d.shown.iter().map(move |s| format!("{}: {s}", d.parent)))
            .collect(),
    })
}
