//! Parent selection: a plugin reconciles only the parents its selector matches
//! (`spec.parentSelector` on a ReconcilePlugin, `--parent-selector` for `--plugin` files). The
//! others get no write at all; one that leaves the selection keeps its children and loses the
//! plugin's finalizer; one that enters it is reconciled.

use crate::common;

use common::plugins::{cond, digest_of, exclusive, has};
use common::{CONVERGE, World, get, plugin, synced};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

const ARCHIVE_RP: &str = "archive.examples.reconhost.dev";
const FINALIZER: &str = "reconhost.dev/archiver";

/// The selection suite's steps: Archive parents and relabelling a parent.
trait SelectionWorld {
    async fn relabel(&self, api: &Api<DynamicObject>, name: &str, labels: Value);

    fn archives(&self) -> Api<DynamicObject>;
}

impl SelectionWorld for World {
    async fn relabel(&self, api: &Api<DynamicObject>, name: &str, labels: Value) {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap_or_else(|e| panic!("relabelling {name}: {e}"));
    }

    fn archives(&self) -> Api<DynamicObject> {
        self.api("examples.reconhost.dev", "v1alpha1", "Archive", "archives")
    }
}

fn finalized(archive: &Value) -> bool {
    archive["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.contains(&json!(FINALIZER)))
}

#[tokio::test]
async fn parents_outside_the_selector_should_see_no_write_until_they_match() {
    let world = World::new("select-static").await;
    let _host = world
        .host_with(&["webapp"], &[], &["--parent-selector=team=a"])
        .await;
    let webapp = |name: &str, labels: Value| {
        json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": name, "labels": labels},
               "spec": {"image": "nginx:1.27", "replicas": 1}})
    };
    // Created first, so that a host reconciling it would have done so by the time the second
    // one is done.
    world
        .create(&world.webapps(), webapp("outside", json!({"team": "b"})))
        .await;
    world
        .create(&world.webapps(), webapp("inside", json!({"team": "a"})))
        .await;
    synced(&world.webapps(), "inside").await;
    assert!(get(&world.deployments(), "inside").await.is_some());
    assert_eq!(
        world.host_writes_about("outside"),
        Vec::<String>::new(),
        "a parent outside the selection gets no write, its status included"
    );
    let outside = get(&world.webapps(), "outside").await.unwrap();
    assert!(outside["status"].is_null(), "{outside}");

    world
        .relabel(&world.webapps(), "outside", json!({"team": "a"}))
        .await;
    synced(&world.webapps(), "outside").await;
    assert!(get(&world.deployments(), "outside").await.is_some());

    // Leaving the selection: the children stay as they are and follow the spec no more.
    world
        .webapps()
        .patch(
            "inside",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "c"}}, "spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    world
        .webapps()
        .patch(
            "outside",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    eventually(
        CONVERGE,
        "the selected parent's Deployment to follow",
        || async {
            let d = get(&world.deployments(), "outside").await?;
            (d["spec"]["replicas"] == 3).then_some(())
        },
    )
    .await;
    let kept = get(&world.deployments(), "inside")
        .await
        .expect("children stay");
    assert_eq!(kept["spec"]["replicas"], 1, "no longer reconciled: {kept}");
}

#[tokio::test]
async fn a_reconcile_plugins_selector_should_choose_parents_and_release_those_that_leave() {
    let world = World::new("select-rp").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    world
        .plugin_config_map("archiver", &plugin("archiver"))
        .await;
    let _host = world.host(&[], &[]).await;
    let mut rp = world.reconcile_plugin(
        ARCHIVE_RP,
        ["examples.reconhost.dev/v1alpha1", "Archive"],
        &digest_of(&plugin("archiver")),
        world.config_map_source("archiver"),
    );
    rp["spec"]["parentSelector"] = json!({"matchLabels": {"team": "a"}});
    world.apply_plugin(&rp).await;
    world.plugin_ready(ARCHIVE_RP).await;

    let archives = world.archives();
    for (name, team) in [("other", "b"), ("kept", "a")] {
        world
            .create(
                &archives,
                json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "Archive",
                       "metadata": {"name": name, "labels": {"team": team}},
                       "spec": {"data": {"k": "v"}}}),
            )
            .await;
    }
    let kept = synced(&archives, "kept").await;
    assert!(finalized(&kept), "{kept}");
    assert!(get(&world.config_maps(), "kept").await.is_some());
    assert_eq!(world.host_writes_about("other"), Vec::<String>::new());

    // Out of the selection: the finalizer comes off (nothing else would ever remove it), the
    // child and the status stay as they were.
    world.relabel(&archives, "kept", json!({"team": "z"})).await;
    let released = eventually(CONVERGE, "kept to lose the finalizer", || async {
        let a = get(&archives, "kept").await?;
        (!finalized(&a)).then_some(a)
    })
    .await;
    assert_eq!(released["status"], kept["status"]);
    let child = get(&world.config_maps(), "kept")
        .await
        .expect("the child stays");
    assert_eq!(child["data"], json!({"k": "v"}));

    // A new selector on the ReconcilePlugin is a new generation: every parent is looked at
    // again, and those it now matches are reconciled.
    rp["spec"]["parentSelector"] =
        json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["z"]}]});
    world.apply_plugin(&rp).await;
    eventually(CONVERGE, "kept to be finalized again", || async {
        finalized(&get(&archives, "kept").await?).then_some(())
    })
    .await;
    let other = get(&archives, "other").await.unwrap();
    assert!(!finalized(&other) && other["status"].is_null(), "{other}");
    assert!(get(&world.config_maps(), "other").await.is_none());

    // A selector the API server stores but that means nothing is refused, naming the field; the
    // running version keeps serving.
    rp["spec"]["parentSelector"] =
        json!({"matchExpressions": [{"key": "team", "operator": "Gt", "values": ["1"]}]});
    world.apply_plugin(&rp).await;
    let refused = world
        .plugin_status(ARCHIVE_RP, "the selector refused", |rp| {
            has(rp, "Ready", "False", "UpgradeFailed")
        })
        .await;
    let (_, _, message) = cond(&refused, "Ready");
    assert!(
        message.contains("spec.parentSelector") && message.contains("unknown operator"),
        "{message}"
    );
    world.uninstall(ARCHIVE_RP).await;
}
