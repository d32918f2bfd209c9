//! `make bench-languages`: the `webapp` example built from Rust, Python (componentize-py) and
//! TypeScript (componentize-js), side by side in one process on the same ~1 KiB parent:
//! component size, cold compile, load from the compiled-code cache, and one reconcile — to the
//! result with an instance made inline (a fresh instance: instantiation included), with a
//! pre-made instance (the host's hot path), and the whole call (teardown and the next instance
//! included: what a reconcile costs its thread). Every figure is a median; results go to
//! stdout as Markdown, with the targets judged at the end.

#[path = "one_call/mod.rs"]
mod one_call;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reconhost::model::ReconcileRequest;
use reconhost::runtime::{
    Limits, NoObjects, ObjectReader, Plugin, Provenance, Runtime, RuntimeConfig,
};
use serde_json::json;

use one_call::{median, parent, plugin_dir};

/// (component, what it is, calls to time, cold compiles to time): `webapp` in each language,
/// then each language's floor: its raw bindings, no SDK, no parsing, an empty answer.
const LANGUAGES: [(&str, &str, usize, usize); 6] = [
    ("webapp", "Rust", 2000, 5),
    ("webapp-python", "Python", 300, 3),
    ("webapp-ts", "TypeScript", 500, 3),
    ("runtime-empty", "Rust, empty answer (floor)", 2000, 1),
    ("py-noop", "Python, no-op without the SDK (floor)", 300, 1),
    (
        "js-noop",
        "JavaScript, no-op without the SDK (floor)",
        500,
        1,
    ),
];

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// A runtime with a compiled-code cache of its own (a new engine each time, as a restarted host).
fn runtime_in(dir: &std::path::Path) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: dir.to_owned(),
        ..RuntimeConfig::default()
    })
    .expect("engine")
}

struct Row {
    language: &'static str,
    size: usize,
    compile: Duration,
    cached: Duration,
    fresh: Duration,
    hot: Duration,
    whole: Duration,
}

fn measure(
    scratch: &std::path::Path,
    name: &str,
    language: &'static str,
    calls: usize,
    compiles: usize,
) -> Row {
    let bytes = std::fs::read(plugin_dir().join(format!("{name}.wasm")))
        .expect("build the plugins first: make plugins");
    let dir = scratch.join(name);
    let compile = median(
        (0..compiles)
            .map(|_| {
                let _ = std::fs::remove_dir_all(&dir);
                let runtime = runtime_in(&dir);
                let start = Instant::now();
                let p = Plugin::load_with_warm(&runtime, name, &bytes, Limits::default(), 0)
                    .expect("loading");
                assert_eq!(p.provenance(), Provenance::Compiled);
                start.elapsed()
            })
            .collect(),
    );
    let cached = median(
        (0..10)
            .map(|_| {
                let runtime = runtime_in(&dir);
                let start = Instant::now();
                let p = Plugin::load_with_warm(&runtime, name, &bytes, Limits::default(), 0)
                    .expect("loading");
                assert_eq!(p.provenance(), Provenance::Cached);
                start.elapsed()
            })
            .collect(),
    );

    let runtime = runtime_in(&dir);
    let warm = Plugin::load(&runtime, name, &bytes, Limits::default()).expect("loading");
    let inline =
        Plugin::load_with_warm(&runtime, name, &bytes, Limits::default(), 0).expect("loading");
    let request = ReconcileRequest {
        parent: parent(1 << 10).into(),
        children: vec![],
        config: json!({}),
        finalizing: false,
    };
    let reader: Arc<dyn ObjectReader> = Arc::new(NoObjects);
    let to_result = |plugin: &Plugin| {
        let start = Instant::now();
        plugin.reconcile_then(&request, reader.clone(), |result| {
            let elapsed = start.elapsed();
            std::hint::black_box(result.expect("the plugin answers"));
            elapsed
        })
    };
    for _ in 0..calls / 10 {
        to_result(&warm);
        to_result(&inline);
    }
    let fresh = median((0..calls).map(|_| to_result(&inline)).collect());
    let hot = median((0..calls).map(|_| to_result(&warm)).collect());
    let whole = median(
        (0..calls)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(warm.reconcile(&request, reader.clone()).expect("answers"));
                start.elapsed()
            })
            .collect(),
    );
    Row {
        language,
        size: bytes.len(),
        compile,
        cached,
        fresh,
        hot,
        whole,
    }
}

fn main() {
    let scratch = std::env::temp_dir().join(format!("reconhost-bench-lang-{}", std::process::id()));
    // LANGUAGES=py-noop,webapp-python measures those alone (no table of verdicts), for quick
    // comparisons while working on one language.
    let only = std::env::var("LANGUAGES").ok();
    let picked = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|n| n == name))
    };
    let rows: Vec<Row> = LANGUAGES
        .iter()
        .filter(|(name, ..)| picked(name))
        .map(|&(name, language, calls, compiles)| {
            // LANGUAGES_CALLS=n times n calls of each kind instead, for a profiler.
            let calls = std::env::var("LANGUAGES_CALLS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(calls);
            measure(&scratch, name, language, calls, compiles)
        })
        .collect();
    let _ = std::fs::remove_dir_all(&scratch);

    println!(
        "| plugin | component | cold compile | cached load | reconcile, fresh instance | reconcile, pre-made instance | whole call | fresh / Rust's |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let rust_fresh = rows
        .iter()
        .find(|r| r.language == "Rust")
        .map(|r| r.fresh.as_secs_f64());
    for r in &rows {
        let ratio = rust_fresh.map_or("–".to_owned(), |rust| {
            format!("{:.1}×", r.fresh.as_secs_f64() / rust)
        });
        println!(
            "| {} | {:.1} MB | {:.2} s | {} | {} | {} | {} | {ratio} |",
            r.language,
            r.size as f64 / 1e6,
            r.compile.as_secs_f64(),
            ms(r.cached),
            ms(r.fresh),
            ms(r.hot),
            ms(r.whole),
        );
    }
    if only.is_some() {
        return;
    }
    println!();
    println!("Targets (~1 KiB parent):");
    let judge = |what: String, measured: Duration, target: Duration| {
        let verdict = if measured <= target {
            "met".to_owned()
        } else {
            format!(
                "missed by {:.1}×",
                measured.as_secs_f64() / target.as_secs_f64()
            )
        };
        println!(
            "- {what}: {} against {}: {verdict}",
            ms(measured),
            ms(target)
        );
    };
    for r in &rows[1..3] {
        let target = if r.language == "Python" {
            Duration::from_millis(1)
        } else {
            Duration::from_micros(500)
        };
        judge(
            format!("{} reconcile, fresh instance", r.language),
            r.fresh,
            target,
        );
    }
    for r in &rows[..3] {
        judge(
            format!("{} cached load", r.language),
            r.cached,
            Duration::from_millis(50),
        );
    }
}
