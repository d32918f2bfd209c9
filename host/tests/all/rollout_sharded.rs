//! A progressive rollout under two sharded replicas. Each member calls the candidate for its
//! own share of the parents only, and one of them (the lifecycle's owner) judges the rollout:
//! it must count every member's calls, or a step that waits to see each of its parents called
//! would wait for ever on the other member's half.

use reconhost_tests::host::Host;
use reconhost_tests::support::eventually;
use serde_json::json;

use crate::common::plugins::{digest_of, exclusive};
use crate::common::{CONVERGE, World, plugin};
use crate::rollout::{CANARY_RP, RolloutWorld, served, short};

/// The canaries of this suite.
const PARENTS: usize = 200;

/// A member of the ring `rollout` named `name`, logging at the default level (at debug, the
/// innermost span of a plugin's log line is its call's, where [`served`] looks for the
/// reconcile's).
async fn member(world: &World, name: &str) -> Host {
    let namespace = format!("--leader-election-namespace={}", world.namespace);
    let args = ["--sharding", namespace.as_str(), "--sharding-ring=rollout"];
    world.host_with(&[], &[("HOSTNAME", name)], &args).await
}

#[tokio::test]
async fn a_rollout_under_sharding_should_be_judged_on_every_members_calls() {
    let world = World::new("rollout-shard").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    for component in ["rollout-v1", "rollout-good"] {
        world.plugin_config_map(component, &plugin(component)).await;
    }
    let members = [
        member(&world, "replica-a").await,
        member(&world, "replica-b").await,
    ];
    world
        .apply_plugin(&world.canary_plugin("rollout-v1", json!([{"shadow": true}])))
        .await;
    world.plugin_ready(CANARY_RP).await;
    world.create_canaries(PARENTS).await;
    let v1 = short("rollout-v1");
    eventually(
        CONVERGE * 3,
        "every canary served, by both members",
        || async {
            let served: Vec<_> = members.iter().map(served).collect();
            let total: usize = served.iter().map(|s| s.len()).sum();
            (served.iter().all(|s| !s.is_empty()) && total >= PARENTS).then_some(())
        },
    )
    .await;

    // Shadow must compare every parent, a share step must see each parent it took called: on
    // either member alone, about half.
    let steps = json!([
        {"shadow": true, "analysis": "2s"},
        {"percent": 50, "analysis": "2s"},
        {"percent": 100, "analysis": "1s"},
    ]);
    world
        .apply_plugin(&world.canary_plugin("rollout-good", steps))
        .await;
    let rp = world.rollout_phase("Promoted", CONVERGE * 3).await;
    let status = &rp["status"];
    assert_eq!(
        status["activeDigest"],
        digest_of(&plugin("rollout-good")).as_str()
    );
    let shadow = &status["rollout"]["shadow"];
    assert!(
        shadow["compared"].as_u64() >= Some(PARENTS as u64) && shadow["diverged"] == 0,
        "every parent compared in shadow across the members, none differed: {shadow}"
    );
    // Each member served its own parents with the candidate: neither did all the work.
    let good = short("rollout-good");
    let on_good: Vec<usize> = members
        .iter()
        .map(|m| served(m).values().filter(|d| d.contains(&good)).count())
        .collect();
    assert!(
        on_good.iter().all(|n| (1..PARENTS).contains(n)),
        "each member served a share with the candidate: {on_good:?}"
    );
    assert!(
        members.iter().all(|m| served(m)
            .values()
            .all(|d| d.iter().all(|x| *x == v1 || *x == good))),
        "only the two revisions served"
    );
    world.uninstall(CANARY_RP).await;
}
