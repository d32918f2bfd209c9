//! CustomResourceDefinitions a suite owns: installed fresh (replacing one an earlier run left on
//! a kept control plane) and waited on until served.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use super::CONVERGE;
use crate::support::eventually;

/// Installs `crd` (named `name`), replacing one left by an earlier run on a kept control plane,
/// and waits until it is served.
pub async fn install_crd(
    client: &kube::Client,
    name: &str,
    crd: Value,
) -> Api<CustomResourceDefinition> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(name).await.expect("reading the CRD").is_some() {
        crds.delete(name, &DeleteParams::default()).await.ok();
        eventually(CONVERGE, "the old CRD to go", || async {
            crds.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    let crd = serde_json::from_value(crd).expect("a CRD");
    crds.create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    eventually(CONVERGE, &format!("{name} to be established"), || async {
        let crd = crds.get(name).await.ok()?;
        let established = crd
            .status?
            .conditions?
            .into_iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established.then_some(())
    })
    .await;
    crds
}

/// A namespaced kind `kind` (plural `plural`) in group `test.reconhost.dev`, version `v1`, with
/// a status subresource whose schema declares the host's fields, and `spec` of `spec` (an
/// OpenAPI schema's properties).
pub fn test_crd(kind: &str, plural: &str, spec: Value) -> Value {
    let condition = json!({"type": "object", "required": ["type", "status"], "properties": {
        "type": {"type": "string"}, "status": {"type": "string"},
        "observedGeneration": {"type": "integer", "format": "int64"},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "reason": {"type": "string"}, "message": {"type": "string"},
    }});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.test.reconhost.dev")},
        "spec": {
            "group": "test.reconhost.dev",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": spec},
                    "status": {"type": "object", "properties": {
                        "observedGeneration": {"type": "integer", "format": "int64"},
                        "conditions": {"type": "array", "items": condition},
                    }},
                }}},
            }],
        },
    })
}
