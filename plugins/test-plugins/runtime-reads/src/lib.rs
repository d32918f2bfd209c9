//! Test plugin: reads through get and list and reports what it saw.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-reads",
            Kind::new("test.reconhost.dev/v1", "Widget"),
        )
        .child(Kind::new("v1", "ConfigMap"))
        .reads(Kind::new("v1", "ConfigMap"))
    }

    #[allow(
        unused_variables,
        unreachable_code,
        reason = "each fixture misbehaves in its own way"
    )]
    fn reconcile(request: Request) -> Result<Response, Error> {
        let cm = Kind::new("v1", "ConfigMap");
        let got = reconhost_sdk::host::get(&cm, request.namespace(), "settings")
            .map_err(|e| Error::transient(e.to_string()))?;
        let listed = reconhost_sdk::host::list(&cm, request.namespace(), "tier=web")
            .map_err(|e| Error::transient(e.to_string()))?;
        let denied =
            reconhost_sdk::host::get(&Kind::new("v1", "Secret"), request.namespace(), "token")
                .unwrap_err();
        let names: Vec<_> = listed
            .iter()
            .map(|o| o["metadata"]["name"].clone())
            .collect();
        reconhost_sdk::host::info("read settings");
        Ok(Response::new().status(json!({
            "got": got.map(|o| o["data"].clone()), "listed": names, "denied": denied.to_string()
        })))
    }
}

reconhost_sdk::export!(Plugin);
