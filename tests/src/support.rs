//! Small helpers the suites share: per-test namespaces and bounded waiting.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

/// Creates a namespace named `<prefix>-<unique suffix>` and returns its name. Tests isolate
/// themselves in their own namespaces so they can share one control plane and run in parallel.
pub async fn namespace(client: &kube::Client, prefix: &str) -> String {
    let name = format!("{prefix}-{}", unique_suffix());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
        .expect("a namespace literal");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    name
}

/// A short suffix unique within a run: the process id and a counter, in base 36.
pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}{}", radix36(std::process::id()), radix36(n))
}

fn radix36(mut n: u32) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// Polls `check` every 100 ms until it returns `Some`, and panics naming `what` after `timeout`.
/// Waiting is bounded and the failure says what did not happen; the timeout is a limit, not a
/// measurement.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll(timeout, Duration::from_millis(100), what, check).await
}

/// Polls `check` every `every` until it returns `Some`, and panics naming `what` after
/// `timeout`.
pub async fn poll<T, F, Fut>(timeout: Duration, every: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {} s waiting for {what}",
            timeout.as_secs()
        );
        tokio::time::sleep(every).await;
    }
}
