//! What a ReconcilePlugin's spec means to the host: the fingerprint that decides when a new
//! revision is due, and the runtime limits it asks for.

use std::hash::{Hash as _, Hasher as _};

use super::{Defaults, Failure, Stage};
use crate::api::{self, ReconcilePlugin};
use crate::runtime::Limits;
use crate::selector::Selector;

/// What decides a revision: a change to any of it swaps the plugin.
pub fn fingerprint(rp: &ReconcilePlugin) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    rp.spec.source.digest.hash(&mut hasher);
    // Another ServiceAccount is another authority: its writes need another client.
    rp.spec.service_account_ref.namespace.hash(&mut hasher);
    rp.spec.service_account_ref.name.hash(&mut hasher);
    serde_json::to_string(&rp.spec.config)
        .unwrap_or_default()
        .hash(&mut hasher);
    serde_json::to_string(&rp.spec.limits)
        .unwrap_or_default()
        .hash(&mut hasher);
    // Another selection is another set of parents: a swap queues every parent, so those that
    // left are released and those that entered are reconciled.
    serde_json::to_string(&rp.spec.parent_selector)
        .unwrap_or_default()
        .hash(&mut hasher);
    rp.spec.namespaces.hash(&mut hasher);
    serde_json::to_string(&rp.spec.resync_period)
        .unwrap_or_default()
        .hash(&mut hasher);
    rp.spec.ignore_parent_status_changes.hash(&mut hasher);
    serde_json::to_string(&rp.spec.adopt_orphans)
        .unwrap_or_default()
        .hash(&mut hasher);
    serde_json::to_string(&rp.spec.decorator)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// The parents a ReconcilePlugin selects.
pub fn selector_of(rp: &ReconcilePlugin) -> Result<Selector, Failure> {
    rp.spec
        .parent_selector
        .as_ref()
        .map_or_else(|| Ok(Selector::default()), Selector::from_label_selector)
        .map_err(|e| {
            Failure::new(
                Stage::Start,
                "InvalidParentSelector",
                format!("spec.parentSelector: {e}"),
            )
        })
}

/// The orphans a ReconcilePlugin lets its plugin adopt (`None`: none).
pub fn adoption_of(rp: &ReconcilePlugin) -> Result<Option<Selector>, Failure> {
    rp.spec
        .adopt_orphans
        .as_ref()
        .map(Selector::from_label_selector)
        .transpose()
        .map_err(|e| {
            Failure::new(
                Stage::Start,
                "InvalidAdoptOrphans",
                format!("spec.adoptOrphans: {e}"),
            )
        })
}

/// A decorator's annotation selector (empty: every object); `None` for a plugin that owns its
/// parents.
pub fn decorator_of(rp: &ReconcilePlugin) -> Result<Option<Selector>, Failure> {
    let Some(decorator) = &rp.spec.decorator else {
        return Ok(None);
    };
    decorator
        .annotation_selector
        .as_ref()
        .map_or_else(
            || Ok(Selector::default()),
            |s| Selector::from_label_selector(&s.as_label_selector()),
        )
        .map(Some)
        .map_err(|e| {
            Failure::new(
                Stage::Start,
                "InvalidAnnotationSelector",
                format!("spec.decorator.annotationSelector: {e}"),
            )
        })
}

/// The namespaces a ReconcilePlugin reconciles parents in (`None`: every one).
pub fn namespaces_of(rp: &ReconcilePlugin) -> Option<std::collections::BTreeSet<String>> {
    rp.spec
        .namespaces
        .as_ref()
        .map(|n| n.iter().cloned().collect())
}

/// The namespaces the `Authorized` condition asks about (empty: every namespace): the
/// ReconcilePlugin's, or the host's `--namespace`, or the one of them both name.
pub fn namespaces_asked(rp: &ReconcilePlugin, host: Option<&str>) -> Vec<String> {
    match (&rp.spec.namespaces, host) {
        (None, None) => Vec::new(),
        (None, Some(host)) => vec![host.to_owned()],
        (Some(list), Some(host)) if list.iter().any(|n| n == host) => vec![host.to_owned()],
        // The host watches none of them: nothing is reconciled, and the grant is judged where
        // the ReconcilePlugin says.
        (Some(list), _) => list.clone(),
    }
}

/// The runtime limits a ReconcilePlugin asks for, over the host's defaults.
pub fn limits_of(rp: &ReconcilePlugin, defaults: &Defaults) -> Result<Limits, Failure> {
    let mut limits = defaults.limits.clone();
    let Some(spec) = &rp.spec.limits else {
        return Ok(limits);
    };
    let bytes = |field: &str, text: &str| {
        api::parse_quantity(text)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| {
                Failure::new(
                    Stage::Start,
                    "InvalidLimits",
                    format!("spec.limits.{field} {text:?} is not a quantity of bytes"),
                )
            })
    };
    if let Some(timeout) = spec.call_timeout {
        limits = limits.deadline(timeout.into());
    }
    if let Some(timeout) = spec.finalize_timeout {
        limits = limits.finalize_timeout(timeout.into());
    }
    if let Some(memory) = &spec.memory {
        limits = limits.memory(bytes("memory", memory)?);
    }
    if let Some(response) = &spec.response_bytes {
        limits = limits.response_bytes(bytes("responseBytes", response)?);
    }
    if let Some(children) = spec.children {
        limits = limits.children(children as usize);
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(limits: serde_json::Value) -> ReconcilePlugin {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "reconhost.dev/v1alpha1", "kind": "ReconcilePlugin",
            "metadata": {"name": "widget.example.com", "generation": 1},
            "spec": {
                "parent": {"apiVersion": "example.com/v1", "kind": "Widget"},
                "source": {"digest": format!("sha256:{}", "a".repeat(64)),
                           "configMap": {"namespace": "p", "name": "w"}},
                "serviceAccountRef": {"namespace": "p", "name": "w"},
                "limits": limits,
            }
        }))
        .expect("a ReconcilePlugin")
    }

    #[test]
    fn namespaces_should_be_asked_where_both_the_plugin_and_the_host_work() {
        let mut rp = plugin(serde_json::json!({}));
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(namespaces_asked(&rp, None), list(&[]));
        assert_eq!(namespaces_asked(&rp, Some("h")), list(&["h"]));
        rp.spec.namespaces = Some(list(&["a", "h"]));
        assert_eq!(namespaces_asked(&rp, None), list(&["a", "h"]));
        assert_eq!(namespaces_asked(&rp, Some("h")), list(&["h"]));
        assert_eq!(namespaces_asked(&rp, Some("x")), list(&["a", "h"]));
        let before = fingerprint(&plugin(serde_json::json!({})));
        assert_ne!(
            fingerprint(&rp),
            before,
            "other namespaces, another revision"
        );
        assert_eq!(
            namespaces_of(&rp).unwrap().into_iter().collect::<Vec<_>>(),
            list(&["a", "h"])
        );
    }

    #[test]
    fn limits_should_override_only_what_is_set() {
        let defaults = Defaults {
            limits: Limits::default(),
            concurrency: 4,
            selector: crate::selector::Selector::default(),
        };
        let limits = limits_of(
            &plugin(serde_json::json!({"callTimeout": "250ms", "memory": "16Mi"})),
            &defaults,
        )
        .unwrap();
        assert_eq!(limits.deadline, std::time::Duration::from_millis(250));
        assert_eq!(limits.memory, 16 << 20);
        assert_eq!(limits.response_bytes, Limits::default().response_bytes);
        let error =
            limits_of(&plugin(serde_json::json!({"memory": "lots"})), &defaults).unwrap_err();
        assert_eq!(error.reason, "InvalidLimits");
    }

    #[test]
    fn fingerprint_should_change_with_code_config_limits_or_identity() {
        let a = plugin(serde_json::json!({}));
        let mut b = a.clone();
        b.spec.suspend = true;
        assert_eq!(
            fingerprint(&a),
            fingerprint(&b),
            "suspend is not a new revision"
        );
        b.spec.config = Some(serde_json::json!({"k": 1}));
        assert_ne!(fingerprint(&a), fingerprint(&b));
        let mut c = a.clone();
        c.spec.service_account_ref.name = "other".into();
        assert_ne!(fingerprint(&a), fingerprint(&c), "another identity");
    }
}
