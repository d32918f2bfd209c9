//! The input of one reconcile.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Error;
use crate::wit::reconhost::plugin::types as wit;

/// Everything the host observed about one parent.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The parent object.
    pub parent: Value,
    /// Its observed children (objects of the declared child kinds whose controller
    /// ownerReference is the parent).
    pub children: Vec<Value>,
    /// The plugin's configuration, `{}` if none.
    pub config: Value,
    /// The parent is being deleted; clean up and answer [`crate::Response::finalized`].
    pub finalizing: bool,
}

impl Request {
    /// A request built from JSON values, for tests and native benchmarks.
    pub fn new(parent: Value) -> Self {
        Self {
            parent,
            children: Vec::new(),
            config: Value::Object(Default::default()),
            finalizing: false,
        }
    }

    pub(crate) fn from_wit(request: wit::Request) -> Result<Self, String> {
        let parse = |what: &str, text: &str| {
            serde_json::from_str(text)
                .map_err(|e| format!("the host sent invalid JSON for {what}: {e}"))
        };
        Ok(Self {
            parent: parse("the parent", &request.parent)?,
            children: request
                .children
                .iter()
                .map(|c| parse("a child", c))
                .collect::<Result<_, _>>()?,
            config: parse("the configuration", &request.config)?,
            finalizing: request.finalizing,
        })
    }

    /// The parent's name.
    pub fn name(&self) -> &str {
        self.parent["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// The parent's namespace (empty for a cluster-scoped parent).
    pub fn namespace(&self) -> &str {
        self.parent["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    }

    /// The parent's `metadata.generation`.
    pub fn generation(&self) -> i64 {
        self.parent["metadata"]["generation"]
            .as_i64()
            .unwrap_or_default()
    }

    /// The parent's `spec`, deserialized. A spec that does not fit `T` is a permanent error
    /// naming the problem, since retrying cannot fix it.
    pub fn spec<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let spec = self
            .parent
            .get("spec")
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        serde_json::from_value(spec).map_err(|e| Error::permanent(format!("invalid spec: {e}")))
    }

    /// A string field of the spec, if present.
    pub fn spec_str(&self, field: &str) -> Option<&str> {
        self.parent["spec"][field].as_str()
    }

    /// The plugin configuration, deserialized.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_value(self.config.clone())
            .map_err(|e| Error::permanent(format!("invalid plugin configuration: {e}")))
    }

    /// The observed child of this kind and name, if any.
    pub fn child(&self, api_version: &str, kind: &str, name: &str) -> Option<&Value> {
        self.children.iter().find(|c| {
            c["apiVersion"] == api_version && c["kind"] == kind && c["metadata"]["name"] == name
        })
    }

    /// The observed child of a k8s-openapi type, deserialized, if any.
    pub fn child_as<K: k8s_openapi::Resource + DeserializeOwned>(&self, name: &str) -> Option<K> {
        let child = self.child(K::API_VERSION, K::KIND, name)?;
        serde_json::from_value(child.clone()).ok()
    }
}
