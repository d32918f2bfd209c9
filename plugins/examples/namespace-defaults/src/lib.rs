//! `namespace-defaults`: a cluster-scoped `NamespaceDefaults` stamps a ResourceQuota and a
//! LimitRange, both named after it, into every namespace its `spec.namespaceSelector` matches.
//! A namespace that stops matching (or is being deleted) loses them; deleting the parent
//! removes them all (the garbage collector follows the ownerReferences across namespaces).
//!
//! The namespaces are listed through `host::list`, so the host knows this parent depends on
//! them: a namespace created, labelled or unlabelled later wakes it.

use reconhost_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, Value, host};
use serde::{Deserialize, Serialize};

/// The plugin.
pub struct NamespaceDefaults;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    /// Which namespaces get the defaults; an empty selector matches every namespace.
    #[serde(default)]
    namespace_selector: LabelSelector,
    /// The ResourceQuota's `spec.hard`, passed on as it is (so any JSON the CRD allows).
    #[serde(default)]
    quota: reconhost_sdk::serde_json::Map<String, Value>,
    /// The LimitRange's `spec.limits`, passed on as they are.
    #[serde(default)]
    limits: Vec<Value>,
}

/// What the plugin reads of a Namespace.
#[derive(Deserialize)]
struct Namespace {
    metadata: NamespaceMetadata,
    #[serde(default)]
    status: Option<NamespaceStatus>,
}

#[derive(Deserialize)]
struct NamespaceMetadata {
    name: String,
}

#[derive(Deserialize)]
struct NamespaceStatus {
    #[serde(default)]
    phase: Option<String>,
}

/// A ResourceQuota or a LimitRange, as far as the plugin owns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Child<'a, S> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata<'a>,
    spec: S,
}

#[derive(Serialize)]
struct Metadata<'a> {
    name: &'a str,
    namespace: &'a str,
    labels: Labels,
}

#[derive(Serialize)]
struct Labels {
    #[serde(rename = "app.kubernetes.io/managed-by")]
    managed_by: &'static str,
}

#[derive(Serialize)]
struct QuotaSpec<'a> {
    hard: &'a reconhost_sdk::serde_json::Map<String, Value>,
}

#[derive(Serialize)]
struct LimitRangeSpec<'a> {
    limits: &'a [Value],
}

#[derive(Serialize)]
struct Status<'a> {
    namespaces: &'a [String],
}

fn namespace() -> Kind {
    Kind::new("v1", "Namespace")
}

impl Reconciler for NamespaceDefaults {
    fn info() -> Info {
        Info::new(
            "namespace-defaults",
            Kind::new("examples.reconhost.dev/v1alpha1", "NamespaceDefaults"),
        )
        .version(env!("CARGO_PKG_VERSION"))
        .child(Kind::new("v1", "ResourceQuota"))
        .child(Kind::new("v1", "LimitRange"))
        .reads(namespace())
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec: Spec = request.spec()?;
        let selector = selector_text(&spec.namespace_selector)?;
        let found =
            host::list(&namespace(), "", &selector).map_err(|e| Error::transient(e.to_string()))?;
        let mut namespaces: Vec<String> = found
            .iter()
            .filter_map(|ns| ns.parse::<Namespace>().ok())
            // A namespace being deleted takes its objects with it; writing into it fails.
            .filter(|ns| ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating"))
            .map(|ns| ns.metadata.name)
            .collect();
        namespaces.sort();
        let name = request.name();
        let metadata = |namespace| Metadata {
            name,
            namespace,
            labels: Labels {
                managed_by: "reconhost",
            },
        };
        let mut response = Response::new();
        for ns in &namespaces {
            response = response
                .child(Child {
                    api_version: "v1",
                    kind: "ResourceQuota",
                    metadata: metadata(ns),
                    spec: QuotaSpec { hard: &spec.quota },
                })
                .child(Child {
                    api_version: "v1",
                    kind: "LimitRange",
                    metadata: metadata(ns),
                    spec: LimitRangeSpec {
                        limits: &spec.limits,
                    },
                });
        }
        let message = format!("{} namespaces", namespaces.len());
        Ok(response
            .status(Status {
                namespaces: &namespaces,
            })
            .ready(true, "Applied", &message))
    }
}

/// A label selector in the text form `host::list` takes (`a=b,c in (d,e),!f`).
fn selector_text(selector: &LabelSelector) -> Result<String, Error> {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
        let values = e.values.clone().unwrap_or_default();
        let invalid = |why: &str| {
            Error::permanent(format!(
                "spec.namespaceSelector.matchExpressions[{i}]: {why}"
            ))
        };
        parts.push(match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => return Err(invalid("needs values")),
            "In" => format!("{} in ({})", e.key, values.join(",")),
            "NotIn" => format!("{} notin ({})", e.key, values.join(",")),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => return Err(invalid(&format!("unknown operator {other:?}"))),
        });
    }
    Ok(parts.join(","))
}

reconhost_sdk::export!(NamespaceDefaults);

#[cfg(test)]
mod tests {
    use super::*;
    use reconhost_sdk::json;

    fn selector(value: Value) -> LabelSelector {
        reconhost_sdk::serde_json::from_value(value).unwrap()
    }

    #[test]
    fn selectors_should_become_the_text_form() {
        let s = selector(json!({"matchLabels": {"team": "a"}, "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["dev", "prod"]},
            {"key": "legacy", "operator": "DoesNotExist"},
            {"key": "tier", "operator": "Exists"},
            {"key": "zone", "operator": "NotIn", "values": ["x"]}]}));
        assert_eq!(
            selector_text(&s).unwrap(),
            "team=a,env in (dev,prod),!legacy,tier,zone notin (x)"
        );
        assert_eq!(selector_text(&LabelSelector::default()).unwrap(), "");
    }

    #[test]
    fn a_bad_operator_should_be_a_permanent_error_naming_the_field() {
        let s = selector(json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}));
        let error = selector_text(&s).unwrap_err();
        assert!(
            format!("{error:?}").contains("matchExpressions[0]"),
            "{error:?}"
        );
    }
}
