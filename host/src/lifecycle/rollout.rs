//! The judgement of a progressive rollout, pure: the steps a spec asks for, and for one step's
//! window the verdict on the candidate against the stable revision over the same window.
//!
//! A step fails as soon as the candidate has done enough to be judged ([`MIN_CALLS`]) and is
//! worse than a threshold allows; it passes only when its analysis window is over and the
//! candidate has been called as often as the step has parents (each parent it took, or each one
//! it shadows, at least once on average). So a candidate that fails on every parent is rolled
//! back within seconds of its first calls, while a good one waits out each window and is seen
//! on every parent of the step before the next.

use std::time::Duration;

use crate::api::{self, Strategy};
use crate::controller::Stage;
use crate::controller::health::Snapshot;
use crate::controller::route::Share;

/// The analysis window of a step that does not set one.
pub const DEFAULT_ANALYSIS: Duration = Duration::from_secs(60);
/// Calls (or shadow comparisons) the candidate makes in a window before it can fail early.
pub const MIN_CALLS: u64 = 5;
/// Revisions `status.history` keeps when the spec does not say.
pub const DEFAULT_HISTORY: usize = 5;

/// One step, as the host runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Shadow, or a share of the parents.
    pub stage: Stage,
    /// How long it is watched.
    pub analysis: Duration,
}

impl Step {
    /// The step as people say it: `shadow`, `25%`.
    pub fn describe(&self) -> String {
        match self.stage {
            Stage::Shadow => "shadow".to_owned(),
            Stage::Share(share) => format!("{}%", share.as_percent()),
        }
    }
}

/// The thresholds, in percentage points, with the defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Calls the sandbox ended.
    pub failed_calls: u8,
    /// Errors the plugin returned.
    pub errors: u8,
    /// Reconciles that left `Synced=False`.
    pub synced_false: u8,
    /// Fight breakers that tripped.
    pub fights: u8,
    /// Shadow calls that diverged (absolute).
    pub divergence: u8,
}

impl From<Option<&api::Thresholds>> for Thresholds {
    fn from(t: Option<&api::Thresholds>) -> Self {
        let t = t.cloned().unwrap_or_default();
        Self {
            failed_calls: t.failed_calls.unwrap_or(0),
            errors: t.errors.unwrap_or(5),
            synced_false: t.synced_false.unwrap_or(5),
            fights: t.fights.unwrap_or(0),
            divergence: t.divergence.unwrap_or(0),
        }
    }
}

/// A progressive rollout's steps and thresholds; `None` for an immediate one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// How much worse than stable the candidate may do.
    pub thresholds: Thresholds,
}

impl Plan {
    /// The plan `rollout` asks for: `None` unless it is progressive with at least one step
    /// (the CRD refuses a progressive rollout without steps).
    pub fn of(rollout: Option<&api::Rollout>) -> Option<Self> {
        let rollout = rollout?;
        if rollout.strategy != Strategy::Progressive || rollout.steps.is_empty() {
            return None;
        }
        let steps = rollout
            .steps
            .iter()
            .map(|s| Step {
                stage: match s.percent {
                    Some(percent) if !s.shadow => Stage::Share(Share::percent(percent.into())),
                    _ => Stage::Shadow,
                },
                analysis: s.analysis.map_or(DEFAULT_ANALYSIS, Duration::from),
            })
            .collect();
        Some(Self {
            steps,
            thresholds: Thresholds::from(rollout.thresholds.as_ref()),
        })
    }
}

/// What a step's window says of the candidate.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Not enough seen yet, or the window is not over.
    Wait,
    /// The window is over and the candidate did no worse than allowed.
    Pass,
    /// The candidate did worse than allowed: why, with both values and the threshold.
    Fail(String),
}

/// Judges `candidate` against `stable` (each the counters over the step's window so far, which
/// has lasted `elapsed`) for `step`, which has `parents` parents (shadowed, or served by the
/// candidate).
pub fn judge(
    step: &Step,
    elapsed: Duration,
    parents: u64,
    candidate: &Snapshot,
    stable: &Snapshot,
    thresholds: &Thresholds,
) -> Verdict {
    let seen = match step.stage {
        Stage::Shadow => candidate.shadowed,
        Stage::Share(_) => candidate.calls,
    };
    let over = elapsed >= step.analysis && seen >= parents;
    if step.stage == Stage::Shadow && (over || candidate.shadowed >= MIN_CALLS) {
        let rate = percent(candidate.diverged, candidate.shadowed);
        if rate > f64::from(thresholds.divergence) {
            return Verdict::Fail(format!(
                "divergence: {rate:.1} % of {} shadow calls planned otherwise than stable (threshold {} %)",
                candidate.shadowed, thresholds.divergence
            ));
        }
    }
    if over || candidate.calls >= MIN_CALLS {
        let metrics = [
            (
                "failedCalls",
                candidate.failed_calls,
                stable.failed_calls,
                thresholds.failed_calls,
            ),
            ("errors", candidate.errors, stable.errors, thresholds.errors),
            (
                "syncedFalse",
                candidate.synced_false,
                stable.synced_false,
                thresholds.synced_false,
            ),
            ("fights", candidate.fights, stable.fights, thresholds.fights),
        ];
        for (name, c, s, threshold) in metrics {
            let (c_rate, s_rate) = (percent(c, candidate.calls), percent(s, stable.calls));
            if c_rate - s_rate > f64::from(threshold) {
                return Verdict::Fail(format!(
                    "{name}: candidate {c_rate:.1} % of {} calls, stable {s_rate:.1} % of {} (threshold {threshold} points above stable)",
                    candidate.calls, stable.calls
                ));
            }
        }
    }
    if over { Verdict::Pass } else { Verdict::Wait }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(stage: Stage, seconds: u64) -> Step {
        Step {
            stage,
            analysis: Duration::from_secs(seconds),
        }
    }

    fn calls(calls: u64, failed_calls: u64) -> Snapshot {
        Snapshot {
            calls,
            failed_calls,
            ..Snapshot::default()
        }
    }

    #[test]
    fn the_spec_should_give_the_steps_and_the_default_thresholds() {
        let rollout: api::Rollout = serde_json::from_value(json!({
            "strategy": "Progressive",
            "steps": [{"shadow": true, "analysis": "30s"}, {"percent": 5}, {"percent": 100}],
            "thresholds": {"errors": 10},
        }))
        .expect("a rollout");
        let plan = Plan::of(Some(&rollout)).expect("progressive");
        assert_eq!(
            plan.steps,
            [
                step(Stage::Shadow, 30),
                step(Stage::Share(Share::percent(5)), 60),
                step(Stage::Share(Share::ALL), 60),
            ]
        );
        assert_eq!(plan.steps[1].describe(), "5%");
        assert_eq!(
            (plan.thresholds.errors, plan.thresholds.failed_calls),
            (10, 0)
        );
        assert_eq!(Plan::of(None), None);
        let immediate: api::Rollout =
            serde_json::from_value(json!({"steps": [{"percent": 5}]})).expect("a rollout");
        assert_eq!(Plan::of(Some(&immediate)), None, "Immediate is the default");
    }

    #[test]
    fn a_failing_candidate_should_fail_as_soon_as_it_can_be_judged() {
        let t = Thresholds::from(None);
        let canary = step(Stage::Share(Share::percent(5)), 60);
        let quick = Duration::from_secs(2);
        assert_eq!(
            judge(&canary, quick, 0, &calls(4, 4), &calls(100, 0), &t),
            Verdict::Wait,
            "four calls are not enough to judge"
        );
        let Verdict::Fail(why) = judge(&canary, quick, 0, &calls(5, 5), &calls(100, 0), &t) else {
            panic!("five failed calls of five fail the step");
        };
        assert_eq!(
            why,
            "failedCalls: candidate 100.0 % of 5 calls, stable 0.0 % of 100 (threshold 0 points above stable)"
        );
    }

    #[test]
    fn a_candidate_should_be_judged_against_stable_not_against_nothing() {
        let t = Thresholds::from(None);
        let canary = step(Stage::Share(Share::percent(25)), 60);
        let errors = |calls, errors| Snapshot {
            calls,
            errors,
            ..Snapshot::default()
        };
        let over = Duration::from_secs(60);
        assert_eq!(
            judge(&canary, over, 0, &errors(100, 20), &errors(300, 54), &t),
            Verdict::Pass,
            "20 % errors where stable has 18 %: within 5 points"
        );
        assert!(matches!(
            judge(&canary, over, 0, &errors(100, 30), &errors(300, 54), &t),
            Verdict::Fail(why) if why.starts_with("errors: candidate 30.0 %")
        ));
        assert_eq!(
            judge(
                &canary,
                Duration::from_secs(59),
                0,
                &errors(100, 0),
                &errors(300, 0),
                &t
            ),
            Verdict::Wait,
            "a good candidate waits out the window"
        );
        assert_eq!(
            judge(
                &canary,
                over,
                0,
                &Snapshot::default(),
                &Snapshot::default(),
                &t
            ),
            Verdict::Pass,
            "a share that holds no parent has nothing against it"
        );
        assert_eq!(
            judge(&canary, over, 101, &errors(100, 0), &errors(300, 0), &t),
            Verdict::Wait,
            "the window is over, but not every parent of the step was served yet"
        );
    }

    #[test]
    fn a_shadow_that_plans_otherwise_should_fail_its_step() {
        let t = Thresholds::from(None);
        let shadow = step(Stage::Shadow, 60);
        let compared = |shadowed, diverged| Snapshot {
            calls: shadowed,
            shadowed,
            diverged,
            ..Snapshot::default()
        };
        assert!(matches!(
            judge(&shadow, Duration::from_secs(1), 0, &compared(5, 1), &calls(5, 0), &t),
            Verdict::Fail(why) if why.starts_with("divergence: 20.0 % of 5 shadow calls")
        ));
        let lenient = Thresholds {
            divergence: 50,
            ..t
        };
        assert_eq!(
            judge(
                &shadow,
                Duration::from_secs(60),
                0,
                &compared(5, 1),
                &calls(5, 0),
                &lenient
            ),
            Verdict::Pass
        );
    }
}
