//! The input of one reconcile.

use serde::Deserialize;

use crate::object::message;
use crate::wit::reconhost::plugin::types as wit;
use crate::{Error, Object};

/// Everything the host observed about one parent, as the JSON text it sent: read it with the
/// typed accessors ([`spec`](Self::spec), [`config`](Self::config), [`child`](Self::child) and
/// [`Object::parse`]), which parse only what you ask for.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The parent object.
    pub parent: Object,
    /// Its observed children (objects of the declared child kinds whose controller
    /// ownerReference is the parent).
    pub children: Vec<Object>,
    /// The plugin's configuration, `{}` if none.
    pub config: Object,
    /// The parent is being deleted; clean up and answer [`crate::Response::finalized`].
    pub finalizing: bool,
}

/// `{"spec": T}`: the parent with everything but its spec skipped.
#[derive(Deserialize)]
struct SpecOf<T> {
    #[serde(default = "Option::default")]
    spec: Option<T>,
}

impl Request {
    /// A request for `parent` (a `serde_json::Value`, e.g. from `json!`, or an [`Object`]),
    /// with no children and no configuration: for tests and native benchmarks.
    pub fn new(parent: impl Into<Object>) -> Self {
        Self {
            parent: parent.into(),
            children: Vec::new(),
            config: Object::from_json("{}"),
            finalizing: false,
        }
    }

    pub(crate) fn from_wit(request: wit::Request) -> Self {
        Self {
            parent: Object::from_json(request.parent),
            children: request
                .children
                .into_iter()
                .map(Object::from_json)
                .collect(),
            config: Object::from_json(request.config),
            finalizing: request.finalizing,
        }
    }

    /// The parent's name.
    pub fn name(&self) -> &str {
        self.parent.name()
    }

    /// The parent's namespace (empty for a cluster-scoped parent).
    pub fn namespace(&self) -> &str {
        self.parent.namespace()
    }

    /// The parent's `metadata.generation`.
    pub fn generation(&self) -> i64 {
        self.parent.generation()
    }

    /// The parent's `spec`, read into `T` (a missing spec reads as `{}`, so `T`'s defaults
    /// apply). `T` may borrow from the request: `&'a str` and `Cow<'a, str>` fields avoid a
    /// copy. A spec that does not fit `T` is a permanent error naming the problem (`invalid
    /// spec: ...`), since retrying cannot fix it.
    ///
    /// # Errors
    /// [`Error::Permanent`] when the spec does not fit `T`.
    pub fn spec<'a, T: Deserialize<'a>>(&'a self) -> Result<T, Error> {
        let invalid =
            |e: serde_json::Error| Error::permanent(format!("invalid spec: {}", message(&e)));
        match self.parent.parse::<SpecOf<T>>().map_err(invalid)?.spec {
            Some(spec) => Ok(spec),
            None => serde_json::from_str("{}").map_err(invalid),
        }
    }

    /// A string field of the spec, if present. Parses the parent into a `serde_json::Value`
    /// (see [`Object::value`]); [`spec`](Self::spec) is the typed way.
    pub fn spec_str(&self, field: &str) -> Option<&str> {
        self.parent["spec"][field].as_str()
    }

    /// The plugin configuration, read into `T` (borrowing as [`spec`](Self::spec) does).
    ///
    /// # Errors
    /// [`Error::Permanent`] when the configuration does not fit `T`.
    pub fn config<'a, T: Deserialize<'a>>(&'a self) -> Result<T, Error> {
        self.config
            .parse()
            .map_err(|e| Error::permanent(format!("invalid plugin configuration: {}", message(&e))))
    }

    /// The observed child of this apiVersion, kind and name, if any; read it with
    /// [`Object::parse`].
    pub fn child(&self, api_version: &str, kind: &str, name: &str) -> Option<&Object> {
        self.children.iter().find(|c| c.is(api_version, kind, name))
    }

    /// The observed child of a k8s-openapi type, read into it, if any (and if it fits).
    ///
    /// k8s-openapi's types read and write every field of their kind, which costs a plugin
    /// about 0.5 MiB of component for a Deployment; a small struct of the fields you read,
    /// through [`child`](Self::child) and [`Object::parse`], costs a few KiB.
    #[cfg(feature = "k8s-openapi")]
    pub fn child_as<K>(&self, name: &str) -> Option<K>
    where
        K: k8s_openapi::Resource + serde::de::DeserializeOwned,
    {
        self.child(K::API_VERSION, K::KIND, name)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Spec<'a> {
        #[serde(default)]
        image: &'a str,
        #[serde(default)]
        replicas: i32,
    }

    fn parent(spec: serde_json::Value) -> Request {
        Request::new(json!({"apiVersion": "example.com/v1", "kind": "Shop",
            "metadata": {"name": "shop", "namespace": "a", "generation": 4}, "spec": spec}))
    }

    #[test]
    fn the_spec_should_be_read_into_a_borrowing_type() {
        let request = parent(json!({"image": "nginx", "replicas": 2}));
        assert_eq!(
            request.spec::<Spec>().unwrap(),
            Spec {
                image: "nginx",
                replicas: 2
            }
        );
        assert_eq!(
            (request.name(), request.namespace(), request.generation()),
            ("shop", "a", 4)
        );
        assert_eq!(request.spec_str("image"), Some("nginx"));
    }

    #[test]
    fn a_missing_spec_should_read_as_an_empty_one() {
        let request = Request::new(json!({"metadata": {"name": "shop"}}));
        assert_eq!(
            request.spec::<Spec>().unwrap(),
            Spec {
                image: "",
                replicas: 0
            }
        );
    }

    #[test]
    fn a_spec_that_does_not_fit_should_be_a_permanent_error_without_a_position() {
        let request = parent(json!({"imag": "nginx"}));
        assert_eq!(
            request.spec::<Spec>().unwrap_err(),
            Error::permanent("invalid spec: unknown field `imag`, expected `image` or `replicas`")
        );
        let request = parent(json!({"replicas": "two"}));
        assert_eq!(
            request.spec::<Spec>().unwrap_err(),
            Error::permanent("invalid spec: invalid type: string \"two\", expected i32")
        );
    }

    #[test]
    fn the_config_should_be_read_into_a_type() {
        #[derive(Deserialize)]
        struct Config {
            level: u8,
        }
        let mut request = parent(json!({}));
        request.config = json!({"level": 3}).into();
        assert_eq!(request.config::<Config>().unwrap().level, 3);
        request.config = json!({"level": "high"}).into();
        assert!(matches!(
            request.config::<Config>(),
            Err(Error::Permanent(m)) if m.starts_with("invalid plugin configuration: invalid type")
        ));
    }

    #[test]
    fn a_child_should_be_found_by_kind_and_name() {
        let mut request = parent(json!({}));
        request.children = vec![
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop"}}).into(),
            Object::from_json(
                r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"shop"}}"#,
            ),
        ];
        let found = request.child("apps/v1", "Deployment", "shop").unwrap();
        assert_eq!(found.kind(), "Deployment");
        assert!(request.child("apps/v1", "Deployment", "other").is_none());
        assert!(request.child("v1", "Service", "shop").is_some());
    }

    #[test]
    fn from_wit_should_keep_the_texts() {
        let request = Request::from_wit(wit::Request {
            parent: r#"{"metadata":{"name":"p"}}"#.into(),
            children: vec![r#"{"kind":"ConfigMap"}"#.into()],
            config: "{}".into(),
            finalizing: true,
        });
        assert_eq!(request.name(), "p");
        assert_eq!(request.children[0].json(), r#"{"kind":"ConfigMap"}"#);
        assert!(request.finalizing);
    }
}
