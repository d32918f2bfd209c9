//! Test plugin: a `Flaky` parent fails with a transient error while the ConfigMap
//! `<parent>-switch` in its namespace is missing or has `fail: "true"`; otherwise it owns one
//! ConfigMap `<parent>-out`. The control-loop tests flip the switch to watch backoff and recovery.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("control-flaky", Kind::new("test.reconhost.dev/v1", "Flaky"))
            .child(Kind::new("v1", "ConfigMap"))
            .reads(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let cm = Kind::new("v1", "ConfigMap");
        let switch = format!("{}-switch", request.name());
        let found = reconhost_sdk::host::get(&cm, request.namespace(), &switch)
            .map_err(|e| Error::transient(e.to_string()))?;
        match found {
            Some(s) if s["data"]["fail"] != "true" => {}
            _ => return Err(Error::transient(format!("the switch {switch} says fail"))),
        }
        Ok(Response::new()
            .child(json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": format!("{}-out", request.name())},
                          "data": {"ok": "true"}}))
            .ready(true, "SwitchOff", "the switch lets it through"))
    }
}

reconhost_sdk::export!(Plugin);
