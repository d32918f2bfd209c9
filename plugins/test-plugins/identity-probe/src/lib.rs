//! Test plugin: a `Probe` parent reads the Secret `spec.secret` (`namespace/name`) and reports
//! what it saw in its status (`found`, `missing`, or the refusal), and owns one ConfigMap named
//! `spec.child` (default `<parent>-probe`). With it the identity tests see what a plugin may
//! read and write as its ServiceAccount, and that it cannot take over objects.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::host::{self, ReadError};
use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("probe", Kind::new("test.reconhost.dev/v1", "Probe"))
            .child(Kind::new("v1", "ConfigMap"))
            .reads(Kind::new("v1", "Secret"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec = &request.parent["spec"];
        let read = match spec["secret"].as_str().and_then(|s| s.split_once('/')) {
            None => "none".to_owned(),
            Some((ns, name)) => match host::get(&Kind::new("v1", "Secret"), ns, name) {
                Ok(Some(_)) => "found".to_owned(),
                Ok(None) => "missing".to_owned(),
                Err(ReadError::NotAllowed(m)) => format!("refused: {m}"),
                Err(e) => format!("error: {e}"),
            },
        };
        let child = spec["child"]
            .as_str()
            .map_or_else(|| format!("{}-probe", request.name()), str::to_owned);
        Ok(Response::new()
            .child(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": child},
                "data": {"probe": request.name()}
            }))
            .status(json!({"read": read})))
    }
}

reconhost_sdk::export!(Plugin);
