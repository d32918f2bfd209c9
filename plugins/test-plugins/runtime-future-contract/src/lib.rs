//! Test plugin: is built against a contract version the host does not implement,
//! `reconhost:plugin@99.0.0` (wit/plugin.wit, a copy of 0.1.0 under a version that will never
//! ship). Uses wit-bindgen directly, as a non-SDK plugin would.
#![allow(missing_docs, reason = "a test fixture")]

wit_bindgen::generate!({ world: "reconciler", path: "wit" });

use reconhost::plugin::types::KindRef;

struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        let kind = |api_version: &str, kind: &str| KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        };
        PluginInfo {
            name: "runtime-future-contract".into(),
            version: "0.1.0".into(),
            parent: kind("test.reconhost.dev/v1", "Widget"),
            children: vec![kind("v1", "ConfigMap")],
            reads: vec![],
            finalizer: false,
        }
    }

    fn reconcile(_request: Request) -> Result<Response, Error> {
        Ok(Response {
            children: vec!["{\"apiVersion\": \"v1\", \"kind\": not json".into()],
            status: None,
            conditions: vec![],
            events: vec![],
            requeue_after_ms: None,
            finalized: false,
        })
    }
}

export!(Plugin);
