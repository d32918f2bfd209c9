//! Test plugin: declares its parent kind as a child kind. Every child would be a new parent of
//! the same plugin; the host refuses it when it loads.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("self-child", Kind::new("test.reconhost.dev/v1", "Widget"))
            .child(Kind::new("test.reconhost.dev/v1", "Widget"))
    }

    fn reconcile(_: Request) -> Result<Response, Error> {
        Ok(Response::new())
    }
}

reconhost_sdk::export!(Plugin);
