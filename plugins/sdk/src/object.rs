//! One JSON object kept as its text and read on demand: what the host sends (the parent, the
//! observed children, the configuration, what `host::get` and `host::list` read) and what a
//! plugin answers (its children, the parent's status).

use std::any::Any;
use std::cell::OnceCell;
use std::fmt;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// One JSON value as its text: a Kubernetes object from the host, a desired child, a status,
/// the plugin configuration, a check's operand.
///
/// Nothing is parsed until it is read, and only what is read: [`parse`](Self::parse) reads the
/// text straight into a type of yours (with `&str` fields borrowed from the text where it holds
/// no escapes), the identity accessors ([`name`](Self::name), [`kind`](Self::kind), ...) read
/// only those fields, and [`value`](Self::value) or indexing (`object["spec"]["replicas"]`)
/// parses it into a `serde_json::Value` once, for code that walks it dynamically. A plugin
/// that only uses typed reads never links the `Value` parser, which keeps its component and
/// its compiled code small (see [the crate's docs](crate#typed-reads-small-plugins)).
///
/// ```
/// use reconhost_sdk::{Object, json};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct Observed<'a> {
///     #[serde(borrow)]
///     status: Option<Status<'a>>,
/// }
///
/// #[derive(Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct Status<'a> {
///     ready_replicas: Option<i32>,
///     phase: Option<&'a str>,
/// }
///
/// let deployment = Object::from_json(
///     r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"shop"},
///         "status":{"readyReplicas":2,"phase":"Up"}}"#,
/// );
/// assert_eq!((deployment.kind(), deployment.name()), ("Deployment", "shop"));
/// let observed: Observed = deployment.parse().unwrap();
/// let status = observed.status.unwrap();
/// assert_eq!((status.ready_replicas, status.phase), (Some(2), Some("Up")));
/// // The dynamic way, for code that does not want a type:
/// assert_eq!(deployment["status"]["readyReplicas"], json!(2));
/// ```
pub struct Object {
    /// The text, as received or serialized; never changed.
    json: String,
    /// apiVersion, kind, name, namespace and generation, read on first use.
    head: OnceCell<Head>,
    /// The whole text as a `Value` (always a `Value`), parsed on first use of
    /// [`Object::value`]. Boxed as `dyn Any` so that dropping an object reaches `Value`'s drop
    /// code only through a vtable made where a `Value` is stored: a plugin that never asks
    /// for one links none of it.
    value: OnceCell<Box<dyn Any + Send>>,
}

/// The identity of a Kubernetes object: what finding a child by kind and name needs. A field
/// that is missing or of another type reads as empty (0 for the generation).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: HeadMetadata,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct HeadMetadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    generation: i64,
}

impl Object {
    /// An object from its JSON text. The text is not checked here: reading text that is not
    /// JSON fails in [`parse`](Self::parse) and reads as empty or `null` elsewhere. The host
    /// always sends valid JSON.
    pub fn from_json(json: impl Into<String>) -> Self {
        Self {
            json: json.into(),
            head: OnceCell::new(),
            value: OnceCell::new(),
        }
    }

    /// Serializes `value` (a struct of yours, a k8s-openapi object, a `serde_json::Value`)
    /// straight to JSON text.
    ///
    /// # Errors
    /// When `value` does not serialize to JSON: a map with keys that are not strings, or a
    /// `Serialize` impl that fails. Plain structs, `Value` and k8s-openapi types never do.
    pub fn to_json(value: &impl Serialize) -> Result<Self, serde_json::Error> {
        serde_json::to_string(value).map(Self::from_json)
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The JSON text, taken out.
    pub fn into_json(self) -> String {
        self.json
    }

    /// Reads the text into `T`, borrowing `&str` (and `Cow<str>`) fields from it where they
    /// hold no escapes. Fields of the object that `T` does not name are skipped without being
    /// stored, so a small type reads a large object quickly.
    ///
    /// # Errors
    /// When the text is not JSON or does not fit `T`.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.json)
    }

    /// `apiVersion`, empty if missing.
    pub fn api_version(&self) -> &str {
        &self.head().api_version
    }

    /// `kind`, empty if missing.
    pub fn kind(&self) -> &str {
        &self.head().kind
    }

    /// `metadata.name`, empty if missing.
    pub fn name(&self) -> &str {
        &self.head().metadata.name
    }

    /// `metadata.namespace`, empty if missing (a cluster-scoped object).
    pub fn namespace(&self) -> &str {
        &self.head().metadata.namespace
    }

    /// `metadata.generation`, 0 if missing.
    pub fn generation(&self) -> i64 {
        self.head().metadata.generation
    }

    /// Whether this is the object of that apiVersion, kind and name.
    pub fn is(&self, api_version: &str, kind: &str, name: &str) -> bool {
        let head = self.head();
        head.metadata.name == name && head.kind == kind && head.api_version == api_version
    }

    /// The whole object as a `serde_json::Value`, parsed on the first call and kept; `null` if
    /// the text is not JSON. For code that walks an object dynamically; a typed
    /// [`parse`](Self::parse) is faster and keeps the `Value` parser out of the component.
    pub fn value(&self) -> &Value {
        let value = self.value.get_or_init(|| {
            Box::new(serde_json::from_str::<Value>(&self.json).unwrap_or(Value::Null))
        });
        value.downcast_ref().expect("the cache holds a Value")
    }

    /// The whole object as a `serde_json::Value` (see [`value`](Self::value)), taken out.
    pub fn into_value(self) -> Value {
        let Self { json, value, .. } = self;
        match value.into_inner().map(|v| v.downcast::<Value>()) {
            Some(Ok(value)) => *value,
            _ => serde_json::from_str(&json).unwrap_or(Value::Null),
        }
    }

    fn head(&self) -> &Head {
        self.head
            .get_or_init(|| serde_json::from_str(&self.json).unwrap_or_default())
    }
}

impl From<Value> for Object {
    /// The value's text, with the value kept for [`Object::value`].
    fn from(value: Value) -> Self {
        Self {
            json: value.to_string(),
            head: OnceCell::new(),
            value: OnceCell::from(Box::new(value) as Box<dyn Any + Send>),
        }
    }
}

/// A copy of the text and of the identity read so far (a `Value` is parsed again if asked
/// for).
impl Clone for Object {
    fn clone(&self) -> Self {
        Self {
            json: self.json.clone(),
            head: self.head.clone(),
            value: OnceCell::new(),
        }
    }
}

/// `object["spec"]`: a field of [`Object::value`], `null` if missing, as with a `Value`.
impl std::ops::Index<&str> for Object {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        &self.value()[key]
    }
}

/// Serializes as the JSON it holds (through [`Object::value`]), so an object can be put in a
/// `json!` or in a struct of yours.
impl Serialize for Object {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

/// Two objects are equal when their texts are.
impl PartialEq for Object {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

impl Eq for Object {}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Object").field(&self.json).finish()
    }
}

/// The message of a serde_json error without the position it appends (` at line 1 column
/// 42`): a position in the host's JSON text means nothing to whoever reads the message.
pub(crate) fn message(error: &serde_json::Error) -> String {
    let text = error.to_string();
    if error.line() == 0 {
        return text;
    }
    let position = format!(" at line {} column {}", error.line(), error.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DEPLOYMENT: &str = r#"{"apiVersion":"apps/v1","kind":"Deployment",
        "metadata":{"name":"shop","namespace":"team-a","generation":3,"labels":{"a":"b"}},
        "spec":{"replicas":2},"status":{"readyReplicas":1}}"#;

    #[test]
    fn requests_and_responses_should_be_send() {
        fn send<T: Send>() {}
        send::<Object>();
        send::<crate::Request>();
        send::<crate::Response>();
    }

    #[test]
    fn the_identity_should_come_from_the_text() {
        let object = Object::from_json(DEPLOYMENT);
        assert_eq!(object.api_version(), "apps/v1");
        assert_eq!(object.kind(), "Deployment");
        assert_eq!(object.name(), "shop");
        assert_eq!(object.namespace(), "team-a");
        assert_eq!(object.generation(), 3);
        assert!(object.is("apps/v1", "Deployment", "shop"));
        assert!(!object.is("apps/v1", "Deployment", "other"));
        assert!(!object.is("v1", "Deployment", "shop"));
    }

    #[test]
    fn missing_or_odd_fields_should_read_as_empty() {
        let object = Object::from_json(r#"{"metadata":{}}"#);
        assert_eq!(
            (object.kind(), object.name(), object.generation()),
            ("", "", 0)
        );
        let not_json = Object::from_json("{");
        assert_eq!(not_json.name(), "");
        assert_eq!(not_json.value(), &Value::Null);
        assert!(not_json.parse::<Value>().is_err());
    }

    #[test]
    fn parse_should_borrow_from_the_text() {
        #[derive(Deserialize)]
        struct Named<'a> {
            #[serde(borrow)]
            metadata: Meta<'a>,
        }
        #[derive(Deserialize)]
        struct Meta<'a> {
            name: &'a str,
        }
        let object = Object::from_json(DEPLOYMENT);
        let named: Named = object.parse().unwrap();
        assert_eq!(named.metadata.name, "shop");
        let range = object.json().as_bytes().as_ptr_range();
        assert!(range.contains(&named.metadata.name.as_ptr()), "borrowed");
    }

    #[test]
    fn the_value_should_index_and_serialize_like_the_json() {
        let object = Object::from_json(DEPLOYMENT);
        assert_eq!(object["spec"]["replicas"], 2);
        assert_eq!(object["missing"], Value::Null);
        assert_eq!(
            json!({"wrapped": object})["wrapped"]["status"],
            json!({"readyReplicas": 1})
        );
        let value = object.clone().into_value();
        assert_eq!(Object::from(value.clone()).into_value(), value);
        assert_eq!(Object::from(value).name(), "shop");
    }

    #[test]
    fn to_json_should_write_the_fields_in_order() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct ConfigMap<'a> {
            api_version: &'a str,
            kind: &'a str,
        }
        let object = Object::to_json(&ConfigMap {
            api_version: "v1",
            kind: "ConfigMap",
        })
        .unwrap();
        assert_eq!(object.json(), r#"{"apiVersion":"v1","kind":"ConfigMap"}"#);
        assert_eq!(
            object,
            Object::from_json(r#"{"apiVersion":"v1","kind":"ConfigMap"}"#)
        );
    }

    #[test]
    fn messages_should_not_name_a_position() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[expect(dead_code, reason = "only the error is read")]
        struct Spec {
            image: String,
        }
        let error = serde_json::from_str::<Spec>("{\n\"imag\": 1}").unwrap_err();
        assert_eq!(message(&error), "unknown field `imag`, expected `image`");
        let error = serde_json::from_value::<Spec>(json!({})).unwrap_err();
        assert_eq!(message(&error), "missing field `image`");
    }
}
