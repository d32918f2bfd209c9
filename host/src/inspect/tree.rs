//! `reconhost trace` for people: the parent, what served it and how it went, its children as a
//! tree, then its events. Every message is printed whole, on as many lines as it takes.

use std::fmt::Write as _;

use super::gather::{ConditionLine, Node, Traced};
use crate::model::record::Outcome;

/// The tree for `traced`.
pub fn render(traced: &Traced) -> String {
    let mut out = String::new();
    let parent = &traced.parent;
    let _ = writeln!(out, "{}{}", title(parent), summary(&parent.conditions));
    let mut lines: Vec<(String, String)> = Vec::new();
    if let Some(plugin) = &traced.plugin {
        let mut said = format!("ReconcilePlugin {}", plugin.reconcile_plugin);
        if plugin.suspended {
            said.push_str(" (suspended)");
        }
        if let Some(ready) = &plugin.ready {
            let _ = write!(said, ", Ready {ready}");
        }
        lines.push(("plugin".into(), said));
    }
    match &traced.last_reconcile {
        Some(last) => {
            lines.push((
                "served by".into(),
                format!("{} {} ({})", last.plugin, last.version, last.digest),
            ));
            lines.push((
                "last".into(),
                format!(
                    "{} at generation {}: {}",
                    last.time,
                    last.generation,
                    match &last.outcome {
                        Outcome::Failed(_) => "failed".to_owned(),
                        other => other.summary(),
                    }
                ),
            ));
            if let Outcome::Failed(failure) = &last.outcome {
                let cause = if failure.cause.is_empty() {
                    failure.reason.clone()
                } else {
                    format!("{} ({})", failure.reason, failure.cause)
                };
                lines.push(("error".into(), format!("{cause}: {}", failure.message)));
            }
            if let Some(trace) = &last.trace_id {
                lines.push(("trace".into(), trace.clone()));
            }
        }
        None => lines.push(("last".into(), "no reconcile recorded".into())),
    }
    if let (Some(generation), Some(observed)) = (parent.generation, parent.observed_generation)
        && generation != observed
    {
        lines.push((
            "generation".into(),
            format!("{generation}, status observed {observed}"),
        ));
    }
    // What it read in the reconcile recorded; else the kinds the plugin may read.
    match traced.last_reconcile.as_ref().map(|l| &l.reads) {
        Some(reads) if !reads.is_empty() => {
            lines.extend(reads.iter().map(|r| ("reads".into(), r.clone())));
        }
        _ if !traced.reads.is_empty() => {
            lines.push(("may read".into(), traced.reads.join(", ")));
        }
        _ => {}
    }
    let last_child = traced.children.len();
    let rail = if last_child > 0 { "│" } else { " " };
    for (label, text) in &lines {
        push_wrapped(&mut out, &format!("{rail} {label:<10} "), text);
    }
    conditions(&mut out, &format!("{rail} "), &parent.conditions);
    for (i, child) in traced.children.iter().enumerate() {
        let (branch, below) = if i + 1 == last_child {
            ("└─", "  ")
        } else {
            ("├─", "│ ")
        };
        let _ = writeln!(
            out,
            "{branch} {}{}",
            title(child),
            summary(&child.conditions)
        );
        if let Some(at) = &child.applied_at {
            push_wrapped(&mut out, &format!("{below}   {:<10} ", "applied"), at);
        }
        conditions(&mut out, &format!("{below}   "), &child.conditions);
    }
    if traced.events.is_empty() {
        out.push_str("events: none\n");
    } else {
        out.push_str("events:\n");
        for e in &traced.events {
            let count = if e.count > 1 {
                format!(" (x{})", e.count)
            } else {
                String::new()
            };
            push_wrapped(
                &mut out,
                "  ",
                &format!("{} {} {}{count}: {}", e.time, e.type_, e.reason, e.note),
            );
        }
    }
    out
}

/// `Kind namespace/name`, marked when it is being deleted.
fn title(node: &Node) -> String {
    let place = if node.namespace.is_empty() {
        node.name.clone()
    } else {
        format!("{}/{}", node.namespace, node.name)
    };
    let deleting = if node.deleting { " (deleting)" } else { "" };
    format!("{} {place}{deleting}", node.kind)
}

/// `  Ready=True Synced=False`, or nothing without conditions.
fn summary(conditions: &[ConditionLine]) -> String {
    conditions
        .iter()
        .map(|c| format!("  {}={}", c.type_, c.status))
        .collect()
}

/// Each condition with reason and message, whole.
fn conditions(out: &mut String, indent: &str, conditions: &[ConditionLine]) {
    for c in conditions {
        let mut text = format!("{} {}", c.status, c.reason);
        if !c.message.is_empty() {
            let _ = write!(text, ": {}", c.message);
        }
        if !c.last_transition_time.is_empty() {
            let _ = write!(text, " (since {})", c.last_transition_time);
        }
        push_wrapped(out, &format!("{indent}{:<10} ", c.type_), &text);
    }
}

/// `text` after `head`, its own lines (a message may hold newlines) indented under the first.
fn push_wrapped(out: &mut String, head: &str, text: &str) {
    let indent = " ".repeat(head.chars().count());
    for (i, line) in text.lines().enumerate() {
        let lead = if i == 0 { head } else { indent.as_str() };
        let _ = writeln!(out, "{lead}{line}");
    }
    if text.is_empty() {
        let _ = writeln!(out, "{}", head.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::record::{Failure, LastReconcile};

    fn node(kind: &str, name: &str, conditions: Vec<ConditionLine>) -> Node {
        Node {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: "default".into(),
            name: name.into(),
            generation: Some(2),
            observed_generation: Some(2),
            deleting: false,
            conditions,
            applied_at: None,
        }
    }

    #[test]
    fn messages_should_be_printed_whole() {
        let long = "x".repeat(300);
        let traced = Traced {
            parent: node(
                "WebApp",
                "shop",
                vec![ConditionLine {
                    type_: "Synced".into(),
                    status: "False".into(),
                    reason: "ReconcileError".into(),
                    message: long.clone(),
                    last_transition_time: String::new(),
                }],
            ),
            plugin: None,
            last_reconcile: Some(LastReconcile {
                plugin: "webapp".into(),
                version: "0.1.0".into(),
                digest: "sha256:ab".into(),
                generation: 2,
                time: "2026-01-01T00:00:00Z".into(),
                outcome: Outcome::Failed(Failure {
                    reason: "ReconcileError".into(),
                    cause: "permanent".into(),
                    message: long.clone(),
                }),
                reads: vec!["get v1/ConfigMap default/overrides".into()],
                trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            }),
            children: vec![node("Deployment", "shop", Vec::new())],
            reads: vec!["v1/ConfigMap".into()],
            events: Vec::new(),
        };
        let text = render(&traced);
        assert!(
            text.starts_with("WebApp default/shop  Synced=False\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("error      ReconcileError (permanent): {long}")),
            "{text}"
        );
        assert!(
            text.contains(&format!("Synced     False ReconcileError: {long}")),
            "{text}"
        );
        assert!(
            text.contains("trace      4bf92f3577b34da6a3ce929d0e0e4736"),
            "{text}"
        );
        assert!(text.contains("└─ Deployment default/shop\n"), "{text}");
        assert!(
            text.contains("reads      get v1/ConfigMap default/overrides\n"),
            "{text}"
        );
    }
}
