//! The chart's Grafana dashboard and PrometheusRule against the metrics a running host exports:
//! a panel or an alert on a metric the host does not export shows nothing and never fires, so a
//! renamed metric must fail here rather than in a team's on-call rotation.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::chart::{objects, template};
use common::{World, synced};
use serde_json::Value;

/// `helm template` with the dashboard and the rules on.
fn rendered(sets: &[&str]) -> Vec<Value> {
    let mut all = vec!["dashboards.enabled=true", "prometheusRule.enabled=true"];
    all.extend_from_slice(sets);
    objects(&template("rh", "monitoring", &all).unwrap_or_else(|e| panic!("{e}")))
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

#[test]
fn dashboards_and_alerts_should_be_off_by_default_and_follow_their_values() {
    let default = objects(&template("rh", "monitoring", &[]).unwrap());
    assert!(of_kind(&default, "PrometheusRule").is_empty());
    assert!(
        !default
            .iter()
            .any(|o| o["metadata"]["labels"]["grafana_dashboard"].is_string()),
        "no dashboard unless asked for"
    );

    let on = rendered(&[]);
    let dashboards: Vec<_> = on
        .iter()
        .filter(|o| o["kind"] == "ConfigMap" && o["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(
        dashboards.len(),
        1,
        "one ConfigMap with the sidecar's default label"
    );
    assert_eq!(
        of_kind(&on, "ServiceMonitor").len(),
        0,
        "still its own value"
    );

    let tuned = rendered(&[
        "dashboards.label=grafana_dashboard_reconhost",
        "dashboards.labelValue=ops",
        "dashboards.namespace=grafana",
        "serviceMonitor.enabled=true",
        "prometheusRule.alerts.traps.enabled=false",
        "prometheusRule.alerts.workQueueSlow.p99Seconds=2",
        "prometheusRule.selector=service=\"reconhost\"",
    ]);
    let dashboard = tuned
        .iter()
        .find(|o| o["metadata"]["labels"]["grafana_dashboard_reconhost"] == "ops")
        .expect("the dashboard under the configured label");
    assert_eq!(dashboard["metadata"]["namespace"], "grafana");
    assert_eq!(of_kind(&tuned, "ServiceMonitor").len(), 1);
    let alerts = alerts(&tuned);
    assert!(!alerts.contains_key("ReconhostPluginTrapping"));
    let queue = &alerts["ReconhostWorkQueueSlow"];
    assert!(
        queue.ends_with("> 2") && queue.contains(r#"{service="reconhost"}"#),
        "{queue}"
    );
}

#[test]
fn metric_names_should_skip_functions_labels_and_durations() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (name, le) (rate(workqueue_queue_duration_seconds_bucket{name=~"$controller", job="x"}[$__rate_interval]))) > 1e-3 and on (name) up offset 5m"#,
    );
    assert_eq!(
        names,
        BTreeSet::from([
            "up".to_owned(),
            "workqueue_queue_duration_seconds_bucket".to_owned()
        ])
    );
    assert_eq!(
        variable_metric("label_values(controller_runtime_reconcile_total{a=\"b\"}, controller)"),
        BTreeSet::from(["controller_runtime_reconcile_total".to_owned()])
    );
}

#[tokio::test]
async fn dashboards_and_alerts_should_name_only_metrics_the_host_exports() {
    let on = rendered(&[]);
    let dashboard = on
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("the dashboard ConfigMap");
    let json: Value = serde_json::from_str(
        dashboard["data"]["reconhost.json"]
            .as_str()
            .expect("the dashboard's JSON"),
    )
    .expect("the dashboard is JSON");
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut exprs = Vec::new();
    collect_exprs(&json, "dashboard", &mut exprs);
    for (place, expr, variable) in &exprs {
        let names = if *variable {
            variable_metric(expr)
        } else {
            metric_names(expr)
        };
        for name in names {
            used.entry(name).or_default().push(place.clone());
        }
    }
    let alerts = alerts(&on);
    for (alert, expr) in &alerts {
        for name in metric_names(expr) {
            used.entry(name).or_default().push(format!("alert {alert}"));
        }
    }
    // What the issue asks the dashboard and the alerts to show: an extraction that found
    // nothing would pass the comparison below.
    for name in [
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "workqueue_depth",
        "workqueue_queue_duration_seconds_bucket",
        "rest_client_requests_total",
        "reconhost_plugin_call_seconds_bucket",
        "reconhost_plugin_errors_total",
        "reconhost_plugin_memory_peak_bytes",
        "reconhost_contested_children",
        "reconhost_controller_fights_total",
        "reconhost_plugins",
        "reconhost_time_to_converge_seconds_bucket",
        "reconhost_finalize_timeouts_total",
    ] {
        assert!(used.contains_key(name), "nothing shows {name}: {used:?}");
    }
    for alert in [
        "ReconhostWorkQueueSlow",
        "ReconhostTimeToConvergeSlow",
        "ReconhostPluginTrapping",
        "ReconhostPluginNotReady",
        "ReconhostFinalizeTimeout",
    ] {
        assert!(alerts.contains_key(alert), "{alert} missing: {alerts:?}");
    }

    // A host reconciling a parent, so every family it has has its series.
    let world = World::new("monitoring").await;
    let host = world.host(&["webapp"], &[]).await;
    world.create_webapp("web", "nginx:1.27", 1).await;
    synced(&world.webapps(), "web").await;
    let metrics = host.metrics().await.expect("the host's metrics");
    let exported = exported_names(&metrics);
    let missing: Vec<String> = used
        .iter()
        .filter(|(name, _)| !exported.contains(*name))
        .map(|(name, places)| format!("{name} (used by {})", places.join(", ")))
        .collect();
    assert!(
        missing.is_empty(),
        "the chart's dashboard or rules name metrics the host does not export:\n  {}\nthe host exports: {exported:?}",
        missing.join("\n  ")
    );
}

/// The alerts of the rendered PrometheusRule, by name: their expressions.
fn alerts(objects: &[Value]) -> BTreeMap<String, String> {
    let rules = of_kind(objects, "PrometheusRule");
    assert_eq!(rules.len(), 1, "one PrometheusRule");
    rules[0]["spec"]["groups"]
        .as_array()
        .expect("rule groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            (
                r["alert"].as_str().expect("an alert name").to_owned(),
                r["expr"].as_str().expect("an expression").to_owned(),
            )
        })
        .collect()
}

/// Every PromQL expression of a Grafana dashboard: the panels' `expr`s and the template
/// variables' queries (`true`: a variable's `label_values(...)`).
fn collect_exprs(value: &Value, place: &str, out: &mut Vec<(String, String, bool)>) {
    match value {
        Value::Object(map) => {
            let here = map
                .get("title")
                .or_else(|| map.get("name"))
                .and_then(Value::as_str)
                .map_or_else(|| place.to_owned(), |t| format!("panel {t:?}"));
            if let Some(expr) = map.get("expr").and_then(Value::as_str) {
                out.push((here.clone(), expr.to_owned(), false));
            }
            if map.get("type").and_then(Value::as_str) == Some("query") {
                let query = &map["query"];
                let query = query["query"].as_str().or_else(|| query.as_str());
                if let Some(query) = query {
                    out.push((here.clone(), query.to_owned(), true));
                }
            }
            for v in map.values() {
                collect_exprs(v, &here, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, place, out)),
        _ => {}
    }
}

/// The metric of a Grafana variable query: `label_values(metric{...}, label)` or an expression.
fn variable_metric(query: &str) -> BTreeSet<String> {
    match query.trim().strip_prefix("label_values(") {
        Some(args) => match args.rsplit_once(',') {
            Some((metric, _label)) => metric_names(metric),
            None => BTreeSet::new(),
        },
        None => metric_names(query),
    }
}

/// PromQL keywords that read like metric names, and the aggregation operators, which may be
/// followed by `by (...)` rather than by their parentheses.
const KEYWORDS: [&str; 22] = [
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "atan2",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Keywords followed by a list of label names, not of expressions.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: identifiers that are not functions, keywords,
/// label names (in `{...}`, `by (...)` and the like), durations or Grafana variables.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Skips to the character after the one closing the bracket opened at `i`.
    let close = |mut i: usize, open: char, shut: char| {
        let mut depth = 0;
        while i < chars.len() {
            match chars[i] {
                c if c == open => depth += 1,
                c if c == shut => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                '"' | '\'' | '`' => {
                    let quote = chars[i];
                    i += 1;
                    while i < chars.len() && chars[i] != quote {
                        i += usize::from(chars[i] == '\\') + 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = close(i, '{', '}');
        } else if c == '[' {
            i = close(i, '[', ']');
        } else if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += usize::from(chars[i] == '\\') + 1;
            }
            i += 1;
        } else if c.is_ascii_digit() || c == '.' || c == '$' {
            // A number (1e-3, 0x1f) or a Grafana variable: not a name.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "._-".contains(chars[i]))
            {
                // `-` only inside an exponent.
                if chars[i] == '-' && !matches!(chars[i - 1], 'e' | 'E') {
                    break;
                }
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let call = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) {
                if call {
                    i = close(next, '(', ')');
                }
            } else if !call && !KEYWORDS.contains(&word.as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The sample names a host's `/metrics` answers with, and those of every family it declares
/// (a `# TYPE` line: a counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`).
/// prometheus-client declares a family only once it has a series, so a metric that appears
/// only once something happens must be created at 0 up front.
fn exported_names(metrics: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in metrics.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let mut parts = declared.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["_sum", "_count", ""],
                _ => &[""],
            };
            for suffix in suffixes {
                names.insert(format!("{name}{suffix}"));
            }
        } else if !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            if end > 0 {
                names.insert(line[..end].to_owned());
            }
        }
    }
    names
}
