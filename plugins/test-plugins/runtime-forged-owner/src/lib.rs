//! Test plugin: sets ownerReferences on a child itself.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-forged-owner",
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
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": request.name(), "ownerReferences": [{
                "apiVersion": "v1", "kind": "Namespace", "name": "kube-system",
                "uid": "00000000-0000-0000-0000-000000000000", "controller": true
            }]}
        })))
    }
}

reconhost_sdk::export!(Plugin);
