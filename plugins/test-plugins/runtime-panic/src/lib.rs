//! Test plugin: panics.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-panic",
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
        panic!("runtime-panic gave up on {}", request.name())
    }
}

reconhost_sdk::export!(Plugin);
