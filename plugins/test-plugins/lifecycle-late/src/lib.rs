//! Test plugin: reconciles `Late` (late.test.reconhost.dev/v1), whose CRD no control plane
//! starts with; the lifecycle test installs it after the plugin, which must then start without
//! a restart. A `Late` parent owns one ConfigMap `<parent>-late`.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("late", Kind::new("late.test.reconhost.dev/v1", "Late"))
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        Ok(Response::new().child(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{}-late", request.name())},
            "data": {"late": "true"}
        })))
    }
}

reconhost_sdk::export!(Plugin);
