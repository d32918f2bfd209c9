//! Test plugin: counts its calls in a static, to show every call starts afresh.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-state-leak",
            Kind::new("test.reconhost.dev/v1", "Widget"),
        )
        .child(Kind::new("v1", "ConfigMap"))
    }

    #[allow(
        unused_variables,
        unreachable_code,
        reason = "each fixture misbehaves in its own way"
    )]
    fn reconcile(request: Request) -> Result<Response, Error> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let seen = CALLS.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new().status(json!({"callsBefore": seen})))
    }
}

reconhost_sdk::export!(Plugin);
