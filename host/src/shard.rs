//! Several active replicas sharing the parents (`--sharding`): membership on Kubernetes
//! Leases, assignment by rendezvous hashing, and a handover in which two replicas never
//! reconcile the same parent.
//!
//! **Membership.** Each replica holds its own `coordination.k8s.io` Lease in the host's
//! namespace, named `<ring>-<identity>` and labelled `reconhost.dev/ring=<ring>`, renewed every
//! retry period. A member is alive while its Lease's record changes within the Lease's
//! duration as *this* replica observed it ([`members`], client-go's rule: clocks are only
//! compared with themselves; a watch of the ring reports renewals as they happen, and a round
//! comes when the first live member's Lease would expire). A replica that could not renew within
//! the renew deadline stops
//! reconciling at once and closes its [`Fence`], so that its client refuses every write, before
//! its Lease can expire for the others (10 s < 15 s).
//!
//! **Assignment.** Every replica computes, from the live Leases, the view (the set of members)
//! and from it each parent's owner by rendezvous hashing of the parent's namespace and name
//! ([`ring`]). No sharder, no webhook, no label on the objects. Children and reads follow their
//! parent because the unit of work is the parent's key. The host's own writes (the
//! ReconcilePlugins' status and finalizers) follow the key [`LIFECYCLE`] the same way.
//!
//! **Handover.** Each member publishes in its Lease (annotation `reconhost.dev/view`) the view
//! it serves under. A replica reconciles a parent only if its own published view gives it the
//! parent and no other live member's published view gives that member the parent
//! ([`ring::Claims`]). When the view changes, a replica first serves only what both its old and
//! its new view give it, waits until no reconcile of a parent it gives up is in flight, and only
//! then publishes the new view. Why two replicas cannot both reconcile a parent `p`:
//!
//! - A replica starts reconciling `p` only after it published a view giving it `p` and then
//!   read every Lease with a quorum read (a list without resourceVersion), which showed no
//!   other member claiming `p`. Every member does the same: write, then read. (A round that
//!   only reads, woken by a watch of the ring or by a member's expiry, claims under the view
//!   its Lease already holds: written before that read too.)
//! - If two members `a` and `b` both claimed `p` in their published views, whichever of them
//!   wrote second read the other's claim (the API server's writes and quorum reads are
//!   linearizable), so it does not reconcile `p`. Dekker's argument: at least one sees the
//!   other.
//! - A member stops claiming `p` (publishes a view not giving it `p`) only after its last
//!   reconcile of `p` ended.
//! - A member whose Lease expired is no longer read, but it stopped writing before that (the
//!   renew deadline and the fence). One that renews again only after its deadline had passed
//!   (it was paused, or cut off) keeps its fence closed, drops every reconcile still in
//!   flight from before, and rejoins as a newcomer.
//!
//! Nothing is written on the objects, and a planned move costs one Lease write per member.
//! Clock steps are out of scope (as for leader election): a local clock that jumps can make a
//! Lease look expired early.

pub mod counts;
pub mod members;
pub mod ring;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use self::members::{Observer, Seen};
use self::ring::{Claims, View};
use crate::controller::route::Assignment;
use crate::controller::workers::Stop;
use crate::keys::ObjectKey;
use crate::leader::{Timings, jittered};
use crate::metrics::Metrics;
use crate::supervisor::Supervisor;

/// The label every member's Lease carries, with the ring's name.
pub const RING_LABEL: &str = "reconhost.dev/ring";
/// The annotation holding the view a member serves under.
pub const VIEW_ANNOTATION: &str = "reconhost.dev/view";
/// The key whose owner does the host's own writes (ReconcilePlugin status and finalizers).
pub const LIFECYCLE: &str = "reconhost.dev/lifecycle";
/// How long after expiring a member's Lease is deleted by whoever sees it: at once. A replica
/// that starts after a member died counts that member's Lease alive for a whole duration,
/// having never seen it change, and would leave the parents the dead member's view still gives
/// it unserved that long; the members that saw it expire tell it so by deleting it (with its
/// resourceVersion as a precondition, so a member that renewed meanwhile keeps its Lease).
const ORPHAN_AFTER: Duration = Duration::ZERO;

/// The ring and this replica's place in it.
#[derive(Debug, Clone)]
pub struct Ring {
    /// The namespace of the members' Leases.
    pub namespace: String,
    /// The ring's name (the label's value, the Leases' prefix).
    pub name: String,
    /// This replica's Lease name: its id in views.
    pub member: String,
    /// Its holder identity.
    pub identity: String,
    /// Lease duration, renew deadline and retry period.
    pub timings: Timings,
}

impl Ring {
    /// The ring `name` in `namespace`, joined as `identity` (a host name and a random
    /// suffix: a restarted pod is a new member).
    pub fn new(namespace: &str, name: &str, identity: &str, timings: Timings) -> Self {
        let suffix: String = identity
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let member = format!("{name}-{}", suffix.trim_matches('-'));
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            member: member.chars().take(253).collect(),
            identity: identity.to_owned(),
            timings,
        }
    }

    /// The prefix of every member's Lease name.
    pub fn prefix(&self) -> String {
        format!("{}-", self.name)
    }
}

/// Until when this replica may write: every write of the host's client passes here, so a
/// replica that was paused or cut off past its renew deadline writes nothing more, even
/// mid-reconcile. Lease writes go through a client of their own.
#[derive(Debug, Clone)]
pub struct Fence {
    origin: Instant,
    /// Nanoseconds after `origin` until which writes pass; 0: closed.
    until: Arc<AtomicU64>,
}

impl Default for Fence {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            until: Arc::default(),
        }
    }
}

impl Fence {
    /// Lets writes pass until `deadline`.
    pub fn open_until(&self, deadline: Instant) {
        let nanos = deadline.saturating_duration_since(self.origin).as_nanos();
        self.until
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Release);
    }

    /// Refuses writes from now on.
    pub fn close(&self) {
        self.until.store(0, Ordering::Release);
    }

    /// Whether a write may go now.
    pub fn is_open(&self) -> bool {
        let now = Instant::now()
            .saturating_duration_since(self.origin)
            .as_nanos();
        u128::from(self.until.load(Ordering::Acquire)) > now
    }
}

/// Takes part in `ring` until `stop`: renews this replica's Lease, reads the others', and
/// gives `supervisor` the parents this replica owns; `leading` says whether it owns the
/// lifecycle's key. On `stop` (after the supervisor has drained) the Lease is deleted, so the
/// others take its parents within a retry period.
///
/// The replica joins (creates its Lease) only once `ready` (what `/readyz` says: its plugins
/// loaded, its caches synced): a member that joined earlier would take parents from members
/// serving them and leave them unserved while it loads, for as long as a plugin takes to
/// compile or a large cache to list.
pub async fn run(
    client: kube::Client,
    ring: Ring,
    supervisor: Arc<Supervisor>,
    leading: watch::Sender<bool>,
    mut ready: watch::Receiver<bool>,
    fence: Fence,
    mut stop: Stop,
) {
    tokio::select! {
        () = stop.stopped() => return,
        ready = ready.wait_for(|ready| *ready) => {
            // The sender lives as long as the host runs; gone, the host is stopping.
            if ready.is_err() {
                return;
            }
        }
    }
    let metrics = supervisor.context().metrics.clone();
    let api: Api<Lease> = Api::namespaced(client, &ring.namespace);
    let mut member = Member {
        ring: &ring,
        api: &api,
        supervisor: &supervisor,
        metrics: &metrics,
        observer: Observer::default(),
        published: None,
        target: None,
        renewed: None,
        moving_since: None,
        late: Vec::new(),
    };
    info!(ring = %ring.name, member = %ring.member, namespace = %ring.namespace,
          "sharding: reconciling the parents this member owns");
    let changes = changes(api.clone(), &ring.name);
    futures::pin_mut!(changes);
    // Renewals keep the retry period; a round that only reads comes as soon as the ring says
    // something (a member came, went or published a view) or a member's Lease expires.
    let mut renew_at = Instant::now();
    'rounds: loop {
        let renew = Instant::now() >= renew_at;
        let quick = member.round(&fence, renew).await;
        if renew {
            renew_at = Instant::now() + jittered(ring.timings.retry);
        }
        leading.send_if_modified(|leads| {
            let now = fence.is_open()
                && matches!(&*supervisor.context().assignment.borrow(),
                            Assignment::Shard(c) if c.owns(&ObjectKey::new("", LIFECYCLE)));
            std::mem::replace(leads, now) != now
        });
        let next = if quick {
            Instant::now() + Duration::from_millis(100)
        } else {
            // A moment past the expiry, so that the round finds the Lease expired.
            let expiry = member
                .observer
                .next_expiry(Instant::now())
                .map(|at| at + Duration::from_millis(10));
            expiry.map_or(renew_at, |at| at.min(renew_at))
        };
        loop {
            tokio::select! {
                () = stop.stopped() => break 'rounds,
                () = tokio::time::sleep_until(next.into()) => break,
                Some(change) = changes.next() => {
                    if member.observer.saw(&ring.member, change, Instant::now()) {
                        break;
                    }
                }
            }
        }
    }
    leading.send_replace(false);
    fence.close();
    let deleted = api
        .delete(&ring.member, &DeleteParams::default())
        .await
        .map(|_| ());
    match deleted {
        Ok(()) => info!(member = %ring.member, "left the ring"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(error) => {
            warn!(member = %ring.member, %error, "deleting this member's Lease failed; it expires in its own time")
        }
    }
}

/// The changes of the ring's Leases, as a watch reports them (a failed watch is retried with
/// backoff; meanwhile the rounds still list the ring every retry period).
fn changes(api: Api<Lease>, ring: &str) -> impl futures::Stream<Item = members::Change> {
    let config = watcher::Config::default().labels(&format!("{RING_LABEL}={ring}"));
    watcher::watcher(api, config)
        .default_backoff()
        .filter_map(|event| async move {
            let written = |lease: Lease| {
                let view = lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(VIEW_ANNOTATION))
                    .cloned()
                    .unwrap_or_default();
                members::Change::Written {
                    name: lease.metadata.name.unwrap_or_default(),
                    resource_version: lease.metadata.resource_version.unwrap_or_default(),
                    holder: lease
                        .spec
                        .and_then(|s| s.holder_identity)
                        .unwrap_or_default(),
                    view,
                }
            };
            match event {
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                    Some(written(lease))
                }
                Ok(watcher::Event::Delete(lease)) => Some(members::Change::Deleted(
                    lease.metadata.name.unwrap_or_default(),
                )),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
                Err(error) => {
                    debug!(%error, "watching the ring's Leases failed; retrying");
                    None
                }
            }
        })
}

/// One member's state between rounds.
struct Member<'a> {
    ring: &'a Ring,
    api: &'a Api<Lease>,
    supervisor: &'a Supervisor,
    metrics: &'a Metrics,
    observer: Observer,
    /// The view the Lease says this member serves under.
    published: Option<Arc<View>>,
    /// The view to publish at the next write.
    target: Option<Arc<View>>,
    /// When the last successful write was sent.
    renewed: Option<Instant>,
    /// When this member started draining towards `target`.
    moving_since: Option<Instant>,
    /// The members whose Leases were late at the last reading.
    late: Vec<String>,
}

impl Member<'_> {
    /// Writes (when `renew`, or with a view to publish), reads, assigns. Returns whether the
    /// next round should come at once (a view to publish, or a drain to watch). A round that
    /// does not write claims only under the view its Lease already holds, which it wrote
    /// before this read: the write-then-read order the argument above rests on still holds.
    async fn round(&mut self, fence: &Fence, renew: bool) -> bool {
        let timings = self.ring.timings;
        let publish = self.target.is_some() && self.target != self.published;
        if let Some(target) = self.target.clone().filter(|_| renew || publish) {
            let sent = Instant::now();
            match self.write(&target).await {
                Ok(())
                    if self
                        .renewed
                        .is_some_and(|t| sent.duration_since(t) >= timings.renew) =>
                {
                    // Renewed, but after a gap past the deadline (the process was paused, or
                    // the renewal itself hung): the others may have taken every parent
                    // meanwhile, and reconciles from before the gap may still be in flight.
                    // The fence stays closed until they are gone and this member rejoins.
                    warn!(member = %self.ring.member, gap_seconds = sent.duration_since(
                        self.renewed.unwrap_or(sent)).as_secs(),
                        "renewed only after the renew deadline had passed; rejoining");
                    self.lose_everything(fence).await;
                    return true;
                }
                Ok(()) => {
                    self.renewed = Some(sent);
                    fence.open_until(sent + timings.renew);
                    if self.published.as_ref() != Some(&target) {
                        info!(member = %self.ring.member, view = %target, "serving under a new view");
                        if let Some(since) = self.moving_since.take() {
                            self.metrics.shard_handover(since.elapsed());
                        }
                    }
                    self.published = Some(target);
                }
                Err(error) => {
                    warn!(member = %self.ring.member, %error, "renewing this member's Lease failed");
                    if self.renewed.is_none_or(|t| t.elapsed() >= timings.renew) {
                        self.lose_everything(fence).await;
                        return false;
                    }
                }
            }
        }
        let listed = match self.list().await {
            Ok(listed) => listed,
            Err(error) => {
                warn!(ring = %self.ring.name, %error, "reading the ring's Leases failed");
                return false;
            }
        };
        let reading = self.observer.read(
            &self.ring.member,
            &listed,
            Instant::now(),
            ORPHAN_AFTER,
            timings.retry * 5 / 2,
        );
        for (name, resource_version) in &reading.orphans {
            self.delete_orphan(name, resource_version).await;
        }
        self.supervisor.ring_counts().observe(
            listed
                .iter()
                .filter(|seen| reading.others.iter().any(|(name, _)| *name == seen.name))
                .map(|seen| (seen.name.clone(), seen.counts.clone())),
        );
        let view = Arc::new(View::of(
            reading
                .others
                .iter()
                .map(|(name, _)| name.as_str())
                .chain([self.ring.member.as_str()]),
        ));
        let warm = self.warm(&reading);
        self.metrics.shard(view.len(), &self.supervisor.owned());
        let (whole, stubs) = self.supervisor.cached_children();
        self.metrics.shard_children(whole, stubs);
        let Some(published) = self.published.clone() else {
            // Not a member yet: join with the view this reading gives, owning nothing until
            // the next reading shows what the others claim.
            self.target = Some(view);
            return true;
        };
        if !fence.is_open() {
            return false;
        }
        if *published == *view {
            self.target = Some(published.clone());
            let claims =
                Claims::new(&self.ring.member, vec![published], reading.others).warming(warm);
            self.supervisor.assign(Assignment::Shard(Arc::new(claims)));
            return false;
        }
        // Moving: serve what both views give, let the rest drain, then publish.
        let claims = Claims::new(
            &self.ring.member,
            vec![published, view.clone()],
            reading.others,
        )
        .warming(warm);
        self.supervisor.assign(Assignment::Shard(Arc::new(claims)));
        self.moving_since.get_or_insert_with(Instant::now);
        let moving = self.supervisor.moving();
        if moving == 0 {
            self.target = Some(view);
        } else {
            info!(member = %self.ring.member, in_flight = moving,
                  "waiting for reconciles of parents this member gives up");
        }
        true
    }

    /// The view without the members whose Leases are late (two renewals missed: they may be
    /// dead), if any are: the children of the parents this member would take from them are
    /// fetched whole while their Leases run out, rather than one reconcile at a time after
    /// (`Claims::warming`). A late member that renews again costs the fetches, and the
    /// children go back to stubs.
    fn warm(&mut self, reading: &members::Reading) -> Option<Arc<View>> {
        if reading.late != self.late {
            if !reading.late.is_empty() {
                info!(members = ?reading.late, "members' Leases are late; fetching whole the children of the parents this member would take from them");
            }
            self.late.clone_from(&reading.late);
        }
        if reading.late.is_empty() {
            return None;
        }
        Some(Arc::new(View::of(
            reading
                .others
                .iter()
                .map(|(name, _)| name.as_str())
                .filter(|name| !reading.late.iter().any(|late| late == name))
                .chain([self.ring.member.as_str()]),
        )))
    }

    /// Stops reconciling and writing at once: the Lease could not be renewed in time, so the
    /// others may soon take every parent. The next successful renewal rejoins.
    async fn lose_everything(&mut self, fence: &Fence) {
        if !fence.is_open() && self.published.is_none() {
            return;
        }
        warn!(member = %self.ring.member, seconds = self.ring.timings.renew.as_secs(),
              "could not renew within the renew deadline; reconciling nothing until it can");
        fence.close();
        self.supervisor.assign(Assignment::Nothing);
        // Rejoin as a newcomer: a view from a fresh reading, claims only after that. The
        // fence opens again at the next renewal, so every reconcile from before must be gone
        // by then (the pools are being aborted; this waits a renew deadline at most).
        self.published = None;
        self.target = None;
        self.renewed = None;
        let deadline = Instant::now() + self.ring.timings.renew;
        while self.supervisor.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates or renews this member's Lease with `view`.
    async fn write(&self, view: &View) -> Result<(), kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let ring = self.ring;
        let meta = ObjectMeta {
            name: Some(ring.member.clone()),
            namespace: Some(ring.namespace.clone()),
            labels: Some(BTreeMap::from([(RING_LABEL.to_owned(), ring.name.clone())])),
            annotations: Some(
                [
                    (VIEW_ANNOTATION.to_owned(), view.to_string()),
                    (
                        counts::ANNOTATION.to_owned(),
                        counts::encode(&self.supervisor.rollout_counts()),
                    ),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        let spec = LeaseSpec {
            holder_identity: Some(ring.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(ring.timings.lease.as_secs()).unwrap_or(i32::MAX),
            ),
            renew_time: Some(now),
            ..LeaseSpec::default()
        };
        match self.api.get_opt(&ring.member).await? {
            None => {
                let lease = Lease {
                    metadata: meta,
                    spec: Some(LeaseSpec {
                        acquire_time: spec.renew_time.clone(),
                        ..spec
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await?;
            }
            Some(mut lease) => {
                let acquire_time = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
                lease.metadata.labels = meta.labels;
                lease.metadata.annotations = meta.annotations;
                lease.spec = Some(LeaseSpec {
                    acquire_time,
                    ..spec
                });
                // With the resourceVersion read: nobody else writes this Lease, and a 409
                // means something did, which the next round reads again.
                self.api
                    .replace(&ring.member, &PostParams::default(), &lease)
                    .await?;
            }
        }
        Ok(())
    }

    /// Every member's Lease, read from etcd (a list without resourceVersion is a quorum read).
    async fn list(&self) -> Result<Vec<Seen>, kube::Error> {
        let selector = format!("{RING_LABEL}={}", self.ring.name);
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        Ok(leases
            .items
            .into_iter()
            .filter_map(|lease| {
                let name = lease.metadata.name?;
                let spec = lease.spec.unwrap_or_default();
                let annotation = |key| {
                    lease
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(key))
                        .map(String::as_str)
                };
                let view = annotation(VIEW_ANNOTATION)
                    .map(View::parse)
                    .unwrap_or_default();
                let counts = annotation(counts::ANNOTATION)
                    .map(counts::decode)
                    .unwrap_or_default();
                Some(Seen {
                    name,
                    resource_version: lease.metadata.resource_version.unwrap_or_default(),
                    holder: spec.holder_identity.unwrap_or_default(),
                    duration: Duration::from_secs(
                        u64::try_from(spec.lease_duration_seconds.unwrap_or(15).max(1))
                            .unwrap_or(15),
                    ),
                    view,
                    counts,
                })
            })
            .collect())
    }

    /// Deletes a dead member's Lease, unless it changed since it was read.
    async fn delete_orphan(&self, name: &str, resource_version: &str) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.to_owned()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => info!(member = %name, "deleted the Lease of a member gone for a while"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(error) => warn!(member = %name, %error, "deleting a dead member's Lease failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_name_should_be_a_valid_lease_name_under_the_ring_prefix() {
        let ring = Ring::new(
            "reconhost-system",
            "reconhost",
            "Pod_A.1_0a1b2c3d",
            Timings::default(),
        );
        assert_eq!(ring.member, "reconhost-pod-a-1-0a1b2c3d");
        assert!(ring.member.starts_with(&ring.prefix()));
    }

    #[test]
    fn the_fence_should_pass_writes_only_until_its_deadline() {
        let fence = Fence::default();
        assert!(!fence.is_open(), "closed until the first renewal");
        fence.open_until(Instant::now() + Duration::from_secs(10));
        assert!(fence.is_open());
        fence.open_until(Instant::now() - Duration::from_millis(1));
        assert!(!fence.is_open(), "past the deadline");
        fence.open_until(Instant::now() + Duration::from_secs(10));
        fence.close();
        assert!(!fence.is_open());
    }
}
