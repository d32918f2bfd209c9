//! `make bench`: what one reconcile costs through the plugin runtime, beside the same logic
//! compiled natively and behind an HTTP endpoint on loopback (the webhook model of
//! Metacontroller and Crossplane functions); and how long each example takes to compile and to
//! load from the compiled-code cache.
//!
//! All variants run in the same process on the same inputs, so the ratios hold even on a noisy
//! machine; every figure is a median over many runs. Results go to stdout as a Markdown table.

#[path = "one_call/mod.rs"]
mod one_call;
#[path = "reconcile/small.rs"]
mod small;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use reconhost::model::ReconcileRequest;
use reconhost::runtime::{Limits, MemoryReset, NoObjects, Plugin, Runtime, RuntimeConfig};
use reconhost_sdk::Reconciler as _;
use serde_json::{Value, json};

use one_call::{median, parent, plugin_dir};

const ITERATIONS: usize = 2000;

/// The native baseline does what the guest does: take the JSON text, run the logic (which reads
/// what it needs of the text), serialize.
fn native(parent_text: &str) -> usize {
    let request = reconhost_sdk::Request::new(reconhost_sdk::Object::from_json(parent_text));
    let response = webapp::WebApp::reconcile(request).unwrap();
    response
        .children
        .iter()
        .map(|c| c.object.json().len())
        .sum::<usize>()
        + response.status.map_or(0, |s| s.json().len())
}

fn time_each(n: usize, mut f: impl FnMut()) -> Duration {
    let samples = (0..n)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    median(samples)
}

/// CPU time of the whole process per call of `f` (all threads: for HTTP, the client and the
/// server; for wasm, the epoch ticker too): the median over 5 batches of `n / 5` calls.
/// Capacity is bounded by CPU, not by latency, so this is what reconciles per core follow.
fn cpu_each(n: usize, mut f: impl FnMut()) -> Duration {
    fn process_cpu() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
    let batch = (n / 5).max(1);
    let samples = (0..5)
        .map(|_| {
            let start = process_cpu();
            for _ in 0..batch {
                f();
            }
            (process_cpu() - start) / batch as u32
        })
        .collect();
    median(samples)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// A plugin timed three ways on one request: to the result with a pre-made instance (what a
/// reconcile waits for), to the result with an instance made inline, and the whole call with a
/// pre-made instance (teardown and the next instance included: what a reconcile costs its
/// thread). Each after a warm-up.
struct Timings {
    hot: Duration,
    fresh: Duration,
    whole: Duration,
}

fn three_ways(warm: &Plugin, inline: &Plugin, request: &ReconcileRequest, n: usize) -> Timings {
    let reader: Arc<dyn reconhost::runtime::ObjectReader> = Arc::new(NoObjects);
    let to_result = |plugin: &Plugin| {
        let start = Instant::now();
        plugin.reconcile_then(request, reader.clone(), |result| {
            let elapsed = start.elapsed();
            std::hint::black_box(result.unwrap());
            elapsed
        })
    };
    for _ in 0..50 {
        to_result(warm);
        to_result(inline);
    }
    Timings {
        hot: median((0..n).map(|_| to_result(warm)).collect()),
        fresh: median((0..n).map(|_| to_result(inline)).collect()),
        whole: time_each(n, || {
            std::hint::black_box(warm.reconcile(request, reader.clone()).unwrap());
        }),
    }
}

async fn serve_http() -> SocketAddr {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/reconcile",
        post(|body: String| async move {
            let request = reconhost_sdk::Request::new(reconhost_sdk::Object::from_json(body));
            let response = webapp::WebApp::reconcile(request).unwrap();
            // The SDK answers JSON text: the body is put together from it, as a webhook would.
            let children: Vec<&str> = response.children.iter().map(|c| c.object.json()).collect();
            let status = response.status.as_ref().map_or("null", |s| s.json());
            format!(
                r#"{{"children":[{}],"status":{status}}}"#,
                children.join(",")
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn http_call(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
    url: &str,
    body: &str,
) -> usize {
    let request = http::Request::post(url)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value: Value = serde_json::from_slice(&bytes).unwrap();
    value["children"].as_array().map_or(0, Vec::len)
}

fn main() {
    let cache = std::env::temp_dir().join(format!("reconhost-bench-{}", std::process::id()));
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: cache.clone(),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let bytes = std::fs::read(plugin_dir().join("webapp.wasm"))
        .expect("build the plugins first: make plugins");
    let warm = Plugin::load(&runtime, "webapp", &bytes, Limits::default()).unwrap();
    let inline = Plugin::load_with_warm(&runtime, "webapp", &bytes, Limits::default(), 0).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let addr = rt.block_on(serve_http());
    let url = format!("http://{addr}/reconcile");
    let keepalive =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<Full<Bytes>>();
    let fresh_conn =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build_http::<Full<Bytes>>();

    println!(
        "| parent | native | wasm, pre-made instance (hot path) | wasm, fresh instance inline | HTTP keep-alive | HTTP new connection | hot path / native | HTTP keep-alive / hot path |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut verdicts = Vec::new();
    let mut cpu_rows = Vec::new();
    for size in [1 << 10, 10 << 10, 100 << 10] {
        let parent = parent(size);
        let text = parent.to_string();
        let request = request(parent.clone());
        let n = if size > 50 << 10 {
            ITERATIONS / 4
        } else {
            ITERATIONS
        };
        native(&text);

        let native_t = time_each(n, || {
            std::hint::black_box(native(&text));
        });
        // The hot path: a pre-made instance, the result timed as the reconciler receives it
        // (the used instance is torn down and the next one made after that, on this thread).
        let Timings {
            hot, fresh: cold, ..
        } = three_ways(&warm, &inline, &request, n);
        let http_keep = rt.block_on(async {
            let mut samples = Vec::with_capacity(n);
            for _ in 0..n {
                let start = Instant::now();
                std::hint::black_box(http_call(&keepalive, &url, &text).await);
                samples.push(start.elapsed());
            }
            median(samples)
        });
        let http_new = rt.block_on(async {
            let mut samples = Vec::with_capacity(n / 4);
            for _ in 0..n / 4 {
                let start = Instant::now();
                std::hint::black_box(http_call(&fresh_conn, &url, &text).await);
                samples.push(start.elapsed());
            }
            median(samples)
        });
        let reader: Arc<dyn reconhost::runtime::ObjectReader> = Arc::new(NoObjects);
        let cpu_native = cpu_each(n, || {
            std::hint::black_box(native(&text));
        });
        let cpu_wasm = cpu_each(n, || {
            std::hint::black_box(warm.reconcile(&request, reader.clone()).unwrap());
        });
        let cpu_http = cpu_each(n, || {
            std::hint::black_box(rt.block_on(http_call(&keepalive, &url, &text)));
        });
        cpu_rows.push(format!(
            "| {} KiB | {} | {} | {} | {:.1}× | {:.1}× |",
            text.len() / 1024,
            us(cpu_native),
            us(cpu_wasm),
            us(cpu_http),
            cpu_wasm.as_secs_f64() / cpu_native.as_secs_f64(),
            cpu_http.as_secs_f64() / cpu_wasm.as_secs_f64(),
        ));
        println!(
            "| {} KiB | {} | {} | {} | {} | {} | {:.1}× | {:.1}× |",
            text.len() / 1024,
            us(native_t),
            us(hot),
            us(cold),
            us(http_keep),
            us(http_new),
            hot.as_secs_f64() / native_t.as_secs_f64(),
            http_keep.as_secs_f64() / hot.as_secs_f64(),
        );
        if size == 1 << 10 {
            let ratio = |measured: f64, target: f64, lower_is_better: bool| {
                let met = if lower_is_better {
                    measured <= target
                } else {
                    measured >= target
                };
                let by = if lower_is_better {
                    measured / target
                } else {
                    target / measured
                };
                if met {
                    "met".to_owned()
                } else {
                    format!("missed by {by:.1}x")
                }
            };
            let hot_us = hot.as_secs_f64() * 1e6;
            let vs_native = hot.as_secs_f64() / native_t.as_secs_f64();
            let vs_http = http_keep.as_secs_f64() / hot.as_secs_f64();
            verdicts.push(format!(
                "hot path {hot_us:.1} us, target <= 15 us: {}",
                ratio(hot_us, 15.0, true)
            ));
            verdicts.push(format!(
                "hot path / native {vs_native:.1}x, target <= 3x: {}",
                ratio(vs_native, 3.0, true)
            ));
            verdicts.push(format!(
                "HTTP keep-alive / hot path {vs_http:.1}x, target >= 8x: {}",
                ratio(vs_http, 8.0, false)
            ));
        }
    }
    println!();
    println!(
        "| parent | CPU per reconcile: native | wasm, whole call (teardown and next instance included) | HTTP keep-alive (client and server) | wasm / native | HTTP / wasm |"
    );
    println!("|---|---|---|---|---|---|");
    for row in &cpu_rows {
        println!("{row}");
    }
    memory_reset(&bytes, &cache);
    verdicts.extend(small::small_plugins(&runtime, &cache, ITERATIONS));
    let floor = empty_floor(&runtime);
    verdicts.push(format!(
        "empty reconcile {:.1} us to the result, target <= 15 us: {}",
        floor.as_secs_f64() * 1e6,
        if floor <= Duration::from_micros(15) {
            "met".to_owned()
        } else {
            format!("missed by {:.1}x", floor.as_secs_f64() * 1e6 / 15.0)
        }
    ));

    println!();
    println!("Targets (webapp, ~1 KiB parent):");
    for v in &verdicts {
        println!("- {v}");
    }

    println!();
    println!(
        "| plugin | size | compiled code (.text) | cold compile | cached load (new engine, from disk) |"
    );
    println!("|---|---|---|---|---|");
    for name in [
        "webapp",
        "runtime-lean-webapp",
        "configmap-generator",
        "merged-config",
        "archiver",
    ] {
        let bytes = std::fs::read(plugin_dir().join(format!("{name}.wasm"))).unwrap();
        let compile = {
            let dir = cache.join(format!("cold-{name}"));
            let samples = (0..3)
                .map(|_| {
                    let _ = std::fs::remove_dir_all(&dir);
                    let runtime = Runtime::new(RuntimeConfig {
                        cache_dir: dir.clone(),
                        ..RuntimeConfig::default()
                    })
                    .unwrap();
                    let start = Instant::now();
                    Plugin::load_with_warm(&runtime, name, &bytes, Limits::default(), 0).unwrap();
                    start.elapsed()
                })
                .collect();
            median(samples)
        };
        let dir = cache.join(format!("cold-{name}"));
        let text = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .find_map(|e| small::text_size(&e.path()))
            .unwrap_or(0);
        let cached = median(
            (0..10)
                .map(|_| {
                    let runtime = Runtime::new(RuntimeConfig {
                        cache_dir: dir.clone(),
                        ..RuntimeConfig::default()
                    })
                    .unwrap();
                    let start = Instant::now();
                    let p = Plugin::load_with_warm(&runtime, name, &bytes, Limits::default(), 0)
                        .unwrap();
                    assert_eq!(p.provenance(), reconhost::runtime::Provenance::Cached);
                    start.elapsed()
                })
                .collect(),
        );
        println!(
            "| {name} | {} KiB | {} KiB | {:.1} ms | {:.2} ms |",
            bytes.len() / 1024,
            text / 1024,
            compile.as_secs_f64() * 1e3,
            cached.as_secs_f64() * 1e3
        );
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// webapp at 1 KiB under each way of resetting a used instance's memory, side by side: what a
/// reconcile waits for (to the result) and what it costs the thread in all (the teardown and
/// the next instance included), which is what bounds reconciles per core.
fn memory_reset(bytes: &[u8], cache: &std::path::Path) {
    let scan = matches!(MemoryReset::Auto.resolve(), MemoryReset::Scan { .. });
    println!();
    println!(
        "| memory reset (webapp, 1 KiB) | to the result, pre-made | to the result, inline | whole call, pre-made |"
    );
    println!("|---|---|---|---|");
    let request = request(parent(1 << 10));
    let strategies = [
        (
            "memset 1 MiB",
            MemoryReset::Memset {
                keep_resident: 1 << 20,
            },
        ),
        ("memset 0", MemoryReset::Memset { keep_resident: 0 }),
        (
            "pagemap scan, 2 MiB",
            MemoryReset::Scan {
                keep_resident: 2 << 20,
            },
        ),
        (
            "pagemap scan, 8 MiB",
            MemoryReset::Scan {
                keep_resident: 8 << 20,
            },
        ),
    ];
    for (label, reset) in strategies {
        if matches!(reset, MemoryReset::Scan { .. }) && !scan {
            println!("| {label} | no PAGEMAP_SCAN on this kernel | | |");
            continue;
        }
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: cache.to_owned(),
            memory_reset: reset,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let warm = Plugin::load(&runtime, "webapp", bytes, Limits::default()).unwrap();
        let inline =
            Plugin::load_with_warm(&runtime, "webapp", bytes, Limits::default(), 0).unwrap();
        let Timings { hot, fresh, whole } = three_ways(&warm, &inline, &request, ITERATIONS);
        println!("| {label} | {} | {} | {} |", us(hot), us(fresh), us(whole));
    }
}

/// The floor: a plugin that desires nothing (`runtime-empty`), pre-made and inline, to the
/// result and whole; returns the pre-made time to the result.
fn empty_floor(runtime: &Runtime) -> Duration {
    let bytes = std::fs::read(plugin_dir().join("runtime-empty.wasm"))
        .expect("build the plugins first: make plugins");
    let warm = Plugin::load(runtime, "runtime-empty", &bytes, Limits::default()).unwrap();
    let inline =
        Plugin::load_with_warm(runtime, "runtime-empty", &bytes, Limits::default(), 0).unwrap();
    let Timings { hot, fresh, whole } =
        three_ways(&warm, &inline, &request(parent(1 << 10)), ITERATIONS);
    println!();
    println!(
        "| empty reconcile (1 KiB parent) | to the result, pre-made | to the result, inline | whole call, pre-made |"
    );
    println!("|---|---|---|---|");
    println!(
        "| runtime-empty | {} | {} | {} |",
        us(hot),
        us(fresh),
        us(whole)
    );
    hot
}

/// A request for `parent` with no children and no configuration.
fn request(parent: Value) -> ReconcileRequest {
    ReconcileRequest {
        parent: parent.into(),
        children: vec![],
        config: json!({}),
        finalizing: false,
    }
}
