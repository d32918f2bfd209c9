//! Progressive rollouts (`spec.rollout.strategy: Progressive`) on the real control plane: a good
//! candidate goes from shadow to every parent without help; one that plans other children for
//! some parents is stopped in shadow without a single write; one that fails everywhere is
//! rolled back long before its step's window ends; a host restarted mid-rollout takes it up
//! where it was; a person promotes with the CLI; an uninstall mid-rollout releases everything.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use reconhost_tests::host::{Host, sample};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

use crate::common;
use crate::grants::{reconhost, text};
use common::plugins::{digest_of, exclusive, reconcile_plugins};
use common::{CONVERGE, World, get, plugin};

const CANARY: [&str; 2] = ["test.reconhost.dev/v1", "Canary"];
pub(crate) const CANARY_RP: &str = "canary.test.reconhost.dev";

/// The rollout suite's steps: Canaries, their progressive plugin, a v1 host, the rollout phase.
pub(crate) trait RolloutWorld {
    fn canaries(&self) -> Api<DynamicObject>;

    /// Canaries `c0000..`, `spec.value` their number, created 16 at a time.
    async fn create_canaries(&self, count: usize);

    /// The ReconcilePlugin for Canary from ConfigMap `component` (as `plugin_config_map` made
    /// it), progressive through `steps`.
    fn canary_plugin(&self, component: &str, steps: Value) -> Value;

    /// A host serving `rollout-v1` for `count` canaries, every child written.
    async fn serving_v1(&self, count: usize, candidates: &[&str]) -> Host;

    /// Waits (up to `within`) for the ReconcilePlugin's rollout to reach `phase`; returns it.
    async fn rollout_phase(&self, phase: &str, within: Duration) -> Value;
}

impl RolloutWorld for World {
    fn canaries(&self) -> Api<DynamicObject> {
        self.api("test.reconhost.dev", "v1", "Canary", "canaries")
    }

    async fn create_canaries(&self, count: usize) {
        let api = self.canaries();
        futures::stream::iter(0..count)
            .for_each_concurrent(16, |i| {
                let api = api.clone();
                async move {
                    let object: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "test.reconhost.dev/v1", "kind": "Canary",
                        "metadata": {"name": format!("c{i:04}")}, "spec": {"value": i}}))
                    .expect("a Canary");
                    api.create(&Default::default(), &object)
                        .await
                        .unwrap_or_else(|e| panic!("creating canary {i}: {e}"));
                }
            })
            .await;
    }

    fn canary_plugin(&self, component: &str, steps: Value) -> Value {
        let mut rp = self.reconcile_plugin(
            CANARY_RP,
            CANARY,
            &digest_of(&plugin(component)),
            self.config_map_source(component),
        );
        rp["spec"]["rollout"] = json!({"strategy": "Progressive", "steps": steps});
        rp
    }

    async fn serving_v1(&self, count: usize, candidates: &[&str]) -> Host {
        self.service_account("plugin").await;
        for component in std::iter::once(&"rollout-v1").chain(candidates) {
            self.plugin_config_map(component, &plugin(component)).await;
        }
        let host = self.host(&[], &[]).await;
        self.apply_plugin(&self.canary_plugin("rollout-v1", json!([{"shadow": true}])))
            .await;
        self.plugin_ready(CANARY_RP).await;
        self.create_canaries(count).await;
        eventually(CONVERGE * 3, "every canary's child written", || async {
            let children = self.config_maps().list(&Default::default()).await.ok()?;
            let written = children
                .items
                .iter()
                .filter(|c| {
                    c.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.ends_with("-canary"))
                })
                .count();
            (written == count).then_some(())
        })
        .await;
        host
    }

    async fn rollout_phase(&self, phase: &str, within: Duration) -> Value {
        let api = reconcile_plugins(&self.client);
        eventually(within, &format!("the rollout {phase}"), || async {
            let rp = get(&api, CANARY_RP).await?;
            (rp["status"]["rollout"]["phase"] == phase).then_some(rp)
        })
        .await
    }
}

/// The first 12 hex digits of a component's digest, as the host logs and names it.
pub(crate) fn short(component: &str) -> String {
    digest_of(&plugin(component))["sha256:".len()..]
        .chars()
        .take(12)
        .collect()
}

/// The calls that served a parent (shadow calls left out) as (time, parent, digest), in order,
/// from the host's log: the plugin logs `served` inside every call, the host adds the parent and
/// the revision's digest.
fn calls(host: &Host) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = host
        .logs()
        .into_iter()
        .filter(|l| l["message"] == "served" && l["span"]["name"] == "reconcile")
        .map(|l| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
            (
                s(&l["timestamp"]),
                s(&l["span"]["parent"]),
                s(&l["span"]["digest"]),
            )
        })
        .collect();
    calls.sort();
    calls
}

/// Per parent, the digests of the calls that served it, in order.
pub(crate) fn served(host: &Host) -> BTreeMap<String, Vec<String>> {
    let mut by_parent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, parent, digest) in calls(host) {
        by_parent.entry(parent).or_default().push(digest);
    }
    by_parent
}

/// Asserts that no parent went back to `from` once `to` served it: a parent moves once, and is
/// never served by both.
fn moved_once(served: &BTreeMap<String, Vec<String>>, from: &str, to: &str) {
    for (parent, digests) in served {
        if let Some(first) = digests.iter().position(|d| d == to) {
            assert!(
                digests[first..].iter().all(|d| d != from),
                "{parent} went back from {to} to {from}: {digests:?}"
            );
        }
    }
}

/// Asserts that no parent the candidate served and then gave back to stable was served by the
/// candidate again: a rollback is for good.
fn moved_back(served: &BTreeMap<String, Vec<String>>, candidate: &str, stable: &str) {
    for (parent, digests) in served {
        let Some(first) = digests.iter().position(|d| d == candidate) else {
            continue;
        };
        if let Some(back) = digests[first..].iter().position(|d| d == stable) {
            assert!(
                digests[first + back..].iter().all(|d| d != candidate),
                "{parent} served by the candidate after it was rolled back: {digests:?}"
            );
        }
    }
}

/// Where the host's route puts a parent with `uid` among all parents, from 0 to 9,999: the
/// first eight bytes of the SHA-256 of the UID (a share of p % holds those below p × 100).
fn share_position(uid: &str) -> u64 {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(uid.as_bytes());
    u64::from_be_bytes(digest[..8].try_into().expect("eight bytes")) % 10_000
}

/// The host's writes in `world`'s namespace made for the revision with digest prefix `short`
/// (its requests name it in their User-Agent), as `verb URI`.
fn writes_by(world: &World, short: &str) -> Vec<String> {
    let revision = format!("plugin/canary@{short}");
    world
        .cluster
        .audit_log()
        .events_in(&world.namespace)
        .expect("reading the audit log")
        .into_iter()
        .filter(|e| e.user_agent.contains(&revision))
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect()
}

#[tokio::test]
async fn a_good_candidate_should_go_from_shadow_to_every_parent_without_help() {
    let world = World::new("rollout-good").await;
    let _suite = exclusive(&world.client).await;
    let host = world.serving_v1(1000, &["rollout-good"]).await;
    let steps = json!([
        {"shadow": true, "analysis": "3s"},
        {"percent": 10, "analysis": "3s"},
        {"percent": 50, "analysis": "3s"},
        {"percent": 100, "analysis": "1s"},
    ]);
    world
        .apply_plugin(&world.canary_plugin("rollout-good", steps))
        .await;
    // Specs keep changing through the rollout, so both revisions write.
    let api = world.canaries();
    let writer = tokio::spawn(async move {
        for n in 0..400 {
            let name = format!("c{:04}", (n * 7) % 1000);
            let patch = Patch::Merge(json!({"spec": {"value": 10_000 + n}}));
            let _ = api.patch(&name, &PatchParams::default(), &patch).await;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    });
    let rp = world.rollout_phase("Promoted", CONVERGE * 3).await;
    writer.await.expect("the spec writer");
    let (good, v1) = (short("rollout-good"), short("rollout-v1"));
    let status = &rp["status"];
    assert_eq!(
        status["activeDigest"],
        digest_of(&plugin("rollout-good")).as_str()
    );
    let shadow = &status["rollout"]["shadow"];
    assert!(
        shadow["compared"].as_u64() >= Some(1000) && shadow["diverged"] == 0,
        "every parent compared in shadow, none differed: {shadow}"
    );
    assert_eq!(status["rollout"]["stage"], "done");
    assert_eq!(status["revisions"][0]["role"], "stable");

    // Every parent is reconciled once by the new code when it moves, and none goes back.
    eventually(CONVERGE, "every parent served by the candidate", || async {
        let served = served(&host);
        let on_good = served.values().filter(|d| d.last() == Some(&good)).count();
        (on_good == 1000).then_some(())
    })
    .await;
    let served = served(&host);
    moved_once(&served, &v1, &good);
    // Before its last step (to 100 %; the host logs a step before it moves the parents), the
    // candidate served only parents of its 50 % share, and not only those of its 10 % share.
    // (How many of them it reached in the step's 3 s depends on the machine; which ones does
    // not.)
    let last_step = host
        .logs()
        .into_iter()
        .find(|l| l["message"] == "rollout step" && l["stage"] == "100%")
        .and_then(|l| l["timestamp"].as_str().map(str::to_owned))
        .expect("the host logs each step");
    let early: std::collections::HashSet<String> = calls(&host)
        .into_iter()
        .filter(|(at, _, digest)| *at < last_step && *digest == good)
        .map(|(_, parent, _)| parent)
        .collect();
    let positions: HashMap<String, u64> = world
        .canaries()
        .list(&Default::default())
        .await
        .expect("listing the parents")
        .into_iter()
        .map(|c| {
            let uid = c.metadata.uid.unwrap_or_default();
            (c.metadata.name.unwrap_or_default(), share_position(&uid))
        })
        .collect();
    let outside: Vec<&String> = early
        .iter()
        .filter(|p| positions.get(p.rsplit('/').next().unwrap_or(p)) >= Some(&5_000))
        .collect();
    assert!(
        outside.is_empty(),
        "the candidate served parents outside its 50 % share before its last step: {outside:?}"
    );
    assert!(
        early.iter().any(|p| {
            let position = positions.get(p.rsplit('/').next().unwrap_or(p));
            position.is_some_and(|at| (1_000..5_000).contains(at))
        }),
        "the 50 % step moved parents beyond the 10 % share: {} served early",
        early.len()
    );

    // The audit log tells the revisions apart, and no object is written by the stable revision
    // after the candidate wrote it.
    let events = world
        .cluster
        .audit_log()
        .events_in(&world.namespace)
        .expect("the audit log");
    let mut last_writer: HashMap<String, &str> = HashMap::new();
    for event in &events {
        let Some(object) = &event.object_ref else {
            continue;
        };
        let key = format!("{}/{}", object.resource, object.name);
        let revision = if event.user_agent.contains(&format!("plugin/canary@{good}")) {
            "good"
        } else if event.user_agent.contains(&format!("plugin/canary@{v1}")) {
            "v1"
        } else {
            continue;
        };
        let before = last_writer.insert(key.clone(), revision);
        assert!(
            !(before == Some("good") && revision == "v1"),
            "{key} written by the stable revision after the candidate"
        );
    }
    assert!(!writes_by(&world, &good).is_empty(), "the candidate wrote");
    let metrics = host.metrics().await.expect("metrics");
    assert_eq!(
        sample(
            &metrics,
            "reconhost_rollout_transitions_total",
            &[("plugin", "canary"), ("result", "promoted")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "reconhost_rollout_transitions_total",
            &[("plugin", "canary"), ("result", "step")]
        ),
        Some(3.0),
        "shadow → 10 % → 50 % → 100 %"
    );
    world.uninstall(CANARY_RP).await;
}

#[tokio::test]
async fn a_candidate_that_plans_otherwise_should_stop_in_shadow_without_a_write() {
    let world = World::new("rollout-shadow").await;
    let _suite = exclusive(&world.client).await;
    let host = world.serving_v1(100, &["rollout-differs"]).await;
    let steps = json!([{"shadow": true, "analysis": "10m"}, {"percent": 100}]);
    world
        .apply_plugin(&world.canary_plugin("rollout-differs", steps))
        .await;
    let rp = world.rollout_phase("RolledBack", CONVERGE).await;
    let rollout = &rp["status"]["rollout"];
    let message = rollout["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("rolled back at shadow: divergence:"),
        "{rollout}"
    );
    let differences = rollout["shadow"]["differences"].to_string();
    assert!(
        differences.contains("-canary.data.value: stable \\\"")
            && differences.contains("-changed\\\""),
        "the child, the field and both values: {differences}"
    );
    assert!(rollout["shadow"]["parentsDiverged"].as_u64() >= Some(1));
    assert_eq!(
        rp["status"]["activeDigest"],
        digest_of(&plugin("rollout-v1")).as_str()
    );
    assert!(
        common::plugins::has(&rp, "Progressing", "False", "RolloutRolledBack"),
        "{rp}"
    );
    assert_eq!(
        writes_by(&world, &short("rollout-differs")),
        Vec::<String>::new(),
        "no write was made for the candidate"
    );
    assert!(
        served(&host)
            .values()
            .all(|d| d.iter().all(|x| *x == short("rollout-v1"))),
        "no parent was served by the candidate"
    );
    // A candidate rolled back stays so: the stable revision serves a change, the candidate is
    // not called again.
    world
        .canaries()
        .patch(
            "c0007",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"value": 70}})),
        )
        .await
        .expect("a spec change");
    eventually(
        CONVERGE,
        "the change served by the stable revision",
        || async {
            let child = get(&world.config_maps(), "c0007-canary").await?;
            (child["data"]["value"] == "70").then_some(())
        },
    )
    .await;
    let rp = get(&reconcile_plugins(&world.client), CANARY_RP)
        .await
        .expect("the ReconcilePlugin");
    assert_eq!(rp["status"]["rollout"]["phase"], "RolledBack");
    world.uninstall(CANARY_RP).await;
}

#[tokio::test]
async fn a_failing_candidate_should_reach_at_most_its_first_share_and_be_rolled_back() {
    let world = World::new("rollout-fail").await;
    let _suite = exclusive(&world.client).await;
    let host = world.serving_v1(1000, &["rollout-fails"]).await;
    // The step's window is ten minutes: a rollback within one shows it did not wait for it.
    let steps = json!([{"percent": 10, "analysis": "10m"}, {"percent": 100}]);
    let applied = Instant::now();
    world
        .apply_plugin(&world.canary_plugin("rollout-fails", steps))
        .await;
    let rp = world
        .rollout_phase("RolledBack", Duration::from_secs(60))
        .await;
    assert!(applied.elapsed() < Duration::from_secs(60));
    let message = rp["status"]["rollout"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("rolled back at 10%: failedCalls: candidate 100.0 %")
            && message.contains("threshold 0 points above stable"),
        "the metric, both values and the threshold: {message}"
    );
    let fails = short("rollout-fails");
    let served = served(&host);
    let on_candidate = served.values().filter(|d| d.contains(&fails)).count();
    assert!(
        (1..=150).contains(&on_candidate),
        "the candidate served at most about its 10 % of 1000 parents: {on_candidate}"
    );
    moved_back(&served, &fails, &short("rollout-v1"));
    // Every parent the candidate failed on is served by the stable revision again.
    eventually(CONVERGE, "every canary Synced=True again", || async {
        let list = world.canaries().list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .all(|c| {
                common::condition(&serde_json::to_value(c).unwrap_or_default(), "Synced")
                    .is_some_and(|s| s["status"] == "True")
            })
            .then_some(())
    })
    .await;
    let metrics = host.metrics().await.expect("metrics");
    assert_eq!(
        sample(
            &metrics,
            "reconhost_rollout_transitions_total",
            &[("plugin", "canary"), ("result", "rolled_back")]
        ),
        Some(1.0)
    );
    world.uninstall(CANARY_RP).await;
}

#[tokio::test]
async fn a_rollout_should_survive_a_restart_be_promoted_by_a_person_and_end_with_an_uninstall() {
    let world = World::new("rollout-restart").await;
    let _suite = exclusive(&world.client).await;
    let host = world
        .serving_v1(100, &["rollout-good", "rollout-differs"])
        .await;
    let steps = json!([{"percent": 50, "analysis": "10m"}, {"percent": 100}]);
    world
        .apply_plugin(&world.canary_plugin("rollout-good", steps))
        .await;
    world.rollout_phase("Progressing", CONVERGE).await;
    let (good, v1) = (short("rollout-good"), short("rollout-v1"));
    drop(host);

    // The new host serves the stable revision from the history, and takes the rollout up at
    // its step: the same half of the parents on the candidate, none of the others.
    let host = world.host(&[], &[]).await;
    world
        .plugin_status(CANARY_RP, "the rollout taken up again", |rp| {
            rp["status"]["rollout"]["phase"] == "Progressing"
                && rp["status"]["revisions"][1]["role"] == "candidate"
        })
        .await;
    let (out, err) = text(&reconhost(&world, &["rollout", "status", CANARY_RP]));
    assert!(
        out.contains("rollout: Progressing at 50% (step 1)") && out.contains("revision candidate"),
        "{out}{err}"
    );
    let promoted = reconhost(&world, &["rollout", "promote", CANARY_RP]);
    assert!(promoted.status.success(), "{:?}", text(&promoted));
    let rp = world.rollout_phase("Promoted", CONVERGE).await;
    assert!(
        rp["status"]["rollout"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("promoted by a person")),
        "{rp}"
    );
    eventually(CONVERGE, "every parent served by the candidate", || async {
        let served = served(&host);
        (served.len() == 100 && served.values().all(|d| d.last() == Some(&good))).then_some(())
    })
    .await;
    moved_once(&served(&host), &v1, &good);
    assert_eq!(
        rp["status"]["history"][1]["source"]["digest"],
        digest_of(&plugin("rollout-v1")).as_str(),
        "the stable revision is kept for undo"
    );

    // Undo goes back to the earlier revision at once.
    let undone = reconhost(&world, &["rollout", "undo", CANARY_RP]);
    assert!(undone.status.success(), "{:?}", text(&undone));
    world
        .plugin_status(CANARY_RP, "the earlier digest active again", |rp| {
            rp["status"]["activeDigest"] == digest_of(&plugin("rollout-v1")).as_str()
        })
        .await;

    // A new candidate; another digest pushed in the middle of its rollout replaces it and starts
    // from the first step; then an uninstall in the middle of that one.
    let steps = json!([{"percent": 50, "analysis": "10m"}, {"percent": 100}]);
    world
        .apply_plugin(&world.canary_plugin("rollout-good", steps.clone()))
        .await;
    world.rollout_phase("Progressing", CONVERGE).await;
    world
        .apply_plugin(&world.canary_plugin("rollout-differs", steps))
        .await;
    let differs = digest_of(&plugin("rollout-differs"));
    let rp = world
        .plugin_status(CANARY_RP, "the new candidate at its first step", |rp| {
            let r = &rp["status"]["rollout"];
            r["candidate"] == differs.as_str() && r["phase"] == "Progressing"
        })
        .await;
    assert_eq!(rp["status"]["rollout"]["step"], 0, "{rp}");
    assert_eq!(
        rp["status"]["revisions"][1]["digest"],
        differs.as_str(),
        "the old candidate is gone: {rp}"
    );
    world.uninstall(CANARY_RP).await;
    let metrics = host.metrics().await.expect("metrics");
    assert_eq!(
        sample(&metrics, "reconhost_plugins", &[("state", "ready")]),
        Some(0.0)
    );
}

#[tokio::test]
async fn nonsense_rollout_steps_should_be_refused_by_the_api_server_with_the_reason() {
    let world = World::new("rollout-crd").await;
    let _suite = exclusive(&world.client).await;
    let plugins = reconcile_plugins(&world.client);
    let cases = [
        (
            json!([{"percent": 50}, {"percent": 10}]),
            "each percent is at least the one before",
        ),
        (
            json!([{"percent": 10}, {"shadow": true}]),
            "shadow steps come first",
        ),
        (
            json!([{"shadow": true, "percent": 10}]),
            "a step is either shadow: true or a percent",
        ),
        (json!([{}]), "a step is either shadow: true or a percent"),
        (json!([{"percent": 0}]), "spec.rollout.steps[0].percent"),
        (json!([{"percent": 150}]), "spec.rollout.steps[0].percent"),
        (
            json!([{"percent": 10, "analysis": "48h"}]),
            "analysis must be between 0s and 24h",
        ),
        (json!([]), "a Progressive rollout needs at least one step"),
    ];
    for (steps, reason) in cases {
        let rp = world.canary_plugin("rollout-v1", steps.clone());
        let message = plugins
            .patch(
                CANARY_RP,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&rp),
            )
            .await
            .expect_err("refused")
            .to_string();
        assert!(message.contains(reason), "{steps}: {message}");
    }
    assert!(
        get(&plugins, CANARY_RP).await.is_none(),
        "nothing was stored"
    );
}

#[tokio::test]
async fn a_candidate_that_loops_or_floods_events_should_stop_in_shadow_without_a_trace() {
    let world = World::new("rollout-hostile").await;
    let _suite = exclusive(&world.client).await;
    let _host = world.serving_v1(20, &["rollout-hostile"]).await;
    let events_before = world.events_for("c0001").await.len();
    let mut rp = world.canary_plugin(
        "rollout-hostile",
        json!([{"shadow": true, "analysis": "10m"}, {"percent": 100}]),
    );
    // A short deadline for both revisions: the stable one answers in microseconds.
    rp["spec"]["limits"] = json!({"callTimeout": "200ms"});
    world.apply_plugin(&rp).await;
    let rp = world.rollout_phase("RolledBack", CONVERGE).await;
    let rollout = &rp["status"]["rollout"];
    assert!(
        rollout["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("rolled back at shadow: divergence:")),
        "{rollout}"
    );
    // Whichever failed first fills the differences (the fast floods usually do): each is a
    // failed call with its cause.
    let differences = rollout["shadow"]["differences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!differences.is_empty(), "{rollout}");
    for difference in &differences {
        let text = difference.as_str().unwrap_or_default();
        assert!(
            text.ends_with("call: stable succeeded, candidate deadline of 200 ms exceeded")
                || text.ends_with(
                    "call: stable succeeded, candidate invalid response at events: 50 events, more than 10"
                ),
            "a failed shadow call is a divergence, with its cause: {text}"
        );
    }
    assert_eq!(
        writes_by(&world, &short("rollout-hostile")),
        Vec::<String>::new(),
        "nothing was written for the candidate: no child, no status, no event"
    );
    assert_eq!(
        world.events_for("c0001").await.len(),
        events_before,
        "no event of the flood reached the parent"
    );
    let revisions = &rp["status"]["revisions"];
    assert_eq!(
        revisions.as_array().map(Vec::len),
        Some(1),
        "only stable serves: {rp}"
    );
    world.uninstall(CANARY_RP).await;
}
