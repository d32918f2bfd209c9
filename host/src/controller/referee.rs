//! The referee: applies the fight breaker ([`super::fight`]) to one plan, between the planner
//! and the applier. It holds back updates of children whose breaker is open, counts strikes
//! (reading the child once from the API server to learn who else wrote it), and says what the
//! parent's `Contested` condition and events should be.

use std::time::Instant;

use serde_json::Value;
use tracing::{debug, warn};

use super::applier::Applier;
use super::book::{Pages, ParentBook};
use super::fight::{Fights, Standing, Strike, dispute};
use crate::cache::ObjectKey;
use crate::metrics::PluginMetrics;
use crate::model::MAX_CONDITION_MESSAGE;
use crate::model::{Condition, ConditionStatus, Event, EventType, PluginInfo, printable};
use crate::planner::{self, Action, Plan};

/// The condition a parent shows while one of its children is contested.
pub const CONTESTED: &str = "Contested";

/// What the referee made of one plan.
#[derive(Debug, Default)]
pub struct Ruling {
    /// The children (`Kind namespace/name`) not applied this time.
    pub held: Vec<String>,
    /// Warning events for breakers that tripped now.
    pub events: Vec<Event>,
    /// Where the parent's fights stand.
    pub standing: Standing,
}

/// The fight breaker of one plugin, with what it reports to.
pub struct Referee {
    fights: Fights,
    metrics: PluginMetrics,
    /// The plugin's name, for logs.
    plugin: String,
    /// The plugin's field manager: the one whose fields are the plugin's.
    manager: String,
}

impl Referee {
    /// A referee over `fights` for the plugin `info`, counting trips in `metrics`.
    pub fn new(fights: Fights, metrics: PluginMetrics, info: &PluginInfo) -> Self {
        Self {
            fights,
            metrics,
            plugin: info.name.clone(),
            manager: info.field_manager(),
        }
    }

    /// Rules on `plan` for `parent` (at `generation`, its page in `book`): updates of held children become
    /// no-ops, and so does one whose strike trips its breaker now. A parent whose spec changed
    /// since its strikes starts afresh.
    pub async fn rule(
        &self,
        book: &Pages,
        parent: &ObjectKey,
        generation: i64,
        plan: &mut Plan,
        observed: &[Value],
        applier: &Applier,
    ) -> Ruling {
        let mut ruling = Ruling::default();
        let (plugin, manager) = (&self.plugin, &self.manager);
        let fought = book.read(parent, |p| !p.fights.is_empty());
        if book.write(parent, |p| p.fights.lift_if_edited(generation)) {
            debug!(%plugin, %parent, "the parent's spec changed; its fights start afresh");
        }
        for child in plan
            .children
            .iter_mut()
            .filter(|c| c.action == Action::Update)
        {
            let target = child.target();
            let now = Instant::now();
            if book.read(parent, |p| self.fights.is_held(&p.fights, &target, now)) {
                debug!(%plugin, %parent, child = %target, "contested; not re-applied");
                child.action = Action::Unchanged;
                ruling.held.push(target);
                continue;
            }
            let current = observed
                .iter()
                .find(|o| planner::same_object(o, &child.kind, &child.namespace, &child.name));
            let rewritten =
                |c: &Value| book.read(parent, |p| p.applied.rewritten(&child.object, c));
            if !current.is_some_and(rewritten) {
                continue;
            }
            let Some(live) = applier.live(child).await else {
                continue;
            };
            let Some(dispute) = dispute(&child.object, &live, manager) else {
                continue;
            };
            debug!(%plugin, %parent, child = %target, field = %dispute.field,
                   manager = %dispute.manager, "re-applying over another field manager");
            let strike = book.write(parent, |p| {
                self.fights
                    .strike(&mut p.fights, generation, &target, dispute, Instant::now())
            });
            if let Strike::Tripped(hold) = strike {
                self.metrics.fight();
                child.action = Action::Unchanged;
                ruling.held.push(target.clone());
                let standing = book.write(parent, |p| {
                    self.fights.standing(&mut p.fights, Instant::now())
                });
                if let Some(contest) = standing.contest.filter(|c| c.child == target) {
                    let message = contest.message();
                    warn!(%plugin, %parent, child = %target, hold_secs = hold.as_secs(),
                          "{message}");
                    ruling.events.push(Event {
                        type_: EventType::Warning,
                        reason: "ControllerFight".into(),
                        message,
                    });
                }
            }
        }
        ruling.standing = book.write(parent, |p| {
            self.fights.standing(&mut p.fights, Instant::now())
        });
        // The gauge counts over every parent: recounted only when this one has or had
        // breakers, not on every reconcile of every parent.
        if fought || book.read(parent, |p| !p.fights.is_empty()) {
            self.recount(book.book());
        }
        ruling
    }

    /// The `Contested` condition to set on `parent`: True naming the contest while there is
    /// one, False once there is none but the parent still shows True (left by an earlier fight,
    /// or by a host that restarted), nothing otherwise.
    pub fn condition(&self, ruling: &Ruling, parent: &Value) -> Option<Condition> {
        if let Some(contest) = &ruling.standing.contest {
            return Some(Condition {
                type_: CONTESTED.to_owned(),
                status: ConditionStatus::True,
                reason: "FieldManagerConflict".to_owned(),
                // The field's path is made of the plugin's own keys: cut like its messages.
                message: printable(&contest.message(), MAX_CONDITION_MESSAGE),
            });
        }
        let shown = parent["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == CONTESTED))
            .is_some_and(|c| c["status"] == "True");
        shown.then(|| Condition {
            type_: CONTESTED.to_owned(),
            status: ConditionStatus::False,
            reason: "FightOver".to_owned(),
            message: "no other field manager has changed what this plugin sets since the host last re-applied it".to_owned(),
        })
    }

    /// Holds back, in a plan made again, the children an earlier ruling held.
    pub fn hold(ruling: &Ruling, plan: &mut Plan) {
        for child in plan
            .children
            .iter_mut()
            .filter(|c| c.action == Action::Update && ruling.held.contains(&c.target()))
        {
            child.action = Action::Unchanged;
        }
    }

    /// Sets the gauge of contested children from `book` (after a parent was forgotten).
    pub fn recount(&self, book: &ParentBook) {
        self.metrics.contested(book.count(|p| p.fights.contested()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fight::{Contest, Dispute, FightPolicy};
    use crate::metrics::Metrics;
    use serde_json::json;

    #[test]
    fn a_contest_over_a_huge_field_name_should_be_cut_in_the_condition() {
        let info = PluginInfo {
            name: "hostile".into(),
            version: "0.1.0".into(),
            parent: crate::model::KindRef::new("example.com/v1", "Widget"),
            children: vec![crate::model::KindRef::new("v1", "ConfigMap")],
            reads: vec![],
            finalizer: false,
            strategies: Default::default(),
            ignore_status_changes: false,
        };
        let referee = Referee::new(
            Fights::new(FightPolicy::default()),
            Metrics::new().plugin("hostile"),
            &info,
        );
        let ruling = Ruling {
            standing: Standing {
                contest: Some(Contest {
                    child: "ConfigMap ns/c".into(),
                    dispute: Dispute {
                        field: format!(".data.{}", "k".repeat(100_000)),
                        manager: "other".into(),
                    },
                    trips: 1,
                    held_for: std::time::Duration::from_secs(30),
                }),
                wake_after: None,
            },
            ..Ruling::default()
        };
        let condition = referee.condition(&ruling, &json!({})).expect("Contested");
        // Cut at the cap, with a short note of what was cut.
        assert!(condition.message.len() <= MAX_CONDITION_MESSAGE + 64);
        assert!(condition.message.ends_with("more bytes)"));
        assert!(
            condition
                .message
                .starts_with("ConfigMap ns/c: field manager \"other\"")
        );
    }
}
