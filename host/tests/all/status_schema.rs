//! Parents whose CRD does not declare every field of their status: the host's own
//! (`conditions`, `observedGeneration`), as CRDs written for other controllers often do, or the
//! plugin's (a field copied from a newer Kubernetes). The host drops what the schema does not
//! declare and writes the rest, says once what it dropped, does not loop on a status the API
//! server refuses, tries again when an input changes, removes its finalizer even when the last
//! status is refused, and picks up a CRD upgraded to declare the fields.
//!
//! Each test owns its CRD (`Legacy`, `BlueGreen`) and changes it.

use crate::common;

use common::crd::install_crd;
use common::{CONVERGE, World, condition, get};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use reconhost_tests::host::sample;
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

const CRD: &str = "legacies.test.reconhost.dev";

/// A CRD of the kind another controller would have written: a status of its own, nothing of
/// the host's. `phase` is an enum, so a plugin can be made to write a status the API server
/// rejects as invalid.
fn legacy_crd(status_properties: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": "test.reconhost.dev",
            "names": {"kind": "Legacy", "plural": "legacies", "singular": "legacy", "listKind": "LegacyList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "seed": {"type": "string"},
                        "extraStatus": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    }},
                    "status": {"type": "object", "properties": status_properties},
                }}},
            }],
        },
    })
}

fn legacy_fields() -> Value {
    json!({"phase": {"type": "string", "enum": ["Pending", "Ready"]}})
}

/// `legacy_fields` plus the host's, as a CRD upgraded for reconhost would declare them.
fn upgraded_fields() -> Value {
    let mut fields = legacy_fields();
    fields["observedGeneration"] = json!({"type": "integer", "format": "int64"});
    fields["conditions"] = json!({"type": "array", "items": {"type": "object",
    "required": ["type", "status"],
    "properties": {
        "type": {"type": "string"}, "status": {"type": "string"},
        "observedGeneration": {"type": "integer", "format": "int64"},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "reason": {"type": "string"}, "message": {"type": "string"},
    }}});
    fields
}

/// The status-schema suite's steps: Legacy parents, patches, and waiting on status and events.
trait StatusSchemaWorld {
    fn legacies(&self) -> Api<DynamicObject>;

    async fn status_of(&self, name: &str, want: impl Fn(&Value) -> bool) -> Value;

    async fn warning(&self, name: &str, reason: &str) -> String;

    /// Makes the host do a round of work on `other` (a new seed, waited for on its child), so
    /// that a host still busy with something else would have shown it by then.
    async fn round_on(&self, other: &str, seed: &str);
}

impl StatusSchemaWorld for World {
    fn legacies(&self) -> Api<DynamicObject> {
        self.api("test.reconhost.dev", "v1", "Legacy", "legacies")
    }

    async fn status_of(&self, name: &str, want: impl Fn(&Value) -> bool) -> Value {
        eventually(
            CONVERGE,
            &format!("the status wanted on {name}"),
            || async {
                let object = get(&self.legacies(), name).await?;
                want(&object["status"]).then_some(object)
            },
        )
        .await
    }

    async fn warning(&self, name: &str, reason: &str) -> String {
        eventually(CONVERGE, &format!("a {reason} event on {name}"), || async {
            self.events_for(name)
                .await
                .into_iter()
                .find(|(type_, r, _)| type_ == "Warning" && r == reason)
                .map(|(_, _, note)| note)
        })
        .await
    }

    async fn round_on(&self, other: &str, seed: &str) {
        self.merge(&self.legacies(), other, json!({"spec": {"seed": seed}}))
            .await;
        eventually(
            CONVERGE,
            &format!("{other}'s child to take seed {seed}"),
            || async {
                let child = get(&self.config_maps(), other).await?;
                (child["data"]["seed"] == seed).then_some(())
            },
        )
        .await;
    }
}

fn legacy(name: &str) -> Value {
    json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Legacy",
           "metadata": {"name": name}, "spec": {"seed": "s0"}})
}

#[tokio::test]
async fn a_kind_without_the_hosts_status_fields_should_get_the_plugins_status_and_no_loop() {
    let world = World::new("status-schema").await;
    let crds = install_crd(&world.client, CRD, legacy_crd(legacy_fields())).await;
    let _host = world.host(&["status-legacy"], &[]).await;

    // The plugin's status is written, without the fields the kind does not declare.
    world.create(&world.legacies(), legacy("one")).await;
    let one = world.status_of("one", |s| s["phase"] == "Pending").await;
    assert_eq!(one["status"], json!({"phase": "Pending"}), "{one}");
    assert!(get(&world.config_maps(), "one").await.is_some());
    let note = world.warning("one", "StatusFieldsUndeclared").await;
    assert!(
        note.contains("Legacy")
            && note.contains("status.conditions")
            && note.contains("status.observedGeneration"),
        "{note}"
    );

    // Said once: the next parent gets its status and no such event.
    world.create(&world.legacies(), legacy("two")).await;
    world.status_of("two", |s| s["phase"] == "Pending").await;
    world.round_on("two", "s1").await;
    let said: Vec<_> = [world.events_for("one").await, world.events_for("two").await]
        .concat()
        .into_iter()
        .filter(|(_, reason, _)| reason == "StatusFieldsUndeclared")
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");

    // A status the API server rejects as invalid (422) is not retried with the same inputs...
    world
        .merge(
            &world.config_maps(),
            "one",
            json!({"data": {"phase": "Bogus"}}),
        )
        .await;
    let note = world.warning("one", "ApplyError").await;
    assert!(note.contains("phase"), "{note}");
    let mark = world.host_writes_about("one").len();
    world.round_on("two", "s2").await;
    assert_eq!(
        world.host_writes_about("one").len(),
        mark,
        "the host wrote to one again with nothing changed"
    );
    // ...and is as soon as the child it was computed from changes, the parent untouched.
    world
        .merge(
            &world.config_maps(),
            "one",
            json!({"data": {"phase": "Ready"}}),
        )
        .await;
    world.status_of("one", |s| s["phase"] == "Ready").await;

    // Fields of the plugin's own the schema does not declare: dropped (server-side apply would
    // refuse the whole status), the rest written, said once, and no write loop over them.
    world
        .merge(
            &world.config_maps(),
            "two",
            json!({"data": {"phase": "Ready"}}),
        )
        .await;
    world
        .merge(
            &world.legacies(),
            "two",
            json!({"spec": {"extraStatus": {"colour": "blue", "shade": {"deep": true}}}}),
        )
        .await;
    let two = world.status_of("two", |s| s["phase"] == "Ready").await;
    assert_eq!(two["status"], json!({"phase": "Ready"}), "{two}");
    let note = world.warning("two", "StatusFieldsDropped").await;
    assert!(
        note.contains("Legacy") && note.contains("status.colour, status.shade"),
        "{note}"
    );
    let mark = world.host_writes_about("two").len();
    world.round_on("one", "s3").await;
    assert_eq!(
        world.host_writes_about("two").len(),
        mark,
        "the host wrote again a status it had already pruned"
    );

    // The CRD upgraded to declare the host's fields: every parent gets them, untouched.
    let mut crd = legacy_crd(upgraded_fields());
    crd["metadata"]["resourceVersion"] =
        json!(crds.get(CRD).await.unwrap().metadata.resource_version);
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.replace(CRD, &PostParams::default(), &crd)
        .await
        .expect("upgrading the CRD");
    for name in ["one", "two"] {
        let parent = world
            .status_of(name, |s| {
                s["conditions"].is_array() && s["observedGeneration"].is_i64()
            })
            .await;
        let synced = condition(&parent, "Synced").expect("Synced");
        assert_eq!(synced["status"], "True", "{parent}");
        assert_eq!(
            condition(&parent, "Ready").expect("Ready")["reason"],
            "Copied"
        );
        assert_eq!(
            parent["status"]["observedGeneration"],
            parent["metadata"]["generation"]
        );
        assert_eq!(parent["status"]["phase"], "Ready");
    }

    // A parent whose last status the API server refuses still goes when deleted: the host's
    // finalizer does not wait on that write.
    world
        .merge(
            &world.config_maps(),
            "one",
            json!({"data": {"phase": "Bogus"}}),
        )
        .await;
    let parent = get(&world.legacies(), "one").await.expect("one");
    assert_eq!(
        parent["metadata"]["finalizers"],
        json!(["reconhost.dev/status-legacy"]),
        "{parent}"
    );
    world
        .legacies()
        .delete("one", &DeleteParams::default())
        .await
        .expect("deleting one");
    eventually(CONVERGE, "one to be gone", || async {
        get(&world.legacies(), "one").await.is_none().then_some(())
    })
    .await;

    crds.delete(CRD, &DeleteParams::default()).await.ok();
}

const BLUE_GREEN_CRD: &str = "bluegreens.test.reconhost.dev";

/// A CRD written for an older Kubernetes: its `status.replicas` copies a ReplicaSet's without
/// `terminatingReplicas` (added in 1.35). It declares the host's fields.
fn blue_green_crd() -> Value {
    let mut status = upgraded_fields();
    status.as_object_mut().expect("fields").remove("phase");
    for field in ["phase", "liveVersion", "liveColour", "targetVersion"] {
        status[field] = json!({"type": "string"});
    }
    status["history"] = json!({"type": "array", "items": {"type": "string"}});
    status["replicas"] = json!({"type": "object", "properties": {"replicas": {"type": "integer"}}});
    let mut crd = legacy_crd(status);
    crd["metadata"]["name"] = json!(BLUE_GREEN_CRD);
    crd["spec"]["names"] = json!({"kind": "BlueGreen", "plural": "bluegreens",
        "singular": "bluegreen", "listKind": "BlueGreenList"});
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"type": "object", "properties": {"version": {"type": "string"}}});
    crd
}

#[tokio::test]
async fn a_state_machine_in_status_should_make_every_transition_with_a_field_dropped() {
    let world = World::new("status-bluegreen").await;
    let crds = install_crd(&world.client, BLUE_GREEN_CRD, blue_green_crd()).await;
    let host = world.host(&["status-bluegreen"], &[]).await;
    let apps = world.api("test.reconhost.dev", "v1", "BlueGreen", "bluegreens");
    let live_on = |version: &'static str| {
        let apps = apps.clone();
        async move {
            eventually(
                CONVERGE,
                &format!("app to be live on {version}"),
                || async {
                    let app = get(&apps, "app").await?;
                    let status = &app["status"];
                    (status["phase"] == "Live" && status["liveVersion"] == version).then_some(app)
                },
            )
            .await
        }
    };

    world
        .create(
            &apps,
            json!({"apiVersion": "test.reconhost.dev/v1", "kind": "BlueGreen",
                   "metadata": {"name": "app"}, "spec": {"version": "v1"}}),
        )
        .await;
    let app = live_on("v1").await;
    let cycle = ["Deploying", "Switching", "Retiring", "Live"];
    assert_eq!(app["status"]["history"], json!(cycle), "{app}");
    assert_eq!(app["status"]["liveColour"], "blue");
    assert_eq!(app["status"]["replicas"], json!({"replicas": 1}), "{app}");
    assert_eq!(condition(&app, "Synced").expect("Synced")["status"], "True");
    let blue = get(&world.config_maps(), "app-blue")
        .await
        .expect("app-blue");
    assert_eq!(blue["data"]["version"], "v1");
    let note = world.warning("app", "StatusFieldsDropped").await;
    assert!(
        note.contains("BlueGreen") && note.contains("status.replicas.terminatingReplicas"),
        "{note}"
    );

    world
        .merge(&apps, "app", json!({"spec": {"version": "v2"}}))
        .await;
    let app = live_on("v2").await;
    assert_eq!(
        app["status"]["history"],
        json!([cycle, cycle].concat()),
        "{app}"
    );
    assert_eq!(app["status"]["liveColour"], "green");
    let green = get(&world.config_maps(), "app-green")
        .await
        .expect("app-green");
    assert_eq!(green["data"]["version"], "v2");
    eventually(CONVERGE, "app-blue to be retired", || async {
        get(&world.config_maps(), "app-blue")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // Said once, counted at every status written (eight transitions).
    let said = world
        .events_for("app")
        .await
        .into_iter()
        .filter(|(_, reason, _)| reason == "StatusFieldsDropped")
        .count();
    assert_eq!(said, 1);
    let metrics = host.metrics().await.expect("metrics");
    let dropped = sample(
        &metrics,
        "reconhost_status_fields_dropped_total",
        &[("plugin", "status-bluegreen")],
    )
    .expect("the dropped-fields counter");
    assert!(dropped >= 8.0, "{dropped}");

    crds.delete(BLUE_GREEN_CRD, &DeleteParams::default())
        .await
        .ok();
}
