//! A progressive rollout as the lifecycle drives it: the candidate prepared beside the stable
//! revision, staged step by step on the plugin's controller, judged on every look
//! ([`rollout::judge`]), promoted, or rolled back at once; and what of it the status shows.
//!
//! Where it stands lives in `status.rollout`, so a host that restarts mid-rollout restores the
//! stable revision from `status.history`, then takes the candidate up at the step it was at
//! (its window starts again). A candidate rolled back, or aborted by a person, stays so until
//! `spec.source` names another digest.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;
use tracing::{info, warn};

use super::events::event;
use super::rollout::{self, Plan, Verdict};
use super::rollout_status::shadow_status;
use super::{Failure, Installed, Lifecycle};
use crate::api::{self, ReconcilePlugin, RolloutStatus};
use crate::controller::health::Snapshot;
use crate::controller::{Revision, Stage, short};
use crate::identity::Identity;
use crate::shard::counts::{Role, Window};
use kube::runtime::events::EventType;

/// How often a rollout in progress is looked at.
pub const TICK: Duration = Duration::from_secs(1);

/// The annotation a person sets to the candidate's digest to promote it now.
pub const PROMOTE: &str = "reconhost.dev/rollout-promote";
/// The annotation a person sets to the candidate's digest to roll it back now.
pub const ABORT: &str = "reconhost.dev/rollout-abort";

/// The phases of `status.rollout.phase`.
pub mod phase {
    /// Going through the steps.
    pub const PROGRESSING: &str = "Progressing";
    /// Passed the last step, or promoted by a person: serves every parent.
    pub const PROMOTED: &str = "Promoted";
    /// Did worse than a threshold allows: every parent back on stable.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// Rolled back by a person.
    pub const ABORTED: &str = "Aborted";
    /// Ended because the spec moved on (another digest or config, back to the stable digest,
    /// an immediate rollout); the same candidate applied again starts afresh.
    pub const SUPERSEDED: &str = "Superseded";
}

/// One ReconcilePlugin's rollout, as this host runs it.
pub(super) struct Progress {
    /// What the candidate was made of (the spec's fingerprint then).
    fingerprint: u64,
    status: RolloutStatus,
    /// The candidate, while it is one.
    candidate: Option<Arc<Revision>>,
    step_started: Instant,
    /// The stable and the candidate revisions' calls since the step started, across the
    /// ring with sharding (each member's since then).
    windows: (Window, Window),
    /// How many parents the step has to see: every parent shadowed, or every parent the
    /// candidate took at this step (counted as it started).
    parents: u64,
    /// How many parents the candidate serves (0 in shadow).
    serves: u64,
    /// What the other members of a sharding ring counted of the candidate, as last read.
    others: Snapshot,
}

impl Progress {
    /// How many parents the candidate serves, as its step started.
    pub(super) fn serves(&self) -> u64 {
        self.serves
    }

    /// The rollout as `status.rollout` shows it now.
    pub(super) fn shown(&self) -> RolloutStatus {
        let mut status = self.status.clone();
        if let Some(candidate) = &self.candidate {
            status.shadow = shadow_status(candidate, self.others, &status);
        }
        status
    }
}

impl Lifecycle {
    /// Takes the rollout of `rp`'s digest one look further: starts it, judges its step,
    /// promotes or rolls back.
    pub(super) async fn roll(
        &self,
        name: &str,
        rp: &ReconcilePlugin,
        object: &Value,
        identity: &Identity,
        fingerprint: u64,
        plan: &Plan,
    ) -> Result<(), Failure> {
        let digest = rp.spec.source.digest.clone();
        let known = self
            .rollouts
            .lock()
            .expect("lifecycle lock poisoned")
            .get(name)
            .map(|p| (p.fingerprint, p.status.phase.clone(), p.candidate.is_some()));
        match known {
            Some((f, phase, _))
                if f == fingerprint && (phase == phase::ROLLED_BACK || phase == phase::ABORTED) =>
            {
                if promote_asked(object, &digest) {
                    // A person takes the candidate as it is, after it was rolled back.
                    let current = self
                        .supervisor
                        .controller(name)
                        .and_then(|c| c.current())
                        .map(|s| s.plugin().clone());
                    self.install(name, rp, identity, fingerprint, current, &rp.spec.source)
                        .await?;
                    let message = "promoted by a person (annotation reconhost.dev/rollout-promote) after it was rolled back";
                    self.conclude(name, phase::PROMOTED, "done", message);
                    self.counted(name, "promoted");
                }
                Ok(())
            }
            Some((f, _, true)) if f == fingerprint => {
                self.drive(name, object, plan).await;
                Ok(())
            }
            _ => {
                // Another digest (or config) came mid-rollout: the old candidate goes.
                self.end_rollout(name, "the spec changed: another candidate replaced it")
                    .await;
                let earlier = rp
                    .status
                    .as_ref()
                    .and_then(|s| s.rollout.clone())
                    .filter(|r| r.candidate == digest);
                if let Some(ended) = earlier
                    .as_ref()
                    .filter(|r| r.phase == phase::ROLLED_BACK || r.phase == phase::ABORTED)
                {
                    self.remember(name, fingerprint, ended.clone(), None);
                    return Ok(());
                }
                let step = earlier
                    .filter(|r| r.phase == phase::PROGRESSING)
                    .map_or(0, |r| r.step as usize)
                    .min(plan.steps.len() - 1);
                self.start_rollout(name, rp, identity, fingerprint, plan, step)
                    .await
            }
        }
    }

    async fn start_rollout(
        &self,
        name: &str,
        rp: &ReconcilePlugin,
        identity: &Identity,
        fingerprint: u64,
        plan: &Plan,
        step: usize,
    ) -> Result<(), Failure> {
        let parent = crate::model::KindRef::from(&rp.spec.parent);
        let (Some(controller), Some(stable)) = (
            self.supervisor.controller(name),
            self.supervisor.controller(name).and_then(|c| c.current()),
        ) else {
            return Ok(());
        };
        let (spec, _) = self
            .load_spec(
                name,
                rp,
                identity,
                Some(stable.plugin().clone()),
                &rp.spec.source,
            )
            .await?;
        if spec.parent_namespaces != stable.spec().parent_namespaces {
            // Two revisions serve one set of parents, seen through one wiring: a digest that
            // comes with other namespaces applies at once.
            info!(
                plugin = name,
                "spec.namespaces changed with the digest: no progressive rollout"
            );
            return self
                .install(
                    name,
                    rp,
                    identity,
                    fingerprint,
                    Some(stable.plugin().clone()),
                    &rp.spec.source,
                )
                .await;
        }
        let candidate = match self.supervisor.prepare(name, spec).await {
            Some(prepared) => Arc::new(prepared.map_err(|e| Failure::supervisor(&e, &parent))?),
            None => return Ok(()),
        };
        let stage = plan.steps[step];
        self.supervisor.start_attempt(name, fingerprint);
        controller.stage(candidate.clone(), stage.stage).await;
        info!(plugin = name, candidate = %short(candidate.plugin().digest()),
              stable = %short(stable.plugin().digest()), step, stage = %stage.describe(),
              "rollout started");
        let status = RolloutStatus {
            phase: phase::PROGRESSING.into(),
            candidate: rp.spec.source.digest.clone(),
            stable: format!("sha256:{}", stable.plugin().digest()),
            step: step as u32,
            stage: stage.describe(),
            step_started_at: Some(now()),
            message: format!(
                "step {} of {}: {}",
                step + 1,
                plan.steps.len(),
                stage.describe()
            ),
            shadow: None,
        };
        self.remember(name, fingerprint, status, Some(candidate));
        Ok(())
    }

    fn remember(
        &self,
        name: &str,
        fingerprint: u64,
        status: RolloutStatus,
        candidate: Option<Arc<Revision>>,
    ) {
        let stable = self.supervisor.controller(name).and_then(|c| c.current());
        let windows = match (&stable, &candidate) {
            // At the first step every member's candidate counted from zero, and counted only
            // this step: a baseline of what they had counted when this replica started would
            // drop the calls of a member that started first (with sharding, a member that
            // compiled the candidate sooner can shadow its whole share before the judge
            // starts, and the step would then wait for ever on calls already made).
            (Some(stable), Some(candidate)) if status.step == 0 => (
                Window::new(self.tally(name, fingerprint, stable, candidate, Role::Stable)),
                Window::default(),
            ),
            (Some(stable), Some(candidate)) => self.windows(name, fingerprint, stable, candidate),
            _ => Default::default(),
        };
        // A rollout started (or taken up) at a step moves every parent of the step at once.
        let parents = match (&candidate, self.supervisor.controller(name)) {
            (Some(_), Some(controller)) => controller.parents_at_stage(),
            _ => 0,
        };
        let serves = match self.supervisor.controller(name).and_then(|c| c.candidate()) {
            Some((_, Stage::Share(_))) => parents,
            _ => 0,
        };
        self.rollouts
            .lock()
            .expect("lifecycle lock poisoned")
            .insert(
                name.to_owned(),
                Progress {
                    fingerprint,
                    status,
                    candidate,
                    step_started: Instant::now(),
                    windows,
                    parents,
                    serves,
                    others: Snapshot::default(),
                },
            );
    }

    /// Judges the candidate's step and acts on the verdict, or on a person's annotation.
    async fn drive(&self, name: &str, object: &Value, plan: &Plan) {
        let Some(controller) = self.supervisor.controller(name) else {
            return;
        };
        let Some(stable) = controller.current() else {
            return;
        };
        let (fingerprint, candidate, step, elapsed, digest, parents, before) = {
            let rollouts = self.rollouts.lock().expect("lifecycle lock poisoned");
            let Some(p) = rollouts.get(name) else { return };
            let Some(candidate) = p.candidate.clone() else {
                return;
            };
            (
                p.fingerprint,
                candidate,
                p.status.step as usize,
                p.step_started.elapsed(),
                p.status.candidate.clone(),
                p.parents,
                p.serves,
            )
        };
        if !*self.leading.borrow() {
            // A standby judges nothing (its workers are stopped, so its counts say nothing):
            // it follows what the leader wrote, so that it serves the same if it takes over.
            self.follow(name, object, plan, &candidate, step).await;
            return;
        }
        let (stable_calls, candidate_calls) = {
            let stable_now = self.tally(name, fingerprint, &stable, &candidate, Role::Stable);
            let candidate_now =
                self.tally(name, fingerprint, &candidate, &candidate, Role::Candidate);
            let mut rollouts = self.rollouts.lock().expect("lifecycle lock poisoned");
            let Some(p) = rollouts.get_mut(name) else {
                return;
            };
            p.others = candidate_now
                .iter()
                .filter(|(member, _)| !member.is_empty())
                .fold(Snapshot::default(), |sum, (_, s)| sum + *s);
            p.windows.0.update(stable_now);
            p.windows.1.update(candidate_now);
            (p.windows.0.total(), p.windows.1.total())
        };
        let asked = |key: &str| object["metadata"]["annotations"][key].as_str() == Some(&digest);
        let verdict = if asked(ABORT) {
            Verdict::Fail("aborted by a person (annotation reconhost.dev/rollout-abort)".into())
        } else if asked(PROMOTE) {
            Verdict::Pass
        } else {
            rollout::judge(
                &plan.steps[step],
                elapsed,
                parents,
                &candidate_calls,
                &stable_calls,
                &plan.thresholds,
            )
        };
        match verdict {
            Verdict::Wait => {}
            Verdict::Pass if asked(PROMOTE) || step + 1 == plan.steps.len() => {
                self.promote(name, object, &candidate).await;
                let message = if asked(PROMOTE) {
                    "promoted by a person (annotation reconhost.dev/rollout-promote)".to_owned()
                } else {
                    format!("passed all {} steps; serves every parent", plan.steps.len())
                };
                info!(plugin = name, candidate = %short(candidate.plugin().digest()), "rollout promoted");
                self.conclude(name, phase::PROMOTED, "done", &message);
                let event = event(EventType::Normal, "RolloutPromoted", message);
                self.writer.event(object, &event).await;
                self.counted(name, "promoted");
            }
            Verdict::Pass => {
                let next = plan.steps[step + 1];
                // The windows start before the stage moves: a call this replica makes in
                // between then counts in the new step (one too many) rather than being lost
                // to it (a step that waits for its parents' calls would wait for ever).
                let windows = self.windows(name, fingerprint, &stable, &candidate);
                let message = format!(
                    "step {} of {}: {} (passed {})",
                    step + 2,
                    plan.steps.len(),
                    next.describe(),
                    plan.steps[step].describe()
                );
                // Logged before the stage moves, so that no call the new stage routes comes
                // before the line that says it began.
                info!(plugin = name, step = step + 1, stage = %next.describe(), "rollout step");
                controller.stage(candidate.clone(), next.stage).await;
                let (parents, serves) = to_see(next.stage, controller.parents_at_stage(), before);
                if let Some(p) = self
                    .rollouts
                    .lock()
                    .expect("lifecycle lock poisoned")
                    .get_mut(name)
                {
                    p.status.step = (step + 1) as u32;
                    p.status.stage = next.describe();
                    p.status.step_started_at = Some(now());
                    p.status.message = message.clone();
                    p.step_started = Instant::now();
                    p.windows = windows;
                    p.parents = parents;
                    p.serves = serves;
                }
                let event = event(EventType::Normal, "RolloutStep", message);
                self.writer.event(object, &event).await;
                self.counted(name, "step");
            }
            Verdict::Fail(why) => {
                controller.abort().await;
                let person = asked(ABORT);
                let phase = if person {
                    phase::ABORTED
                } else {
                    phase::ROLLED_BACK
                };
                let message = format!(
                    "rolled back at {}: {why}; every parent is back on {}",
                    plan.steps[step].describe(),
                    short(stable.plugin().digest())
                );
                warn!(plugin = name, candidate = %short(candidate.plugin().digest()), "{message}");
                self.conclude(name, phase, "rolled back", &message);
                let event = event(EventType::Warning, "RolloutRolledBack", message);
                self.writer.event(object, &event).await;
                self.counted(name, if person { "aborted" } else { "rolled_back" });
            }
        }
    }

    /// Windows of the stable revision's and the candidate's calls that start now.
    fn windows(
        &self,
        name: &str,
        fingerprint: u64,
        stable: &Revision,
        candidate: &Revision,
    ) -> (Window, Window) {
        (
            Window::new(self.tally(name, fingerprint, stable, candidate, Role::Stable)),
            Window::new(self.tally(name, fingerprint, candidate, candidate, Role::Candidate)),
        )
    }

    /// The counters of `revision` (in `role`, while `candidate` is the candidate of the
    /// attempt made for the spec whose fingerprint is `fingerprint`) at each member: this
    /// replica's now (as the member ""), the others' as their Leases last said.
    fn tally(
        &self,
        name: &str,
        fingerprint: u64,
        revision: &Revision,
        candidate: &Revision,
        role: Role,
    ) -> Vec<(String, Snapshot)> {
        let mut tally = self.supervisor.ring_counts().of(
            name,
            candidate.plugin().digest(),
            &crate::shard::counts::tag(fingerprint),
            role,
        );
        tally.push((String::new(), revision.health().snapshot()));
        tally
    }

    /// Makes the candidate serve every parent, and what the lifecycle counts as installed.
    async fn promote(&self, name: &str, object: &Value, candidate: &Revision) {
        if let Some(controller) = self.supervisor.controller(name) {
            controller.promote().await;
        }
        let installed = Installed {
            fingerprint: self.fingerprint_of(name),
            plugin: candidate.plugin().clone(),
            obtained: super::Obtained::Cached,
            source: self.source_of(object),
        };
        self.installed
            .lock()
            .expect("lifecycle lock poisoned")
            .insert(name.to_owned(), installed);
    }

    /// On a standby replica: takes the rollout where the leader's status says it is.
    async fn follow(
        &self,
        name: &str,
        object: &Value,
        plan: &Plan,
        candidate: &Arc<Revision>,
        step: usize,
    ) {
        let Some(controller) = self.supervisor.controller(name) else {
            return;
        };
        let Ok(written) =
            serde_json::from_value::<RolloutStatus>(object["status"]["rollout"].clone())
        else {
            return;
        };
        if written.candidate != format!("sha256:{}", candidate.plugin().digest()) {
            return;
        }
        match written.phase.as_str() {
            phase::PROMOTED => {
                self.promote(name, object, candidate).await;
                self.conclude(name, phase::PROMOTED, "done", &written.message);
            }
            phase::ROLLED_BACK | phase::ABORTED => {
                controller.abort().await;
                self.conclude(name, &written.phase, "rolled back", &written.message);
            }
            _ => {
                let at = written.step as usize;
                if at == step || at >= plan.steps.len() {
                    return;
                }
                let Some(stable) = controller.current() else {
                    return;
                };
                // What the leader started with the step, so that this replica judges the
                // step from its start if the lifecycle comes to it.
                let windows = self.windows(name, self.fingerprint_of(name), &stable, candidate);
                let stage = plan.steps[at].stage;
                controller.stage(candidate.clone(), stage).await;
                let at_stage = controller.parents_at_stage();
                let mut rollouts = self.rollouts.lock().expect("lifecycle lock poisoned");
                if let Some(p) = rollouts.get_mut(name) {
                    (p.parents, p.serves) = to_see(stage, at_stage, p.serves);
                    p.status = written;
                    p.step_started = Instant::now();
                    p.windows = windows;
                }
            }
        }
    }

    /// Ends the rollout with `phase`, keeping what its shadow found for the status.
    fn conclude(&self, name: &str, phase: &str, stage: &str, message: &str) {
        let mut rollouts = self.rollouts.lock().expect("lifecycle lock poisoned");
        if let Some(p) = rollouts.get_mut(name) {
            if let Some(candidate) = p.candidate.take() {
                p.status.shadow = shadow_status(&candidate, p.others, &p.status);
            }
            p.status.phase = phase.to_owned();
            p.status.stage = stage.to_owned();
            p.status.message = message.to_owned();
        }
    }

    /// Drops a rollout in progress: its candidate's parents go back to stable.
    pub(super) async fn end_rollout(&self, name: &str, why: &str) {
        if !self.rolling(name) {
            return;
        }
        if let Some(controller) = self.supervisor.controller(name) {
            controller.abort().await;
        }
        info!(plugin = name, "rollout superseded: {why}");
        self.conclude(name, phase::SUPERSEDED, "superseded", why);
    }

    /// Whether a rollout of `name` is in progress (looked at every [`TICK`]).
    pub(super) fn rolling(&self, name: &str) -> bool {
        self.rollouts
            .lock()
            .expect("lifecycle lock poisoned")
            .get(name)
            .is_some_and(|p| p.candidate.is_some())
    }

    /// Forgets `name`'s rollout (the plugin is gone).
    pub(super) fn forget_rollout(&self, name: &str) {
        self.rollouts
            .lock()
            .expect("lifecycle lock poisoned")
            .remove(name);
    }

    /// Counts a rollout transition under the plugin's name (the controller's, as every metric
    /// of the plugin), not the ReconcilePlugin's.
    fn counted(&self, name: &str, result: &str) {
        let plugin = self
            .supervisor
            .controller(name)
            .map_or_else(|| name.to_owned(), |c| c.name().to_owned());
        self.metrics.rollout(&plugin, result);
    }

    fn fingerprint_of(&self, name: &str) -> u64 {
        self.rollouts
            .lock()
            .expect("lifecycle lock poisoned")
            .get(name)
            .map_or(0, |p| p.fingerprint)
    }

    fn source_of(&self, object: &Value) -> api::Source {
        serde_json::from_value(object["spec"]["source"].clone())
            .expect("a ReconcilePlugin the host read has a source")
    }
}

/// Whether a person asked (annotation [`PROMOTE`]) to promote the candidate `digest`.
fn promote_asked(object: &Value, digest: &str) -> bool {
    object["metadata"]["annotations"][PROMOTE].as_str() == Some(digest)
}

pub(super) fn now() -> Time {
    let now = jiff::Timestamp::now();
    Time(now.round(jiff::Unit::Second).unwrap_or(now))
}

/// How many parents a step staged at `stage` must see called, and how many the candidate then
/// serves, with `at_stage` parents at the stage and `before` served by the step before: a
/// share step must see those it took, a shadow every parent.
fn to_see(stage: Stage, at_stage: u64, before: u64) -> (u64, u64) {
    match stage {
        Stage::Shadow => (at_stage, 0),
        Stage::Share(_) => (at_stage.saturating_sub(before), at_stage),
    }
}
