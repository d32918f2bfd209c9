//! The health of a plugin as its parents see it, on its ReconcilePlugin: `status.parents`
//! (served, synced, failing, paused) and the `Degraded` condition. `Ready` says the code is
//! loaded and running; a plugin that is `Ready=True` while its parents fail is what `Degraded`
//! is for.
//!
//! The threshold is Kubernetes' own default tolerance: a Deployment's rolling update lets 25 %
//! of its replicas be unavailable (`maxUnavailable: 25%`). More than a quarter of the served
//! parents failing is `Degraded=True`; fewer is a few bad specs, which their own conditions
//! show. A single parent that fails is more than a quarter of one.

use std::sync::Weak;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use super::Lifecycle;
use crate::api::{ParentCounts, ReconcilePluginStatus};
use crate::controller::queue::Priority;
use crate::controller::standing::Standing;

/// The condition type.
pub const DEGRADED: &str = "Degraded";

/// The share of served parents, in percent, that may fail before the plugin is `Degraded`.
pub const DEGRADED_PERCENT: u32 = 25;

/// How often the parents' standing is counted again ([`Lifecycle::follow_parents`]): a
/// ReconcilePlugin is queued for the lifecycle only when its counts moved, or its parents do
/// not show its suspension (or still show one it no longer has), so a steady state asks and
/// writes nothing.
pub const REFRESH: Duration = Duration::from_secs(10);

impl Lifecycle {
    /// Counts every installed plugin's parents each [`REFRESH`] while this replica leads, and
    /// queues the ReconcilePlugins whose status no longer says how they stand. Ends with the
    /// lifecycle.
    pub(super) async fn follow_parents(lifecycle: Weak<Self>) {
        let mut tick = tokio::time::interval(REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(this) = lifecycle.upgrade() else {
                return;
            };
            if !*this.leading.borrow() {
                // Only the leader counts. One that stopped leading, even just after it began
                // a count, forgets what its counts kept.
                for key in this.plugins.store().keys() {
                    if let Some(controller) = this.supervisor.controller(&key.name) {
                        controller.forget_standing();
                    }
                }
                continue;
            }
            for key in this.plugins.store().keys() {
                let Some(cached) = this.plugins.store().get("", &key.name) else {
                    continue;
                };
                let Some(standing) = this
                    .supervisor
                    .controller(&key.name)
                    .and_then(|c| c.standing())
                else {
                    continue;
                };
                let rp = cached.value();
                if stale(&rp, &standing) {
                    this.queue.add(key, Priority::Normal);
                }
            }
        }
    }
}

/// Whether `rp`'s status no longer says how its parents stand: other counts, or parents that
/// do not show its suspension as they should.
fn stale(rp: &Value, standing: &Standing) -> bool {
    let said = &rp["status"]["parents"];
    let counts = [
        ("served", standing.served),
        ("synced", standing.synced),
        ("failing", standing.failing),
        ("paused", standing.paused),
    ];
    let moved = counts
        .iter()
        .any(|(field, n)| said[field].as_u64() != Some(u64::from(*n)));
    let suspended = rp["spec"]["suspend"] == true;
    let unshown = suspended && standing.shows_pause && standing.paused < standing.served;
    moved || unshown || (!suspended && standing.paused > 0)
}

/// `status` with the parents' standing and the `Degraded` condition (a transition time kept
/// from `object`, the ReconcilePlugin as cached, while the condition's status holds).
pub fn with_parents(
    mut status: ReconcilePluginStatus,
    standing: Option<Standing>,
    object: &Value,
) -> ReconcilePluginStatus {
    let Some(standing) = standing else {
        return status;
    };
    status.parents = Some(ParentCounts {
        served: standing.served,
        synced: standing.synced,
        failing: standing.failing,
        paused: standing.paused,
    });
    let (state, reason, message) = degraded(&standing);
    let previous = object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == DEGRADED));
    let since = previous
        .filter(|p| p["status"] == state)
        .and_then(|p| p["lastTransitionTime"].as_str())
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    status.conditions.retain(|c| c.type_ != DEGRADED);
    status.conditions.push(Condition {
        last_transition_time: Time(since.unwrap_or_else(|| {
            let now = jiff::Timestamp::now();
            now.round(jiff::Unit::Second).unwrap_or(now)
        })),
        message,
        observed_generation: object["metadata"]["generation"].as_i64(),
        reason: reason.to_owned(),
        status: state.to_owned(),
        type_: DEGRADED.to_owned(),
    });
    status
}

/// The `Degraded` condition's status, reason and message for `standing`.
fn degraded(standing: &Standing) -> (&'static str, &'static str, String) {
    let Standing {
        served,
        synced,
        failing,
        paused,
        ..
    } = *standing;
    let counts = format!(
        "{failing} of {served} parents failing, {synced} synced{}",
        if paused > 0 {
            format!(", {paused} paused")
        } else {
            String::new()
        }
    );
    if failing > 0 && failing * 100 > served * DEGRADED_PERCENT {
        (
            "True",
            "ParentsFailing",
            format!(
                "{counts}: more than {DEGRADED_PERCENT} % of the parents fail; their Synced conditions say why (reconhost trace <kind>/<name>)"
            ),
        )
    } else {
        ("False", "ParentsHealthy", counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn standing(served: u32, failing: u32) -> Standing {
        Standing {
            served,
            synced: served - failing,
            failing,
            paused: 0,
            shows_pause: true,
        }
    }

    #[test]
    fn more_than_a_quarter_failing_should_be_degraded() {
        assert_eq!(degraded(&standing(1, 1)).0, "True");
        assert_eq!(degraded(&standing(3, 1)).0, "True");
        assert_eq!(degraded(&standing(4, 1)).0, "False");
        assert_eq!(degraded(&standing(10, 2)).0, "False");
        assert_eq!(degraded(&standing(0, 0)).0, "False");
        let (_, reason, message) = degraded(&standing(3, 1));
        assert_eq!(reason, "ParentsFailing");
        assert!(
            message.starts_with("1 of 3 parents failing, 2 synced"),
            "{message}"
        );
    }

    #[test]
    fn a_status_should_be_stale_when_counts_move_or_a_suspension_is_not_shown() {
        let rp = |suspend: bool| {
            json!({"spec": {"suspend": suspend}, "status": {"parents":
                {"served": 4, "synced": 3, "failing": 1, "paused": 0}}})
        };
        assert!(!stale(&rp(false), &standing(4, 1)));
        assert!(stale(&rp(false), &standing(4, 2)));
        assert!(stale(&json!({}), &standing(4, 1)), "never counted");
        // Suspended, with parents not showing it yet.
        assert!(stale(&rp(true), &standing(4, 1)));
        let mut paused = standing(4, 0);
        paused.synced = 0;
        paused.paused = 4;
        let shown = json!({"spec": {"suspend": true}, "status": {"parents":
            {"served": 4, "synced": 0, "failing": 0, "paused": 4}}});
        assert!(!stale(&shown, &paused));
        // A kind without conditions cannot show it: nothing to wait for.
        let mut mute = standing(4, 1);
        mute.shows_pause = false;
        assert!(!stale(&rp(true), &mute));
        // Resumed, with parents still showing it.
        let mut resumed = shown.clone();
        resumed["spec"]["suspend"] = json!(false);
        assert!(stale(&resumed, &paused));
    }

    #[test]
    fn the_transition_time_should_hold_while_the_status_does() {
        let object = json!({"metadata": {"generation": 1}, "status": {"conditions": [
            {"type": "Degraded", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}});
        let status = with_parents(
            ReconcilePluginStatus::default(),
            Some(standing(4, 1)),
            &object,
        );
        let condition = &status.conditions[0];
        assert_eq!(
            condition.last_transition_time.0.to_string(),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(status.parents.expect("counted").failing, 1);
        let flipped = with_parents(
            ReconcilePluginStatus::default(),
            Some(standing(1, 1)),
            &object,
        );
        assert_ne!(
            flipped.conditions[0].last_transition_time.0.to_string(),
            "2026-01-01T00:00:00Z"
        );
    }
}
