//! The parents a change of the ring moved, and how long each went unserved: from the replicas'
//! logs (every reconcile of a parent, with its end time) and the audit log (every write, with
//! the replica that made it in its User-Agent). All three clocks are this machine's.
//!
//! A parent's owner before the change is the replica that reconciled it last before the
//! change; its owner after, the one that reconciled it last at the end. It moved if the two
//! differ; its new owner's first reconcile is the first one after the change.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use reconhost_tests::world::World;

/// Parent name → replica → the ends of its reconciles of that parent, in order.
#[derive(Default)]
pub struct Reconciles(BTreeMap<String, HashMap<String, Vec<Timestamp>>>);

/// Parent name → its writes: when (the API server finished it) and by which replica, in order.
pub struct Writes(HashMap<String, Vec<(Timestamp, String)>>);

/// One moved parent.
pub struct Moved {
    /// The parent's name.
    pub parent: String,
    /// The replica that served it before.
    pub from: String,
    /// The first reconcile of its new owner after the change (its end).
    pub first: Timestamp,
    /// The old owner's last write of it before that.
    pub last_write: Option<Timestamp>,
    /// Writes of it by the old owner after the new owner's first reconcile (two writers: none
    /// expected).
    pub late_writes: usize,
}

impl Reconciles {
    /// Reads the logs of the replicas `(name, log file)`.
    pub fn read(logs: &[(String, PathBuf)]) -> Self {
        let mut all = Self::default();
        for (replica, log) in logs {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            for line in text.lines() {
                let Ok(line) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                let message = line["message"].as_str().unwrap_or("");
                if line["plugin"] != "webapp" || !matches!(message, "reconciled" | "up to date") {
                    continue;
                }
                let parent = line["parent"].as_str().unwrap_or("");
                let parent = parent.rsplit('/').next().unwrap_or(parent);
                let Some(at) = line["timestamp"].as_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                all.0
                    .entry(parent.to_owned())
                    .or_default()
                    .entry(replica.clone())
                    .or_default()
                    .push(at);
            }
        }
        for by in all.0.values_mut() {
            for times in by.values_mut() {
                times.sort();
            }
        }
        all
    }

    /// Who reconciled `parent` last before `at`, and who last of all.
    fn owners(by: &HashMap<String, Vec<Timestamp>>, at: Timestamp) -> (Option<&str>, &str) {
        let before = by
            .iter()
            .filter_map(|(r, t)| Some((t.iter().rev().find(|t| **t < at)?, r)))
            .max()
            .map(|(_, r)| r.as_str());
        let last = by
            .iter()
            .filter_map(|(r, t)| Some((t.last()?, r)))
            .max()
            .map_or("", |(_, r)| r.as_str());
        (before, last)
    }

    /// Parents `from` served before `at` that no other replica has reconciled since.
    pub fn left_behind(&self, at: Timestamp, from: &str) -> usize {
        self.0
            .values()
            .filter(|by| {
                let (before, _) = Self::owners(by, at);
                before == Some(from)
                    && !by
                        .iter()
                        .any(|(r, t)| r != from && t.last().is_some_and(|t| *t >= at))
            })
            .count()
    }

    /// Parents another replica served before `at` that `to` has reconciled since.
    pub fn taken(&self, at: Timestamp, to: &str) -> usize {
        self.0
            .values()
            .filter(|by| {
                let (before, _) = Self::owners(by, at);
                before.is_some_and(|b| b != to)
                    && by
                        .get(to)
                        .is_some_and(|t| t.last().is_some_and(|t| *t >= at))
            })
            .count()
    }

    /// The parents the change at `at` moved, with the writes they saw.
    pub fn moved(&self, at: Timestamp, writes: &Writes) -> Vec<Moved> {
        let mut moved = Vec::new();
        for (parent, by) in &self.0 {
            let (Some(before), after) = Self::owners(by, at) else {
                continue;
            };
            if before == after {
                continue;
            }
            let Some(first) = by[after].iter().find(|t| **t >= at).copied() else {
                continue;
            };
            let old: Vec<Timestamp> = writes
                .0
                .get(parent)
                .into_iter()
                .flatten()
                .filter(|(_, r)| r == before)
                .map(|(t, _)| *t)
                .collect();
            moved.push(Moved {
                parent: parent.clone(),
                from: before.to_owned(),
                first,
                last_write: old.iter().filter(|t| **t < first).max().copied(),
                late_writes: old.iter().filter(|t| **t > first).count(),
            });
        }
        moved
    }
}

impl Writes {
    /// The host's writes in the world's namespace, but for the ring's Leases; an Event's
    /// parent is the name before its first dot.
    pub fn read(world: &World) -> Self {
        let events = world
            .cluster
            .audit_log()
            .events_in(&world.namespace)
            .expect("the audit log");
        let mut writes: HashMap<String, Vec<(Timestamp, String)>> = HashMap::new();
        for event in events.into_iter().filter(|e| e.by_reconhost()) {
            let Some(object) = &event.object_ref else {
                continue;
            };
            if object.resource == "leases" || object.name.is_empty() {
                continue;
            }
            let Some(replica) = event.replica() else {
                continue;
            };
            let Ok(at) = event.stage_timestamp.parse::<Timestamp>() else {
                continue;
            };
            let parent = object.name.split('.').next().unwrap_or_default();
            writes
                .entry(parent.to_owned())
                .or_default()
                .push((at, replica.to_owned()));
        }
        for list in writes.values_mut() {
            list.sort();
        }
        Self(writes)
    }

    /// How many writes there are in all, and how many parents were written by more than one
    /// replica.
    pub fn census(&self) -> (usize, usize) {
        let total = self.0.values().map(Vec::len).sum();
        let shared = self
            .0
            .values()
            .filter(|w| w.iter().any(|(_, r)| *r != w[0].1))
            .count();
        (total, shared)
    }
}

/// `later - earlier`, or zero.
pub fn between(earlier: Timestamp, later: Timestamp) -> Duration {
    Duration::try_from(later.duration_since(earlier)).unwrap_or(Duration::ZERO)
}
