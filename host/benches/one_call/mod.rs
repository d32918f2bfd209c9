//! What the one-call benchmarks (`reconcile.rs`, `languages.rs`) share: where the components
//! are, the padded WebApp parent they are called on, and the median.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

/// Where `make plugins` put the components.
pub fn plugin_dir() -> PathBuf {
    std::env::var_os("RECONHOST_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/plugins")))
}

/// A WebApp parent padded with annotations to about `bytes` of JSON.
pub fn parent(bytes: usize) -> Value {
    let mut parent = json!({
        "apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": "team-a", "uid": "7d3c1e0a-0000-4000-8000-000000000001", "generation": 1,
                     "labels": {"team": "a"}, "annotations": {}},
        "spec": {"image": "registry.example/shop:1.2.3", "replicas": 3, "port": 8080}
    });
    let mut i = 0;
    while parent.to_string().len() < bytes {
        parent["metadata"]["annotations"][format!("example.com/note-{i}")] = json!("x".repeat(64));
        i += 1;
    }
    parent
}

/// The median of `samples` (which it sorts).
pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}
