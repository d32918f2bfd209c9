//! Test plugin: recurses until the stack overflows.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-stack-overflow",
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
        fn deeper(n: u64) -> u64 {
            if n == 0 {
                0
            } else {
                std::hint::black_box(deeper(std::hint::black_box(n - 1))) + 1
            }
        }
        let depth = deeper(u64::MAX);
        Ok(Response::new().status(json!({"depth": depth})))
    }
}

reconhost_sdk::export!(Plugin);
