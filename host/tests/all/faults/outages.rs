//! Something the host depends on goes away and comes back: etcd, kube-apiserver, the host
//! itself, the leader among its replicas; and the watch history it would resume from.

use std::time::{Duration, Instant};

use reconhost_tests::support::eventually;
use reconhost_tests::{Stop, TestCluster};

use super::common::load::{self, Churn};
use super::common::{self, World, get};
use super::{PARENTS, RECOVER, logged, private_plane, recovered, under_load};

#[tokio::test]
async fn etcd_killed_and_restarted_on_its_data() {
    let (mut plane, world, mut host) = under_load("etcd", &[]).await;
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Down longer than the churn waits for one write: the API server holds writes while its
    // storage is gone, and some give up.
    plane
        .restart_etcd(Stop::Kill, Duration::from_secs(8))
        .await
        .expect("restarting etcd");
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (accepted, refused) = churn.stop().await;
    assert!(accepted > 0, "specs changed around the fault");
    assert!(
        refused > 0,
        "the fault held writes up ({accepted} accepted)"
    );
    recovered("etcd-kill", &world, &mut host, back).await;
}

#[tokio::test]
async fn api_server_killed_and_restarted() {
    let (mut plane, world, mut host) = under_load("apiserver", &[]).await;
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    plane
        .restart_api_server_after(Stop::Kill, Duration::from_secs(3), |_| {})
        .await
        .expect("restarting kube-apiserver");
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (accepted, refused) = churn.stop().await;
    assert!(
        accepted > 0 && refused > 0,
        "specs changed around the fault"
    );
    recovered("apiserver-kill", &world, &mut host, back).await;
    assert!(
        logged(&host, "watch failed; retrying with backoff"),
        "the kill cut the host's watches (see {})",
        host.log_file().display()
    );
}

#[tokio::test]
async fn watch_history_compacted_while_the_host_is_disconnected() {
    let (mut plane, world, mut host) = under_load("compaction", &[]).await;
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // While the API server is down, etcd forgets every revision the host's watches could
    // resume from: their resourceVersions are all older than the compaction.
    let mut compacted = None;
    plane
        .restart_api_server_after(Stop::Graceful, Duration::from_secs(1), |plane| {
            compacted = Some(plane.compact_etcd().expect("compacting etcd"));
        })
        .await
        .expect("restarting kube-apiserver");
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    churn.stop().await;
    recovered("compaction", &world, &mut host, back).await;
    assert!(compacted.is_some_and(|revision| revision > 1));
    assert!(
        logged(&host, "relisted"),
        "a watch that could not resume relisted (see {})",
        host.log_file().display()
    );
}

#[tokio::test]
async fn host_killed_in_a_burst_of_applies_and_restarted() {
    let plane = private_plane("hostkill", Vec::new()).await;
    let world = World::on(TestCluster::at(plane.kubeconfig()), "hostkill").await;
    let host = world.host(&load::PLUGINS, &[]).await;
    // The burst: every parent created at once, the host killed once some of its children
    // exist and before all do.
    load::create(&world, PARENTS).await;
    eventually(common::CONVERGE, "a third of the Deployments", || async {
        let n = world
            .deployments()
            .list(&Default::default())
            .await
            .ok()?
            .items
            .len();
        (n >= PARENTS / 3).then_some(())
    })
    .await;
    let made = world
        .deployments()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    host.kill();
    let killed = Instant::now();
    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    churn.stop().await;
    let mut host = world.host(&load::PLUGINS, &[]).await;
    recovered("host-kill", &world, &mut host, killed).await;
    assert!(
        made < PARENTS,
        "killed mid-burst ({made} of {PARENTS} Deployments made)"
    );
    drop(plane);
}

#[tokio::test]
async fn leader_killed_under_load_and_the_follower_takes_over() {
    const LEASE: &str = "reconhost-faults";
    let plane = private_plane("leader", Vec::new()).await;
    let world = World::on(TestCluster::at(plane.kubeconfig()), "leader").await;
    let lease_ns = format!("--leader-election-namespace={}", world.namespace);
    let lease_id = format!("--leader-election-id={LEASE}");
    let replica = |name: &'static str| {
        let (world, lease_ns, lease_id) = (&world, lease_ns.clone(), lease_id.clone());
        async move {
            world
                .host_with(
                    &load::PLUGINS,
                    &[("HOSTNAME", name)],
                    &["--leader-elect", &lease_ns, &lease_id],
                )
                .await
        }
    };
    let a = replica("replica-a").await;
    let b = replica("replica-b").await;
    let leases = world.api("coordination.k8s.io", "v1", "Lease", "leases");
    let holder = || async {
        let lease = get(&leases, LEASE).await?;
        let holder = lease["spec"]["holderIdentity"].as_str()?;
        Some(holder.split('_').next()?.to_owned())
    };
    let first = eventually(common::CONVERGE, "a leader", holder).await;
    load::create(&world, PARENTS).await;
    load::wait_converged(&world, RECOVER, a.log_file()).await;
    let (leader, mut follower, next) = if first == "replica-a" {
        (a, b, "replica-b")
    } else {
        (b, a, "replica-a")
    };

    let churn = Churn::start(&world, PARENTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    leader.kill();
    let killed = Instant::now();
    // The lease (15 s) runs out with specs still changing.
    eventually(RECOVER, "the follower to lead", || async {
        (holder().await.as_deref() == Some(next)).then_some(())
    })
    .await;
    churn.stop().await;
    recovered("leader-failover", &world, &mut follower, killed).await;

    // Never two writers at once: the old leader's last write comes before the new one's first.
    let writes_by = |replica: &str| -> Vec<String> {
        let marker = format!("({replica})");
        world
            .cluster
            .audit_log()
            .events_in(&world.namespace)
            .expect("the audit log")
            .into_iter()
            .filter(|e| e.by_reconhost() && e.user_agent.ends_with(&marker))
            .map(|e| e.stage_timestamp)
            .collect()
    };
    let (old, new) = (writes_by(&first), writes_by(next));
    let (last_old, first_new) = (old.iter().max(), new.iter().min());
    assert!(
        last_old.is_some() && first_new.is_some() && last_old < first_new,
        "the replicas' writes overlap: the old leader's last at {last_old:?}, the new one's first at {first_new:?}"
    );
}
