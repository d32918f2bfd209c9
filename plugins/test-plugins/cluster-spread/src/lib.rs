//! Test plugin: a cluster-scoped `Spread` gets a ConfigMap, named after it, in each namespace
//! of `spec.namespaces` — whether or not that namespace exists, so the tests can see how the
//! host fails one child — and, with `spec.ownNamespace`, a Namespace of that name (a
//! cluster-scoped child). Each named namespace is read with `host::get`, so one created later
//! wakes the parent; `status.seen` lists those that existed. `spec.unplaced` adds a ConfigMap
//! with no namespace, which the host must refuse for a cluster-scoped parent.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, host, json};

struct Plugin;

fn namespace() -> Kind {
    Kind::new("v1", "Namespace")
}

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "cluster-spread",
            Kind::new("test.reconhost.dev/v1", "Spread"),
        )
        .child(Kind::new("v1", "ConfigMap"))
        .child(namespace())
        .reads(namespace())
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec = &request.parent["spec"];
        let name = request.name().to_owned();
        let mut seen = Vec::new();
        let mut response = Response::new();
        for ns in spec["namespaces"].as_array().into_iter().flatten() {
            let ns = ns.as_str().unwrap_or_default();
            let found =
                host::get(&namespace(), "", ns).map_err(|e| Error::transient(e.to_string()))?;
            if found.is_some() {
                seen.push(ns.to_owned());
            }
            response = response.child(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns},
                "data": {"from": name},
            }));
        }
        if let Some(own) = spec["ownNamespace"].as_str() {
            response = response.child(json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": own},
            }));
        }
        if spec["unplaced"] == true {
            response = response.child(json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unplaced"},
            }));
        }
        Ok(response.status(json!({"seen": seen})))
    }
}

reconhost_sdk::export!(Plugin);
