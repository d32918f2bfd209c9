//! Kubernetes label selectors (`app=web,tier!=db,env in (a,b),!legacy`, or the structured
//! `matchLabels`/`matchExpressions` form), parsed once and matched against an object's labels.
//! Used to answer a plugin's `list` from a cache and to choose which parents a plugin reconciles.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    /// `key=value` or `key==value`.
    Equals(String, String),
    /// `key!=value`: true also when the key is absent, as in Kubernetes.
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)`: true also when the key is absent.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// A selector that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    /// The selector as given.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Selector {
    /// Parses Kubernetes selector syntax.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let err = |reason: &str| SelectorError {
            selector: text.to_owned(),
            reason: reason.to_owned(),
        };
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(|r| err(&r))? {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(err("empty requirement"));
            }
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key_of(key).map_err(|r| err(&r))?)
            } else if let Some((key, values)) = split_set(part, " notin ") {
                Requirement::NotIn(
                    key_of(key).map_err(|r| err(&r))?,
                    values.map_err(|r| err(&r))?,
                )
            } else if let Some((key, values)) = split_set(part, " in ") {
                Requirement::In(
                    key_of(key).map_err(|r| err(&r))?,
                    values.map_err(|r| err(&r))?,
                )
            } else if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(
                    key_of(key).map_err(|r| err(&r))?,
                    value_of(value).map_err(|r| err(&r))?,
                )
            } else if let Some((key, value)) =
                part.split_once("==").or_else(|| part.split_once('='))
            {
                Requirement::Equals(
                    key_of(key).map_err(|r| err(&r))?,
                    value_of(value).map_err(|r| err(&r))?,
                )
            } else {
                Requirement::Exists(key_of(part).map_err(|r| err(&r))?)
            };
            requirements.push(requirement);
        }
        Ok(Self { requirements })
    }

    /// A structured selector (`matchLabels`, `matchExpressions`), as `metav1.LabelSelector`
    /// holds it. Refuses what the API server refuses: an unknown operator, `In`/`NotIn` without
    /// values, `Exists`/`DoesNotExist` with values.
    pub fn from_label_selector(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let shown = serde_json::to_string(selector).unwrap_or_default();
        let err = |reason: String| SelectorError {
            selector: shown.clone(),
            reason,
        };
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::Equals(
                key_of(key).map_err(&err)?,
                value_of(value).map_err(&err)?,
            ));
        }
        for expression in selector.match_expressions.iter().flatten() {
            let key = key_of(&expression.key).map_err(&err)?;
            let values = expression
                .values
                .iter()
                .flatten()
                .map(|v| value_of(v))
                .collect::<Result<Vec<_>, _>>()
                .map_err(&err)?;
            let operator = expression.operator.as_str();
            let requirement = match operator {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(err(format!("{key}: operator {operator} needs values")));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(err(format!("{key}: operator {operator} takes no values")));
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => {
                    return Err(err(format!(
                        "{key}: unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)"
                    )));
                }
            };
            requirements.push(requirement);
        }
        Ok(Self { requirements })
    }

    /// The structured form, for a resource's spec: equalities as `matchLabels`, the rest as
    /// `matchExpressions` (`key!=value` is `NotIn [value]`, which also holds without the key).
    pub fn to_label_selector(&self) -> LabelSelector {
        let mut labels = BTreeMap::new();
        let mut expressions = Vec::new();
        let expression =
            |key: &str, operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
                key: key.to_owned(),
                operator: operator.to_owned(),
                values,
            };
        for requirement in &self.requirements {
            match requirement {
                Requirement::Equals(k, v) => {
                    labels.insert(k.clone(), v.clone());
                }
                Requirement::NotEquals(k, v) => {
                    expressions.push(expression(k, "NotIn", Some(vec![v.clone()])));
                }
                Requirement::In(k, vs) => expressions.push(expression(k, "In", Some(vs.clone()))),
                Requirement::NotIn(k, vs) => {
                    expressions.push(expression(k, "NotIn", Some(vs.clone())));
                }
                Requirement::Exists(k) => expressions.push(expression(k, "Exists", None)),
                Requirement::DoesNotExist(k) => {
                    expressions.push(expression(k, "DoesNotExist", None));
                }
            }
        }
        LabelSelector {
            match_labels: (!labels.is_empty()).then_some(labels),
            match_expressions: (!expressions.is_empty()).then_some(expressions),
        }
    }

    /// Whether the selector has no requirement (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// Whether the labels that `label` looks up satisfy every requirement: for label sets kept
    /// in another shape than a map of strings.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::DoesNotExist(k) => label(k).is_none(),
        })
    }

    /// Whether a JSON object's `metadata.labels` satisfy the selector.
    pub fn matches_object(&self, object: &serde_json::Value) -> bool {
        let labels = object["metadata"]["labels"].as_object();
        self.matches_with(|key| labels?.get(key)?.as_str())
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err("unbalanced ')'".into());
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn split_set<'a>(part: &'a str, op: &str) -> Option<(&'a str, Result<Vec<String>, String>)> {
    let (key, rest) = part.split_once(op)?;
    let rest = rest.trim();
    let values = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised list after {}", op.trim()))
        .and_then(|inner| inner.split(',').map(value_of).collect());
    Some((key, values))
}

fn key_of(key: &str) -> Result<String, String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if valid {
        Ok(key.to_owned())
    } else {
        Err(format!("invalid label key {key:?}"))
    }
}

fn value_of(value: &str) -> Result<String, String> {
    let value = value.trim();
    let valid = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if valid {
        Ok(value.to_owned())
    } else {
        Err(format!("invalid label value {value:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn empty_selector_should_match_everything() {
        assert!(Selector::parse("").unwrap().matches(&labels(&[])));
        assert!(
            Selector::parse("  ")
                .unwrap()
                .matches(&labels(&[("a", "b")]))
        );
    }

    #[test]
    fn equality_requirements_should_match_as_kubernetes_does() {
        let s = Selector::parse("app=web,tier!=db").unwrap();
        assert!(
            s.matches(&labels(&[("app", "web")])),
            "!= holds when the key is absent"
        );
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "api")])));
        assert!(
            Selector::parse("app==web")
                .unwrap()
                .matches(&labels(&[("app", "web")]))
        );
    }

    #[test]
    fn set_and_existence_requirements_should_match() {
        let s = Selector::parse("env in (prod, staging),track notin (canary),app,!legacy").unwrap();
        assert!(s.matches(&labels(&[("env", "prod"), ("app", "x")])));
        assert!(!s.matches(&labels(&[("env", "dev"), ("app", "x")])));
        assert!(!s.matches(&labels(&[
            ("env", "prod"),
            ("app", "x"),
            ("track", "canary")
        ])));
        assert!(!s.matches(&labels(&[("env", "prod")])), "app must exist");
        assert!(!s.matches(&labels(&[("env", "prod"), ("app", "x"), ("legacy", "")])));
    }

    #[test]
    fn malformed_selectors_should_be_rejected_with_the_cause() {
        for bad in ["app in prod", "a=(b", "=x", "a,,b", "app=we b"] {
            let err = Selector::parse(bad).expect_err(bad);
            assert_eq!(err.selector, bad);
            assert!(!err.reason.is_empty());
        }
    }

    fn structured(value: serde_json::Value) -> Result<Selector, SelectorError> {
        Selector::from_label_selector(&serde_json::from_value(value).unwrap())
    }

    #[test]
    fn structured_selectors_should_match_like_their_text_form() {
        let s = structured(serde_json::json!({
            "matchLabels": {"team": "a"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }))
        .unwrap();
        assert_eq!(
            s,
            Selector::parse("team=a,env in (prod,staging),!legacy").unwrap()
        );
        assert!(s.matches(&labels(&[("team", "a"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("team", "b"), ("env", "prod")])));
        let text = Selector::parse("team=a,tier!=db,env in (prod),x,!y").unwrap();
        let round = Selector::from_label_selector(&text.to_label_selector()).unwrap();
        for set in [
            &[("team", "a"), ("env", "prod"), ("x", "")][..],
            &[("team", "a"), ("tier", "db"), ("env", "prod"), ("x", "")],
        ] {
            assert_eq!(
                round.matches(&labels(set)),
                text.matches(&labels(set)),
                "{set:?}"
            );
        }
        let everything = structured(serde_json::json!({})).unwrap();
        assert!(everything.is_empty() && everything.matches(&labels(&[])));
    }

    #[test]
    fn structured_selectors_the_api_server_refuses_should_be_refused() {
        for (bad, says) in [
            (
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
                "needs values",
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "no values",
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
                "unknown operator",
            ),
            (
                serde_json::json!({"matchLabels": {"a": "not a value"}}),
                "invalid label value",
            ),
        ] {
            let error = structured(bad.clone()).expect_err(&bad.to_string());
            assert!(error.to_string().contains(says), "{bad}: {error}");
        }
    }
}
