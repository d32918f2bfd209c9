//! The plugin runtime against real components: the examples behave, every adversarial test
//! plugin is contained with the right typed error, and the runtime keeps serving afterwards.
//!
//! The components are built by `make plugins` (scripts/build-plugins.sh) into
//! `<target>/plugins/<name>.wasm`. Every crate under plugins/test-plugins must be used here:
//! `every_test_plugin_should_have_a_test` fails otherwise.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use reconhost::model::{KindRef, PluginError, ReconcileRequest};
use reconhost::runtime::{
    CallErrorKind, Limits, LoadError, MemoryReset, NoObjects, Plugin, Provenance, Read, Runtime,
    RuntimeConfig, StaticObjects,
};
use serde_json::json;

fn wasm(name: &str) -> Vec<u8> {
    let path = crate::common::plugin(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the plugins with `make plugins`",
            path.display()
        )
    })
}

/// One runtime per test process, with its own compiled-code cache.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<(Runtime, PathBuf)> = OnceLock::new();
    &RUNTIME
        .get_or_init(|| {
            let dir =
                std::env::temp_dir().join(format!("reconhost-runtime-test-{}", std::process::id()));
            let config = RuntimeConfig {
                cache_dir: dir.clone(),
                ..RuntimeConfig::default()
            };
            (Runtime::new(config).expect("engine"), dir)
        })
        .0
}

fn load(name: &str, limits: Limits) -> Plugin {
    Plugin::load(runtime(), name, &wasm(name), limits)
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

fn widget(name: &str) -> ReconcileRequest {
    ReconcileRequest {
        parent: json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Widget",
                       "metadata": {"name": name, "namespace": "team-a", "uid": "u-1", "generation": 1}})
        .into(),
        children: vec![],
        config: json!({}),
        finalizing: false,
    }
}

fn call(
    plugin: &Plugin,
    request: &ReconcileRequest,
) -> Result<reconhost::runtime::Outcome, CallErrorKind> {
    plugin.reconcile(request, Arc::new(NoObjects)).map_err(|e| {
        assert_eq!(e.plugin, plugin.info().name, "the error names the plugin");
        assert_eq!(
            e.parent,
            "team-a/".to_owned() + request.parent["metadata"]["name"].as_str().unwrap(),
            "and the parent"
        );
        e.kind
    })
}

/// A well-behaved plugin still works: the runtime was not damaged by what came before.
fn assert_runtime_healthy() {
    let good = load("runtime-state-leak", Limits::default());
    let outcome = call(&good, &widget("after")).expect("a good plugin keeps working");
    assert_eq!(
        outcome.desired.status,
        Some(json!({"callsBefore": 0, "heapMarked": 0, "grownPagesMarked": 0}))
    );
}

/// Runs a misbehaving plugin twice (the second call must fail the same way, not worse) and checks
/// that the runtime still serves a good plugin.
fn contained(name: &str, limits: Limits) -> CallErrorKind {
    let plugin = load(name, limits.clone());
    let start = Instant::now();
    let first = call(&plugin, &widget("w")).expect_err("the call must fail");
    // A bound, not a measurement: a deadline that did not fire would hang far longer.
    assert!(
        start.elapsed() < limits.deadline + Duration::from_secs(5),
        "{name} was not stopped promptly: {:?}",
        start.elapsed()
    );
    let second = call(&plugin, &widget("w")).expect_err("and fail again");
    assert_eq!(
        first.label(),
        second.label(),
        "{name}: {first} then {second}"
    );
    assert_runtime_healthy();
    first
}

fn short() -> Limits {
    Limits::default().deadline(Duration::from_millis(300))
}

#[test]
fn infinite_loop_should_hit_the_deadline() {
    let err = contained("runtime-loop", short());
    assert!(
        matches!(err, CallErrorKind::Deadline(d) if d == Duration::from_millis(300)),
        "{err}"
    );
}

#[test]
fn unbounded_allocation_should_hit_the_memory_limit() {
    let err = contained("runtime-alloc", short().memory(16 << 20));
    assert!(
        matches!(err, CallErrorKind::MemoryLimit { limit } if limit == 16 << 20),
        "{err}"
    );
}

#[test]
fn panic_should_be_a_trap_with_the_guest_message() {
    let err = contained("runtime-panic", short());
    let CallErrorKind::Trap { message, trap, .. } = &err else {
        panic!("expected a trap, got {err}")
    };
    assert_eq!(
        message, "runtime-panic gave up on w",
        "the panic message is the error's message"
    );
    let shown = err.to_string();
    assert!(
        shown.starts_with("runtime-panic gave up on w (trapped: wasm `unreachable`"),
        "the plugin's words first, then the trap: {shown}"
    );
    assert!(trap.contains("unreachable"), "{trap}");
    assert!(
        !shown.contains("RUST_BACKTRACE"),
        "a hint that means nothing in the sandbox: {shown}"
    );
}

#[test]
fn stack_overflow_should_be_a_trap() {
    let err = contained("runtime-stack-overflow", short());
    let CallErrorKind::Trap { trap, .. } = &err else {
        panic!("expected a trap, got {err}")
    };
    assert!(trap.contains("stack overflow"), "{trap}");
}

#[test]
fn huge_response_should_be_refused_by_size_or_memory() {
    // With room to build it, the 100 MiB response is refused by the response limit...
    let err = contained(
        "runtime-huge-response",
        short().deadline(Duration::from_secs(10)).memory(900 << 20),
    );
    assert!(
        matches!(err, CallErrorKind::ResponseTooLarge { bytes, limit } if bytes > 100 << 20 && limit == 4 << 20),
        "{err}"
    );
    // ...and with the default memory cap it never gets that far.
    let err = contained(
        "runtime-huge-response",
        short().deadline(Duration::from_secs(10)),
    );
    assert!(matches!(err, CallErrorKind::MemoryLimit { .. }), "{err}");
}

#[test]
fn invalid_json_should_be_an_invalid_response_with_its_path() {
    let err = contained("runtime-invalid-json", short());
    assert!(
        matches!(&err, CallErrorKind::InvalidResponse { path, reason } if path == "children[0]" && reason.contains("not JSON")),
        "{err}"
    );
}

#[test]
fn child_in_another_namespace_should_be_refused() {
    let err = contained("runtime-foreign-namespace", short());
    assert!(
        matches!(&err, CallErrorKind::InvalidResponse { path, reason } if path == "children[0].metadata.namespace" && reason.contains("kube-system")),
        "{err}"
    );
}

#[test]
fn child_of_an_undeclared_kind_should_be_refused() {
    let err = contained("runtime-undeclared-kind", short());
    assert!(
        matches!(&err, CallErrorKind::InvalidResponse { path, reason } if path == "children[0].kind" && reason.contains("v1/Secret")),
        "{err}"
    );
}

#[test]
fn forged_owner_reference_should_be_refused() {
    let err = contained("runtime-forged-owner", short());
    assert!(
        matches!(&err, CallErrorKind::InvalidResponse { path, .. } if path == "children[0].metadata.ownerReferences"),
        "{err}"
    );
}

#[test]
fn log_spam_should_hit_the_log_limit() {
    let err = contained("runtime-log-spam", short());
    assert!(
        matches!(err, CallErrorKind::LogLimit { limit } if limit == 64 << 10),
        "{err}"
    );
}

#[test]
fn stdout_spam_should_hit_the_log_limit() {
    let err = contained("runtime-stdout-spam", short());
    assert!(matches!(err, CallErrorKind::LogLimit { .. }), "{err}");
}

/// A plugin that desires nothing gets nothing: its observed children are planned for deletion
/// (with their UIDs as preconditions) and the parent's status holds only the host's fields.
#[test]
fn an_empty_answer_should_delete_what_was_there() {
    let plugin = load("runtime-empty", Limits::default());
    let mut request = widget("w");
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "w-config", "namespace": "team-a", "uid": "u-child"}});
    request.children = vec![child.to_string()];
    let outcome = call(&plugin, &request).expect("an empty answer is valid");
    assert!(outcome.desired.children.is_empty() && outcome.desired.status.is_none());
    let plan = reconhost::planner::plan(
        plugin.info(),
        &reconhost::planner::StatusFields::all(),
        &request.parent,
        &outcome.desired,
        &[child],
        "2026-01-01T00:00:00Z",
    );
    let deletes: Vec<_> = plan
        .children
        .iter()
        .map(|c| (c.action, c.name.as_str(), c.uid.as_deref()))
        .collect();
    assert_eq!(
        deletes,
        [(
            reconhost::planner::Action::Delete,
            "w-config",
            Some("u-child")
        )]
    );
    let status = plan.status.expect("the host's Synced condition");
    let mut fields: Vec<_> = status.as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(fields, ["conditions", "observedGeneration"], "{status}");
    assert_eq!(status["conditions"][0]["type"], "Synced");
    assert_eq!(status["conditions"][0]["status"], "True");
}

/// Every call finds no mark of an earlier one in a static, the heap or grown memory, whichever
/// way used memory is reset (the resident pool's copy too, with every plugin sent there), with
/// pre-made instances (made by the fill thread, then by the calls) and with instances made
/// inline; enough calls that pool slots are reused many times.
#[test]
fn every_call_should_see_a_pristine_instance() {
    let scan = matches!(MemoryReset::Auto.resolve(), MemoryReset::Scan { .. });
    let mut strategies = vec![
        (MemoryReset::Memset { keep_resident: 0 }, None),
        (
            MemoryReset::Memset {
                keep_resident: 1 << 20,
            },
            None,
        ),
        (MemoryReset::Auto, Some(0)),
    ];
    if scan {
        strategies.push((
            MemoryReset::Scan {
                keep_resident: 2 << 20,
            },
            None,
        ));
    }
    let wasm = wasm("runtime-state-leak");
    for (reset, resident_pool_from) in strategies {
        let dir = std::env::temp_dir().join(format!("reconhost-reset-test-{}", std::process::id()));
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: dir,
            memory_reset: reset,
            resident_pool_from,
            max_instances: 8,
            ..RuntimeConfig::default()
        })
        .expect("engine");
        for warm in [2, 0] {
            let plugin = Plugin::load_with_warm(
                &runtime,
                "runtime-state-leak",
                &wasm,
                Limits::default(),
                warm,
            )
            .expect("loading runtime-state-leak");
            assert_eq!(
                plugin.keeps_memory_resident(),
                resident_pool_from.is_some(),
                "{reset:?}, resident pool from {resident_pool_from:?}"
            );
            for i in 0..20 {
                let outcome = call(&plugin, &widget("w")).unwrap();
                assert_eq!(
                    outcome.desired.status,
                    Some(json!({"callsBefore": 0, "heapMarked": 0, "grownPagesMarked": 0})),
                    "call {i} under {reset:?}, resident pool from {resident_pool_from:?}, \
                     {warm} pre-made: an earlier call's state survived"
                );
            }
        }
    }
}

#[test]
fn reads_should_be_answered_limited_to_declared_kinds_and_recorded() {
    let plugin = load("runtime-reads", Limits::default());
    let objects = StaticObjects::new(vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team-a"}, "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-1", "namespace": "team-a", "labels": {"tier": "web"}}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-2", "namespace": "team-b", "labels": {"tier": "web"}}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token", "namespace": "team-a"}}),
    ]);
    let outcome = plugin.reconcile(&widget("w"), Arc::new(objects)).unwrap();
    let status = outcome.desired.status.unwrap();
    assert_eq!(status["got"], json!({"k": "v"}));
    assert_eq!(
        status["listed"],
        json!(["web-1"]),
        "only the namespace asked for"
    );
    assert!(
        status["denied"]
            .as_str()
            .unwrap()
            .contains("not among the kinds"),
        "{status}"
    );
    let cm = KindRef::new("v1", "ConfigMap");
    assert_eq!(
        outcome.reads,
        vec![
            Read::Get {
                kind: cm.clone(),
                namespace: "team-a".into(),
                name: "settings".into()
            },
            Read::List {
                kind: cm,
                namespace: "team-a".into(),
                selector: "tier=web".into()
            },
        ],
        "the refused read of a Secret is not a dependency"
    );
}

#[test]
fn component_of_another_world_should_fail_to_load() {
    let err = Plugin::load(
        runtime(),
        "runtime-not-a-reconciler",
        &wasm("runtime-not-a-reconciler"),
        Limits::default(),
    )
    .err()
    .expect("must not load");
    assert!(matches!(err, LoadError::NotAReconciler { .. }), "{err}");
    assert!(
        err.to_string().contains("runtime-not-a-reconciler"),
        "the error names the plugin: {err}"
    );
}

#[test]
fn component_of_an_unknown_contract_version_should_fail_to_load() {
    let err = Plugin::load(
        runtime(),
        "runtime-future-contract",
        &wasm("runtime-future-contract"),
        Limits::default(),
    )
    .err()
    .expect("must not load");
    assert!(
        matches!(&err, LoadError::UnsupportedContract { found, .. } if found == "reconhost:plugin@99.0.0"),
        "{err}"
    );
}

#[test]
fn bytes_that_are_not_a_component_should_fail_to_compile() {
    let err = Plugin::load(
        runtime(),
        "garbage.wasm",
        b"\0asm not really",
        Limits::default(),
    )
    .err()
    .expect("must not load");
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
}

#[test]
fn second_load_should_come_from_the_compiled_code_cache() {
    let dir = std::env::temp_dir().join(format!("reconhost-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = wasm("configmap-generator");
    let config = RuntimeConfig {
        cache_dir: dir.clone(),
        ..RuntimeConfig::default()
    };
    let first = Plugin::load(
        &Runtime::new(config.clone()).unwrap(),
        "configmap-generator",
        &bytes,
        Limits::default(),
    )
    .unwrap();
    assert_eq!(first.provenance(), Provenance::Compiled);
    // A new runtime, as after a host restart: the code comes from disk.
    let runtime = Runtime::new(config).unwrap();
    let second = Plugin::load(&runtime, "configmap-generator", &bytes, Limits::default()).unwrap();
    assert_eq!(second.provenance(), Provenance::Cached);
    assert!(runtime.cache().path(second.digest()).is_file());
    let outcome = call(&second, &ReconcileRequest { parent: json!({"metadata": {"name": "g", "namespace": "team-a"}, "spec": {"content": {"a": "b"}}}).into(), ..widget("g") }).unwrap();
    assert_eq!(outcome.desired.children[0].body["data"], json!({"a": "b"}));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn examples_should_declare_their_kinds() {
    let expect = [
        ("webapp", "WebApp", false),
        ("configmap-generator", "ConfigMapGenerator", false),
        ("merged-config", "MergedConfig", false),
        ("archiver", "Archive", true),
    ];
    for (name, kind, finalizer) in expect {
        let plugin = load(name, Limits::default());
        let info = plugin.info();
        assert_eq!(info.name, name);
        assert_eq!(
            info.parent,
            KindRef::new("examples.reconhost.dev/v1alpha1", kind)
        );
        assert_eq!(info.finalizer, finalizer, "{name}");
    }
    assert_eq!(
        load("merged-config", Limits::default()).info().reads,
        vec![KindRef::new("v1", "ConfigMap")]
    );
}

#[test]
fn webapp_should_report_a_permanent_error_for_an_empty_image() {
    let plugin = load("webapp", Limits::default());
    let request = ReconcileRequest {
        parent: json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
                       "metadata": {"name": "w", "namespace": "team-a"}, "spec": {"image": ""}})
        .into(),
        ..widget("w")
    };
    let err = call(&plugin, &request).expect_err("empty image");
    assert!(
        matches!(&err, CallErrorKind::Plugin(PluginError::Permanent(m)) if m.contains("spec.image")),
        "{err}"
    );
    assert!(err.is_permanent());
}

/// The lean path (`runtime-lean-webapp`: webapp's logic without `serde_json::Value` or
/// k8s-openapi, which the benchmark times beside webapp) answers exactly as webapp does, valid
/// specs and invalid ones, so the benchmark compares like with like.
#[test]
fn the_lean_webapp_should_answer_as_webapp_does() {
    let webapp = load("webapp", Limits::default());
    let lean = load("runtime-lean-webapp", Limits::default());
    let deployment = |ready: i64| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "shop", "namespace": "team-a", "uid": "u-d"},
               "spec": {"replicas": 3}, "status": {"readyReplicas": ready}})
        .to_string()
    };
    let cases = [
        (json!({"image": "nginx:1.27"}), vec![]),
        (
            json!({"image": "registry.example/shop:1.2.3", "replicas": 3, "port": 9090}),
            vec![deployment(2)],
        ),
        (
            json!({"image": "nginx", "replicas": 2}),
            vec![deployment(2)],
        ),
        (json!({"image": "nginx", "replicas": 0}), vec![]),
        (json!({"image": " "}), vec![]),
        (json!({"image": "nginx", "port": 0}), vec![]),
        (json!({"image": "nginx", "replicas": -1}), vec![]),
    ];
    for (spec, children) in cases {
        let request = ReconcileRequest {
            parent: json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
                           "metadata": {"name": "shop", "namespace": "team-a", "uid": "u-1",
                                        "generation": 2},
                           "spec": spec.clone()})
            .into(),
            children,
            config: json!({}),
            finalizing: false,
        };
        let expected = webapp.reconcile(&request, Arc::new(NoObjects));
        let got = lean.reconcile(&request, Arc::new(NoObjects));
        match (expected, got) {
            (Ok(expected), Ok(got)) => {
                assert_eq!(got.desired, expected.desired, "for spec {spec}");
                assert_eq!(got.desired.children.len(), 2);
            }
            (Err(expected), Err(got)) => {
                assert!(expected.kind.is_permanent(), "{}", expected.kind);
                assert_eq!(
                    got.kind.to_string(),
                    expected.kind.to_string(),
                    "for spec {spec}"
                );
            }
            (expected, got) => panic!(
                "for spec {spec}: webapp answered {:?}, the lean plugin {:?}",
                expected.map(|o| o.desired),
                got.map(|o| o.desired)
            ),
        }
    }
}

#[test]
fn every_test_plugin_should_have_a_test() {
    // A test plugin `<suite>-<case>` belongs to the suites in host/tests/all/<suite>*.rs.
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/all");
    let sources: Vec<(String, String)> = std::fs::read_dir(tests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            (stem, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/test-plugins");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for name in names {
        let suite = name.split('-').next().unwrap_or_default();
        let quoted = format!("\"{name}\"");
        assert!(
            sources
                .iter()
                .any(|(stem, text)| stem.starts_with(suite) && text.contains(&quoted)),
            "test plugin {name} is built but no test in host/tests/all/{suite}*.rs uses it"
        );
    }
}

#[test]
fn plugin_should_reach_no_environment_filesystem_or_network() {
    let plugin = load("runtime-sandbox", Limits::default());
    let status = call(&plugin, &widget("w")).unwrap().desired.status.unwrap();
    assert_eq!(status["env"], 0, "no environment variables: {status}");
    assert_eq!(status["args"], 0, "no arguments: {status}");
    for probe in ["files", "passwd", "cwd", "tcp", "dns"] {
        assert!(
            status[probe].get("refused").is_some(),
            "{probe} was reachable: {status}"
        );
    }
}

fn widget_with(spec: serde_json::Value) -> ReconcileRequest {
    let mut request = widget("w");
    let mut parent = (*request.parent).clone();
    parent["spec"] = spec;
    request.parent = parent.into();
    request
}

#[test]
fn side_effects_past_the_hosts_bounds_should_fail_the_call_with_the_rule() {
    let plugin = load("runtime-side-effects", Limits::default());
    let cases = [
        ("events", "events", "11 events, more than 10"),
        ("conditions", "conditions", "17 conditions, more than 16"),
        ("status", "status", "more than 262144"),
        (
            "synced",
            "conditions[0].type",
            "Synced is the host's condition",
        ),
        (
            "metadata",
            "children[0].metadata.resourceVersion",
            "set by the API server",
        ),
        (
            "finalizer",
            "children[0].metadata.finalizers",
            "--allow-child-finalizers",
        ),
    ];
    for (mode, path, reason) in cases {
        let err = call(&plugin, &widget_with(json!({"mode": mode}))).expect_err(mode);
        assert!(
            matches!(&err, CallErrorKind::InvalidResponse { path: p, reason: r } if p == path && r.contains(reason)),
            "{mode}: {err}"
        );
    }
    // Allowed by the operator, a child finalizer passes.
    let allowed = load(
        "runtime-side-effects",
        Limits::default().child_finalizers(true),
    );
    call(&allowed, &widget_with(json!({"mode": "finalizer"}))).expect("allowed");
    assert_runtime_healthy();
}

#[test]
fn plugin_text_should_be_escaped_and_cut_and_requeue_after_floored() {
    let plugin = load("runtime-side-effects", Limits::default());
    let outcome = call(&plugin, &widget_with(json!({"mode": "message"}))).expect("a message");
    let event = &outcome.desired.events[0].message;
    assert!(
        event.starts_with("line\\n{\"level\":\"ERROR\"}\\u{1b}[2J"),
        "{event}"
    );
    assert!(
        !event.contains('\n') && !event.contains('\u{1b}'),
        "{event}"
    );
    assert!(
        event.len() <= 1000 + 32,
        "cut to the event limit: {} bytes",
        event.len()
    );
    let condition = &outcome.desired.conditions[0].message;
    assert!(
        condition.len() <= 4096 + 32 && condition.ends_with("more bytes)"),
        "{condition}"
    );
    let outcome = call(&plugin, &widget_with(json!({"mode": "requeue"}))).expect("a requeue");
    assert_eq!(
        outcome.desired.requeue_after,
        Some(Duration::from_secs(1)),
        "1 ms is raised to the floor"
    );
}

#[test]
fn reading_more_often_than_a_call_may_should_hit_the_read_limit() {
    let err = contained("runtime-read-flood", Limits::default());
    assert!(
        matches!(&err, CallErrorKind::ReadLimit { what } if what.contains("1000 get and list calls")),
        "{err}"
    );
}

#[test]
fn a_plugin_that_is_its_own_child_should_not_load() {
    let err = Plugin::load(
        runtime(),
        "runtime-self-child",
        &wasm("runtime-self-child"),
        Limits::default(),
    )
    .err()
    .expect("refused");
    assert!(
        matches!(&err, LoadError::InvalidInfo { field: "children", reason, .. } if reason.contains("own parent kind")),
        "{err}"
    );
}

#[test]
fn a_log_line_a_plugin_writes_should_not_forge_another() {
    use std::io::Write;
    #[derive(Clone, Default)]
    struct Buffer(Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let plugin = load("runtime-forged-log", Limits::default());
    tracing::subscriber::with_default(subscriber, || {
        call(&plugin, &widget("w")).expect("a call that logs");
    });
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("forged")).collect();
    assert_eq!(lines.len(), 1, "one line, not two: {text}");
    assert!(
        lines[0].contains("ok\\n{"),
        "the newline is escaped: {text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no terminal escape reaches the log: {text:?}"
    );
}

#[test]
fn an_unwritable_compiled_code_cache_should_cost_a_compile_not_the_plugin() {
    // A regular file where the cache directory should be: nothing can be created under it,
    // whoever runs the test (as a read-only root filesystem would refuse).
    let blocker = std::env::temp_dir().join(format!("reconhost-blocked-{}", std::process::id()));
    std::fs::write(&blocker, b"not a directory").unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: blocker.join("compiled"),
        ..RuntimeConfig::default()
    })
    .expect("engine");
    for _ in 0..2 {
        let plugin = Plugin::load(&runtime, "webapp", &wasm("webapp"), Limits::default())
            .expect("loads without a cache");
        assert_eq!(
            plugin.provenance(),
            Provenance::Compiled,
            "nothing was kept"
        );
    }
    let _ = std::fs::remove_file(blocker);
}
