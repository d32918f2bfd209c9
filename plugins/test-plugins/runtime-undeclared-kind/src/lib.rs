//! Test plugin: returns a child of a kind it did not declare.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-undeclared-kind",
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
        Ok(Response::new().child(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": request.name()}
        })))
    }
}

reconhost_sdk::export!(Plugin);
