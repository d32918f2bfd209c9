//! Parents whose CRD does not declare the host's status fields (`conditions`,
//! `observedGeneration`), as CRDs written for other controllers often do: the host still writes
//! the plugin's status, says once what it cannot show, does not loop on a status the API server
//! refuses, tries again when an input changes, and picks up a CRD upgraded to declare the fields.
//!
//! One test: it owns the `Legacy` CRD and changes it.

use crate::common;

use common::{CONVERGE, World, condition, get};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
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

async fn install_crd(client: &kube::Client) -> Api<CustomResourceDefinition> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Left by an earlier run on a kept control plane.
    if crds.get_opt(CRD).await.expect("reading the CRD").is_some() {
        crds.delete(CRD, &DeleteParams::default()).await.ok();
        eventually(CONVERGE, "the old CRD to go", || async {
            crds.get_opt(CRD).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    let crd = serde_json::from_value(legacy_crd(legacy_fields())).expect("a CRD");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("creating the Legacy CRD");
    eventually(CONVERGE, "the Legacy CRD to be established", || async {
        let crd = crds.get(CRD).await.ok()?;
        let established = crd
            .status?
            .conditions?
            .into_iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established.then_some(())
    })
    .await;
    crds
}

impl World {
    fn legacies(&self) -> Api<DynamicObject> {
        self.api("test.reconhost.dev", "v1", "Legacy", "legacies")
    }

    async fn merge(&self, api: &Api<DynamicObject>, name: &str, patch: Value) {
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("patching {name}: {e}"));
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

    /// Makes the host do a round of work on `other` (a new seed, waited for on its child), so
    /// that a host still busy with something else would have shown it by then.
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
    let crds = install_crd(&world.client).await;
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

    // A field of the plugin's own the schema does not declare: refused (a 500 from server-side
    // apply), shown, and not retried in a loop.
    world
        .merge(
            &world.legacies(),
            "two",
            json!({"spec": {"extraStatus": {"colour": "blue"}}}),
        )
        .await;
    let note = world.warning("two", "ApplyError").await;
    assert!(note.contains("field not declared in schema"), "{note}");
    let mark = world.host_writes_about("two").len();
    world.round_on("one", "s3").await;
    assert_eq!(
        world.host_writes_about("two").len(),
        mark,
        "the host retried a status its kind cannot hold"
    );
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
            json!({"spec": {"extraStatus": null}}),
        )
        .await;
    let two = world.status_of("two", |s| s["phase"] == "Ready").await;
    assert!(two["status"].get("colour").is_none(), "{two}");

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

    crds.delete(CRD, &DeleteParams::default()).await.ok();
}
