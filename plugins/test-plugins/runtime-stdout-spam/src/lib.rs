//! Test plugin: prints to stdout without end.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-stdout-spam",
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
        for i in 0u64.. {
            println!("spam line {i}: all work and no play makes a dull plugin");
        }
        unreachable!()
    }
}

reconhost_sdk::export!(Plugin);
