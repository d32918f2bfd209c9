//! How this replica shares the parents with others: alone (it reconciles every parent), as a
//! candidate in leader election (all or nothing), or as a member of a sharding ring (its
//! share). Each mode decides what the replica owns at first, which Leases are the host's own,
//! whether writes pass a fence, and which task keeps the answer up to date.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use crate::cli::RunArgs;
use crate::controller::context::HostLeases;
use crate::controller::route::Assignment;
use crate::controller::workers::Stop;
use crate::leader::{self, Election, Timings};
use crate::shard::{Fence, Ring};
use crate::supervisor::{self, Supervisor};

/// Where a pod finds its own namespace.
pub const SERVICE_ACCOUNT_NAMESPACE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// How this replica shares the parents.
pub enum Replication {
    /// No other replica: every parent, and the host's own writes.
    Alone,
    /// `--leader-elect`: every parent while leading, none otherwise.
    Elected(Election),
    /// `--sharding`: the parents the ring gives this member; writes pass `Fence`.
    Sharded(Ring, Fence),
}

impl Replication {
    /// The mode the arguments ask for.
    pub fn of(args: &RunArgs) -> anyhow::Result<Self> {
        let timings = Timings::new(
            args.leader_elect_lease_duration,
            args.leader_elect_renew_deadline,
            args.leader_elect_retry_period,
        )
        .map_err(|e| anyhow::anyhow!("--leader-elect-*: {e}"))?;
        let namespace = || {
            match &args.leader_election_namespace {
            Some(ns) => Ok(ns.clone()),
            None => std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
                .map(|ns| ns.trim().to_owned())
                .context(
                    "--leader-elect and --sharding need --leader-election-namespace outside a cluster",
                ),
        }
        };
        Ok(if args.sharding {
            let ring = Ring::new(
                &namespace()?,
                &args.sharding_ring,
                &leader::identity(),
                timings,
            );
            Self::Sharded(ring, Fence::default())
        } else if args.leader_elect {
            Self::Elected(Election {
                namespace: namespace()?,
                name: args.leader_election_id.clone(),
                identity: leader::identity(),
                timings,
            })
        } else {
            Self::Alone
        })
    }

    /// The fence the host's client must hold writes at, with sharding.
    pub fn fence(&self) -> Option<Fence> {
        match self {
            Self::Sharded(_, fence) => Some(fence.clone()),
            _ => None,
        }
    }

    /// The host's own Leases, which no plugin may write.
    pub fn leases(&self) -> Option<HostLeases> {
        match self {
            Self::Alone => None,
            Self::Elected(election) => Some(HostLeases {
                namespace: election.namespace.clone(),
                name: election.name.clone(),
                prefix: false,
            }),
            Self::Sharded(ring, _) => Some(HostLeases {
                namespace: ring.namespace.clone(),
                name: ring.prefix(),
                prefix: true,
            }),
        }
    }

    /// Whether the replica does the host's own writes, and the parents it owns, before its
    /// task has said otherwise.
    pub fn at_start(&self) -> (bool, Assignment) {
        match self {
            Self::Alone => (true, Assignment::All),
            _ => (false, Assignment::Nothing),
        }
    }

    /// Starts the task that keeps `supervisor` and `leading` up to date, until `stop`. The
    /// ring's Lease writes go through `lease_client`, which has no fence; a ring member joins
    /// once `ready` (what `/readyz` says) is true.
    pub fn start(
        self,
        client: kube::Client,
        lease_client: kube::Client,
        supervisor: &Arc<Supervisor>,
        leading: watch::Sender<bool>,
        ready: watch::Receiver<bool>,
        stop: Stop,
    ) -> Option<JoinHandle<()>> {
        match self {
            Self::Alone => {
                // The sender is kept so the value never ends.
                std::mem::forget(leading);
                None
            }
            Self::Elected(election) => {
                info!(lease = %format!("{}/{}", election.namespace, election.name),
                      identity = %election.identity, "leader election: reconciling only while leading");
                tokio::spawn(supervisor::follow_leadership(
                    Arc::downgrade(supervisor),
                    leading.subscribe(),
                ));
                Some(tokio::spawn(leader::run(client, election, leading, stop)))
            }
            Self::Sharded(ring, fence) => Some(tokio::spawn(crate::shard::run(
                lease_client,
                ring,
                supervisor.clone(),
                leading,
                ready,
                fence,
                stop,
            ))),
        }
    }
}
