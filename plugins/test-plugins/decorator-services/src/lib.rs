//! Test plugin: a decorator on StatefulSets, Metacontroller's service-per-pod. Each StatefulSet
//! it is given gets one Service per replica, `<name>-<ordinal>`, selecting that Pod by the
//! `statefulset.kubernetes.io/pod-name` label. It also asks for a status field and a
//! condition, which the host must not write on an object the plugin does not own and whose
//! kind no CRD describes. It annotates the StatefulSet with the number of Services
//! (`example.com/services`, contract 0.2's parent metadata). It holds a finalizer and finalizes
//! at once.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("service-per-pod", Kind::new("apps/v1", "StatefulSet"))
            .child(Kind::new("v1", "Service"))
            .finalizer()
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        if request.finalizing {
            return Ok(Response::new().finalized());
        }
        let name = request.name().to_owned();
        let replicas = request.parent["spec"]["replicas"].as_i64().unwrap_or(1);
        let mut response = Response::new();
        for ordinal in 0..replicas {
            let pod = format!("{name}-{ordinal}");
            response = response.child(json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": pod},
                "spec": {
                    "selector": {"statefulset.kubernetes.io/pod-name": pod},
                    "ports": [{"port": 80}],
                },
            }));
        }
        Ok(response
            .parent_annotation("example.com/services", &replicas.to_string())
            .status(json!({"decoratedBy": "service-per-pod"}))
            .ready(true, "Decorated", &format!("{replicas} services")))
    }
}

reconhost_sdk::export!(Plugin);
