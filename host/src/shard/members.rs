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
    /// What it counted of the rollouts in progress (its annotation).
    pub counts: super::counts::Counts,
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
    /// Its `leaseDurationSeconds`, as last listed.
    duration: Duration,
    /// What a round must look at again when it changes: its holder and its view.
    said: (String, String),
}

/// A change of one member's Lease, as a watch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Created or written.
    Written {
        /// Its name.
        name: String,
        /// Its resourceVersion.
        resource_version: String,
        /// Its holder (empty once let go).
        holder: String,
        /// Its view annotation, as written.
        view: String,
    },
    /// Deleted.
    Deleted(String),
}

/// The ring as one listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// Live members other than this replica, with the views they serve under.
    pub others: Vec<(String, Arc<View>)>,
    /// Members whose Lease has not changed for more than its duration plus `orphan_after`:
    /// their Leases can be deleted (by name and resourceVersion).
    pub orphans: Vec<(String, String)>,
    /// Live members (of `others`) whose Lease has not changed for `late_after` or more: they
    /// missed renewals, and may be dead.
    pub late: Vec<String>,
}

impl Observer {
    /// Reads `listed` at `now` for the member `me` (whose own Lease is left out: it knows
    /// better). A Lease seen for the first time counts as just renewed: a replica that starts
    /// beside a dead member waits out that member's whole duration before taking its parents,
    /// unless a member that saw it expire deletes it first (the ring does at once).
    pub fn read(
        &mut self,
        me: &str,
        listed: &[Seen],
        now: Instant,
        orphan_after: Duration,
        late_after: Duration,
    ) -> Reading {
        self.records
            .retain(|name, _| listed.iter().any(|s| &s.name == name));
        let mut reading = Reading {
            others: Vec::new(),
            orphans: Vec::new(),
            late: Vec::new(),
        };
        for seen in listed.iter().filter(|s| s.name != me) {
            let said = (seen.holder.clone(), seen.view.to_string());
            let record = self
                .records
                .entry(seen.name.clone())
                .or_insert_with(|| Record {
                    resource_version: seen.resource_version.clone(),
                    changed: now,
                    duration: seen.duration,
                    said: said.clone(),
                });
            if record.resource_version != seen.resource_version {
                record.resource_version.clone_from(&seen.resource_version);
                record.changed = now;
            }
            record.duration = seen.duration;
            record.said = said;
            let quiet = now.saturating_duration_since(record.changed);
            if !seen.holder.is_empty() && quiet < seen.duration {
                reading
                    .others
                    .push((seen.name.clone(), Arc::new(seen.view.clone())));
                if quiet >= late_after {
                    reading.late.push(seen.name.clone());
                }
            } else if quiet >= seen.duration + orphan_after {
                reading
                    .orphans
                    .push((seen.name.clone(), seen.resource_version.clone()));
            }
        }
        reading.others.sort_by(|a, b| a.0.cmp(&b.0));
        reading.late.sort();
        reading
    }

    /// Takes in a change a watch reported at `now`; returns whether a round should look at
    /// the ring at once (a member came, went, let go or published a view), as opposed to a
    /// renewal, which only moves the member's expiry. A renewal seen here as it happens, rather
    /// than at the next listing, is what lets a member that stops renewing be taken for dead
    /// right when its Lease expires; never earlier than its own fence closes, since the write
    /// was sent before the watch could report it.
    pub fn saw(&mut self, me: &str, change: Change, now: Instant) -> bool {
        match change {
            Change::Deleted(name) => name != me && self.records.remove(&name).is_some(),
            Change::Written {
                name,
                resource_version,
                holder,
                view,
            } => {
                if name == me {
                    return false;
                }
                let said = (holder, View::parse(&view).to_string());
                match self.records.get_mut(&name) {
                    // A member not listed yet: the next listing judges it.
                    None => true,
                    Some(record) => {
                        if record.resource_version != resource_version {
                            record.resource_version = resource_version;
                            record.changed = now;
                        }
                        let news = record.said != said;
                        record.said = said;
                        news
                    }
                }
            }
        }
    }

    /// When the first member now alive would expire if it stopped renewing: a round then
    /// finds it dead without waiting for the next retry period.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.records
            .values()
            .filter(|r| !r.said.0.is_empty())
            .map(|r| r.changed + r.duration)
            .filter(|expiry| *expiry > now)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const LATE: Duration = Duration::from_secs(5);

    fn seen(name: &str, rv: &str, holder: &str, view: &str) -> Seen {
        Seen {
            name: name.into(),
            resource_version: rv.into(),
            holder: holder.into(),
            duration: 15 * SECOND,
            view: View::parse(view),
            counts: Default::default(),
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
        assert_eq!(names(&observer.read("a", &listed, t0, orphan, LATE)), ["b"]);
        // b renews (new resourceVersion) at 10 s: alive until 25 s.
        let renewed = [seen("a", "2", "a", "a,b"), seen("b", "8", "b", "a,b")];
        assert_eq!(
            names(&observer.read("a", &renewed, t0 + 10 * SECOND, orphan, LATE)),
            ["b"]
        );
        assert_eq!(
            names(&observer.read("a", &renewed, t0 + 24 * SECOND, orphan, LATE)),
            ["b"]
        );
        let gone = observer.read("a", &renewed, t0 + 25 * SECOND, orphan, LATE);
        assert!(gone.others.is_empty(), "b's lease expired");
        assert!(gone.orphans.is_empty(), "not yet an orphan");
        let orphaned = observer.read("a", &renewed, t0 + 85 * SECOND, orphan, LATE);
        assert_eq!(orphaned.orphans, [("b".to_owned(), "8".to_owned())]);
    }

    #[test]
    fn a_member_quiet_past_two_renewals_should_be_late_and_still_alive() {
        let mut observer = Observer::default();
        let t0 = Instant::now();
        let listed = [seen("b", "7", "b", "a,b"), seen("c", "3", "c", "a,b,c")];
        let first = observer.read("a", &listed, t0, 60 * SECOND, LATE);
        assert!(first.late.is_empty(), "just seen");
        // c renews at 4 s, b does not.
        let renewed = [seen("b", "7", "b", "a,b"), seen("c", "4", "c", "a,b,c")];
        observer.read("a", &renewed, t0 + 4 * SECOND, 60 * SECOND, LATE);
        let later = observer.read("a", &renewed, t0 + 6 * SECOND, 60 * SECOND, LATE);
        assert_eq!(later.late, ["b"]);
        assert_eq!(
            names(&later),
            ["b", "c"],
            "late, but alive until its Lease expires"
        );
        let again = [seen("b", "8", "b", "a,b"), seen("c", "4", "c", "a,b,c")];
        let back = observer.read("a", &again, t0 + 7 * SECOND, 60 * SECOND, LATE);
        assert!(back.late.is_empty(), "renewed: no longer late");
        let gone = observer.read("a", &again, t0 + 23 * SECOND, 60 * SECOND, LATE);
        assert!(
            gone.late.is_empty() && names(&gone).is_empty(),
            "dead is not late"
        );
    }

    #[test]
    fn a_watched_renewal_should_move_the_expiry_and_only_news_should_wake_a_round() {
        let mut observer = Observer::default();
        let t0 = Instant::now();
        let listed = [seen("b", "7", "b", "a,b")];
        observer.read("a", &listed, t0, 60 * SECOND, LATE);
        assert_eq!(observer.next_expiry(t0), Some(t0 + 15 * SECOND));
        let written = |rv: &str, holder: &str, view: &str| Change::Written {
            name: "b".into(),
            resource_version: rv.into(),
            holder: holder.into(),
            view: view.into(),
        };
        assert!(
            !observer.saw("a", written("8", "b", "a,b"), t0 + 3 * SECOND),
            "a renewal is no news"
        );
        assert_eq!(observer.next_expiry(t0), Some(t0 + 18 * SECOND));
        assert!(
            !observer.saw("a", written("8", "b", "a,b"), t0 + 9 * SECOND),
            "a replayed event does not renew"
        );
        assert_eq!(observer.next_expiry(t0), Some(t0 + 18 * SECOND));
        let gone = observer.read(
            "a",
            &[seen("b", "8", "b", "a,b")],
            t0 + 18 * SECOND,
            60 * SECOND,
            LATE,
        );
        assert!(
            gone.others.is_empty(),
            "expired 15 s after the watched renewal"
        );

        assert!(
            observer.saw("a", written("9", "b", "a,b,c"), t0 + 19 * SECOND),
            "a new view"
        );
        assert!(
            observer.saw("a", written("10", "", "a,b,c"), t0 + 20 * SECOND),
            "let go"
        );
        assert_eq!(
            observer.next_expiry(t0),
            None,
            "a member that let go does not expire"
        );
        let new = Change::Written {
            name: "c".into(),
            resource_version: "1".into(),
            holder: "c".into(),
            view: "c".into(),
        };
        assert!(observer.saw("a", new, t0), "a new member");
        let own = Change::Written {
            name: "a".into(),
            resource_version: "5".into(),
            holder: "a".into(),
            view: "a,b,c".into(),
        };
        assert!(!observer.saw("a", own, t0), "its own Lease");
        assert!(observer.saw("a", Change::Deleted("b".into()), t0));
        assert!(
            !observer.saw("a", Change::Deleted("b".into()), t0),
            "already gone"
        );
    }

    #[test]
    fn a_released_lease_should_not_count() {
        let mut observer = Observer::default();
        let listed = [seen("b", "3", "", "b")];
        let reading = observer.read("a", &listed, Instant::now(), 60 * SECOND, LATE);
        assert!(reading.others.is_empty());
    }

    #[test]
    fn the_views_should_be_the_published_ones() {
        let mut observer = Observer::default();
        let listed = [seen("c", "1", "c", "c"), seen("b", "1", "b", "a,b,c")];
        let reading = observer.read("a", &listed, Instant::now(), 60 * SECOND, LATE);
        assert_eq!(names(&reading), ["b", "c"], "sorted");
        assert_eq!(reading.others[0].1.to_string(), "a,b,c");
        assert_eq!(reading.others[1].1.to_string(), "c");
    }
}
