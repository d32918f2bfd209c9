//! Test plugin: a namespaced `Probe` parent with ClusterRole children. A namespaced parent's
//! children live in its namespace; the host refuses the plugin when it loads.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("cluster-child", Kind::new("test.reconhost.dev/v1", "Probe"))
            .child(Kind::new("rbac.authorization.k8s.io/v1", "ClusterRole"))
    }

    fn reconcile(_: Request) -> Result<Response, Error> {
        Ok(Response::new())
    }
}

reconhost_sdk::export!(Plugin);
