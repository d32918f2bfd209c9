//! Checks a plugin's response before anything uses it, and converts it into the host's
//! [`Desired`]. Every rejection names the JSON path of the offending value.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;

mod order;

use super::contract::Answer;
use super::error::CallErrorKind;
use super::limits::Limits;
use crate::model::{Condition, Desired, DesiredChild, Event, KindRef, PluginInfo, printable};
use crate::model::{MAX_CONDITION_MESSAGE, MAX_EVENT_NOTE, SYNCED};

/// Events one response may ask for. Each is an API write made on the parent (aggregated by
/// reason into a series, but still a request); ten cover a report of several distinct facts.
pub const MAX_EVENTS: usize = 10;

/// Conditions one response may set: each stays on the parent's status for good.
pub const MAX_CONDITIONS: usize = 16;

/// The largest status a plugin may write, in bytes: the whole parent must stay under the API
/// server's 1.5 MiB object limit, and the status is written on every change.
pub const MAX_STATUS_BYTES: usize = 256 << 10;

/// Longest reason (events.k8s.io's limit for an event's reason).
pub const MAX_REASON: usize = 128;

/// The shortest `requeue-after` honoured; shorter requests wait this long. A plugin asking to
/// be called again at once would otherwise turn the host into a busy loop for it.
pub const MIN_REQUEUE_AFTER: Duration = Duration::from_secs(1);

/// Whether `reason` is what Kubernetes accepts as a condition reason: CamelCase letters, digits,
/// `_`, `,` and `:`, starting with a letter.
fn check_reason(reason: &str) -> Result<(), String> {
    let valid = reason.len() <= MAX_REASON
        && reason.starts_with(|c: char| c.is_ascii_alphabetic())
        && reason
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_,:".contains(c))
        && !reason.ends_with([',', ':']);
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not a reason: CamelCase letters and digits, at most {MAX_REASON}",
            printable(reason, 64)
        ))
    }
}

fn invalid(path: impl Into<String>, reason: impl Into<String>) -> CallErrorKind {
    CallErrorKind::InvalidResponse {
        path: path.into(),
        reason: reason.into(),
    }
}

/// Size of everything in a response, in bytes, for the response-size limit: the children's and
/// the status's JSON text and the strings of its conditions, events and parent metadata, as
/// they crossed the boundary. Summing lengths, no serialising: cheap enough to report on every
/// call as well.
pub(super) fn response_size(r: &Answer) -> usize {
    r.children.iter().map(|c| c.object.len()).sum::<usize>()
        + r.parent_metadata.as_ref().map_or(0, |m| {
            m.labels
                .iter()
                .chain(&m.annotations)
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
        })
        + r.status.as_ref().map_or(0, String::len)
        + r.conditions
            .iter()
            .map(|c| c.type_.len() + c.reason.len() + c.message.len())
            .sum::<usize>()
        + r.events
            .iter()
            .map(|e| e.reason.len() + e.message.len())
            .sum::<usize>()
}

/// Validates `response` for a call on `parent` by the plugin described by `info`.
pub fn validate(
    info: &PluginInfo,
    parent: &Value,
    response: Answer,
    limits: &Limits,
) -> Result<Desired, CallErrorKind> {
    let bytes = response_size(&response);
    if bytes > limits.response_bytes {
        return Err(CallErrorKind::ResponseTooLarge {
            bytes,
            limit: limits.response_bytes,
        });
    }
    if response.children.len() > limits.children {
        return Err(CallErrorKind::TooManyChildren {
            count: response.children.len(),
            limit: limits.children,
        });
    }
    let parent_ns = parent["metadata"]["namespace"].as_str().unwrap_or("");
    let mut seen = HashSet::new();
    let mut children = Vec::with_capacity(response.children.len());
    for (i, answered) in response.children.into_iter().enumerate() {
        let mut child = validate_child(
            info,
            parent_ns,
            &format!("children[{i}]"),
            &answered.object,
            limits.child_finalizers,
        )?;
        child.wave = answered.wave;
        child.ready_when =
            order::checks(&format!("children[{i}].ready-when"), answered.ready_when)?;
        // A child is one object: its group, kind, namespace and name (a cluster-scoped
        // parent's children may share a name across namespaces).
        let key = (
            child.kind.group().to_owned(),
            child.kind.kind.clone(),
            child.namespace.clone(),
            child.name.clone(),
        );
        if !seen.insert(key.clone()) {
            let place = if key.2.is_empty() {
                String::new()
            } else {
                format!(" in namespace {}", key.2)
            };
            return Err(invalid(
                format!("children[{i}]"),
                format!("duplicate child {} {}{place}", key.1, key.3),
            ));
        }
        children.push(child);
    }
    let status = match &response.status {
        None => None,
        Some(text) if text.len() > MAX_STATUS_BYTES => {
            return Err(invalid(
                "status",
                format!("{} bytes, more than {MAX_STATUS_BYTES}", text.len()),
            ));
        }
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Some(v),
            Ok(_) => return Err(invalid("status", "must be a JSON object")),
            Err(e) => return Err(invalid("status", format!("not JSON: {e}"))),
        },
    };
    if response.conditions.len() > MAX_CONDITIONS {
        return Err(invalid(
            "conditions",
            format!(
                "{} conditions, more than {MAX_CONDITIONS}",
                response.conditions.len()
            ),
        ));
    }
    if response.events.len() > MAX_EVENTS {
        return Err(invalid(
            "events",
            format!("{} events, more than {MAX_EVENTS}", response.events.len()),
        ));
    }
    let mut types_seen = HashSet::new();
    let mut conditions = Vec::with_capacity(response.conditions.len());
    for (i, c) in response.conditions.into_iter().enumerate() {
        if let Err(reason) = check_reason(&c.type_) {
            return Err(invalid(format!("conditions[{i}].type"), reason));
        }
        if c.type_ == SYNCED {
            return Err(invalid(
                format!("conditions[{i}].type"),
                "Synced is the host's condition: it says whether the host's last reconcile went through",
            ));
        }
        if !c.reason.is_empty()
            && let Err(reason) = check_reason(&c.reason)
        {
            return Err(invalid(format!("conditions[{i}].reason"), reason));
        }
        if !types_seen.insert(c.type_.clone()) {
            return Err(invalid(
                format!("conditions[{i}].type"),
                format!("duplicate condition type {:?}", c.type_),
            ));
        }
        conditions.push(Condition {
            type_: c.type_,
            status: c.status,
            reason: c.reason,
            message: printable(&c.message, MAX_CONDITION_MESSAGE),
        });
    }
    let mut events = Vec::with_capacity(response.events.len());
    for (i, e) in response.events.into_iter().enumerate() {
        if let Err(reason) = check_reason(&e.reason) {
            return Err(invalid(format!("events[{i}].reason"), reason));
        }
        events.push(Event {
            type_: e.type_,
            reason: e.reason,
            message: printable(&e.message, MAX_EVENT_NOTE),
        });
    }
    Ok(Desired {
        children,
        status,
        conditions,
        events,
        requeue_after: response
            .requeue_after_ms
            .map(|ms| Duration::from_millis(ms).max(MIN_REQUEUE_AFTER)),
        finalized: response.finalized,
        parent_metadata: match response.parent_metadata {
            Some(metadata) => {
                order::parent_metadata(&metadata)?;
                Some(metadata)
            }
            None => None,
        },
    })
}

fn validate_child(
    info: &PluginInfo,
    parent_ns: &str,
    path: &str,
    text: &str,
    child_finalizers: bool,
) -> Result<DesiredChild, CallErrorKind> {
    let child: Value =
        serde_json::from_str(text).map_err(|e| invalid(path, format!("not JSON: {e}")))?;
    let Value::Object(map) = &child else {
        return Err(invalid(path, "must be a JSON object"));
    };
    let api_version = map
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let api_version =
        api_version.ok_or_else(|| invalid(format!("{path}.apiVersion"), "required string"))?;
    let kind = map
        .get("kind")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let kind = kind.ok_or_else(|| invalid(format!("{path}.kind"), "required string"))?;
    if !info.children.iter().any(|k| k.matches(api_version, kind)) {
        let declared: Vec<String> = info.children.iter().map(ToString::to_string).collect();
        return Err(invalid(
            format!("{path}.kind"),
            format!(
                "{api_version}/{kind} is not a declared child kind (declared: {})",
                declared.join(", ")
            ),
        ));
    }
    let meta = map
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid(format!("{path}.metadata"), "required object"))?;
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
    if let Err(reason) = check_name(name) {
        return Err(invalid(format!("{path}.metadata.name"), reason));
    }
    // A namespaced parent's children stay in its namespace; a cluster-scoped parent's name
    // theirs (whether a kind needs one is the reconciler's to check: it knows the scopes).
    if let Some(ns) = meta.get("namespace") {
        let ns = ns.as_str().unwrap_or("<not a string>");
        if !parent_ns.is_empty() && ns != parent_ns {
            return Err(invalid(
                format!("{path}.metadata.namespace"),
                format!(
                    "child in namespace {ns:?}, but children must stay in the parent's namespace {parent_ns:?}"
                ),
            ));
        }
        if parent_ns.is_empty() && !is_label(ns) {
            return Err(invalid(
                format!("{path}.metadata.namespace"),
                format!("{ns:?} is not a namespace name (a DNS label)"),
            ));
        }
    }
    if meta.contains_key("ownerReferences") {
        return Err(invalid(
            format!("{path}.metadata.ownerReferences"),
            "ownerReferences are set by the host, never by the plugin",
        ));
    }
    if meta.contains_key("generateName") {
        return Err(invalid(
            format!("{path}.metadata.generateName"),
            "children need a fixed name so the host can find them again",
        ));
    }
    for field in SERVER_SET {
        if meta.contains_key(*field) {
            return Err(invalid(
                format!("{path}.metadata.{field}"),
                "set by the API server, never by a plugin",
            ));
        }
    }
    if meta.contains_key("finalizers") && !child_finalizers {
        return Err(invalid(
            format!("{path}.metadata.finalizers"),
            "a finalizer on a child could keep it (and its parent's deletion) forever; the host's operator has not allowed plugins to set them (--allow-child-finalizers)",
        ));
    }
    let namespace = match parent_ns {
        "" => meta.get("namespace").and_then(Value::as_str).unwrap_or(""),
        parent_ns => parent_ns,
    };
    Ok(DesiredChild {
        kind: KindRef::new(api_version, kind),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        body: child.clone(),
        wave: 0,
        ready_when: Vec::new(),
    })
}

/// Metadata the API server writes. A plugin that sets them is trying to steer the server (a
/// stale resourceVersion makes every apply a conflict) or to forge history.
const SERVER_SET: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// A DNS subdomain (RFC 1123), as Kubernetes requires of most object names.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("required string".into());
    }
    if name.len() > 253 {
        return Err(format!("{} characters, at most 253 allowed", name.len()));
    }
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok_chars && ok_ends {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid name (lower-case letters, digits, '-' and '.')"
        ))
    }
}

/// Whether `s` is a DNS label (RFC 1123), as namespace names are.
fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Checks what `info()` returned.
pub fn check_info(info: &PluginInfo) -> Result<(), (&'static str, String)> {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    if !label(&info.name) {
        return Err((
            "name",
            format!("{:?} is not a DNS label", printable(&info.name, 64)),
        ));
    }
    let version_ok = info.version.len() <= 64
        && info
            .version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-+_".contains(c));
    if !version_ok {
        return Err((
            "version",
            format!(
                "{:?} is not a version (letters, digits, . - + _, at most 64)",
                printable(&info.version, 64)
            ),
        ));
    }
    if let Some(own) = info
        .children
        .iter()
        .find(|c| c.matches(&info.parent.api_version, &info.parent.kind))
    {
        return Err((
            "children",
            format!(
                "{own} is the plugin's own parent kind: the host would reconcile what the plugin creates as new parents"
            ),
        ));
    }
    for (kind, strategy) in &info.strategies.0 {
        if !info.children.contains(kind) {
            return Err((
                "children",
                format!("update strategy for {kind}, not a child kind"),
            ));
        }
        for check in &strategy.status_checks {
            order::check_one(check).map_err(|reason| {
                (
                    "children",
                    format!("{kind}: update-strategy.status-checks: {reason}"),
                )
            })?;
        }
    }
    let kinds = std::iter::once(("parent", &info.parent))
        .chain(info.children.iter().map(|k| ("children", k)))
        .chain(info.reads.iter().map(|k| ("reads", k)));
    for (field, k) in kinds {
        if k.api_version.is_empty() || k.kind.is_empty() {
            return Err((field, format!("kind {k} needs both apiVersion and kind")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KindRef;
    use serde_json::json;

    fn info() -> PluginInfo {
        PluginInfo {
            name: "webapp".into(),
            version: "0.1.0".into(),
            parent: KindRef::new("examples.reconhost.dev/v1alpha1", "WebApp"),
            children: vec![
                KindRef::new("apps/v1", "Deployment"),
                KindRef::new("v1", "Service"),
            ],
            reads: vec![],
            finalizer: false,
            strategies: Default::default(),
            ignore_status_changes: false,
        }
    }

    fn response(children: Vec<Value>) -> Answer {
        Answer {
            children: children.iter().map(|c| c.to_string().into()).collect(),
            ..Answer::default()
        }
    }

    fn parent() -> Value {
        json!({"metadata": {"name": "web", "namespace": "team-a"}})
    }

    fn err_path(children: Vec<Value>) -> String {
        match validate(&info(), &parent(), response(children), &Limits::default()) {
            Err(CallErrorKind::InvalidResponse { path, .. }) => path,
            other => panic!("expected an invalid response, got {other:?}"),
        }
    }

    #[test]
    fn valid_children_should_pass_unchanged() {
        let child =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let desired = validate(
            &info(),
            &parent(),
            response(vec![child.clone()]),
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(desired.children.len(), 1);
        let only = &desired.children[0];
        assert_eq!(only.body, child, "the body as the plugin wrote it");
        assert_eq!(
            (
                only.kind.kind.as_str(),
                only.namespace.as_str(),
                only.name.as_str()
            ),
            ("Deployment", "team-a", "web"),
            "its identity, the namespace the parent's"
        );
    }

    #[test]
    fn child_rules_should_be_enforced_with_the_json_path() {
        let d =
            |meta: Value| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta});
        assert_eq!(
            err_path(vec![d(json!({"name": "web", "namespace": "other"}))]),
            "children[0].metadata.namespace"
        );
        assert_eq!(
            err_path(vec![d(json!({"name": "web", "ownerReferences": []}))]),
            "children[0].metadata.ownerReferences"
        );
        assert_eq!(
            err_path(vec![d(json!({"name": "Web_1"}))]),
            "children[0].metadata.name"
        );
        assert_eq!(err_path(vec![d(json!({}))]), "children[0].metadata.name");
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        assert_eq!(
            err_path(vec![d(json!({"name": "a"})), secret]),
            "children[1].kind"
        );
        assert_eq!(
            err_path(vec![d(json!({"name": "a"})), d(json!({"name": "a"}))]),
            "children[1]"
        );
        assert_eq!(err_path(vec![json!([1, 2])]), "children[0]");
    }

    #[test]
    fn a_cluster_scoped_parents_children_should_name_their_namespaces() {
        let cluster_parent = json!({"metadata": {"name": "defaults"}});
        let cm = |ns: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "q", "namespace": ns}});
        let ok = validate(
            &info(),
            &cluster_parent,
            response(vec![cm(json!("team-a")), cm(json!("team-b"))]),
            &Limits::default(),
        );
        assert_eq!(ok.unwrap().children.len(), 2, "one name in two namespaces");
        let invalid_path = |children| match validate(
            &info(),
            &cluster_parent,
            response(children),
            &Limits::default(),
        ) {
            Err(CallErrorKind::InvalidResponse { path, reason }) => (path, reason),
            other => panic!("expected an invalid response, got {other:?}"),
        };
        let (path, reason) = invalid_path(vec![cm(json!("team-a")), cm(json!("team-a"))]);
        assert_eq!(path, "children[1]");
        assert!(reason.contains("in namespace team-a"), "{reason}");
        let (path, _) = invalid_path(vec![cm(json!("Team_A"))]);
        assert_eq!(path, "children[0].metadata.namespace");
    }

    #[test]
    fn same_namespace_child_should_be_accepted() {
        let child = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "team-a"}});
        assert!(
            validate(
                &info(),
                &parent(),
                response(vec![child]),
                &Limits::default()
            )
            .is_ok()
        );
    }

    #[test]
    fn size_and_count_limits_should_apply() {
        let child = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}});
        let limits = Limits::default().response_bytes(10);
        assert!(matches!(
            validate(&info(), &parent(), response(vec![child.clone()]), &limits),
            Err(CallErrorKind::ResponseTooLarge { limit: 10, .. })
        ));
        let limits = Limits::default().children(0);
        assert!(matches!(
            validate(&info(), &parent(), response(vec![child]), &limits),
            Err(CallErrorKind::TooManyChildren { count: 1, limit: 0 })
        ));
    }

    #[test]
    fn status_must_be_an_object() {
        let mut r = response(vec![]);
        r.status = Some("[1]".into());
        assert!(
            matches!(validate(&info(), &parent(), r, &Limits::default()), Err(CallErrorKind::InvalidResponse { path, .. }) if path == "status")
        );
    }
}
