//! Test plugin: a candidate version of `canary` that traps (panics) on every parent.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("canary", Kind::new("test.reconhost.dev/v1", "Canary"))
            .version("3.0.0")
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        reconhost_sdk::host::info("served");
        panic!("version 3 cannot reconcile {}", request.name());
    }
}

reconhost_sdk::export!(Plugin);
