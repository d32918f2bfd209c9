//! A progressive rollout's counters across the ring. Each member counts only the calls it
//! makes, for its share of the parents; the member that judges the rollout (the lifecycle's
//! owner) must see them all, or a candidate failing on another member's parents would pass,
//! and one serving well would wait for calls it never sees. So every member publishes its
//! counters in its own Lease at each renewal ([`ANNOTATION`]), and the judge sums what each
//! member counted since the step started ([`Window`]). Pure: no cluster, no clock.
//!
//! Counters are a member's since it started the rollout's attempt ([`Attempts`]): a member
//! that joins mid-step counts from zero, and one that leaves keeps what it last published in
//! the sum (its Lease is gone, its calls were made). A member's counts reach the judge a
//! renewal late (2 s by default), which delays a verdict by as much and changes none.
//!
//! Each attempt is tagged with the fingerprint of the spec it runs: the same candidate digest
//! tried again with another config (a new attempt, its counters from zero) would otherwise
//! have the previous attempt's calls, still in a Lease for up to a renewal, counted in its
//! first window.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::controller::health::Snapshot;

/// The Lease annotation holding a member's counters, as JSON: `{"<plugin>": {"candidate":
/// "<digest>", "attempt": "<tag>", "stable": [..], "counted": [..]}}`, each list
/// [`Snapshot`]'s fields in order.
pub const ANNOTATION: &str = "reconhost.dev/rollout-counts";

/// One plugin's counters at one member, while it runs a candidate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counted {
    /// The candidate's digest: the judge adds only counters of the candidate it judges.
    pub candidate: String,
    /// The attempt at it ([`tag`]): the judge adds only counters of the attempt it judges.
    pub attempt: String,
    /// The stable revision's counters since the attempt started.
    pub stable: Snapshot,
    /// The candidate's counters.
    pub counted: Snapshot,
}

/// The tag of the rollout attempt made for the spec whose fingerprint is `fingerprint`: every
/// member computes the same from the same spec.
pub fn tag(fingerprint: u64) -> String {
    format!("{fingerprint:016x}")
}

/// The rollout attempts this member runs, by plugin: where its published counters start.
#[derive(Debug, Default)]
pub struct Attempts {
    started: Mutex<HashMap<String, (String, Snapshot)>>,
}

impl Attempts {
    /// Starts counting `plugin`'s attempt `attempt` (a [`tag`]), its stable revision having
    /// counted `stable` so far.
    pub fn start(&self, plugin: &str, attempt: String, stable: Snapshot) {
        self.started
            .lock()
            .expect("attempts lock poisoned")
            .insert(plugin.to_owned(), (attempt, stable));
    }

    /// Forgets `plugin`'s attempt (the plugin is gone).
    pub fn forget(&self, plugin: &str) {
        self.started
            .lock()
            .expect("attempts lock poisoned")
            .remove(plugin);
    }

    /// What this member publishes of `plugin`'s attempt, with its revisions' counters now
    /// (the stable one's counted since the attempt started); nothing without an attempt.
    pub fn counted(
        &self,
        plugin: &str,
        candidate: &str,
        stable: Snapshot,
        counted: Snapshot,
    ) -> Option<Counted> {
        let started = self.started.lock().expect("attempts lock poisoned");
        let (attempt, stable_from) = started.get(plugin)?;
        Some(Counted {
            candidate: candidate.to_owned(),
            attempt: attempt.clone(),
            stable: stable - *stable_from,
            counted,
        })
    }
}

/// A member's counters, by plugin (the owner the supervisor knows it by).
pub type Counts = BTreeMap<String, Counted>;

/// How much of a Lease the counters may take: a Lease's annotations are limited to 256 KiB in
/// all, and a renewal that fails for its size would cost the member its parents.
pub const MAX_ENCODED: usize = 32 << 10;

/// `counts` as the annotation holds them, the plugins in name order as far as they fit in
/// [`MAX_ENCODED`] (past some five hundred rollouts at once, the rest go uncounted here: their
/// judges see fewer calls and wait longer, never more).
pub fn encode(counts: &Counts) -> String {
    let mut size = 2;
    let object: serde_json::Map<String, serde_json::Value> = counts
        .iter()
        .map(|(plugin, c)| {
            (
                plugin.clone(),
                serde_json::json!({
                    "candidate": c.candidate,
                    "attempt": c.attempt,
                    "stable": c.stable.to_array(),
                    "counted": c.counted.to_array(),
                }),
            )
        })
        .take_while(|(plugin, entry)| {
            size += plugin.len() + entry.to_string().len() + 4;
            size <= MAX_ENCODED
        })
        .collect();
    serde_json::Value::Object(object).to_string()
}

/// The counters an annotation holds; what does not parse is left out (a member of another
/// version of the host counts as having counted nothing).
pub fn decode(text: &str) -> Counts {
    let snapshot = |v: &serde_json::Value| -> Option<Snapshot> {
        let fields: Vec<u64> = v
            .as_array()?
            .iter()
            .map(serde_json::Value::as_u64)
            .collect::<Option<_>>()?;
        Some(Snapshot::from_array(fields.try_into().ok()?))
    };
    let Ok(serde_json::Value::Object(object)) = serde_json::from_str(text) else {
        return Counts::new();
    };
    object
        .into_iter()
        .filter_map(|(plugin, c)| {
            Some((
                plugin,
                Counted {
                    candidate: c["candidate"].as_str()?.to_owned(),
                    attempt: c["attempt"].as_str()?.to_owned(),
                    stable: snapshot(&c["stable"])?,
                    counted: snapshot(&c["counted"])?,
                },
            ))
        })
        .collect()
}

/// What the other live members last published, by member.
#[derive(Debug, Default)]
pub struct RingCounts {
    members: Mutex<HashMap<String, Counts>>,
}

/// Which revision's counters a tally is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The stable revision's.
    Stable,
    /// The candidate's.
    Candidate,
}

impl RingCounts {
    /// Replaces what is known with one reading of the ring: the live members other than this
    /// one and their annotations.
    pub fn observe(&self, others: impl IntoIterator<Item = (String, Counts)>) {
        *self.members.lock().expect("ring counts lock poisoned") = others.into_iter().collect();
    }

    /// Each other member's counters of `plugin`'s revision in `role`, counted while it ran
    /// the candidate `candidate` in the attempt `attempt`.
    pub fn of(
        &self,
        plugin: &str,
        candidate: &str,
        attempt: &str,
        role: Role,
    ) -> Vec<(String, Snapshot)> {
        let members = self.members.lock().expect("ring counts lock poisoned");
        members
            .iter()
            .filter_map(|(member, counts)| {
                let c = counts
                    .get(plugin)
                    .filter(|c| c.candidate == candidate && c.attempt == attempt)?;
                let snapshot = match role {
                    Role::Stable => c.stable,
                    Role::Candidate => c.counted,
                };
                Some((member.clone(), snapshot))
            })
            .collect()
    }
}

/// The calls of one revision across the ring since a step started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// Each member's counters when the step started (a member not there then: zero).
    baseline: BTreeMap<String, Snapshot>,
    /// Each member's counters as last seen, departed members' included.
    last: BTreeMap<String, Snapshot>,
}

impl Window {
    /// A window starting at `now` (each member's counters).
    pub fn new(now: impl IntoIterator<Item = (String, Snapshot)>) -> Self {
        let baseline: BTreeMap<String, Snapshot> = now.into_iter().collect();
        Self {
            last: baseline.clone(),
            baseline,
        }
    }

    /// Takes a newer reading of the members' counters.
    pub fn update(&mut self, now: impl IntoIterator<Item = (String, Snapshot)>) {
        self.last.extend(now);
    }

    /// What every member counted since the window started.
    pub fn total(&self) -> Snapshot {
        self.last
            .iter()
            .map(|(member, last)| *last - self.baseline.get(member).copied().unwrap_or_default())
            .fold(Snapshot::default(), |sum, s| sum + s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(calls: u64, errors: u64) -> Snapshot {
        Snapshot {
            calls,
            errors,
            ..Snapshot::default()
        }
    }

    #[test]
    fn counts_should_survive_the_annotation_and_skip_what_does_not_parse() {
        let counts = Counts::from([(
            "web".to_owned(),
            Counted {
                candidate: "sha256:b".into(),
                attempt: tag(7),
                stable: calls(7, 1),
                counted: Snapshot {
                    diverged: 2,
                    ..calls(3, 0)
                },
            },
        )]);
        assert_eq!(decode(&encode(&counts)), counts);
        let mut text = encode(&counts);
        text.insert_str(1, r#""old": {"candidate": "x", "stable": [1, 2]},"#);
        assert_eq!(decode(&text), counts, "a short list is left out");
        let older = encode(&counts).replace(r#""attempt":"0000000000000007","#, "");
        assert!(
            decode(&older).is_empty(),
            "a member that tags no attempt counts as having counted nothing: {older}"
        );
        assert!(decode("not json").is_empty());

        let many: Counts = (0..2_000)
            .map(|i| {
                (
                    format!("plugin-{i:04}-{}", "x".repeat(200)),
                    counts["web"].clone(),
                )
            })
            .collect();
        let text = encode(&many);
        assert!(text.len() <= MAX_ENCODED, "{}", text.len());
        let kept = decode(&text);
        assert!(kept.len() > 50 && kept.len() < many.len());
        assert!(
            kept.keys().all(|k| many.contains_key(k)),
            "whole entries only"
        );
    }

    #[test]
    fn the_ring_should_count_only_members_running_the_same_attempt_at_the_same_candidate() {
        let ring = RingCounts::default();
        let counted = |candidate: &str, attempt: u64, n| {
            Counts::from([(
                "web".to_owned(),
                Counted {
                    candidate: candidate.into(),
                    attempt: tag(attempt),
                    stable: calls(100 + n, 0),
                    counted: calls(n, 0),
                },
            )])
        };
        ring.observe([
            ("b".to_owned(), counted("sha256:new", 2, 4)),
            ("c".to_owned(), counted("sha256:older", 2, 9)),
            // The same candidate with the config before: its Lease not yet renewed.
            ("d".to_owned(), counted("sha256:new", 1, 30)),
        ]);
        assert_eq!(
            ring.of("web", "sha256:new", &tag(2), Role::Candidate),
            [("b".to_owned(), calls(4, 0))]
        );
        assert_eq!(
            ring.of("web", "sha256:new", &tag(2), Role::Stable),
            [("b".to_owned(), calls(104, 0))]
        );
        assert!(
            ring.of("other", "sha256:new", &tag(2), Role::Candidate)
                .is_empty()
        );
    }

    #[test]
    fn a_member_should_publish_its_stable_calls_since_the_attempt_started() {
        let attempts = Attempts::default();
        assert_eq!(
            attempts.counted("web", "sha256:new", calls(50, 5), calls(0, 0)),
            None,
            "no attempt, nothing to publish"
        );
        attempts.start("web", tag(1), calls(50, 5));
        let first = attempts.counted("web", "sha256:new", calls(60, 6), calls(8, 1));
        assert_eq!(
            first.map(|c| (c.attempt, c.stable, c.counted)),
            Some((tag(1), calls(10, 1), calls(8, 1)))
        );
        attempts.start("web", tag(2), calls(60, 6));
        let again = attempts.counted("web", "sha256:new", calls(63, 6), calls(2, 0));
        assert_eq!(
            again.map(|c| (c.attempt, c.stable)),
            Some((tag(2), calls(3, 0))),
            "the same candidate tried again counts afresh"
        );
        attempts.forget("web");
        assert_eq!(
            attempts.counted("web", "sha256:new", calls(70, 6), calls(3, 0)),
            None
        );
    }

    #[test]
    fn a_window_should_sum_each_members_calls_since_it_started() {
        let at = |pairs: &[(&str, u64, u64)]| {
            pairs
                .iter()
                .map(|(m, c, e)| ((*m).to_owned(), calls(*c, *e)))
                .collect::<Vec<_>>()
        };
        let mut window = Window::new(at(&[("", 10, 1), ("b", 5, 0)]));
        assert_eq!(window.total(), Snapshot::default());
        window.update(at(&[("", 14, 1), ("b", 9, 3), ("c", 2, 2)]));
        assert_eq!(
            window.total(),
            calls(4 + 4 + 2, 3 + 2),
            "c joined after the start: all of its calls count"
        );
        window.update(at(&[("", 15, 1)]));
        assert_eq!(
            window.total(),
            calls(5 + 4 + 2, 5),
            "b and c left: what they counted still does"
        );
    }
}
