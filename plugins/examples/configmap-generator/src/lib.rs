//! `configmap-generator`: a `ConfigMapGenerator` becomes one ConfigMap, named after it, holding
//! `spec.content` as its data.

use std::collections::BTreeMap;

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};
use serde::Deserialize;

/// The plugin.
pub struct ConfigMapGenerator;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    content: BTreeMap<String, String>,
}

impl Reconciler for ConfigMapGenerator {
    fn info() -> Info {
        Info::new(
            "configmap-generator",
            Kind::new("examples.reconhost.dev/v1alpha1", "ConfigMapGenerator"),
        )
        .version(env!("CARGO_PKG_VERSION"))
        .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec: Spec = request.spec()?;
        let keys = spec.content.len();
        Ok(Response::new()
            .child(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": request.name(), "labels": {"app.kubernetes.io/managed-by": "reconhost"}},
                "data": spec.content,
            }))
            .status(json!({"keys": keys}))
            .ready(true, "Generated", &format!("ConfigMap {} holds {keys} keys", request.name())))
    }
}

reconhost_sdk::export!(ConfigMapGenerator);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_should_become_the_configmap_data() {
        let request = Request::new(
            json!({"metadata": {"name": "gen", "namespace": "a"}, "spec": {"content": {"k": "v"}}}),
        );
        let response = ConfigMapGenerator::reconcile(request).unwrap();
        assert_eq!(response.children[0].object["data"], json!({"k": "v"}));
        assert_eq!(response.children[0].object["metadata"]["name"], "gen");
    }
}
