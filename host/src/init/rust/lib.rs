//! `{{name}}`: a `{{kind}}` ({{group}}/{{version}}) becomes a ConfigMap named after it, holding
//! `spec.message`.

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};
use serde::Deserialize;

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
        let config_map = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": request.name()},
            "data": {"message": spec.message},
        });
        Ok(Response::new()
            .child(config_map)
            .status(json!({"message": spec.message}))
            .ready(true, "ConfigMapWritten", "the ConfigMap holds the message"))
    }
}

reconhost_sdk::export!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;
    use reconhost_sdk::ConditionStatus;

    fn parent(spec: serde_json::Value) -> Request {
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
