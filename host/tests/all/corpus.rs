//! The frozen corpus of contract 0.1 (host/tests/corpus/reconhost-plugin@0.1.0): components as
//! the 0.1 SDKs built them, kept as bytes and never rebuilt, and cases whose recorded answer —
//! what `reconhost render` makes of the plugin's response: the plan, conditions, events,
//! requeue, finalized, or the failure's kind — every later host must give unchanged. A host
//! that loads a newer contract beside 0.1 converts 0.1 answers into its own model; this suite is
//! what says the conversion lost nothing.
//!
//! The freeze rule: a component or a recorded answer is never changed. A new case is added as
//! inputs only, and `record_the_answers_of_new_cases` (ignored, run by hand) fills in its answer
//! once; it never touches a case that has one. No cluster is needed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use reconhost::render::{Input, render_component};
use reconhost::runtime::{CallError, CallErrorKind, Runtime, RuntimeConfig};
use serde_json::{Value, json};

/// The time new condition transitions are stamped with, so answers do not depend on the clock.
const NOW: &str = "2026-12-05T00:00:00Z";

fn corpus() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/corpus/reconhost-plugin@0.1.0"
    ))
}

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let config = RuntimeConfig {
            cache_dir: std::env::temp_dir()
                .join(format!("reconhost-corpus-test-{}", std::process::id())),
            ..RuntimeConfig::default()
        };
        Runtime::new(config).expect("engine")
    })
}

/// Every case, by file name, in order.
fn cases() -> Vec<(PathBuf, Value)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus().join("cases"))
        .expect("the corpus's cases")
        .map(|e| e.expect("a case").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("reading a case");
            let case =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, case)
        })
        .collect()
}

fn list(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// What this host makes of `case`.
fn answer(case: &Value) -> Value {
    let component = case["component"].as_str().expect("a component");
    let path = corpus()
        .join("components")
        .join(format!("{component}.wasm"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let input = Input {
        parent: case["parent"].clone(),
        observed: list(&case["observed"]),
        related: list(&case["related"]),
        config: case["config"].clone(),
    };
    match render_component(runtime(), component, &bytes, &input, NOW) {
        Ok(rendered) => serde_json::to_value(rendered).expect("a rendering is JSON"),
        Err(error) => {
            // The failure's kind, and the plugin's own message where it gave one: the host's
            // wording around them (and a trap's backtrace) may change, the verdict may not.
            let call = error
                .downcast_ref::<CallError>()
                .unwrap_or_else(|| panic!("{component}: not a call error: {error:#}"));
            let message = match &call.kind {
                CallErrorKind::Plugin(e) => json!(e.to_string()),
                _ => Value::Null,
            };
            json!({"error": {"kind": call.kind.label(), "message": message}})
        }
    }
}

fn name(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

#[test]
fn every_0_1_case_should_get_its_recorded_answer() {
    let cases = cases();
    assert!(!cases.is_empty(), "the corpus has no cases");
    let mut differing = Vec::new();
    for (path, case) in &cases {
        let recorded = case.get("answer").unwrap_or_else(|| {
            panic!(
                "{} has no recorded answer: run `cargo test -p reconhost --test all -- corpus::record --ignored` once",
                name(path)
            )
        });
        let now = answer(case);
        if &now != recorded {
            differing.push(format!(
                "{}:\n  recorded {recorded}\n  now      {now}",
                name(path)
            ));
        }
    }
    assert!(
        differing.is_empty(),
        "a 0.1 plugin's answer changed:\n{}",
        differing.join("\n")
    );
}

#[test]
fn every_frozen_component_should_have_a_case_and_keep_its_digest() {
    let cases = cases();
    let dir = corpus().join("components");
    for entry in std::fs::read_dir(&dir).expect("the corpus's components") {
        let path = entry.expect("a component").path();
        let component = name(&path);
        let used: Vec<&Value> = cases
            .iter()
            .map(|(_, c)| c)
            .filter(|c| c["component"] == component.as_str())
            .collect();
        assert!(!used.is_empty(), "{component} has no case");
        // The digest in a recorded answer is the component's as frozen: bytes changed in place
        // would show here even where the answer happens to stay the same.
        let bytes = std::fs::read(&path).expect("reading a component");
        let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        for case in used {
            if let Some(recorded) = case["answer"]["plugin"]["digest"].as_str() {
                assert_eq!(recorded, digest, "{component} was rebuilt or edited");
            }
        }
    }
}

/// Fills in the answer of every case that has none, with what this host gives. Run by hand,
/// once, when a case is added: `cargo test -p reconhost --test all -- corpus::record --ignored`.
#[test]
#[ignore = "writes the corpus; run by hand for a new case"]
fn record_the_answers_of_new_cases() {
    for (path, mut case) in cases() {
        if case.get("answer").is_some() {
            continue;
        }
        case["answer"] = answer(&case);
        let text = serde_json::to_string_pretty(&case).expect("JSON") + "\n";
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}
