//! Test plugin: puts a child in another namespace.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-foreign-namespace",
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
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": request.name(), "namespace": "kube-system"}
        })))
    }
}

reconhost_sdk::export!(Plugin);
