//! Test plugin: reconciles ConfigMaps. With a finalizer it would hold every ConfigMap in the
//! cluster; the host refuses a built-in parent kind unless its operator allows it.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("builtin-parent", Kind::new("v1", "ConfigMap")).finalizer()
    }

    fn reconcile(_: Request) -> Result<Response, Error> {
        Ok(Response::new())
    }
}

reconhost_sdk::export!(Plugin);
