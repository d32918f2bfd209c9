//! Test plugin: version 2 of `stamp`, which the upgrade tests replace with the other version.
//! A `Stamp` parent owns one ConfigMap `<parent>-stamp` holding `spec.value` and the version
//! that wrote it; the status says which version served and with which configuration. Each call
//! takes about 20 ms of wall-clock time and logs `start` and `end`, so a test can see from the
//! host's log that no parent was reconciled by both versions at once.
#![allow(missing_docs, reason = "a test fixture")]

use std::time::{Duration, Instant};

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

const VERSION: &str = "2";

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("stamp", Kind::new("test.reconhost.dev/v1", "Stamp"))
            .version("2.0.0")
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        reconhost_sdk::host::info("start");
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let value = request.parent["spec"]["value"].clone();
        let response = Response::new()
            .child(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{}-stamp", request.name())},
                "data": {"version": VERSION, "value": value.to_string()}
            }))
            .status(json!({"servedBy": VERSION, "value": value, "config": request.config}));
        reconhost_sdk::host::info("end");
        Ok(response)
    }
}

reconhost_sdk::export!(Plugin);
