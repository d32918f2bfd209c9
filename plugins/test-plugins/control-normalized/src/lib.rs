//! Test plugin: a `Quota` parent owns one ResourceQuota whose quantities the API server stores
//! in another form than the plugin writes them (`0.5` CPU as `500m`, `1024Mi` as `1Gi`), so
//! the desired body never equals the stored object field for field. The control-loop tests
//! check that reconciling it again writes nothing.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "control-normalized",
            Kind::new("test.reconhost.dev/v1", "Quota"),
        )
        .child(Kind::new("v1", "ResourceQuota"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        Ok(Response::new()
            .child(json!({"apiVersion": "v1", "kind": "ResourceQuota",
                          "metadata": {"name": request.name()},
                          "spec": {"hard": {"requests.cpu": "0.5", "requests.memory": "1024Mi"}}}))
            .ready(true, "QuotaSet", "the quota is in place"))
    }
}

reconhost_sdk::export!(Plugin);
