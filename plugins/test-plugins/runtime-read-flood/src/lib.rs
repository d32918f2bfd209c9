//! Test plugin: calls `get` 2000 times in one reconcile, past what one call may read.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("read-flood", Kind::new("test.reconhost.dev/v1", "Widget"))
            .reads(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(_: Request) -> Result<Response, Error> {
        for i in 0..2000 {
            let _ = reconhost_sdk::host::get(&Kind::new("v1", "ConfigMap"), "a", &format!("c{i}"));
        }
        Ok(Response::new())
    }
}

reconhost_sdk::export!(Plugin);
