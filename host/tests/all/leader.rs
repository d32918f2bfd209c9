//! Several replicas of the host on the real control plane with `--leader-elect`: exactly one
//! reconciles; when it is killed the next takes over within the lease duration and every
//! parent converges, with no moment in which two replicas wrote; when it stops gracefully it
//! releases the lease and the next takes over within a few seconds.

use crate::common;

use std::time::{Duration, Instant};

use common::{CONVERGE, World, reconciles, synced};
use kube::api::{Patch, PatchParams};
use reconhost_tests::host::Host;
use reconhost_tests::support::eventually;
use serde_json::json;

const LEASE: &str = "reconhost-leader-test";

/// The leader-election suite's steps: host replicas, the lease's holder, each replica's writes.
trait LeaderWorld {
    async fn replica(&self, name: &str) -> Host;

    /// The replica (host name) holding the lease.
    async fn leader(&self) -> Option<String>;

    /// The times of the writes each replica made in this namespace.
    fn writes_by(&self, replica: &str) -> Vec<String>;
}

impl LeaderWorld for World {
    async fn replica(&self, name: &str) -> Host {
        let lease_ns = format!("--leader-election-namespace={}", self.namespace);
        let lease_id = format!("--leader-election-id={LEASE}");
        self.host_with(
            &["webapp"],
            &[("HOSTNAME", name)],
            &["--leader-elect", &lease_ns, &lease_id],
        )
        .await
    }

    async fn leader(&self) -> Option<String> {
        let api = self.api("coordination.k8s.io", "v1", "Lease", "leases");
        let lease = common::get(&api, LEASE).await?;
        let holder = lease["spec"]["holderIdentity"].as_str()?;
        Some(holder.split('_').next()?.to_owned())
    }

    fn writes_by(&self, replica: &str) -> Vec<String> {
        let marker = format!("({replica})");
        self.cluster
            .audit_log()
            .events_in(&self.namespace)
            .expect("the audit log")
            .into_iter()
            .filter(|e| e.user_agent.starts_with("reconhost/") && e.user_agent.ends_with(&marker))
            .map(|e| e.stage_timestamp)
            .collect()
    }
}

#[tokio::test]
async fn one_replica_should_reconcile_and_hand_over_when_it_goes() {
    let world = World::new("leader").await;
    let a = world.replica("replica-a").await;
    let b = world.replica("replica-b").await;
    // Both are ready: readiness does not wait for leadership.
    let first = eventually(CONVERGE, "a leader", || world.leader()).await;
    for i in 0..10 {
        world.create_webapp(&format!("w{i}"), "nginx:1.27", 1).await;
    }
    for i in 0..10 {
        synced(&world.webapps(), &format!("w{i}")).await;
    }
    let (leader, follower, follower_name) = if first == "replica-a" {
        (a, b, "replica-b")
    } else {
        (b, a, "replica-a")
    };
    assert!(reconciles(&leader, "webapp").await >= 10.0);
    assert_eq!(
        reconciles(&follower, "webapp").await,
        0.0,
        "the follower keeps its caches warm and does not reconcile"
    );

    // kill -9: no release; the follower waits out the lease and takes over.
    leader.kill();
    let killed = Instant::now();
    world.create_webapp("after-kill", "nginx:1.27", 2).await;
    world
        .webapps()
        .patch(
            "w0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    synced(&world.webapps(), "after-kill").await;
    eventually(CONVERGE, "w0 scaled by the new leader", || async {
        let d = common::get(&world.deployments(), "w0").await?;
        (d["spec"]["replicas"] == 3).then_some(())
    })
    .await;
    assert_eq!(world.leader().await.as_deref(), Some(follower_name));
    assert!(
        killed.elapsed() < Duration::from_secs(15 + 2 + 30),
        "took over within the lease duration (plus a retry and time to reconcile): {:?}",
        killed.elapsed()
    );
    let old = world.writes_by(&first);
    let new = world.writes_by(follower_name);
    assert!(
        !old.is_empty() && !new.is_empty(),
        "both replicas wrote in turn"
    );
    let (last_old, first_new) = (old.iter().max().unwrap(), new.iter().min().unwrap());
    assert!(
        last_old < first_new,
        "the replicas' writes overlap: the old leader's last at {last_old}, the new one's first at {first_new}"
    );

    // A graceful stop releases the lease: the next replica takes over within a few seconds.
    let c = world.replica("replica-c").await;
    let stopping = Instant::now();
    follower.stop(Duration::from_secs(20));
    let stopped = stopping.elapsed();
    eventually(CONVERGE, "replica-c to lead", || async {
        (world.leader().await.as_deref() == Some("replica-c")).then_some(())
    })
    .await;
    let handover = stopping.elapsed() - stopped;
    assert!(
        handover < Duration::from_secs(8),
        "the released lease was taken in {handover:?}, not after a lease duration"
    );
    world.create_webapp("after-stop", "nginx:1.27", 1).await;
    synced(&world.webapps(), "after-stop").await;
    assert!(reconciles(&c, "webapp").await >= 1.0);
}
