//! `spec.rollout` and `status.rollout` of a ReconcilePlugin: how a new digest reaches the
//! parents, and where it stands.
//!
//! `Immediate` (the default) swaps the new code in for every parent at once. `Progressive` makes
//! it a candidate beside the stable revision and takes it through the steps: `shadow` (called
//! on the same inputs as stable, its plans compared, never writing), then growing shares of the
//! parents. Each step is watched for its analysis window and compared against stable over the
//! same window; a candidate worse than a threshold allows is rolled back at once, one that
//! passes the last step is promoted. The CRD's rules refuse steps that cannot mean anything.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use kube::core::Duration;
use serde::{Deserialize, Serialize};

use super::Source;

/// How a new digest reaches the parents.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.strategy != 'Progressive' || size(self.steps) > 0")
        .message("a Progressive rollout needs at least one step")
)]
#[x_kube(
    validation = Rule::new("self.steps.map(s, has(s.percent) ? s.percent : 0).isSorted()")
        .message("shadow steps come first, and each percent is at least the one before")
)]
pub struct Rollout {
    /// `Immediate` (default): a new digest serves every parent at once. `Progressive`: it goes
    /// through `steps`.
    #[serde(default)]
    pub strategy: Strategy,
    /// The steps of a progressive rollout, in order. The candidate is promoted (serves every
    /// parent) once the last one passes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub steps: Vec<Step>,
    /// How much worse than the stable revision the candidate may do in a step's window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<Thresholds>,
    /// How many revisions `status.history` keeps for `reconhost plugin rollout undo`
    /// (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 20))]
    pub revision_history_limit: Option<u8>,
}

/// How a new digest reaches the parents.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum Strategy {
    /// Every parent at once.
    #[default]
    Immediate,
    /// Through the steps, with analysis and automatic rollback.
    Progressive,
}

/// One step of a progressive rollout: exactly one of `shadow: true` and `percent`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.percent) != (has(self.shadow) && self.shadow)")
        .message("a step is either shadow: true or a percent of the parents, not both")
)]
pub struct Step {
    /// Call the candidate beside the stable revision on every parent, compare its plans, let
    /// it write nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// The share of parents the candidate serves, chosen by a hash of each parent's UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub percent: Option<u8>,
    /// How long the step is watched before the next (default 1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('0s') && duration(self) <= duration('24h')").message("analysis must be between 0s and 24h"))]
    pub analysis: Option<Duration>,
}

/// The most the candidate may exceed the stable revision by, each in percentage points of its
/// calls over the same window (for divergence: of its shadow calls, absolutely).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Thresholds {
    /// Calls the sandbox ended: traps, deadlines, memory and other limits, invalid responses
    /// (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub failed_calls: Option<u8>,
    /// Errors the plugin returned, transient or permanent (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub errors: Option<u8>,
    /// Reconciles that left `Synced=False` on the parent (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub synced_false: Option<u8>,
    /// Fight breakers that tripped (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub fights: Option<u8>,
    /// Shadow calls whose plan differs from stable's (default 0: a shadow step passes only a
    /// candidate that does exactly what stable does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub divergence: Option<u8>,
}

/// Where a progressive rollout stands.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// `Progressing`, `Promoted`, `RolledBack`, `Aborted` (by a person) or `Superseded` (the
    /// spec moved on before it ended).
    pub phase: String,
    /// The digest being rolled out.
    pub candidate: String,
    /// The digest serving the other parents.
    pub stable: String,
    /// The step the candidate is at, counted from 0.
    pub step: u32,
    /// The step as people say it: `shadow`, `25%`, `done`.
    pub stage: String,
    /// When the step started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_at: Option<Time>,
    /// Why the rollout is where it is (for a rollback: the metric, both values, the threshold).
    #[serde(default)]
    pub message: String,
    /// What shadow calls found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStatus>,
}

/// What the candidate's shadow calls found.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// Shadow calls compared with stable's.
    pub compared: u64,
    /// Those whose plan differed, or that failed where stable's did not.
    pub diverged: u64,
    /// The parents on which they diverged.
    pub parents_diverged: u64,
    /// The first differences: `parent: child.field: stable X, candidate Y`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<String>,
}

/// One revision serving now.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    /// Its digest.
    pub digest: String,
    /// `stable` or `candidate`.
    pub role: String,
    /// The share of parents it serves, in percent (a shadow serves none).
    pub percent: f64,
    /// The parents it serves (as counted when the rollout's step started).
    pub parents: u64,
    /// Plugin calls it made since it was prepared.
    pub calls: u64,
    /// Of which the sandbox ended.
    pub failed_calls: u64,
    /// Of which returned an error.
    pub errors: u64,
}

/// A revision that served, for `rollout undo`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// Where its component came from, with its digest.
    pub source: Source,
    /// When it started serving every parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}
