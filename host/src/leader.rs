//! Leader election on a `coordination.k8s.io/v1` Lease, with controller-runtime's semantics and
//! timings (lease 15 s, renew deadline 10 s, retry 2 s), so that of several replicas exactly one
//! reconciles while all keep their caches warm and their plugins compiled.
//!
//! - A candidate tries every retry period. It takes the lease when nobody holds it, or when the
//!   holder's record has not changed for a whole lease duration *as this replica observed it*
//!   (client-go's rule: local clocks are compared only with themselves, so clock skew between
//!   nodes does not matter).
//! - The leader renews every retry period. If it has not renewed successfully within the renew
//!   deadline it stops leading at once, before its lease can expire for the others (10 s < 15 s).
//! - On shutdown the leader releases the lease (holder cleared, duration 1 s), so the next
//!   replica takes over within a retry period instead of a lease duration.
//!
//! Every write is an update with the observed resourceVersion: two candidates racing for the
//! lease cannot both win.
//!
//! kube-lease-manager (the crate the issue names) was read and not used: a candidate there
//! sleeps until the holder's lease expires, so a released lease is taken over only after the
//! full duration, and a leader that cannot renew keeps leading until it learns otherwise.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::controller::workers::Stop;

/// A Lease's timings (controller-runtime's defaults: 15 s, 10 s, 2 s), also the sharding ring's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How long a Lease lasts without renewal.
    pub lease: Duration,
    /// How long a holder may go without a successful renewal before it stops reconciling.
    pub renew: Duration,
    /// How often candidates try and holders renew.
    pub retry: Duration,
}

impl Timings {
    /// The timings, if they keep client-go's order: the renew deadline ends before the lease
    /// can expire for the others, and a renewal (with its jitter) fits in the deadline.
    pub fn new(lease: Duration, renew: Duration, retry: Duration) -> Result<Self, String> {
        if renew >= lease {
            return Err(format!(
                "the renew deadline ({renew:?}) must be shorter than the lease duration ({lease:?})"
            ));
        }
        if retry.mul_f64(1.2) >= renew || retry.is_zero() {
            return Err(format!(
                "the retry period ({retry:?}, with 20 % jitter) must be positive and shorter than the renew deadline ({renew:?})"
            ));
        }
        Ok(Self {
            lease,
            renew,
            retry,
        })
    }
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(15),
            renew: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// Where the lease is and who this replica is.
#[derive(Debug, Clone)]
pub struct Election {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name (`--leader-election-id`).
    pub name: String,
    /// This replica's identity: its host name and a random suffix.
    pub identity: String,
    /// The Lease's timings.
    pub timings: Timings,
}

/// What this replica last saw of the lease, and when it saw it change.
struct Observed {
    record: (Option<String>, Option<String>, i32),
    at: Instant,
}

/// Runs the election until `stop`, publishing whether this replica leads on `leading`. On
/// `stop` a leader releases the lease.
pub async fn run(
    client: kube::Client,
    election: Election,
    leading: watch::Sender<bool>,
    mut stop: Stop,
) {
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let mut observed: Option<Observed> = None;
    let mut renewed: Option<Instant> = None;
    loop {
        let is_leader = *leading.borrow();
        match try_acquire_or_renew(&api, &election, &mut observed).await {
            Ok(true) => {
                renewed = Some(Instant::now());
                if !is_leader {
                    info!(lease = %election.name, identity = %election.identity, "became the leader");
                    leading.send_replace(true);
                }
            }
            Ok(false) => {
                if is_leader {
                    warn!(lease = %election.name, "another replica holds the lease; no longer the leader");
                    leading.send_replace(false);
                }
            }
            Err(error) => {
                warn!(lease = %election.name, %error, "leader election request failed");
                if is_leader && renewed.is_none_or(|t| t.elapsed() >= election.timings.renew) {
                    warn!(lease = %election.name, "could not renew within the renew deadline; no longer the leader");
                    leading.send_replace(false);
                }
            }
        }
        tokio::select! {
            () = stop.stopped() => break,
            () = tokio::time::sleep(jittered(election.timings.retry)) => {}
        }
    }
    if *leading.borrow() {
        leading.send_replace(false);
        match release(&api, &election).await {
            Ok(()) => info!(lease = %election.name, "released the lease"),
            Err(error) => {
                warn!(lease = %election.name, %error, "releasing the lease failed; it expires in its own time")
            }
        }
    }
}

/// One round of client-go's `tryAcquireOrRenew`: whether this replica holds the lease now.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    election: &Election,
    observed: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    let now = MicroTime(jiff::Timestamp::now());
    let Some(mut lease) = api.get_opt(&election.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(election.name.clone()),
                namespace: Some(election.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(election.identity.clone()),
                lease_duration_seconds: Some(election.timings.lease.as_secs() as i32),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let record = (
        spec.holder_identity.clone(),
        spec.renew_time.as_ref().map(|t| t.0.to_string()),
        spec.lease_transitions.unwrap_or(0),
    );
    if observed.as_ref().is_none_or(|o| o.record != record) {
        *observed = Some(Observed {
            record,
            at: Instant::now(),
        });
    }
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let ours = holder.as_deref() == Some(election.identity.as_str());
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
    let expired = observed
        .as_ref()
        .is_some_and(|o| o.at.elapsed() >= duration);
    if holder.is_some() && !ours && !expired {
        return Ok(false);
    }
    let mut next = spec;
    if !ours {
        next.acquire_time = Some(now.clone());
        next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
        next.holder_identity = Some(election.identity.clone());
    }
    next.renew_time = Some(now);
    next.lease_duration_seconds = Some(election.timings.lease.as_secs() as i32);
    lease.spec = Some(next);
    // `replace` sends the resourceVersion read above: a concurrent change is a 409.
    match api
        .replace(&election.name, &PostParams::default(), &lease)
        .await
    {
        Ok(written) => {
            let spec = written.spec.unwrap_or_default();
            *observed = Some(Observed {
                record: (
                    spec.holder_identity,
                    spec.renew_time.map(|t| t.0.to_string()),
                    spec.lease_transitions.unwrap_or(0),
                ),
                at: Instant::now(),
            });
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the lease up: no holder, and a duration of 1 s, as client-go's `ReleaseOnCancel` does.
async fn release(api: &Api<Lease>, election: &Election) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&election.name).await? else {
        return Ok(());
    };
    let mut spec = lease.spec.clone().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(election.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
    lease.spec = Some(spec);
    api.replace(&election.name, &PostParams::default(), &lease)
        .await
        .map(|_| ())
}

/// `period` stretched by up to 20 % (client-go's JitterFactor 1.2), so candidates started
/// together do not knock at the same moment.
pub fn jittered(period: Duration) -> Duration {
    use std::hash::BuildHasher as _;
    let random = std::collections::hash_map::RandomState::new().hash_one(());
    let fraction = (random >> 11) as f64 / (1u64 << 53) as f64;
    period.mul_f64(1.0 + 0.2 * fraction)
}

/// An identity for this replica: the host name (the pod name, in a cluster) and a random
/// suffix, so a restarted pod is a new candidate.
pub fn identity() -> String {
    use std::hash::BuildHasher as _;
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "reconhost".to_owned());
    let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    format!("{host}_{:08x}", random as u32)
}
