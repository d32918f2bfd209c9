//! Test plugin: a second decorator on StatefulSets. Each gets a ConfigMap `<name>-config`
//! holding its replica count, beside what other decorators attach to the same StatefulSet.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("config-per-set", Kind::new("apps/v1", "StatefulSet"))
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let replicas = request.parent["spec"]["replicas"].as_i64().unwrap_or(1);
        Ok(Response::new().child(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": format!("{}-config", request.name())},
            "data": {"replicas": replicas.to_string()},
        })))
    }
}

reconhost_sdk::export!(Plugin);
