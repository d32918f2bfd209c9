//! `configmap-generator`: a `ConfigMapGenerator` becomes one ConfigMap, named after it, holding
//! `spec.content` as its data.

use std::collections::BTreeMap;

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};
use serde::{Deserialize, Serialize};

/// The plugin.
pub struct ConfigMapGenerator;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    content: BTreeMap<String, String>,
}

/// The ConfigMap, as far as the plugin owns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigMap<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata<'a>,
    data: &'a BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Metadata<'a> {
    name: &'a str,
    labels: Labels,
}

#[derive(Serialize)]
struct Labels {
    #[serde(rename = "app.kubernetes.io/managed-by")]
    managed_by: &'static str,
}

#[derive(Serialize)]
struct Status {
    keys: usize,
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
        let config_map = ConfigMap {
            api_version: "v1",
            kind: "ConfigMap",
            metadata: Metadata {
                name: request.name(),
                labels: Labels {
                    managed_by: "reconhost",
                },
            },
            data: &spec.content,
        };
        Ok(Response::new()
            .child(config_map)
            .status(Status { keys })
            .ready(
                true,
                "Generated",
                &format!("ConfigMap {} holds {keys} keys", request.name()),
            ))
    }
}

reconhost_sdk::export!(ConfigMapGenerator);

#[cfg(test)]
mod tests {
    use super::*;
    use reconhost_sdk::json;

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
