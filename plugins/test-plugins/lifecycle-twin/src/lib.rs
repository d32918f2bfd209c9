//! Test plugin: calls itself `stamp`, like lifecycle-v1, but reconciles `Twin`. Two plugins with
//! one name would share a field manager and a finalizer, so the host refuses the second.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("stamp", Kind::new("test.reconhost.dev/v1", "Twin"))
    }

    fn reconcile(_: Request) -> Result<Response, Error> {
        Ok(Response::new())
    }
}

reconhost_sdk::export!(Plugin);
