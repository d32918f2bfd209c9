//! Test plugin: `Stamp` parents with `Probe` children. With its twin, which makes
//! `Stamp` children of `Probe` parents, the host would reconcile its own output without
//! end; the host refuses the second of the two.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "stamps-make-probes",
            Kind::new("test.reconhost.dev/v1", "Stamp"),
        )
        .child(Kind::new("test.reconhost.dev/v1", "Probe"))
    }

    fn reconcile(_: Request) -> Result<Response, Error> {
        Ok(Response::new())
    }
}

reconhost_sdk::export!(Plugin);
