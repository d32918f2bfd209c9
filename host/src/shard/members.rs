//! Which members of the ring are alive, judged as client-go's leader election judges a Lease:
//! by whether its record changed within its duration *as this replica observed it*, so clock
//! skew between nodes never matters (only the rate of each local clock does).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ring::View;

/// One member's Lease as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The Lease's name: the member's id in views.
    pub name: String,
    /// Its resourceVersion: any write (a renewal, a new view) changes it.
    pub resource_version: String,
    /// Its holder; empty once the member has let go.
    pub holder: String,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// The view it serves under (its annotation).
    pub view: View,
}

/// What this replica has observed of each member's Lease.
#[derive(Debug, Default)]
pub struct Observer {
    records: HashMap<String, Record>,
}

#[derive(Debug)]
struct Record {
    resource_version: String,
    changed: Instant,
}

/// The ring as one listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// Live members other than this replica, with the views they serve under.
    pub others: Vec<(String, Arc<View>)>,
    /// Members whose Lease has not changed for more than its duration plus `orphan_after`:
    /// their Leases can be deleted (by name and resourceVersion).
    pub orphans: Vec<(String, String)>,
}

impl Observer {
    /// Reads `listed` at `now` for the member `me` (whose own Lease is left out: it knows
    /// better). A Lease seen for the first time counts as just renewed: a replica that starts
    /// beside a dead member waits out that member's whole duration before taking its parents.
    pub fn read(
        &mut self,
        me: &str,
        listed: &[Seen],
        now: Instant,
        orphan_after: Duration,
    ) -> Reading {
        self.records
            .retain(|name, _| listed.iter().any(|s| &s.name == name));
        let mut reading = Reading {
            others: Vec::new(),
            orphans: Vec::new(),
        };
        for seen in listed.iter().filter(|s| s.name != me) {
            let record = self
                .records
                .entry(seen.name.clone())
                .or_insert_with(|| Record {
                    resource_version: seen.resource_version.clone(),
                    changed: now,
                });
            if record.resource_version != seen.resource_version {
                record.resource_version.clone_from(&seen.resource_version);
                record.changed = now;
            }
            let quiet = now.saturating_duration_since(record.changed);
            if !seen.holder.is_empty() && quiet < seen.duration {
                reading
                    .others
                    .push((seen.name.clone(), Arc::new(seen.view.clone())));
            } else if quiet >= seen.duration + orphan_after {
                reading
                    .orphans
                    .push((seen.name.clone(), seen.resource_version.clone()));
            }
        }
        reading.others.sort_by(|a, b| a.0.cmp(&b.0));
        reading
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn seen(name: &str, rv: &str, holder: &str, view: &str) -> Seen {
        Seen {
            name: name.into(),
            resource_version: rv.into(),
            holder: holder.into(),
            duration: 15 * SECOND,
            view: View::parse(view),
        }
    }

    fn names(reading: &Reading) -> Vec<&str> {
        reading.others.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn a_member_should_be_alive_while_its_lease_changes_within_its_duration() {
        let mut observer = Observer::default();
        let t0 = Instant::now();
        let orphan = 60 * SECOND;
        let listed = [seen("a", "1", "a", "a,b"), seen("b", "7", "b", "a,b")];
        assert_eq!(names(&observer.read("a", &listed, t0, orphan)), ["b"]);
        // b renews (new resourceVersion) at 10 s: alive until 25 s.
        let renewed = [seen("a", "2", "a", "a,b"), seen("b", "8", "b", "a,b")];
        assert_eq!(
            names(&observer.read("a", &renewed, t0 + 10 * SECOND, orphan)),
            ["b"]
        );
        assert_eq!(
            names(&observer.read("a", &renewed, t0 + 24 * SECOND, orphan)),
            ["b"]
        );
        let gone = observer.read("a", &renewed, t0 + 25 * SECOND, orphan);
        assert!(gone.others.is_empty(), "b's lease expired");
        assert!(gone.orphans.is_empty(), "not yet an orphan");
        let orphaned = observer.read("a", &renewed, t0 + 85 * SECOND, orphan);
        assert_eq!(orphaned.orphans, [("b".to_owned(), "8".to_owned())]);
    }

    #[test]
    fn a_released_lease_should_not_count() {
        let mut observer = Observer::default();
        let listed = [seen("b", "3", "", "b")];
        let reading = observer.read("a", &listed, Instant::now(), 60 * SECOND);
        assert!(reading.others.is_empty());
    }

    #[test]
    fn the_views_should_be_the_published_ones() {
        let mut observer = Observer::default();
        let listed = [seen("c", "1", "c", "c"), seen("b", "1", "b", "a,b,c")];
        let reading = observer.read("a", &listed, Instant::now(), 60 * SECOND);
        assert_eq!(names(&reading), ["b", "c"], "sorted");
        assert_eq!(reading.others[0].1.to_string(), "a,b,c");
        assert_eq!(reading.others[1].1.to_string(), "c");
    }
}
