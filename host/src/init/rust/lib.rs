//! `{{name}}`: a `{{kind}}` ({{group}}/{{version}}) becomes a ConfigMap named after it, holding
//! `spec.message`.
//!
//! The spec is read straight from the parent's JSON into `Spec`, and the ConfigMap is written
//! from `ConfigMap`, a struct with only the fields this plugin owns (server-side apply merges
//! them into the object): typed, and small once compiled. `reconhost_sdk::json!` and
//! `serde_json::Value` work too, at some cost in size and speed (see the SDK's docs).

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};
use serde::{Deserialize, Serialize};

/// The plugin.
pub struct Plugin;

/// `{{kind}}.spec`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// What the ConfigMap holds; required and non-empty.
    #[serde(default)]
    pub message: String,
}

/// The ConfigMap, as far as this plugin owns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigMap<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata<'a>,
    data: Message<'a>,
}

#[derive(Serialize)]
struct Metadata<'a> {
    name: &'a str,
}

/// The ConfigMap's data, and the parent's status.
#[derive(Serialize)]
struct Message<'a> {
    message: &'a str,
}

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("{{name}}", Kind::new("{{group}}/{{version}}", "{{kind}}"))
            .version(env!("CARGO_PKG_VERSION"))
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec: Spec = request.spec()?;
        if spec.message.is_empty() {
            return Err(Error::permanent("spec.message must not be empty"));
        }
        let config_map = ConfigMap {
            api_version: "v1",
            kind: "ConfigMap",
            metadata: Metadata {
                name: request.name(),
            },
            data: Message {
                message: &spec.message,
            },
        };
        Ok(Response::new()
            .child(config_map)
            .status(Message {
                message: &spec.message,
            })
            .ready(true, "ConfigMapWritten", "the ConfigMap holds the message"))
    }
}

reconhost_sdk::export!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;
    use reconhost_sdk::{ConditionStatus, Value, json};

    fn parent(spec: Value) -> Request {
        Request::new(json!({
            "apiVersion": "{{group}}/{{version}}", "kind": "{{kind}}",
            "metadata": {"name": "example", "namespace": "default", "generation": 1},
            "spec": spec
        }))
    }

    #[test]
    fn a_message_should_become_a_config_map() {
        let response = Plugin::reconcile(parent(json!({"message": "hello"}))).unwrap();
        assert_eq!(response.children.len(), 1);
        let config_map = &response.children[0].object;
        assert_eq!(config_map["kind"], "ConfigMap");
        assert_eq!(config_map["metadata"]["name"], "example");
        assert_eq!(config_map["data"]["message"], "hello");
        assert_eq!(response.conditions[0].status, ConditionStatus::True);
    }

    #[test]
    fn an_empty_message_should_be_a_permanent_error() {
        let err = Plugin::reconcile(parent(json!({"message": ""}))).unwrap_err();
        assert_eq!(err, Error::permanent("spec.message must not be empty"));
    }
}
