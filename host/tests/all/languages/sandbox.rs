//! The sandbox holds a Python or JavaScript plugin exactly as it holds a Rust one. Each language
//! has one misbehaving component (`py-misbehave`, `js-misbehave`) whose parent's `spec.mode`
//! picks the misbehaviour; the Rust counterparts are the runtime suite's test plugins.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reconhost::model::{PluginError, ReconcileRequest};
use reconhost::runtime::{CallErrorKind, Limits, StaticObjects};
use serde_json::json;

use super::{CONTRACT, call, loaded};

const MISBEHAVING: [&str; 2] = ["py-misbehave", "js-misbehave"];

/// The same limits for every plugin here: the defaults (2 s, 64 MiB), which a Python or
/// JavaScript plugin gets unless its ReconcilePlugin says otherwise. Tests run side by side on
/// two cores: a shorter deadline can fire before a plugin that allocates reaches the cap.
fn limits() -> Limits {
    Limits::default()
}

fn widget(mode: &str) -> ReconcileRequest {
    ReconcileRequest {
        parent: json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Widget",
                       "metadata": {"name": "w", "namespace": "team-a", "uid": "u-1", "generation": 1},
                       "spec": {"mode": mode}})
        .into(),
        children: vec![],
        config: json!({}),
        finalizing: false,
    }
}

/// Runs `mode` on a misbehaving plugin: it must fail promptly, and the plugin's next call (a
/// fresh instance) must work.
fn fails(name: &str, mode: &str) -> CallErrorKind {
    let plugin = loaded(name, limits());
    let start = Instant::now();
    let err = call(plugin, &widget(mode)).expect_err(&format!("{name} {mode} must fail"));
    // A bound, not a measurement: a deadline that did not fire would hang far longer.
    assert!(
        start.elapsed() < limits().deadline + Duration::from_secs(5),
        "{name} {mode} was not stopped promptly: {:?}",
        start.elapsed()
    );
    let ok = call(plugin, &widget("ok"))
        .unwrap_or_else(|e| panic!("{name}: the call after {mode} failed too: {e}"));
    assert_eq!(ok.desired.status, Some(json!({"mode": "ok"})), "{name}");
    assert_eq!(ok.desired.children[0].body["data"]["mode"], "ok", "{name}");
    err
}

#[test]
fn the_misbehaving_plugins_should_be_built_against_the_sdks_contract() {
    for name in MISBEHAVING {
        assert_eq!(loaded(name, limits()).contract(), CONTRACT, "{name}");
    }
}

/// The Rust test plugin's error for the same misbehaviour, for the label comparison.
fn rust(name: &str) -> CallErrorKind {
    let plugin = loaded(name, limits());
    call(plugin, &widget("ok")).expect_err(&format!("{name} must fail"))
}

#[test]
fn a_loop_should_hit_the_deadline_in_every_language() {
    let reference = rust("runtime-loop");
    for name in MISBEHAVING {
        let err = fails(name, "loop");
        assert!(
            matches!(err, CallErrorKind::Deadline(d) if d == limits().deadline),
            "{name}: {err}"
        );
        assert_eq!(err.label(), reference.label(), "{name}");
    }
}

#[test]
fn unbounded_allocation_should_hit_the_memory_limit_in_every_language() {
    let reference = rust("runtime-alloc");
    for name in MISBEHAVING {
        let err = fails(name, "alloc");
        assert!(
            matches!(err, CallErrorKind::MemoryLimit { limit } if limit == limits().memory),
            "{name}: {err}"
        );
        assert_eq!(err.label(), reference.label(), "{name}");
    }
}

#[test]
fn an_exception_should_be_a_trap_carrying_its_message_in_every_language() {
    let reference = rust("runtime-panic");
    for name in MISBEHAVING {
        let err = fails(name, "raise");
        let CallErrorKind::Trap { message, .. } = &err else {
            panic!("{name}: expected a trap, got {err}")
        };
        assert!(
            message.ends_with("misbehave gave up on w"),
            "{name}: the exception's message is the error's: {message}"
        );
        let shown = err.to_string();
        assert!(
            shown.starts_with(message.as_str()) && shown.contains(" (trapped: wasm `unreachable`"),
            "{name}: the plugin's words lead, the trap follows: {shown}"
        );
        assert_eq!(err.label(), reference.label(), "{name}");
    }
}

#[test]
fn invalid_output_should_be_an_invalid_response_in_every_language() {
    let reference = rust("runtime-invalid-json");
    for name in MISBEHAVING {
        let err = fails(name, "invalid-json");
        assert!(
            matches!(&err, CallErrorKind::InvalidResponse { path, reason } if path == "children[0]" && reason.contains("not JSON")),
            "{name}: {err}"
        );
        assert_eq!(err.label(), reference.label(), "{name}");
    }
}

#[test]
fn the_sdks_errors_should_reach_the_host_as_typed_plugin_errors() {
    for name in MISBEHAVING {
        let err = fails(name, "transient");
        assert!(
            matches!(&err, CallErrorKind::Plugin(PluginError::Transient(m)) if m == "asked to fail"),
            "{name}: {err}"
        );
        let err = fails(name, "permanent");
        assert!(
            matches!(&err, CallErrorKind::Plugin(PluginError::Permanent(m)) if m == "asked to fail"),
            "{name}: {err}"
        );
    }
}

/// Reads through each SDK reach the host's cache as the Rust SDK's do: the same answers, the
/// same refusal of an undeclared kind, the same reads recorded as dependencies.
#[test]
fn reads_should_be_answered_and_recorded_as_for_rust() {
    let objects = || {
        Arc::new(StaticObjects::new(vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team-a"}, "data": {"k": "v"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-1", "namespace": "team-a", "labels": {"tier": "web"}}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-2", "namespace": "team-b", "labels": {"tier": "web"}}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token", "namespace": "team-a"}}),
        ]))
    };
    let rust = loaded("runtime-reads", limits())
        .reconcile(&widget("read"), objects())
        .expect("runtime-reads answers");
    let rust_status = rust.desired.status.expect("a status");
    let rust_denied = rust_status["denied"].as_str().expect("a refusal");
    let reason = rust_denied
        .strip_prefix("read not allowed: ")
        .unwrap_or_else(|| panic!("{rust_denied}"));
    for name in MISBEHAVING {
        let outcome = loaded(name, limits())
            .reconcile(&widget("read"), objects())
            .unwrap_or_else(|e| panic!("{name} reading: {e}"));
        let status = outcome.desired.status.expect("a status");
        assert_eq!(status["got"], rust_status["got"], "{name}: {status}");
        assert_eq!(status["listed"], rust_status["listed"], "{name}: {status}");
        assert_eq!(
            status["denied"],
            format!("not-allowed: {}", reason.replace("runtime-reads", name)),
            "{name}: the undeclared Secret is refused with the host's reason"
        );
        assert_eq!(outcome.reads, rust.reads, "{name}: the same dependencies");
    }
}
