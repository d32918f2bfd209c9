//! Test plugin: a candidate version of `canary` that does exactly what the stable one does (only its
//! version differs, and so its digest).
//! A `Canary` parent owns one ConfigMap `<parent>-canary` holding `spec.value`; its status
//! repeats the value. Every call logs `served`, so a test can tell from the host's log (which
//! adds the parent and the digest of the code) which revision served which parent.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("canary", Kind::new("test.reconhost.dev/v1", "Canary"))
            .version("1.1.0")
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        reconhost_sdk::host::info("served");
        let value = request.parent["spec"]["value"].as_i64().unwrap_or(0);
        Ok(Response::new()
            .child(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{}-canary", request.name())},
                "data": {"value": value.to_string()}
            }))
            .status(json!({"value": value})))
    }
}

reconhost_sdk::export!(Plugin);
