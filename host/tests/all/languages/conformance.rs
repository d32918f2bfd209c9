//! The `webapp` example in three languages, on the same fixtures: every answer of the Python and
//! TypeScript builds must equal the Rust one's, and the Rust one must give what the fixture
//! expects. All three are built against the same contract version.

use std::path::PathBuf;

use reconhost::model::ReconcileRequest;
use reconhost::runtime::Limits;
use serde_json::{Value, json};

use super::{CONTRACT, WEBAPPS, call, loaded};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../plugins/examples/webapp/fixtures"
    ))
}

fn objects(file: &str) -> Vec<Value> {
    reconhost::render::objects(&[fixtures().join(file)])
        .unwrap_or_else(|e| panic!("reading fixture {file}: {e:#}"))
}

fn request(parent: Value, children: Vec<Value>) -> ReconcileRequest {
    ReconcileRequest {
        parent: parent.into(),
        children: children.iter().map(Value::to_string).collect(),
        config: json!({}),
        finalizing: false,
    }
}

/// What one plugin answered, in a form that compares across languages: the validated desired
/// state as JSON, or the error as the host reports it.
fn answer(name: &str, request: &ReconcileRequest) -> Result<Value, String> {
    let plugin = loaded(name, Limits::default());
    match call(plugin, request) {
        Ok(outcome) => {
            let d = outcome.desired;
            Ok(json!({
                "children": d.children.iter().map(|c| &c.body).collect::<Vec<_>>(),
                "waves": d.children.iter().map(|c| c.wave).collect::<Vec<_>>(),
                "readyWhen": d.children.iter().map(|c| &c.ready_when).collect::<Vec<_>>(),
                "status": d.status,
                "conditions": d.conditions,
                "events": d.events,
                "requeueAfterMs": d.requeue_after.map(|r| r.as_millis() as u64),
                "finalized": d.finalized,
                "parentMetadata": d.parent_metadata,
            }))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Every language answers `request` as Rust does; returns the Rust answer.
fn same_everywhere(case: &str, request: &ReconcileRequest) -> Result<Value, String> {
    let reference = answer(WEBAPPS[0], request);
    for other in &WEBAPPS[1..] {
        let got = answer(other, request);
        assert_eq!(
            got, reference,
            "{other} differs from the Rust webapp on {case}"
        );
    }
    reference
}

#[test]
fn every_language_should_be_built_against_the_same_contract() {
    for name in WEBAPPS {
        assert_eq!(
            loaded(name, Limits::default()).contract(),
            CONTRACT,
            "the contract {name} names"
        );
    }
}

#[test]
fn every_language_should_declare_the_same_plugin() {
    let reference = loaded(WEBAPPS[0], Limits::default()).info().clone();
    for other in &WEBAPPS[1..] {
        assert_eq!(
            loaded(other, Limits::default()).info(),
            &reference,
            "{other} declares itself differently"
        );
    }
}

#[test]
fn every_fixture_of_the_rust_example_should_render_the_same_in_every_language() {
    let parent = objects("parent.yaml").remove(0);
    let observed = objects("observed.yaml");

    let first = same_everywhere("parent.yaml", &request(parent.clone(), vec![]))
        .expect("a valid parent renders");
    assert_eq!(
        first["children"].as_array().map(Vec::len),
        Some(2),
        "{first}"
    );
    assert_eq!(first["children"][0]["spec"]["replicas"], 2);
    assert_eq!(
        first["waves"],
        json!([0, 0]),
        "no order among webapp's children"
    );
    assert_eq!(first["readyWhen"], json!([[], []]));
    assert_eq!(first["parentMetadata"], Value::Null);
    assert_eq!(first["status"], json!({"readyReplicas": 0}));

    let later = same_everywhere(
        "parent.yaml with observed.yaml",
        &request(parent.clone(), observed.clone()),
    )
    .expect("renders against observed children");
    assert_eq!(later["status"], json!({"readyReplicas": 1}));
    assert_eq!(later["conditions"][0]["message"], "1 of 2 replicas ready");

    // Every replica ready: the condition turns True.
    let mut ready = observed.clone();
    ready[0]["status"]["readyReplicas"] = json!(2);
    let done =
        same_everywhere("all replicas ready", &request(parent.clone(), ready)).expect("renders");
    assert_eq!(done["conditions"][0]["status"], "True");
    assert_eq!(done["conditions"][0]["reason"], "ReplicasReady");

    // Defaults, an untrimmed image, and a Deployment of another name that must not count.
    let mut defaults = parent.clone();
    defaults["spec"] = json!({"image": " registry.example/app:1 "});
    let mut stranger = observed[0].clone();
    stranger["metadata"]["name"] = json!("shop-canary");
    stranger["status"]["readyReplicas"] = json!(5);
    let answered = same_everywhere("defaults", &request(defaults, vec![stranger]))
        .expect("renders with defaults");
    let container = &answered["children"][0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], " registry.example/app:1 ");
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    assert_eq!(
        answered["children"][1]["spec"]["ports"][0]["targetPort"],
        8080
    );
    assert_eq!(answered["status"], json!({"readyReplicas": 0}));

    let invalid = objects("invalid.yaml").remove(0);
    assert_eq!(
        same_everywhere("invalid.yaml", &request(invalid, vec![])),
        Err("permanent error: spec.image must not be empty".to_owned())
    );
}

#[test]
fn every_invalid_spec_should_fail_with_the_same_permanent_error_in_every_language() {
    let parents = objects("invalid-specs.yaml");
    assert!(parents.len() >= 8, "the fixture holds the invalid specs");
    for parent in parents {
        let name = parent["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let expect = parent["metadata"]["annotations"]["expect"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no expect annotation"))
            .to_owned();
        assert_eq!(
            same_everywhere(&name, &request(parent, vec![])),
            Err(format!("permanent error: {expect}")),
            "{name}"
        );
    }
}
