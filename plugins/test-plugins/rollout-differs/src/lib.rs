//! Test plugin: a candidate version of `canary` that writes another value for the parents whose
//! `spec.value` ends in 7 (one in ten), and what the stable version writes for the others.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("canary", Kind::new("test.reconhost.dev/v1", "Canary"))
            .version("2.0.0")
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        reconhost_sdk::host::info("served");
        let value = request.parent["spec"]["value"].as_i64().unwrap_or(0);
        let data = if value % 10 == 7 {
            format!("{value}-changed")
        } else {
            value.to_string()
        };
        Ok(Response::new()
            .child(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{}-canary", request.name())},
                "data": {"value": data}
            }))
            .status(json!({"value": value})))
    }
}

reconhost_sdk::export!(Plugin);
