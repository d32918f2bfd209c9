//! Test plugin: a `Slow` parent owns one ConfigMap `<parent>-out`, and each reconcile takes
//! 1.5 s of wall-clock time (inside the two-second deadline). It logs `working` as
//! it starts, so the shutdown test knows a reconcile is in flight.
#![allow(missing_docs, reason = "a test fixture")]

use std::time::{Duration, Instant};

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("control-slow", Kind::new("test.reconhost.dev/v1", "Slow"))
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        reconhost_sdk::host::info("working");
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1500) {
            std::hint::spin_loop();
        }
        Ok(Response::new().child(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{}-out", request.name())},
            "data": {"done": "true"}
        })))
    }
}

reconhost_sdk::export!(Plugin);
