//! The controller-fight breaker: notices another writer that keeps changing a field the plugin
//! sets, and stops re-applying the child instead of fighting it forever.
//!
//! The host applies children forced, so a field someone else changes is put back at the next
//! reconcile. That is right for drift (a person's `kubectl edit`, an old controller's leftover)
//! and wrong for a fight: an HPA scaling a Deployment whose replicas the plugin also sets, or two
//! controllers claiming one object. Each side undoes the other as fast as its watch delivers, and
//! the API server, etcd and every watcher of the kind pay for it, with nobody told.
//!
//! What counts as one strike, decided by the reconciler with this module's pure parts:
//! - the plan updates a child the host itself wrote last, with the same body it wrote then
//!   ([`super::applied::Applied::rewritten`]), so the plugin's intent did not change: someone
//!   else's write did;
//! - a field of the body differs from the live object ([`dispute`]), and the live object's
//!   `managedFields` say another manager owns it now. A field the plugin's own manager still
//!   owns differs only because the server normalised it (a quantity, a default): no strike.
//!
//! [`Fights`] counts strikes per child. `threshold` strikes over the same field against the same
//! manager within `window` trip the breaker: the child is not applied for `backoff`, doubled at
//! each trip up to `max_backoff`. When that time is up the host re-applies once; a strike then
//! trips again at once, and a `window` without one closes the breaker. The parent shows it all
//! in a `Contested` condition, and each trip is a Warning event and a metric.
//!
//! The state is in memory, per plugin generation: a restarted host, or an upgraded plugin, finds
//! a continuing fight again after `threshold` strikes, and clears a `Contested=True` left by its
//! predecessor at the next reconcile of that parent.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// When a fight trips the breaker and for how long the host stays out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FightPolicy {
    /// Strikes over the same field against the same manager that make a fight (at least 1).
    pub threshold: u32,
    /// How recent those strikes must be; also how long a child must stay quiet after the host
    /// re-applies it before the fight counts as over.
    pub window: Duration,
    /// How long the first trip keeps the host from re-applying the child.
    pub backoff: Duration,
    /// The longest a trip keeps it from doing so, however many came before.
    pub max_backoff: Duration,
}

impl Default for FightPolicy {
    /// Three strikes within two minutes: a person's edit that the host puts back once is drift,
    /// not a fight; a controller that undoes the host three times in two minutes is one. The
    /// first trip holds for 30 s, and backoff doubles up to 10 min.
    fn default() -> Self {
        Self {
            threshold: 3,
            window: Duration::from_secs(120),
            backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(600),
        }
    }
}

/// A field of a child that another manager keeps changing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispute {
    /// The field, as a path into the object (`.spec.replicas`, `.spec.ports[0].port`).
    pub field: String,
    /// The other field manager (with the subresource it wrote through, if any).
    pub manager: String,
}

/// The first field of `desired` that `live` does not hold and that a manager other than
/// `ours` owns in `live`'s `managedFields`. `None` when every differing field is still the
/// plugin's own (the server normalised it) or nobody else can be named.
pub fn dispute(desired: &Value, live: &Value, ours: &str) -> Option<Dispute> {
    let mut paths = Vec::new();
    differing(desired, live, &mut Vec::new(), &mut paths);
    let entries = live["metadata"]["managedFields"].as_array()?;
    for path in paths {
        let owners: Vec<&Value> = entries
            .iter()
            .filter(|e| owns(&e["fieldsV1"], &path, live))
            .collect();
        if owners.iter().any(|e| e["manager"] == ours) {
            continue;
        }
        let other = owners.first().copied().or_else(|| {
            // A field someone removed belongs to nobody: the newest other writer removed it.
            entries
                .iter()
                .filter(|e| e["manager"] != ours)
                .max_by_key(|e| e["time"].as_str().unwrap_or(""))
        })?;
        let mut manager = other["manager"].as_str().unwrap_or("").to_owned();
        if let Some(sub) = other["subresource"].as_str().filter(|s| !s.is_empty()) {
            manager = format!("{manager} (through /{sub})");
        }
        return Some(Dispute {
            field: display(&path),
            manager,
        });
    }
    None
}

/// One step into a JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
}

/// The paths where `live` does not hold `desired`: down objects key by key, down arrays of
/// the same length element by element; a scalar, or an array of another length, differs whole.
fn differing(desired: &Value, live: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => {
            for (key, value) in d {
                at.push(Step::Field(key.clone()));
                differing(value, l.get(key).unwrap_or(&Value::Null), at, out);
                at.pop();
            }
        }
        (Value::Array(d), Value::Array(l)) if d.len() == l.len() => {
            for (i, (dv, lv)) in d.iter().zip(l).enumerate() {
                at.push(Step::Index(i));
                differing(dv, lv, at, out);
                at.pop();
            }
        }
        (Value::Number(d), Value::Number(l)) if d.as_f64() == l.as_f64() => {}
        (d, l) if d == l => {}
        _ => out.push(at.clone()),
    }
}

/// Whether the `fieldsV1` set `fields` covers `path`: the path's own node is owned, or it runs
/// through a leaf (a map or list owned as one atomic value). List elements are found by their
/// index (`i:`), their key fields (`k:`) or their value (`v:`) in `live`.
fn owns(fields: &Value, path: &[Step], live: &Value) -> bool {
    let mut node = fields;
    let mut value = live;
    for (depth, step) in path.iter().enumerate() {
        let Some(children) = node.as_object() else {
            return false;
        };
        // A leaf above the end of the path is a map or list owned whole; an empty set at the
        // top owns nothing.
        if children.is_empty() {
            return depth > 0;
        }
        let (next, below) = match step {
            Step::Field(name) => (children.get(&format!("f:{name}")), &value[name.as_str()]),
            Step::Index(i) => {
                let element = &value[*i];
                let found = children.iter().find_map(|(k, v)| {
                    let matches = if let Some(n) = k.strip_prefix("i:") {
                        n.parse() == Ok(*i)
                    } else if let Some(key) = k.strip_prefix("k:") {
                        serde_json::from_str::<serde_json::Map<String, Value>>(key)
                            .is_ok_and(|key| key.iter().all(|(f, kv)| element[f] == *kv))
                    } else if let Some(v) = k.strip_prefix("v:") {
                        serde_json::from_str::<Value>(v).is_ok_and(|v| v == *element)
                    } else {
                        false
                    };
                    matches.then_some(v)
                });
                (found, element)
            }
        };
        let Some(next) = next else { return false };
        node = next;
        value = below;
    }
    node.as_object()
        .is_some_and(|n| n.is_empty() || n.contains_key("."))
}

fn display(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Field(f) => format!(".{f}"),
            Step::Index(i) => format!("[{i}]"),
        })
        .collect()
}

/// The breaker of one child.
#[derive(Debug)]
struct Breaker {
    /// What the strikes are about; a strike about something else starts the count again.
    dispute: Dispute,
    /// Strikes within the window, oldest first.
    strikes: Vec<Instant>,
    /// Trips so far; more than zero until the breaker closes.
    trips: u32,
    /// Until when the child is not applied (after a trip).
    open_until: Option<Instant>,
    /// How long the last trip held.
    held_for: Duration,
    /// Whether the host has re-applied the child once since the last hold ended.
    probed: bool,
    /// The last strike.
    last_strike: Instant,
    /// The parent's generation at the last strike: a spec change lifts the breaker.
    generation: i64,
}

impl Breaker {
    /// When the breaker closes, if nothing more happens: a window after the later of its last
    /// strike and the end of its hold.
    fn closes_at(&self, window: Duration) -> Instant {
        self.open_until
            .map_or(self.last_strike, |u| u.max(self.last_strike))
            + window
    }
}

/// What a strike came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strike {
    /// Counted; the child is applied this time.
    Counted,
    /// The host's one re-apply after a hold, not counted: the child is applied.
    Probe,
    /// The breaker tripped: the child is not applied for this long.
    Tripped(Duration),
}

/// A contested child of a parent, as the parent's condition shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contest {
    /// The child, `Kind namespace/name`.
    pub child: String,
    /// The field and the other manager.
    pub dispute: Dispute,
    /// Trips so far.
    pub trips: u32,
    /// How long the last trip held the child.
    pub held_for: Duration,
}

impl Contest {
    /// What the condition and the event say.
    pub fn message(&self) -> String {
        format!(
            "{}: field manager {:?} keeps changing {}, which this plugin sets; the host stopped re-applying the child for {} s (trip {}) and will try once more after that",
            self.child,
            self.dispute.manager,
            self.dispute.field,
            self.held_for.as_secs(),
            self.trips
        )
    }
}

/// A parent's fights, as of now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Standing {
    /// The first contested child (by name), if the parent has one.
    pub contest: Option<Contest>,
    /// When to look at the parent again: the end of a hold, or when a breaker would close.
    pub wake_after: Option<Duration>,
}

/// One parent's breakers, by child (`Kind namespace/name`): its page of the
/// [`ParentBook`](super::book::ParentBook).
#[derive(Debug, Default)]
pub struct Breakers(HashMap<String, Breaker>);

impl Breakers {
    /// Children with a tripped breaker (held, or on probation after a hold), for the gauge.
    pub fn contested(&self) -> usize {
        self.0.values().filter(|b| b.trips > 0).count()
    }

    /// Whether no breaker is kept.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Lifts every breaker if the parent's spec changed (its generation moved) since they
    /// counted: editing the parent is how a person says "try again now", after removing the
    /// other writer, say. Returns whether any was lifted.
    pub fn lift_if_edited(&mut self, generation: i64) -> bool {
        let before = self.0.len();
        self.0.retain(|_, b| b.generation == generation);
        self.0.len() < before
    }
}

/// The fight breaker's rules, under one policy.
pub struct Fights {
    policy: FightPolicy,
}

impl Fights {
    /// The rules under `policy`.
    pub fn new(policy: FightPolicy) -> Self {
        Self { policy }
    }

    /// Whether `child` of the parent whose breakers these are must not be applied now.
    pub fn is_held(&self, breakers: &Breakers, child: &str, now: Instant) -> bool {
        breakers
            .0
            .get(child)
            .and_then(|b| b.open_until)
            .is_some_and(|until| now < until)
    }

    /// Counts a strike on `child`: the host is about to put back what `dispute`'s manager
    /// changed.
    pub fn strike(
        &self,
        breakers: &mut Breakers,
        generation: i64,
        child: &str,
        dispute: Dispute,
        now: Instant,
    ) -> Strike {
        let policy = self.policy;
        let breaker = breakers
            .0
            .entry(child.to_owned())
            .or_insert_with(|| Breaker {
                dispute: dispute.clone(),
                strikes: Vec::new(),
                trips: 0,
                open_until: None,
                held_for: Duration::ZERO,
                probed: false,
                last_strike: now,
                generation,
            });
        breaker.generation = generation;
        // The first re-apply after a hold is the host's one try: the other writer's value is
        // still there from the hold, and only what happens after the re-apply tells whether
        // the fight goes on.
        if breaker.trips > 0 && !breaker.probed {
            breaker.probed = true;
            breaker.last_strike = now;
            return Strike::Probe;
        }
        if breaker.dispute != dispute {
            breaker.dispute = dispute;
            breaker.strikes.clear();
        }
        breaker
            .strikes
            .retain(|t| now.duration_since(*t) < policy.window);
        breaker.strikes.push(now);
        breaker.last_strike = now;
        // After a trip, the one re-apply the host tries is all the benefit of the doubt left.
        let needed = if breaker.trips > 0 {
            1
        } else {
            policy.threshold.max(1)
        };
        if (breaker.strikes.len() as u32) < needed {
            return Strike::Counted;
        }
        breaker.trips += 1;
        let doubled = policy
            .backoff
            .saturating_mul(1 << (breaker.trips - 1).min(16));
        let hold = doubled.min(policy.max_backoff);
        breaker.open_until = Some(now + hold);
        breaker.held_for = hold;
        breaker.probed = false;
        breaker.strikes.clear();
        Strike::Tripped(hold)
    }

    /// Where the parent's fights stand; breakers that have been quiet for a window close.
    pub fn standing(&self, breakers: &mut Breakers, now: Instant) -> Standing {
        let window = self.policy.window;
        let children = &mut breakers.0;
        children.retain(|_, b| now < b.closes_at(window));
        let mut standing = Standing::default();
        let mut names: Vec<&String> = children.keys().collect();
        names.sort();
        for name in names {
            let b = &children[name];
            if b.trips == 0 {
                continue;
            }
            let wake = match b.open_until {
                Some(until) if now < until => until - now,
                _ => b.closes_at(window) - now,
            };
            standing.wake_after = Some(standing.wake_after.map_or(wake, |w: Duration| w.min(wake)));
            if standing.contest.is_none() {
                standing.contest = Some(Contest {
                    child: name.clone(),
                    dispute: b.dispute.clone(),
                    trips: b.trips,
                    held_for: b.held_for,
                });
            }
        }
        standing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OURS: &str = "reconhost.dev/webapp";

    fn desired() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"replicas": 2, "template": {"spec": {"containers": [
                   {"name": "app", "image": "nginx:1.27", "args": ["-g", "daemon off;"]}]}}}})
    }

    /// The Deployment as the API server returns it after `manager` changed `field` with an
    /// update (which moves the field into its own set).
    fn live(replicas: i64, image: &str, taken: &[(&str, &str, Value)]) -> Value {
        let mut ours = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:args": {}}}}}}});
        let mut entries = vec![];
        if !taken.iter().any(|(_, f, _)| *f == "replicas") {
            ours["f:spec"]["f:replicas"] = json!({});
        }
        if !taken.iter().any(|(_, f, _)| *f == "image") {
            ours["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"]["f:image"] =
                json!({});
        }
        entries.push(
            json!({"manager": OURS, "operation": "Apply", "fieldsV1": ours,
                            "time": "2026-12-04T10:00:00Z"}),
        );
        for (manager, _, fields) in taken {
            entries.push(
                json!({"manager": manager, "operation": "Update", "fieldsV1": fields,
                                "time": "2026-12-04T10:00:05Z"}),
            );
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "managedFields": entries},
               "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                   {"name": "app", "image": image, "args": ["-g", "daemon off;"],
                    "imagePullPolicy": "IfNotPresent"}]}}}})
    }

    #[test]
    fn a_field_another_manager_took_should_be_disputed_with_its_name() {
        let replicas = json!({"f:spec": {"f:replicas": {}}});
        let live = live(5, "nginx:1.27", &[("hpa", "replicas", replicas)]);
        assert_eq!(
            dispute(&desired(), &live, OURS),
            Some(Dispute {
                field: ".spec.replicas".into(),
                manager: "hpa".into()
            })
        );
    }

    #[test]
    fn a_list_element_should_be_found_by_its_key_fields() {
        let image = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {"f:image": {}}}}}}});
        let live = live(2, "nginx:1.28", &[("kubectl-set", "image", image)]);
        let found = dispute(&desired(), &live, OURS).expect("a dispute");
        assert_eq!(found.field, ".spec.template.spec.containers[0].image");
        assert_eq!(found.manager, "kubectl-set");
    }

    #[test]
    fn a_field_still_owned_by_the_plugin_should_not_be_disputed() {
        // The server normalised the value the plugin applied; nobody else wrote it.
        let live = live(2, "docker.io/library/nginx:1.27", &[]);
        assert_eq!(dispute(&desired(), &live, OURS), None);
        // Nothing differs at all.
        assert_eq!(
            dispute(&desired(), &self::live(2, "nginx:1.27", &[]), OURS),
            None
        );
    }

    #[test]
    fn a_removed_field_should_be_laid_at_the_newest_other_writer() {
        let mut live = live(2, "nginx:1.27", &[("editor", "replicas", json!({}))]);
        live["spec"].as_object_mut().unwrap().remove("replicas");
        let found = dispute(&desired(), &live, OURS).expect("a dispute");
        assert_eq!(
            (found.field.as_str(), found.manager.as_str()),
            (".spec.replicas", "editor")
        );
    }

    #[test]
    fn an_atomic_list_and_a_subresource_writer_should_be_named() {
        let mut live = live(2, "nginx:1.27", &[]);
        live["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["-c", "x"]);
        let entries = live["metadata"]["managedFields"].as_array_mut().unwrap();
        entries[0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
            ["k:{\"name\":\"app\"}"]
            .as_object_mut()
            .unwrap()
            .remove("f:args");
        entries.push(
            json!({"manager": "kube-controller-manager", "operation": "Update",
            "subresource": "scale", "time": "2026-12-04T10:00:09Z",
            "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"app\"}": {"f:args": {}}}}}}}}),
        );
        let found = dispute(&desired(), &live, OURS).expect("a dispute");
        assert_eq!(found.field, ".spec.template.spec.containers[0].args[0]");
        assert_eq!(found.manager, "kube-controller-manager (through /scale)");
    }

    fn policy() -> FightPolicy {
        FightPolicy {
            threshold: 3,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(25),
        }
    }

    fn hpa() -> Dispute {
        Dispute {
            field: ".spec.replicas".into(),
            manager: "hpa".into(),
        }
    }

    const CHILD: &str = "Deployment.apps ns/web";

    #[test]
    fn strikes_should_trip_only_at_the_threshold_within_the_window() {
        let fights = Fights::new(policy());
        let mut parent = Breakers::default();
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(0)),
            Strike::Counted
        );
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(30)),
            Strike::Counted
        );
        // The first strike has left the window.
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(61)),
            Strike::Counted
        );
        // Another field starts the count again.
        let other = Dispute {
            field: ".spec.paused".into(),
            ..hpa()
        };
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, other, s(62)),
            Strike::Counted
        );
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(63)),
            Strike::Counted
        );
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(64)),
            Strike::Counted
        );
        assert!(!fights.is_held(&parent, CHILD, s(64)));
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(65)),
            Strike::Tripped(Duration::from_secs(10))
        );
        assert!(fights.is_held(&parent, CHILD, s(70)));
        assert!(!fights.is_held(&parent, CHILD, s(75)));
        assert!(!fights.is_held(&Breakers::default(), CHILD, s(70)));
    }

    #[test]
    fn a_fight_that_goes_on_should_trip_at_once_with_doubling_backoff() {
        let fights = Fights::new(policy());
        let mut parent = Breakers::default();
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        for t in 0..2 {
            fights.strike(&mut parent, 1, CHILD, hpa(), s(t));
        }
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(2)),
            Strike::Tripped(Duration::from_secs(10))
        );
        // After the hold the host re-applies once; that one is undone again, and one strike
        // is enough now.
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(13)),
            Strike::Probe
        );
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(14)),
            Strike::Tripped(Duration::from_secs(20))
        );
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(35)),
            Strike::Probe
        );
        assert_eq!(
            fights.strike(&mut parent, 1, CHILD, hpa(), s(36)),
            Strike::Tripped(Duration::from_secs(25)),
            "capped at max_backoff"
        );
        assert_eq!(parent.contested(), 1);
    }

    #[test]
    fn editing_the_parent_should_lift_its_breakers() {
        let fights = Fights::new(policy());
        let mut parent = Breakers::default();
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        for t in 0..3 {
            fights.strike(&mut parent, 1, CHILD, hpa(), s(t));
        }
        assert!(fights.is_held(&parent, CHILD, s(3)));
        assert!(!parent.lift_if_edited(1), "the same spec lifts nothing");
        assert!(fights.is_held(&parent, CHILD, s(3)));
        assert!(parent.lift_if_edited(2));
        assert!(!fights.is_held(&parent, CHILD, s(3)));
        assert_eq!(fights.standing(&mut parent, s(3)), Standing::default());
        // Counting starts afresh: three strikes again before the next hold.
        assert_eq!(
            fights.strike(&mut parent, 2, CHILD, hpa(), s(4)),
            Strike::Counted
        );
    }

    #[test]
    fn the_standing_should_name_the_contest_until_a_quiet_window_closes_it() {
        let fights = Fights::new(policy());
        let mut parent = Breakers::default();
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        fights.strike(&mut parent, 1, CHILD, hpa(), s(0));
        assert_eq!(
            fights.standing(&mut parent, s(1)),
            Standing::default(),
            "a strike alone shows nothing"
        );
        fights.strike(&mut parent, 1, CHILD, hpa(), s(1));
        fights.strike(&mut parent, 1, CHILD, hpa(), s(2));
        let held = fights.standing(&mut parent, s(4));
        let contest = held.contest.expect("contested");
        assert_eq!(contest.child, CHILD);
        assert_eq!(contest.dispute, hpa());
        assert_eq!(contest.trips, 1);
        assert!(
            contest
                .message()
                .contains("\"hpa\" keeps changing .spec.replicas")
        );
        assert_eq!(
            held.wake_after,
            Some(Duration::from_secs(8)),
            "the hold ends at 12 s"
        );
        // After the hold, on probation: still contested, woken when the window would close.
        let probation = fights.standing(&mut parent, s(20));
        assert!(probation.contest.is_some());
        assert_eq!(probation.wake_after, Some(Duration::from_secs(52)));
        // A window after the hold without a strike: over, and forgotten.
        assert_eq!(fights.standing(&mut parent, s(72)), Standing::default());
        assert_eq!(parent.contested(), 0);
        assert!(parent.is_empty());
    }
}
