//! Test plugin: a decorator on CustomResourceDefinitions, as Metacontroller's examples make
//! roles per CRD. Each CRD it is given gets a ClusterRole `<crd>-reader` that may get, list and
//! watch the CRD's resources. It also asks for a `Ready` condition, which the host must not
//! write into a CRD's status (a built-in kind's, owned by the API server).
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "crd-roles",
            Kind::new("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        )
        .child(Kind::new("rbac.authorization.k8s.io/v1", "ClusterRole"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec = &request.parent["spec"];
        let (Some(group), Some(plural)) =
            (spec["group"].as_str(), spec["names"]["plural"].as_str())
        else {
            return Err(Error::permanent(
                "a CRD without spec.group or spec.names.plural",
            ));
        };
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": format!("{}-reader", request.name())},
            "rules": [{"apiGroups": [group], "resources": [plural], "verbs": ["get", "list", "watch"]}],
        });
        Ok(Response::new()
            .child(role)
            .ready(true, "RoleMade", "a reader ClusterRole exists"))
    }
}

reconhost_sdk::export!(Plugin);
