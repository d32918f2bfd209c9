// The canary plugin's logic, included by rollout-v1 and rollout-good, which differ only in
// VERSION (and so in their digests). Not a module: each crate defines VERSION before it.

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("canary", Kind::new("test.reconhost.dev/v1", "Canary"))
            .version(VERSION)
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
