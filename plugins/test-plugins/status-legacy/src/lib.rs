//! Test plugin: a `Legacy` parent (a CRD written for another controller: its status declares
//! `phase` and little else) with one ConfigMap child. `status.phase` is copied from the child's
//! `data.phase`, a key the plugin does not set, so a test can change the input the status is
//! computed from without touching the parent; `spec.extraStatus` is merged into the status, so
//! a test can make the plugin write a field the schema does not declare. It holds a finalizer
//! and finalizes at once, so a test can delete a parent whose last status is refused.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "status-legacy",
            Kind::new("test.reconhost.dev/v1", "Legacy"),
        )
        .child(Kind::new("v1", "ConfigMap"))
        .finalizer()
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let name = request.name().to_owned();
        let phase = request
            .child("v1", "ConfigMap", &name)
            .and_then(|c| c["data"]["phase"].as_str())
            .unwrap_or("Pending")
            .to_owned();
        let mut status = json!({"phase": phase});
        if let Some(extra) = request.parent["spec"]["extraStatus"].as_object() {
            for (k, v) in extra {
                status[k] = v.clone();
            }
        }
        let response = Response::new()
            .child(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"seed": request.spec_str("seed").unwrap_or("")},
            }))
            .status(status)
            .ready(true, "Copied", &format!("phase {phase}"));
        // Nothing to clean up; the status computed on the way out is written like any other.
        Ok(if request.finalizing {
            response.finalized()
        } else {
            response
        })
    }
}

reconhost_sdk::export!(Plugin);
