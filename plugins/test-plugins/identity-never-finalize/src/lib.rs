//! Test plugin: a `Probe` parent gets the plugin's finalizer, and the plugin never reports its
//! cleanup finished. The host releases the parent after the plugin's finalize timeout.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "never-finalize",
            Kind::new("test.reconhost.dev/v1", "Probe"),
        )
        .finalizer()
    }

    fn reconcile(_: Request) -> Result<Response, Error> {
        Ok(Response::new())
    }
}

reconhost_sdk::export!(Plugin);
