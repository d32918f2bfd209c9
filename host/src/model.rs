//! The host's own types for what crosses the plugin boundary, independent of any WIT version:
//! the runtime converts each contract version into these, and every later stage (planner,
//! applier, `render`) sees only these.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

mod ordering;
pub mod record;

pub use self::ordering::{
    Comparison, Operand, ParentMetadata, ReadyCheck, Strategies, UpdateMethod, UpdateStrategy,
};

/// A kind of Kubernetes object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind, e.g. `Deployment`.
    pub kind: String,
}

impl KindRef {
    /// A kind from its apiVersion and kind.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    /// The API group: the part of apiVersion before `/`, empty for the core group.
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }

    /// Whether `object` (JSON) is of this kind. Versions of one group count as the same kind,
    /// because the API server converts between them.
    pub fn matches(&self, api_version: &str, kind: &str) -> bool {
        self.kind == kind && self.group() == group_of(api_version)
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// The API group of an `apiVersion`: the part before `/`, empty for the core group (`v1`).
pub fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

/// The condition the host keeps on every parent: whether the last reconcile went through
/// (Crossplane's name for the same thing). `Ready` and the rest are the plugin's.
pub const SYNCED: &str = "Synced";

/// The label the host puts on a decorator's children, valued with the plugin's name: it tells
/// them apart from the children the parent's owner and other decorators attach to the same
/// object, which all name that object as controller.
pub const DECORATOR_LABEL: &str = "reconhost.dev/decorator";

/// Longest condition message kept, in bytes; longer ones are cut (Kubernetes allows 32 KiB, but
/// every message also reaches the host's log).
pub const MAX_CONDITION_MESSAGE: usize = 4096;

/// Longest event note kept, in bytes (events.k8s.io refuses notes of 1 kB or more).
pub const MAX_EVENT_NOTE: usize = 1000;

/// Text a plugin supplied, made safe for logs, events and conditions: control characters
/// (newlines, carriage returns, terminal escapes) are written as escapes, so no plugin can
/// forge a log line or repaint a terminal, and the text is cut at `max_bytes` (on a character
/// boundary) with a note of how much was cut.
pub fn printable(text: &str, max_bytes: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_bytes));
    let mut cut = 0;
    for (i, c) in text.char_indices() {
        let piece: std::borrow::Cow<'_, str> = if c.is_control() {
            c.escape_default().to_string().into()
        } else {
            c.encode_utf8(&mut [0; 4]).to_owned().into()
        };
        if out.len() + piece.len() > max_bytes {
            cut = text.len() - i;
            break;
        }
        out.push_str(&piece);
    }
    if cut > 0 {
        out.push_str(&format!("… ({cut} more bytes)"));
    }
    out
}

/// The current time as Kubernetes writes it in conditions (RFC 3339, whole seconds).
pub fn now() -> String {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now).to_string()
}

/// What a plugin declares about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginInfo {
    /// Short name, a DNS label; the field manager is `reconhost/<name>`.
    pub name: String,
    /// The plugin's version.
    pub version: String,
    /// The parent kind it reconciles.
    pub parent: KindRef,
    /// The child kinds it may create.
    pub children: Vec<KindRef>,
    /// The kinds it may read through `get` and `list`.
    pub reads: Vec<KindRef>,
    /// Whether the host keeps a finalizer on parents.
    pub finalizer: bool,
    /// How existing children change, for the kinds whose strategy is not in place (0.2).
    pub strategies: Strategies,
    /// Whether a parent's status-only change calls the plugin (0.2; the ReconcilePlugin can
    /// say so too).
    pub ignore_status_changes: bool,
}

/// What every field manager of the host starts with: a plugin's is `reconhost/<plugin>`.
pub const FIELD_MANAGER_PREFIX: &str = "reconhost/";

impl PluginInfo {
    /// The field manager the host applies this plugin's children with.
    pub fn field_manager(&self) -> String {
        format!("{FIELD_MANAGER_PREFIX}{}", self.name)
    }

    /// The finalizer the host puts on parents when the plugin asks for one.
    pub fn finalizer_name(&self) -> String {
        finalizer_name(&self.name)
    }

    /// Whether `parent` carries the host's finalizer for this plugin.
    pub fn holds_finalizer(&self, parent: &Value) -> bool {
        let ours = self.finalizer_name();
        parent["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == ours.as_str()))
    }

    /// Whether the plugin is to finalize `parent`: it is being deleted and still carries the
    /// host's finalizer for this plugin.
    pub fn finalizing(&self, parent: &Value) -> bool {
        is_deleting(parent) && self.holds_finalizer(parent)
    }
}

/// The finalizer the host puts on parents for the plugin named `plugin`.
pub fn finalizer_name(plugin: &str) -> String {
    format!("reconhost.dev/{plugin}")
}

/// Whether an object is being deleted (it has a `deletionTimestamp`).
pub fn is_deleting(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

/// A parent object together with its JSON text, which is what crosses into the plugin. The
/// live host's cache holds the text, so a call sends it as it is instead of serialising the
/// object again; made from a value, the text is written once. There is no way to change one
/// without the other.
#[derive(Debug, Clone)]
pub struct Parent {
    value: Value,
    text: Arc<str>,
}

impl Parent {
    /// The parent whose JSON text (as the cache holds it) is `text`; `None` if it does not
    /// parse.
    pub fn from_text(text: &str) -> Option<Self> {
        Some(Self {
            value: serde_json::from_str(text).ok()?,
            text: Arc::from(text),
        })
    }

    /// The JSON text sent to the plugin.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl From<Value> for Parent {
    fn from(value: Value) -> Self {
        let text = Arc::from(value.to_string());
        Self { value, text }
    }
}

impl std::ops::Deref for Parent {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.value
    }
}

impl PartialEq for Parent {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

/// One reconcile call's input.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileRequest {
    /// The parent object.
    pub parent: Parent,
    /// Its observed children, as JSON text: they go to the plugin as they are, and the live
    /// host caches them as text, so they are never parsed just to be written out again.
    pub children: Vec<String>,
    /// The plugin's configuration (`{}` if none).
    pub config: Value,
    /// The parent is being deleted and the host's finalizer is on it.
    pub finalizing: bool,
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConditionStatus {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"`.
    Unknown,
}

impl ConditionStatus {
    /// The string Kubernetes uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// A condition the plugin wants on the parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    /// Condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its status.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: String,
    /// Message for people.
    pub message: String,
}

/// Event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Normal.
    Normal,
    /// Warning.
    Warning,
}

/// An event the plugin wants recorded on the parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub type_: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// Message for people.
    pub message: String,
}

/// One desired child, checked once by `validate`: its identity, where it goes, and the body the
/// plugin wrote (a partial object, for server-side apply).
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredChild {
    /// Its kind, one the plugin declared.
    pub kind: KindRef,
    /// The namespace: the parent's for a namespaced parent (whether the plugin wrote it or
    /// not), the one the plugin named for a cluster-scoped parent's (empty if none).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The object as the plugin wrote it: an object with apiVersion, kind and metadata, no
    /// ownerReferences, nothing the API server sets.
    pub body: Value,
    /// Its wave (0.2): changed only once every child of the waves before is ready.
    pub wave: u32,
    /// What makes it ready for the waves after it, besides what every child needs.
    pub ready_when: Vec<ReadyCheck>,
}

/// A validated response: the desired state of one parent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Desired {
    /// Desired children, each checked, unique by kind, namespace and name.
    pub children: Vec<DesiredChild>,
    /// Desired parent status (a JSON object), or `None` to leave it.
    pub status: Option<Value>,
    /// Conditions, unique by type.
    pub conditions: Vec<Condition>,
    /// Events to record.
    pub events: Vec<Event>,
    /// Reconcile again after this long.
    pub requeue_after: Option<Duration>,
    /// Cleanup finished (meaningful when finalizing).
    pub finalized: bool,
    /// Labels and annotations the plugin sets on the parent (0.2); `None` for none.
    pub parent_metadata: Option<ParentMetadata>,
}

/// The plugin's own verdict on a failed reconcile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// Retry with backoff.
    #[error("transient error: {0}")]
    Transient(String),
    /// Do not retry until the parent changes.
    #[error("permanent error: {0}")]
    Permanent(String),
}

/// `namespace/name` (or `name`) of an object, for messages.
pub fn object_ref(object: &Value) -> String {
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or("<unnamed>");
    match meta["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_should_go_to_the_plugin_as_the_text_it_was_read_from() {
        // The cache's text, key order and spacing as the API server wrote them.
        let text = r#"{"kind":"WebApp","metadata":{"name":"shop"},"apiVersion":"x/v1"}"#;
        let cached = Parent::from_text(text).expect("parses");
        assert_eq!(cached.text(), text);
        assert_eq!(cached["metadata"]["name"], "shop");
        let made = Parent::from((*cached).clone());
        assert_eq!(made, cached, "equal as objects");
        assert_eq!(serde_json::from_str::<Value>(made.text()).unwrap(), *cached);
        assert!(Parent::from_text("{not json").is_none());
    }

    #[test]
    fn printable_should_escape_control_characters_and_cut_long_text() {
        assert_eq!(printable("ok", 10), "ok");
        assert_eq!(
            printable("line\n{\"level\":\"ERROR\"}\u{1b}[31m", 100),
            "line\\n{\"level\":\"ERROR\"}\\u{1b}[31m"
        );
        assert_eq!(printable("ééé", 4), "éé… (2 more bytes)");
    }
}
